"""`seq2seq import`: a Marian model made with `transformers` (random weights, SentencePiece
models trained on the toy corpus, its vocab.json), imported, computes the logits and the
greedy translations of `transformers`' model; what it cannot read is one line each."""

import json
import shutil

import pytest
import sentencepiece as spm
import torch
from cli_helpers import run_cli

from seq2seq.data.padded_batches import make_batch
from seq2seq.data.vocabulary import read_table
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError
from seq2seq.importing import import_marian
from seq2seq.train.loss import token_cross_entropy


def train_spm(lines: list[str], prefix) -> spm.SentencePieceProcessor:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=40,
        model_type="bpe", character_coverage=1.0, bos_id=-1, hard_vocab_limit=False,
    )  # fmt: skip
    return spm.SentencePieceProcessor(model_file=f"{prefix}.model")


def learn_the_toy_task(model, toy, models: dict, vocab: dict) -> None:
    """40 updates on the toy corpus: translations that end."""
    ids = {}
    for side, name in (("src", "source"), ("tgt", "target")):
        lines = (toy / f"data/train.{side}").read_text().splitlines()
        pieces = models[name].encode(lines, out_type=str)
        ids[side] = [[vocab.get(p, 1) for p in row] + [0] for row in pieces]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    pad, generator = vocab["<pad>"], torch.Generator().manual_seed(0)
    model.train()
    for _ in range(40):
        chosen = torch.randint(len(ids["src"]), (32,), generator=generator).tolist()
        src = torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(ids["src"][i]) for i in chosen], batch_first=True, padding_value=pad
        )
        labels = torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(ids["tgt"][i]) for i in chosen], batch_first=True, padding_value=-100
        )
        loss = model(input_ids=src, attention_mask=(src != pad).long(), labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


@pytest.fixture(scope="module")
def marian(toy, tmp_path_factory):
    """A Marian model as OPUS-MT ships one, and its transformers model."""
    # imported here, not with the module: every test worker collects this file
    transformers = pytest.importorskip(
        "transformers", reason="transformers (the dev extra) builds the Marian model"
    )
    root = tmp_path_factory.mktemp("marian")
    models = {}
    for side, name in (("src", "source"), ("tgt", "target")):
        lines = (toy / f"data/train.{side}").read_text().splitlines()
        models[name] = train_spm(lines, root / name)
    pieces = dict.fromkeys(
        model.id_to_piece(i)
        for model in models.values()
        for i in range(model.get_piece_size())
        if not (model.is_control(i) or model.is_unknown(i))
    )
    vocab = {"</s>": 0, "<unk>": 1} | {piece: n + 2 for n, piece in enumerate(pieces)}
    vocab["<pad>"] = len(vocab)
    config = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_position_embeddings=128, pad_token_id=vocab["<pad>"],
        eos_token_id=0, decoder_start_token_id=vocab["<pad>"], dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config)
    with torch.no_grad():
        model.final_logits_bias.normal_(std=0.5)  # a bias to carry over
    learn_the_toy_task(model, toy, models, vocab)
    directory = root / "opus-mt-src-tgt"
    model.save_pretrained(directory)
    for name in models:
        shutil.copyfile(root / f"{name}.model", directory / f"{name}.spm")
    (directory / "vocab.json").write_text(json.dumps(vocab))
    return directory, model, vocab


@pytest.fixture(scope="module")
def imported(marian, tmp_path_factory):
    run = tmp_path_factory.mktemp("imported") / "run"
    assert (
        run_cli("import", "--from", marian[0], "--run-dir", run, "--src", "src", "--tgt", "tgt")
        == 0
    )
    return run


def test_the_logits_are_transformers_logits(marian, imported, toy):
    _, theirs, vocab = marian
    translator = Translator.load(imported, device="cpu")  # transformers' model is there
    pieces = json.loads((imported / "tokenizer/vocab.json").read_text())
    marian_id = torch.tensor([vocab.get(p, vocab["<pad>"]) for p in pieces])  # <s>: <pad>
    lines = (toy / "data/test.src").read_text().splitlines()[:4]
    refs = (toy / "data/test.tgt").read_text().splitlines()[:4]
    tok = translator.tokenizer
    batch = make_batch(tok.encode_src(lines), tok.encode_tgt(refs), list(range(4)))
    with torch.no_grad():
        ours = translator.model(batch.src, batch.src_mask, batch.tgt_in)
        found = theirs(
            input_ids=marian_id[batch.src], attention_mask=batch.src_mask[:, 0].long(),
            decoder_input_ids=marian_id[batch.tgt_in],
        ).logits  # fmt: skip
    kept = batch.tgt_out != 0  # positions past a target's end are padding
    words = torch.arange(len(pieces)) != 0
    words[2] = False  # <pad> and <s>: never written
    torch.testing.assert_close(
        ours[kept][:, words], found[kept][:, marian_id[words]], rtol=1e-5, atol=1e-5
    )
    # Fine-tuning it: half precision holds the two banned pieces' bias, and label
    # smoothing's mean over every piece (0.1 x their -log p / V a token) stays finite.
    assert torch.isfinite(translator.model.output.bias.half()).all()
    plain, smoothed = (token_cross_entropy(ours, batch.tgt_out, e) for e in (0.0, 0.1))
    assert (smoothed - plain) / kept.sum() < 0.1 * (2 * 1e4 / len(pieces) + 20)


