"""seq2seq: config-driven neural machine translation with every attention type.

The Python API is `Translator` (see docs/python-api.md); it is imported on first use, so
that `import seq2seq.config` and the command line stay quick to start.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from seq2seq.decode.translate import Translation, Translator

__version__ = version("seq2seq")
__all__ = ["Translation", "Translator", "__version__"]


def __getattr__(name: str) -> object:
    if name in ("Translator", "Translation"):
        from seq2seq.decode import translate

        return getattr(translate, name)
    raise AttributeError(f"module 'seq2seq' has no attribute {name!r}")
