"""The canary codec: round trips, the wire layout, and rejection of anything else."""

from __future__ import annotations

import hashlib
import hmac
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from probe.core.canary import FORMAT_VERSION, MAGIC, MAX_STRING_BYTES, Canary, decode, encode
from probe.core.errors import CanaryRejected, RejectReason
from probe.core.keys import KeyRing

SECRET = b"0123456789abcdef"
RING = KeyRing({"k1": SECRET}, active="k1")
OTHER_PROBES_RING = KeyRing({"theirs": b"another-probe-secret"}, active="theirs")
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CANARY = Canary("probe-a", 1_700_000_000_000_000_000, "kafka", 2, 41, 1_700_000_001_000_000_000)
U64 = 2**64 - 1
U32 = 2**32 - 1


# At most 63 code points of at most 4 UTF-8 bytes each: always within 255 bytes.
short_text = st.text(max_size=63)
traceparents = st.builds(
    "00-{:032x}-{:016x}-{:02x}".format,
    st.integers(1, 2**128 - 1),
    st.integers(1, 2**64 - 1),
    st.integers(0, 255),
)
canaries = st.builds(
    Canary,
    probe_id=short_text,
    incarnation=st.integers(0, U64),
    target=short_text,
    partition=st.integers(0, U32),
    seq=st.integers(0, U64),
    produced_ns=st.integers(0, U64),
    trace_context=st.none() | traceparents | short_text,
)
pad_sizes = st.integers(0, 1024)


def assemble(
    *,
    magic: bytes = MAGIC,
    version: int = FORMAT_VERSION,
    kid: bytes = b"k1",
    probe_id: bytes = b"probe-a",
    incarnation: int = CANARY.incarnation,
    target: bytes = b"kafka",
    partition: int = CANARY.partition,
    seq: int = CANARY.seq,
    produced_ns: int = CANARY.produced_ns,
    flags: int = 0,
    trace_context: bytes = b"",
    padding: bytes = b"",
    secret: bytes = SECRET,
) -> bytes:
    """A record built straight from the documented layout, validly signed.

    Deliberately independent of the codec (no struct, its own field order), so it
    checks the layout table and can build signed records the encoder never would.
    """
    signed = b"".join(
        [
            magic,
            bytes([version, len(kid)]),
            kid,
            bytes([len(probe_id)]),
            probe_id,
            incarnation.to_bytes(8, "big"),
            bytes([len(target)]),
            target,
            partition.to_bytes(4, "big"),
            seq.to_bytes(8, "big"),
            produced_ns.to_bytes(8, "big"),
            bytes([flags]),
            bytes([len(trace_context)]) + trace_context if flags & 1 else b"",
            len(padding).to_bytes(4, "big"),
            padding,
        ]
    )
    return signed + hmac.new(secret, signed, hashlib.sha256).digest()


def rejection(
    data: bytes | bytearray, ring: KeyRing = RING, max_size: int = 65536
) -> CanaryRejected:
    with pytest.raises(CanaryRejected) as rejected:
        decode(data, ring, max_size=max_size)
    return rejected.value


# --- Round trips ------------------------------------------------------------------------


@given(canaries, pad_sizes)
@example(Canary("", 0, "", 0, 0, 0), 0)
@example(Canary("p" * 255, U64, "t" * 255, U32, U64, U64, "x" * 255), 0)
@example(Canary("probe-ü", 1, "mqtt", 0, 0, 0, ""), 0)
def test_round_trip(canary: Canary, pad_to: int) -> None:
    record = encode(canary, RING, pad_to=pad_to)

    assert decode(record, RING) == canary
    assert len(record) >= pad_to


@given(canaries, pad_sizes)
def test_padding_reaches_exactly_pad_to_when_needed(canary: Canary, pad_to: int) -> None:
    unpadded = encode(canary, RING)

    padded = encode(canary, RING, pad_to=pad_to)

    assert len(padded) == max(len(unpadded), pad_to)
    assert decode(padded, RING) == canary


def test_padding_is_signed() -> None:
    padded = encode(CANARY, RING, pad_to=500)
    # Same canary, different pad length: a different record with its own MAC.
    assert padded[-32:] != encode(CANARY, RING, pad_to=501)[-32:]
    assert padded[-32:] != encode(CANARY, RING)[-32:]


def test_decode_takes_bytearray_and_memoryview() -> None:
    # Spark hands binary columns to Python as bytearray.
    record = encode(CANARY, RING)

    assert decode(bytearray(record), RING) == CANARY
    assert decode(memoryview(record), RING) == CANARY


def test_encoding_is_deterministic() -> None:
    assert encode(CANARY, RING) == encode(CANARY, RING)


# --- The wire layout --------------------------------------------------------------------

# A pinned record: if this changes, canaries in flight between probe versions (and
# Spark executors running an older wheel) stop verifying. Change FORMAT_VERSION instead.
GOLDEN = bytes.fromhex(
    "ca9a01026b310770726f62652d6117979cfe362a0000056b61666b6100000002"
    "000000000000002917979cfe71c4ca00013730302d3462663932663335373762"
    "3334646136613363653932396430653065343733362d30306630363761613062"
    "6139303262372d30310000000046596ffc326ce4caf27a1015472e045c6c605d"
    "9107b83fa6823d065b434ef9f0"
)


