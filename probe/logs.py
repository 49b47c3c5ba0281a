"""Structured logs: one JSON object per line on stderr, for log pipelines to parse.

A line about one canary or record carries the fields that join it to its trace, its
metrics and the sink's tables (see :data:`JOIN_FIELDS`), passed with ``extra=``; trace
and span ids are lower-case hex under OpenTelemetry's log-correlation names.
"""

from __future__ import annotations

import json
import logging
import sys
import time

JOIN_FIELDS = (
    "trace_id",
    "span_id",
    "probe_id",
    "target",
    "stage",
    "topic",
    "partition",
    "offset",
    "seq",
    "produced_at",
    "outcome",
)
"""Every line about a canary has all of them (null where unknown), so a log pipeline
can index them: e.g. ``{"msg": "canary kafka/1 seq 7 at stage consumer: lost",
"trace_id": "4bf9...", "span_id": "00f0...", "partition": 1, "seq": 7, ...}``."""


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if hasattr(record, JOIN_FIELDS[0]):
            for name in JOIN_FIELDS:
                entry[name] = getattr(record, name, None)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class _NoCredentials(logging.Filter):
    """Drops a client's debug line that dumps a SASL request: aiokafka logs every
    request it sends at debug, and SASL/PLAIN's authentication bytes are the user
    name and the password in clear (``\\x00user\\x00password``). A password must not
    reach a log at any level."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.name.startswith("aiokafka") and "SaslAuthenticateRequest" in record.getMessage()
        )


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(_NoCredentials())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Client libraries log every reconnect attempt at ERROR; the probe reports an
    # outage once, as a readiness change, so their lines only help when debugging.
    for noisy in ("aiokafka", "kafka"):
        logging.getLogger(noisy).setLevel(
            root.level if root.level <= logging.DEBUG else logging.CRITICAL
        )
    # py4j (the sink's bridge to Spark's JVM) logs each connection it opens and closes,
    # and each broken one, at info (a JVM that is gone is reported by the sink stage
    # itself); its warnings and errors, such as a batch function that raised, stay.
    # The one failure the sink's own stop causes is filtered where it is raised
    # (probe.spark.sink). Its debug lines are every command: never.
    logging.getLogger("py4j").setLevel(
        logging.INFO if root.level <= logging.DEBUG else max(root.level, logging.WARNING)
    )
