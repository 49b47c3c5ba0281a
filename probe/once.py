"""`sla-probe once`: a few quick rounds, every canary's fate, a report and an exit code.

Without bootstrap servers it starts the embedded broker on a free loopback port,
creates the topic and stops the broker afterwards, so one command shows the whole
probe working on a machine with nothing else running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

from probe.config import ProbeConfig
from probe.embedded import EmbeddedBroker
from probe.errors import TransportError
from probe.keys import KeyRing
from probe.report import Tally
from probe.target import CONSUMER_STAGE, TargetProbe

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_SLO_FAILED = 1
EXIT_USAGE = 2


@contextlib.contextmanager
def broker_for(config: ProbeConfig) -> Iterator[ProbeConfig]:
    """The config to probe with: as given, or pointed at a fresh embedded broker."""
    if config.kafka.bootstrap_servers:
        yield config
        return
    with EmbeddedBroker() as broker:
        kafka = config.kafka.model_copy(
            update={"bootstrap_servers": broker.bootstrap_servers, "create_topic": True}
        )
        yield config.model_copy(update={"kafka": kafka})


async def probe_once(config: ProbeConfig, keyring: KeyRing) -> Tally:
    """Run the rounds and return the tally once every canary has its fate."""
    once = config.once
    tally = Tally(config.target)
    tally.declare_stage(CONSUMER_STAGE)
    target = TargetProbe(config, keyring, [tally], loss_timeout=once.loss_timeout)
    # Give the broker as long as one canary may take before calling the run failed.
    await target.connect(give_up_after=once.loss_timeout)
    if not target.partitions:
        raise TransportError(target.readiness()[1])
    consumer = asyncio.create_task(target.consume())
    try:
        start = time.monotonic()
        for round_no in range(once.rounds):
            delay = start + round_no * once.interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await target.produce_round()
        # Every canary now has a deadline; expire until all are decided. The loop's
        # own deadline is a backstop one loss timeout after the last round.
        deadline = time.monotonic() + once.loss_timeout + 1.0
        while target.judge.pending_count() > 0 and time.monotonic() < deadline:
            target.stage.expire(time.time_ns())
            await asyncio.sleep(0.02)
        target.stage.expire(time.time_ns())
    finally:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
        await target.close()
    return tally


def run_once(config: ProbeConfig, keyring: KeyRing, *, as_json: bool) -> int:
    """The whole `once` command; returns the exit code."""
    try:
        with broker_for(config) as probed:
            tally = asyncio.run(probe_once(probed, keyring))
    except TransportError as exc:
        log.error("cannot probe %s: %s", config.target, exc)
        tally = Tally(config.target)
    print(tally.to_json() if as_json else tally.to_table())
    return EXIT_OK if tally.ok else EXIT_SLO_FAILED
