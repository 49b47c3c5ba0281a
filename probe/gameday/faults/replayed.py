"""Replayed canaries: the probe's own latest canaries, written again, byte for byte.

They verify (same key, same MAC) and were already judged: the probe must count
each as a ``duplicate`` (and, arriving after later canaries, possibly out of order),
never as a second delivery. Written once, when the fault starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from probe.transport.kafka_records import read_latest, write_records

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import ReplayedCanaries


class ReplayedCanariesFault:
    def __init__(self, spec: ReplayedCanaries, targets: LocalTargets) -> None:
        self.count = spec.count
        self.targets = targets

    def inject(self) -> None:
        partition = 0
        canaries = read_latest(
            self.targets.bootstrap_servers, self.targets.topic, partition, self.count
        )
        write_records(
            self.targets.bootstrap_servers,
            self.targets.topic,
            [(partition, canary) for canary in canaries],
        )

    def heal(self) -> None:
        """Written records stay written."""
