"""`sla-probe reconcile` as a command: once with an exit code, or every
``reconcile.every`` as a service with /metrics, /healthz and /readyz. A run itself
(the job, its report table, its metrics) is :mod:`probe.reconcile.reconciler`.

Once: the table or JSON on stdout. Exit codes of a single run
(probe.reconcile.outcome.EXIT_CODES): 0 records were compared and every verifiable
window is complete, 1 a mismatch (or no comparison could be made: the report says
why), 2 a usage or configuration error (the CLI's), 3 nothing compared: every window
empty or unverifiable, the records written lately still in windows not yet closed
(the report says when they are compared). 3 is not a pass: a deploy check that runs
reconcile right after writing gets it until the records' windows close and settle.

As a service it keeps going whatever a run finds or fails on: /readyz is 200 once a
run has completed and while the last one did, 503 with the reason otherwise (no
broker, no table yet); a mismatch is the metrics' business, not readiness'. Its
status page (``/``) shows the readiness and the last ``RUNS_SHOWN`` runs' verdicts,
a failed run with its reason.

Spark (pyspark, the JVM) is imported only once the settings hold, so a bad one is
said in a line without waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

from probe import logs, loop
from probe.config import ProbeConfig, require_for_reconcile
from probe.core.errors import ConfigError, ReconcileFailed
from probe.keyfile import KeyRingSource
from probe.metrics import probe_version, served_registry
from probe.reconcile.metrics import ReconcileMetrics
from probe.reconcile.outcome import EXIT_CODES, Reconciliation, Verdict
from probe.reconcile.render import as_json, iso_time, render_table
from probe.reconcile.report_table import RUN_ID
from probe.signals import stop_on_signals
from probe.spark_kafka.jars import require_connector
from probe.status_board import StatusView, refresh_every
from probe.status_page import ReconcileRun

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# The service's exit after a stop; a single run's codes are its verdict's
# (probe.reconcile.outcome.EXIT_CODES), or a mismatch's when no comparison could be made.
EXIT_STOPPED = 0
EXIT_NO_COMPARISON = EXIT_CODES[Verdict.MISMATCH]


def run_reconcile(config: ProbeConfig, *, run_id: str | None, as_json_output: bool) -> int:
    """The whole `reconcile` command: every ``reconcile.every`` until SIGTERM or SIGINT
    when set (then 0), else one run; returns the exit code. A ConfigError, raised before
    Spark starts for every setting it can be, is the CLI's exit 2."""
    require_for_reconcile(config)
    require_connector(config.sink.source, config.sink.spark_conf)
    if config.reconcile.every is None:
        _require_sink_tables(config)
    if run_id is not None:
        _check_run_id(run_id)
    keyring_json = _keyring_json(config)
    if config.reconcile.every is not None:
        logs.configure(config.log_level)
        loop.run(serve_reconcile(config, keyring_json))
        return EXIT_STOPPED
    # The report is the output: the log's per-window warnings would repeat it.
    logs.configure(config.log_level if config.log_level != "info" else "error")
    return reconcile_once(config, keyring_json, run_id=run_id, as_json_output=as_json_output)


def _check_run_id(run_id: str) -> None:
    """A run id names the run's directory in the report table: nothing that leaves it."""
    if not RUN_ID.fullmatch(run_id):
        raise ConfigError(
            "--run-id", f"{run_id!r}: use letters, digits and . _ : - (it names a directory)"
        )


def _keyring_json(config: ProbeConfig) -> str | None:
    """The key ring the executors verify the sink's canaries with: only the canary
    format has signed records, and without a key file they are compared unverified."""
    if config.reconcile.format != "canary" or config.signing_key_file is None:
        return None
    return KeyRingSource.from_file(config.signing_key_file).ring.to_json()


def _require_sink_tables(config: ProbeConfig) -> None:
    """One run against the sink's own tables (no --table) on a local sink path that
    does not exist: there is nothing to reconcile. Said in one line naming the
    setting, before Spark starts and before anything is created there. (``--every``
    waits for the tables instead, its /readyz saying so.)"""
    path = config.sink.path
    if config.reconcile.table is not None or path is None:
        return
    url = urlsplit(path)
    local = url.path if url.scheme == "file" else path if url.scheme == "" else None
    if local is not None and not os.path.isdir(local):
        raise ConfigError(
            "sink.path",
            f"{path}: no such directory, so no sink tables to reconcile "
            "(--sink-path: where a sink stage writes them; --table: another table)",
        )


