"""A transaction left open on the canary topic: a producer of its own begins a
transaction, writes one record to every partition, and neither commits nor aborts it
until healed (then it aborts). Kafka holds the last stable offset of every partition
at that record, so every read_committed consumer stops there: the transactional
stage's canaries are read only after the heal, while a consumer reading uncommitted
records (the consumer stage) reads on, which is the point of the transactional stage.

The records are canaries of the probe's own, signed with its key and marked aborted
(what the transactional stage's aborted rounds write): a stage reading uncommitted
records skips them, as it skips the probe's own aborted rounds, so the fault shows at
the transactional stage only. The transaction's timeout is Kafka's longest by default
(15 min): the broker does not abort it before the heal.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from probe.core.canary import Canary, encode
from probe.keyfile import read_key_file
from probe.transport.kafka_records import OpenTransaction

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import TransactionLeftOpen

# The producer's transaction.timeout.ms, in seconds: the brokers' default
# transaction.max.timeout.ms, the longest they accept.
LEFT_OPEN_FOR = 900.0


def aborted_canaries(key_file: Path, probe_id: str, partitions: int) -> list[tuple[int, bytes]]:
    """An aborted-marked canary of the probe's own for every partition."""
    ring = read_key_file(key_file)
    now = time.time_ns()
    return [
        (partition, encode(Canary(probe_id, 0, "gameday", partition, 0, now, aborted=True), ring))
        for partition in range(partitions)
    ]


def open_transaction(bootstrap_servers: str, topic: str) -> OpenTransaction:
    """A producer of its own for the open transaction, under a transactional id no
    other producer has."""
    return OpenTransaction(
        bootstrap_servers, topic, f"gameday-open-transaction-{uuid.uuid4().hex[:8]}", LEFT_OPEN_FOR
    )


class TransactionLeftOpenFault:
    def __init__(self, spec: TransactionLeftOpen, targets: LocalTargets) -> None:
        self.targets = targets
        self.transaction = open_transaction(targets.bootstrap_servers, targets.topic)

    def inject(self) -> None:
        targets = self.targets
        self.transaction.open(
            aborted_canaries(targets.key_file, targets.probe_id, targets.partitions)
        )

    def heal(self) -> None:
        self.transaction.abort()
