"""The endpoints' web configuration (probe.web_config) and the server applying it
(probe.endpoints.MetricsServer), served in this test's own event loop on loopback.

A real Prometheus scraping a running probe through all of it: test_secured_endpoints.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import bcrypt
import pytest
import yaml
from prometheus_client import CollectorRegistry

from probe.config import load
from probe.core.errors import ConfigError
from probe.endpoints import MetricsServer, build_app
from probe.web_config import (
    BasicAuthUsers,
    WebConfig,
    WebConfigError,
    basic_credentials,
    parse_web_config,
    read_web_config,
)
from tests.certificates import CertificateAuthority
from tests.endpoint_client import EndpointClient
from tests.test_cli import NO_BROKER, assert_config_error, sla_probe

# Cost 4, the least bcrypt takes: these tests are about who is admitted, not the cost.
PASSWORD = "s3cret"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("endpoints test CA")


@pytest.fixture
def tls_files(tmp_path: Path, ca: CertificateAuthority) -> dict[str, Path]:
    """A server certificate for 127.0.0.1, a client's, and the CA, as files."""
    server_cert, server_key = ca.issue("127.0.0.1").write(tmp_path, "server")
    client_cert, client_key = ca.issue("prometheus", client=True).write(tmp_path, "client")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_text(ca.pem)
    return {
        "cert": server_cert,
        "key": server_key,
        "client_cert": client_cert,
        "client_key": client_key,
        "ca": ca_file,
    }


def write_web_config(directory: Path, tree: object) -> Path:
    path = directory / "web.yml"
    path.write_text(yaml.safe_dump(tree))
    return path


# --- The file: every problem names its field -------------------------------------------

TLS = {"cert_file": "server.crt", "key_file": "server.key"}


@pytest.mark.parametrize(
    ("tree", "field", "words"),
    [
        (
            {"tls_server_config": {**TLS, "client_auth_type": "Sometimes"}},
            "tls_server_config.client_auth_type",
            "must be one of 'NoClientCert', 'RequestClientCert'",
        ),
        ({"basic_auth_user": {"a": HASH}}, "basic_auth_user", "unknown setting"),
        (
            {"tls_server_config": {**TLS, "cipher_suite": "x"}},
            "tls_server_config.cipher_suite",
            "unknown setting",
        ),
        ({"tls_server_config": {"cert_file": "a.crt"}}, "tls_server_config.key_file", "required"),
        ({"basic_auth_users": {"alice": "s3cret"}}, "basic_auth_users.alice", "not a bcrypt hash"),
        (
            {"tls_server_config": {**TLS, "min_version": "TLS13", "max_version": "TLS12"}},
            "tls_server_config.min_version",
            "above max_version",
        ),
        (
            {"tls_server_config": {**TLS, "min_version": "TLS14"}},
            "tls_server_config.min_version",
            "must be one of",
        ),
        (
            {"tls_server_config": {**TLS, "client_auth_type": "RequireAndVerifyClientCert"}},
            "tls_server_config.client_ca_file",
            "required with client_auth_type RequireAndVerifyClientCert",
        ),
        (
            {"tls_server_config": {**TLS, "client_ca_file": "ca.crt"}},
            "tls_server_config.client_ca_file",
            "checks no client certificate",
        ),
        (
            {"tls_server_config": {**TLS, "client_auth_type": "RequireAnyClientCert"}},
            "tls_server_config.client_auth_type",
            "not supported",
        ),
        ({"tls_server_config": "yes"}, "tls_server_config", "must be a mapping"),
        (["tls_server_config"], None, "must be a mapping"),
    ],
)
def test_a_bad_file_names_the_field(tree: object, field: str | None, words: str) -> None:
    with pytest.raises(WebConfigError) as raised:
        parse_web_config(tree, Path("/etc/probe"))
    assert raised.value.field == field, raised.value
    assert words in raised.value.message, raised.value


