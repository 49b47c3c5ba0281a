"""`sla-probe run` as a process against the real broker: hostile input, outages, stop."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from probe.core.canary import decode, encode
from probe.core.keys import KeyRing, generate_key_ring
from probe.embedded import EmbeddedBroker, free_loopback_port
from tests.conftest import (
    SLA_PROBE,
    RunningProbe,
    http_status,
    run_args,
    sample,
    target_report,
    wait_for,
)


def _read_one_canary(broker: EmbeddedBroker, topic: str, partition: int) -> bytes:
    """The first record of a partition, read by an independent client (librdkafka)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "independent-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        message = wait_for(
            lambda: (m := consumer.poll(0.5)) is not None and m.error() is None and m,
            timeout=20,
            what="a canary read back by confluent-kafka",
        )
        value = message.value()
        assert isinstance(value, bytes)
        return value
    finally:
        consumer.close()


def _produce(broker: EmbeddedBroker, topic: str, partition: int, payloads: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for payload in payloads:
        producer.produce(topic, payload, partition=partition)
    assert producer.flush(10) == 0


def test_hostile_records_are_counted_never_delivered(
    broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    tmp_path: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text("canary:\n  max_size: 4096\n")
    probe = start_probe(
        *run_args(broker.bootstrap_servers, topic, key_file), "--config", str(config)
    )
    wait_for(lambda: probe.canaries("delivered") >= 3, timeout=30, what="canaries delivered")

    keyring = KeyRing.from_json(key_file.read_text())
    real = _read_one_canary(broker, topic, 0)
    canary = decode(real, keyring)
    # One field changed, the original signature kept: what tampering in flight looks like.
    forged = encode(canary.__class__(**{**_fields(canary), "seq": canary.seq + 1000}), keyring)
    forged = forged[:-32] + real[-32:]
    foreign_key = encode(canary, generate_key_ring("intruder"))
    hostile = {
        "bad_signature": forged,
        "malformed": random.Random(7).randbytes(200),
        "unknown_key": foreign_key,
        "oversized": b"\0" * 5000,
        "unsupported_version": real[:2] + b"\x09" + real[3:],
    }
    delivered_before = probe.canaries("delivered")
    _produce(broker, topic, 0, [*hostile.values(), real])

    def invalid_counts() -> dict[str, float]:
        samples = probe.metrics()
        return {
            reason: sample(samples, "synthetic_sla_invalid_total", reason=reason)
            for reason in hostile
        }

    wait_for(
        lambda: all(n == 1 for n in invalid_counts().values()),
        timeout=20,
        what="each hostile record counted under its reason",
    )
    wait_for(
        lambda: sample(probe.metrics(), "synthetic_sla_duplicates_total") >= 1,
        timeout=20,
        what="the replayed canary counted as duplicate",
    )
    # Canaries keep flowing after the hostile burst.
    wait_for(
        lambda: probe.canaries("delivered") >= delivered_before + 3,
        timeout=20,
        what="canaries delivered after the hostile records",
    )
    samples = probe.metrics()
    # Nothing hostile was judged: every fate belongs to a canary the probe produced.
    fates = sum(
        sample(samples, "synthetic_sla_canaries_total", outcome=o)
        for o in ("delivered", "late", "lost", "produce_failed")
    )
    produced = sample(samples, "synthetic_sla_produce_latency_seconds_count")
    assert fates <= produced
    assert sample(samples, "synthetic_sla_canaries_total", outcome="lost") == 0
    assert probe.process.poll() is None
    assert http_status(probe.port, "/readyz") == 200


def _fields(canary: object) -> dict[str, object]:
    return {name: getattr(canary, name) for name in canary.__slots__}  # type: ignore[attr-defined]


def test_broker_outage_is_measured_survived_and_recovered(
    own_broker: EmbeddedBroker, topic: str, key_file: Path, start_probe: Callable[..., RunningProbe]
) -> None:
    probe = start_probe(*run_args(own_broker.bootstrap_servers, topic, key_file))
    wait_for(lambda: probe.canaries("delivered") >= 3, timeout=30, what="canaries delivered")

    own_broker.stop()
    wait_for(
        lambda: probe.canaries("produce_failed") + probe.canaries("lost") >= 3,
        timeout=30,
        what="the outage measured as produce_failed or lost canaries",
    )
    assert probe.process.poll() is None
    assert http_status(probe.port, "/healthz") == 200
    wait_for(lambda: http_status(probe.port, "/readyz") == 503, timeout=20, what="not ready")

    own_broker.start()
    delivered_during_outage = probe.canaries("delivered")
    wait_for(
        lambda: probe.canaries("delivered") >= delivered_during_outage + 3,
        timeout=60,
        what="canaries delivered again after the broker came back",
    )
    wait_for(lambda: http_status(probe.port, "/readyz") == 200, timeout=20, what="ready again")
    assert probe.process.poll() is None


def test_sigterm_stops_within_five_seconds(
    broker: EmbeddedBroker, topic: str, key_file: Path, start_probe: Callable[..., RunningProbe]
) -> None:
    probe = start_probe(*run_args(broker.bootstrap_servers, topic, key_file))
    wait_for(lambda: probe.canaries("delivered") >= 1, timeout=30, what="a delivered canary")
    took = probe.stop()
    assert probe.process.returncode == 0
    assert took < 5.0


def test_metrics_carry_the_process_series_every_exporter_has(
    broker: EmbeddedBroker, topic: str, key_file: Path, start_probe: Callable[..., RunningProbe]
) -> None:
    # What an SRE compares with the pod's limits and restarts: resident memory, start
    # time, CPU, file descriptors, and the interpreter.
    probe = start_probe(*run_args(broker.bootstrap_servers, topic, key_file))
    wait_for(lambda: probe.canaries("delivered") >= 1, timeout=30, what="a delivered canary")
    samples = probe.metrics()
    assert sample(samples, "process_resident_memory_bytes") > 0
    assert sample(samples, "process_start_time_seconds") > 0
    assert sample(samples, "process_open_fds") > 0
    assert sample(samples, "process_cpu_seconds_total") > 0
    assert sample(samples, "python_info") == 1


def test_run_refuses_to_start_without_a_key(broker: EmbeddedBroker, topic: str) -> None:
    result = subprocess.run(
        [SLA_PROBE, "run", "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "signing_key_file" in result.stderr


def test_run_with_an_ephemeral_key_when_told(
    broker: EmbeddedBroker, topic: str, start_probe: Callable[..., RunningProbe]
) -> None:
    probe = start_probe(*run_args(broker.bootstrap_servers, topic, None), "--allow-ephemeral-key")
    wait_for(lambda: probe.canaries("delivered") >= 1, timeout=30, what="a delivered canary")


def test_once_exits_zero_on_the_embedded_broker() -> None:
    result = subprocess.run(
        [SLA_PROBE, "once", "--embedded", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = target_report(result.stdout)
    assert report["ok"] is True
    consumer = report["stages"]["consumer"]
    assert consumer["outcomes"]["delivered"] == 9  # 3 rounds x 3 partitions
    assert consumer["outcomes"]["lost"] == 0
    assert consumer["latency_ms"]["p50"] is not None


def test_once_exits_one_when_the_broker_is_unreachable(topic: str) -> None:
    result = subprocess.run(
        [
            SLA_PROBE,
            "once",
            "--json",
            "--bootstrap-servers",
            f"127.0.0.1:{free_loopback_port()}",
            "--topic",
            topic,
            "--interval",
            "100ms",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "SLA_PROBE_SEND_TIMEOUT": "1s"},
    )
    assert result.returncode == 1
    report = target_report(result.stdout)
    assert report["ok"] is False
    assert report["error"].startswith("cannot connect to 127.0.0.1:")


def test_once_on_a_missing_topic_says_why_and_how_to_fix_it(
    broker: EmbeddedBroker, topic: str
) -> None:
    # No flag: a smoke test never creates the topic unless asked.
    result = subprocess.run(
        [SLA_PROBE, "once", "--json", "--bootstrap-servers", broker.bootstrap_servers,
         "--topic", topic],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    report = target_report(result.stdout)
    assert report["ok"] is False
    assert report["error"] == (
        f"topic {topic} not found: create it, or let the probe create it (--create-topic)"
    )
    table = subprocess.run(
        [SLA_PROBE, "once", "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic,
         "--no-create-topic"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert f"error: topic {topic} not found: create it" in table.stdout
    assert table.stdout.rstrip().endswith("result: FAIL")


def test_once_creates_the_topic_only_when_asked(
    broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """The running probe's config turns topic management on (kafka.create_topic,
    kafka.move_leaders): `once` with that same file, as a pipeline's smoke test against
    production would be, still leaves the topic alone; asked (--create-topic, or its
    variable), it creates it and passes."""
    config = tmp_path / "probe.yaml"
    config.write_text(
        f"kafka:\n  bootstrap_servers: {broker.bootstrap_servers}\n  topic: {topic}\n"
        "  create_topic: true\n  move_leaders: true\n"
    )
    once = [SLA_PROBE, "once", "--json", "--config", str(config)]
    untouched = subprocess.run(once, capture_output=True, text=True, timeout=120, check=False)
    assert untouched.returncode == 1, untouched.stdout + untouched.stderr
    assert target_report(untouched.stdout)["error"] == (
        f"topic {topic} not found: create it, or let the probe create it (--create-topic)"
    )
    asked = subprocess.run(
        once,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "SLA_PROBE_CREATE_TOPIC": "true"},
    )
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert target_report(asked.stdout)["stages"]["consumer"]["outcomes"]["delivered"] > 0


def _children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(child) for child in text.split()}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_once_stopped_by_a_signal_stops_its_broker_and_says_so(
    signum: signal.Signals, code: int
) -> None:
    process = subprocess.Popen(
        [SLA_PROBE, "once", "--embedded", "--rounds", "100", "--interval", "1s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        broker_pids = wait_for(
            lambda: _children(process.pid), timeout=30, what="the embedded broker started"
        )
        # Rounds under way: the broker is up and the probe is producing.
        wait_for(lambda: process.poll() is None, timeout=1, what="once running")
        process.send_signal(signum)
        out, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, err
    assert "Aborted!" not in err + out
    assert "Traceback" not in err
    assert f"interrupted by {signum.name}" in err
    wait_for(
        lambda: not any(_alive(pid) for pid in broker_pids),
        timeout=10,
        what="the embedded broker stopped, not orphaned",
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--interval", "soon"], "once.interval"),
        (["--interval", "0s"], "once.interval"),
        (["--send-timeout", "-1s"], "kafka.send_timeout"),
        (["--topic", ""], "kafka.topic"),
    ],
)
def test_bad_config_exits_two_naming_the_field(args: list[str], field: str) -> None:
    result = subprocess.run(
        [SLA_PROBE, "once", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert field in lines[0]


def test_unreachable_broker_alive_not_ready_and_stops_in_time(
    topic: str, key_file: Path, start_probe: Callable[..., RunningProbe]
) -> None:
    """No broker at all: the service keeps retrying, alive but not ready, and stops on time."""
    nowhere = f"127.0.0.1:{free_loopback_port()}"
    probe = start_probe(*run_args(nowhere, topic, key_file))
    wait_for(lambda: http_status(probe.port, "/readyz") == 503, timeout=10, what="not ready")
    assert http_status(probe.port, "/healthz") == 200
    assert sample(probe.metrics(), "synthetic_sla_target_ready") == 0
    took = probe.stop()
    assert probe.process.returncode == 0
    assert took < 5.0


def test_stopped_during_a_broker_outage_it_exits_cleanly_in_time(
    own_broker: EmbeddedBroker, topic: str, key_file: Path, start_probe: Callable[..., RunningProbe]
) -> None:
    probe = start_probe(*run_args(own_broker.bootstrap_servers, topic, key_file))
    wait_for(lambda: probe.canaries("delivered") >= 3, timeout=30, what="canaries delivered")
    own_broker.stop()
    wait_for(lambda: http_status(probe.port, "/readyz") == 503, timeout=20, what="not ready")
    wait_for(lambda: probe.canaries("produce_failed") >= 3, timeout=30, what="the outage measured")
    took = probe.stop()
    log = probe.log.read_text()
    assert probe.process.returncode == 0, log[-3000:]
    assert took < 5.0
    assert "Traceback" not in log


def test_run_on_a_missing_topic_says_so_once_and_when_it_recovers(
    broker: EmbeddedBroker, topic: str, key_file: Path, start_probe: Callable[..., RunningProbe]
) -> None:
    args = [a for a in run_args(broker.bootstrap_servers, topic, key_file) if a != "--create-topic"]
    args.append("--no-create-topic")
    probe = start_probe(*args)

    def said(text: str) -> list[str]:
        return [line for line in probe.log.read_text().splitlines() if text in line]

    missing = f"target kafka: topic {topic} not found: create it"
    wait_for(lambda: said(missing), timeout=20, what="the missing topic logged")
    wait_for(lambda: http_status(probe.port, "/readyz") == 503, timeout=10, what="not ready")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(topic, b"creates the topic", partition=0)  # the broker auto-creates it
    assert producer.flush(10) == 0
    # The broker picks the partition count of a topic it creates by itself.
    wait_for(lambda: said(f"target kafka: topic {topic}: "), timeout=20, what="recovery logged")
    wait_for(lambda: probe.canaries("delivered") >= 3, timeout=20, what="canaries delivered")
    assert len(said(missing)) == 1
