"""Who may read what the probe serves: the exporter toolkit's web configuration.

The file Prometheus' own exporters take with ``--web.config.file``, so that one
Secret and one scrape config serve them all (the format:
https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md)::

    tls_server_config:
      cert_file: /etc/sla-probe/tls/tls.crt        # relative paths: to this file's directory
      key_file: /etc/sla-probe/tls/tls.key
      client_auth_type: RequireAndVerifyClientCert # mutual TLS
      client_ca_file: /etc/sla-probe/tls/ca.crt
      min_version: TLS12
    basic_auth_users:
      prometheus: $2b$10$...                       # bcrypt: htpasswd -nBC 10 prometheus

>>> web = parse_web_config({"basic_auth_users": {"prometheus": _EXAMPLE_HASH}}, Path("."))
>>> web.tls_server_config is None, sorted(web.basic_auth_users)
(True, ['prometheus'])
>>> basic_credentials("Basic " + base64.b64encode(b"prometheus:secret").decode())
('prometheus', b'secret')
>>> BasicAuthUsers(web.basic_auth_users).check("prometheus", b"secret")
True

Every problem is a :class:`WebConfigError` whose text starts with the setting's path
in the file (``tls_server_config.client_auth_type: must be one of ...``); the
``metrics.web_config_file`` setting reports it behind its own name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import ssl
from collections import OrderedDict
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import bcrypt
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator

from probe.validation import first_problem

# "secret" at cost 4: doctests only.
_EXAMPLE_HASH = "$2b$04$5NPZ/bojXCQtlV.H6C5f8.JiGnN6.6r3tHYSIa73RI0eKT477H0Mq"


class WebConfigError(ValueError):
    """A web configuration problem; its text is ``<path in the file>: <reason>``, or
    the reason alone when it is the whole file's (``field`` None)."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message if field is None else f"{field}: {message}")
        self.field = field
        self.message = message


class ClientAuth(StrEnum):
    """``client_auth_type``: the exporter toolkit's names (Go's ``tls.ClientAuthType``)."""

    NO_CLIENT_CERT = "NoClientCert"
    REQUEST_CLIENT_CERT = "RequestClientCert"
    REQUIRE_ANY_CLIENT_CERT = "RequireAnyClientCert"
    VERIFY_CLIENT_CERT_IF_GIVEN = "VerifyClientCertIfGiven"
    REQUIRE_AND_VERIFY_CLIENT_CERT = "RequireAndVerifyClientCert"


# What OpenSSL does with a client certificate in each mode. Python's ssl verifies
# every certificate it asks for, so "ask, never check" cannot be had:
# RequestClientCert grants nothing to a certificate it does not check, so not asking
# at all admits exactly the same clients; RequireAnyClientCert would admit any
# self-signed certificate, and is refused at load (_no_unverified_requirement)
# rather than silently made stricter or looser.
_VERIFY_MODES = {
    ClientAuth.NO_CLIENT_CERT: ssl.CERT_NONE,
    ClientAuth.REQUEST_CLIENT_CERT: ssl.CERT_NONE,
    ClientAuth.VERIFY_CLIENT_CERT_IF_GIVEN: ssl.CERT_OPTIONAL,
    ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT: ssl.CERT_REQUIRED,
}
_VERIFYING = {ClientAuth.VERIFY_CLIENT_CERT_IF_GIVEN, ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT}


def verify_mode(client_auth: ClientAuth) -> ssl.VerifyMode:
    """The ssl verify mode of a ``client_auth_type``.

    >>> verify_mode(ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT).name
    'CERT_REQUIRED'
    """
    return _VERIFY_MODES[client_auth]


class TlsVersion(StrEnum):
    TLS10 = "TLS10"
    TLS11 = "TLS11"
    TLS12 = "TLS12"
    TLS13 = "TLS13"

    @property
    def ssl_version(self) -> ssl.TLSVersion:
        return _TLS_VERSIONS[self]


