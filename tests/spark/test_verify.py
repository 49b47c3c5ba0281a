"""A batch's canaries verified together give every record the verdict classify gives it.

classify (probe.stages.stage) is the oracle: every record of a batch, valid or mutated,
foreign or garbage, must get the same verdict, the same reason and the same fields
from verify as from classify called on it alone.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe.core.canary import Canary, classify, encode
from probe.core.errors import CanaryRejected
from probe.core.keys import KeyRing
from probe.spark.verify import verify

PROBE = "probe-a"
RING = KeyRing({"k1": b"0123456789abcdef0123456789abcdef", "k2": b"x" * 32}, active="k1")
OTHER_RING = KeyRing({"k9": b"y" * 32}, active="k9")
MAX_SIZE = 4096

names = st.text(min_size=0, max_size=12)
canaries = st.builds(
    Canary,
    probe_id=st.sampled_from([PROBE, "probe-b", "", "zoé"]) | names,
    incarnation=st.integers(0, 2**64 - 1),
    target=st.sampled_from(["kafka", "mqtt", ""]) | names,
    partition=st.integers(0, 2**32 - 1),
    seq=st.integers(0, 2**64 - 1),
    produced_ns=st.integers(0, 2**64 - 1),
    trace_context=st.none() | st.just("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    aborted=st.booleans(),
)


@st.composite
def records(draw: st.DrawFn) -> bytes | None:
    """A canary signed by a held or a foreign key, possibly padded, possibly mutated:
    truncated, extended, a byte changed, or bytes that were never a canary."""
    kind = draw(st.sampled_from(["valid", "valid", "foreign", "mutated", "garbage", "null"]))
    if kind == "null":
        return None
    if kind == "garbage":
        return draw(st.binary(max_size=200))
    ring = OTHER_RING if kind == "foreign" else RING
    record = encode(draw(canaries), ring, pad_to=draw(st.sampled_from([0, 0, 120, 300])))
    if kind != "mutated":
        return record
    how = draw(st.sampled_from(["flip", "cut", "extend", "oversize"]))
    if how == "flip":
        at = draw(st.integers(0, len(record) - 1))
        return record[:at] + bytes([record[at] ^ draw(st.integers(1, 255))]) + record[at + 1 :]
    if how == "cut":
        return record[: draw(st.integers(0, len(record) - 1))]
    if how == "extend":
        return record + draw(st.binary(min_size=1, max_size=8))
    return record + bytes(MAX_SIZE)


def _expected(record: bytes | None) -> dict[str, Any]:
    verdict = classify(record or b"", RING, PROBE, max_size=MAX_SIZE)
    if isinstance(verdict, Canary) and verdict.aborted:
        return {"kind": "foreign"}  # an aborted round's: no canary for the sink
    if isinstance(verdict, Canary):
        return {
            "kind": "canary",
            "probe_id": verdict.probe_id,
            "incarnation": verdict.incarnation,
            "target": verdict.target,
            "partition": verdict.partition,
            "seq": verdict.seq,
            "produced_ns": verdict.produced_ns,
            "trace_context": verdict.trace_context,
        }
    if verdict is None:
        return {"kind": "foreign"}
    assert isinstance(verdict, CanaryRejected)
    return {"kind": verdict.reason.value, "claimed": verdict.claimed_probe_id}


def _got(batch: list[bytes | None]) -> list[dict[str, Any]]:
    v = verify(pa.array(batch, pa.binary()), RING, PROBE, max_size=MAX_SIZE)
    got = []
    for row in range(len(batch)):
        if v.canary[row]:
            got.append(
                {
                    "kind": "canary",
                    "probe_id": v.probe_id[row].as_py(),
                    "incarnation": v.incarnation[row].as_py(),
                    "target": v.target[row].as_py(),
                    "partition": v.partition[row].as_py(),
                    "seq": v.seq[row].as_py(),
                    "produced_ns": v.produced_ns[row].as_py(),
                    "trace_context": v.trace_context[row].as_py(),
                }
            )
        elif v.foreign[row]:
            got.append({"kind": "foreign"})
        else:
            got.append({"kind": v.reason[row].as_py(), "claimed": v.claimed_probe_id[row].as_py()})
    return got


def _fits(record: bytes | None) -> bool:
    """Whether a verified canary's numbers fit the tables' columns (a long, an int for
    the partition); the columns refuse the others, as they did record by record."""
    verdict = classify(record or b"", RING, PROBE, max_size=MAX_SIZE)
    if not isinstance(verdict, Canary):
        return True
    return (
        max(verdict.incarnation, verdict.seq, verdict.produced_ns) < 2**63
        and verdict.partition < 2**31
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(records(), min_size=0, max_size=40))
def test_every_record_gets_the_verdict_classify_gives_it(batch: list[bytes | None]) -> None:
    batch = [record for record in batch if _fits(record)]
    assert _got(batch) == [_expected(record) for record in batch]


def test_a_canary_beyond_the_columns_is_refused_as_it_was() -> None:
    """A signed canary whose seq does not fit a long fails the batch, as building the
    column failed record by record."""
    huge = encode(Canary(PROBE, 1, "kafka", 0, 2**63, 5), RING)
    with pytest.raises(OverflowError):
        verify(pa.array([huge], pa.binary()), RING, PROBE, max_size=MAX_SIZE)


def test_a_sliced_batch_reads_its_own_records() -> None:
    records_ = [encode(Canary(PROBE, 1, "kafka", p, p, 5), RING) for p in range(6)]
    sliced = pa.array(records_, pa.binary()).slice(2, 3)
    assert [row["partition"] for row in _got_array(sliced)] == [2, 3, 4]


def _got_array(values: pa.Array) -> list[dict[str, Any]]:
    v = verify(values, RING, PROBE, max_size=MAX_SIZE)
    assert v.canary.all()
    return [{"partition": p} for p in v.partition.to_pylist()]
