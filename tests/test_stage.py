"""The stage's intake: partitions tracked, records classified."""

from __future__ import annotations

from probe.canary import Canary, encode
from probe.errors import RejectReason
from probe.judge import Judge, JudgePolicy, OwnProbe, StreamKey
from probe.keys import generate_key_ring
from probe.stage import Stage, classify

OWN = OwnProbe("probe-a", incarnation=7)
RING = generate_key_ring("k1")


def _stage() -> Stage:
    judge = Judge(JudgePolicy(freshness_ns=5, loss_timeout_ns=10), own=OWN)
    return Stage("consumer", "kafka", judge, RING, own=OWN, recorders=[])


def test_watch_follows_the_partition_list() -> None:
    stage = _stage()
    stage.watch([0, 1, 2], now_ns=0)
    stage.watch([0, 1], now_ns=5)
    assert [key.partition for key in stage.judge.streams()] == [0, 1]
    # Staleness of a kept partition still counts from its first watch.
    assert stage.judge.staleness_ns(10)[StreamKey("probe-a", "kafka", 0)] == 10


def test_foreign_only_when_another_probe_claims_an_unknown_key() -> None:
    canary = Canary("probe-b", 1, "kafka", 0, 0, produced_ns=1)
    theirs = encode(canary, generate_key_ring("other"))
    assert classify(theirs, RING, OWN, max_size=4096) is None
    ours_forged = encode(
        Canary("probe-a", 7, "kafka", 0, 0, produced_ns=1), generate_key_ring("other")
    )
    assert classify(ours_forged, RING, OWN, max_size=4096) is RejectReason.UNKNOWN_KEY
