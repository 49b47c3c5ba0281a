"""The probe's error tree.

Client-library exceptions are mapped onto these at the transport boundary, so the
rest of the probe handles a small, documented set::

    ProbeError
    ├── ConfigError          a bad setting; the CLI exits 2 with one line naming the field
    ├── CanaryRejected       bytes that are not a valid canary, with the reason
    ├── TransportError       the broker could not be reached or refused an operation
    │   ├── ConnectFailed    no connection to the broker, with the reason and the setting
    │   ├── ProduceFailed    one canary was not acknowledged, with the reason
    │   └── SourceReadFailed a Spark task of the sla_kafka source could not read its ranges
    │       └── SourceReadTimedOut  ... making no progress for its timeout (a TimeoutError)
    ├── StageFailed          a stage could not start (the Spark sink's JVM, say)
    │   └── StoppedMidBatch  a sink batch cut short by the sink's own stop
    └── ReconcileFailed      a reconciliation run could not compare (broker, Spark)
"""

from __future__ import annotations

from enum import StrEnum


class ProbeError(Exception):
    """Base of every error the probe raises on purpose."""


class ConfigError(ProbeError):
    """A setting is invalid. ``field`` is its path, e.g. ``kafka.interval``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class RejectReason(StrEnum):
    """Why a record is not a valid canary. These are the ``reason`` label values."""

    MALFORMED = "malformed"
    BAD_SIGNATURE = "bad_signature"
    UNKNOWN_KEY = "unknown_key"
    OVERSIZED = "oversized"
    UNSUPPORTED_VERSION = "unsupported_version"


class CanaryRejected(ProbeError):
    """Bytes that do not decode and verify as a canary.

    ``claimed_probe_id`` is the probe id the record claims, when it could be parsed
    at all; it is *not* authenticated. It lets a stage tell a canary signed with
    another probe's key (foreign) from tampering with one of its own.
    ``claimed_incarnation``, as unauthenticated, is set with ``unknown_key`` (the
    record parsed; only its key is missing), to tell an earlier run of the same probe
    id from this one.
    """

    def __init__(
        self,
        reason: RejectReason,
        claimed_probe_id: str | None = None,
        claimed_incarnation: int | None = None,
    ) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.claimed_probe_id = claimed_probe_id
        self.claimed_incarnation = claimed_incarnation


class TransportError(ProbeError):
    """The broker could not be reached, or refused an operation."""


class ConnectFailure(StrEnum):
    """Why a connection to a broker failed: the ``reason`` label values of
    ``synthetic_sla_connect_errors_total``, a small and stable set."""

    UNREACHABLE = "unreachable"  # refused, timed out, no route, name not resolved
    UNTRUSTED_CERTIFICATE = "untrusted_certificate"
    HOSTNAME_MISMATCH = "hostname_mismatch"
    CERTIFICATE_EXPIRED = "certificate_expired"  # or not valid yet
    CLIENT_CERTIFICATE = "client_certificate"  # required and missing, or refused
    TLS_EXPECTED = "tls_expected"  # a plaintext client on a TLS listener
    TLS_UNEXPECTED = "tls_unexpected"  # a TLS client on a plaintext listener
    TLS_FAILED = "tls_failed"  # any other TLS handshake failure
    SASL_FAILED = "sasl_failed"  # authentication refused, or mechanism not offered
    CREDENTIALS_REFUSED = "credentials_refused"  # MQTT: a CONNACK refusing the login
    OTHER = "other"


class ConnectFailed(TransportError):
    """No connection to the broker: ``str()`` is one line naming the cause and the
    setting to change, ``reason`` and ``broker`` its label values."""

    def __init__(self, reason: ConnectFailure, message: str, broker: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        # The broker it was: its id where known, else its address ("" if neither).
        self.broker = broker


class ProduceFailure(StrEnum):
    """Why a canary was not acknowledged: the ``reason`` label values, a small and
    stable set, whatever client library a transport maps from."""

    TIMEOUT = "timeout"
    BROKER_UNAVAILABLE = "broker_unavailable"
    NOT_LEADER = "not_leader"
    NOT_ENOUGH_REPLICAS = "not_enough_replicas"
    UNKNOWN_PARTITION = "unknown_partition"
    NOT_AUTHORIZED = "not_authorized"
    TOO_LARGE = "too_large"
    OTHER = "other"


class CommitFailure(StrEnum):
    """Why a group stage's offset commit (the share stage's acknowledgement) failed: the
    ``reason`` label values."""

    TIMEOUT = "timeout"  # no answer within the send timeout
    COORDINATOR_MOVED = "coordinator_moved"  # not (or no longer) the coordinator
    REBALANCE = "rebalance"  # the group rebalanced under the commit
    NOT_AUTHORIZED = "not_authorized"  # the group's or the topic's ACLs refuse it
    # A share group's acknowledgement of a record whose acquisition lock had run out:
    # the record is no longer the member's, and goes to another delivery.
    LOCK_EXPIRED = "lock_expired"
    ERROR = "error"  # anything else the broker or the client said


class TransactionOutcome(StrEnum):
    """How one of the transactional stage's transactions ended: the ``outcome`` label
    values."""

    COMMITTED = "committed"
    ABORTED = "aborted"  # on purpose: an aborted round
    FAILED = "failed"  # its commit or its abort failed, or took too long


class ProduceFailed(TransportError):
    """One canary was not acknowledged, and why."""

    def __init__(self, reason: ProduceFailure, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason
        self.detail = detail


class SourceReadFailed(TransportError):
    """A Spark task of the sla_kafka source (probe.spark.kafka_reads) could not read its
    offset ranges: a codec its librdkafka lacks, credentials refused, bad settings.

    Its class is the source's mark on a failed query: a task's failure reaches the
    driver as text ending in the Python exception's line, which names the class
    (a subclass by its own name), and probe.spark.health takes a query that failed
    with one for a source failure, whichever module raised it.
    """


class SourceReadTimedOut(SourceReadFailed, TimeoutError):
    """A task's read made no progress at all for its ``readTimeoutSeconds``."""


class StageFailed(ProbeError):
    """A stage could not start, e.g. the Spark sink without a Java runtime."""


class StoppedMidBatch(StageFailed):
    """A sink batch failed because the sink was stopping: its Spark job was cancelled
    or its thread interrupted by the stop. Nothing of it was committed; the next start
    replays it from the checkpoint. Raised to Spark only, which takes it for the stop."""


class ReconcileFailed(ProbeError):
    """A reconciliation run could not compare: the brokers could not be listed, the
    topic is gone, a Spark job failed. No verdict either way; the message says why."""
