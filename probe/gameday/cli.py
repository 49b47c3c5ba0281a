"""`sla-probe gameday`: run game-day scenarios and report time-to-detect.

    sla-probe gameday scenarios/broker-stop.yaml          # a table, exit 0/1
    sla-probe gameday scenarios/broker-stop.yaml --json
    sla-probe gameday --all scenarios/ --markdown         # the detection table

Exit codes: 0 every expectation holds, 1 one does not (or the run could not
complete), 2 a bad scenario file (one line naming the field, as every command says
``sla-probe: config error: <field>: <message>``).
"""

from __future__ import annotations

import json as json_module
import sys
from pathlib import Path

import click

from probe.core.errors import ConfigError, ProbeError
from probe.gameday.report import MARKDOWN_HEADER, markdown_rows, splice_table, table, to_json
from probe.gameday.runner import GamedayResult, workspace
from probe.gameday.scenario import Scenario, load_scenario

EXIT_FAILED = 1
EXIT_USAGE = 2


def run_scenario(scenario: Scenario, workdir: Path, *, quiet: bool = False) -> GamedayResult:
    """Run one loaded scenario in its mode."""

    def say(message: str) -> None:
        if not quiet:
            click.echo(f"[{scenario.name}] {message}", err=True)

    if scenario.mode == "staging":
        from probe.gameday.staging import run_staging  # noqa: PLC0415

        return run_staging(scenario, workdir, on_phase=say)
    from probe.gameday.local import run_local  # noqa: PLC0415

    return run_local(scenario, workdir, on_phase=say)


def _scenarios(paths: tuple[Path, ...], all_dir: Path | None, slow: bool) -> list[Scenario]:
    files = list(paths)
    if all_dir is not None:
        files += sorted(all_dir.glob("*.yaml"))
    scenarios = []
    for path in files:
        try:
            scenario = load_scenario(path)
        except ConfigError as error:
            where = f"{path}: " if len(files) > 1 else ""
            click.echo(f"sla-probe: config error: {where}{error}", err=True)
            sys.exit(EXIT_USAGE)
        # --all runs local scenarios: staging ones need the user's pipeline.
        skipped = scenario.mode != "local" or (scenario.slow and not slow)
        if all_dir is not None and path not in paths and skipped:
            continue
        scenarios.append(scenario)
    return scenarios


@click.command()
@click.argument("scenario_files", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--all",
    "all_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Run every local scenario in this directory (slow ones with --slow).",
)
@click.option("--slow", is_flag=True, help="With --all: the slow scenarios too.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@click.option("--markdown", is_flag=True, help="The detection table (docs/detection.md).")
@click.option(
    "--write-table",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the detection table into this Markdown file (between its markers): the "
    "whole table with --all, only the named scenarios' rows otherwise.",
)
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Keep logs, configs and the replay's promtool test here.",
)
def gameday(
    *,
    scenario_files: tuple[Path, ...],
    all_dir: Path | None,
    slow: bool,
    as_json: bool,
    markdown: bool,
    write_table: Path | None,
    workdir: Path | None,
) -> None:
    """Inject a fault, watch the alerts, report time-to-detect live and at production time.

    \b
    sla-probe gameday scenarios/broker-stop.yaml
    sla-probe gameday scenarios/broker-stop.yaml --json
    sla-probe gameday --all scenarios/ --markdown

    Exit codes: 0 every expectation holds, 1 one does not, 2 bad scenario file.
    """
    if not scenario_files and all_dir is None:
        raise click.UsageError("give a scenario file, or --all DIRECTORY")
    scenarios = _scenarios(scenario_files, all_dir, slow)
    results: list[GamedayResult] = []
    for scenario in scenarios:
        with workspace(workdir, scenario.name) as directory:
            try:
                results.append(run_scenario(scenario, directory, quiet=as_json))
            except ProbeError as error:
                click.echo(f"sla-probe: gameday {scenario.name}: {error}", err=True)
                sys.exit(EXIT_FAILED)
    if as_json:
        documents = [to_json(result) for result in results]
        click.echo(json_module.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
    elif markdown or write_table:
        # A table row says that a scenario failed, not which alert: the failing runs'
        # full reports go to stderr, so a failure in a long run is never a mystery.
        for result in results:
            if not result.ok:
                click.echo(table(result), err=True)
        rows = [row for result in results for row in markdown_rows(result)]
        if write_table is not None:
            # A run of named scenarios updates their rows only; --all writes the table.
            document = write_table.read_text()
            write_table.write_text(splice_table(document, rows, theirs_only=all_dir is None))
        click.echo("\n".join(MARKDOWN_HEADER + rows))
    else:
        click.echo("\n\n".join(table(result) for result in results))
    sys.exit(0 if all(result.ok for result in results) else EXIT_FAILED)
