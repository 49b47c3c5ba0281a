"""A stalled Spark sink batch: the sink stage's batches wait before writing.

The probe's own drill hook does it (``sla-probe run`` holds the sink on SIGUSR1 and
resumes it on SIGUSR2), so the stall is the one an operator can cause on a deployed
probe: the query stays up, its batch is blocked as on a sink whose storage does not
answer, and Kafka keeps flowing to the consumer stage. The sink's per-partition
staleness and its watermark skew rise; the consumer stage must stay green.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import SinkStall


class SinkStallFault:
    def __init__(self, spec: SinkStall, targets: LocalTargets) -> None:
        self.probe = targets.probe

    def inject(self) -> None:
        self.probe.send_signal(signal.SIGUSR1)

    def heal(self) -> None:
        self.probe.send_signal(signal.SIGUSR2)
