"""A SCRAM password rotated under a running `sla-probe run` (probe.transport.kafka_client,
CredentialFiles): SASL_SSL with SCRAM-SHA-512 on Apache Kafka's three brokers, the
password in a file as a mounted Secret gives it. The user's password changes on the
cluster and in the file, then the brokers restart one by one, as an operator's rolling
restart does: the same process goes on delivering through every broker, loses no
canary, and counts no refused login.

Before, the clients kept the password they started with: after the first broker's
restart they could not log in to it again, and after the last the probe never delivered
again (the brokers logged "invalid credentials with SASL mechanism SCRAM-SHA-512")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from probe.apache_kafka.cluster import KafkaCluster, Listener
from tests.apache_kafka.kafka_admin import create_topic, describe, leaders
from tests.certificates import CertificateAuthority
from tests.conftest import RunningProbe, http_status, run_args, sample, wait_for

USER = "probe"
FIRST, SECOND = "first-pass-5e1b", "second-pass-c42a"
BROKERS = (1, 2, 3)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KafkaCluster, Path]]:
    authority = CertificateAuthority("brokers' CA")
    (tmp_path / "ca.crt").write_text(authority.pem)
    broker = authority.issue("127.0.0.1")
    with KafkaCluster(
        workdir=tmp_path / "kafka",
        scram_users={USER: FIRST},
        listeners={"SCRAM": Listener("SASL_SSL", broker.key_pem, broker.certificate_pem)},
    ) as running:
        yield running, tmp_path / "ca.crt"


def set_scram_password(servers: str, user: str, password: str) -> None:
    """As an operator rotates it: through the admin API (the PLAINTEXT listener)."""
    admin = AdminClient({"bootstrap.servers": servers})
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
    )
    for done in admin.alter_user_scram_credentials([upsert]).values():
        done.result(timeout=30)


def elect_preferred(servers: str, topic: str, partitions: int) -> None:
    """Give each partition back to its preferred leader (a broker back from a restart)."""
    admin = AdminClient({"bootstrap.servers": servers})
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    admin.elect_leaders(ElectionType.PREFERRED, wanted).result(timeout=30)


def in_sync(servers: str, topic: str) -> bool:
    return all(d.leader >= 0 and len(d.isr) == 3 for d in describe(servers, topic).values())


def test_a_rotated_scram_password_survives_a_rolling_restart(
    cluster: tuple[KafkaCluster, Path], start_probe: Any, tmp_path: Path, key_file: Path
) -> None:
    kafka, ca_file = cluster
    servers = kafka.bootstrap_servers
    topic = f"sla-{uuid.uuid4().hex[:8]}"
    # Broker b the preferred leader of partition b - 1.
    create_topic(servers, topic, 3, assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    password_file = tmp_path / "password"
    password_file.write_text(FIRST + "\n")
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({"kafka": {
        "tls": {"ca_file": str(ca_file)},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": USER,
                 "password_file": str(password_file)},
    }}))  # fmt: skip
    probe: RunningProbe = start_probe(
        *run_args(kafka.bootstrap_servers_of("SCRAM"), topic, key_file), "--config", str(config)
    )

    def delivered_through(broker: int) -> float:
        return sample(
            probe.metrics(), "synthetic_sla_broker_canaries_total",
            broker=str(broker), outcome="delivered", stage="consumer",
        )  # fmt: skip

    for broker in BROKERS:
        wait_for(lambda b=broker: delivered_through(b) >= 1, timeout=60, what=f"via {broker}")

    set_scram_password(servers, USER, SECOND)
    password_file.write_text(SECOND + "\n")
    wait_for(
        lambda: "kafka credentials renewed from kafka.sasl.password_file" in probe.log.read_text(),
        timeout=30, what="the new password taken",
    )  # fmt: skip

    for broker in BROKERS:
        kafka.node(broker).stop()
        kafka.start_nodes(broker)
        kafka.wait_ready()
        wait_for(lambda: in_sync(servers, topic), timeout=120, what=f"{broker} back in sync")
        elect_preferred(servers, topic, 3)
        wait_for(lambda: leaders(describe(servers, topic)) == set(BROKERS), timeout=60,
                 what=f"broker {broker} leading again")  # fmt: skip
        # Canaries through the restarted broker: the clients logged in to it anew.
        since = delivered_through(broker)
        wait_for(lambda b=broker, n=since: delivered_through(b) > n, timeout=60,
                 what=f"delivered via broker {broker} after its restart")  # fmt: skip

    wait_for(lambda: http_status(probe.port, "/readyz") == 200, timeout=30, what="ready")
    assert probe.process.poll() is None  # the same process throughout
    samples = probe.metrics()
    assert sample(samples, "synthetic_sla_canaries_total", outcome="lost") == 0
    assert sample(samples, "synthetic_sla_connect_errors_total", reason="sasl_failed") == 0
    # A broker down for its restart may be found unreachable: named, by its id.
    counted = {
        dict(labels)["broker"]: value
        for (name, labels), value in samples.items()
        if name == "synthetic_sla_connect_errors_total" and value > 0
    }
    print("connect errors counted by broker:", counted)
    assert set(counted) <= {str(b) for b in BROKERS}
    log = probe.log.read_text()
    assert FIRST not in log
    assert SECOND not in log
