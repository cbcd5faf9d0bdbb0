"""seq2seq: config-driven neural machine translation with every attention type.

The Python API is `Translator` (see docs/python-api.md); it is imported on first use, so
that `import seq2seq.config` and the command line stay quick to start.

Python runs this file before any module of the package, so it is where the config schema
(floor 0) learns how to fill its tables of attention types, normalizers and positional encodings
(floor 1) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seq2seq.config.attention import ATTENTION_TYPES, NORMALIZERS
from seq2seq.config.model import POSITION_TYPES
from seq2seq.version import VERSION

if TYPE_CHECKING:
    from seq2seq.decode.translate import Translation, Translator

__version__ = VERSION  # "0+unknown" where the source tree is not installed


def _register_attention_types() -> None:
    import seq2seq.attention  # noqa: F401  (its classes register themselves)


ATTENTION_TYPES.load = NORMALIZERS.load = POSITION_TYPES.load = _register_attention_types
__all__ = ["Translation", "Translator", "__version__"]


def __getattr__(name: str) -> object:
    if name in ("Translator", "Translation"):
        from seq2seq.decode import translate

        return getattr(translate, name)
    raise AttributeError(f"module 'seq2seq' has no attribute {name!r}")
