"""Broker faults: an outage (stop, then start), and a restart that loses every record.

The embedded Tansu broker keeps its data in memory, so any restart loses the topic
and its records: ``broker-stop`` is an outage *with* data loss at its end, and
``broker-data-loss`` is that loss with an outage as short as a restart. An outage
that keeps the data is ``proxy-blackhole``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import BrokerDataLoss, BrokerStop


class BrokerStopFault:
    """The broker is down for the fault phase."""

    def __init__(self, spec: BrokerStop, targets: LocalTargets) -> None:
        self.broker = targets.embedded_broker()

    def inject(self) -> None:
        self.broker.stop()

    def heal(self) -> None:
        self.broker.start()


class BrokerDataLossFault:
    """The broker restarts at once and comes back empty; heal has nothing left to do."""

    def __init__(self, spec: BrokerDataLoss, targets: LocalTargets) -> None:
        self.broker = targets.embedded_broker()

    def inject(self) -> None:
        self.broker.stop()
        self.broker.start()

    def heal(self) -> None:
        """The broker is already back; the probe re-creates the topic."""
