"""Hostile records: random bytes and tampered canaries on the canary topic.

A tampered canary is one of the probe's own canaries, read back from the topic, with
one bit of its MAC flipped: it still parses and still claims this very probe, so the
probe must count it ``invalid`` (``bad_signature``), not foreign and not delivered.
Random bytes are ``malformed``. Both are written once, when the fault starts.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from probe.transport.kafka_records import read_latest, write_records

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import HostileRecords


def tamper(canary: bytes) -> bytes:
    """The same record with the last bit of its MAC flipped."""
    return canary[:-1] + bytes([canary[-1] ^ 0x01])


class HostileRecordsFault:
    def __init__(self, spec: HostileRecords, targets: LocalTargets) -> None:
        self.spec = spec
        self.targets = targets
        self.written: list[tuple[int, bytes]] = []

    def inject(self) -> None:
        partitions = self.targets.partitions
        records = [
            (i % partitions, os.urandom(self.spec.random_size)) for i in range(self.spec.random)
        ]
        if self.spec.tampered:
            own = read_latest(
                self.targets.bootstrap_servers, self.targets.topic, 0, self.spec.tampered
            )
            records += [(0, tamper(canary)) for canary in own]
        write_records(self.targets.bootstrap_servers, self.targets.topic, records)
        self.written = records

    def heal(self) -> None:
        """Written records stay written: the alert's window decides when it resolves."""
