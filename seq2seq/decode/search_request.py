"""What an engine searches: one typed request, the batch's sources and what to hold their
hypotheses to (`LineTranslator` makes it; the PyTorch model, an ensemble and CTranslate2
each implement `search(request)`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from seq2seq.config import DecodeConfig
from seq2seq.decode.search.prefix import Prefix


@dataclass(frozen=True)
class SearchRequest:
    """What an engine searches (`LineTranslator.search`): a batch of sources (piece ids,
    no EOS) searched with `options` for `nbest` hypotheses each; what to record of them
    (attention weights, each token's log-probability); what seeds each source's samples
    (`lines`, the sources' numbers in their input; None: 0, 1, ...); and what to hold them
    to: a prefix per source (None: none) and phrases per source (piece ids; []: none)."""

    sources: list[list[int]]
    options: DecodeConfig
    nbest: int = 1
    attention: bool = False
    token_scores: bool = False
    lines: list[int] | None = None
    prefixes: list[Prefix | None] | None = None
    constraints: list[list[list[int]]] | None = None

    def rows(self, chosen: list[int]) -> SearchRequest:
        """The same request of the sources numbered `chosen` alone."""
        columns = {n: getattr(self, n) for n in ("sources", "lines", "prefixes", "constraints")}
        chosen_rows = {
            name: None if column is None else [column[i] for i in chosen]
            for name, column in columns.items()
        }
        return replace(self, **chosen_rows)
