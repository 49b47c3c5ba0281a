"""The probe itself restarts: SIGTERM at inject, started again at heal.

While it is down Prometheus cannot scrape it (``up == 0``); when it is back its
counters start from zero and its sequence numbers restart with a new incarnation.
Neither may page: a scrape gap shorter than ``for: 5m`` and a counter reset are
ordinary in production (a rolling update).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import ProbeRestart


class ProbeRestartFault:
    def __init__(self, spec: ProbeRestart, targets: LocalTargets) -> None:
        self.probe = targets.probe

    def inject(self) -> None:
        self.probe.stop()

    def heal(self) -> None:
        self.probe.start()
