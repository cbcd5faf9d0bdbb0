"""Data: parallel corpora (corpus), SentencePiece tokenizers (tokenizer), token-budget
batches (batching) and the built-in toy task (toy).

Import from the submodules; this package imports nothing so that light users (the toy
data script) do not pay for torch and sentencepiece.
"""
