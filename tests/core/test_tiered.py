"""The tiered read's judgement of what a fetch returned (probe.core.tiered), the turn of
partitions it reads, and what the canary topic's settings say of where it reads."""

from __future__ import annotations

import pytest

from probe.core.canary import Canary, encode
from probe.core.keys import KeyRing
from probe.core.tiered import (
    TieredOutcome,
    judge_records,
    next_partitions,
    storage_problem,
)

RING = KeyRing({"k1": b"s" * 32}, active="k1")
OTHER_RING = KeyRing({"theirs": b"t" * 32}, active="theirs")
INCARNATION = 1_700_000_000_000_000_000
ASKED_NS = 1_800_000_000_000_000_000
SECOND = 1_000_000_000
# Ten minutes on the brokers' disks.
RETAINED = {"local.retention.ms": "600000"}


def canary(produced_ns: int, probe_id: str = "probe-a", ring: KeyRing = RING) -> bytes:
    return encode(Canary(probe_id, INCARNATION, "kafka", 0, 7, produced_ns), ring)


def judged(*payloads: bytes, read_ns: int = ASKED_NS + 3600 * SECOND) -> object:
    return judge_records(
        0,
        payloads,
        asked_ns=ASKED_NS,
        read_ns=read_ns,
        first_record_s=1.5,
        within_s=40.0,
        keyring=RING,
        probe_id="probe-a",
        incarnation=INCARNATION,
        max_size=65536,
    )


def test_a_canary_written_when_asked_for_is_read_with_its_age() -> None:
    read = judged(canary(ASKED_NS + 10 * SECOND))
    assert read.outcome is TieredOutcome.READ
    assert read.first_record_s == 1.5
    assert read.canary_age_s == pytest.approx(3590.0)
    assert read.judged


def test_other_probes_records_are_passed_over_for_the_first_canary() -> None:
    theirs = canary(ASKED_NS, probe_id="probe-b", ring=OTHER_RING)
    read = judged(b"not a canary at all?", theirs, canary(ASKED_NS + SECOND))
    # A record that is no canary at all is invalid only if it claims this probe: this
    # one claims nothing, so it is malformed, and counted as the read's finding.
    assert read.outcome is TieredOutcome.INVALID
    assert read.reason == "malformed"
    assert judged(theirs, canary(ASKED_NS + SECOND)).outcome is TieredOutcome.READ


def test_a_canary_that_fails_its_signature_is_invalid() -> None:
    tampered = bytearray(canary(ASKED_NS))
    tampered[-1] ^= 0xFF
    read = judged(bytes(tampered))
    assert (read.outcome, read.reason) == (TieredOutcome.INVALID, "bad_signature")
    assert read.judged


def test_a_canary_written_long_after_the_moment_asked_is_not_judged() -> None:
    # The log starts later than asked (a topic younger than tiered.age): what is found
    # is a recent canary, likely still on the brokers' disks.
    read = judged(canary(ASKED_NS + 41 * SECOND))
    assert read.outcome is TieredOutcome.NO_CANARY
    assert not read.judged
    assert judged(theirs := canary(ASKED_NS, "probe-b", OTHER_RING)).outcome is (
        TieredOutcome.NO_CANARY
    ), theirs
    assert judged().outcome is TieredOutcome.NO_CANARY


def test_partitions_are_read_in_turn() -> None:
    assert next_partitions([0, 1, 2, 3, 4], None, 2) == [0, 1]
    assert next_partitions([0, 1, 2, 3, 4], 1, 2) == [2, 3]
    assert next_partitions([0, 1, 2, 3, 4], 3, 3) == [4, 0, 1]
    assert next_partitions([0, 1, 2], 2, 5) == [0, 1, 2]
    # A partition gone (the topic shrank, as a re-created one may): on from the next.
    assert next_partitions([0, 2, 4], 3, 1) == [4]
    assert next_partitions([], None, 3) == []


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"remote.storage.enable": "false"}, "remote.storage.enable=false"),
        ({}, "remote.storage.enable=false"),
        (
            {"remote.storage.enable": "true", "local.retention.ms": "7200000"},
            "keeps records on the brokers' disks for 7200000 ms",
        ),
        (
            {"remote.storage.enable": "true", "local.retention.ms": "-2", "retention.ms": "-1"},
            "keeps records on the brokers' disks for ever",
        ),
        (
            {"remote.storage.enable": "true", **RETAINED, "retention.ms": "1800000"},
            "deletes records after 1800000 ms",
        ),
        ({"remote.storage.enable": "true", **RETAINED, "retention.ms": "604800000"}, None),
    ],
)
def test_the_topic_settings_say_whether_reads_reach_the_remote_store(
    settings: dict[str, str | None], says: str | None
) -> None:
    problem = storage_problem(settings, 3600)
    assert (problem is None) if says is None else (problem is not None and says in problem)
