"""The package's version, as `seq2seq --version`, meta.json and `serve`'s /info report it.

It comes from the installed package's metadata. A source tree imported without being
installed (put on PYTHONPATH on a cluster node or a GPU machine) has none: its version is
then NOT_INSTALLED rather than an import that fails.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

# A PEP 440 version (a local label on 0) that sorts below every release and says why.
NOT_INSTALLED = "0+unknown"


def installed_version() -> str:
    try:
        return version("seq2seq")
    except PackageNotFoundError:
        return NOT_INSTALLED


VERSION = installed_version()
