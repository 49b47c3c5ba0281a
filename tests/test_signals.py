"""How `once` turns a signal into Interrupted, and where it may not cut a step in half."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from probe.embedded import EmbeddedBroker
from probe.signals import Interrupted, interruptible, interrupts_deferred


def test_a_signal_inside_a_deferred_step_is_raised_at_its_end() -> None:
    steps: list[str] = []

    def step() -> None:
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("the rest of the step ran")

    with pytest.raises(Interrupted) as raised, interruptible():
        step()
    assert steps == ["the rest of the step ran"]
    assert raised.value.signum == signal.SIGINT


def test_outside_a_deferred_step_the_signal_is_raised_at_once() -> None:
    steps: list[str] = []

    def step() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        steps.append("ran on")

    with pytest.raises(Interrupted), interruptible():
        step()
    assert steps == []


def test_a_signal_while_the_broker_is_forked_stops_the_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The signal lands the moment the child exists (as `once` saw it under load, after
    the fork and before Popen returned): the broker is still stopped, not orphaned."""
    started: list[int] = []

    class SignalledPopen(subprocess.Popen[bytes]):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            started.append(self.pid)
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr("probe.embedded.subprocess.Popen", SignalledPopen)
    broker = EmbeddedBroker()
    with pytest.raises(Interrupted), interruptible(), broker:
        pytest.fail("the block ran though the start was interrupted")
    assert len(started) == 1
    assert not broker.running
    with pytest.raises(ProcessLookupError):
        os.kill(started[0], 0)
