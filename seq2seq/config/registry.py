"""Tables of named classes that the schema validates against but a floor above it defines
(attention types, normalizers, positional encodings): the upper package registers each
class as it is imported, and the schema reads the table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Registry(dict[str, T]):
    """Classes by name, registered by the package that defines them (`add`).

    `load` imports that package on first use. The top floor (`seq2seq/__init__.py`, which
    Python runs before any seq2seq module) installs it, so a config loads in any import
    order without the schema importing the floor above it."""

    load: Callable[[], object] | None = None

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind  # what its classes are, for messages: "attention types"

    def registered(self) -> Registry[T]:
        if not self and self.load is not None:
            self.load()
        if not self:
            raise RuntimeError(f"no {self.kind} registered: import seq2seq.attention first")
        return self

    def add(self, name: str) -> Callable[[T], T]:
        """A class decorator that registers the class as `name`."""

        def add(cls: T) -> T:
            if name in self:
                raise ValueError(f"{self.kind}: {name!r} is registered twice")
            self[name] = cls
            return cls

        return add

    def problem(self, name: str) -> str | None:
        """Why `name` is not one of the registered names (which it lists), or None."""
        names = sorted(self.registered())
        return None if name in names else f"{name!r} is none of the {self.kind}: {', '.join(names)}"

    def checked(self, name: str) -> str:
        """`name` where it is registered; otherwise a ValueError saying `problem`."""
        if problem := self.problem(name):
            raise ValueError(problem)
        return name

    def names_in(self, schema: dict[str, Any]) -> None:
        """A field's JSON schema lists the registered names (`json_schema_extra`)."""
        schema.update(enum=sorted(self.registered()))
