"""What a fault is, and what it may act on in a local environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from probe.embedded import EmbeddedBroker
    from probe.gameday.faults.proxy import TcpProxy


class Fault(Protocol):
    """Injected when the fault phase starts, healed when it ends.

    ``inject`` returns once the fault is in place (a stopped broker no longer
    listens); ``heal`` once it is removed (a restarted broker listens again). Neither
    waits for the pipeline to recover: measuring that is the game day's job.
    """

    def inject(self) -> None: ...

    def heal(self) -> None: ...


class RestartableProcess(Protocol):
    # Added to the process's environment at its next start (e.g. a shifted clock).
    environment: dict[str, str]

    def stop(self) -> None: ...

    def start(self) -> None: ...

    def send_signal(self, signal: int) -> None: ...


@dataclass
class LocalTargets:
    """The local environment's parts a fault may act on."""

    broker: EmbeddedBroker
    # Between probe and broker; the broker advertises its address.
    proxy: TcpProxy
    probe: RestartableProcess
    topic: str
    partitions: int
    # The probe's key file and id: a tampered canary needs neither, but knowing the
    # probe id lets a hostile record claim to be the probe's own.
    key_file: Path
    probe_id: str

    @property
    def bootstrap_servers(self) -> str:
        return self.proxy.address
