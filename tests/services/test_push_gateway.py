"""`sla-probe once --push-gateway` against a real Pushgateway (Debian's
prometheus-pushgateway): each target's result replaces its group's last push, whichever
host ran it (the instance is the target's name unless given by flag, variable or file);
a push that fails is reported and leaves the exit code alone; basic auth and TLS as the
Pushgateway's own web config asks; a real Prometheus scraping the Pushgateway with the
shipped rules tickets a failed smoke test and resolves it at the next run's pass, run
from another host."""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from probe.embedded import LoopbackServer, free_loopback_port
from tests.certificates import CertificateAuthority
from tests.conftest import SLA_PROBE, wait_for
from tests.prometheus import launch_prometheus
from tests.test_slo_rules import render_rules

USER, PASSWORD = "ci", "push-s3cret"


class Pushgateway(LoopbackServer):
    """The Pushgateway on a loopback port, without persistence; ``web_config``: the
    exporter toolkit's file (TLS, basic auth) it serves behind."""

    name = "pushgateway"

    def __init__(self, directory: Path, web_config: Path | None = None) -> None:
        super().__init__(log_file=directory / "pushgateway.log")
        self._web_config = web_config

    def command(self) -> list[str]:
        binary = shutil.which("prometheus-pushgateway")
        assert binary, "`make test` installs prometheus-pushgateway (Debian package)"
        web = [f"--web.config.file={self._web_config}"] if self._web_config else []
        # Debian's build persists to /var/lib/prometheus by default: in memory here.
        return [binary, f"--web.listen-address=127.0.0.1:{self.port}",
                "--persistence.file=", *web]  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample of ``name`` the Pushgateway serves, by its sorted labels."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        return {
            tuple(sorted(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name
        }


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[Pushgateway]:
    with Pushgateway(tmp_path) as gateway:
        yield gateway


def once(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None, host: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``sla-probe once`` with ``env`` added to the environment; with ``host``, on a
    host of that name (a UTS namespace of its own, as a CI job's container has: exit 97
    where one cannot be made)."""
    command = [SLA_PROBE, "once", *args]
    if host is not None:
        rename = 'hostname "$0" 2>/dev/null || exit 97; exec "$@"'
        command = ["unshare", "--uts", "sh", "-c", rename, host, *command]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def group(
    instance: str = "kafka", job: str = "synthetic-sla-smoke", **labels: str
) -> tuple[tuple[str, str], ...]:
    """A pushed sample's labels; by default those of the group of target kafka."""
    return tuple(sorted({"job": job, "instance": instance, "target": "kafka", **labels}.items()))


def test_a_passing_run_then_a_failing_one_each_replace_the_group(
    pushgateway: Pushgateway,
) -> None:
    began = time.time()
    passed = once("--embedded", "--probe-id", "ci-1", "--push-gateway", pushgateway.url)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert pushgateway.samples("synthetic_sla_smoke_success") == {group(): 1.0}
    canaries = pushgateway.samples("synthetic_sla_smoke_canaries")
    delivered = canaries[group(stage="consumer", outcome="delivered")]
    assert delivered >= 3  # three rounds, one canary per partition
    assert canaries[group(stage="consumer", outcome="lost")] == 0
    count = pushgateway.samples("synthetic_sla_smoke_latency_seconds_count")
    assert count == {group(stage="consumer"): delivered}
    (ended,) = pushgateway.samples("synthetic_sla_smoke_last_run_timestamp_seconds").values()
    assert began < ended <= time.time()
    (took,) = pushgateway.samples("synthetic_sla_smoke_duration_seconds").values()
    assert 0 < took < time.time() - began

    # The same group, now failing (nothing listens), from a probe of another id: replaced,
    # not added beside.
    nowhere = f"127.0.0.1:{free_loopback_port()}"
    failed = once("--bootstrap-servers", nowhere, "--probe-id", "ci-2",
                  "--push-gateway", pushgateway.url, "--send-timeout", "1s")  # fmt: skip
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert pushgateway.samples("synthetic_sla_smoke_success") == {group(): 0.0}
    canaries = pushgateway.samples("synthetic_sla_smoke_canaries")
    assert all(value == 0 for value in canaries.values()), canaries
    # The Pushgateway's own record of the push.
    assert pushgateway.samples("push_failure_time_seconds")[group()] == 0


def test_runs_on_two_hosts_push_to_one_group(pushgateway: Pushgateway) -> None:
    """Two CI jobs land on runners of different host names (the probe id's default): a
    failed run on one, then a passing run on the other, replace one group's result. A
    group per host name left every past run's group behind for good, and the failed
    one's alert unresolved."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to run under another host name")
    nowhere = f"127.0.0.1:{free_loopback_port()}"
    failed = once("--bootstrap-servers", nowhere, "--send-timeout", "1s",
                  "--push-gateway", pushgateway.url, host="runner-7f3a-concurrent-0")  # fmt: skip
    if failed.returncode == 97:
        pytest.skip("no UTS namespace can be made here")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert pushgateway.samples("synthetic_sla_smoke_success") == {group(): 0.0}
    passed = once("--embedded", "--push-gateway", pushgateway.url, host="runner-c41d-concurrent-1")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert pushgateway.samples("synthetic_sla_smoke_success") == {group(): 1.0}
    # One group on the Pushgateway, whose last push succeeded.
    assert pushgateway.samples("push_time_seconds").keys() == {group()}


@pytest.mark.parametrize(
    "given",
    [
        ["--push-gateway-job", "deploy", "--push-gateway-instance", "eu-west-1"],
        {"SLA_PROBE_PUSH_GATEWAY_JOB": "deploy", "SLA_PROBE_PUSH_GATEWAY_INSTANCE": "eu-west-1"},
    ],
    ids=["flags", "environment"],
)
def test_job_and_instance_as_given(
    pushgateway: Pushgateway, given: list[str] | dict[str, str]
) -> None:
    flags = given if isinstance(given, list) else []
    env = given if isinstance(given, dict) else {}
    done = once("--embedded", "--push-gateway", pushgateway.url, *flags, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    pushed = {group(instance="eu-west-1", job="deploy"): 1.0}
    assert pushgateway.samples("synthetic_sla_smoke_success") == pushed


def test_a_job_or_instance_without_a_push_gateway_is_a_config_error() -> None:
    done = once("--embedded", env={"SLA_PROBE_PUSH_GATEWAY_INSTANCE": "eu-west-1"})
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "sla-probe: config error: once.push_gateway: instance given without url: the "
        "Pushgateway to push to (--push-gateway URL, SLA_PROBE_PUSH_GATEWAY)"
    )


def test_a_failed_push_is_reported_and_leaves_a_passing_run_passing(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_loopback_port()}"
    done = once("--embedded", "--push-gateway", closed, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"cannot push target kafka to {closed}: " in done.stderr
    assert "Connection refused" in done.stderr


def _secured_gateway(directory: Path) -> tuple[Path, Path]:
    """The Pushgateway's web config (TLS for 127.0.0.1, one basic-auth user) and the CA."""
    ca = CertificateAuthority("pushgateway CA")
    ca.issue("127.0.0.1").write(directory, "gateway")
    (directory / "ca.crt").write_text(ca.pem)
    web = directory / "web.yml"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    web.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": str(directory / "gateway.crt"),
                              "key_file": str(directory / "gateway.key")},
        "basic_auth_users": {USER: hashed},
    }))  # fmt: skip
    return web, directory / "ca.crt"


