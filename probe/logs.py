"""Structured logs: one JSON object per line on stderr, for log pipelines to parse."""

from __future__ import annotations

import json
import logging
import sys
import time


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Client libraries log every reconnect attempt at ERROR; the probe reports an
    # outage once, as a readiness change, so their lines only help when debugging.
    # py4j (the sink's bridge to Spark's JVM) logs each connection it opens and closes;
    # a JVM that is gone is reported by the sink stage itself.
    for noisy in ("aiokafka", "kafka", "py4j"):
        logging.getLogger(noisy).setLevel(
            root.level if root.level <= logging.DEBUG else logging.CRITICAL
        )
