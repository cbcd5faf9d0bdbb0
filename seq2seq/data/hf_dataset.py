"""A Hugging Face dataset as a corpus, read through the `datasets` library (the `hf`
extra): a directory written by `save_to_disk` (memory-mapped), parquet or arrow files (a
file, a directory of them or a glob; streamed), or a dataset on the hub (streamed).

A pair's texts are in the columns `columns` names, else in a `translation` column of
{language: text} objects (as the hub's translation datasets hold them), else in columns
named as the languages.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from seq2seq.config import DatasetCorpus
from seq2seq.data.corpus import PairChunk
from seq2seq.data.prepared_corpus import feed_file
from seq2seq.data.source import CorpusSource, Langs, pair_of
from seq2seq.errors import UserError

_SAVED = ("dataset_dict.json", "state.json")  # what save_to_disk writes, with a DatasetDict or not
_FILE_KINDS = {".parquet": "parquet", ".arrow": "arrow"}


class HuggingFaceDataset(CorpusSource):
    spec: DatasetCorpus

    @property
    def local(self) -> bool:
        """Whether the dataset is named by a path on this machine, not on the hub: one that
        is there, a glob, a parquet or arrow file, or one written as a path (/, ./, ../)."""
        name = self.spec.dataset
        written_as_path = name.startswith(("/", "./", "../")) or Path(name).suffix in _FILE_KINDS
        return written_as_path or Path(name).exists() or glob.has_magic(name)

    @property
    def identity(self) -> str:
        """What its prepared corpus was made from; not the pair it is read as, which the
        prepared corpus's languages say (so a dataset named before pairs were keeps it)."""
        fields = self.spec.model_dump(exclude={"src", "tgt"})
        if self.local:
            fields["dataset"] = str(Path(self.spec.dataset).absolute())
        return json.dumps(fields, sort_keys=True)

    def files(self, langs: Langs, aligned: bool = False) -> dict[str, Path]:
        """Every file of a local dataset, by its path (a hub dataset's are not known)."""
        self.refuse_alignments(aligned)
        return {str(path): path.absolute() for path in self._local_files()}

    def _local_files(self) -> list[Path]:
        if not self.local:
            return []
        path = Path(self.spec.dataset)
        found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
        found = found or [Path(p) for p in sorted(glob.glob(self.spec.dataset))]
        if not found:
            raise UserError(f"{self}: no such files; check its `dataset` path")
        return found

    def chunks(
        self, langs: Langs, size: int, digests: dict[str, Any] | None = None, aligned: bool = False
    ) -> Iterator[PairChunk]:
        files = self.files(langs, aligned)
        row = 1
        for batch in _batches(self._dataset(), size, self):
            src, tgt = self._texts(batch, langs, row)
            row += len(src)
            kept = [(s, t) for s, t in zip(src, tgt, strict=True) if s.strip() and t.strip()]
            yield PairChunk([s for s, _ in kept], [t for _, t in kept], len(src) - len(kept))
        for role, path in files.items() if digests else ():
            feed_file(path, digests[role])

    def _read(self, langs: Langs) -> tuple[list[str], list[str]]:
        src: list[str] = []
        tgt: list[str] = []
        for batch in _batches(self._dataset(), 10_000, self):
            texts = self._texts(batch, langs, len(src) + 1)
            src += texts[0]
            tgt += texts[1]
        return src, tgt

    def _texts(self, batch: dict[str, list], langs: Langs, row: int) -> tuple[list[str], list[str]]:
        """The source and target texts of a batch of rows (the first numbered `row`)."""
        if self.spec.columns is None and "translation" in batch:
            records = batch["translation"]
        else:
            named = [(self.spec.columns or {}).get(lang, lang) for lang in langs]
            missing = [name for name in named if name not in batch]
            if missing:
                wanted = ", ".join(f"{lang}: COLUMN" for lang in langs)
                raise UserError(
                    f"{self}: no column {missing[0]} (columns: {', '.join(batch)}); name the "
                    f"language columns: columns: {{{wanted}}}"
                )
            rows = zip(*(batch[name] for name in named), strict=True)
            records = [dict(zip(langs, values, strict=True)) for values in rows]
        pairs = [
            pair_of(record if isinstance(record, dict) else {}, langs, f"{self}, row {number}")
            for number, record in enumerate(records, row)
        ]
        return [pair[0] for pair in pairs], [pair[1] for pair in pairs]

    def _dataset(self) -> Any:
        """The dataset's split, loaded (or opened to stream)."""
        datasets = _library()
        spec, path = self.spec, Path(self.spec.dataset)
        try:
            if path.is_dir() and any((path / name).is_file() for name in _SAVED):
                return self._split_of(datasets.load_from_disk(str(path)))
            if self.local:
                files = [str(p) for p in self._local_files()]
                kinds = {_FILE_KINDS.get(Path(name).suffix) for name in files}
                if None in kinds or len(kinds) != 1:
                    raise UserError(
                        f"{self}: give parquet or arrow files (one kind), or a directory "
                        "written by save_to_disk"
                    )
                return datasets.load_dataset(
                    kinds.pop(), data_files={spec.split: files}, split=spec.split, streaming=True
                )
            return datasets.load_dataset(
                spec.dataset, spec.subset, split=spec.split, streaming=True
            )
        except UserError:
            raise
        except Exception as error:  # the library's many kinds: missing, offline, bad split
            raise UserError(
                f"{self}: cannot load it ({type(error).__name__}: {_first_line(error)}); check "
                "its dataset, split and subset (without a network: save_to_disk it where there "
                "is one, and give that directory)"
            ) from None

    def _split_of(self, loaded: Any) -> Any:
        """The split the config names of what `load_from_disk` gave (one dataset: itself)."""
        if not hasattr(loaded, "keys"):
            return loaded
        if self.spec.split not in loaded:
            raise UserError(
                f"{self}: no split {self.spec.split} (splits: {', '.join(loaded)}); name one"
            )
        return loaded[self.spec.split]


def _batches(dataset: Any, size: int, source: HuggingFaceDataset) -> Iterator[dict[str, list]]:
    """The dataset's rows, `size` at a time, as columns; a failure to read is one line."""
    try:
        yield from dataset.iter(batch_size=size)
    except Exception as error:  # a damaged file, a lost connection
        raise UserError(
            f"{source}: cannot read it ({type(error).__name__}: {_first_line(error)}); check "
            "its files"
        ) from None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:200]


def _library() -> Any:
    try:
        import datasets
        import huggingface_hub
    except ImportError:
        raise UserError(
            "reading a Hugging Face dataset needs the datasets library: "
            "pip install 'seq2seq[hf]' (make install installs it)"
        ) from None
    datasets.disable_progress_bars()
    # The hub client's retries and warnings would bury the one line an error gets.
    datasets.logging.set_verbosity_error()
    huggingface_hub.logging.set_verbosity_error()
    return datasets