@pytest.mark.parametrize("password", [PASSWORD, "not-the-password"], ids=["right", "wrong"])
def test_basic_auth_and_tls_as_the_pushgateway_asks(tmp_path: Path, password: str) -> None:
    web, ca = _secured_gateway(tmp_path)
    password_file = tmp_path / "password"
    password_file.write_text(password + "\n")
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({"once": {"push_gateway": {
        "url": "https://127.0.0.1:PORT", "username": USER,
        "password_file": str(password_file), "tls": {"ca_file": str(ca)},
        "grouping": {"pipeline": "orders"},
    }}}))  # fmt: skip
    with Pushgateway(tmp_path, web_config=web) as gateway:
        config.write_text(config.read_text().replace("PORT", str(gateway.port)))
        done = once("--embedded", "--config", str(config))
        assert done.returncode == 0, done.stdout + done.stderr
        assert password not in done.stdout + done.stderr
        if password != PASSWORD:
            assert "cannot push target kafka to https://" in done.stderr
            assert "401" in done.stderr
            return
        assert "cannot push" not in done.stderr
        request = urllib.request.Request(f"https://127.0.0.1:{gateway.port}/metrics")
        token = f"{USER}:{PASSWORD}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
        context = ssl.create_default_context(cafile=str(ca))
        with urllib.request.urlopen(request, timeout=5, context=context) as reply:
            text = reply.read().decode()
        success = [
            sample
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "synthetic_sla_smoke_success"
        ]
        (pushed,) = success
        assert pushed.value == 1
        assert pushed.labels["pipeline"] == "orders"  # the extra grouping label
        assert (pushed.labels["job"], pushed.labels["target"]) == ("synthetic-sla-smoke", "kafka")


def test_prometheus_scraping_the_pushgateway_tickets_a_failed_smoke_test(
    pushgateway: Pushgateway, tmp_path: Path
) -> None:
    """The shipped rules (rendered with no `for`, so the test need not wait 5 min) on a
    real Prometheus scraping the Pushgateway as documented (honor_labels): a failed
    push fires SyntheticSlaSmokeTestFailed for its group, a passing one resolves it."""
    rules = tmp_path / "rules.yml"
    rules.write_text(
        render_rules.plain_rules_text({"alerts": {"smokeTest": {"failed": {"for": "0s"}}}})
    )
    prometheus = launch_prometheus(tmp_path, {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{
            "job_name": "pushgateway", "honor_labels": True,
            "static_configs": [{"targets": [f"127.0.0.1:{pushgateway.port}"]}],
        }],
    })  # fmt: skip
    alert = (
        'ALERTS{alertname="SyntheticSlaSmokeTestFailed", alertstate="firing", '
        'instance="kafka", job="synthetic-sla-smoke", target="kafka"}'
    )
    try:
        # Two CI jobs, two probe ids (their host names by default): one group.
        nowhere = f"127.0.0.1:{free_loopback_port()}"
        failed = once("--bootstrap-servers", nowhere, "--probe-id", "runner-1",
                      "--push-gateway", pushgateway.url, "--send-timeout", "1s")  # fmt: skip
        assert failed.returncode == 1
        wait_for(lambda: prometheus.value(alert) == 1, timeout=60, what="the ticket firing")
        passed = once("--embedded", "--probe-id", "runner-2", "--push-gateway", pushgateway.url)
        assert passed.returncode == 0, passed.stdout + passed.stderr
        wait_for(lambda: prometheus.value(alert) is None, timeout=60, what="the ticket resolved")
        stale = 'ALERTS{alertname="SyntheticSlaSmokeTestStale"}'
        assert prometheus.query(stale) == []
        assert prometheus.value("count(synthetic_sla_smoke_success)") == 1
    finally:
        prometheus.process.terminate()
        prometheus.process.wait(30)
