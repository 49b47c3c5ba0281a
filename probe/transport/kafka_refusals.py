"""Why the broker kept refusing a canary that timed out: the last error of its retries.

aiokafka retries a produce the broker refused with a retriable error (not enough
replicas, not the leader) until the batch expires, and an idempotent producer until
it succeeds; the probe's own deadline ends the wait first, so the canary would be
``produce_failed`` for a ``timeout`` when the broker was in fact answering, with
``NOT_ENOUGH_REPLICAS``: the reason an on-call needs (two brokers down, min ISR not
met). aiokafka says it only in a log record per retried batch ("Got error produce
response ..., retrying"): this handler keeps the last one per topic and partition.

The records are taken from aiokafka's sender logger whatever the probe's log level,
and passed on to the probe's own handlers only when aiokafka's logs are shown
(``--log-level debug``): they come once per retry and partition.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiokafka import TopicPartition

from probe.core.errors import ProduceFailure

SENDER_LOGGER = "aiokafka.producer.sender"


class ProduceRefusals(logging.Handler):
    """The last refusal per (topic, partition), with when it came (monotonic)."""

    def __init__(self, reason_of: Any) -> None:
        super().__init__(logging.WARNING)
        self._reason_of = reason_of
        self._last: dict[tuple[str, int], tuple[ProduceFailure, float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if isinstance(args, tuple) and len(args) == 2 and isinstance(args[0], TopicPartition):
            tp: Any = args[0]
            error = args[1]
            exc = error() if isinstance(error, type) else error
            self._last[(tp.topic, tp.partition)] = (self._reason_of(exc), time.monotonic())
        if logging.getLogger("aiokafka").getEffectiveLevel() <= logging.DEBUG:
            logging.getLogger().handle(record)

    def since(self, topic: str, partition: int, started: float) -> ProduceFailure | None:
        """The reason the broker gave for the partition after ``started``, if any."""
        found = self._last.get((topic, partition))
        return found[0] if found is not None and found[1] >= started else None


def install(reason_of: Any) -> ProduceRefusals:
    """The process's one handler on aiokafka's sender logger (installed once)."""
    logger = logging.getLogger(SENDER_LOGGER)
    for handler in logger.handlers:
        if isinstance(handler, ProduceRefusals):
            return handler
    handler = ProduceRefusals(reason_of)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    return handler