def test_certificate_files_are_read_at_load(
    tmp_path: Path, tls_files: dict[str, Path], ca: CertificateAuthority
) -> None:
    missing = write_web_config(tmp_path, {"tls_server_config": {**TLS, "cert_file": "none.crt"}})
    with pytest.raises(WebConfigError, match=r"^tls_server_config\.cert_file: cannot read .*none"):
        read_web_config(missing)
    # Another certificate's key, as a rotation half done would leave it.
    ca.issue("127.0.0.1").write(tmp_path, "other")
    mismatched = write_web_config(
        tmp_path, {"tls_server_config": {"cert_file": "server.crt", "key_file": "other.key"}}
    )
    with pytest.raises(WebConfigError, match=r"^tls_server_config\.key_file: "):
        read_web_config(mismatched)


def test_relative_paths_are_the_files_directory(tmp_path: Path, tls_files: dict[str, Path]) -> None:
    web = read_web_config(write_web_config(tmp_path, {"tls_server_config": TLS}))
    assert web.tls_server_config is not None
    assert web.tls_server_config.cert_file == tls_files["cert"]
    assert web.tls_server_config.min_version == "TLS12"


def test_a_bad_file_exits_two_naming_the_field(tmp_path: Path, tls_files: dict[str, Path]) -> None:
    path = write_web_config(tmp_path, {"tls_server_config": {**TLS, "client_auth_type": "Maybe"}})
    line = assert_config_error(
        sla_probe("run", *NO_BROKER, "--allow-ephemeral-key", "--web-config-file", str(path)),
        "metrics.web_config_file",
    )
    assert "metrics.web_config_file: tls_server_config.client_auth_type: must be one of" in line
    # The setting's own variable, and from the YAML config.
    env = {"SLA_PROBE_METRICS_WEB_CONFIG_FILE": str(path)}
    assert_config_error(
        sla_probe("run", *NO_BROKER, "--allow-ephemeral-key", env=env), "metrics.web_config_file"
    )
    # From the YAML config: the same check (in this process: a command costs seconds here).
    with pytest.raises(ConfigError, match=r"^metrics\.web_config_file: cannot read .*none\.yml"):
        load(overrides={"metrics.web_config_file": str(tmp_path / "none.yml")})


# --- Basic auth: bcrypt, once per (user, password) ------------------------------------


def test_a_matching_pair_is_remembered_and_nothing_else() -> None:
    users = BasicAuthUsers({"prometheus": HASH})
    assert not users.remembered("prometheus", PASSWORD.encode())
    assert users.check("prometheus", PASSWORD.encode())
    assert users.remembered("prometheus", PASSWORD.encode())
    # Failures are never remembered: guessing pays bcrypt every time.
    assert not users.check("prometheus", b"guess")
    assert not users.remembered("prometheus", b"guess")
    # An unknown user given a known user's password.
    assert not users.check("mallory", PASSWORD.encode())
    assert not users.remembered("mallory", PASSWORD.encode())
    # Over bcrypt's 72 bytes: refused, not an error.
    assert not users.check("prometheus", b"x" * 100)


@pytest.mark.parametrize(
    ("header", "credentials"),
    [
        ("Basic cHJvbWV0aGV1czpzM2M6cmV0", ("prometheus", b"s3c:ret")),
        ("basic cHJvbWV0aGV1czo=", ("prometheus", b"")),
        ("Basic cHJvbWV0aGV1cw==", None),  # no colon
        ("Basic !!!", None),
        ("Bearer cHJvbWV0aGV1czpz", None),
        (None, None),
    ],
)
def test_basic_credentials(header: str | None, credentials: tuple[str, bytes] | None) -> None:
    assert basic_credentials(header) == credentials


# --- The server ------------------------------------------------------------------------

