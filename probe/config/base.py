"""What every section model shares: the strict base (unknown keys are errors, settings
are frozen) and the coercions of values that arrive as text from a flag or a variable
(a comma-separated list of names, a number written as text).

It imports nothing of the package, so every section can build on it without a cycle.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    # Unknown keys are errors: a typo in a YAML file must not silently keep a default.
    model_config = ConfigDict(extra="forbid", frozen=True)


def _names(value: object) -> object:
    """A list of names from YAML, or comma-separated from a flag or the environment."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return value


def _int_text(value: object) -> object:
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


def _text(value: object) -> object:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
