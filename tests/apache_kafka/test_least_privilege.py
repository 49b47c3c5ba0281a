"""The ACL list of docs/secured-clusters.md ("ACLs") is exactly what the probe needs,
proven on a cluster that enforces ACLs (StandardAuthorizer, nothing allowed without an
ACL): the probe authenticates as User:probe over SASL/PLAIN and gets only what the list
names.

Probing an existing topic needs Write and Read on it (both imply Describe;
DescribeConfigs is optional: without it min.insync.replicas is unknown); either one
taken away fails the smoke test. Topic management adds Create and Alter on the topic,
and Alter on the cluster for what moves leaders (partition reassignment, preferred
elections), unless told not to move leaders (kafka.move_leaders: false).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from probe.apache_kafka.cluster import KafkaCluster, Listener
from tests.apache_kafka.kafka_admin import admin, create_topic, describe, leaders
from tests.certificates import CertificateAuthority
from tests.conftest import SLA_PROBE, RunningProbe, sample, target_report, wait_for

USERS = {"admin": "admin-secret", "probe": "probe-secret"}
AS_ADMIN = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanisms": "PLAIN",
    "sasl_username": "admin",
    "sasl_password": USERS["admin"],
}
# Read and Write imply Describe in Kafka's ACLs: Describe need not be granted too.
PROBING = (AclOperation.WRITE, AclOperation.READ)
OPTIONAL = (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt, and broker.key/broker.crt for the SASL_SSL listener (127.0.0.1)."""
    files = tmp_path_factory.mktemp("acl-tls")
    authority = CertificateAuthority("brokers' CA")
    (files / "ca.crt").write_text(authority.pem)
    authority.issue("127.0.0.1").write(files, "broker")
    return files


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, tls_files: Path) -> Iterator[KafkaCluster]:
    """SASL/PLAIN on the main listener; SASL_SSL with SCRAM-SHA-512 on "SCRAM", for the
    same User:probe (SCRAM credentials made at format)."""
    scram = Listener(
        "SASL_SSL", (tls_files / "broker.key").read_text(), (tls_files / "broker.crt").read_text()
    )
    settings = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # The brokers and controllers talk as User:ANONYMOUS on their own listeners.
        "super.users": "User:ANONYMOUS;User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }
    workdir = tmp_path_factory.mktemp("kafka-acls")
    with KafkaCluster(
        workdir=workdir,
        settings=settings,
        plain_users=USERS,
        scram_users={"probe": USERS["probe"]},
        listeners={"SCRAM": scram},
    ) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _no_acls_left(secured: KafkaCluster) -> Iterator[None]:
    """Each test grants User:probe exactly what it names: none of the last test's ACLs."""
    yield
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:probe", None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    client = admin(secured.bootstrap_servers, **AS_ADMIN)
    for done in client.delete_acls([everything]).values():
        done.result(timeout=30)


def grant(
    cluster: KafkaCluster, topic: str, *operations: AclOperation, cluster_alter: bool = False
) -> None:
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:probe", "*",
                   operation, AclPermissionType.ALLOW)
        for operation in operations
    ]  # fmt: skip
    if cluster_alter:
        bindings.append(
            AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                       "User:probe", "*", AclOperation.ALTER, AclPermissionType.ALLOW)
        )  # fmt: skip
    client = admin(cluster.bootstrap_servers, **AS_ADMIN)
    for done in client.create_acls(bindings).values():
        done.result(timeout=30)


def probe_config(cluster: KafkaCluster, topic: str, tmp_path: Path, **kafka: object) -> Path:
    path = tmp_path / "probe.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "kafka": {
                    "bootstrap_servers": cluster.bootstrap_servers,
                    "topic": topic,
                    "sasl": {"mechanism": "PLAIN", "username": "probe",
                             "password": USERS["probe"]},
                    **kafka,
                }
            }
        )
    )  # fmt: skip
    return path


