"""A TCP proxy between the probe and the broker, on loopback, that can add latency or
swallow traffic. The broker advertises the proxy's address, so every connection a
Kafka client opens after the bootstrap goes through it too.

The proxy runs its own asyncio loop in a thread; ``set_delay``, ``blackhole`` and
``restore`` are called from any thread. Modes:

- pass-through (the default);
- delay: every chunk read is written ``delay`` seconds later, in order, both ways
  (a slow link: latency, not reduced throughput);
- with ``kafka=True`` the proxy also follows the Kafka protocol on every connection
  (``kafka_wire``), so that ``partition_filter`` can strip one partition's records
  from Fetch responses (``silent_partition``) and ``request_hold`` can delay or drop
  the group coordinator's requests (``coordinator``), rules of ``proxy_rules``;
- blackhole: nothing is read or written and new connections are accepted but never
  dialled upstream, like a network partition where TCP keeps retransmitting: when
  restored, what was held flows again; a client that gave up and reconnected gets a
  fresh connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from probe.core.errors import ProbeError
from probe.embedded import Started, free_loopback_port
from probe.gameday.faults.kafka_wire import KafkaWire
from probe.gameday.faults.proxy_rules import FetchStripper, PartitionFilter, RequestHold

LOOPBACK = "127.0.0.1"


# What a pump forwards of the bytes it read: chunks, each with the seconds it waits
# beyond the link's delay (a chunk left out is dropped).
Forward = Callable[[bytes], list[tuple[bytes, float]]]


def _as_read(chunk: bytes) -> list[tuple[bytes, float]]:
    return [(chunk, 0.0)]


_CHUNK = 65536


@dataclass
class _Mode:
    delay: float = 0.0
    flowing: bool = True


class TcpProxy(Started):
    """Forward ``127.0.0.1:port`` to ``127.0.0.1:upstream_port``.

    >>> with TcpProxy(upstream_port=9092) as proxy:
    ...     proxy.set_delay(0.5)     # every chunk half a second late
    ...     proxy.blackhole()        # nothing gets through
    ...     proxy.restore()
    """

    def __init__(self, upstream_port: int, port: int | None = None, *, kafka: bool = False) -> None:
        self.upstream_port = upstream_port
        self.port = port or free_loopback_port()
        self.kafka = kafka
        # Inactive until the silent-partition fault sets its topic and turns it on.
        self.partition_filter = PartitionFilter(topic="", partition=-1)
        # Inactive until the coordinator fault sets its APIs and turns it on.
        self.request_hold = RequestHold()
        self._mode = _Mode()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    # -- control, from any thread ---------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="gameday-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(10) or self._server is None:
            raise ProbeError(f"proxy could not listen on {self.address}")

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = None

    def set_delay(self, seconds: float) -> None:
        self._call(lambda: setattr(self._mode, "delay", seconds))

    def blackhole(self) -> None:
        self._call(self._hold)

    def restore(self) -> None:
        """Back to pass-through: no delay, traffic flowing."""
        self._call(self._release)

    # -- the loop's side ------------------------------------------------------------------

    def _call(self, action: object) -> None:
        if self._loop is None:
            raise ProbeError("proxy is not running")
        done = threading.Event()

        def run() -> None:
            try:
                action()  # type: ignore[operator]
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(5)

    def _hold(self) -> None:
        self._mode.flowing = False
        assert self._flowing is not None
        self._flowing.clear()

    def _release(self) -> None:
        self._mode = _Mode()
        assert self._flowing is not None
        self._flowing.set()

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._flowing = asyncio.Event()
        self._flowing.set()
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._accept, LOOPBACK, self.port)
            )
        except OSError:
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    async def _accept(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        self.connections += 1
        self._writers.add(client)
        assert self._flowing is not None
        try:
            # A blackholed link never completes the upstream dial.
            await self._flowing.wait()
            try:
                upstream_reader, upstream = await asyncio.open_connection(
                    LOOPBACK, self.upstream_port
                )
            except OSError:
                return
            self._writers.add(upstream)
            upstream_bound: Forward = _as_read
            client_bound: Forward = _as_read
            if self.kafka:
                upstream_bound, client_bound = self._kafka_connection()
            await asyncio.gather(
                self._pump(client_reader, upstream, upstream_bound),
                self._pump(upstream_reader, client, client_bound),
            )
        finally:
            self._writers.discard(client)
            client.close()

    def _kafka_connection(self) -> tuple[Forward, Forward]:
        """One connection's requests through the hold, its responses through the
        stripper."""
        wire, stripper, hold = KafkaWire(), FetchStripper(self.partition_filter), self.request_hold

        def requests(chunk: bytes) -> list[tuple[bytes, float]]:
            forwarded = []
            for request in wire.requests(chunk):
                wait = hold.hold(request)
                if wait is not None:
                    forwarded.append((request.framed(), wait))
            return forwarded

        def responses(chunk: bytes) -> list[tuple[bytes, float]]:
            rewritten = b"".join(stripper.rewrite(r).framed() for r in wire.responses(chunk))
            return [(rewritten, 0.0)] if rewritten else []

        return requests, responses

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        forward: Forward,
    ) -> None:
        """Copy one direction; a queue keeps order while each chunk waits out its delay
        (a chunk behind a held one waits for it, however short its own wait)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer))
        assert self._flowing is not None
        try:
            while True:
                await self._flowing.wait()
                chunk = await reader.read(_CHUNK)
                if not chunk:
                    break
                now = time.monotonic()
                for forwarded, wait in forward(chunk):
                    queue.put_nowait((now + self._mode.delay + wait, forwarded))
            await queue.join()
        except (ConnectionError, OSError):
            pass
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
            self._writers.discard(writer)
            writer.close()

    async def _send(
        self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        assert self._flowing is not None
        broken = False
        # Every queued chunk is marked done, even after the peer went away, so the
        # pump's join() at end of stream never waits forever.
        while True:
            due, chunk = await queue.get()
            try:
                if not broken:
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                    await self._flowing.wait()
                    writer.write(chunk)
                    await writer.drain()
            except (ConnectionError, OSError):
                broken = True
            finally:
                queue.task_done()
