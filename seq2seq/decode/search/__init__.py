"""The search over the model step: its loop, its state and rules, and the strategies that
choose its candidates (greedy and beam search, sampling, diverse beam search, lexical
constraints)."""
