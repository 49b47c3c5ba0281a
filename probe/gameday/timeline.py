"""The alert timeline: what was active when, from successive snapshots. Pure: no clock.

Both the live watcher (snapshots of Prometheus's alerts API, at poll times) and the
replay (promtool's ALERTS at each evaluation, at replay times) feed ``observe(at,
alerts)``; the verdict is judged on the resulting tracks the same way for both.

Invariant: an alert is identified by its labels (``alertname`` included, the state
left out); a track is *active* while it appears in the snapshots, pending or firing,
and *resolved* at the first snapshot it is missing from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

AlertKey = tuple[tuple[str, str], ...]
AlertState = Literal["pending", "firing"]


@dataclass(frozen=True)
class ObservedAlert:
    """One active alert at one moment: its labels (alertname included) and state.

    Defined here, with the timeline it feeds, not with the Prometheus that reports it
    (``prometheus``, which starts a server): the replay's promtool output makes them
    too, and the timeline stays pure.
    """

    labels: dict[str, str]
    state: AlertState
    # When the alert became active (pending), as the server says; None if it does not.
    active_at: float | None = None


def alert_key(labels: dict[str, str]) -> AlertKey:
    return tuple(sorted(labels.items()))


@dataclass
class Episode:
    """One period an alert was active: from pending (or straight firing) to resolved."""

    start: float
    firing_at: float | None = None
    end: float | None = None


@dataclass
class AlertTrack:
    """One alert's history over a run (times in the timeline's own clock)."""

    labels: dict[str, str]
    episodes: list[Episode] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def active(self) -> bool:
        return bool(self.episodes) and self.episodes[-1].end is None

    @property
    def resolved_at(self) -> float | None:
        return None if self.active or not self.episodes else self.episodes[-1].end

    def first_firing(self, since: float) -> Episode | None:
        """The first episode that fired at or after `since`."""
        return next(
            (e for e in self.episodes if e.firing_at is not None and e.firing_at >= since),
            None,
        )

    def fired(self) -> bool:
        return any(e.firing_at is not None for e in self.episodes)


class Timeline:
    """Alert tracks built from snapshots taken in time order.

    >>> timeline = Timeline()
    >>> timeline.observe(10.0, [ObservedAlert({"alertname": "A"}, "firing")])
    >>> timeline.observe(11.0, [])
    >>> timeline.tracks[0].episodes
    [Episode(start=10.0, firing_at=10.0, end=11.0)]
    """

    def __init__(self) -> None:
        self._tracks: dict[AlertKey, AlertTrack] = {}
        self.first_at: float | None = None
        self.last_at: float | None = None
        self._previous_at: float | None = None

    @property
    def tracks(self) -> list[AlertTrack]:
        return list(self._tracks.values())

    def observe(self, at: float, alerts: Iterable[ObservedAlert]) -> None:
        if self.first_at is None:
            self.first_at = at
        self.last_at = at
        seen: set[AlertKey] = set()
        for alert in alerts:
            key = alert_key(alert.labels)
            seen.add(key)
            track = self._tracks.setdefault(key, AlertTrack(labels=dict(alert.labels)))
            if not track.active:
                # The server's activeAt is exact for a new episode; one from before the
                # previous snapshot belongs to an episode already counted.
                started = at
                if (
                    alert.active_at is not None
                    and (self._previous_at or -1e300) < (alert.active_at) <= at
                ):
                    started = alert.active_at
                track.episodes.append(Episode(start=started))
            episode = track.episodes[-1]
            if alert.state == "firing" and episode.firing_at is None:
                episode.firing_at = at
        for key, track in self._tracks.items():
            if track.active and key not in seen:
                track.episodes[-1].end = at
        self._previous_at = at