_TLS_VERSIONS = {
    TlsVersion.TLS10: ssl.TLSVersion.TLSv1,
    TlsVersion.TLS11: ssl.TLSVersion.TLSv1_1,
    TlsVersion.TLS12: ssl.TLSVersion.TLSv1_2,
    TlsVersion.TLS13: ssl.TLSVersion.TLSv1_3,
}

# $2a$, $2b$ or $2y$, a two-digit cost, 22 characters of salt and 31 of hash.
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")


def _bcrypt_hash(value: str) -> str:
    match = _BCRYPT_HASH.fullmatch(value)
    if match is None:
        raise ValueError("is not a bcrypt hash (e.g. from `htpasswd -nBC 10 USER`)")
    if not 4 <= int(match.group(1)) <= 31:
        raise ValueError(f"bcrypt cost {match.group(1)} is outside 04..31")
    return value


BcryptHash = Annotated[str, AfterValidator(_bcrypt_hash)]


class _Section(BaseModel):
    # Unknown keys are errors: a misspelt `client_auth_type` must not leave the
    # endpoints open to anyone.
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsServerConfig(_Section):
    """``tls_server_config``: the endpoints' certificate and who may connect."""

    cert_file: Path
    key_file: Path
    client_auth_type: ClientAuth = ClientAuth.NO_CLIENT_CERT
    client_ca_file: Path | None = None
    # The exporter toolkit's defaults.
    min_version: TlsVersion = TlsVersion.TLS12
    max_version: TlsVersion = TlsVersion.TLS13

    @model_validator(mode="after")
    def _consistent(self) -> TlsServerConfig:
        if self.client_auth_type is ClientAuth.REQUIRE_ANY_CLIENT_CERT:
            raise WebConfigError(
                "client_auth_type",
                "RequireAnyClientCert (any certificate, never checked) is not supported: "
                "use RequireAndVerifyClientCert with client_ca_file",
            )
        if self.client_auth_type in _VERIFYING and self.client_ca_file is None:
            raise WebConfigError(
                "client_ca_file", f"required with client_auth_type {self.client_auth_type}"
            )
        # As the exporter toolkit: a CA nobody is checked against is a misconfiguration.
        if self.client_ca_file is not None and self.client_auth_type not in _VERIFYING:
            raise WebConfigError(
                "client_ca_file",
                f"given, but client_auth_type {self.client_auth_type} checks no client "
                "certificate (use RequireAndVerifyClientCert or VerifyClientCertIfGiven)",
            )
        if _ORDER.index(self.min_version) > _ORDER.index(self.max_version):
            raise WebConfigError(
                "min_version", f"{self.min_version} is above max_version {self.max_version}"
            )
        return self

    def files(self) -> tuple[Path, ...]:
        """The files the TLS context is built from: what a rotation changes."""
        return (self.cert_file, self.key_file, *filter(None, [self.client_ca_file]))

    def context(self) -> ssl.SSLContext:
        """A server context from the files as they are now; a WebConfigError names the
        file that cannot be read or used."""
        for field in ("cert_file", "key_file", "client_ca_file"):
            path = getattr(self, field)
            if path is not None and not os.access(path, os.R_OK):
                reason = "no such file" if not path.exists() else "not readable"
                raise WebConfigError(f"tls_server_config.{field}", f"cannot read {path}: {reason}")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = self.min_version.ssl_version
        context.maximum_version = self.max_version.ssl_version
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except ssl.SSLError as exc:
            raise WebConfigError(
                "tls_server_config.key_file",
                f"{self.cert_file} and {self.key_file} are not a PEM certificate and its "
                f"private key ({exc.reason or exc})",
            ) from exc
        if self.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca_file)
            except ssl.SSLError as exc:
                raise WebConfigError(
                    "tls_server_config.client_ca_file",
                    f"{self.client_ca_file} holds no PEM certificate ({exc.reason or exc})",
                ) from exc
        context.verify_mode = verify_mode(self.client_auth_type)
        return context


_ORDER = list(TlsVersion)


class WebConfig(_Section):
    """The whole file. Empty: plain HTTP, no authentication (as without a file)."""

    tls_server_config: TlsServerConfig | None = None
    basic_auth_users: dict[str, BcryptHash] | None = None


