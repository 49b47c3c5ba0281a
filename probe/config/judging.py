"""How canaries are judged: the ``judge`` section (when a canary is delivered, late or
lost) and the ``canary`` section (its padded and largest sizes).

A canary is lost only after it could no longer be late: loss_timeout >= freshness.
Whether the probe's own canaries fit canary.max_size depends on the probe id and the
targets, so that is checked where the whole model is assembled (probe.config).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator

from probe.config.base import _Section
from probe.config.durations import DAY, HOUR, Duration, _between, format_duration


class JudgeConfig(_Section):
    """When a canary counts as delivered, late or lost."""

    freshness: Annotated[Duration, _between(0.01, HOUR)] = 5.0
    loss_timeout: Annotated[Duration, _between(1.0, DAY), Field(validate_default=True)] = 60.0

    @field_validator("loss_timeout")
    @classmethod
    def _loss_after_freshness(cls, loss_timeout: float, info: ValidationInfo) -> float:
        freshness = info.data.get("freshness")
        if freshness is not None and loss_timeout < freshness:
            raise ValueError(f"must be >= judge.freshness ({format_duration(freshness)})")
        return loss_timeout


class CanaryConfig(_Section):
    # Pad each canary to at least this many bytes, to probe with realistic sizes.
    size: int = Field(default=0, ge=0, le=1_000_000)
    # Larger records are rejected as `oversized` before any parsing.
    max_size: int = Field(default=1_048_576, ge=256)
