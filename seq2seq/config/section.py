"""The base of every config section."""

import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class Section(BaseModel):
    # Unknown keys are errors; so are inf and NaN in every float field.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_flag_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """true and false are not numbers: pydantic would read them as 1 and 0
        (`accumulate: true`, `weights: [true]`) where the field takes no flag."""
        flags = value if isinstance(value, list) else [value]
        if any(isinstance(flag, bool) for flag in flags):
            field = cls.model_fields[info.field_name]
            if not _takes_flags(field.annotation):
                raise ValueError("true and false are flags, not numbers; give a number")
        return value


def _takes_flags(annotation: Any) -> bool:
    """Whether a field's type admits a bool anywhere (or anything at all)."""
    if annotation is bool or annotation is Any:
        return True
    return any(_takes_flags(arg) for arg in typing.get_args(annotation))
