"""The canary record and its signed wire encoding. Pure: no I/O, no clock reads.

``encode(canary, keyring)`` signs a ``Canary`` with the ring's active key;
``decode(data, keyring)`` parses and verifies bytes from anywhere, raising only
``CanaryRejected`` (see ``probe.core.keys`` for the key ring and how to rotate keys).

Wire format, version 1. Integers are unsigned big-endian; strings are UTF-8 (the key
id is ASCII) behind a one-byte length, so none exceeds 255 bytes::

    size  field          notes
    ----  -------------  ------------------------------------------------------------
       2  magic          0xCA 0x9A
       1  version        1 (FORMAT_VERSION)
       1  kid_len        1..32
     var  kid            id of the signing key in the ring
       1  probe_id_len   0..255
     var  probe_id       the producing probe
       8  incarnation    start time (ns) of the producing process
       1  target_len     0..255
     var  target         target name (a Kafka cluster, an MQTT broker)
       4  partition      partition or shard number
       8  seq            per-partition sequence number within the incarnation
       8  produced_ns    producer's wall clock (ns since the epoch) at send time
       1  flags          bit 0: a trace context follows; bit 1: aborted (written in a
                         transaction its producer aborts); other bits must be 0
    [  1  trace_len      only if flags bit 0: 0..255
     var  trace_context  W3C traceparent (opaque to the codec)]
       4  pad_len        number of padding bytes
     var  padding        pad_len zero bytes, so a record can be made as big as asked
      32  mac            HMAC-SHA256(secret[kid], every byte above)

The MAC covers every byte before it, version, key id and padding included, so any
change to a record fails verification. Parsing is strict: the fields must fill the
record exactly, so there is one encoding per (canary, key, pad length).

Compatibility promise: every future version keeps the fields from magic up to and
including probe_id exactly as above, so a probe can say which probe sent a record it
cannot read (``CanaryRejected.claimed_probe_id``).
"""

from __future__ import annotations

import hmac
import struct
from dataclasses import dataclass

from probe.core.errors import CanaryRejected, RejectReason
from probe.core.keys import KeyRing


@dataclass(frozen=True, slots=True)
class Canary:
    """One synthetic record, written to one partition (or shard) of one target.

    ``incarnation`` is the start time (ns) of the producing process: sequence numbers
    restart with every incarnation, so (probe_id, incarnation, target, partition, seq)
    names a canary uniquely. ``seq`` is contiguous per partition among *acknowledged*
    canaries: a canary whose produce failed gives its number to the next one, so a
    gap seen downstream means loss.

    ``aborted``: written in a transaction its producer aborts on purpose (the
    transactional stage's aborted rounds). No stage expects it and it takes no seq of
    its own (it carries the next one, which the next committed canary takes too): a
    consumer reading committed records must never see it, and one reading
    uncommitted records skips it.
    """

    probe_id: str
    incarnation: int
    target: str
    partition: int
    seq: int
    produced_ns: int
    trace_context: str | None = None
    aborted: bool = False


# --- Wire codec --------------------------------------------------------------------------
#
# Kept below the dataclass on purpose: the module docstring's layout table is the
# contract, and this is its only implementation (producers, the consumer stage and
# the Spark executors all import it).

FORMAT_VERSION = 1
MAGIC = b"\xca\x9a"
MAC_BYTES = 32
MAX_STRING_BYTES = 255

_HEADER = MAGIC + bytes((FORMAT_VERSION,))
_HAS_TRACE_CONTEXT = 0x01
_ABORTED = 0x02
_U64_MAX = 2**64 - 1
_U32_MAX = 2**32 - 1
_INCARNATION_TARGET_LEN = struct.Struct(">QB")
_PARTITION_SEQ_PRODUCED_FLAGS = struct.Struct(">IQQB")
_PAD_LEN = struct.Struct(">I")
# Header, kid length, a 1-byte kid, probe id length, the fixed fields, the pad
# length and the MAC, with every string otherwise empty and no trace context.
_MIN_RECORD_BYTES = (
    len(_HEADER)
    + 2
    + 1
    + _INCARNATION_TARGET_LEN.size
    + _PARTITION_SEQ_PRODUCED_FLAGS.size
    + _PAD_LEN.size
    + MAC_BYTES
)
_LENGTH_BYTES = tuple(bytes((n,)) for n in range(MAX_STRING_BYTES + 1))