Serve = Callable[[WebConfig], Awaitable[MetricsServer]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[MetricsServer] = []

    async def start(web: WebConfig) -> MetricsServer:
        app = build_app(CollectorRegistry(), lambda: (True, "ready"))
        server = MetricsServer(app, "127.0.0.1", 0, web)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


def mutual_tls(files: dict[str, Path], **tls: str) -> WebConfig:
    return parse_web_config(
        {
            "tls_server_config": {
                "cert_file": str(files["cert"]),
                "key_file": str(files["key"]),
                **tls,
            },
            "basic_auth_users": {"prometheus": HASH},
        },
        Path("/"),
    )


async def test_every_path_asks_for_credentials(serve: Serve, tls_files: dict[str, Path]) -> None:
    server = await serve(mutual_tls(tls_files))
    assert server.scheme == "https"
    anonymous = EndpointClient(server.port, ca_file=tls_files["ca"])
    admitted = EndpointClient(server.port, tls_files["ca"], user="prometheus", password=PASSWORD)
    wrong = EndpointClient(server.port, tls_files["ca"], user="prometheus", password="guess")
    for path in ("/", "/metrics", "/readyz", "/healthz", "/anything"):
        for client in (anonymous, wrong):
            reply = await asyncio.to_thread(client.get, path)
            assert reply.status == 401, (path, reply)
            assert reply.headers["WWW-Authenticate"] == "Basic"
            assert "ready" not in reply.body  # the status page says nothing to strangers
    for path, status in (
        ("/", 200),
        ("/metrics", 200),
        ("/readyz", 200),
        ("/healthz", 200),
        ("/x", 404),
    ):
        assert (await asyncio.to_thread(admitted.get, path)).status == status, path
    page = await asyncio.to_thread(admitted.get, "/")
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert 'id="readiness"' in page.body
    # Plain HTTP on the TLS port gets no answer at all.
    plain = EndpointClient(server.port, user="prometheus", password=PASSWORD)
    assert await asyncio.to_thread(plain.refused) is not None


async def test_a_client_certificate_required_and_missing_is_refused(
    serve: Serve, tls_files: dict[str, Path]
) -> None:
    web = mutual_tls(
        tls_files,
        client_auth_type="RequireAndVerifyClientCert",
        client_ca_file=str(tls_files["ca"]),
    )
    server = await serve(web)
    credentials = {"user": "prometheus", "password": PASSWORD}
    without = EndpointClient(server.port, tls_files["ca"], **credentials)
    error = await asyncio.to_thread(without.refused)
    assert isinstance(error, ssl.SSLError | ConnectionError), error
    # A certificate of another CA is refused the same way.
    stranger = CertificateAuthority("someone else").issue("mallory", client=True)
    foreign = stranger.write(tls_files["ca"].parent, "foreign")
    assert await asyncio.to_thread(
        EndpointClient(server.port, tls_files["ca"], foreign, **credentials).refused
    )
    client_cert = (tls_files["client_cert"], tls_files["client_key"])
    with_cert = EndpointClient(server.port, tls_files["ca"], client_cert, **credentials)
    assert (await asyncio.to_thread(with_cert.get, "/metrics")).status == 200


def replace_atomically(path: Path, text: str) -> None:
    """As a kubelet updates a mounted Secret: a new file renamed over the old."""
    staged = path.with_suffix(".new")
    staged.write_text(text)
    os.replace(staged, path)


async def test_a_certificate_rotated_on_disk_is_served_to_the_next_connection(
    serve: Serve, tls_files: dict[str, Path], ca: CertificateAuthority
) -> None:
    server = await serve(mutual_tls(tls_files))
    client = EndpointClient(server.port, tls_files["ca"], user="prometheus", password=PASSWORD)
    first = (await asyncio.to_thread(client.get, "/healthz")).server_certificate
    renewed = ca.issue("127.0.0.1")

    # Half a rotation (the certificate, not yet its key): the last good pair goes on.
    replace_atomically(tls_files["cert"], renewed.certificate_pem)
    reply = await asyncio.to_thread(client.get, "/healthz")
    assert reply.status == 200
    assert reply.server_certificate == first

    replace_atomically(tls_files["key"], renewed.key_pem)
    served = (await asyncio.to_thread(client.get, "/healthz")).server_certificate
    assert served != first
    assert served == ssl.PEM_cert_to_DER_cert(renewed.certificate_pem)


# --- The health port: what the kubelet checks behind TLS and basic auth ----------------


async def test_the_health_port_answers_the_kubelet_and_nothing_else(
    tls_files: dict[str, Path],
) -> None:
    state = (False, "metadata refresh failed: no broker of kafka-0.kafka:9093 answered")
    app = build_app(CollectorRegistry(), lambda: state)
    server = MetricsServer(app, "127.0.0.1", 0, mutual_tls(tls_files), health_port=0)
    await server.start()
    try:
        assert server.health_port not in (None, 0, server.port)
        assert server.health_port is not None
        kubelet = EndpointClient(server.health_port)  # plain HTTP, no credentials
        admitted = EndpointClient(
            server.port, tls_files["ca"], user="prometheus", password=PASSWORD
        )

        healthz = await asyncio.to_thread(kubelet.get, "/healthz")
        assert (healthz.status, healthz.body) == (200, "ok\n")
        # Not ready on both ports; the reason, which names a broker, on the secured one only.
        unready = await asyncio.to_thread(kubelet.get, "/readyz")
        assert unready.status == 503
        assert "kafka-0" not in unready.body
        told = await asyncio.to_thread(admitted.get, "/readyz")
        assert (told.status, told.body) == (503, f"{state[1]}\n")

        state = (True, "ready")
        assert (await asyncio.to_thread(kubelet.get, "/readyz")).status == 200
        assert (await asyncio.to_thread(admitted.get, "/readyz")).status == 200

        # The metrics and the status page stay behind the web config.
        for path in ("/", "/metrics", "/anything"):
            assert (await asyncio.to_thread(kubelet.get, path)).status == 404, path
        anonymous = EndpointClient(server.port, ca_file=tls_files["ca"])
        assert (await asyncio.to_thread(anonymous.get, "/healthz")).status == 401
    finally:
        await server.stop()


async def test_a_health_port_it_cannot_listen_on_names_its_setting() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = int(holder.getsockname()[1])
        app = build_app(CollectorRegistry(), lambda: (True, "ready"))
        server = MetricsServer(app, "127.0.0.1", 0, health_port=busy)
        with pytest.raises(
            ConfigError, match=rf"^metrics\.health_port: cannot listen on .*:{busy}"
        ):
            await server.start()
    # The metrics port it had bound is given back.
    with socket.socket() as again:
        again.bind(("127.0.0.1", server.port))


def test_the_health_port_is_not_the_metrics_port() -> None:
    with pytest.raises(ConfigError, match=r"^metrics\.health_port: must differ from metrics\.port"):
        load(overrides={"metrics.port": "9464", "metrics.health_port": "9464"})
    assert load(overrides={"metrics.health_port": "9465"}).metrics.health_port == 9465
    assert load().metrics.health_port is None  # standalone: no second port unless asked


@pytest.mark.parametrize("command", ["run", "sink"])
def test_run_and_sink_take_the_health_port_from_the_environment(
    command: str, tmp_path: Path, key_file: Path
) -> None:
    """SLA_PROBE_HEALTH_PORT, as the chart sets it: a busy one exits 2 naming it (before
    Spark starts, for the sink), as a busy metrics port does."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = str(holder.getsockname()[1])
        extra = ["--sink-path", str(tmp_path / "sink")] if command == "sink" else []
        result = sla_probe(
            command, *NO_BROKER, "--signing-key-file", str(key_file), *extra,
            "--metrics-host", "127.0.0.1", "--metrics-port", "0",
            env={"SLA_PROBE_HEALTH_PORT": busy},
        )  # fmt: skip
    line = assert_config_error(result, "metrics.health_port")
    assert busy in line
