"""Faults of the mirror: MirrorMaker 2 between the probe's cluster and the run's target
cluster (a probe with the mirror stage, ``broker: apache-kafka``). Each acts on the
mirror alone: the source cluster and every other stage are left as they are, which is
what the game days assert (the mirror stage pages, no other)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from probe.gameday.faults.base import WrongBrokerError
from probe.transport.kafka_admin import ClusterAdmin

if TYPE_CHECKING:
    from probe.apache_kafka.cluster import KafkaCluster
    from probe.apache_kafka.mirror import MirrorMaker2
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import MirrorStall, MirrorStop, MirrorTopicRecreate


def _mirror(targets: LocalTargets) -> MirrorMaker2:
    if targets.mirror is None:
        raise WrongBrokerError("this fault needs MirrorMaker 2: a probe with the mirror stage")
    return targets.mirror


class MirrorStopFault:
    def __init__(self, spec: MirrorStop, targets: LocalTargets) -> None:
        self.mirror = _mirror(targets)

    def inject(self) -> None:
        self.mirror.stop()

    def heal(self) -> None:
        self.mirror.start()


class MirrorStallFault:
    """Paused ``pause`` seconds of every ``every`` by a thread of its own, until healed
    (then resumed, whatever part of its cycle it was in)."""

    def __init__(self, spec: MirrorStall, targets: LocalTargets) -> None:
        self.mirror = _mirror(targets)
        self.pause, self.every = spec.pause, spec.every
        self._healed = threading.Event()
        self._cycling: threading.Thread | None = None

    def inject(self) -> None:
        self._healed.clear()
        self._cycling = threading.Thread(target=self._cycle, name="mirror-stall", daemon=True)
        self._cycling.start()

    def _cycle(self) -> None:
        while not self._healed.is_set():
            self.mirror.pause()
            # Timed waits on the heal event: the fault's own clock, not a condition.
            if self._healed.wait(self.pause):
                break
            self.mirror.resume()
            self._healed.wait(self.every - self.pause)
        self.mirror.resume()

    def heal(self) -> None:
        self._healed.set()
        if self._cycling is not None:
            self._cycling.join()
        self.mirror.resume()


class MirrorTopicRecreateFault:
    def __init__(self, spec: MirrorTopicRecreate, targets: LocalTargets) -> None:
        _mirror(targets)
        if targets.mirror_cluster is None or targets.mirrored_topic is None:
            raise WrongBrokerError("this fault needs the mirror's target cluster")
        self.cluster: KafkaCluster = targets.mirror_cluster
        self.topic = targets.mirrored_topic

    def inject(self) -> None:
        with ClusterAdmin(self.cluster.bootstrap_servers) as admin:
            admin.delete_topic(self.topic)

    def heal(self) -> None:
        # MirrorMaker 2 creates the topic again by itself: that is what is measured.
        pass
