"""Looking inside a trained model's attention: the diagnostics of `attention.diagnostics`
over the teacher-forced pass of sentence pairs, and their table for a terminal."""

from __future__ import annotations

import math

from seq2seq.attention.diagnostics import DIAGNOSTICS, measure_attention
from seq2seq.data.padded_batches import make_batch, token_batches
from seq2seq.decode.forced import TeacherForcing
from seq2seq.errors import UserError


def inspect_attention(
    translator: TeacherForcing, sources: list[str], references: list[str]
) -> dict:
    """{"pairs": N, "skipped": [line numbers], "sites": site -> diagnostics} of the
    translator's model on line-aligned sources and references. Pairs with a blank side are
    skipped and listed (1-based); sources are read as translation reads them (cut, after
    the tags of `decode.tgt_lang` and `decode.tag`)."""
    if isinstance(sources, str) or isinstance(references, str):
        raise TypeError("pass lists of lines; for one pair: [source], [reference]")
    if len(sources) != len(references):
        raise UserError(
            f"{len(sources)} source lines but {len(references)} reference lines; "
            "give line-aligned files of sentence pairs"
        )
    pairs = enumerate(zip(sources, references, strict=True))
    keep = [i for i, (source, reference) in pairs if source.strip() and reference.strip()]
    if not keep:
        raise UserError("no sentence pair to inspect: every pair has a blank side")
    src_ids = translator.source_ids([sources[i] for i in keep], translator.decode)[0]
    tgt_ids = translator.tokenizer.encode_tgt([references[i] for i in keep])
    groups = token_batches(
        [len(s) for s in src_ids],
        [len(t) for t in tgt_ids],
        translator.batch_tokens(translator.decode),
    )
    batches = (
        make_batch([src_ids[i] for i in g], [tgt_ids[i] for i in g], g).to(translator.device)
        for g in groups
    )
    skipped = sorted(set(range(len(sources))) - set(keep))
    return {
        "pairs": len(keep),
        "skipped": [i + 1 for i in skipped],
        "sites": measure_attention(translator.model, batches),
    }


def diagnostics_table(sites: dict[str, dict]) -> str:
    """A row per site (averaged over heads) and per head, a column per diagnostic; then the
    learned scales. '-' marks a diagnostic the type does not have."""
    headings = [d.heading for d in DIAGNOSTICS.values()]
    width = max(len(name) for name in sites) + 2
    lines = [f"{'site':<{width}}" + "".join(_column(h) for h in headings)]
    for name, entry in sites.items():
        lines.append(f"{name:<{width}}" + _cells(entry["mean"]))
        per_head = entry.get("per_head", {})
        for head in range(entry["heads"] if per_head else 0):
            values = {k: v[head] for k, v in per_head.items()}
            lines.append(f"{'  head ' + str(head):<{width}}" + _cells(values))
    scales = [
        f"{name}: " + ", ".join(f"{k} {_number(entry['mean'][k])}" for k in found)
        for name, entry in sites.items()
        if (found := [k for k in entry["mean"] if k not in DIAGNOSTICS])
    ]
    if scales:
        lines += ["", "learned scales", *scales]
    return "\n".join(lines)


def _cells(values: dict[str, float]) -> str:
    return "".join(
        _column(_number(values[name]) if name in values else "-") for name in DIAGNOSTICS
    )


def _column(text: str) -> str:
    """A cell right-aligned under its heading, a space before it even where the text (a
    number as 8.049e-05) fills the width, so that cells never run together."""
    return f" {text:>9}"


def _number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)