def test_encoding_matches_the_documented_layout() -> None:
    canary = Canary(
        CANARY.probe_id,
        CANARY.incarnation,
        CANARY.target,
        CANARY.partition,
        CANARY.seq,
        CANARY.produced_ns,
        TRACEPARENT,
    )
    laid_out = assemble(flags=1, trace_context=TRACEPARENT.encode())

    assert encode(canary, RING) == laid_out
    assert laid_out == GOLDEN
    assert encode(CANARY, RING) == assemble()
    assert encode(CANARY, RING, pad_to=150) == assemble(padding=bytes(150 - len(assemble())))


# --- Nothing but a valid canary gets through ------------------------------------------------


@given(canaries, pad_sizes, st.data())
def test_any_single_byte_change_is_rejected(
    canary: Canary, pad_to: int, data: st.DataObject
) -> None:
    record = encode(canary, RING, pad_to=pad_to)
    position = data.draw(st.integers(0, len(record) - 1), label="position")
    new_byte = data.draw(
        st.integers(0, 255).filter(lambda value: value != record[position]), label="new byte"
    )
    changed = record[:position] + bytes([new_byte]) + record[position + 1 :]

    with pytest.raises(CanaryRejected):
        decode(changed, RING)


@given(canaries, st.data())
def test_a_changed_mac_is_a_bad_signature_naming_the_probe(
    canary: Canary, data: st.DataObject
) -> None:
    record = encode(canary, RING)
    position = data.draw(st.integers(len(record) - 32, len(record) - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    changed = record[:position] + bytes([record[position] ^ flip]) + record[position + 1 :]

    rejected = rejection(changed)

    assert rejected.reason is RejectReason.BAD_SIGNATURE
    assert rejected.claimed_probe_id == canary.probe_id


@given(canaries, pad_sizes)
def test_every_truncation_is_rejected(canary: Canary, pad_to: int) -> None:
    record = encode(canary, RING, pad_to=pad_to)

    for length in range(len(record)):
        with pytest.raises(CanaryRejected):
            decode(record[:length], RING)


@given(canaries, st.binary(min_size=1, max_size=64))
def test_trailing_bytes_are_malformed(canary: Canary, trailer: bytes) -> None:
    rejected = rejection(encode(canary, RING) + trailer)

    assert rejected.reason is RejectReason.MALFORMED
    assert rejected.claimed_probe_id == canary.probe_id


@given(st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_canary_rejected(data: bytes) -> None:
    with pytest.raises(CanaryRejected):
        decode(data, RING)


@given(st.binary(max_size=512))
def test_arbitrary_bodies_behind_a_valid_header_raise_only_canary_rejected(body: bytes) -> None:
    with pytest.raises(CanaryRejected):
        decode(MAGIC + bytes([FORMAT_VERSION]) + body, RING)


@given(canaries, st.data())
def test_spliced_records_raise_only_canary_rejected(canary: Canary, data: st.DataObject) -> None:
    record = encode(canary, RING)
    start = data.draw(st.integers(0, len(record)), label="start")
    end = data.draw(st.integers(start, len(record)), label="end")
    insert = data.draw(st.binary(max_size=300), label="insert")
    spliced = record[:start] + insert + record[end:]
    if spliced == record:
        return

    with pytest.raises(CanaryRejected):
        decode(spliced, RING)


# --- Each reason comes from its own kind of input ---------------------------------------


@pytest.mark.parametrize(
    ("record", "ring", "reason", "claimed_probe_id"),
    [
        pytest.param(b"", RING, RejectReason.MALFORMED, None, id="empty"),
        pytest.param(b"\xca", RING, RejectReason.MALFORMED, None, id="half magic"),
        pytest.param(MAGIC, RING, RejectReason.MALFORMED, None, id="magic only"),
        pytest.param(b"{" + assemble()[1:], RING, RejectReason.MALFORMED, None, id="wrong magic"),
        pytest.param(assemble()[:40], RING, RejectReason.MALFORMED, "probe-a", id="truncated body"),
        pytest.param(assemble()[:8], RING, RejectReason.MALFORMED, None, id="truncated probe id"),
        pytest.param(
            assemble(probe_id=b"probe-\xff"), RING, RejectReason.MALFORMED, None, id="bad utf-8"
        ),
        pytest.param(
            assemble(target=b"\xed\xa0\x80"),
            RING,
            RejectReason.MALFORMED,
            "probe-a",
            id="utf-8 surrogate in target",
        ),
        pytest.param(
            assemble(kid=b"k\xe9"), RING, RejectReason.MALFORMED, "probe-a", id="non-ascii kid"
        ),
        pytest.param(
            assemble(flags=4), RING, RejectReason.MALFORMED, "probe-a", id="unknown flag bit"
        ),
        pytest.param(
            assemble(flags=1, trace_context=b"x" * 200)[:-200],
            RING,
            RejectReason.MALFORMED,
            "probe-a",
            id="trace length past the end",
        ),
        pytest.param(
            assemble(padding=b"\x00\x01\x00"),
            RING,
            RejectReason.MALFORMED,
            "probe-a",
            id="non-zero padding",
        ),
        pytest.param(
            assemble() + b"\x00",
            RING,
            RejectReason.MALFORMED,
            "probe-a",
            id="trailing byte",
        ),
        pytest.param(
            assemble(version=2) + b"a future body",
            RING,
            RejectReason.UNSUPPORTED_VERSION,
            "probe-a",
            id="future version",
        ),
        pytest.param(
            assemble(version=0), RING, RejectReason.UNSUPPORTED_VERSION, "probe-a", id="version 0"
        ),
        pytest.param(
            MAGIC + b"\x02", RING, RejectReason.UNSUPPORTED_VERSION, None, id="bare future header"
        ),
        pytest.param(
            encode(CANARY, OTHER_PROBES_RING),
            RING,
            RejectReason.UNKNOWN_KEY,
            "probe-a",
            id="another probe's key",
        ),
        pytest.param(assemble(kid=b""), RING, RejectReason.UNKNOWN_KEY, "probe-a", id="empty kid"),
        pytest.param(
            assemble(secret=b"not-the-k1-secret"),
            RING,
            RejectReason.BAD_SIGNATURE,
            "probe-a",
            id="same kid, other secret",
        ),
        pytest.param(
            assemble(seq=42)[:-32] + assemble(seq=41)[-32:],
            RING,
            RejectReason.BAD_SIGNATURE,
            "probe-a",
            id="seq changed after signing",
        ),
        pytest.param(
            assemble(padding=bytes(10))[:-32] + assemble()[-32:],
            RING,
            RejectReason.BAD_SIGNATURE,
            "probe-a",
            id="padding added after signing",
        ),
    ],
)
def test_each_reason_comes_from_its_kind_of_input(
    record: bytes, ring: KeyRing, reason: RejectReason, claimed_probe_id: str | None
) -> None:
    rejected = rejection(record, ring)

    assert rejected.reason is reason
    assert rejected.claimed_probe_id == claimed_probe_id


def test_unknown_key_is_judged_after_structure() -> None:
    # Structure first: a foreign record that is also garbled is malformed, not foreign.
    record = encode(CANARY, OTHER_PROBES_RING) + b"junk"

    assert rejection(record).reason is RejectReason.MALFORMED


def test_oversized_is_judged_before_parsing() -> None:
    record = encode(CANARY, RING, pad_to=1000)

    assert decode(record, RING, max_size=len(record)) == CANARY
    assert rejection(record, max_size=len(record) - 1).reason is RejectReason.OVERSIZED
    assert rejection(record, max_size=len(record) - 1).claimed_probe_id is None
    assert rejection(b"garbage" * 10_000).reason is RejectReason.OVERSIZED
    assert rejection(bytearray(65537)).reason is RejectReason.OVERSIZED
    assert rejection(bytes(65536)).reason is RejectReason.MALFORMED


# --- The producer's own bugs are ValueError -------------------------------------------------


def _with(**fields: object) -> Canary:
    values: dict[str, object] = {
        "probe_id": CANARY.probe_id,
        "incarnation": CANARY.incarnation,
        "target": CANARY.target,
        "partition": CANARY.partition,
        "seq": CANARY.seq,
        "produced_ns": CANARY.produced_ns,
        "trace_context": None,
    }
    values.update(fields)
    return Canary(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("canary", "message"),
    [
        (_with(probe_id="p" * 256), "canary.probe_id is 256 UTF-8 bytes"),
        (_with(probe_id="ü" * 128), "canary.probe_id is 256 UTF-8 bytes"),
        (_with(target="t" * 300), "canary.target is 300 UTF-8 bytes"),
        (_with(trace_context="x" * 256), "canary.trace_context is 256 UTF-8 bytes"),
        (_with(probe_id="\ud800"), "surrogates not allowed"),
        (_with(incarnation=-1), "canary.incarnation=-1 is outside"),
        (_with(incarnation=2**64), "canary.incarnation=18446744073709551616 is outside"),
        (_with(partition=-1), "canary.partition=-1 is outside"),
        (_with(partition=2**32), "canary.partition=4294967296 is outside"),
        (_with(seq=-5), "canary.seq=-5 is outside"),
        (_with(seq=2**64), "canary.seq=18446744073709551616 is outside"),
        (_with(produced_ns=-1), "canary.produced_ns=-1 is outside"),
        (_with(produced_ns=1.5), "canary.produced_ns must be an int, got float"),
        (_with(seq="7"), "canary.seq must be an int, got str"),
    ],
)
def test_unencodable_canaries_are_value_errors(canary: Canary, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        encode(canary, RING)


def test_string_limits_are_inclusive() -> None:
    longest = _with(
        probe_id="p" * MAX_STRING_BYTES,
        target="t" * MAX_STRING_BYTES,
        trace_context="x" * MAX_STRING_BYTES,
    )

    assert decode(encode(longest, RING), RING) == longest
