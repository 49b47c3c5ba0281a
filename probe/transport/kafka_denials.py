"""An operation the cluster's ACLs refused, in one line naming the ACL to grant.

Kafka answers a refused request with an error code and no word of the principal or
the operation (``TopicAuthorizationFailedError: [Error 29] ...``); the client knows
both. So a denial is named where it happens, by the operation the probe attempted::

    >>> denial(TopicAuthorizationFailedError(), "Write", config)
    'not authorized to Write to topic synthetic-sla as User:probe: grant User:probe
    Write on topic synthetic-sla (the ACLs the probe needs: docs/secured-clusters.md)'

(one line; wrapped here). No client and no I/O: aiokafka's error classes only tell
the refusals apart.
"""

from __future__ import annotations

from typing import Literal

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)

from probe.config import KafkaConfig

# What the probe asks of a topic: produce canaries, fetch them (and list offsets).
Operation = Literal["Write", "Read", "Describe"]

_VERB = {"Write": "Write to", "Read": "Read", "Describe": "Describe"}
_SEE = "(the ACLs the probe needs: docs/secured-clusters.md)"


def principal(config: KafkaConfig) -> str:
    """Who the brokers take the probe for: its SASL user, else the subject of its
    client certificate, else ANONYMOUS (Kafka's principal for neither)."""
    if config.sasl is not None:
        return f"User:{config.sasl.username}"
    if config.tls is not None and config.tls.cert_file is not None:
        return f"the subject of {config.setting('tls.cert_file')} ({config.tls.cert_file})"
    return "User:ANONYMOUS"


def denial(exc: BaseException, operation: Operation, config: KafkaConfig) -> str | None:
    """The line for an authorization error; None for any other error."""
    who = principal(config)
    grantee = who if who.startswith("User:") else "the probe's principal"
    if isinstance(exc, TopicAuthorizationFailedError):
        return (
            f"not authorized to {_VERB[operation]} topic {config.topic} as {who}: "
            f"grant {grantee} {operation} on topic {config.topic} {_SEE}"
        )
    if isinstance(exc, GroupAuthorizationFailedError):
        return (
            f"not authorized to use a consumer group as {who}: grant {grantee} Read on "
            f"the group {_SEE}"
        )
    if isinstance(exc, ClusterAuthorizationFailedError):
        # An idempotent producer's InitProducerId: brokers before 3.0 asked for
        # IdempotentWrite on the cluster (later ones take Write on the topic).
        needed = "IdempotentWrite on the cluster" if operation == "Write" else "the cluster ACL"
        instead = " (or kafka.idempotence: false)" if operation == "Write" else ""
        return (
            f"not authorized on the cluster as {who} to {_VERB[operation]} topic "
            f"{config.topic}: grant {grantee} {needed}{instead} {_SEE}"
        )
    return None
