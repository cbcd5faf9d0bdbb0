"""Vocabularies that are not this project's: SentencePiece models whose pieces are numbered
by a table (`vocab.json` beside them: the pieces in id order) instead of by the models'
own ids, as a published model (Marian's OPUS-MT: two SentencePiece models, one id table)
numbers them. The table keeps this project's special ids (<pad> 0, <unk> 1, <s> 2, </s>
3), so that batching, models and search read the same constants; a model imported with
other ids has its rows reordered to these (`seq2seq import`)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import sentencepiece as spm

from seq2seq.config.tokenizer import SPECIAL_PIECES
from seq2seq.errors import UserError

VOCABULARY = "vocab.json"  # the table's file in a tokenizer directory
UNKNOWN = SPECIAL_PIECES.index("<unk>")  # the table's first pieces are ids 0 to 3


class TabledProcessor:
    """A SentencePiece model whose pieces take their ids from `pieces` (id -> piece; a
    piece outside the table is <unk>): what `Tokenizer` asks of a model, answered through
    the table."""

    def __init__(self, model: spm.SentencePieceProcessor, pieces: list[str]) -> None:
        self.model = model
        self.pieces = pieces
        self.ids: dict[str, int] = {piece: number for number, piece in enumerate(pieces)}
        self.table = json.dumps(pieces).encode()  # what the tokenizer's fingerprint adds

    def encode(self, lines: Any, out_type: type = int, **options: Any) -> Any:
        found = self.model.encode(lines, out_type=str, **options)
        if out_type is str:
            return found
        if isinstance(lines, str):
            return [self.ids.get(piece, UNKNOWN) for piece in found]
        return [[self.ids.get(piece, UNKNOWN) for piece in row] for row in found]

    def decode(self, rows: list[list[int]]) -> list[str]:
        return self.model.decode_pieces([[self.pieces[i] for i in row] for row in rows])

    def id_to_piece(self, number: int) -> str:
        return self.pieces[number]

    def piece_to_id(self, piece: str) -> int:
        return self.ids.get(piece, UNKNOWN)

    def is_unknown(self, number: int) -> bool:
        return number == UNKNOWN

    def get_piece_size(self) -> int:
        return len(self.pieces)

    def serialized_model_proto(self) -> bytes:
        return self.model.serialized_model_proto()


def read_table(path: Path) -> list[str]:
    """The pieces of a vocab.json, by id; one line where it is not a list of distinct
    pieces that starts with the special ones."""
    try:
        pieces = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable vocabulary table ({error})") from None
    if not isinstance(pieces, list) or not all(isinstance(piece, str) for piece in pieces):
        raise UserError(f"{path}: expected a JSON list of pieces, in id order")
    twice = next((piece for piece, count in Counter(pieces).items() if count > 1), None)
    if twice is not None:
        raise UserError(f"{path}: the piece {twice!r} is in it twice; give each piece one id")
    first = pieces[: len(SPECIAL_PIECES)]
    if tuple(first) != SPECIAL_PIECES:
        raise UserError(
            f"{path}: its first pieces are {first}, expected {list(SPECIAL_PIECES)} "
            "(this project's special ids)"
        )
    return pieces


def tabled(model: spm.SentencePieceProcessor, pieces: list[str], path: Path) -> TabledProcessor:
    """`model` numbered by `pieces`; one line naming a piece of the model the table lacks
    (the table must cover what the model writes, or text would be lost as <unk>)."""
    known = set(pieces)
    for number in range(model.get_piece_size()):
        piece = model.id_to_piece(number)
        if piece not in known and not (model.is_control(number) or model.is_unknown(number)):
            raise UserError(
                f"{path} does not hold the piece {piece!r} of the SentencePiece model beside it; "
                "the table and the models disagree: give the vocabulary made with them"
            )
    return TabledProcessor(model, pieces)
