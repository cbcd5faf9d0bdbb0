"""The run's log (file and console), its TensorBoard events and its progress bar."""

from __future__ import annotations

import io
import logging
import sys
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from seq2seq.config import flatten

LOGGER_NAME = "seq2seq"
# `log.info(message, extra=FILE_ONLY)`: for the log file only, where the command prints the
# same line itself as it ends (a stop on a signal).
FILE_ONLY = {"file_only": True}


def duration_words(seconds: float) -> str:
    """`seconds` as a log line says it: "7 min", "2 h 05 min"."""
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


class _TqdmHandler(logging.StreamHandler):
    """Console lines that do not break an active progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never crash the run
            self.handleError(record)


class _FileHandler(logging.FileHandler):
    """The log file. A line that cannot be written (a full disk) is dropped without
    logging's own traceback: the checkpoint write that follows fails with one clear line."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        pass


def setup_logging(log_file: Path | None = None, rank: int = 0) -> logging.Logger:
    """The `seq2seq` logger: INFO to stderr and, when given, to `log_file` (appended).

    Under torchrun, ranks other than 0 only print warnings and errors, marked with the rank.
    """
    logger = logging.getLogger(LOGGER_NAME)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    logger.propagate = False
    console = _TqdmHandler()
    console.setFormatter(
        logging.Formatter("%(message)s" if rank == 0 else f"rank {rank}: %(message)s")
    )
    console.addFilter(lambda record: not getattr(record, "file_only", False))
    logger.addHandler(console)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        file_handler = _FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(file_handler)
    return logger


class TensorBoardLog:
    """TensorBoard scalars and figures; imported lazily because TensorBoard is slow to import.

    Without a directory (ranks other than 0) it writes nothing.
    """

    def __init__(self, directory: Path | None) -> None:
        self.writer = None
        self.attention_layout = False  # whether the Custom Scalars layout is written
        if directory is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(directory))

    def add(self, step: int, prefix: str, values: dict[str, float]) -> None:
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(f"{prefix}/{name}", value, step)

    def add_attention_diagnostics(self, step: int, sites: dict[str, dict]) -> None:
        """Each diagnostic of each attention site (see `attention.diagnostics`) as scalar
        `attention_NAME/SITE` and per head `attention_NAME/SITE/headH`: a section per
        diagnostic, and in Custom Scalars one chart of the sites and one of the heads."""
        if self.writer is None or not sites:
            return
        names: set[str] = set()
        for site, entry in sites.items():
            for name, value in entry["mean"].items():
                self.writer.add_scalar(f"attention_{name}/{site}", value, step)
                names.add(name)
            for name, values in entry.get("per_head", {}).items():
                for head, value in enumerate(values):
                    self.writer.add_scalar(f"attention_{name}/{site}/head{head}", value, step)
        if not self.attention_layout:
            self.attention_layout = True
            self.writer.add_custom_scalars(
                {
                    f"attention {name}": {
                        "sites": ["Multiline", [rf"^attention_{name}/[^/]+$"]],
                        "heads": ["Multiline", [rf"^attention_{name}/.+/head\d+$"]],
                    }
                    for name in sorted(names)
                }
            )

    def add_png(self, step: int, tag: str, png: bytes) -> None:
        """An image already drawn as PNG (drawing a figure again would cost as much)."""
        if self.writer is not None:
            from matplotlib.image import imread  # here: a second of every command's start

            pixels = imread(io.BytesIO(png), format="png")[..., :3]
            self.writer.add_image(tag, pixels, step, dataformats="HWC")

    def add_config(self, config: dict[str, Any], metrics: list[str]) -> None:
        """The resolved config as text, and its fields as hyperparameters of this run in
        the HParams view, next to the `metrics` (scalar tags) that judge it."""
        if self.writer is None:
            return
        from torch.utils.tensorboard.summary import hparams

        text = yaml.safe_dump(config, sort_keys=False)
        self.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)
        flat = {
            k: v if isinstance(v, int | float | str | bool) else str(v)
            for k, v in flatten(config).items()
        }
        writer = self.writer._get_file_writer()
        for summary in hparams(flat, dict.fromkeys(metrics, 0.0)):
            writer.add_summary(summary)

    def add_translations(
        self, step: int, sources: list[str], references: list[str], hypotheses: list[str]
    ) -> None:
        """A few validation translations as a table, to read how the model is doing."""
        if self.writer is None:
            return
        rows = ["| source | reference | translation |", "|---|---|---|"]
        for row in zip(sources, references, hypotheses, strict=False):
            rows.append("| " + " | ".join(text.replace("|", "\\|") for text in row) + " |")
        self.writer.add_text("valid/translations", "\n".join(rows), step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def progress_bar(initial: int, total: int | None, enabled: bool = True) -> tqdm:
    """A step counter with loss and tokens/s; silent when stderr is not a terminal."""
    return tqdm(
        initial=initial,
        total=total,
        unit="step",
        dynamic_ncols=True,
        disable=None if enabled else True,
    )
