"""Alertmanager's inhibition, applied to an alert timeline. Pure (times are arguments),
but for :func:`documented_inhibit_rules`, which reads the rules from docs/alerting.md.

docs/alerting.md documents the inhibit rules to configure (a silent partition mutes the
watermark-skew burn of its target; a fast-burn page mutes the slow-burn ticket of its
SLO), and tests/test_slo_rules.py proves them in a real Alertmanager. A game day's
timelines come from Prometheus and from promtool, which know nothing of inhibition:
this module applies the same rules to them, so the verdict can say which alerts
reached a person and when, and an alert muted for as long as it fired is no page.

Alertmanager's semantics, as far as these rules use them: a *target* alert is muted
while some other firing alert matches the rule's source matchers and carries the same
values (absent counts as empty) for every ``equal`` label. Matchers are ``name="v"``,
``name!="v"``, ``name=~"re"`` and ``name!~"re"``, regular expressions anchored at both
ends. Notification delays (``group_wait``) are left out: a muted stretch is judged as
the timeline saw it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from probe.core.errors import ProbeError
from probe.gameday.timeline import AlertTrack

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED = ROOT / "docs" / "alerting.md"
_MARKER = "<!-- inhibit_rules"
_MATCHER = re.compile(r'\s*(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')

Span = tuple[float, float]  # [start, end) on the timeline's clock


class InhibitRulesError(ProbeError):
    """The inhibit rules could not be read."""


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op in ("=", "!="):
            return (actual == self.value) == (self.op == "=")
        return (re.fullmatch(self.value, actual) is not None) == (self.op == "=~")


def parse_matcher(text: str) -> Matcher:
    """``alertname=~"A|B"`` -> Matcher("alertname", "=~", "A|B")."""
    found = _MATCHER.fullmatch(text)
    if found is None:
        raise InhibitRulesError(f'not a matcher (name="value"): {text!r}')
    name, op, value = found.groups()
    return Matcher(name, op, value.replace('\\"', '"'))


@dataclass(frozen=True)
class InhibitRule:
    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]

    @classmethod
    def from_config(cls, rule: Mapping[str, Any]) -> InhibitRule:
        return cls(
            source=tuple(parse_matcher(m) for m in rule.get("source_matchers", ())),
            target=tuple(parse_matcher(m) for m in rule.get("target_matchers", ())),
            equal=tuple(str(label) for label in rule.get("equal", ())),
        )

    def mutes(self, source: Mapping[str, str], target: Mapping[str, str]) -> bool:
        """A firing ``source`` alert mutes ``target`` under this rule."""
        return (
            source != target  # an alert never mutes itself
            and all(m.matches(target) for m in self.target)
            and all(m.matches(source) for m in self.source)
            and all(source.get(label, "") == target.get(label, "") for label in self.equal)
        )


def read_inhibit_rules(config: Mapping[str, Any]) -> tuple[InhibitRule, ...]:
    """The rules of an Alertmanager configuration's ``inhibit_rules``."""
    return tuple(InhibitRule.from_config(rule) for rule in config.get("inhibit_rules") or ())


def documented_inhibit_rules(document: Path = DOCUMENTED) -> tuple[InhibitRule, ...]:
    """The rules docs/alerting.md tells users to configure (the YAML block after its
    ``<!-- inhibit_rules`` marker)."""
    try:
        text = document.read_text()
        block = text[text.index(_MARKER) :].split("```yaml\n", 1)[1].split("```", 1)[0]
    except (OSError, ValueError, IndexError) as error:
        raise InhibitRulesError(f"no inhibit_rules block in {document}: {error}") from None
    loaded = yaml.safe_load(block)
    if not isinstance(loaded, dict):
        raise InhibitRulesError(f"the inhibit_rules block of {document} is not a mapping")
    return read_inhibit_rules(loaded)


def firing_spans(track: AlertTrack) -> list[Span]:
    """When the alert was firing; one still firing when the timeline ends, for ever."""
    return [
        (episode.firing_at, math.inf if episode.end is None else episode.end)
        for episode in track.episodes
        if episode.firing_at is not None
    ]


def notified_spans(
    track: AlertTrack, tracks: Sequence[AlertTrack], rules: Sequence[InhibitRule]
) -> list[Span]:
    """When the alert was firing and no rule muted it: what reached a person."""
    muting = [
        span
        for source in tracks
        if any(rule.mutes(source.labels, track.labels) for rule in rules)
        for span in firing_spans(source)
    ]
    return [piece for span in firing_spans(track) for piece in _subtract(span, sorted(muting))]


def _subtract(span: Span, muting: list[Span]) -> list[Span]:
    """``span`` minus the union of ``muting`` (sorted by start)."""
    start, stop = span
    left: list[Span] = []
    for mute_start, mute_stop in muting:
        if mute_stop <= start or mute_start >= stop:
            continue
        if mute_start > start:
            left.append((start, mute_start))
        start = max(start, mute_stop)
        if start >= stop:
            return left
    if start < stop:
        left.append((start, stop))
    return left
