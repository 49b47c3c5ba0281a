"""Faults of tiered storage: the remote store of the run's cluster (a probe with
``tiered.enabled``, ``broker: apache-kafka``). The brokers and their local logs are left
as they are, which is what the game day asserts (the tiered reads alert, no stage)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from probe.gameday.faults.base import WrongBrokerError

if TYPE_CHECKING:
    from probe.gameday.faults.base import LocalTargets
    from probe.gameday.scenario import TieredStoreUnreadable


class TieredStoreUnreadableFault:
    def __init__(self, spec: TieredStoreUnreadable, targets: LocalTargets) -> None:
        if targets.remote_store is None:
            raise WrongBrokerError(
                "this fault needs tiered storage: a probe with tiered.enabled, on apache-kafka"
            )
        self.store = targets.remote_store

    def inject(self) -> None:
        self.store.make_unreadable()

    def heal(self) -> None:
        self.store.restore()
