"""The signing key ring: which secrets sign canaries, and which verify them.

A ring holds every key a probe *accepts* and names the one *active* key it signs
with. Every canary carries the id (``kid``) of the key that signed it, so a verifier
picks the right secret without trying them all.

Key file (a contract; ``sla-probe keygen`` writes one)::

    {"active": "k1a2b3c4d", "keys": {"k1a2b3c4d": "<base64 secret>"}}

Key ids are 1..32 printable ASCII characters without whitespace; secrets are at least
16 bytes (``generate_key_ring`` makes 32 random ones).

Rotating a key without a gap, across probes and stages that share the ring (one
``sla-probe keygen`` command each: ``--add``, ``--activate``, ``--drop``; a running
``sla-probe run`` reloads its key file, see ``probe.keyfile``):

1. Add the new key to ``keys`` everywhere, leaving ``active`` alone. Every verifier
   now accepts both keys; canaries are still signed with the old one.
2. Once step 1 is deployed everywhere, set ``active`` to the new key. Canaries in
   flight signed with the old key still verify.
3. After the longest time a canary can stay in flight (the loss timeout, plus any
   replay you care about), drop the old key. A record of this probe process signed
   with it is then rejected as ``unknown_key``.

Example::

    >>> ring = KeyRing({"k1": b"0123456789abcdef"}, active="k1")
    >>> ring
    KeyRing(active='k1', kids=('k1',))
    >>> KeyRing.from_json(ring.to_json()) == ring
    True
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from collections.abc import Mapping
from typing import Any, Protocol

from probe.core.errors import ConfigError

MIN_SECRET_BYTES = 16
MAX_KID_CHARS = 32
_GENERATED_SECRET_BYTES = 32

# Printable ASCII without the space: a kid goes into file paths, log lines and the
# wire format, where whitespace or control characters would only cause confusion.
_KID_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F))
_FILE_FIELDS = frozenset({"active", "keys"})


def _kid_problem(kid: object) -> str | None:
    """Why ``kid`` is not a valid key id, or None if it is."""
    if not isinstance(kid, str):
        return "key id must be a string"
    if not 1 <= len(kid) <= MAX_KID_CHARS:
        return f"key id must be 1..{MAX_KID_CHARS} characters"
    if not _KID_CHARS.issuperset(kid):
        return "key id must be printable ASCII without whitespace"
    return None


def _shown(kid: object) -> str:
    """A key id as it may safely appear in an error message (one line, bounded)."""
    text = repr(kid)
    return text if len(text) <= 40 else text[:37] + "..."


class KeyRing:
    """The keys a probe signs and verifies canaries with. Immutable.

    ``field`` is the config path errors are reported under, so a bad key file says
    which entry is wrong: ``signing_key_file.keys.k1: secret must be at least 16 bytes``.

    Example::

        >>> ring = KeyRing({"old": b"a" * 16, "new": b"b" * 16}, active="new")
        >>> ring.active_kid, ring.kids
        ('new', ('new', 'old'))
        >>> ring.secret_for("old") == b"a" * 16, ring.secret_for("gone")
        (True, None)
    """

    __slots__ = ("_active", "_secrets")

    def __init__(
        self,
        keys: Mapping[str, bytes],
        active: str,
        *,
        field: str = "signing_key_file",
    ) -> None:
        if not keys:
            raise ConfigError(f"{field}.keys", "at least one key is required")
        ring: dict[str, bytes] = {}
        for kid, secret in keys.items():
            problem = _kid_problem(kid)
            if problem is not None:
                raise ConfigError(f"{field}.keys", f"{problem}, got {_shown(kid)}")
            if not isinstance(secret, bytes | bytearray):
                raise ConfigError(f"{field}.keys.{kid}", "secret must be bytes")
            if len(secret) < MIN_SECRET_BYTES:
                raise ConfigError(
                    f"{field}.keys.{kid}", f"secret must be at least {MIN_SECRET_BYTES} bytes"
                )
            ring[kid] = bytes(secret)
        if not isinstance(active, str) or active not in ring:
            raise ConfigError(
                f"{field}.active",
                f"must name one of the keys {tuple(sorted(ring))}, got {_shown(active)}",
            )
        self._secrets = ring
        self._active = active

    @property
    def active_kid(self) -> str:
        """The id of the key new canaries are signed with."""
        return self._active

    @property
    def active_secret(self) -> bytes:
        return self._secrets[self._active]

    @property
    def kids(self) -> tuple[str, ...]:
        """Every key id this ring verifies with, sorted."""
        return tuple(sorted(self._secrets))

    def secret_for(self, kid: str) -> bytes | None:
        """The secret for ``kid``, or None if this ring does not know that key."""
        return self._secrets.get(kid)

    @property
    def ring(self) -> KeyRing:
        """This ring: a ring that never changes is its own :class:`KeySource`."""
        return self

    # -- rotation: each step returns a new ring (rings are immutable) -----------------

    def with_key(
        self, kid: str, secret: bytes, *, activate: bool = False, field: str = "signing_key_file"
    ) -> KeyRing:
        """This ring plus one key (rotation step 1; also step 2 with ``activate``).

        >>> ring = KeyRing({"k1": b"a" * 16}, active="k1").with_key("k2", b"b" * 16)
        >>> ring
        KeyRing(active='k1', kids=('k1', 'k2'))
        """
        if kid in self._secrets:
            raise ConfigError(f"{field}.keys", f"already has key {_shown(kid)}")
        keys = {**self._secrets, kid: secret}
        return KeyRing(keys, kid if activate else self._active, field=field)

    def with_active(self, kid: str, *, field: str = "signing_key_file") -> KeyRing:
        """This ring signing with ``kid``, which it must hold (rotation step 2)."""
        return KeyRing(self._secrets, kid, field=field)

    def without(self, kid: str, *, field: str = "signing_key_file") -> KeyRing:
        """This ring without key ``kid`` (rotation step 3). The active key stays."""
        if kid not in self._secrets:
            raise ConfigError(
                f"{field}.keys", f"has no key {_shown(kid)} (keys: {', '.join(self.kids)})"
            )
        if kid == self._active:
            raise ConfigError(
                f"{field}.active",
                f"{_shown(kid)} is the active key; make another key active before dropping it",
            )
        return KeyRing(
            {k: s for k, s in self._secrets.items() if k != kid}, self._active, field=field
        )

    @classmethod
    def from_json(cls, text: str, field: str = "signing_key_file") -> KeyRing:
        """Parse a key file. Any problem is a ``ConfigError`` naming the bad entry.

        Messages never echo a secret, nor the file's text.
        """
        try:
            document = json.loads(text, object_pairs_hook=_reject_duplicate_names)
        except _DuplicateName as exc:
            raise ConfigError(field, f"name {_shown(exc.name)} appears twice") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(
                field, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        except (ValueError, RecursionError):
            raise ConfigError(field, "not valid JSON") from None
        if not isinstance(document, dict):
            raise ConfigError(field, 'must be a JSON object {"active": ..., "keys": {...}}')
        for name in document:
            if name not in _FILE_FIELDS:
                raise ConfigError(f"{field}.{name}", "unknown field (expected active, keys)")
        if "keys" not in document:
            raise ConfigError(f"{field}.keys", "missing")
        if "active" not in document:
            raise ConfigError(f"{field}.active", "missing")
        active, encoded = document["active"], document["keys"]
        if not isinstance(active, str):
            raise ConfigError(f"{field}.active", "must be a string naming one of the keys")
        if not isinstance(encoded, dict):
            raise ConfigError(f"{field}.keys", "must be an object mapping key id to base64 secret")
        keys: dict[str, bytes] = {}
        for kid, value in encoded.items():
            problem = _kid_problem(kid)
            if problem is not None:
                raise ConfigError(f"{field}.keys", f"{problem}, got {_shown(kid)}")
            if not isinstance(value, str):
                raise ConfigError(f"{field}.keys.{kid}", "secret must be a base64 string")
            keys[kid] = _secret_from_base64(value, f"{field}.keys.{kid}")
        return cls(keys, active, field=field)

    def to_json(self) -> str:
        """The key file text for this ring; ``from_json`` reads it back."""
        document = {
            "active": self._active,
            "keys": {
                kid: base64.b64encode(self._secrets[kid]).decode("ascii") for kid in self.kids
            },
        }
        return json.dumps(document, indent=2) + "\n"

    def __repr__(self) -> str:
        # Secrets stay out of reprs: rings end up in logs, tracebacks and test output.
        return f"KeyRing(active={self._active!r}, kids={self.kids!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyRing):
            return NotImplemented
        return self._active == other._active and self._secrets == other._secrets

    def __hash__(self) -> int:
        # Consistent with __eq__ (equal rings share active and kids) without
        # feeding secrets into a hash that may be printed or compared elsewhere.
        return hash((self._active, self.kids))


class KeySource(Protocol):
    """Where the probe's current key ring comes from.

    A :class:`KeyRing` is a source that never changes; ``probe.keyfile.KeyRingSource``
    is one that a key file reloads. Whoever signs or verifies reads ``.ring`` at the
    moment of use and never keeps it, so a reload reaches every user at once.
    """

    @property
    def ring(self) -> KeyRing: ...


def _secret_from_base64(text: str, field: str) -> bytes:
    # Only canonical standard base64 (what ``openssl rand -base64`` and ``to_json``
    # write): a lenient decoder would turn a truncated paste into a shorter secret.
    try:
        secret = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        secret = None
    if secret is None or base64.b64encode(secret).decode("ascii") != text:
        raise ConfigError(field, "secret is not valid base64 (standard alphabet, padded)")
    return secret


class _DuplicateName(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _reject_duplicate_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal names; in a key file that silently
    # drops a key (or an ``active``), so it is an error instead.
    document: dict[str, Any] = {}
    for name, value in pairs:
        if name in document:
            raise _DuplicateName(name)
        document[name] = value
    return document


def random_kid(prefix: str = "k") -> str:
    """``prefix`` + 8 random hex digits: unique enough that two probes' generated keys
    do not collide, and free of dates so it leaks nothing."""
    return prefix + secrets.token_hex(4)


def random_secret() -> bytes:
    """A new secret: 32 random bytes from ``secrets``."""
    return secrets.token_bytes(_GENERATED_SECRET_BYTES)


def generate_key_ring(kid: str | None = None) -> KeyRing:
    """A fresh one-key ring with a random secret; the kid defaults to :func:`random_kid`."""
    if kid is None:
        kid = random_kid()
    return KeyRing({kid: random_secret()}, active=kid)
