"""Translating text line by line: a file or stdin to a file or stdout, or a terminal session.

The output is strictly line-aligned with the input: empty and blank lines give empty
lines, and so does a line that is not valid UTF-8 (it is not decoded with replacement
characters, which would hide a wrongly encoded file). With `nbest` N > 1 every input line
gives N lines `LINE<TAB>SCORE<TAB>TEXT`. Lines that were not valid UTF-8, or were cut to
the longest source the model reads, are counted and named on stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NamedTuple

from seq2seq.data.corpus import raw_lines, read_lines
from seq2seq.decode.inputs import check_constraints, check_prefixes
from seq2seq.decode.line_translator import LineTranslator, Translation
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text

INVALID_UTF8 = ("not valid UTF-8", "translated as empty; re-encode the input as UTF-8")
UNCONSTRAINED = (
    "translated unconstrained, as no hypothesis held the phrases",
    "a larger --beam, or fewer or shorter phrases, may place them",
)


def decode_source_line(raw: bytes) -> str | None:
    """A line of input without its line ending, or None when it is not valid UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_source_lines(path: Path) -> tuple[list[str], list[int]]:
    """The lines of a file to translate, and the numbers (from 1) of those that are not
    valid UTF-8: they read as empty lines, so that the output stays line-aligned."""
    lines, invalid = [], []
    for number, raw in enumerate(raw_lines(path), start=1):
        line = decode_source_line(raw)
        if line is None:
            invalid.append(number)
        lines.append(line or "")
    return lines, invalid


def write_records(
    translator: LineTranslator, records: RecordFiles, best: list[tuple[str, Translation | None]]
) -> None:
    """Each record file asked for, a line per (input line, its best translation or None)."""
    if records.alignments is not None:
        head = records.alignment_head
        pairs = [translator.alignment(line, t, head) if t else "" for line, t in best]
        atomic_write_text(records.alignments, "".join(p + "\n" for p in pairs))
    for path, record in (
        (records.attention, translator.attention_record),
        (
            records.token_scores,
            lambda _, t: translator.token_score_record(t.tokens, t.token_scores),
        ),
    ):
        if path is not None:
            rows = [record(line, t) if t else None for line, t in best]
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def read_constraints(path: Path | None) -> list[list[str]] | None:
    """Each line's phrases from a constraint file: tab-separated, an empty line for none
    (blank fields are left out)."""
    if path is None:
        return None
    return [[p for p in line.split("\t") if p.strip()] for line in read_lines(path)]


def format_output(index: int, found: list[Translation], nbest: int) -> str:
    """The output of one input line: its translation, or with `nbest` N > 1, always N lines
    `LINE<TAB>SCORE<TAB>TEXT` (a blank line gives N empty hypotheses of score 0)."""
    if nbest == 1:
        return (found[0].text if found else "") + "\n"
    rows = [(t.score, t.text) for t in found] or [(0.0, "")] * nbest
    rows += [(float("-inf"), "")] * (nbest - len(rows))  # fewer exist than asked for
    return "".join(f"{index}\t{score:.4f}\t{text}\n" for score, text in rows)


def note_lines(numbers: list[int], problem: str, outcome: str) -> None:
    """Tell stderr how many input lines had `problem`, which (from 1; the first few), and
    what was done."""
    if not numbers:
        return
    shown = ", ".join(map(str, numbers[:5])) + (", ..." if len(numbers) > 5 else "")
    count = "1 input line is" if len(numbers) == 1 else f"{len(numbers)} input lines are"
    lines = "line" if len(numbers) == 1 else "lines"
    print(f"seq2seq: {count} {problem} ({lines} {shown}); {outcome}", file=sys.stderr)


def _cut(translator: LineTranslator) -> tuple[str, str]:
    limit = translator.max_source
    return f"longer than {limit} pieces", f"cut to {limit} pieces; split long lines"


def translate_interactively(translator: LineTranslator, nbest: int) -> None:
    """A terminal session: one line in from stdin, its translation out at once."""
    print("seq2seq: type a sentence and press Enter; Ctrl-D ends", file=sys.stderr)
    # Bytes, not text: one invalid byte must cost its line only, not the session.
    for index, raw in enumerate(sys.stdin.buffer):
        line = decode_source_line(raw.removesuffix(b"\n").removesuffix(b"\r"))
        found = translator.hypotheses([line or ""], nbest=nbest, attention=False)[0]
        note_lines([index + 1] if line is None else [], *INVALID_UTF8)
        note_lines([index + 1] if found and found[0].truncated else [], *_cut(translator))
        print(format_output(index, found, nbest), end="", flush=True)


class RecordFiles(NamedTuple):
    """What `translate_file` writes beside the translations, for each input line's best
    (None: not asked for)."""

    alignments: Path | None = None  # Pharaoh word alignments, a line each
    attention: Path | None = None  # its attention weights and pieces, JSON lines
    token_scores: Path | None = None  # its pieces and their log-probabilities, JSON lines
    alignment_head: int | None = None  # the head alignments read (None: the heads' mean)

    def check(self) -> None:
        """One line for a choice that would do nothing."""
        if self.alignment_head is not None and self.alignments is None:
            raise UserError(
                "--alignment-head chooses the head that --alignments reads; pass --alignments "
                "FILE too"
            )


NO_RECORDS = RecordFiles()


def translate_file(
    translator: LineTranslator,
    source: Path,
    output: Path | None,
    nbest: int = 1,
    records: RecordFiles = NO_RECORDS,
    guides: tuple[Path | None, Path | None] = (None, None),
) -> None:
    """Translate every line of `source` into `output` (None: stdout), each from its line of
    the prefix file and holding the phrases of its line of the constraint file (`guides`),
    if given, and write the `records` asked for."""
    records.check()
    lines, invalid = read_source_lines(source)
    prefix_file, constraint_file = guides
    prefixes = None if prefix_file is None else read_lines(prefix_file)
    check_prefixes(prefixes, len(lines), prefix_file)  # before any work
    constraints = read_constraints(constraint_file)
    check_constraints(constraints, len(lines), constraint_file)
    weighted = records.alignments is not None or records.attention is not None
    found = translator.hypotheses(
        lines,
        nbest=nbest,
        progress=True,
        attention=weighted,
        prefixes=prefixes,
        constraints=constraints,
        token_scores=records.token_scores is not None,
    )
    text = "".join(format_output(i, hyps, nbest) for i, hyps in enumerate(found))
    best = list(zip(lines, [hyps[0] if hyps else None for hyps in found], strict=True))
    write_records(translator, records, best)
    if output is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(output, text)
    note_lines(invalid, *INVALID_UTF8)
    truncated = [i + 1 for i, hyps in enumerate(found) if hyps and hyps[0].truncated]
    note_lines(truncated, *_cut(translator))
    free = [i + 1 for i, hyps in enumerate(found) if hyps and hyps[0].unconstrained]
    note_lines(free, *UNCONSTRAINED)
