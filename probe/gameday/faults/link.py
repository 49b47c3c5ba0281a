"""The link between the probe and its brokers slow (``proxy-latency``) or cut
(``proxy-blackhole``), at the proxies in front of them (``proxy``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import ProxyBlackhole, ProxyLatency


class ProxyLatencyFault:
    """Every chunk between probe and broker ``delay`` late, both ways (every broker's
    proxy, on a cluster)."""

    def __init__(self, spec: ProxyLatency, targets: LocalTargets) -> None:
        self.delay = spec.delay
        self.proxies = targets.proxies

    def inject(self) -> None:
        for proxy in self.proxies:
            proxy.set_delay(self.delay)

    def heal(self) -> None:
        for proxy in self.proxies:
            proxy.restore()


class ProxyBlackholeFault:
    """Nothing gets through between probe and broker (every broker, on a cluster);
    connections stay open."""

    def __init__(self, spec: ProxyBlackhole, targets: LocalTargets) -> None:
        self.proxies = targets.proxies

    def inject(self) -> None:
        for proxy in self.proxies:
            proxy.blackhole()

    def heal(self) -> None:
        for proxy in self.proxies:
            proxy.restore()