@pytest.mark.parametrize("beam", [1, 4])
def test_translations_are_transformers_generate(marian, imported, toy, beam):
    """Greedy and beam search as `generate` searches (length penalty 1, Marian's default
    stopping rule: decode.stopping beam), where both end the translation."""
    _, theirs, vocab = marian
    lines = (toy / "data/test.src").read_text().splitlines()[:6]
    options = {"beam": beam, "max_len_ratio": 1, "max_len_offset": 60, "stopping": "beam"}
    translator = Translator.load(imported, device="cpu", **options)  # as `generate`
    ours = [h[0].tokens for h in translator.hypotheses(lines)]
    pieces = json.loads((imported / "tokenizer/vocab.json").read_text())
    marian_id = {piece: vocab[piece] for piece in pieces[4:]}
    for line, tokens in zip(lines, ours, strict=True):
        src = [marian_id.get(p, vocab["<unk>"]) for p in translator.tokenizer.src_pieces(line)]
        output = theirs.generate(
            torch.tensor([[*src, 0]]), num_beams=beam, do_sample=False, max_new_tokens=70,
            min_new_tokens=1, bad_words_ids=[[vocab["<pad>"]]], length_penalty=1.0,
        )[0, 1:].tolist()  # fmt: skip
        assert 0 in output  # it ended the translation, before any limit
        assert [marian_id[pieces[t]] for t in tokens] == output[: output.index(0)]


def test_what_import_cannot_read_is_one_line_each(marian, tmp_path):
    source = tmp_path / "copy"
    shutil.copytree(marian[0], source)
    (source / "target.spm").unlink()
    with pytest.raises(UserError, match="has no target.spm: not a Marian model"):
        import_marian(source, tmp_path / "a", "src", "tgt")
    shutil.copyfile(marian[0] / "target.spm", source / "target.spm")
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps(config | {"model_type": "bart"}))
    with pytest.raises(UserError, match="model_type 'bart': seq2seq import reads Marian"):
        import_marian(source, tmp_path / "b", "src", "tgt")
    for changed, error in [
        ({"activation_function": "tanh"}, "has the activation 'tanh', which seq2seq has no"),
        ({"tie_word_embeddings": False}, r"an output layer of its own \(tie_word_embeddings"),
        ({"decoder_start_token_id": 3}, "a decoder that starts from another token than <pad>"),
        ({"decoder_attention_heads": None}, "config.json has no 'decoder_attention_heads'"),
        ({"encoder_attention_heads": 3, "decoder_attention_heads": 3}, "none seq2seq builds"),
    ]:
        shown = config | changed
        shown = {k: v for k, v in shown.items() if v is not None}  # None: the key left out
        (source / "config.json").write_text(json.dumps(shown))
        with pytest.raises(UserError, match=error):
            import_marian(source, tmp_path / "c", "src", "tgt")
    (source / "config.json").write_text(json.dumps(config))
    vocab = json.loads((source / "vocab.json").read_text())
    del vocab[next(p for p in vocab if p not in ("</s>", "<unk>", "<pad>"))]
    (source / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(UserError, match="vocab.json does not number"):
        import_marian(source, tmp_path / "d", "src", "tgt")


def test_its_export_translates_as_ctranslate2_s_own_converter(marian, imported, toy, tmp_path):
    """Greedy: CTranslate2's converter starts the decoder from </s> (its config.json says
    so) where Marian starts from <pad>, so their beams part on this small model."""
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the export extra is not installed")
    from ctranslate2.converters import TransformersConverter

    from seq2seq.decode.ctranslate2_engine import CTranslate2Translator

    assert run_cli("export", "--run", imported, "--output", tmp_path / "ours") == 0
    TransformersConverter(str(marian[0])).convert(str(tmp_path / "theirs"))
    lines = (toy / "data/test.src").read_text().splitlines()
    ours = CTranslate2Translator.load(tmp_path / "ours", beam=1).translate(lines)
    source = spm.SentencePieceProcessor(model_file=str(marian[0] / "source.spm"))
    target = spm.SentencePieceProcessor(model_file=str(marian[0] / "target.spm"))
    pieces = [[*source.encode(line, out_type=str), "</s>"] for line in lines]
    found = ctranslate2.Translator(str(tmp_path / "theirs")).translate_batch(pieces, beam_size=1)
    assert ours == [target.decode_pieces(result.hypotheses[0]) for result in found]
    beam = CTranslate2Translator.load(tmp_path / "ours", beam=4).translate(lines)
    assert beam == Translator.load(imported, beam=4).translate(lines)


def test_a_vocabulary_that_disagrees_with_its_models_is_one_line(marian, tmp_path):
    source = tmp_path / "copy"
    shutil.copytree(marian[0], source)
    vocab = json.loads((source / "vocab.json").read_text())
    renamed = next(p for p in vocab if p not in ("</s>", "<unk>", "<pad>"))
    vocab[renamed + "x"] = vocab.pop(renamed)  # numbered as before, one piece not the model's
    (source / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(UserError, match=f"does not hold the piece '{renamed}' of the Senten"):
        import_marian(source, tmp_path / "run", "src", "tgt")
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_a_table_with_a_piece_twice_is_one_line(tmp_path):
    table = tmp_path / "vocab.json"
    table.write_text(json.dumps(["<pad>", "<unk>", "<s>", "</s>", "▁a", "b", "▁a"]))
    with pytest.raises(UserError, match="the piece '▁a' is in it twice; give each piece one id"):
        read_table(table)
