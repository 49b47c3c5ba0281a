"""Canaries verified an Arrow batch at a time, on the executors.

The sink (:func:`probe.spark.rows.decode_batches`) and reconciliation's canary format
(:func:`probe.spark.checksum.decode_canaries`) classify every record they read exactly
as every other stage does (:func:`probe.core.canary.classify`). Called once per record, that
is a chain of Python calls per record (parse, verify, build a canary, a row, a frame),
most of a large read's cost. Here a batch's records are framed together instead: the
wire format's fields (``probe.core.canary``) are located and read for all records at once
with numpy over the batch's value buffer, their strings checked as UTF-8 by Arrow, and
one tight loop is left per record, the HMAC, which cannot be shared.

Only a record this path can prove to be a valid canary is taken from it: any record
it cannot (another layout, a bad signature, a key not in the ring, bytes too short or
too long, a number beyond a signed 64-bit column) is classified by ``classify`` itself,
so every verdict, and every reason, is the one the other stages give (property-tested
against ``classify`` in tests/spark/test_verify.py). Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from probe.core.canary import FORMAT_VERSION, MAC_BYTES, MAGIC, Canary, classify
from probe.core.errors import CanaryRejected
from probe.core.keys import KeyRing

# Fixed sizes of the wire format (probe.core.canary's layout table).
_INCARNATION = 8
_PARTITION_SEQ_PRODUCED = 4 + 8 + 8
_PAD_LEN = 4
# The smallest record: header, kid length, a 1-byte kid, probe id length, the fixed
# fields, the pad length and the MAC (probe.core.canary._MIN_RECORD_BYTES).
_MIN_RECORD = 3 + 1 + 1 + 1 + _INCARNATION + 1 + _PARTITION_SEQ_PRODUCED + 1 + _PAD_LEN + MAC_BYTES
_SIGNED_MAX = 2**63  # Spark's long columns: the canary's u64 fields must fit

Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Verdicts:
    """The verdicts on a batch's records, as columns (one row per record).

    ``canary`` marks the verified canaries; their fields are in the columns named
    after them (null elsewhere). For the other records ``reason`` says why they are
    not (a :class:`probe.core.errors.RejectReason` value), or ``foreign`` is set (a record
    of another probe, or of another incarnation of this one, with a key not held; or an
    aborted canary, which the sink reads as it reads uncommitted records), and
    ``claimed_probe_id`` holds the probe id a rejected record claims (unauthenticated).
    """

    canary: Mask
    foreign: Mask
    probe_id: pa.Array
    incarnation: pa.Array
    target: pa.Array
    partition: pa.Array
    seq: pa.Array
    produced_ns: pa.Array
    trace_context: pa.Array
    reason: pa.Array
    claimed_probe_id: pa.Array


def verify(values: pa.Array, keyring: KeyRing, probe_id: str, *, max_size: int) -> Verdicts:
    """Classify every record of ``values`` (binary, nulls read as empty records) as
    :func:`probe.core.canary.classify` does for the sink (no incarnation of its own)."""
    values = _binary(values)
    rows = len(values)
    frame = _Frame.of(values, max_size)
    fast = frame.fields()
    ok = fast.ok
    # The HMAC, the one loop per record: over the records framed as canaries.
    if ok.any():
        ok &= _signatures_match(frame, fast, keyring)
    slow = np.flatnonzero(~ok)
    canary = ok.copy()
    foreign = np.zeros(rows, dtype=np.bool_)
    slow_fields: dict[str, list[object]] = {name: [] for name in _SLOW_FIELDS}
    if slow.size:
        payloads = values.take(pa.array(slow)).to_pylist()
        for index, payload in zip(slow.tolist(), payloads, strict=True):
            verdict = classify(payload or b"", keyring, probe_id, max_size=max_size)
            _slow_row(verdict, slow_fields)
            aborted = isinstance(verdict, Canary) and verdict.aborted
            if isinstance(verdict, Canary) and not aborted:
                canary[index] = True
            elif verdict is None or aborted:
                # An aborted canary (the transactional stage's aborted rounds: the
                # sink reads uncommitted records) is no canary to judge: as foreign.
                foreign[index] = True
    mask = pa.array(~ok)

    def merged(fast_column: pa.Array, name: str, kind: pa.DataType) -> pa.Array:
        if not slow.size:
            return fast_column
        return pc.replace_with_mask(fast_column, mask, pa.array(slow_fields[name], kind))

    return Verdicts(
        canary=canary,
        foreign=foreign,
        probe_id=merged(fast.probe_id, "probe_id", pa.string()),
        incarnation=merged(_int64(fast.incarnation, ok), "incarnation", pa.int64()),
        target=merged(fast.target, "target", pa.string()),
        partition=merged(_int32(fast.partition, ok), "partition", pa.int32()),
        seq=merged(_int64(fast.seq, ok), "seq", pa.int64()),
        produced_ns=merged(_int64(fast.produced_ns, ok), "produced_ns", pa.int64()),
        trace_context=merged(fast.trace_context, "trace_context", pa.string()),
        reason=merged(pa.nulls(rows, pa.string()), "reason", pa.string()),
        claimed_probe_id=merged(pa.nulls(rows, pa.string()), "claimed_probe_id", pa.string()),
    )


# -- the records classified one by one ----------------------------------------------

_SLOW_FIELDS = (
    "probe_id",
    "incarnation",
    "target",
    "partition",
    "seq",
    "produced_ns",
    "trace_context",
    "reason",
    "claimed_probe_id",
)


def _slow_row(verdict: Canary | CanaryRejected | None, fields: dict[str, list[object]]) -> None:
    if isinstance(verdict, Canary):
        values: tuple[object, ...] = (
            verdict.probe_id,
            verdict.incarnation,
            verdict.target,
            verdict.partition,
            verdict.seq,
            verdict.produced_ns,
            verdict.trace_context,
            None,
            None,
        )
    elif verdict is None:
        values = (None,) * len(_SLOW_FIELDS)
    else:
        values = (None,) * 7 + (verdict.reason.value, verdict.claimed_probe_id)
    for name, value in zip(_SLOW_FIELDS, values, strict=True):
        fields[name].append(value)


# -- the records framed together -----------------------------------------------------


def _binary(values: pa.Array) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_large_binary(values.type) or pa.types.is_binary(values.type):
        return values
    return values.cast(pa.binary())


@dataclass(frozen=True)
class _Frame:
    """A batch's value buffer and where each record lies in it."""

    data: npt.NDArray[np.uint8]
    start: Ints
    end: Ints  # where the signed bytes end, the MAC begins
    candidate: Mask  # long enough, not too long, magic and version right

    @classmethod
    def of(cls, values: pa.Array, max_size: int) -> _Frame:
        rows = len(values)
        offsets_type = np.int64 if pa.types.is_large_binary(values.type) else np.int32
        _, offsets_buffer, data_buffer = values.buffers()
        if offsets_buffer is None:  # an empty array
            offsets = np.zeros(rows + 1, dtype=np.int64)
        else:
            offsets = np.frombuffer(
                offsets_buffer,
                dtype=offsets_type,
                count=rows + 1,
                offset=values.offset * np.dtype(offsets_type).itemsize,
            ).astype(np.int64)
        data = (
            np.frombuffer(data_buffer, dtype=np.uint8)
            if data_buffer is not None
            else np.zeros(0, dtype=np.uint8)
        )
        if data.size < _INCARNATION:
            # Records that cannot be read are read at 0 (and masked out): 8 bytes there.
            data = np.concatenate([data, np.zeros(_INCARNATION, dtype=np.uint8)])
        start, stop = offsets[:-1], offsets[1:]
        size = stop - start
        candidate = (size >= _MIN_RECORD) & (size <= max_size)
        if values.null_count:
            candidate &= ~values.is_null().to_numpy(zero_copy_only=False)
        safe = np.where(candidate, start, 0)
        for at, byte in enumerate((*MAGIC, FORMAT_VERSION)):
            candidate &= data[safe + at] == byte
        return cls(data, start, stop - MAC_BYTES, candidate)

    def fields(self) -> _Fields:
        return _Fields.of(self)


