"""The pipeline jobs of docs/once-in-ci.md, as a user copies them: each YAML block's
`sla-probe once` command is one the command line accepts, its variables are settings
the probe reads, the JUnit report is kept when `once` exits 1 (GitLab's `artifacts:
when: always` and `reports: junit`, GitHub's `if: always()` upload and renderer), and
the job's own command, run with its own variables against a broker that does not answer
and a real Pushgateway, exits 1 having written that report and pushed its result."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from probe import cli
from probe.config import SECRET_VARIABLES
from probe.embedded import free_loopback_port
from tests.conftest import SLA_PROBE
from tests.services.test_junit_report import valid
from tests.services.test_push_gateway import Pushgateway

DOC = Path(__file__).resolve().parents[1] / "docs" / "once-in-ci.md"
ONCE = cli.main.commands["once"]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Job:
    """One documented job: where it is from, its variables, the shell lines it runs
    (``once`` among them), and the job or steps around it."""

    system: str
    variables: dict[str, str]
    commands: list[str]
    spec: dict[str, Any]

    @property
    def once(self) -> str:
        (command,) = [line for line in self.commands if line.startswith("sla-probe once")]
        return command

    @property
    def once_args(self) -> list[str]:
        return shlex.split(self.once)[2:]

    @property
    def junit(self) -> str:
        """The report file the command writes (`--junit FILE`)."""
        with ONCE.make_context("once", self.once_args) as ctx:
            path = ctx.params["junit"]
        assert path is not None, f"{self.system}: the command writes no JUnit report"
        return str(path)


def yaml_blocks() -> list[Any]:
    text = DOC.read_text(encoding="utf-8")
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def documented_jobs() -> Iterator[Job]:
    for block in yaml_blocks():
        if "jobs" in block:  # a GitHub Actions workflow
            for spec in block["jobs"].values():
                runs = [step["run"] for step in spec["steps"] if "run" in step]
                yield Job("github", dict(spec.get("env", {})), runs, spec)
        else:  # GitLab CI: jobs at the top level
            for spec in block.values():
                if isinstance(spec, dict) and "script" in spec:
                    yield Job("gitlab", dict(spec.get("variables", {})), spec["script"], spec)


JOBS = {job.system: job for job in documented_jobs()}


def test_the_doc_has_a_job_for_each_ci_system() -> None:
    assert set(JOBS) == {"gitlab", "github"}


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_the_command_is_one_once_accepts(system: str) -> None:
    job = JOBS[system]
    try:
        with ONCE.make_context("once", job.once_args):
            pass
    except click.UsageError as error:  # an unknown flag, a missing value
        pytest.fail(f"{system}: {job.once!r}: {error.format_message()}")


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_every_variable_is_a_setting_the_probe_reads(system: str) -> None:
    read = {
        variable
        for param in ONCE.params
        for variable in ([param.envvar] if isinstance(param.envvar, str) else param.envvar or [])
    } | set(SECRET_VARIABLES.values())
    given = {name for name in JOBS[system].variables if name.startswith("SLA_PROBE_")}
    assert given, "the job configures the probe by its environment"
    assert given <= read, given - read


def test_gitlab_keeps_and_shows_the_report_when_once_fails() -> None:
    job = JOBS["gitlab"]
    artifacts = job.spec["artifacts"]
    # Uploaded whatever the job's result (the default is on success only), and shown
    # in the pipeline's Tests tab; the copy under paths is the one to browse.
    assert artifacts["when"] == "always"
    assert artifacts["reports"]["junit"] == job.junit
    assert job.junit in artifacts["paths"]


def test_github_keeps_and_renders_the_report_when_once_fails() -> None:
    job = JOBS["github"]
    steps = job.spec["steps"]
    (at,) = [i for i, step in enumerate(steps) if step.get("run") == job.once]
    after = {step["uses"].split("@")[0]: step for step in steps[at + 1 :] if "uses" in step}
    # Steps after a failed one are skipped unless told otherwise.
    upload = after["actions/upload-artifact"]
    assert upload["if"] == "always()"
    assert upload["with"]["path"] == job.junit
    render = after["mikepenz/action-junit-report"]
    assert render["if"] == "always()"
    assert render["with"]["report_paths"] == job.junit
    # Without checks: write: annotations and the job summary only.
    assert render["with"]["annotate_only"] is True
    assert "permissions" not in job.spec


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[Pushgateway]:
    with Pushgateway(tmp_path) as gateway:
        yield gateway


@pytest.mark.parametrize("system", ["gitlab", "github"])
def test_the_job_fails_with_its_report_written_and_its_result_pushed(
    system: str, pushgateway: Pushgateway, tmp_path: Path
) -> None:
    """The job's command as its shell runs it, with the job's variables: the two that
    name the CI system's own variables (the brokers, the Pushgateway) point at a port
    where nothing listens and at a real Pushgateway."""
    job = JOBS[system]
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    variables = {
        **job.variables,
        "SLA_PROBE_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_loopback_port()}",
        "SLA_PROBE_PUSH_GATEWAY": pushgateway.url,
    }
    assert not [v for v in variables.values() if "$" in v], "a variable left to the CI system"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}
    environ["PATH"] = f"{Path(SLA_PROBE).parent}{os.pathsep}{environ['PATH']}"
    done = subprocess.run(
        ["sh", "-c", job.once],
        cwd=workdir,
        env={**environ, **variables},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "result: FAIL" in done.stdout  # the table, in the job's log
    (suite,) = valid(workdir / job.junit)
    (connect,) = [case for case in suite if case.name == "connect"]
    assert connect.result, "the target that could not be probed is a case in error"
    target = variables["SLA_PROBE_TARGET"]
    pushed = {
        ("instance", target),
        ("job", variables["SLA_PROBE_PUSH_GATEWAY_JOB"]),
        ("target", target),
    }
    assert pushgateway.samples("synthetic_sla_smoke_success") == {tuple(sorted(pushed)): 0.0}
