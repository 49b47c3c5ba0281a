"""A member of the probe's share group that stops acknowledging: it joins the share
stage's group (KIP-932) on the canary topic, acquires records, and freezes with them
(SIGSTOP: no acknowledgement, no heartbeat, as a consumer stuck in a pause or a
deadlock), until healed (SIGKILL).

Its records' acquisition locks run out (``group.share.record.lock.duration.ms``, 30 s
by default) and its session ends (``group.share.session.timeout.ms``, 45 s), so the
broker delivers what it held again, with a higher delivery count, to the probe's
member, which is given its partitions back: late, never lost. A share group hands
each partition to one member while it has no more members than partitions, so what
was written to the frozen member's partitions in between waits too.

The member runs in a process of its own (``python -m
probe.gameday.faults.share_member``): librdkafka heartbeats from threads of its own,
which only a stopped process stops. Only librdkafka's share consumer and the broker:
the member goes through whatever the probe's bootstrap servers are.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from probe.core.errors import ProbeError

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import ShareMemberStall

# How long the member may take to join and acquire its first records: a share group's
# assignment reaches a new member at its next heartbeat (5 s) or two.
ACQUIRED_WITHIN = 60.0
ACQUIRED = "acquired"


class ShareMemberStallError(ProbeError):
    """The stalling member could not join or acquire anything."""


class StalledShareMember:
    """A member of share group ``group_id`` on ``topic`` that acquires records and
    freezes with them::

        member = StalledShareMember("127.0.0.1:9092", "canaries", "g.share")
        member.start()    # returns once it holds records, frozen
        member.acquired   # how many
        member.stop()     # killed
    """

    def __init__(self, bootstrap_servers: str, topic: str, group_id: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.group_id = group_id
        self.acquired = 0
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, self.bootstrap_servers, self.topic, self.group_id],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._process = process
        assert process.stdout is not None
        # One line, then the process stops itself; nothing if it gave up (and exited).
        line = process.stdout.readline().split()
        if len(line) != 2 or line[0] != ACQUIRED:
            self.stop()
            raise ShareMemberStallError(
                f"the stalling member of share group {self.group_id} acquired nothing "
                f"within {ACQUIRED_WITHIN:g}s"
            )
        self.acquired = int(line[1])

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()  # a stopped process dies of SIGKILL too
            self._process.wait(10)
            self._process = None


class ShareMemberStallFault:
    """A member of the probe's share group that acquires records and freezes with
    them until healed."""

    def __init__(self, spec: ShareMemberStall, targets: LocalTargets) -> None:
        self.member = StalledShareMember(
            targets.bootstrap_servers, targets.topic, targets.probe_group_id("share")
        )

    @property
    def acquired(self) -> int:
        return self.member.acquired

    def inject(self) -> None:
        self.member.start()

    def heal(self) -> None:
        self.member.stop()


def _acquire_and_freeze(bootstrap_servers: str, topic: str, group_id: str) -> int:
    """The member's process: join, acquire, say how many, stop (never acknowledging)."""
    from confluent_kafka import ShareConsumer  # noqa: PLC0415

    member = ShareConsumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id,
            "share.acknowledgement.mode": "explicit",
            "client.id": "gameday-stalled-share-member",
        }
    )
    member.subscribe([topic])
    deadline = time.monotonic() + ACQUIRED_WITHIN
    while time.monotonic() < deadline:
        held = [message for message in member.poll(0.5) if message.error() is None]
        if held:
            print(ACQUIRED, len(held), flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            return 0
    return 1


if __name__ == "__main__":
    arguments = argparse.ArgumentParser(description=__doc__)
    arguments.add_argument("bootstrap_servers")
    arguments.add_argument("topic")
    arguments.add_argument("group_id")
    given = arguments.parse_args()
    sys.exit(_acquire_and_freeze(given.bootstrap_servers, given.topic, given.group_id))
