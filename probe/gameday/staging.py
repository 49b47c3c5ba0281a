"""Staging mode: the user's pipeline, the user's Prometheus or Alertmanager, their hooks.

The fault is whatever the ``inject`` hook does (``kubectl delete pod kafka-1``), the
healing whatever ``heal`` does; both run with ``sh -c``, a timeout, and their output
captured into the report. The alerts are read from the given API. With
``prometheus_url`` the probe's series (``probe_selector``) are read back and
replayed with the rules file of ``prometheus.rules_file`` (default the shipped one)
at the production interval; with ``alertmanager_url`` there is no series to read,
so only live figures exist (what Alertmanager saw, after inhibition).

A hook that fails or times out makes the run fail with its output in the report; the
heal hook and the teardown always run once inject was attempted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from probe.gameday.inhibition import documented_inhibit_rules
from probe.gameday.local import SHIPPED_RULES
from probe.gameday.prometheus import AlertmanagerApi, PrometheusApi
from probe.gameday.runner import (
    GamedayResult,
    HookRun,
    ProgressCallback,
    judge_run,
    record_series,
    run_phases,
)
from probe.gameday.scenario import Hook, Scenario

_OUTPUT_LIMIT = 20_000


def run_hook(name: str, hook: Hook) -> HookRun:
    """Run a hook in its own process group; kill the group at the timeout."""
    started = time.monotonic()
    process = subprocess.Popen(
        ["sh", "-c", hook.command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=hook.timeout)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        # The whole group: a hook's children (kubectl, ssh) must not outlive it.
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    text = output.decode(errors="replace")[-_OUTPUT_LIMIT:]
    return HookRun(name, hook.command, code, time.monotonic() - started, text)


class HookFault:
    """The inject and heal hooks as a fault; every run is kept for the report."""

    def __init__(self, inject: Hook, heal: Hook) -> None:
        self.hooks = {"inject": inject, "heal": heal}
        self.runs: list[HookRun] = []

    def inject(self) -> None:
        self.runs.append(run_hook("inject", self.hooks["inject"]))

    def heal(self) -> None:
        self.runs.append(run_hook("heal", self.hooks["heal"]))


def run_staging(
    scenario: Scenario, workdir: Path, *, on_phase: ProgressCallback | None = None
) -> GamedayResult:
    staging = scenario.staging
    assert staging is not None  # the scenario model requires it in staging mode
    runs: list[HookRun] = []
    if staging.setup is not None:
        runs.append(run_hook("setup", staging.setup))
    fault = HookFault(staging.inject, staging.heal)
    prometheus = PrometheusApi(staging.prometheus_url) if staging.prometheus_url else None
    source = prometheus or AlertmanagerApi(staging.alertmanager_url or "")
    try:
        clock, watcher = run_phases(
            scenario, fault, source, staging.poll_interval, on_phase=on_phase
        )
    finally:
        runs += fault.runs
        if staging.teardown is not None:
            runs.append(run_hook("teardown", staging.teardown))
    step = scenario.prometheus.scrape_interval
    series = (
        record_series(prometheus, clock.start, clock.end, step, staging.probe_selector)
        if prometheus is not None and scenario.production.replay
        else None
    )
    result = judge_run(
        scenario,
        clock,
        watcher,
        series=series,
        live_step=step,
        rules_file=scenario.prometheus.rules_file or SHIPPED_RULES,
        workdir=workdir,
        # Alertmanager as docs/alerting.md tells users to configure it.
        inhibit_rules=documented_inhibit_rules(),
    )
    result.hooks = runs
    for run in runs:
        if run.exit_code != 0:
            state = "timed out" if run.exit_code is None else f"exited {run.exit_code}"
            result.problems.append(f"hook {run.name} {state}")
    return result
