"""How diverse a run's n-best lists are with plain and with diverse beam search
(docs/decoding.md, "Diverse n-best lists"): for each setting, the n-best list of every
source line, and

- 1-best BLEU: the corpus BLEU of the first hypotheses;
- oracle BLEU: the corpus BLEU of the hypothesis of each list closest to the reference
  (by sentence BLEU): how good the list's best choice could be;
- distinct: the mean number of different texts in a list;
- pairwise BLEU: the mean sentence BLEU of every ordered pair of a list's hypotheses (Shen
  et al., 2019): 100 for a list of one text repeated, lower for more diverse lists;
- seconds: the wall time of the search (meaningful only on an otherwise idle machine).

    python scripts/diverse_nbest.py --run RUN --src test.de --ref test.en --beam 8 \\
        --setting 1:0 --setting 4:0.5 --setting 4:2 --setting 8:2

A setting is GROUPS:LAMBDA (`decode.beam_groups`, `decode.group_diversity`; 1:0 is plain
beam search). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from itertools import permutations

import sacrebleu

from seq2seq.data.corpus import read_lines
from seq2seq.decode.translate import Translator


def measure(lists: list[list[str]], references: list[str]) -> dict[str, float]:
    """The list statistics of the module's docstring (all but the time)."""
    bleu = sacrebleu.metrics.BLEU(effective_order=True)
    oracle = [
        max(texts, key=lambda text: bleu.sentence_score(text, [ref]).score) if texts else ""
        for texts, ref in zip(lists, references, strict=True)
    ]
    pairwise = [
        statistics.fmean(bleu.sentence_score(a, [b]).score for a, b in permutations(texts, 2))
        for texts in lists
        if len(texts) > 1
    ]
    first = [texts[0] if texts else "" for texts in lists]
    return {
        "1-best BLEU": sacrebleu.corpus_bleu(first, [references]).score,
        "oracle BLEU": sacrebleu.corpus_bleu(oracle, [references]).score,
        "distinct": statistics.fmean(len(set(texts)) for texts in lists),
        "pairwise BLEU": statistics.fmean(pairwise),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a run directory")
    parser.add_argument("--checkpoint", default="best", help="best, last, step-N")
    parser.add_argument("--src", required=True, help="source lines")
    parser.add_argument("--ref", required=True, help="their reference translations")
    parser.add_argument("--beam", type=int, default=8, help="beam, and the n-best's length")
    parser.add_argument("--setting", action="append", required=True, help="GROUPS:LAMBDA")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    sources, references = read_lines(args.src), read_lines(args.ref)
    print("| groups | lambda | 1-best BLEU | oracle BLEU | distinct | pairwise BLEU | seconds |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for setting in args.setting:
        groups, diversity = setting.split(":")
        options = {"beam": args.beam, "beam_groups": int(groups)}
        if int(groups) > 1:
            options["group_diversity"] = float(diversity)
        translator = Translator.load(args.run, args.checkpoint, threads=args.threads, **options)
        start = time.perf_counter()
        found = translator.hypotheses(sources, nbest=args.beam, attention=False)
        seconds = time.perf_counter() - start
        lists = [[hypothesis.text for hypothesis in hypotheses] for hypotheses in found]
        row = measure(lists, references)
        cells = " | ".join(f"{value:.2f}" for value in row.values())
        print(f"| {groups} | {diversity} | {cells} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