@dataclass
class _Fields:
    """Every field of every record, framed as the wire format lays them out; ``ok``
    marks the records whose bytes fill that layout exactly (decode would parse them)."""

    ok: Mask
    kid_start: Ints
    kid_end: Ints
    probe_id: pa.Array
    incarnation: npt.NDArray[np.uint64]
    target: pa.Array
    partition: npt.NDArray[np.uint64]
    seq: npt.NDArray[np.uint64]
    produced_ns: npt.NDArray[np.uint64]
    trace_context: pa.Array
    kid: pa.Array

    @classmethod
    def of(cls, frame: _Frame) -> _Fields:
        ok = frame.candidate.copy()
        reader = _Reader(frame, ok)
        kid_start = frame.start + 4
        kid_end = kid_start + reader.byte(frame.start + 3)
        probe_start = kid_end + 1
        probe_end = probe_start + reader.byte(kid_end)
        incarnation = reader.number(probe_end, _INCARNATION)
        target_start = probe_end + _INCARNATION + 1
        target_end = target_start + reader.byte(probe_end + _INCARNATION)
        partition = reader.number(target_end, 4)
        seq = reader.number(target_end + 4, 8)
        produced_ns = reader.number(target_end + 12, 8)
        flags_at = target_end + _PARTITION_SEQ_PRODUCED
        flags = reader.byte(flags_at)
        traced = flags == 1
        ok &= (flags == 0) | traced
        trace_start = flags_at + 2
        trace_end = np.where(traced, trace_start + reader.byte(flags_at + 1, where=traced), 0)
        pad_at = np.where(traced, trace_end, flags_at + 1)
        pad_len = reader.number(pad_at, _PAD_LEN).astype(np.int64)
        pad_start = pad_at + _PAD_LEN
        # Exact fit, padding all zeros: one encoding per canary and pad length.
        ok &= pad_start + pad_len == frame.end
        ok &= _all_zero(frame.data, pad_start, frame.end, ok)
        # Numbers beyond the tables' columns (a long, an int for the partition) are
        # classify's to judge, and the columns' to refuse, as for any other record.
        for number in (incarnation, seq, produced_ns):
            ok &= number < _SIGNED_MAX
        ok &= partition < 2**31
        kid = _strings(frame.data, kid_start, kid_end, ok, ascii_only=True)
        names = _strings(frame.data, probe_start, probe_end, ok)
        targets = _strings(frame.data, target_start, target_end, ok)
        traces = _strings(frame.data, trace_start, trace_end, ok & traced)
        ok &= kid.valid & names.valid & targets.valid & (traces.valid | ~traced)
        trace_context = pc.if_else(pa.array(traced), traces.text, pa.nulls(len(ok), pa.string()))
        return cls(
            ok=ok,
            kid_start=kid_start,
            kid_end=kid_end,
            probe_id=_nulled(names.text, ok),
            incarnation=incarnation,
            target=_nulled(targets.text, ok),
            partition=partition,
            seq=seq,
            produced_ns=produced_ns,
            trace_context=_nulled(trace_context, ok),
            kid=kid.text,
        )


