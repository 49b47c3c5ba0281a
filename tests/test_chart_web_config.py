"""The chart's secured endpoints as a kubelet and Prometheus meet them: the chart is
rendered (Helm's own engine) with a web config of basic auth and a certificate from a
Secret of its own (cert-manager's), the probe pod's files laid out as the kubelet
mounts them (the rendered ConfigMap and Secrets, the certificate Secret), and a real
`sla-probe run` started with the container's arguments and environment. The rendered
liveness, readiness and startup probes are then run as the kubelet runs them (their
port, path and scheme, no credentials), beside a scrape of the secured metrics port.
"""

from __future__ import annotations

import base64
import http.client
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from probe.embedded import EmbeddedBroker, free_loopback_port
from tests.certificates import CertificateAuthority
from tests.conftest import SLA_PROBE, wait_for
from tests.endpoint_client import EndpointClient, Reply
from tests.test_chart import Manifest, only, render, validate

USER, PASSWORD = "prometheus", "s3cret"
CERTIFICATE_SECRET = "orders-probe-web-tls"  # cert-manager's, outside the chart
KUBELET_CHECKS = ("livenessProbe", "readinessProbe", "startupProbe")
# The mount root every path of the pod is under: the rendered files name /etc/sla-probe/.
POD_ROOT = "/etc/sla-probe/"


def values(bootstrap_servers: str, topic: str, metrics_port: int, health_port: int) -> Any:
    # Cost 4, the least bcrypt takes: this test is about who is admitted, not the cost.
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    return {
        "config": {"kafka": {"bootstrap_servers": bootstrap_servers, "topic": topic}},
        "service": {"port": metrics_port},
        "webConfig": {
            "certificateSecret": CERTIFICATE_SECRET,
            "basicAuthUsers": {USER: hashed},
            "healthPort": health_port,
        },
        # As the values name them: the metrics port, which a web config secures.
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "failureThreshold": 30,
        },
    }


def _secret_files(secret: Manifest) -> dict[str, str]:
    files = {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}
    given: dict[str, str] = secret.get("stringData", {})
    return files | given


