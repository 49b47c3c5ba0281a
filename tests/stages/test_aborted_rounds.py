"""The transactional stage's aborted rounds, without a broker: what the producer writes
in them (marked aborted, expected by no stage, no seq of their own), what each stage
makes of an aborted canary, the codec's flag, and the sink's verdict on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

import pyarrow as pa

from probe.config import StageName, load
from probe.core.canary import Canary, decode, encode
from probe.core.judge import Judge, JudgePolicy, OwnProbe
from probe.core.keys import generate_key_ring
from probe.services.report import Tally
from probe.spark.verify import verify
from probe.stages.producer import CanaryProducer
from probe.stages.stage import Stage
from probe.transport import TRANSPORTS, Arrival

OWN = OwnProbe("probe-a", incarnation=7)
RING = generate_key_ring("k1")


class Written:
    """A transport that acknowledges every canary and keeps what it was given."""

    messaging_system = "kafka"
    max_in_flight: int | None = None

    def __init__(self) -> None:
        self.sent: list[tuple[Canary, bool]] = []

    async def start(self) -> None: ...

    async def partitions(self) -> list[int]:
        return []

    async def cover(self, partitions: Sequence[int]) -> None: ...

    def destination(self, partition: int) -> str:
        return "canaries"

    def refused(self, partition: int, since: float) -> None:
        return None

    async def send(
        self,
        partition: int,
        payload: bytes,
        trace_headers: Mapping[str, str] | None = None,
        *,
        aborting: bool = False,
    ) -> int | None:
        self.sent.append((decode(payload, RING), aborting))
        return len(self.sent)

    async def arrivals(self) -> AsyncIterator[Arrival]:
        if False:
            yield

    async def close(self) -> None: ...


def _stage(name: StageName, tally: Tally) -> Stage:
    judge = Judge(JudgePolicy(freshness_ns=10**9, loss_timeout_ns=10**10), own=OWN)
    return Stage(
        name,
        "kafka",
        judge,
        RING,
        own=OWN,
        recorders=[tally],
        reads_committed=name is StageName.TRANSACTIONAL,
    )


async def test_every_nth_round_is_aborted_expected_by_no_stage_and_takes_no_seq() -> None:
    transport = Written()
    tally = Tally("kafka")
    stage = _stage(StageName.TRANSACTIONAL, tally)
    stage.watch([0, 1], now_ns=0)
    producer = CanaryProducer(
        own=OWN,
        target="kafka",
        transport=transport,  # type: ignore[arg-type]
        keyring=RING,
        stages=[stage],
        abort_every=2,
    )
    for _ in range(4):
        await producer.produce_round([0, 1])
    marks = [(canary.partition, canary.seq, canary.aborted, aborting)
             for canary, aborting in transport.sent]  # fmt: skip
    # Rounds 2 and 4 aborted: written in transactions to be aborted, marked so, and
    # carrying the seq the next committed canary takes.
    assert marks == [
        (0, 0, False, False), (1, 0, False, False),
        (0, 1, True, True), (1, 1, True, True),
        (0, 1, False, False), (1, 1, False, False),
        (0, 2, True, True), (1, 2, True, True),
    ]  # fmt: skip
    assert stage.judge.pending_count() == 4  # the committed rounds' canaries alone


def test_an_aborted_canary_is_an_anomaly_read_committed_and_skipped_otherwise() -> None:
    tally = Tally("kafka")
    committed = _stage(StageName.TRANSACTIONAL, tally)
    uncommitted = _stage(StageName.CONSUMER, tally)
    for stage in (committed, uncommitted):
        stage.watch([0], now_ns=0)
        stage.on_acked(Canary("probe-a", 7, "kafka", 0, 0, produced_ns=1), now_ns=2)
    aborted = Canary("probe-a", 7, "kafka", 0, 0, produced_ns=1, aborted=True)
    for stage in (committed, uncommitted):
        stage.on_arrival(Arrival(0, encode(aborted, RING), 3))
    assert tally.stages["transactional"].anomalies["aborted_read"] == 1
    assert "consumer" not in tally.stages  # skipped: nothing recorded
    # Neither took it for the committed canary of the same seq, still pending.
    assert sum(tally.stages["transactional"].outcomes.values()) == 0
    assert committed.judge.pending_count() == uncommitted.judge.pending_count() == 1
    assert not tally.stages["transactional"].ok


def test_the_aborted_flag_is_signed_and_read_back() -> None:
    plain = Canary("probe-a", 7, "kafka", 0, 3, produced_ns=1, trace_context="t")
    aborted = Canary("probe-a", 7, "kafka", 0, 3, produced_ns=1, trace_context="t", aborted=True)
    assert decode(encode(aborted, RING), RING) == aborted
    assert decode(encode(plain, RING), RING) == plain
    assert encode(plain, RING) != encode(aborted, RING)


def test_the_sink_takes_an_aborted_canary_for_no_canary_of_its_own() -> None:
    records = [
        encode(Canary("probe-a", 7, "kafka", 0, 3, produced_ns=1), RING),
        encode(Canary("probe-a", 7, "kafka", 0, 3, produced_ns=1, aborted=True), RING),
    ]
    verdicts = verify(pa.array(records, pa.binary()), RING, "probe-a", max_size=4096)
    assert list(verdicts.canary) == [True, False]
    assert list(verdicts.foreign) == [False, True]


def test_the_transactional_stage_reads_committed_and_aborts_every_nth_round() -> None:
    config = load(overrides={"stages": "consumer,transactional", "probe_id": "p1",
                             "transactions.abort_every": 5})  # fmt: skip
    layout = TRANSPORTS[config.targets[0]].layout(config)
    assert layout.stages == (StageName.CONSUMER, StageName.TRANSACTIONAL)
    assert layout.routed(StageName.TRANSACTIONAL)
    assert layout.abort_every == 5
    assert config.transactions.transactional_id(config.probe_id) == "synthetic-sla-probe.p1"
    plain = load(overrides={"stages": "consumer", "transactions.abort_every": 5})
    assert TRANSPORTS[plain.targets[0]].layout(plain).abort_every == 0
