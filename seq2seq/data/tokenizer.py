"""SentencePiece tokenizers: one joint model, or separate source and target models.

Every model is trained with the same special ids, so batching, models and search can
use the module constants without asking the tokenizer.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from itertools import chain
from pathlib import Path

import sentencepiece as spm
from pydantic import ValidationError

from seq2seq.config import TokenizerConfig
from seq2seq.data.vocabulary import VOCABULARY, read_table, tabled
from seq2seq.errors import UserError
from seq2seq.files import publish_directory

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
_SPECIAL_IDS = frozenset({PAD_ID, BOS_ID, EOS_ID})

JOINT_MODEL = "joint.model"
SRC_MODEL = "src.model"
TGT_MODEL = "tgt.model"
SETTINGS = "tokenizer.json"  # the tokenizer config the models were trained with
# The corpora cleaned and prepared beside the models (corpus_encoder.py, cleaning.py): kept
# when the models are replaced (a prepared one then finds itself stale and is made again).
CORPORA = "corpora"

# SentencePiece loads at most this many sentences (a random sample when shuffled); more
# only costs memory and time without changing the vocabulary much.
INPUT_SENTENCE_SIZE = 2_000_000


@dataclass(frozen=True)
class SegmentationSample:
    """One segmentation of a training corpus drawn from the tokenizer (subword
    regularization): `data.subword_sampling`'s alpha and nbest, and its number among the
    corpus's samples.

    A sample is drawn once and kept: SentencePiece's generator starts each call from a
    seed we give, but also from something of its process (sentencepiece 0.2), so another
    process would draw another sample. Within a process the seeds keep each call's draw
    apart from the others' (the same seed draws the same again)."""

    alpha: float
    nbest: int
    number: int

    @property
    def record(self) -> dict:
        return asdict(self)

    def call_seed(self, chunk: int, side: str) -> int:
        """The 32-bit seed of the call that draws one chunk of one side."""
        text = f"{self.number} {chunk} {side}".encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:4], "little")


