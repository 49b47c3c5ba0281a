"""A connection that fails is named in one line with the setting to change, each cause
provoked for real on Apache Kafka's own listeners (probe.transport.kafka_connect_errors).

One single-node KRaft cluster serves the whole module, with a client listener per
case: SASL_PLAINTEXT (the main one, PLAIN users), PLAINTEXT, TLS, mutual TLS, TLS
with an expired certificate, and SASL_SSL with SCRAM-SHA-512 users (created at format,
as operators bootstrap a KRaft cluster, and through the admin API); the certificates
are made here (tests/certificates.py).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from probe.apache_kafka.cluster import KafkaCluster, Listener
from probe.config import KafkaConfig
from probe.core.errors import ConnectFailed, ConnectFailure
from probe.embedded import free_loopback_port
from probe.transport.kafka import KafkaTransport
from tests.certificates import CertificateAuthority
from tests.conftest import (
    SLA_PROBE,
    RunningProbe,
    failure_to_start,
    run_args,
    sample,
    target_report,
    wait_for,
)

PASSWORD = "probe-secret"
WRONG_PASSWORD = "not-the-probe-secret"


@dataclass(frozen=True)
class Secured:
    cluster: KafkaCluster
    files: Path  # ca.crt, other-ca.crt, client.crt/.key, stranger.crt/.key
    clients: CertificateAuthority  # the CA the mutual-TLS listener takes clients of

    def address(self, listener: str) -> str:
        return self.cluster.bootstrap_servers_of(listener)

    def file(self, name: str) -> str:
        return str(self.files / name)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    files = tmp_path_factory.mktemp("tls")
    brokers = CertificateAuthority("brokers' CA")
    clients = CertificateAuthority("clients' CA")
    (files / "ca.crt").write_text(brokers.pem)
    (files / "other-ca.crt").write_text(CertificateAuthority("someone else's CA").pem)
    clients.issue("probe", client=True).write(files, "client")
    # Signed by the brokers' CA, which the mutual-TLS listener does not take for clients.
    brokers.issue("stranger", client=True).write(files, "stranger")
    broker = brokers.issue("127.0.0.1")
    expired = brokers.issue("127.0.0.1", expired=True)
    listeners = {
        "PLAIN": Listener(),
        "TLS": Listener("SSL", broker.key_pem, broker.certificate_pem),
        "MTLS": Listener("SSL", broker.key_pem, broker.certificate_pem, clients.pem),
        "EXPIRED": Listener("SSL", expired.key_pem, expired.certificate_pem),
        "SCRAM": Listener("SASL_SSL", broker.key_pem, broker.certificate_pem),
    }
    with KafkaCluster(
        1,
        workdir=tmp_path_factory.mktemp("kafka-tls"),
        plain_users={"probe": PASSWORD},
        scram_users={"probe": PASSWORD},
        listeners=listeners,
    ) as cluster:
        yield Secured(cluster, files, clients)


def kafka(bootstrap_servers: str, **sections: Any) -> KafkaConfig:
    return KafkaConfig.model_validate(
        {"bootstrap_servers": bootstrap_servers, "send_timeout": 3, **sections}
    )


def connect_failure(config: KafkaConfig) -> ConnectFailed:
    """What the transport raises when it starts (it must fail)."""
    return failure_to_start(lambda: KafkaTransport(config))


# Each case: the listener, the probe's kafka settings, the reason, and what the one
# line must say.
CASES = {
    "wrong CA": (
        "TLS", {"tls": {"ca_file": "other-ca.crt"}}, ConnectFailure.UNTRUSTED_CERTIFICATE,
        ["the broker's certificate is not trusted by kafka.tls.ca_file",
         "set kafka.tls.ca_file to the CA that signed it"],
    ),
    "system trust store": (
        "TLS", {"tls": {}}, ConnectFailure.UNTRUSTED_CERTIFICATE,
        ["not trusted by the system's trust store", "set kafka.tls.ca_file"],
    ),
    "hostname mismatch": (
        "localhost", {"tls": {"ca_file": "ca.crt"}}, ConnectFailure.HOSTNAME_MISMATCH,
        ["the broker's certificate is not valid for localhost", "kafka.tls.check_hostname"],
    ),
    "expired certificate": (
        "EXPIRED", {"tls": {"ca_file": "ca.crt"}}, ConnectFailure.CERTIFICATE_EXPIRED,
        ["certificate has expired", "the broker needs a current certificate"],
    ),
    "client certificate required": (
        "MTLS", {"tls": {"ca_file": "ca.crt"}}, ConnectFailure.CLIENT_CERTIFICATE,
        ["the broker requires a client certificate",
         "set kafka.tls.cert_file and kafka.tls.key_file"],
    ),
    "client certificate refused": (
        "MTLS",
        {"tls": {"ca_file": "ca.crt", "cert_file": "stranger.crt", "key_file": "stranger.key"}},
        ConnectFailure.CLIENT_CERTIFICATE,
        ["the broker refused the client certificate of kafka.tls.cert_file"],
    ),
    "plaintext client on a TLS listener": (
        "TLS", {}, ConnectFailure.TLS_EXPECTED, ["the listener may need kafka.tls"],
    ),
    "TLS client on a plaintext listener": (
        "PLAIN", {"tls": {"ca_file": "ca.crt"}}, ConnectFailure.TLS_UNEXPECTED,
        ["answers Kafka requests in plaintext", "the listener may not need kafka.tls"],
    ),
    "wrong SASL password": (
        "EXTERNAL",
        {"sasl": {"mechanism": "PLAIN", "username": "probe", "password": WRONG_PASSWORD}},
        ConnectFailure.SASL_FAILED,
        ["SASL authentication failed for user 'probe' with PLAIN",
         "check kafka.sasl.username and kafka.sasl.password"],
    ),
    "wrong SCRAM password": (
        "SCRAM",
        {"tls": {"ca_file": "ca.crt"},
         "sasl": {"mechanism": "SCRAM-SHA-512", "username": "probe", "password": WRONG_PASSWORD}},
        ConnectFailure.SASL_FAILED,
        ["SASL authentication failed for user 'probe' with SCRAM-SHA-512",
         "check kafka.sasl.username and kafka.sasl.password"],
    ),
    "SCRAM without TLS on a SASL_SSL listener": (
        "SCRAM",
        {"sasl": {"mechanism": "SCRAM-SHA-512", "username": "probe", "password": PASSWORD}},
        ConnectFailure.TLS_EXPECTED, ["the listener may need kafka.tls"],
    ),
    "nothing listening": (
        "nowhere", {}, ConnectFailure.UNREACHABLE,
        ["connection refused (nothing listens on that port)", "kafka.bootstrap_servers"],
    ),
}  # fmt: skip


def address_of(secured: Secured, listener: str) -> str:
    if listener == "EXTERNAL":
        return secured.cluster.bootstrap_servers.split(",")[0]
    if listener == "localhost":  # the TLS listener by a name its certificate lacks
        return secured.address("TLS").split(",")[0].replace("127.0.0.1", "localhost")
    if listener == "nowhere":
        return f"127.0.0.1:{free_loopback_port()}"
    return secured.address(listener).split(",")[0]


def with_files(secured: Secured, sections: dict[str, Any]) -> dict[str, Any]:
    tls = sections.get("tls")
    if tls is None:
        return sections
    files = {k: secured.file(v) for k, v in tls.items() if k.endswith("_file")}
    return {**sections, "tls": {**tls, **files}}


@pytest.mark.parametrize("case", list(CASES))
def test_the_cause_is_named_with_the_setting_to_change(secured: Secured, case: str) -> None:
    listener, sections, reason, said = CASES[case]
    where = address_of(secured, listener)
    failure = connect_failure(kafka(where, **with_files(secured, sections)))
    line = str(failure)
    print(f"{case}: {line}")
    assert failure.reason is reason, line
    assert "\n" not in line
    assert line.startswith(f"cannot connect to {where}: "), line
    for words in said:
        assert words in line
    assert WRONG_PASSWORD not in line
    assert PASSWORD not in line


SCRAM = {"mechanism": "SCRAM-SHA-512", "username": "probe", "password": PASSWORD}


@pytest.mark.parametrize(
    ("listener", "sections"),
    [("TLS", {"tls": {"ca_file": "ca.crt"}}),
     ("MTLS", {"tls": {"ca_file": "ca.crt", "cert_file": "client.crt",
                       "key_file": "client.key"}}),
     ("localhost", {"tls": {"ca_file": "ca.crt", "check_hostname": False}}),
     ("SCRAM", {"tls": {"ca_file": "ca.crt"}, "sasl": SCRAM})],
    ids=["tls", "mutual-tls", "check-hostname-off", "sasl-ssl-scram-sha-512"],
)  # fmt: skip
def test_the_settings_named_connect(
    secured: Secured, listener: str, sections: dict[str, Any]
) -> None:
    """The fixes the lines suggest do work: the same listeners, set right."""
    config = kafka(address_of(secured, listener), **with_files(secured, sections))

    async def start() -> int:
        transport = KafkaTransport(config)
        try:
            await transport.start()
            return await transport.broker_count()
        finally:
            await transport.close()

    assert asyncio.run(start()) == 1


def once(*args: str, config: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"probe-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run(
        [SLA_PROBE, "once", "--config", str(path), "--topic", f"sla-{uuid.uuid4().hex[:8]}",
         "--create-topic", "--probe-id", "probe-under-test", *args],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_once_prints_the_line_and_exits_1(secured: Secured, tmp_path: Path) -> None:
    where = address_of(secured, "TLS")
    config = {
        "kafka": {"bootstrap_servers": where, "tls": {"ca_file": secured.file("other-ca.crt")}},
        "once": {"loss_timeout": "1s"},
    }
    done = once(config=config, tmp_path=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    (error,) = [line for line in done.stdout.splitlines() if line.startswith("error: ")]
    print(error)
    line = error.removeprefix("error: ")
    assert line.startswith(f"cannot connect to {where}: the broker's certificate is not trusted")
    assert "set kafka.tls.ca_file" in line
    assert done.stdout.splitlines()[-1] == "result: FAIL"


def test_once_passes_through_the_tls_listener(secured: Secured, tmp_path: Path) -> None:
    config = {
        "kafka": {
            "bootstrap_servers": secured.address("MTLS"),
            "tls": {
                "ca_file": secured.file("ca.crt"),
                "cert_file": secured.file("client.crt"),
                "key_file": secured.file("client.key"),
            },
        },
        "once": {"rounds": 2, "interval": "200ms"},
    }
    done = once(config=config, tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("field", "value"),
    [("ca_file", "missing.crt"), ("cert_file", "ca.crt")],
    ids=["missing-ca-file", "cert-without-its-key"],
)
def test_once_exits_2_naming_a_file_it_cannot_use(tmp_path: Path, field: str, value: str) -> None:
    """Found before any broker is asked: no cluster needed."""
    (tmp_path / "ca.crt").write_text(CertificateAuthority("a CA").pem)
    tls = {"ca_file": str(tmp_path / "ca.crt")}
    if field == "ca_file":
        tls["ca_file"] = str(tmp_path / value)
    else:  # a certificate whose key file holds no key for it
        tls |= {"cert_file": str(tmp_path / value), "key_file": str(tmp_path / "ca.crt")}
    config = {"kafka": {"bootstrap_servers": f"127.0.0.1:{free_loopback_port()}", "tls": tls}}
    done = once(config=config, tmp_path=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    print(line)
    assert line.startswith(f"sla-probe: config error: kafka.tls.{field}: ")


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def test_run_retries_and_shows_the_line_in_readyz_and_the_counter(
    secured: Secured, start_probe: Any, tmp_path: Path, key_file: Path
) -> None:
    where = address_of(secured, "TLS")
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({"kafka": {"tls": {"ca_file": secured.file("other-ca.crt")}}}))
    probe: RunningProbe = start_probe(
        *run_args(where, f"sla-{uuid.uuid4().hex[:8]}", key_file), "--config", str(config)
    )

    def failures(reason: str) -> float:
        return sample(probe.metrics(), "synthetic_sla_connect_errors_total", reason=reason)

    # Retried: the backoff starts at a quarter of a second.
    wait_for(lambda: failures("untrusted_certificate") >= 2, timeout=30, what="retries counted")
    status, reason = readyz(probe.port)
    print(reason.strip())
    assert status == 503
    assert reason.startswith(f"cannot connect to {where}: the broker's certificate is not trusted")
    assert "set kafka.tls.ca_file" in reason
    # Every reason's series exists from the start, at zero unless it happened.
    samples = probe.metrics()
    for other in ConnectFailure:
        key = (
            "synthetic_sla_connect_errors_total",
            (("broker", ""), ("reason", other.value), ("target", "kafka")),
        )
        assert key in samples or other is ConnectFailure.UNTRUSTED_CERTIFICATE
        if other is not ConnectFailure.UNTRUSTED_CERTIFICATE:
            assert samples.get(key, 0.0) == 0.0
    assert probe.process.poll() is None
    assert probe.stop() < 5.0


def _set_scram_password(secured: Secured, user: str, password: str) -> None:
    """As an operator rotates a password: through the admin API (on the PLAINTEXT
    listener; this cluster has no authorizer)."""
    from confluent_kafka.admin import (  # noqa: PLC0415
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": secured.address("PLAIN")})
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
    )
    for done in admin.alter_user_scram_credentials([upsert]).values():
        done.result(timeout=30)


def _scram_run_args(
    secured: Secured, user: str, password: str, password_file: Path, key_file: Path
) -> tuple[str, ...]:
    """`run` over SASL_SSL with SCRAM-SHA-512 as ``user``, its password set on the
    cluster and written to ``password_file`` (a mounted Secret), which the config names;
    the config beside that file."""
    _set_scram_password(secured, user, password)
    password_file.write_text(password + "\n")
    config = password_file.parent / "probe.yaml"
    config.write_text(yaml.safe_dump({"kafka": {
        "tls": {"ca_file": secured.file("ca.crt")},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": user,
                 "password_file": str(password_file)},
    }}))  # fmt: skip
    return (*run_args(secured.address("SCRAM"), f"sla-{uuid.uuid4().hex[:8]}", key_file),
            "--config", str(config))  # fmt: skip


def test_a_probe_restarted_with_a_rotated_scram_password_keeps_working(
    secured: Secured, start_probe: Any, tmp_path: Path, key_file: Path
) -> None:
    """SASL_SSL with SCRAM-SHA-512, the password in a file (a mounted Secret): rotated
    in the cluster and in the file, the restarted probe logs in with the new one, and
    the old password is refused by name."""
    user, first, second = "rotating", "first-pass-8c1d", "second-pass-a07e"
    password_file = tmp_path / "password"
    args = _scram_run_args(secured, user, first, password_file, key_file)
    probe: RunningProbe = start_probe(*args)
    wait_for(lambda: probe.canaries("delivered") >= 2, timeout=60, what="delivered over SCRAM")
    probe.stop()

    _set_scram_password(secured, user, second)
    refused = connect_failure(
        kafka(secured.address("SCRAM"), tls={"ca_file": secured.file("ca.crt")},
              sasl={"mechanism": "SCRAM-SHA-512", "username": user, "password": first})
    )  # fmt: skip
    assert refused.reason is ConnectFailure.SASL_FAILED, str(refused)
    assert f"SASL authentication failed for user '{user}' with SCRAM-SHA-512" in str(refused)

    password_file.write_text(second + "\n")
    restarted: RunningProbe = start_probe(*args)
    wait_for(lambda: restarted.canaries("delivered") >= 2, timeout=60, what="the new password")
    log = restarted.log.read_text()
    assert first not in log
    assert second not in log


def test_a_password_changed_on_the_cluster_only_is_named_mid_run(
    secured: Secured, start_probe: Any, tmp_path: Path, key_file: Path
) -> None:
    """The password changed on the cluster and not in the probe's file: the connections
    open go on, until the broker restarts and the clients must log in again. Then the
    refusal is named as at start: counted with the broker's id, /readyz's reason and
    one log line name kafka.sasl.password_file; once the file holds the new password,
    the same process delivers again."""
    user, first, second = "forgetful", "first-pass-31c9", "second-pass-77d0"
    password_file = tmp_path / "password"
    args = _scram_run_args(secured, user, first, password_file, key_file)
    probe: RunningProbe = start_probe(*args)
    wait_for(lambda: probe.canaries("delivered") >= 2, timeout=60, what="delivered over SCRAM")

    def refused() -> float:
        return sample(
            probe.metrics(), "synthetic_sla_connect_errors_total", reason="sasl_failed", broker="1"
        )

    assert refused() == 0
    _set_scram_password(secured, user, second)
    secured.cluster.node(1).stop()
    secured.cluster.node(1).start()
    secured.cluster.wait_ready()
    # Diagnosed about once a round while it lasts: counted each time, said once.
    wait_for(lambda: refused() >= 2, timeout=60, what="the refusal counted, broker 1")
    _status, reason = wait_for(
        lambda: (answer := readyz(probe.port))[0] == 503 and "SASL" in answer[1] and answer,
        timeout=30, what="/readyz names the refusal",
    )  # fmt: skip
    print(reason.strip())
    assert f"SASL authentication failed for user '{user}' with SCRAM-SHA-512" in reason
    assert "kafka.sasl.password_file" in reason
    # While it was down, broker 1 was named too (unreachable), in a line of its own.
    said = [
        line for line in probe.log.read_text().splitlines()
        if "kafka broker 1:" in line and "SASL authentication failed" in line
    ]  # fmt: skip
    assert len(said) == 1, said
    assert "kafka.sasl.password_file" in said[0]

    delivered = probe.canaries("delivered")
    password_file.write_text(second + "\n")
    wait_for(
        lambda: probe.canaries("delivered") > delivered + 2, timeout=60, what="the new password"
    )
    wait_for(lambda: readyz(probe.port)[0] == 200, timeout=30, what="ready again")
    assert probe.process.poll() is None
    text = probe.log.read_text()
    assert first not in text
    assert second not in text


def test_reconcile_names_the_cause(secured: Secured, tmp_path: Path) -> None:
    """The driver lists the topic's offsets with librdkafka, which says only "broker
    transport failure": the run's error is the same line `once` prints."""
    where = address_of(secured, "TLS")
    config = tmp_path / "probe.yaml"
    config.write_text(yaml.safe_dump({"kafka": {
        "bootstrap_servers": where, "send_timeout": "3s",
        "tls": {"ca_file": secured.file("other-ca.crt")},
    }}))  # fmt: skip
    done = subprocess.run(
        [SLA_PROBE, "reconcile", "--config", str(config), "--topic", "synthetic-sla",
         "--table", str(tmp_path / "table"), "--format", "raw", "--window-offsets", "10",
         "--sink-path", str(tmp_path / "sink"), "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]  # reconcile's own report
    print(error)
    assert error.startswith(f"cannot connect to {where}: the broker's certificate is not trusted")
    assert "set kafka.tls.ca_file" in error


def test_a_probe_restarted_with_a_rotated_client_certificate_keeps_working(
    secured: Secured, tmp_path: Path
) -> None:
    """Mutual TLS, the pair in files a renewal rewrites in place (cert-manager's
    Secret): the next start uses the new pair; one the broker does not take is refused
    by name."""
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    cert, key = secured.clients.issue("probe", client=True).write(mounted, "tls")
    config = {
        "kafka": {
            "bootstrap_servers": secured.address("MTLS"),
            "tls": {"ca_file": secured.file("ca.crt"), "cert_file": str(cert),
                    "key_file": str(key)},
        },
        "once": {"rounds": 1},
    }  # fmt: skip
    first = once(config=config, tmp_path=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    renewed = secured.clients.issue("probe", client=True)
    assert renewed.write(mounted, "tls") == (cert, key)
    second = once(config=config, tmp_path=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    CertificateAuthority("an unknown CA").issue("probe", client=True).write(mounted, "tls")
    third = once("--json", config=config, tmp_path=tmp_path)
    assert third.returncode == 1
    error = target_report(third.stdout)["error"]
    assert "the broker refused the client certificate of kafka.tls.cert_file" in error, error
