"""The base of every config section."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    # Unknown keys are errors; so are inf and NaN in every float field.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
