"""Tiered storage (KIP-405) on the loopback cluster: the broker settings that turn it on
with Apache Kafka's own test remote storage manager, LocalTieredStorage (a directory
as the remote store; the ``tiered`` jar set, probe/apache_kafka/pom.xml), the settings
of a topic whose segments leave the brokers' disks within seconds, and the remote
store's fault: gone from under the brokers, then back.

>>> store = RemoteStore(workdir / "remote")  # doctest: +SKIP
>>> with KafkaCluster(1, workdir=workdir, settings=store.broker_settings(),
...                   release=TIERED) as cluster:  # doctest: +SKIP
...     store.make_unreadable()  # remote reads fail (UNKNOWN_SERVER_ERROR)
...     store.restore()
"""

from __future__ import annotations

from pathlib import Path

# What LocalTieredStorage keeps its segments under, inside its directory.
_STORE = "kafka-tiered-storage"

# A topic whose segments roll every second and leave the local log five seconds after:
# a test's canaries are read from the remote store a few seconds after their writing.
TOPIC_SETTINGS = {
    "remote.storage.enable": "true",
    "local.retention.ms": "5000",
    "segment.ms": "1000",
    "retention.ms": "3600000",
}


class RemoteStore:
    """LocalTieredStorage's directory, and its fault."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._away = directory.with_name(directory.name + ".unreadable")

    def broker_settings(self, replication: int = 1) -> dict[str, str]:
        """Tiered storage on, copying and deleting local segments within a second or
        two (a broker's own defaults wait 30 s before its first retention check)."""
        return {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": (
                "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
            ),
            "remote.log.storage.manager.impl.prefix": "rsm.config.",
            "rsm.config.dir": str(self.directory),
            "remote.log.metadata.manager.impl.prefix": "rlmm.config.",
            "remote.log.metadata.manager.listener.name": "INTERNAL",
            "rlmm.config.remote.log.metadata.topic.replication.factor": str(replication),
            "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
            "remote.log.manager.task.interval.ms": "1000",
            "log.retention.check.interval.ms": "1000",
            "log.initial.task.delay.ms": "0",
            "log.segment.delete.delay.ms": "0",
        }

    def make_unreadable(self) -> None:
        """The store gone from under the brokers (an object store that lost its bucket,
        or the brokers' access to it): its segments moved away, and a file where their
        directory was, so that no read and no copy gets through. Every remote read
        fails; the brokers keep the segments they cannot copy on their disks, and serve
        those locally."""
        store = self.directory / _STORE
        store.rename(self._away)
        store.write_text("unreadable: the game day's remote store fault\n")

    def restore(self) -> None:
        """The store back as it was: the brokers copy what they could not meanwhile."""
        store = self.directory / _STORE
        store.unlink()
        self._away.rename(store)