def once(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLA_PROBE, "once", "--config", str(config), "--json"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("missing", [None, *OPTIONAL, *PROBING], ids=lambda m: f"without-{m}")
def test_probing_an_existing_topic_needs_write_and_read(
    secured: KafkaCluster, topic: str, tmp_path: Path, missing: AclOperation | None
) -> None:
    create_topic(secured.bootstrap_servers, topic, 3, **AS_ADMIN)
    granted = [op for op in (*PROBING, *OPTIONAL) if op != missing]
    grant(secured, topic, *granted)

    done = once(probe_config(secured, topic, tmp_path, create_topic=False))

    if missing in PROBING:
        assert done.returncode == 1, done.stdout + done.stderr
        report = target_report(done.stdout)
        outcomes = report["stages"]["consumer"]["outcomes"]
        assert outcomes["delivered"] == 0
        # Named as the operation refused and the ACL to grant, for User:probe.
        print(report["error"])
        if missing is AclOperation.WRITE:
            assert outcomes["produce_failed"] == sum(outcomes.values())
            assert report["error"].startswith(
                f"not authorized to Write to topic {topic} as User:probe: "
                f"grant User:probe Write on topic {topic}"
            ), report["error"]
        else:
            assert f"not authorized to Read topic {topic} as User:probe: " in report["error"]
            assert f"grant User:probe Read on topic {topic}" in report["error"]
    else:
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("cluster_alter", "move_leaders"),
    [(True, True), (False, True), (False, False)],
    ids=["cluster-alter", "topic-only", "no-move-leaders"],
)
def test_moving_leaders_needs_alter_on_the_cluster(  # noqa: PLR0917 - fixtures
    secured: KafkaCluster,
    topic: str,
    key_file: Path,
    tmp_path: Path,
    start_probe: Callable[..., RunningProbe],
    cluster_alter: bool,
    move_leaders: bool,
) -> None:
    """The topic is created with every partition preferring broker 1 (as a topic made
    before brokers 2 and 3 joined): only a reassignment and an election let the probe
    measure them."""
    servers = secured.bootstrap_servers
    create_topic(servers, topic, 3, assignment=[[1, 2, 3], [1, 3, 2], [1, 2, 3]], **AS_ADMIN)
    grant(secured, topic, *PROBING, AclOperation.DESCRIBE_CONFIGS, AclOperation.CREATE,
          AclOperation.ALTER, cluster_alter=cluster_alter)  # fmt: skip
    config = probe_config(secured, topic, tmp_path, move_leaders=move_leaders)
    probe = start_probe("--config", str(config), "--signing-key-file", str(key_file),
                        "--interval", "1s")  # fmt: skip

    def unmeasured() -> float:
        return sample(probe.metrics(), "synthetic_sla_brokers_without_canary_leader")

    wait_for(lambda: probe.canaries("delivered") >= 3, timeout=60, what="a round delivered")
    if cluster_alter:
        wait_for(lambda: leaders(describe(servers, topic, **AS_ADMIN)) == {1, 2, 3},
                 timeout=60, what="every broker leading a canary partition")  # fmt: skip
        wait_for(lambda: unmeasured() == 0, timeout=30, what="every broker measured")
        return
    if move_leaders:
        wait_for(
            lambda: "needs Alter on the cluster" in probe.log.read_text(),
            timeout=60,
            what="the refused reassignment logged, with the ACL it needs",
        )
    else:
        # Five refreshes later nothing was asked of the cluster, nothing refused.
        wait_for(lambda: probe.canaries("delivered") >= 5 * 3, timeout=60, what="5 rounds")
        assert "cannot give every broker" not in probe.log.read_text()
    assert leaders(describe(servers, topic, **AS_ADMIN)) == {1}
    assert unmeasured() == 2


def test_every_stage_passes_through_sasl_ssl_with_scram_and_only_the_probing_acls(
    secured: KafkaCluster, topic: str, tmp_path: Path, tls_files: Path, key_file: Path
) -> None:
    """The consumer, the Spark sink's readers (on the driver and the executors) and
    reconcile, over SASL_SSL with SCRAM-SHA-512, with Write and Read on the topic and
    nothing else."""
    create_topic(secured.bootstrap_servers, topic, 3, **AS_ADMIN)
    grant(secured, topic, *PROBING)
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {
            "bootstrap_servers": secured.bootstrap_servers_of("SCRAM"),
            "topic": topic,
            "create_topic": False,
            "tls": {"ca_file": str(tls_files / "ca.crt")},
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "probe",
                     "password": USERS["probe"]},
        },
        "sink": {"path": str(tmp_path / "sink")},
    }))  # fmt: skip
    done = subprocess.run(
        [SLA_PROBE, "once", "--config", str(config), "--stages", "consumer,sink",
         "--signing-key-file", str(key_file), "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    stages = target_report(done.stdout)["stages"]
    assert stages["consumer"]["outcomes"]["delivered"] == 9
    assert stages["sink"]["outcomes"]["delivered"] == 9

    reconciled = subprocess.run(
        [SLA_PROBE, "reconcile", "--config", str(config), "--signing-key-file", str(key_file),
         "--settle", "1s", "--window-offsets", "1", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr[-3000:]
    report = json.loads(reconciled.stdout)
    assert report["ok"] is True, report
    assert report["judged"] >= 9, report  # and the sink's warm-up canaries
    assert USERS["probe"] not in done.stderr + reconciled.stderr