def encode(canary: Canary, keyring: KeyRing, *, pad_to: int = 0) -> bytes:
    """Sign ``canary`` with the ring's active key and return its wire bytes.

    ``pad_to`` pads the record with zero bytes to at least that many bytes (to probe
    a pipeline with realistically sized records); the padding is signed too.

    Raises ``ValueError`` for a canary that has no encoding: a string longer than
    255 UTF-8 bytes (or not encodable as UTF-8), or a number that is negative, not
    an int, or wider than its field. That is the producer's bug, not hostile input.

    Example::

        >>> from probe.core.keys import KeyRing
        >>> ring = KeyRing({"k1": b"0123456789abcdef"}, active="k1")
        >>> canary = Canary("probe-a", 1, "kafka", 0, 7, 1_700_000_000_000_000_000)
        >>> decode(encode(canary, ring), ring) == canary
        True
    """
    kid = keyring.active_kid.encode("ascii")
    probe_id = _utf8(canary.probe_id, "probe_id")
    target = _utf8(canary.target, "target")
    try:
        incarnation_target_len = _INCARNATION_TARGET_LEN.pack(canary.incarnation, len(target))
        fixed = _PARTITION_SEQ_PRODUCED_FLAGS.pack(
            canary.partition,
            canary.seq,
            canary.produced_ns,
            (0 if canary.trace_context is None else _HAS_TRACE_CONTEXT)
            | (_ABORTED if canary.aborted else 0),
        )
    except struct.error:
        raise ValueError(_number_problem(canary)) from None
    parts = [
        _HEADER,
        _LENGTH_BYTES[len(kid)],
        kid,
        _LENGTH_BYTES[len(probe_id)],
        probe_id,
        incarnation_target_len,
        target,
        fixed,
    ]
    if canary.trace_context is not None:
        trace_context = _utf8(canary.trace_context, "trace_context")
        parts += (_LENGTH_BYTES[len(trace_context)], trace_context)
    unpadded = b"".join(parts)
    padding = pad_to - (len(unpadded) + _PAD_LEN.size + MAC_BYTES)
    if padding > 0:
        if padding > _U32_MAX:
            raise ValueError(f"pad_to={pad_to} is beyond what the pad length field holds")
        signed = b"".join((unpadded, _PAD_LEN.pack(padding), bytes(padding)))
    else:
        signed = unpadded + b"\x00\x00\x00\x00"
    return signed + hmac.digest(keyring.active_secret, signed, "sha256")


def _utf8(text: str, name: str) -> bytes:
    # UnicodeEncodeError (lone surrogates) is a ValueError already, as promised.
    encoded = text.encode("utf-8")
    if len(encoded) > MAX_STRING_BYTES:
        raise ValueError(
            f"canary.{name} is {len(encoded)} UTF-8 bytes; at most {MAX_STRING_BYTES} fit"
        )
    return encoded


def _number_problem(canary: Canary) -> str:
    # Only reached after struct refused a value, so cost does not matter here.
    limits = (
        ("incarnation", _U64_MAX),
        ("partition", _U32_MAX),
        ("seq", _U64_MAX),
        ("produced_ns", _U64_MAX),
    )
    for name, limit in limits:
        value = getattr(canary, name)
        if not isinstance(value, int) or isinstance(value, bool):
            return f"canary.{name} must be an int, got {type(value).__name__}"
        if not 0 <= value <= limit:
            return f"canary.{name}={value} is outside 0..{limit}"
    return "canary has a number that does not fit its field"


