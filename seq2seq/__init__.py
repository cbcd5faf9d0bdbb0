"""seq2seq: config-driven neural machine translation with every attention type."""

__version__ = "0.1.0"
