"""What cleaning a corpus dropped, and why: the pairs each filter dropped (a pair counts
for the first that drops it, in the table's order), with the first few of each, for the
log, `report.json` and `seq2seq prepare --dry-run`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

EMPTY = "empty"  # a pair with a side without text: dropped as any corpus is read
EXAMPLES = 20  # dropped pairs shown per filter


@dataclass
class CleaningReport:
    corpus: str  # as messages name it
    filters: dict  # the settings it was cleaned with
    pairs: int = 0  # read, empty ones included
    dropped: dict[str, int] = field(default_factory=lambda: {EMPTY: 0})
    examples: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    @property
    def kept(self) -> int:
        return self.pairs - sum(self.dropped.values())

    def count(self, firsts: np.ndarray, src: list[str], tgt: list[str], names: list[str]) -> None:
        """Count a shard of pairs: `firsts[i]` is the number in `names` of the filter that
        dropped pair i (0: kept)."""
        self.pairs += len(firsts)
        for number in np.unique(firsts[firsts > 0]):
            name, dropped = names[number], np.flatnonzero(firsts == number)
            self.dropped[name] = self.dropped.get(name, 0) + len(dropped)
            shown = self.examples.setdefault(name, [])
            shown += [(src[i], tgt[i]) for i in dropped[: EXAMPLES - len(shown)]]

    def add_empty(self, count: int) -> None:
        self.pairs += count
        self.dropped[EMPTY] += count

    def to_dict(self) -> dict:
        return {
            "corpus": self.corpus,
            "summary": self.summary(),
            "filters": self.filters,
            "pairs": self.pairs,
            "kept": self.kept,
            "dropped": {name: n for name, n in self.dropped.items() if n},
            "examples": {
                name: [list(pair) for pair in pairs] for name, pairs in self.examples.items()
            },
        }

    def summary(self) -> str:
        """One line: how many were kept, and what each filter dropped."""
        dropped = ", ".join(f"{name} {n}" for name, n in self.dropped.items() if n) or "none"
        share = self.kept / self.pairs if self.pairs else 0.0
        kept = f"kept {self.kept} of {self.pairs} pairs ({share:.1%})"
        return f"{self.corpus}: {kept}; dropped: {dropped}"

    def table(self, shown: int = 3) -> str:
        """The counts as a table, with the first `shown` pairs each filter dropped."""
        rows = [self.summary(), f"  {'filter':<12} {'dropped':>9} {'share':>7}"]
        for name, count in self.dropped.items():
            share = count / self.pairs if self.pairs else 0.0
            rows.append(f"  {name:<12} {count:>9} {share:>7.2%}")
            rows += [
                f"      {src[:70]!r} | {tgt[:70]!r}"
                for src, tgt in self.examples.get(name, [])[:shown]
            ]
        return "\n".join(rows)