def decode(
    data: bytes | bytearray | memoryview, keyring: KeyRing, *, max_size: int = 65536
) -> Canary:
    """Parse and verify wire bytes. Raises ``CanaryRejected`` and nothing else.

    Checks run in a fixed order, so each reason means one thing: ``oversized``
    (before any parsing), ``malformed``, ``unsupported_version``, ``malformed``
    (the v1 body), ``unknown_key``, ``bad_signature``. ``claimed_probe_id`` is set
    whenever the probe id could be parsed; it is unauthenticated.
    """
    if len(data) > max_size:
        raise CanaryRejected(RejectReason.OVERSIZED)
    record = data if type(data) is bytes else bytes(data)
    size = len(record)
    if record[:2] != MAGIC or size < 3:
        raise CanaryRejected(RejectReason.MALFORMED)
    if record[2] != FORMAT_VERSION:
        raise CanaryRejected(RejectReason.UNSUPPORTED_VERSION, _claimed_probe_id(record))
    if size < _MIN_RECORD_BYTES:
        raise CanaryRejected(RejectReason.MALFORMED, _claimed_probe_id(record))
    signed_end = size - MAC_BYTES
    signed = record[:signed_end]
    # Parsing runs on ``signed`` alone, so no field can reach into the MAC. A slice
    # past the end is silently short, but every variable-length field is followed by
    # a fixed-size read starting at its end, and that read fails instead (IndexError
    # or struct.error); UnicodeDecodeError is a ValueError.
    try:
        kid_end = 4 + signed[3]
        kid = signed[4:kid_end].decode("ascii")
        probe_id_end = kid_end + 1 + signed[kid_end]
        probe_id = signed[kid_end + 1 : probe_id_end].decode("utf-8")
        incarnation, target_len = _INCARNATION_TARGET_LEN.unpack_from(signed, probe_id_end)
        target_start = probe_id_end + _INCARNATION_TARGET_LEN.size
        target_end = target_start + target_len
        target = signed[target_start:target_end].decode("utf-8")
        partition, seq, produced_ns, flags = _PARTITION_SEQ_PRODUCED_FLAGS.unpack_from(
            signed, target_end
        )
        position = target_end + _PARTITION_SEQ_PRODUCED_FLAGS.size
        trace_context: str | None = None
        if flags & ~(_HAS_TRACE_CONTEXT | _ABORTED):
            raise ValueError("unknown flag bits")
        if flags & _HAS_TRACE_CONTEXT:
            trace_end = position + 1 + signed[position]
            trace_context = signed[position + 1 : trace_end].decode("utf-8")
            position = trace_end
        (pad_len,) = _PAD_LEN.unpack_from(signed, position)
        position += _PAD_LEN.size
        # Exact fit: nothing may hide between the padding and the MAC, and padding
        # is all zeros, so one canary and one pad length give exactly one encoding.
        if position + pad_len != signed_end or signed.count(0, position) != pad_len:
            raise ValueError("length mismatch or non-zero padding")
    except (IndexError, ValueError, struct.error):
        raise CanaryRejected(RejectReason.MALFORMED, _claimed_probe_id(record)) from None
    secret = keyring.secret_for(kid)
    if secret is None:
        raise CanaryRejected(RejectReason.UNKNOWN_KEY, probe_id, incarnation)
    if not hmac.compare_digest(hmac.digest(secret, signed, "sha256"), record[signed_end:]):
        raise CanaryRejected(RejectReason.BAD_SIGNATURE, probe_id)
    return Canary(
        probe_id,
        incarnation,
        target,
        partition,
        seq,
        produced_ns,
        trace_context,
        bool(flags & _ABORTED),
    )


def _claimed_probe_id(record: bytes) -> str | None:
    """The probe id a rejected record claims, read from the version-stable prefix.

    Every format version starts magic, version, kid, probe id as laid out above, so
    this works on any version and on truncated or garbled v1 bodies alike.
    """
    try:
        kid_end = 4 + record[3]
        probe_id_end = kid_end + 1 + record[kid_end]
        if probe_id_end > len(record):
            return None
        return record[kid_end + 1 : probe_id_end].decode("utf-8")
    except (IndexError, ValueError):
        return None


def classify(
    payload: bytes,
    keyring: KeyRing,
    probe_id: str,
    incarnation: int | None = None,
    *,
    max_size: int,
) -> Canary | CanaryRejected | None:
    """A verified canary, why a record is invalid, or None for a foreign record.

    ``probe_id`` and ``incarnation`` are the judging probe's; the Spark sink, which
    judges every incarnation, passes no incarnation. Every stage classifies with this
    one function, the sink's executors included, so a record means the same thing
    wherever it is read.

    A record signed with a key we do not hold that claims another probe id is
    foreign (another probe with its own key shares the topic), not invalid; so is one
    that claims another incarnation of our probe id (an earlier run with an ephemeral
    key, or with a key since dropped), as the judge calls a valid canary of another
    incarnation foreign. A record that claims *this* process (probe id and
    incarnation) with an unknown key, or that fails the signature of a key we hold, is
    invalid: corruption or tampering. The claims are unauthenticated, so this only
    decides which counter moves; a foreign record never becomes a delivered canary.
    """
    try:
        return decode(payload, keyring, max_size=max_size)
    except CanaryRejected as rejected:
        if (
            rejected.reason is RejectReason.UNKNOWN_KEY
            and rejected.claimed_probe_id is not None
            and (
                rejected.claimed_probe_id != probe_id
                or (incarnation is not None and rejected.claimed_incarnation != incarnation)
            )
        ):
            return None
        return rejected
