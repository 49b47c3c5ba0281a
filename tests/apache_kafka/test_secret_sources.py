"""The SASL password given only by a file or only by the environment reaches Apache
Kafka: `sla-probe once` passes through a SASL/PLAIN listener, and the password shows in
none of its output, debug logs included."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from probe.apache_kafka.cluster import KafkaCluster
from tests.conftest import SLA_PROBE

# Distinctive, so a match in the output can only be the password.
PASSWORD = "S3cret-f0r-sasl-8c1d"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    # Its client listener is SASL_PLAINTEXT with PLAIN users (plain_users).
    with KafkaCluster(
        1,
        workdir=tmp_path_factory.mktemp("kafka-sasl"),
        plain_users={"probe": PASSWORD},
    ) as running:
        yield running


@pytest.mark.parametrize("source", ["password_file", "environment"])
def test_once_passes_with_the_password_from(
    cluster: KafkaCluster, tmp_path: Path, source: str
) -> None:
    sasl: dict[str, str] = {"mechanism": "PLAIN", "username": "probe"}
    # Callers' SLA_PROBE_* variables must not reach the probe under test.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}
    if source == "password_file":
        secret = tmp_path / "sasl-password"
        secret.write_text(PASSWORD + "\n")  # as `echo` or a Secret's editor leaves it
        sasl["password_file"] = str(secret)
    else:
        env["SLA_PROBE_KAFKA_SASL_PASSWORD"] = PASSWORD
    config = tmp_path / "probe.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": cluster.bootstrap_servers, "sasl": sasl},
                "once": {"rounds": 2, "interval": "200ms"},
            }
        )
    )
    assert PASSWORD not in config.read_text()
    done = subprocess.run(
        [SLA_PROBE, "once", "--config", str(config), "--topic", f"sla-{uuid.uuid4().hex[:8]}",
         "--create-topic", "--probe-id", "probe-under-test", "--log-level", "debug"],
        env=env, check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "result: PASS"
    assert PASSWORD not in done.stdout
    assert PASSWORD not in done.stderr
