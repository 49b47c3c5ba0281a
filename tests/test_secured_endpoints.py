"""End to end: a real Prometheus scrapes a running `sla-probe run` the way it scrapes
its own exporters behind ``--web.config.file``: HTTPS, a client certificate, basic
auth. Clients without them are refused; a certificate rotated on disk is served to
the next connection (on the probe's own event loop, uvloop)."""

from __future__ import annotations

import os
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml

from probe.embedded import EmbeddedBroker, free_loopback_port
from tests.certificates import CertificateAuthority
from tests.conftest import SLA_PROBE, run_args, wait_for
from tests.endpoint_client import EndpointClient
from tests.prometheus import Prometheus, launch_prometheus

USER, PASSWORD = "prometheus", "s3cret"
JOB = "synthetic-sla-probe"


@pytest.fixture
def secured_probe(
    tmp_path: Path, broker: EmbeddedBroker, topic: str, key_file: Path
) -> Iterator[tuple[int, dict[str, Path], CertificateAuthority]]:
    """`sla-probe run` with mutual TLS and basic auth on its endpoints; its port, the
    certificate files, and their CA."""
    ca = CertificateAuthority("scrape CA")
    files = dict(zip(("cert", "key"), ca.issue("127.0.0.1").write(tmp_path, "server"), strict=True))
    files |= dict(
        zip(
            ("client_cert", "client_key"),
            ca.issue(USER, client=True).write(tmp_path, "client"),
            strict=True,
        )
    )
    files["ca"] = tmp_path / "ca.crt"
    files["ca"].write_text(ca.pem)
    # Cost 10, as `htpasswd -nBC 10` writes it: what a scrape costs once, then never.
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    web_config = tmp_path / "web.yml"
    web_config.write_text(
        yaml.safe_dump(
            {
                # Relative to the file, as the exporter toolkit reads them.
                "tls_server_config": {
                    "cert_file": "server.crt",
                    "key_file": "server.key",
                    "client_auth_type": "RequireAndVerifyClientCert",
                    "client_ca_file": "ca.crt",
                },
                "basic_auth_users": {USER: hashed},
            }
        )
    )
    port = free_loopback_port()
    log = tmp_path / "probe.log"
    command = [
        SLA_PROBE, "run", *run_args(broker.bootstrap_servers, topic, key_file),
        "--metrics-host", "127.0.0.1", "--metrics-port", str(port),
        "--web-config-file", str(web_config),
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    client_cert = (files["client_cert"], files["client_key"])
    admitted = EndpointClient(port, files["ca"], client_cert, USER, PASSWORD)

    def healthy() -> bool:
        return process.poll() is not None or admitted.refused("/healthz") is None

    try:
        wait_for(healthy, timeout=20, what="/healthz over mutual TLS")
        assert process.poll() is None, log.read_text()
        yield port, files, ca
    finally:
        process.terminate()
        process.wait(10)


def start_prometheus(tmp_path: Path, probe_port: int, files: dict[str, Path]) -> Prometheus:
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": JOB,
                "scheme": "https",
                "tls_config": {
                    "ca_file": str(files["ca"]),
                    "cert_file": str(files["client_cert"]),
                    "key_file": str(files["client_key"]),
                },
                "basic_auth": {"username": USER, "password": PASSWORD},
                "static_configs": [{"targets": [f"127.0.0.1:{probe_port}"]}],
            }
        ],
    }
    return launch_prometheus(tmp_path, config)


def test_prometheus_scrapes_over_mutual_tls_with_basic_auth_and_nobody_else_does(
    tmp_path: Path, secured_probe: tuple[int, dict[str, Path], CertificateAuthority]
) -> None:
    port, files, ca = secured_probe
    prometheus = start_prometheus(tmp_path, port, files)
    try:
        wait_for(
            lambda: prometheus.value(f'up{{job="{JOB}"}}') == 1.0,
            timeout=20,
            what="the probe scraped (up == 1)",
        )
        wait_for(
            lambda: prometheus.query(
                f'synthetic_sla_canaries_total{{job="{JOB}",outcome="delivered"}} > 0'
            ),
            timeout=30,
            what="delivered canaries in Prometheus",
        )

        client_cert = (files["client_cert"], files["client_key"])
        anonymous = EndpointClient(port, files["ca"], client_cert)
        for path in ("/metrics", "/readyz", "/healthz"):
            reply = anonymous.get(path)
            assert reply.status == 401, (path, reply)
            assert reply.headers["WWW-Authenticate"] == "Basic"
        assert EndpointClient(port, user=USER, password=PASSWORD).refused() is not None
        no_certificate = EndpointClient(port, files["ca"], user=USER, password=PASSWORD)
        assert isinstance(no_certificate.refused(), ssl.SSLError | ConnectionError)

        # cert-manager renews the certificate: the next connection gets the new one,
        # and Prometheus goes on scraping.
        admitted = EndpointClient(port, files["ca"], client_cert, USER, PASSWORD)
        before = admitted.get("/healthz").server_certificate
        renewed = ca.issue("127.0.0.1")
        rotated_at = time.time()
        for path, text in (
            (files["key"], renewed.key_pem),
            (files["cert"], renewed.certificate_pem),
        ):
            staged = path.with_suffix(".new")
            staged.write_text(text)
            os.replace(staged, path)
        served = admitted.get("/healthz").server_certificate
        assert served == ssl.PEM_cert_to_DER_cert(renewed.certificate_pem) != before
        wait_for(
            lambda: prometheus.query(
                f'up{{job="{JOB}"}} == 1 and timestamp(up{{job="{JOB}"}}) > {rotated_at}'
            ),
            timeout=15,
            what="a successful scrape after the rotation",
        )
    finally:
        prometheus.process.terminate()
        prometheus.process.wait(10)