def lay_out_pod(
    manifests: list[Manifest], pod: Manifest, root: Path, outside: dict[str, dict[str, str]]
) -> None:
    """Every volume the first container mounts, written under ``root`` as the kubelet
    mounts it (a Secret's or ConfigMap's keys, or its ``items``), from the rendered
    manifests or ``outside`` (Secrets the chart does not make). Paths in the files are
    moved under ``root`` with them."""
    rendered = {
        (m["kind"], m["metadata"]["name"]): m
        for m in manifests
        if m["kind"] in ("ConfigMap", "Secret")
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in pod["containers"][0]["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "secret" in volume:
            source = volume["secret"]
            secret = rendered.get(("Secret", source["secretName"]))
            files = _secret_files(secret) if secret is not None else outside[source["secretName"]]
        else:
            source = volume["configMap"]
            files = rendered[("ConfigMap", source["name"])]["data"]
        items = source.get("items")
        chosen = {i["path"]: files[i["key"]] for i in items} if items else files
        directory = root / mount["mountPath"].lstrip("/")
        directory.mkdir(parents=True)
        for path, text in chosen.items():
            file = directory / path
            file.write_text(text.replace(POD_ROOT, f"{root}{POD_ROOT}"))
            file.chmod(source.get("defaultMode", 0o644))


@dataclass
class KubeletCheck:
    """One of the container's probes, as the kubelet runs it."""

    name: str
    port: int
    path: str
    scheme: str

    def status(self) -> int:
        """The HTTP status; 0 when nothing answered (the kubelet counts a failure)."""
        assert self.scheme == "HTTP"  # the kubelet has no CA for the probe's certificate
        try:
            return EndpointClient(self.port).get(self.path).status
        except (ConnectionError, http.client.HTTPException, TimeoutError):
            return 0


@dataclass
class ChartPod:
    process: subprocess.Popen[bytes]
    container: Manifest
    checks: dict[str, KubeletCheck]
    metrics_port: int
    ca_file: Path

    def scraper(self, *, credentials: bool) -> EndpointClient:
        if credentials:
            return EndpointClient(self.metrics_port, self.ca_file, user=USER, password=PASSWORD)
        return EndpointClient(self.metrics_port, self.ca_file)


def _checks(container: Manifest) -> dict[str, KubeletCheck]:
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    checks = {}
    for name in KUBELET_CHECKS:
        get = container[name]["httpGet"]
        assert "httpHeaders" not in get, name  # no credentials for the kubelet
        port = get["port"]
        checks[name] = KubeletCheck(
            name, ports[port] if isinstance(port, str) else port, get["path"],
            get.get("scheme", "HTTP"),
        )  # fmt: skip
    return checks


@pytest.fixture
def chart_pod(tmp_path: Path) -> Iterator[Callable[[str, str], ChartPod]]:
    """Start the chart's probe pod on this machine: `sla-probe run` with the rendered
    config, web config, key ring and certificate, probing ``bootstrap_servers``."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(bootstrap_servers: str, topic: str) -> ChartPod:
        metrics_port, health_port = free_loopback_port(), free_loopback_port()
        manifests = render(values(bootstrap_servers, topic, metrics_port, health_port))
        for manifest in manifests:
            validate(manifest)
        pod = only(manifests, "Deployment", "probe")["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        ca = CertificateAuthority("cert-manager's issuer")
        issued = ca.issue("127.0.0.1")
        certificate = {
            "tls.crt": issued.certificate_pem,
            "tls.key": issued.key_pem,
            "ca.crt": ca.pem,
        }
        lay_out_pod(manifests, pod, tmp_path, {CERTIFICATE_SECRET: certificate})

        env = {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}
        for variable in container["env"]:
            if "valueFrom" in variable:  # the probe id: the pod's name
                env[variable["name"]] = "orders-synthetic-sla-probe-7d9f-x2k4p"
            else:
                env[variable["name"]] = variable["value"].replace(POD_ROOT, f"{tmp_path}{POD_ROOT}")
        # What the kubelet does not set: this machine's loopback, rounds of a second.
        here = ["--metrics-host", "127.0.0.1", "--interval", "1s", "--fetch-max-wait", "20ms"]
        log = tmp_path / "probe.log"
        process = subprocess.Popen(
            [SLA_PROBE, *container["args"], *here],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        started.append((process, log))
        running = ChartPod(
            process, container, _checks(container), metrics_port, tmp_path / "ca.crt"
        )
        running.ca_file.write_text(ca.pem)
        liveness = running.checks["livenessProbe"]
        wait_for(
            lambda: process.poll() is not None or liveness.status() == 200,
            timeout=20,
            what="the liveness probe answered",
        )
        assert process.poll() is None, log.read_text()
        return running

    yield start
    for process, log in started:
        process.terminate()
        process.wait(10)
        tail = log.read_text(errors="replace").splitlines()[-40:]
        print(f"--- last lines of {log.name} ---", *(line[:300] for line in tail), sep="\n")


def test_the_rendered_kubelet_probes_pass_without_credentials_while_metrics_stay_secured(
    chart_pod: Callable[[str, str], ChartPod], broker: EmbeddedBroker, topic: str
) -> None:
    pod = chart_pod(broker.bootstrap_servers, topic)
    checks = pod.checks
    # The chart points every check at the health port, over plain HTTP, whatever the
    # values named (the startup probe named the secured metrics port).
    (health,) = (p["containerPort"] for p in pod.container["ports"] if p["name"] == "health")
    assert {(c.port, c.scheme) for c in checks.values()} == {(health, "HTTP")}
    assert health != pod.metrics_port
    wait_for(
        lambda: checks["readinessProbe"].status() == 200,
        timeout=30,
        what="the readiness probe: ready (broker reached, topic known)",
    )
    for check in checks.values():
        assert check.status() == 200, check

    # /metrics on the metrics port: TLS with the certificate of its own Secret, and
    # basic auth; nothing without credentials.
    anonymous = pod.scraper(credentials=False).get("/metrics")
    assert anonymous.status == 401
    assert anonymous.headers["WWW-Authenticate"] == "Basic"
    assert "synthetic_sla" not in anonymous.body
    assert pod.scraper(credentials=False).get("/readyz").status == 401
    scraped = pod.scraper(credentials=True).get("/metrics")
    assert scraped.status == 200
    assert scraped.server_certificate is not None
    assert "synthetic_sla_canaries_total" in scraped.body


def test_readiness_on_the_health_port_holds_back_a_rollout_with_unreachable_brokers(
    chart_pod: Callable[[str, str], ChartPod], topic: str
) -> None:
    """A rollout with a wrong broker list (or bad credentials): live, not ready, so the
    old pods keep running. A TCP check (the old kubeletProbes: tcp) passed here."""
    nobody = f"127.0.0.1:{free_loopback_port()}"
    pod = chart_pod(nobody, topic)
    admitted = pod.scraper(credentials=True)

    # The probe has tried the brokers and says why it is not ready (on the secured port).
    def tried() -> Reply | None:
        reply = admitted.get("/readyz")
        return reply if reply.body != "not connected yet\n" else None

    reason = wait_for(tried, timeout=30, what="a failed attempt to reach the brokers")
    assert reason.status == 503
    assert pod.checks["readinessProbe"].status() == 503
    # Alive all along: the kubelet does not restart a probe measuring an outage.
    assert pod.checks["livenessProbe"].status() == 200
    assert pod.checks["startupProbe"].status() == 200
