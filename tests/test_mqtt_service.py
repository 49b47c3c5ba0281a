"""`sla-probe run` and `once` with an MQTT target, as processes against real Mosquitto."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import (
    SLA_PROBE,
    RunningProbe,
    http_status,
    once_report,
    sample,
    target_report,
    wait_for,
)
from tests.mosquitto import Mosquitto


def mqtt_run_args(url: str, prefix: str, key_file: Path) -> list[str]:
    """Flags for a quick `sla-probe run` on an MQTT target only: one-second rounds."""
    return [
        "--mqtt-url", url, "--mqtt-topic-prefix", prefix, "--signing-key-file", str(key_file),
        "--probe-id", "mqtt-probe-under-test", "--interval", "1s",
    ]  # fmt: skip


def _delivered(probe: RunningProbe) -> float:
    return probe.canaries("delivered", stage="mqtt")


def test_run_survives_a_mosquitto_restart(
    tmp_path: Path, topic_prefix: str, key_file: Path, start_probe: Callable[..., RunningProbe]
) -> None:
    with Mosquitto(tmp_path / "broker") as broker:
        probe = start_probe(*mqtt_run_args(broker.url, topic_prefix, key_file))
        wait_for(lambda: _delivered(probe) >= 3, timeout=20, what="canaries delivered")
        assert http_status(probe.port, "/readyz") == 200
        assert sample(probe.metrics(), "synthetic_sla_partitions", target="mqtt") == 3

        broker.stop()
        wait_for(lambda: http_status(probe.port, "/readyz") == 503, timeout=10, what="not ready")
        wait_for(
            lambda: probe.canaries("produce_failed", stage="mqtt") >= 1,
            timeout=10,
            what="the outage measured as produce_failed canaries",
        )
        assert http_status(probe.port, "/healthz") == 200

        broker.start()
        before = _delivered(probe)
        wait_for(
            lambda: _delivered(probe) >= before + 3,
            timeout=40,
            what="canaries delivered again after the restart",
        )
        wait_for(lambda: http_status(probe.port, "/readyz") == 200, timeout=10, what="ready")
        # Publisher and subscriber each came back once.
        samples = probe.metrics()
        assert sample(samples, "synthetic_sla_reconnects_total", target="mqtt") >= 2
        assert probe.process.poll() is None
        assert probe.stop() < 5.0
        assert probe.process.returncode == 0


def test_run_with_a_wrong_password_is_alive_not_ready_and_retrying(
    tmp_path: Path, topic_prefix: str, key_file: Path, start_probe: Callable[..., RunningProbe]
) -> None:
    with Mosquitto(tmp_path / "broker", users={"probe": "right"}) as broker:
        probe = start_probe(
            *mqtt_run_args(broker.url, topic_prefix, key_file),
            "--mqtt-username",
            "probe",
            env={"SLA_PROBE_MQTT_PASSWORD": "pw-n0t-r1ght"},
        )
        wait_for(lambda: http_status(probe.port, "/readyz") == 503, timeout=10, what="not ready")
        assert http_status(probe.port, "/healthz") == 200
        assert sample(probe.metrics(), "synthetic_sla_target_ready", target="mqtt") == 0

        def retry_lines() -> list[str]:
            return [line for line in probe.log.read_text().splitlines() if "retrying in" in line]

        wait_for(lambda: len(retry_lines()) >= 3, timeout=15, what="retries with backoff")
        line = json.loads(retry_lines()[0])
        assert line["level"] == "warning"
        assert line["msg"].startswith(
            f"target mqtt: cannot connect to 127.0.0.1:{broker.port}: the broker refused the "
            "login of user 'probe' (Not authorized): check mqtt.username and mqtt.password; "
            "retrying in"
        )
        assert "pw-n0t-r1ght" not in probe.log.read_text()  # the password never reaches a log
        assert probe.process.poll() is None
        assert probe.stop() < 5.0
        assert probe.process.returncode == 0


def _once(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLA_PROBE, "once", "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")},
            **(env or {}),
        },
    )


def test_once_with_only_mqtt_probes_only_mqtt(mosquitto: Mosquitto, topic_prefix: str) -> None:
    """No embedded Kafka broker is started when only an MQTT broker is given."""
    started = time.monotonic()
    result = _once("--mqtt-url", mosquitto.url, "--mqtt-topic-prefix", topic_prefix)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 10
    report = target_report(result.stdout)
    assert report["target"] == "mqtt"
    assert list(report["stages"]) == ["mqtt"]
    assert report["stages"]["mqtt"]["outcomes"]["delivered"] == 9  # 3 rounds x 3 shards


def test_once_probes_kafka_and_mqtt_together(mosquitto: Mosquitto, topic_prefix: str) -> None:
    result = _once(
        "--embedded", "--mqtt-url", mosquitto.url,
        "--mqtt-topic-prefix", topic_prefix, "--mqtt-target", "edge",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = once_report(result.stdout)
    assert report["ok"] is True
    targets = {target["target"]: target for target in report["targets"]}
    assert [target["target"] for target in report["targets"]] == ["kafka", "edge"]
    assert targets["kafka"]["stages"]["consumer"]["outcomes"]["delivered"] == 9
    assert targets["edge"]["stages"]["mqtt"]["outcomes"]["delivered"] == 9


def test_once_fails_with_the_reason_when_mqtt_refuses(tmp_path: Path, topic_prefix: str) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text("judge:\n  freshness: 1s\nonce:\n  loss_timeout: 1s\n")
    with Mosquitto(tmp_path / "broker", users={"probe": "right"}) as broker:
        result = _once(
            "--config", str(config), "--mqtt-url", broker.url, "--mqtt-username", "probe",
            env={"SLA_PROBE_MQTT_PASSWORD": "pw-n0t-r1ght"},
        )  # fmt: skip
    assert result.returncode == 1
    assert once_report(result.stdout)["ok"] is False
    errors = [json.loads(line) for line in result.stderr.splitlines() if '"error"' in line]
    assert errors[-1]["msg"] == (
        f"cannot probe mqtt: cannot connect to 127.0.0.1:{broker.port}: the broker refused "
        "the login of user 'probe' (Not authorized): check mqtt.username and mqtt.password"
    )
