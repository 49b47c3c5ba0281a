"""Ephemeral keys: another run's canaries on the topic are foreign, never tampering."""

from __future__ import annotations

import subprocess
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from probe.core.canary import Canary, classify, encode
from probe.core.errors import CanaryRejected, RejectReason
from probe.core.judge import OwnProbe
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.keyfile import KeyRingSource
from tests.conftest import SLA_PROBE, target_report, wait_for

OWN = OwnProbe("host-a", incarnation=2_000)
RING = generate_key_ring("k-now")


def _canary(probe_id: str = "host-a", incarnation: int = 2_000) -> Canary:
    return Canary(probe_id, incarnation, "kafka", 0, 5, produced_ns=1)


def test_ephemeral_rings_have_random_key_ids() -> None:
    first, second = KeyRingSource.ephemeral(), KeyRingSource.ephemeral()

    assert first.ring.active_kid.startswith("ephemeral-")
    assert first.ring.active_kid != second.ring.active_kid
    assert first.path is None
    assert not first.reload()
    assert not first.poll()


def _verdict(payload: bytes) -> object:
    """The canary, the rejection's reason, or None for a foreign record."""
    verdict = classify(payload, RING, OWN.probe_id, OWN.incarnation, max_size=4096)
    return verdict.reason if isinstance(verdict, CanaryRejected) else verdict


def test_a_canary_of_an_earlier_run_of_this_probe_id_is_foreign() -> None:
    # The same host ran `once` before, with an ephemeral key this run does not hold.
    leftover = encode(_canary(incarnation=1_000), KeyRingSource.ephemeral().ring)

    assert _verdict(leftover) is None


def test_tampering_with_this_runs_canaries_is_still_invalid() -> None:
    ours = encode(_canary(), RING)
    changed_in_flight = ours[:-40] + bytes([ours[-40] ^ 1]) + ours[-39:]
    resigned_with_another_key = encode(_canary(), generate_key_ring("k-other"))

    assert _verdict(ours) == _canary()
    assert _verdict(changed_in_flight) is RejectReason.BAD_SIGNATURE
    # Claims this very process (probe id and incarnation) with a key it never had.
    assert _verdict(resigned_with_another_key) is (RejectReason.UNKNOWN_KEY)


def test_an_earlier_run_with_a_key_we_hold_but_a_wrong_signature_is_invalid() -> None:
    # Only an unknown key makes another incarnation foreign: with a key we hold, a
    # failed signature is damage, whoever claims to have written the record.
    forged = encode(_canary(incarnation=1_000), generate_key_ring("k-now"))

    assert _verdict(forged) is RejectReason.BAD_SIGNATURE


def _records_on(broker: EmbeddedBroker, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "watermarks"})
    try:
        total = 0
        for partition in range(3):
            try:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=2
                )
            except KafkaException:  # the topic may not exist yet
                return 0
            total += high
        return total
    finally:
        consumer.close()


def _once(broker: EmbeddedBroker, topic: str, *extra: str) -> list[str]:
    return [
        SLA_PROBE, "once", "--json", "--bootstrap-servers", broker.bootstrap_servers,
        "--topic", topic, "--create-topic", "--interval", "500ms", "--fetch-max-wait", "20ms",
        *extra,
    ]  # fmt: skip


def test_two_once_runs_on_one_topic_both_pass(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """Two `once` runs of one host (one probe id), each with its own ephemeral key.

    The second starts while the first is still producing, so each reads the other's
    canaries. (Runs strictly one after the other never read each other's records:
    a reader starts at the end of the log.)
    """
    first_log = tmp_path / "first.json"
    with first_log.open("wb") as out:
        first = subprocess.Popen(
            _once(broker, topic, "--rounds", "16"), stdout=out, stderr=subprocess.PIPE
        )
    try:
        wait_for(lambda: _records_on(broker, topic) >= 3, timeout=30, what="the first run")
        second = subprocess.run(
            _once(broker, topic, "--rounds", "3"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        first.wait(60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.stderr is not None
    first_stderr = first.stderr.read().decode()
    first.stderr.close()

    assert second.returncode == 0, second.stdout + second.stderr
    consumer = target_report(second.stdout)["stages"]["consumer"]
    assert consumer["invalid"] == 0
    assert consumer["foreign"] >= 1, "the second run did not read the first one's canaries"
    assert first.returncode == 0, first_log.read_text() + first_stderr
    assert target_report(first_log.read_text())["stages"]["consumer"]["invalid"] == 0
