"""A producing probe whose clock is off: restarted at inject with its wall clock
shifted by the scenario's offset (libfaketime), restarted on the true clock at heal.

Skew is between processes: the probe's own consumer stage shares its clock and sees
nothing, while the sink, in its own process on the true clock (``sink_process: own``,
as the chart deploys it), gets canaries stamped in its future (a clock ahead) or in
its past (behind: latency). The probe starts shifted rather than being shifted while it
runs: a clock that is off is what is tested, not a clock step (which would also expire
the in-flight canaries of the probe's own stage at once). Only the wall clock moves:
the monotonic clock the event loop's timers run on is left alone, as it is when NTP
is what is wrong.
"""

from __future__ import annotations

import glob
from typing import TYPE_CHECKING

from probe.core.errors import ProbeError

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import ProducerClockSkew

# Where Debian's `faketime` package (and a source build) put the preload library.
_LIBFAKETIME = (
    "/usr/lib/*-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


class ClockSkewError(ProbeError):
    """libfaketime is not installed."""


def libfaketime() -> str:
    """The libfaketime preload library of this machine."""
    for pattern in _LIBFAKETIME:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise ClockSkewError("libfaketime is not installed (Debian package `faketime`)")


def shifted_clock_environment(offset: float) -> dict[str, str]:
    """The environment that runs a process with its wall clock ``offset`` seconds off
    (negative: behind), its monotonic clock untouched."""
    return {
        "LD_PRELOAD": libfaketime(),
        "FAKETIME": f"{offset:+g}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


class ProducerClockSkewFault:
    def __init__(self, spec: ProducerClockSkew, targets: LocalTargets) -> None:
        self.probe = targets.probe
        self.shifted = shifted_clock_environment(spec.offset)  # fails before the run

    def inject(self) -> None:
        self.probe.stop()
        self.probe.environment = self.shifted
        self.probe.start()

    def heal(self) -> None:
        self.probe.stop()
        self.probe.environment = {}
        self.probe.start()