class _Reader:
    """Reads bytes at per-record positions; a read beyond the record's signed bytes
    clears the record's ``ok`` (decode would fail there) and reads 0."""

    def __init__(self, frame: _Frame, ok: Mask) -> None:
        self.frame = frame
        self.ok = ok

    def _at(self, position: Ints, width: int, where: Mask | None) -> Ints:
        inside = position + width <= self.frame.end
        if where is None:
            self.ok &= inside
            return np.where(self.ok, position, 0)
        self.ok &= inside | ~where
        return np.where(self.ok & where, position, 0)

    def byte(self, position: Ints, where: Mask | None = None) -> Ints:
        return self.frame.data[self._at(position, 1, where)].astype(np.int64)

    def number(self, position: Ints, width: int) -> npt.NDArray[np.uint64]:
        """Big-endian unsigned integers of ``width`` bytes."""
        at = self._at(position, width, None)
        raw = self.frame.data[at[:, None] + np.arange(width)]
        value = np.zeros(len(at), dtype=np.uint64)
        for column in range(width):
            value = (value << np.uint64(8)) | raw[:, column].astype(np.uint64)
        return value


def _all_zero(data: npt.NDArray[np.uint8], start: Ints, end: Ints, ok: Mask) -> Mask:
    """Whether every byte of [start, end) is zero, per record: true where there are
    none (no padding, the usual case), else read only where there are some."""
    zero = np.ones(len(ok), dtype=np.bool_)
    padded = np.flatnonzero(ok & (end > start))
    if padded.size:
        lengths = (end - start)[padded]
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        gather = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(
            offsets[:-1] - start[padded], lengths
        )
        # Every segment is non-empty: reduceat sums exactly each record's bytes.
        nonzero = np.add.reduceat((data[gather] != 0).astype(np.int64), offsets[:-1])
        zero[padded] = nonzero == 0
    return zero


