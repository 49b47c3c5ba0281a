"""MirrorMaker 2 on loopback, from Maven Central's jars (connect-mirror, the pom's
profile ``mirror``): what replicates the canary topic from one
:class:`~probe.apache_kafka.cluster.KafkaCluster` to another in the mirror stage's
tests and game days.

It runs as users run it on its own: dedicated mode (``connect-mirror-maker.sh``'s main
class, ``org.apache.kafka.connect.mirror.MirrorMaker``), one flow ``source->target``,
its source, checkpoint and heartbeat connectors, and its workers' internal REST server
on a loopback port (KIP-710), which :meth:`start` waits for.

>>> with MirrorMaker2(source.bootstrap_servers, target.bootstrap_servers,
...                   workdir=Path("/tmp/mm2")) as mirror:  # doctest: +SKIP
...     ...  # synthetic-sla is replicated to the target as source.synthetic-sla

It is stopped (SIGTERM, its tasks commit their offsets), killed, paused (SIGSTOP: a
mirror that hangs) and started again with the same settings: it then replicates on from
the offsets it committed in the target cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from probe.apache_kafka.cluster import (
    _LOG4J2,
    JAVA_OPTIONS,
    MIRROR,
    QUICK_START,
    JvmServer,
    libs_dir,
)
from probe.core.errors import TransportError

# MirrorMaker 2's own names for its two replication policies: ``default`` prefixes a
# replicated topic with the source cluster's alias (``source.synthetic-sla``),
# ``identity`` keeps its name.
POLICIES: Mapping[str, str] = {
    "default": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
    "identity": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
}

# What the tests change of MirrorMaker 2's defaults, each for a reason: a target of
# fewer brokers than three takes its internal topics at replication factor 1; new
# topics and partitions are found every 2 s instead of every 10 minutes (a test's
# topic is created after the mirror starts); heartbeats and checkpoints every second;
# one task, as a mirror of one small topic has.
TEST_SETTINGS: Mapping[str, str] = {
    "replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    "config.storage.replication.factor": "1",
    "refresh.topics.interval.seconds": "2",
    "refresh.groups.interval.seconds": "2",
    "emit.heartbeats.interval.seconds": "1",
    "emit.checkpoints.interval.seconds": "1",
    "sync.group.offsets.enabled": "false",
    "tasks.max": "1",
}


class MirrorMaker2(JvmServer):
    """One MirrorMaker 2 process replicating ``topics`` (a regular expression, as its
    setting takes) from ``source`` to ``target`` (bootstrap server lists), named by
    the aliases given, under ``policy``. ``port`` is its internal REST server's."""

    name = "mirrormaker 2"
    # A cold JVM starting three connectors' herders on two shared cores.
    start_timeout = 120.0

    def __init__(
        self,
        source: str,
        target: str,
        *,
        workdir: Path,
        topics: str = "synthetic-sla",
        policy: Literal["default", "identity"] = "default",
        source_alias: str = "source",
        target_alias: str = "target",
        settings: Mapping[str, str] | None = None,
        libs: Path | None = None,
        java_options: Sequence[str] = (*JAVA_OPTIONS, *QUICK_START),
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(log_file=workdir / "mirrormaker.log")
        self.libs = libs or libs_dir(MIRROR)
        self.workdir = workdir
        self.source_alias = source_alias
        self.target_alias = target_alias
        self.java_options = tuple(java_options)
        flow = f"{source_alias}->{target_alias}"
        lines = {
            "clusters": f"{source_alias}, {target_alias}",
            f"{source_alias}.bootstrap.servers": source,
            f"{target_alias}.bootstrap.servers": target,
            f"{flow}.enabled": "true",
            f"{flow}.topics": topics,
            f"{target_alias}->{source_alias}.enabled": "false",
            "replication.policy.class": POLICIES[policy],
            "dedicated.mode.enable.internal.rest": "true",
            "listeners": f"http://127.0.0.1:{self.port}",
            **TEST_SETTINGS,
            **(settings or {}),
        }
        self.properties = workdir / "mm2.properties"
        self.properties.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
        (workdir / "log4j2.properties").write_text(_LOG4J2)

    def command(self) -> list[str]:
        if not (self.libs / "RESOLVED").exists():
            raise TransportError(
                f"MirrorMaker 2's jars are not in {self.libs}: run `make kafka` "
                "(python -m probe.apache_kafka install) first"
            )
        return [
            "java",
            *self.java_options,
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            f"{self.libs}/*",
            "org.apache.kafka.connect.mirror.MirrorMaker",
            str(self.properties),
        ]

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (its tasks commit their offsets), then SIGKILL."""
        super().stop(timeout)
