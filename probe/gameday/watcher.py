"""The live watcher: polls an alerts API in a thread and builds the live timeline.

Times are the wall clock (``time.time()``), the clock Prometheus stamps ``activeAt``
with, so the server's exact pending time and our poll times share one axis. A poll
that fails is counted and reported, never fatal: a game day that breaks the network
may break the watcher's path too, and the report must say so rather than stop.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from probe.gameday.prometheus import AlertApiError
from probe.gameday.timeline import ObservedAlert, Timeline


class AlertSource(Protocol):
    def active_alerts(self) -> list[ObservedAlert]: ...


class AlertWatcher:
    """Polls ``source`` every ``poll_interval`` seconds until ``stop()``.

    >>> with AlertWatcher(PrometheusApi("http://127.0.0.1:9090"), 0.5) as watcher:
    ...     time.sleep(10)
    >>> watcher.timeline.tracks
    []
    """

    def __init__(self, source: AlertSource, poll_interval: float) -> None:
        self.source = source
        self.poll_interval = poll_interval
        self.timeline = Timeline()
        self.failed_polls = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="alert-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Timeline:
        """Stop polling after one last snapshot; the timeline is final after this."""
        self._stop.set()
        self._thread.join()
        self.poll()
        return self.timeline

    def poll(self) -> None:
        try:
            alerts = self.source.active_alerts()
        except AlertApiError as error:
            self.failed_polls += 1
            self.last_error = str(error)
            return
        with self._lock:
            self.timeline.observe(time.time(), alerts)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.poll()
            self._stop.wait(max(0.0, self.poll_interval - (time.monotonic() - started)))

    def __enter__(self) -> AlertWatcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._stop.is_set():
            self.stop()
