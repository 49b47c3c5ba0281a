"""The ``transactions`` section: the transactional stage's writes (docs/transactions.md).

With the ``transactional`` stage on, the probe's producer writes its canaries in
transactions, as exactly-once pipelines write (Flink's and Spark's Kafka sinks, Kafka
Streams), and every ``abort_every``-th round is written and aborted on purpose: a
stage reading committed records must never see those.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from probe.config.base import _Section
from probe.config.durations import MINUTE, Duration, _between


class TransactionsConfig(_Section):
    """The transactional producer of the transactional stage."""

    # The producer's transactional.id; None: ``synthetic-sla-probe.<probe_id>``, one per
    # probe (a second producer with the same id fences the first: replicas never share).
    id: Annotated[str | None, Field(min_length=1, max_length=249)] = None
    # Every this many rounds one is written in a transaction that is then aborted (its
    # canaries marked aborted); 0: none.
    abort_every: Annotated[int, Field(ge=0, le=1_000_000)] = 10
    # transaction.timeout.ms: a transaction of the probe's left open this long (the
    # probe stopped between its writes and its commit) is aborted by the broker, which
    # holds every read_committed consumer of its partitions until then.
    timeout: Annotated[Duration, _between(1.0, 15 * MINUTE)] = 60.0

    def transactional_id(self, probe_id: str) -> str:
        """The producer's transactional.id.

        >>> TransactionsConfig().transactional_id("probe-7")
        'synthetic-sla-probe.probe-7'
        """
        return self.id or f"synthetic-sla-probe.{probe_id}"
