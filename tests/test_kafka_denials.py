"""A refused operation in words: the operation, the principal, the ACL to grant (pure).
On a cluster that enforces ACLs: tests/apache_kafka/test_least_privilege.py."""

from __future__ import annotations

from pathlib import Path

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    NotLeaderForPartitionError,
    TopicAuthorizationFailedError,
)

from probe.config import KafkaConfig
from probe.transport.kafka_denials import denial, principal


def kafka(**sections: object) -> KafkaConfig:
    return KafkaConfig.model_validate(
        {"bootstrap_servers": "kafka:9093", "topic": "synthetic-sla", **sections}
    )


SASL = {"sasl": {"mechanism": "SCRAM-SHA-512", "username": "sla-probe", "password": "x"}}


def test_the_principal_is_the_sasl_user_else_the_certificate_else_anonymous(
    tmp_path: Path,
) -> None:
    assert principal(kafka(**SASL)) == "User:sla-probe"
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    tls = {"tls": {"cert_file": str(cert), "key_file": str(key)}}
    assert principal(kafka(**tls)) == f"the subject of kafka.tls.cert_file ({cert})"
    assert principal(kafka()) == "User:ANONYMOUS"


def test_a_refused_write_names_the_topic_acl_to_grant() -> None:
    line = denial(TopicAuthorizationFailedError(), "Write", kafka(**SASL))
    assert line == (
        "not authorized to Write to topic synthetic-sla as User:sla-probe: grant "
        "User:sla-probe Write on topic synthetic-sla "
        "(the ACLs the probe needs: docs/secured-clusters.md)"
    )


def test_a_refused_read_names_read() -> None:
    line = denial(TopicAuthorizationFailedError(), "Read", kafka())
    assert line is not None
    assert line.startswith("not authorized to Read topic synthetic-sla as User:ANONYMOUS: ")
    assert "grant User:ANONYMOUS Read on topic synthetic-sla" in line


def test_a_cluster_refusal_of_a_write_names_idempotent_write() -> None:
    line = denial(ClusterAuthorizationFailedError(), "Write", kafka(**SASL))
    assert line is not None
    assert "IdempotentWrite on the cluster (or kafka.idempotence: false)" in line


def test_a_group_refusal_names_the_group_acl() -> None:
    line = denial(GroupAuthorizationFailedError(), "Read", kafka(**SASL))
    assert line is not None
    assert "grant User:sla-probe Read on the group" in line


def test_any_other_error_is_not_a_denial() -> None:
    assert denial(NotLeaderForPartitionError(), "Write", kafka()) is None
    assert denial(TimeoutError(), "Read", kafka()) is None