def reconcile_once(
    config: ProbeConfig,
    keyring_json: str | None,
    *,
    run_id: str | None = None,
    as_json_output: bool = False,
    out: TextIO | None = None,
) -> int:
    """One run: the table (or JSON) on ``out``, the exit code returned. ConfigError
    propagates (the CLI exits 2 with its line)."""
    from probe.reconcile.reconciler import one_run  # noqa: PLC0415 - Spark once the settings hold

    out = out or sys.stdout
    try:
        run = one_run(config, keyring_json, run_id)
    except ReconcileFailed as failed:
        if as_json_output:
            out.write(json.dumps({"ok": False, "error": str(failed)}) + "\n")
        else:
            out.write(f"result: FAILED: {failed}\n")
        return EXIT_NO_COMPARISON
    out.write(json.dumps(as_json(run)) + "\n" if as_json_output else render_table(run))
    return run.exit_code


def _summary(run: Reconciliation) -> str:
    """``complete``, ``found a mismatch``, or ``compared nothing: 9 records pending
    until 2026-01-01T12:10:30Z``."""
    if run.verdict is Verdict.COMPLETE:
        return "complete"
    if run.verdict is Verdict.MISMATCH:
        return "found a mismatch"
    if run.verdict_at_ms is None:
        return "compared nothing: no record to compare"
    return (
        f"compared nothing: {run.pending_records} records pending until "
        f"{iso_time(run.verdict_at_ms)}"
    )


# Runs the status page lists, newest first.
RUNS_SHOWN = 10


class Readiness:
    """/readyz of the reconcile service: ready once a run completed and while the
    last one did; the reason otherwise. ``runs``: the last runs, for the status page."""

    def __init__(self) -> None:
        self.ready = False
        self.reason = "reconcile: first run not finished"
        self.runs: deque[ReconcileRun] = deque(maxlen=RUNS_SHOWN)

    def __call__(self) -> tuple[bool, str]:
        return self.ready, self.reason

    def completed(self, run: Reconciliation) -> None:
        self.ready = True
        self.reason = f"reconcile: last run {run.run_id} {_summary(run)}"
        self.runs.append(
            ReconcileRun(run.run_id, run.finished_ms * 1_000_000, run.verdict.value, _summary(run))
        )

    def failed(self, error: Exception, now_ns: int) -> None:
        self.ready, self.reason = False, f"reconcile: last run failed: {error}"
        self.runs.append(ReconcileRun("", now_ns, "failed", str(error)))


async def serve_reconcile(
    config: ProbeConfig,
    keyring_json: str | None,
    stop: asyncio.Event | None = None,
    *,
    spark: SparkSession | None = None,
) -> None:
    """Reconcile every ``reconcile.every`` until ``stop`` (or SIGTERM/SIGINT).

    Runs start on a fixed period from the first (a run longer than the period is
    followed at once by the next, with no catching up). A stop cancels the Spark jobs
    of a run under way.
    """
    # Only this service serves endpoints: a single run does not import aiohttp.
    from probe.endpoints import MetricsServer, build_app  # noqa: PLC0415
    from probe.reconcile.reconciler import Reconciler, reconcile_session  # noqa: PLC0415 - Spark

    every = config.reconcile.every
    assert every is not None
    stop = stop_on_signals(stop)
    registry = served_registry()
    metrics = ReconcileMetrics(registry, config.target)
    readiness = Readiness()
    status = StatusView(
        "reconcile",
        config.target,
        readiness,
        reconcile_runs=lambda: tuple(readiness.runs),
        refresh_s=refresh_every(every),
        version=probe_version(),
    )
    server = MetricsServer.from_settings(build_app(registry, readiness, status), config.metrics)
    await server.start()
    try:
        if spark is None:
            spark = await asyncio.to_thread(reconcile_session, config)
        reconciler = Reconciler(spark, config, keyring_json, metrics)
        next_start = time.monotonic()
        while not stop.is_set():
            running = asyncio.create_task(asyncio.to_thread(reconciler.run))
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not running.done():
                # Stopped mid-run: end its Spark jobs rather than wait them out.
                spark.sparkContext.cancelAllJobs()
                with contextlib.suppress(ReconcileFailed, ConfigError):
                    await running
                break
            stopping.cancel()
            try:
                run = running.result()
            except (ReconcileFailed, ConfigError) as failed:
                readiness.failed(failed, time.time_ns())
                log.error("reconciliation failed: %s", failed)
            else:
                readiness.completed(run)
            # A run longer than the period is followed at once, never by a backlog.
            next_start = max(next_start + every, time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_start - time.monotonic()))
    finally:
        await server.stop()
