"""`sla-probe sink` and `sla-probe reconcile --every` serve their endpoints behind the
same web configuration as `run` (tests/test_secured_endpoints.py): HTTPS, basic auth,
plain HTTP and a missing password refused. Both run here in the tests' own process, on
the shared Spark session. Their status pages (`/`) too: behind the password, each with
what it has to show (the sink's batch progress, the reconciliation runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import bcrypt
import pytest
import yaml
from pyspark.sql import SparkSession

from probe.config import ProbeConfig, load
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker, free_loopback_port
from probe.services.reconcile import serve_reconcile
from probe.services.sink import serve_sink
from tests.certificates import CertificateAuthority
from tests.conftest import until
from tests.endpoint_client import EndpointClient
from tests.status_dom import parse

USER, PASSWORD = "prometheus", "s3cret-scrape"


def _web_config(directory: Path) -> Path:
    """TLS (a certificate for 127.0.0.1) and one basic-auth user; the CA beside it."""
    ca = CertificateAuthority("endpoint CA")
    ca.issue("127.0.0.1").write(directory, "server")
    (directory / "ca.crt").write_text(ca.pem)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    path = directory / "web.yml"
    path.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
        "basic_auth_users": {USER: hashed},
    }))  # fmt: skip
    return path


def _config(broker: EmbeddedBroker, topic: str, tmp_path: Path, port: int) -> ProbeConfig:
    return load(
        overrides={
            "kafka.bootstrap_servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "sink.path": str(tmp_path / "sink"),
            "sink.master": "local[2]",  # the tests' session: getOrCreate returns it
            "reconcile.every": "1s",
            "reconcile.format": "raw",
            "reconcile.table": str(tmp_path / "table"),
            "metrics.host": "127.0.0.1",
            "metrics.port": port,
            "metrics.web_config_file": str(_web_config(tmp_path)),
        }
    )


async def _check_secured(port: int, ca: Path, service: str) -> None:
    """Admitted with the password over HTTPS; refused without it and over HTTP."""
    admitted = EndpointClient(port, ca, user=USER, password=PASSWORD)

    def up() -> bool:
        return admitted.refused("/healthz") is None

    await until(lambda: asyncio.to_thread(up), 120, "the endpoints served over TLS", every=0.2)
    for path in ("/healthz", "/metrics"):
        reply = await asyncio.to_thread(admitted.get, path)
        assert reply.status == 200, (path, reply.body)
    assert "synthetic_sla" in (await asyncio.to_thread(admitted.get, "/metrics")).body
    anonymous = await asyncio.to_thread(EndpointClient(port, ca).get, "/metrics")
    assert anonymous.status == 401
    wrong = EndpointClient(port, ca, user=USER, password="not-it")
    assert (await asyncio.to_thread(wrong.get, "/readyz")).status == 401
    refused = await asyncio.to_thread(EndpointClient(port).refused, "/metrics")
    assert refused is not None
    assert (await asyncio.to_thread(EndpointClient(port, ca).get, "/")).status == 401
    page = await asyncio.to_thread(admitted.get, "/")
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    dom = parse(page.body)
    assert dom.find_all("body")[0].attrs["data-service"] == service.split(maxsplit=1)[0]
    assert dom.by_id("readiness") is not None
    if service == "sink":
        assert dom.by_id("sink-progress") is not None
        assert [s.attrs["data-stage"] for s in dom.find_all("section", "stage")] == ["sink"]
    else:
        assert dom.by_id("reconcile-runs") is not None


@pytest.mark.parametrize("service", ["sink", "reconcile --every"])
async def test_the_service_serves_behind_the_web_config(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, tmp_path: Path, service: str
) -> None:
    port = free_loopback_port()
    config = _config(broker, topic, tmp_path, port)
    stop = asyncio.Event()
    serve: Callable[[], Awaitable[object]]
    if service == "sink":
        serve = lambda: serve_sink(config, generate_key_ring(), stop)  # noqa: E731
    else:
        serve = lambda: serve_reconcile(config, None, stop, spark=spark)  # noqa: E731
    serving = asyncio.create_task(serve())
    try:
        await _check_secured(port, tmp_path / "ca.crt", service)
    finally:
        stop.set()
        await asyncio.wait_for(serving, 120)