@dataclass(frozen=True)
class _Strings:
    text: pa.Array  # string; empty where not valid
    valid: Mask


def _strings(
    data: npt.NDArray[np.uint8], start: Ints, end: Ints, ok: Mask, *, ascii_only: bool = False
) -> _Strings:
    """The byte ranges [start, end) of the records ``ok`` marks, as Arrow strings
    (UTF-8, or ASCII), with which of them are valid; empty for the others."""
    lengths = np.where(ok, end - start, 0)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    total = int(offsets[-1])
    gather = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1] - start, lengths)
    chunk = data[gather] if total else np.zeros(0, dtype=np.uint8)
    valid = ok.copy()
    if ascii_only and total:
        high = np.concatenate([[0], np.cumsum(chunk >= 0x80, dtype=np.int64)])
        valid &= high[offsets[1:]] == high[offsets[:-1]]
    raw = pa.Array.from_buffers(
        pa.binary(),
        len(ok),
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(chunk.tobytes())],
    )
    try:
        text = raw.cast(pa.string())
    except pa.ArrowInvalid:
        # Some record's bytes are not UTF-8: find them (hostile input, rare), and
        # leave them empty.
        listed = raw.to_pylist()
        for index, item in enumerate(listed):
            try:
                item.decode("utf-8")
            except UnicodeDecodeError:
                valid[index] = False
                listed[index] = b""
        text = pa.array(listed, pa.binary()).cast(pa.string())
    return _Strings(text, valid & ok)


def _nulled(column: pa.Array, ok: Mask) -> pa.Array:
    return pc.if_else(pa.array(ok), column, pa.nulls(len(ok), column.type))


def _int64(values: npt.NDArray[np.uint64], ok: Mask) -> pa.Array:
    return pa.array(values.astype(np.int64), pa.int64(), mask=~ok)


def _int32(values: npt.NDArray[np.uint64], ok: Mask) -> pa.Array:
    return pa.array(np.where(ok, values, 0).astype(np.int32), pa.int32(), mask=~ok)


def _signatures_match(frame: _Frame, fields: _Fields, keyring: KeyRing) -> Mask:
    """Whether each framed record's MAC is its key's HMAC of its signed bytes: the one
    loop per record. A key not in the ring matches nothing (classify says why)."""
    encoded = fields.kid.dictionary_encode()
    keys = [_Hmac.of(keyring.secret_for(kid)) for kid in encoded.dictionary.to_pylist()]
    key_of = encoded.indices.to_numpy(zero_copy_only=False)
    matched = np.zeros(len(fields.ok), dtype=np.bool_)
    buffer = frame.data.data
    same = hmac.compare_digest
    rows = np.flatnonzero(fields.ok)
    for row, start, end, key in zip(
        rows.tolist(),
        frame.start[rows].tolist(),
        frame.end[rows].tolist(),
        key_of[rows].tolist(),
        strict=True,
    ):
        states = keys[key]
        if states is None:
            continue
        inner = states.inner.copy()
        inner.update(buffer[start:end])
        outer = states.outer.copy()
        outer.update(inner.digest())
        if same(outer.digest(), buffer[end : end + MAC_BYTES]):
            matched[row] = True
    return matched


@dataclass(frozen=True)
class _Hmac:
    """HMAC-SHA256 of one key (RFC 2104) with its padded key already hashed: a
    record's MAC then costs two hash copies, half of ``hmac.digest``'s work."""

    inner: Any
    outer: Any

    @classmethod
    def of(cls, secret: bytes | None) -> _Hmac | None:
        if secret is None:
            return None
        block = 64  # SHA-256's block size
        key = hashlib.sha256(secret).digest() if len(secret) > block else secret
        key = key.ljust(block, b"\x00")
        return cls(
            hashlib.sha256(bytes(byte ^ 0x36 for byte in key)),
            hashlib.sha256(bytes(byte ^ 0x5C for byte in key)),
        )