class Tokenizer:
    """Source and target SentencePiece models; `tgt` is None (or `src`) for a joint one."""

    def __init__(
        self, src: spm.SentencePieceProcessor, tgt: spm.SentencePieceProcessor | None = None
    ) -> None:
        self._src = src
        self._tgt = src if tgt is None else tgt

    @property
    def joint(self) -> bool:
        return self._src is self._tgt

    @functools.cached_property
    def fingerprint(self) -> str:
        """A short hash of the models: checkpoints record it, so that a checkpoint is never
        used with a tokenizer other than the one it was trained with."""
        digest = hashlib.sha256(self._src.serialized_model_proto())
        if not self.joint:
            digest.update(self._tgt.serialized_model_proto())
        digest.update(getattr(self._src, "table", b""))  # a vocabulary table (vocabulary.py)
        return digest.hexdigest()[:16]

    @functools.cached_property
    def algorithms(self) -> frozenset[str]:
        """The SentencePiece algorithms of its models ("unigram", "bpe", ...), as they
        record them (a model given by `tokenizer.model` may be either)."""
        from sentencepiece import sentencepiece_model_pb2  # protobuf: tensorboard needs it

        found = set()
        for model in (self._src, self._tgt):
            proto = sentencepiece_model_pb2.ModelProto.FromString(model.serialized_model_proto())
            kind = sentencepiece_model_pb2.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type)
            found.add(kind.lower())
        return frozenset(found)

    @property
    def src_vocab_size(self) -> int:
        return self._src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self._tgt.get_piece_size()

    def encode_src(self, lines: list[str], threads: int = -1) -> list[list[int]]:
        """Piece ids of each source line, without BOS/EOS; encoded by `threads` threads
        (-1: SentencePiece's default, every core)."""
        return self._src.encode(list(lines), out_type=int, num_threads=threads)

    def encode_tgt(self, lines: list[str], threads: int = -1) -> list[list[int]]:
        """Piece ids of each target line, without BOS/EOS."""
        return self._tgt.encode(list(lines), out_type=int, num_threads=threads)

    def sample(
        self, side: str, lines: list[str], sample: SegmentationSample, chunk: int
    ) -> list[list[int]]:
        """Piece ids of each line of `side` (src, tgt) in a segmentation drawn from its
        model: unigram sampling, or BPE-dropout. One thread: threads would share the
        call's seed in no fixed order."""
        spm.set_random_generator_seed(sample.call_seed(chunk, side))
        model = self._src if side == "src" else self._tgt
        return model.encode(
            list(lines),
            out_type=int,
            enable_sampling=True,
            alpha=sample.alpha,
            nbest_size=sample.nbest,
            num_threads=1,
        )

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Detokenized text of each id sequence; PAD, BOS and EOS are skipped."""
        return self._tgt.decode([[i for i in row if i not in _SPECIAL_IDS] for row in ids])

    def src_pieces(self, line: str) -> list[str]:
        """The source pieces of one line (no EOS piece), e.g. to label heatmap columns."""
        return self._src.encode(line, out_type=str)

    def tgt_pieces_from_ids(self, ids: list[int]) -> list[str]:
        """The target piece of each id, specials included (e.g. `</s>`), for heatmap rows."""
        return [self._tgt.id_to_piece(i) for i in ids]

    def src_vocabulary(self) -> list[str]:
        """Every source piece, by id (e.g. for an inference engine's vocabulary file)."""
        return [self._src.id_to_piece(i) for i in range(self.src_vocab_size)]

    def tgt_vocabulary(self) -> list[str]:
        return [self._tgt.id_to_piece(i) for i in range(self.tgt_vocab_size)]

    def src_piece_id(self, piece: str) -> int | None:
        """The id of one whole source piece (a tag); None where the source vocabulary has
        no such piece."""
        found = self._src.piece_to_id(piece)
        return None if self._src.is_unknown(found) else found

    def src_pieces_from_ids(self, ids: list[int]) -> list[str]:
        return [self._src.id_to_piece(i) for i in ids]

    def tgt_ids_from_pieces(self, pieces: list[str]) -> list[int]:
        return [self._tgt.piece_to_id(piece) for piece in pieces]

    @classmethod
    def load(cls, directory: Path) -> Tokenizer:
        """Load `joint.model`, or `src.model` and `tgt.model`, from a directory; with a
        vocabulary table beside them (vocab.json), their pieces numbered by it."""
        directory = Path(directory)
        table = directory / VOCABULARY
        if table.is_file() and (directory / SRC_MODEL).is_file():
            pieces = read_table(table)
            models = [
                _load_model(directory / name, own_ids=False) for name in (SRC_MODEL, TGT_MODEL)
            ]
            return cls(*(tabled(model, pieces, table) for model in models))  # type: ignore[arg-type]
        if (directory / JOINT_MODEL).is_file():
            return cls(_load_model(directory / JOINT_MODEL))
        if (directory / SRC_MODEL).is_file() and (directory / TGT_MODEL).is_file():
            return cls(_load_model(directory / SRC_MODEL), _load_model(directory / TGT_MODEL))
        raise UserError(
            f"no tokenizer in {directory}: expected {JOINT_MODEL}, or {SRC_MODEL} and "
            f"{TGT_MODEL}; train one or point to the run's tokenizer directory"
        )


def _load_model(path: Path, own_ids: bool = True) -> spm.SentencePieceProcessor:
    """A SentencePiece model, checked to have this project's special ids unless a
    vocabulary table numbers its pieces (`own_ids` false)."""
    processor = spm.SentencePieceProcessor()
    if not path.is_file():
        raise UserError(f"{path}: no such SentencePiece model; give the path of one")
    try:
        processor.load(str(path))
    except (OSError, RuntimeError):
        raise UserError(f"{path}: not a SentencePiece model; retrain the tokenizer") from None
    found = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
    if own_ids and found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
        raise UserError(
            f"{path}: special ids (pad, unk, bos, eos) are {found}, expected "
            f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; train it with --pad_id={PAD_ID} "
            f"--unk_id={UNK_ID} --bos_id={BOS_ID} --eos_id={EOS_ID}, or let seq2seq train one"
        )
    return processor


class _Sentences:
    """The sentences SentencePiece trains on, streamed: counts those with content, and keeps
    the error that reading them raised (SentencePiece reports it as its own RuntimeError)."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines, self.with_content, self.error = lines, 0, None

    def __iter__(self) -> Iterator[str]:
        try:
            for line in self.lines:
                self.with_content += bool(line) and not line.isspace()
                yield line
        except Exception as error:  # a UserError of the corpus (invalid UTF-8, ...)
            self.error = error
            raise


def _train_model(cfg: TokenizerConfig, lines: Iterable[str], seed: int) -> bytes:
    """Serialized model proto trained on sentences, streamed (SentencePiece keeps a sample
    of INPUT_SENTENCE_SIZE of them)."""
    sentences = _Sentences(lines)
    # The seed is global to SentencePiece; set it right before each training so the
    # sentence sample and any tie-breaking are the same for the same input.
    spm.set_random_generator_seed(seed)
    # A model_writer (rather than a model_prefix) keeps the output path out of the
    # serialized trainer spec, so identical input gives byte-identical models.
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=writer,
            model_type=cfg.model_type,
            vocab_size=cfg.vocab_size,
            character_coverage=cfg.character_coverage,
            byte_fallback=cfg.byte_fallback,
            user_defined_symbols=cfg.user_symbols,
            # A small corpus may not support vocab_size pieces; take what it supports.
            hard_vocab_limit=False,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            input_sentence_size=INPUT_SENTENCE_SIZE,
            shuffle_input_sentence=True,
            num_threads=2,
            minloglevel=2,
        )
    except RuntimeError as error:
        if sentences.error is not None:
            raise sentences.error from None
        if not sentences.with_content:
            raise UserError(
                "tokenizer training data has no non-empty sentences; check the corpus"
            ) from None
        # Messages look like "INTERNAL: file.cc(638) [condition] explanation"; keep the
        # explanation, or the failed condition when there is none.
        text = " ".join(str(error).split())
        reason = text.rpartition("] ")[2] or text
        raise UserError(
            f"tokenizer training failed: {reason}; check tokenizer.vocab_size, "
            "tokenizer.character_coverage and the training data"
        ) from None
    return writer.getvalue()


def train_tokenizer(
    cfg: TokenizerConfig,
    src_lines: Iterable[str],
    tgt_lines: Iterable[str],
    directory: Path,
    seed: int = 1,
) -> Tokenizer:
    """Train and save SentencePiece model(s) in `directory` (replaced if it exists). Each
    side's lines are iterated once (a joint model reads the source lines, then the target
    lines), so they may be streamed from a corpus of any size."""
    directory = Path(directory)
    if cfg.joint:
        models = {JOINT_MODEL: _train_model(cfg, chain(src_lines, tgt_lines), seed)}
    else:
        models = {
            SRC_MODEL: _train_model(cfg, src_lines, seed),
            TGT_MODEL: _train_model(cfg, tgt_lines, seed),
        }

    def write(tmp: Path) -> None:
        _fill(tmp, directory, models, cfg)

    # Made beside the destination and renamed, so a crash never leaves a half-written
    # tokenizer where a later run would load it.
    publish_directory(directory, write, replace=True)
    return Tokenizer.load(directory)


def _fill(tmp: Path, directory: Path, models: dict[str, bytes], cfg: TokenizerConfig) -> None:
    """Write the models and their settings into the new directory `tmp`, and move the
    corpora of the one it replaces into it."""
    tmp.mkdir()
    for name, proto in models.items():
        (tmp / name).write_bytes(proto)
    (tmp / SETTINGS).write_text(json.dumps(cfg.model_dump(), indent=2) + "\n")
    if (directory / CORPORA).is_dir():
        os.rename(directory / CORPORA, tmp / CORPORA)


def has_tokenizer(directory: Path) -> bool:
    """Whether `directory` holds a tokenizer's models (not only its corpora)."""
    directory = Path(directory)
    return (directory / JOINT_MODEL).is_file() or (directory / SRC_MODEL).is_file()


