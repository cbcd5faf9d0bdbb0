"""Corpus-level BLEU and chrF with their sacrebleu signatures."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sacrebleu.metrics import BLEU, CHRF

from seq2seq.errors import UserError


@dataclass(frozen=True)
class Scores:
    bleu: float
    chrf: float
    signature: str  # BLEU's sacrebleu signature
    chrf_signature: str

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  ({self.signature})"


def score_corpus(hypotheses: list[str], references: list[str]) -> Scores:
    """Score detokenized hypotheses against one detokenized reference each."""
    if len(hypotheses) != len(references):
        raise UserError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; "
            "give one reference line per source line"
        )
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return Scores(
        bleu=round(bleu_score.score, 2),
        chrf=round(chrf_score.score, 2),
        signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
    )
