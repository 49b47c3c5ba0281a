"""The ``mirror`` section: the cluster MirrorMaker 2 replicates the canary topic to,
where the mirror stage reads it back (docs/mirrors.md).

The target cluster is a connection of its own (brokers, TLS, SASL: the same settings as
``kafka``'s, its password from ``mirror.sasl.*`` or SLA_PROBE_MIRROR_SASL_PASSWORD), and
the mirrored topic's name follows MirrorMaker 2's replication policy: ``default``
prefixes the source cluster's alias (``source.synthetic-sla``), ``identity`` keeps the
name. Everything else a reader needs (fetch wait, send timeout, client id) is the
``kafka`` section's: the mirror stage reads as the consumer stage does.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field

from probe.config.base import _Section
from probe.config.durations import HOUR, Duration, _between
from probe.config.kafka import KafkaTopic, SaslConfig, TlsConfig, _broker_list


class MirrorSaslConfig(SaslConfig):
    """SASL towards the target cluster; the password as ``kafka.sasl``'s, from
    ``mirror.sasl.password``, ``mirror.sasl.password_file`` or its variable."""

    password_setting: ClassVar[str] = "mirror.sasl.password"


# MirrorMaker 2's cluster aliases are its own names (clusters = source, target): any
# text its properties file takes, which a topic name then carries.
_ALIAS = r"^[a-zA-Z0-9._-]+$"


class MirrorConfig(_Section):
    """The mirror stage: the canary topic as MirrorMaker 2 replicated it to another
    cluster, judged there per source partition (MirrorMaker 2 keeps a record's
    partition, timestamp and headers)."""

    # The target cluster's brokers; required with the mirror stage.
    bootstrap_servers: Annotated[str | None, AfterValidator(_broker_list)] = None
    tls: TlsConfig | None = None
    sasl: MirrorSaslConfig | None = None
    # MirrorMaker 2's alias of the source cluster (its `clusters` setting): the
    # default policy's prefix of the mirrored topic.
    source_alias: Annotated[str, Field(min_length=1, max_length=200, pattern=_ALIAS)] = "source"
    # MirrorMaker 2's replication.policy.class: DefaultReplicationPolicy (default) or
    # IdentityReplicationPolicy (identity).
    replication_policy: Literal["default", "identity"] = "default"
    # The default policy's replication.policy.separator.
    separator: Annotated[str, Field(min_length=1, max_length=20, pattern=_ALIAS)] = "."
    # The mirrored topic's name, where a custom policy names it otherwise; None: as the
    # policy names it.
    topic: KafkaTopic | None = None
    # The mirror stage's latency SLI threshold (replication latency); None: the
    # metrics.latency_threshold every other stage but the sink has. A mirror across
    # regions adds the link's round trips and MirrorMaker 2's batching.
    latency_threshold: Annotated[Duration | None, _between(0.001, HOUR)] = None

    def mirrored_topic(self, source_topic: str) -> str:
        """The name the canary topic has on the target cluster.

        >>> MirrorConfig().mirrored_topic("synthetic-sla")
        'source.synthetic-sla'
        >>> MirrorConfig(replication_policy="identity").mirrored_topic("synthetic-sla")
        'synthetic-sla'
        """
        if self.topic is not None:
            return self.topic
        if self.replication_policy == "identity":
            return source_topic
        return f"{self.source_alias}{self.separator}{source_topic}"
