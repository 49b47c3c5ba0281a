"""What a tiered read found: the pure half of the tiered read (probe.stages.tiered reads,
probe.transport.kafka_tiered speaks to the brokers).

A tiered read asks a partition's leader for the first record written at or after a
moment ``age`` ago (a timestamp lookup), then fetches from there until a record comes,
an error comes or the read's time is up. What it found is one :class:`TieredOutcome`:

- ``read``: a canary that verifies, written about when it was asked for;
- ``failed``: the broker answered the lookup or the fetch with an error (its name is
  the reason), or no record came in time (``timeout``): a remote read that did not
  serve;
- ``invalid``: a record of this probe's that fails verification (corruption in the
  remote store, or tampering);
- ``no_canary``: nothing to judge: the partition holds no canary of this probe's from
  then (the topic is younger than ``age``, the probe was not writing then, the
  records there are other probes'). Not counted in the SLI.

``read`` and ``failed`` are the tiered read's availability SLI; the time to the first
record of a ``read``, its latency SLI.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from probe.core.canary import Canary, classify
from probe.core.errors import CanaryRejected
from probe.core.keys import KeyRing


class TieredOutcome(StrEnum):
    READ = "read"
    FAILED = "failed"
    INVALID = "invalid"
    NO_CANARY = "no_canary"


# The reason of a read that got no record before the read's time was up.
TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class TieredRead:
    """One partition's tiered read: its outcome, why it failed (the broker's error name,
    or ``timeout``), the seconds from asking to the first record, and the age of the
    canary read (seconds between its writing and its reading)."""

    partition: int
    outcome: TieredOutcome
    reason: str | None = None
    first_record_s: float | None = None
    canary_age_s: float | None = None

    @property
    def judged(self) -> bool:
        """Counted in the SLI: a read that found something to judge, or failed."""
        return self.outcome is not TieredOutcome.NO_CANARY


def judge_records(
    partition: int,
    payloads: Iterable[bytes],
    *,
    asked_ns: int,
    read_ns: int,
    first_record_s: float,
    within_s: float,
    keyring: KeyRing,
    probe_id: str,
    incarnation: int,
    max_size: int,
) -> TieredRead:
    """The outcome of the records a fetch returned, oldest first.

    The first record that is a canary decides (any probe's whose key the ring holds:
    the replicas of one release share a key, and any canary proves the read path): it
    verifies (``read``) or not (``invalid``, a record claiming this probe's identity).
    A canary written more than ``within_s`` after the moment asked for (two rounds:
    every partition gets a canary each round) is not what was asked: the log holds
    nothing from then (it is younger, or the probe was not writing), and the read
    proved nothing about the remote store (``no_canary``). Records of other probes are
    passed over.
    """
    for payload in payloads:
        found: Canary | CanaryRejected | None = classify(
            payload, keyring, probe_id, incarnation, max_size=max_size
        )
        if found is None:
            continue
        if isinstance(found, CanaryRejected):
            return TieredRead(partition, TieredOutcome.INVALID, found.reason.value, first_record_s)
        if found.produced_ns - asked_ns > within_s * 1e9:
            return TieredRead(partition, TieredOutcome.NO_CANARY)
        age = (read_ns - found.produced_ns) / 1e9
        return TieredRead(partition, TieredOutcome.READ, None, first_record_s, age)
    return TieredRead(partition, TieredOutcome.NO_CANARY)


def failed(partition: int, reason: str) -> TieredRead:
    return TieredRead(partition, TieredOutcome.FAILED, reason)


def next_partitions(partitions: Sequence[int], after: int | None, count: int) -> list[int]:
    """The ``count`` partitions that follow ``after`` in turn (from the first when
    ``after`` is None or gone), wrapping, none twice.

    >>> next_partitions([0, 1, 2, 3, 4], 3, 3)
    [4, 0, 1]
    >>> next_partitions([0, 1], None, 3)
    [0, 1]
    """
    ordered = sorted(partitions)
    if not ordered:
        return []
    start = 0
    if after is not None:
        start = next((i for i, p in enumerate(ordered) if p > after), 0)
    turn = ordered[start:] + ordered[:start]
    return turn[: min(count, len(ordered))]


# The topic settings that decide where a tiered read is served from.
REMOTE_STORAGE = "remote.storage.enable"
LOCAL_RETENTION = "local.retention.ms"
RETENTION = "retention.ms"
STORAGE_SETTINGS = (REMOTE_STORAGE, LOCAL_RETENTION, RETENTION)


def storage_problem(settings: dict[str, str | None], age_s: float) -> str | None:
    """Why reads of canaries ``age_s`` old would not come from the remote store, as the
    canary topic's settings say; None when they would.

    >>> storage_problem({"remote.storage.enable": "false"}, 3600)[:48]
    'the canary topic has remote.storage.enable=false'
    >>> storage_problem({"remote.storage.enable": "true", "local.retention.ms": "600000",
    ...                  "retention.ms": "604800000"}, 3600) is None
    True
    """
    if (settings.get(REMOTE_STORAGE) or "false").lower() != "true":
        return (
            f"the canary topic has {REMOTE_STORAGE}=false: its canaries are read from the "
            "brokers' disks, not from tiered storage"
        )
    retention = _ms(settings.get(RETENTION))
    local = _ms(settings.get(LOCAL_RETENTION))
    # -2: the local log keeps what the topic keeps.
    local = retention if local == -2 else local
    if retention is not None and retention >= 0 and retention < age_s * 1000:
        return (
            f"the canary topic deletes records after {retention} ms ({RETENTION}), before "
            f"tiered.age: nothing that old is left to read"
        )
    if local is not None and (local < 0 or local >= age_s * 1000):
        kept = "for ever" if local < 0 else f"for {local} ms"
        return (
            f"the canary topic keeps records on the brokers' disks {kept} "
            f"({LOCAL_RETENTION}), at least tiered.age: the tiered read reads local "
            "segments; set tiered.age above it"
        )
    return None


def _ms(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None
