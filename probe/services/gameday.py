"""`sla-probe gameday`: run game-day scenarios and report time-to-detect.

    sla-probe gameday scenarios/broker-stop.yaml          # a table, exit 0/1
    sla-probe gameday scenarios/broker-stop.yaml --json
    sla-probe gameday --all scenarios/ --markdown         # the detection table

Exit codes: 0 every expectation holds, 1 one does not (or the run could not
complete: :class:`ScenarioFailed`), 2 a bad scenario file (a ConfigError naming the
field, as every command says ``sla-probe: config error: <field>: <message>``). The
scenarios, their faults, runs and reports are :mod:`probe.gameday`.
"""

from __future__ import annotations

import json as json_module
import sys
from pathlib import Path

from probe.core.errors import ConfigError, ProbeError
from probe.gameday.report import MARKDOWN_HEADER, markdown_rows, splice_table, table, to_json
from probe.gameday.runner import GamedayResult, workspace
from probe.gameday.scenario import Scenario, load_scenario

EXIT_OK = 0
EXIT_FAILED = 1


class ScenarioFailed(ProbeError):
    """A scenario could not run to its end (an environment that did not start, a hook
    refused): the game day stops there, exit 1, reporting none of the runs."""

    def __init__(self, scenario: str, error: ProbeError) -> None:
        super().__init__(f"gameday {scenario}: {error}")
        self.scenario = scenario


def run_gamedays(
    scenario_files: tuple[Path, ...],
    all_dir: Path | None,
    *,
    slow: bool,
    as_json: bool,
    markdown: bool,
    write_table: Path | None,
    workdir: Path | None,
) -> int:
    """The whole `gameday` command: every scenario named, and with ``all_dir`` its
    local ones, run one after the other, then their report on stdout (a table each,
    JSON, or the detection table's rows, written into ``write_table`` too); returns
    the exit code. Progress goes to stderr unless ``as_json``."""
    scenarios = _scenarios(scenario_files, all_dir, slow)
    results: list[GamedayResult] = []
    for scenario in scenarios:
        with workspace(workdir, scenario.name) as directory:
            try:
                results.append(run_scenario(scenario, directory, quiet=as_json))
            except ProbeError as error:
                raise ScenarioFailed(scenario.name, error) from error
    if as_json:
        documents = [to_json(result) for result in results]
        print(json_module.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
    elif markdown or write_table:
        # A table row says that a scenario failed, not which alert: the failing runs'
        # full reports go to stderr, so a failure in a long run is never a mystery.
        for result in results:
            if not result.ok:
                print(table(result), file=sys.stderr)
        rows = [row for result in results for row in markdown_rows(result)]
        if write_table is not None:
            # A run of named scenarios updates their rows only; --all writes the table.
            document = write_table.read_text()
            write_table.write_text(splice_table(document, rows, theirs_only=all_dir is None))
        print("\n".join(MARKDOWN_HEADER + rows))
    else:
        print("\n\n".join(table(result) for result in results))
    return EXIT_OK if all(result.ok for result in results) else EXIT_FAILED


def run_scenario(scenario: Scenario, workdir: Path, *, quiet: bool = False) -> GamedayResult:
    """Run one loaded scenario in its mode."""

    def say(message: str) -> None:
        if not quiet:
            print(f"[{scenario.name}] {message}", file=sys.stderr, flush=True)

    if scenario.mode == "staging":
        from probe.gameday.staging import run_staging  # noqa: PLC0415

        return run_staging(scenario, workdir, on_phase=say)
    from probe.gameday.local import run_local  # noqa: PLC0415

    return run_local(scenario, workdir, on_phase=say)


def _scenarios(paths: tuple[Path, ...], all_dir: Path | None, slow: bool) -> list[Scenario]:
    """Every scenario to run, each file loaded before any runs: a bad one is a
    ConfigError (named by its file when there are several), and nothing ran."""
    files = list(paths)
    if all_dir is not None:
        files += sorted(all_dir.glob("*.yaml"))
    scenarios = []
    for path in files:
        try:
            scenario = load_scenario(path)
        except ConfigError as error:
            if len(files) == 1:
                raise
            # The file is where the field is: the CLI's line reads
            # "sla-probe: config error: scenarios/x.yaml: phases.fault: ...".
            raise ConfigError(f"{path}: {error.field}", error.message) from error
        # --all runs local scenarios: staging ones need the user's pipeline.
        skipped = scenario.mode != "local" or (scenario.slow and not slow)
        if all_dir is not None and path not in paths and skipped:
            continue
        scenarios.append(scenario)
    return scenarios