def parse_web_config(tree: object, directory: Path) -> WebConfig:
    """Validate a parsed file; relative paths are taken from ``directory`` (the file's,
    as the exporter toolkit does)."""
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise WebConfigError(None, f"must be a mapping of settings, not {type(tree).__name__}")
    try:
        web = WebConfig.model_validate(tree)
    except ValidationError as exc:
        raise _first_error(exc) from None
    tls = web.tls_server_config
    if tls is None:
        return web
    absolute = {
        field: directory / path
        for field in ("cert_file", "key_file", "client_ca_file")
        if (path := getattr(tls, field)) is not None
    }
    return web.model_copy(update={"tls_server_config": tls.model_copy(update=absolute)})


def _first_error(error: ValidationError) -> WebConfigError:
    where, message, first = first_problem(error)
    context: dict[str, Any] = first.get("ctx") or {}
    raised = context.get("error")
    if isinstance(raised, WebConfigError):
        # A check across fields names the field it is about, within its section.
        return WebConfigError(".".join([*where, *filter(None, [raised.field])]), raised.message)
    if first["type"] == "missing":
        message = "required"
    elif first["type"] == "enum":
        message = f"must be one of {context['expected']}"
    return WebConfigError(".".join(where) or None, message)


def read_web_config(path: Path) -> WebConfig:
    """The file at ``path``, validated, with its certificates loaded once to prove
    they can be (a wrong key fails here, at start, not at the first scrape)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WebConfigError(None, f"cannot read {path}: {exc.strerror}") from exc
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise WebConfigError(None, f"{path} is not valid YAML{where}") from exc
    web = parse_web_config(tree, path.parent)
    if web.tls_server_config is not None:
        web.tls_server_config.context()
    return web


def basic_credentials(authorization: str | None) -> tuple[str, bytes] | None:
    """(user, password) of an ``Authorization: Basic`` header; None for anything else.

    >>> basic_credentials("Bearer abc") is None
    True
    """
    if authorization is None:
        return None
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
        user, colon, password = decoded.partition(b":")
        if not colon:
            return None
        return user.decode("utf-8"), password
    except (binascii.Error, UnicodeDecodeError):
        return None


# Distinct (user, password) pairs remembered: Prometheus servers and a few people.
CACHE_SIZE = 100


class BasicAuthUsers:
    """``basic_auth_users``, checked against bcrypt hashes, successes remembered.

    A bcrypt check costs its cost factor on purpose (about 0.1 s at cost 10 on one
    core): paid on every 15 s scrape, that is CPU the probe measures latency with.
    As the exporter toolkit, a (user, password) pair that matched once is admitted
    from memory; the memory holds a keyed hash of the pair, not the password, and
    failures are never remembered, so guessing still pays bcrypt every time.
    """

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = {user: hashed.encode() for user, hashed in users.items()}
        self._remembered: OrderedDict[bytes, None] = OrderedDict()
        self._key = os.urandom(32)

    def _pair(self, user: str, password: bytes) -> bytes:
        encoded = user.encode()
        message = len(encoded).to_bytes(4, "big") + encoded + password
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def remembered(self, user: str, password: bytes) -> bool:
        """True when this pair matched before: no bcrypt needed."""
        pair = self._pair(user, password)
        if pair not in self._remembered:
            return False
        self._remembered.move_to_end(pair)
        return True

    def check(self, user: str, password: bytes) -> bool:
        """The bcrypt check (slow by design; run it off the event loop)."""
        hashed = self._users.get(user)
        try:
            # An unknown user is checked against a known user's hash: the same time
            # spent, so the answer's delay does not tell which users exist.
            matched = bcrypt.checkpw(password, hashed or next(iter(self._users.values())))
        except (ValueError, StopIteration):
            # bcrypt refuses passwords over 72 bytes: no user has one.
            return False
        if not matched or hashed is None:
            return False
        self._remembered[self._pair(user, password)] = None
        while len(self._remembered) > CACHE_SIZE:
            self._remembered.popitem(last=False)
        return True
