"""Durations as every section writes them: ``500ms``, ``20s``, ``1m30s``, ``2h`` or plain
seconds, held as float seconds.

One parser and one bounds check serve every duration setting, so that each says what
is wrong in the same words. A :data:`Duration` is finite and > 0; ``_between`` adds a
setting's documented bounds, inclusive. docs/reference/generate.py reads those bounds
back from the closure ``_between`` returns (its ``low`` and ``high``), so a bound is
written there, never as a bare ``Field`` constraint on a duration.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object) -> float:
    """``"1m30s"`` -> 90.0. Numbers are seconds. Raises ValueError with a short reason."""
    seconds = _seconds(value)
    # NaN compares false with every bound and infinity never elapses: both would slip
    # past a range check or hang a timer, so no duration may be either.
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {value!r}")
    return seconds


def _seconds(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise ValueError("not a duration")
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {value!r} (use e.g. 500ms, 20s, 1m30s)")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """90.0 -> ``"90s"``, 3600.0 -> ``"1h"``, 0.1 -> ``"100ms"``: as a user would write it."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    for unit in ("h", "m"):
        if (seconds / _UNIT_SECONDS[unit]).is_integer():
            return f"{seconds / _UNIT_SECONDS[unit]:g}{unit}"
    return f"{seconds:g}s"


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("must be > 0")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration), AfterValidator(_positive)]


def _between(low: float, high: float) -> AfterValidator:
    """A duration's bounds, inclusive: ``interval: Annotated[Duration, _between(1, HOUR)]``."""

    def check(seconds: float | None) -> float | None:
        # None: an optional duration (``Duration | None``) given as null.
        if seconds is not None and not low <= seconds <= high:
            raise ValueError(
                f"must be between {format_duration(low)} and {format_duration(high)}, "
                f"got {format_duration(seconds)}"
            )
        return seconds

    return AfterValidator(check)


MINUTE = 60.0
HOUR = 3600.0
DAY = 24 * HOUR
