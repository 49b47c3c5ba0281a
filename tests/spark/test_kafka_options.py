"""The sla_kafka source's options read into typed specs (probe.spark.kafka_options):
pure, no broker, no Spark."""

from __future__ import annotations

import doctest

import pytest

import probe.spark.kafka_options as kafka_options_module
from probe.core.offset_ranges import Bound, BoundSpec
from probe.spark.kafka_options import assigned, batch_spec, bound_spec, stream_spec


def test_doctests() -> None:
    assert doctest.testmod(kafka_options_module).failed == 0


@pytest.mark.parametrize(
    ("options", "side", "expected"),
    [
        ({}, "starting", BoundSpec(None, {})),
        ({"startingOffsets": "earliest"}, "starting", BoundSpec(None, {})),
        ({"endingOffsets": "latest"}, "ending", BoundSpec(None, {})),
        (
            {"startingOffsets": '{"0": 4, "2": 0}'},
            "starting",
            BoundSpec(None, {"0": Bound("offset", 4), "2": Bound("offset", 0)}),
        ),
        (
            {"endingTimestamp": "1700000000000"},
            "ending",
            BoundSpec(Bound("timestamp", 1700000000000), {}),
        ),
        (
            {"startingOffsetsByTimestamp": '{"1": 1700000000000}'},
            "starting",
            BoundSpec(None, {"1": Bound("timestamp", 1700000000000)}),
        ),
    ],
)
def test_bounds_are_read_from_the_options(
    options: dict[str, str], side: str, expected: BoundSpec
) -> None:
    assert bound_spec(options, side) == expected


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "latest"}, "startingOffsets must be earliest or a JSON map"),
        ({"endingOffsets": "earliest"}, "endingOffsets must be latest or a JSON map"),
        ({"startingOffsets": '{"0": -1}'}, "JSON map"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp must be epoch milliseconds"),
        (
            {"startingOffsets": '{"0": 1}', "startingTimestamp": "1"},
            "give one of startingOffsets, startingTimestamp",
        ),
    ],
)
def test_bad_bounds_are_refused_naming_the_option(options: dict[str, str], message: str) -> None:
    side = "ending" if any(name.startswith("ending") for name in options) else "starting"
    with pytest.raises(ValueError, match=message):
        bound_spec(options, side)


def test_assign_names_the_partitions_to_read() -> None:
    assert assigned({"topic": "t"}) is None
    assert assigned({"topic": "t", "assign": '{"t": [1, 3]}'}) == {"1", "3"}
    with pytest.raises(ValueError, match=r'assign must be a JSON map \{"t": \[partition'):
        assigned({"topic": "t", "assign": '{"other": [1]}'})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t", "maxRecordsPerBatch": "0"}, "maxRecordsPerBatch must be >= 1"),
        ({"topic": "t", "maxInputPartitions": "0"}, "maxInputPartitions must be >= 1"),
        ({"topic": "t", "startingOffsets": "newest"}, "startingOffsets must be"),
    ],
)
def test_bad_stream_options_are_refused_naming_the_option(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        stream_spec(options)


def test_a_batch_reads_options_are_checked_whole() -> None:
    spec = batch_spec({"topic": "t", "assign": '{"t": [1]}', "minPartitions": "4"})
    assert (spec.only, spec.min_partitions, spec.starting) == ({"1"}, 4, BoundSpec(None, {}))
    with pytest.raises(ValueError, match="minPartitions must be >= 1"):
        batch_spec({"topic": "t", "minPartitions": "0"})
