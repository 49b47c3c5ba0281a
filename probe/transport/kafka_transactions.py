"""The transactional stage's writes: canaries sent in transactions of one producer.

A producer has one transaction open at a time, and the probe sends many canaries at
once (a round's, or a burst of a paced round's). Sends are grouped: a send joins the
open transaction when it is of the same kind (to be committed, or to be aborted) and
that transaction is not ending; otherwise it waits for it to end and begins the next.
A transaction ends as soon as none of its sends is in flight: a round sent at once is
one transaction, a paced round about one per burst. Committing goes on in the
background, so a send returns when its record is acknowledged (written), and its
canary is stamped as every canary is; a read_committed consumer sees it once the
commit's markers are written, which its stage measures as latency.

What ended how is told to ``on_ended``: ``committed``, ``aborted`` (on purpose) or
``failed`` (the commit or the abort failed, or took longer than ``end_within``; the
transaction is then aborted if it still can be, and its canaries never reach a
read_committed consumer, which is what such a failure does to every exactly-once
pipeline). A producer that cannot abort either is given up: ``renew`` asks the
transport for a new one (with the same transactional id, which fences the old).

With the transactional stage on, every canary is written this way, so a transaction
coordinator that cannot be reached fails canaries at every stage, as it stalls every
exactly-once producer; a stage reading uncommitted records is otherwise unaffected by
transactions (an open transaction does not hold it back).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from probe.core.errors import TransactionOutcome

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class _Open:
    aborting: bool
    in_flight: int = 0
    ending: bool = False
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class Transactions:
    """Sends grouped into transactions of the producer ``producer()`` returns (the
    transport's current one, which it may replace)."""

    def __init__(
        self,
        producer: Callable[[], AIOKafkaProducer],
        *,
        end_within: float,
        renew: Callable[[], None],
        on_ended: Callable[[TransactionOutcome], None] = lambda _: None,
    ) -> None:
        self._producer = producer
        self._end_within = end_within
        self._renew = renew
        self._on_ended = on_ended
        self._open: _Open | None = None
        self._beginning = asyncio.Lock()
        self._ending: set[asyncio.Task[None]] = set()

    async def within(self, aborting: bool, send: Callable[[], Awaitable[T]]) -> T:
        """``send()`` inside a transaction that is committed (``aborting`` False) or
        aborted once it has nothing in flight."""
        joined = await self._join(aborting)
        joined.in_flight += 1
        try:
            return await send()
        finally:
            joined.in_flight -= 1
            if not joined.in_flight and not joined.ending:
                joined.ending = True
                task = asyncio.create_task(self._end(joined))
                self._ending.add(task)
                task.add_done_callback(self._ending.discard)

    async def _join(self, aborting: bool) -> _Open:
        while True:
            async with self._beginning:
                current = self._open
                if current is None:
                    await self._producer().begin_transaction()
                    current = self._open = _Open(aborting)
                    return current
                if current.aborting == aborting and not current.ending:
                    return current
            await current.ended.wait()

    async def _end(self, ending: _Open) -> None:
        producer = self._producer()
        outcome = TransactionOutcome.ABORTED if ending.aborting else TransactionOutcome.COMMITTED
        try:
            async with asyncio.timeout(self._end_within):
                if ending.aborting:
                    await producer.abort_transaction()
                else:
                    await producer.commit_transaction()
        except (KafkaError, TimeoutError) as exc:
            outcome = TransactionOutcome.FAILED
            doing = "abort" if ending.aborting else "commit"
            log.warning("transaction %s failed: %s", doing, str(exc) or "timed out")
            if isinstance(exc, TimeoutError) or not await self._aborted(producer):
                self._renew()
        finally:
            self._open = None
            ending.ended.set()
            self._on_ended(outcome)

    async def _aborted(self, producer: AIOKafkaProducer) -> bool:
        """Abort what a failed commit left; False if the producer cannot (fenced, its
        state lost, the coordinator gone), which then fails every later transaction."""
        try:
            async with asyncio.timeout(self._end_within):
                await producer.abort_transaction()
        except (KafkaError, TimeoutError) as exc:
            log.debug("transaction abort after failure: %s", exc)
            return False
        return True

    async def close(self) -> None:
        """Let the transactions ending now end (the producer stops after them)."""
        if self._ending:
            await asyncio.gather(*self._ending, return_exceptions=True)


def transactional_options(transactional_id: str, timeout: float) -> dict[str, Any]:
    """The producer options of a transactional producer.

    >>> transactional_options("synthetic-sla-probe.p1", 60.0)
    {'transactional_id': 'synthetic-sla-probe.p1', 'transaction_timeout_ms': 60000}
    """
    return {"transactional_id": transactional_id, "transaction_timeout_ms": round(timeout * 1000)}
