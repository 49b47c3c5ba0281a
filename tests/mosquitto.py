"""Real Mosquitto for the MQTT tests: a broker of the test's own, TLS files, a cutting proxy.

Every broker runs on a free loopback port with a config file in the test's temporary
directory, never the system one on 1883. ``stop()`` then ``start()`` restarts it on
the same port; with ``persistence`` it keeps sessions and queued messages across the
restart, as a production broker would.
"""

from __future__ import annotations

import asyncio
import getpass
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from probe.embedded import LoopbackServer, free_loopback_port

MOSQUITTO = "/usr/sbin/mosquitto"


@dataclass(frozen=True)
class TlsFiles:
    """A CA, a server certificate (localhost, 127.0.0.1, mqtt.test) and a client one."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls_files(directory: Path, name: str = "test") -> TlsFiles:
    """A fresh certificate authority and certificates it signed, made by openssl."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / f"{name}-ca.crt", directory / f"{name}-ca.key"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", ca_key, "-out", ca, "-days", "1", "-subj", f"/CN={name} CA",
    )  # fmt: skip
    files = {}
    for role, extension in (
        ("server", "subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:mqtt.test"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        key, csr, cert = (directory / f"{name}-{role}.{ext}" for ext in ("key", "csr", "crt"))
        ext_file = directory / f"{name}-{role}.ext"
        ext_file.write_text(extension + "\n")
        _openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", csr, "-subj", f"/CN={name}-{role}",
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
            "-out", cert, "-days", "1", "-extfile", ext_file,
        )  # fmt: skip
        files[role] = (cert, key)
    return TlsFiles(ca, *files["server"], *files["client"])


def _openssl(*args: object) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


class Mosquitto(LoopbackServer):
    """A Mosquitto broker on a loopback port, configured for one test.

    It stops with SIGTERM, on which Mosquitto saves its persistence file.

    >>> with Mosquitto(tmp_path, users={"probe": "secret"}) as broker:
    ...     broker.url
    'mqtt://127.0.0.1:40123'
    """

    name = "mosquitto"
    start_timeout = 10.0

    def __init__(
        self,
        directory: Path,
        *,
        users: dict[str, str] | None = None,
        tls: TlsFiles | None = None,
        require_certificate: bool = False,
        persistence: bool = False,
        extra: str = "",
    ) -> None:
        self.directory = directory
        self.tls = tls
        self.log = directory / "mosquitto.log"
        directory.mkdir(parents=True, exist_ok=True)
        super().__init__(log_file=self.log)
        lines = [
            f"listener {self.port} 127.0.0.1",
            # Run as whoever runs the tests: as root, Mosquitto would otherwise switch
            # to the `mosquitto` user, who cannot read the test's temporary files.
            f"user {getpass.getuser()}",
            f"log_dest file {self.log}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            f"allow_anonymous {'false' if users else 'true'}",
        ]
        if users:
            password_file = directory / "passwords"
            password_file.touch(mode=0o600)
            for user, password in users.items():
                subprocess.run(
                    ["mosquitto_passwd", "-b", str(password_file), user, password],
                    check=True,
                    capture_output=True,
                )
            lines.append(f"password_file {password_file}")
        if tls is not None:
            lines += [
                f"cafile {tls.ca}",
                f"certfile {tls.server_cert}",
                f"keyfile {tls.server_key}",
                f"require_certificate {'true' if require_certificate else 'false'}",
            ]
        if persistence:
            lines += ["persistence true", f"persistence_location {directory}/"]
        self.config = directory / "mosquitto.conf"
        self.config.write_text("\n".join([*lines, extra, ""]))

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [MOSQUITTO, "-c", str(self.config)]


class CuttingProxy:
    """A TCP proxy in front of a broker that can cut off chosen MQTT clients.

    A client is recognised by its first packet (CONNECT, which holds the client id in
    plain text without TLS). ``cut(b"-sub")`` closes the subscriber's connections and
    refuses it until ``restore()``, while every other client passes: a subscriber that
    is away for a while, with the publisher still producing.
    """

    def __init__(self, upstream_port: int) -> None:
        self.port = free_loopback_port()
        self._upstream_port = upstream_port
        self._blocked: bytes | None = None
        self._connections: list[tuple[bytes, asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cutting-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10), "proxy did not start"

    def cut(self, marker: bytes) -> None:
        def close_matching() -> None:
            self._blocked = marker
            for first, client, upstream in self._connections:
                if marker in first:
                    client.close()
                    upstream.close()

        self._call(close_matching)

    def restore(self) -> None:
        def unblock() -> None:
            self._blocked = None

        self._call(unblock)

    def stop(self) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _call(self, action: Callable[[], None]) -> None:
        done = threading.Event()

        def run() -> None:
            action()
            done.set()

        self._loop.call_soon_threadsafe(run)
        assert done.wait(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)
        )
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(65536)
        if not first or (self._blocked is not None and self._blocked in first):
            writer.close()
            return
        try:
            upstream_reader, upstream = await asyncio.open_connection(
                "127.0.0.1", self._upstream_port
            )
        except OSError:
            writer.close()
            return
        upstream.write(first)
        entry = (first, writer, upstream)
        self._connections.append(entry)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        try:
            await asyncio.gather(pipe(reader, upstream), pipe(upstream_reader, writer))
        finally:
            writer.close()
            upstream.close()
            self._connections.remove(entry)
