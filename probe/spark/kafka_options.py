"""The sla_kafka source's options, read into typed specs: a stream's and a batch read's.

Spark hands a data source its options as text, case-insensitively (lower-cased keys);
every look-up here goes through the mapping Spark gave, so a plain dict of them must
keep their documented names. Each spec is read when the reader is made, so a bad
option fails ``load()`` naming it rather than a batch later. The options themselves
are documented with the source (probe.spark.kafka_source); ``kafka.*`` settings are the
client's (probe.spark.librdkafka.client_config).

>>> stream_spec({"topic": "t", "maxRecordsPerBatch": "500"}).max_records
500
>>> batch_spec({"topic": "t", "endingTimestamp": "1700000000000"}).ending.on("0")
Bound(kind='timestamp', value=1700000000000)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from probe.core.offset_ranges import Bound, BoundSpec, Offsets

# How long a task's read may go without any progress before it fails (readTimeoutSeconds).
READ_TIMEOUT_S = 60.0
SIDES = ("starting", "ending")


def starting_map(starting: str) -> Offsets | None:
    """``startingOffsets``: None for ``latest``/``earliest`` (resolved when the query
    first starts), the map for a JSON ``{"<partition>": offset}``.

    >>> starting_map('{"0": 12, "1": 0}')
    {'0': 12, '1': 0}
    """
    if starting in ("latest", "earliest"):
        return None
    try:
        offsets = json.loads(starting)
    except ValueError:
        offsets = None
    if not isinstance(offsets, dict) or not all(
        str(p).isdigit() and isinstance(o, int) and o >= 0 for p, o in offsets.items()
    ):
        raise ValueError(
            'startingOffsets must be latest, earliest or a JSON map {"<partition>": offset}'
        )
    return {str(p): int(o) for p, o in offsets.items()}


def _positive(options: Mapping[str, str], name: str) -> int | None:
    """An optional count that must be at least one."""
    text = options.get(name)
    count = int(text) if text else None
    if count is not None and count < 1:
        raise ValueError(f"{name} must be >= 1")
    return count


@dataclass(frozen=True)
class StreamSpec:
    """``spark.readStream.format("sla_kafka")``'s options."""

    topic: str
    # startingOffsets as given: latest, earliest or a JSON map.
    starting: str
    # The map startingOffsets gives, which the checkpoint pins; None for an edge.
    pinned: Offsets | None
    # maxRecordsPerBatch: admission control, None for no limit.
    max_records: int | None
    # maxInputPartitions: tasks per batch, None for one per Kafka partition.
    max_input_partitions: int | None
    # readTimeoutSeconds: how long a task may make no progress on its ranges.
    read_timeout: float


def stream_spec(options: Mapping[str, str]) -> StreamSpec:
    """A stream's options, checked; ValueError names the one that is wrong."""
    # Read in the order the reader always read them: the first one wrong is named.
    topic = options["topic"]
    max_records = _positive(options, "maxRecordsPerBatch")
    starting = options.get("startingOffsets", "latest")
    pinned = starting_map(starting)
    return StreamSpec(
        topic=topic,
        starting=starting,
        pinned=pinned,
        max_records=max_records,
        max_input_partitions=_positive(options, "maxInputPartitions"),
        read_timeout=float(options.get("readTimeoutSeconds", READ_TIMEOUT_S)),
    )


def bound_spec(options: Mapping[str, str], side: str) -> BoundSpec:
    """The ``starting`` or ``ending`` bound the options give (see probe.spark.kafka_source).

    >>> bound_spec({"endingTimestamp": "1700000000000"}, "ending").on("3")
    Bound(kind='timestamp', value=1700000000000)
    >>> bound_spec({}, "starting")
    BoundSpec(default=None, named={})
    """
    given = [
        name
        for name in (f"{side}Offsets", f"{side}Timestamp", f"{side}OffsetsByTimestamp")
        if options.get(name)
    ]
    if len(given) > 1:
        raise ValueError(f"give one of {', '.join(given)}, not several")
    if not given:
        return BoundSpec(None, {})
    name = given[0]
    text = options[name]
    if name == f"{side}Timestamp":
        if not text.isdigit():
            raise ValueError(f"{name} must be epoch milliseconds, got {text!r}")
        return BoundSpec(Bound("timestamp", int(text)), {})
    edge = "earliest" if side == "starting" else "latest"
    if name == f"{side}Offsets" and text == edge:
        return BoundSpec(None, {})
    named = starting_map(text) if text not in ("earliest", "latest") else None
    if named is None:
        raise ValueError(f'{name} must be {edge} or a JSON map {{"<partition>": value}}')
    kind = "timestamp" if name.endswith("ByTimestamp") else "offset"
    return BoundSpec(None, {p: Bound(kind, value) for p, value in named.items()})


def assigned(options: Mapping[str, str]) -> set[str] | None:
    """The partitions ``assign`` names (Spark's Kafka option: ``{"<topic>": [0, 2]}``),
    None to read them all.

    >>> sorted(assigned({"topic": "t", "assign": '{"t": [2, 0]}'}))
    ['0', '2']
    """
    text = options.get("assign")
    if not text:
        return None
    try:
        named = json.loads(text).get(options["topic"])
    except (ValueError, AttributeError):
        named = None
    if not isinstance(named, list) or not all(isinstance(p, int) and p >= 0 for p in named):
        raise ValueError(f'assign must be a JSON map {{"{options["topic"]}": [partition, ...]}}')
    return {str(p) for p in named}


@dataclass(frozen=True)
class BatchSpec:
    """``spark.read.format("sla_kafka")``'s options."""

    topic: str
    starting: BoundSpec
    ending: BoundSpec
    # The partitions assign names, None for all of them.
    only: set[str] | None
    # minPartitions: ranges split into about this many tasks, None for one a partition.
    min_partitions: int | None
    # readTimeoutSeconds, as a stream's.
    read_timeout: float


def batch_spec(options: Mapping[str, str]) -> BatchSpec:
    """A batch read's options, checked; ValueError names the one that is wrong."""
    starting, ending = (bound_spec(options, side) for side in SIDES)
    return BatchSpec(
        topic=options["topic"],
        starting=starting,
        ending=ending,
        only=assigned(options),
        min_partitions=_positive(options, "minPartitions"),
        read_timeout=float(options.get("readTimeoutSeconds", READ_TIMEOUT_S)),
    )
