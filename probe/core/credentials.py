"""Which credential files changed, and what a Kafka client must take anew: pure.

A client's credentials come from files a Secret mounts (``kafka.sasl.password_file``,
``kafka.tls.ca_file``, ``cert_file``, ``key_file``; which of them a config names:
probe.transport.kafka_client.credential_files). The shell looks at each (what
``stat`` says: probe.keyfile.look) once a round and hands the looks, by setting, to
:func:`changed`; :func:`renewal` says what the clients take anew from the changed
ones. A look is any comparable value (None: no file there now).

    >>> changed({"kafka.sasl.password_file": 1}, {"kafka.sasl.password_file": 2})
    ('kafka.sasl.password_file',)
    >>> renewal(("kafka.tls.cert_file",))
    Renewal(password=False, tls=True)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TypeVar

PASSWORD_FILE = "kafka.sasl.password_file"
TLS_FILES = ("kafka.tls.ca_file", "kafka.tls.cert_file", "kafka.tls.key_file")

Look = TypeVar("Look")


@dataclass(frozen=True, slots=True)
class Renewal:
    """What the clients take anew: the SASL password, the TLS context (CA, client
    certificate and key together: a Secret updates them in one swap)."""

    password: bool
    tls: bool

    @property
    def empty(self) -> bool:
        return not (self.password or self.tls)


def changed(seen: Mapping[str, Look], now: Mapping[str, Look]) -> tuple[str, ...]:
    """The settings whose file looks different now than when last seen, sorted."""
    return tuple(sorted(s for s in seen.keys() | now.keys() if seen.get(s) != now.get(s)))


def renewal(settings: Collection[str]) -> Renewal:
    """What the clients take anew when the files of these settings changed."""
    return Renewal(password=PASSWORD_FILE in settings, tls=any(s in TLS_FILES for s in settings))