def copy_tokenizer(cfg: TokenizerConfig, directory: Path) -> Tokenizer:
    """Install the existing model(s) of `cfg.model` in `directory` (replaced if it exists):
    a model file serves both sides; a directory gives its joint.model, or src.model and
    tgt.model. Checked (special ids, `cfg.joint`) before anything is written."""
    source = Path(cfg.model or "")
    if source.is_file():
        models = {JOINT_MODEL: source}
    elif (source / JOINT_MODEL).is_file():
        models = {JOINT_MODEL: source / JOINT_MODEL}
    elif source.is_dir():
        models = {SRC_MODEL: source / SRC_MODEL, TGT_MODEL: source / TGT_MODEL}
    else:
        raise UserError(
            f"tokenizer.model {source}: no such file or directory; give a SentencePiece "
            f".model file, or a directory with {JOINT_MODEL} or {SRC_MODEL} and {TGT_MODEL}"
        )
    own_ids = not (source / VOCABULARY).is_file()  # else its table numbers the pieces
    if not own_ids and JOINT_MODEL in models:
        raise UserError(
            f"tokenizer.model {source}: {VOCABULARY} numbers the pieces of {SRC_MODEL} and "
            f"{TGT_MODEL}, and the directory has {JOINT_MODEL}: give those two beside it, or "
            f"remove {VOCABULARY}"
        )
    loaded = {name: _load_model(path, own_ids) for name, path in models.items()}
    joint = JOINT_MODEL in models or not own_ids  # a table: one vocabulary for both sides
    if cfg.joint != joint:
        kind = "one vocabulary for both sides" if joint else "separate source and target models"
        raise UserError(
            f"tokenizer.model {source} is {kind}; set tokenizer.joint: {str(joint).lower()}"
        )

    models = {name: processor.serialized_model_proto() for name, processor in loaded.items()}
    if (source / VOCABULARY).is_file():  # its table numbers the pieces (vocabulary.py)
        models[VOCABULARY] = (source / VOCABULARY).read_bytes()
    publish_directory(directory, lambda tmp: _fill(tmp, directory, models, cfg), replace=True)
    return Tokenizer.load(directory)


def trained_settings(directory: Path) -> dict | None:
    """The tokenizer config the models in `directory` were made with, fields added to the
    config since then at their defaults (None: not recorded, as in tokenizers made before
    it was; a record that no longer validates is returned as it is, and differs)."""
    path = Path(directory) / SETTINGS
    try:
        recorded = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None
    try:
        return TokenizerConfig.model_validate(recorded).model_dump()
    except ValidationError:
        return recorded
