"""A pydantic validation error in the words of the probe's settings files: the dotted
path of the first setting at fault and what is wrong with it, never pydantic's own
names ("instance of KafkaConfig", "Value error, ..."). Shared by the probe's config,
the game-day scenarios and the endpoints' web config, which each add their own cases.
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import ErrorDetails

NOT_A_MAPPING = "must be a mapping of settings"


def first_problem(
    error: ValidationError, *, not_a_mapping: str = NOT_A_MAPPING
) -> tuple[list[str], str, ErrorDetails]:
    """The first error's path (its parts), its message, and the error itself for the
    caller's own cases. An unknown key is an ``unknown setting``; a section given as
    null, a scalar or a list ``not_a_mapping``."""
    first = error.errors()[0]
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown setting"
    elif first["type"] == "model_type":
        message = not_a_mapping
    return [str(part) for part in first["loc"]], message, first
