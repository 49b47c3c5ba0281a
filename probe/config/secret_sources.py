"""Where a password comes from: inline, a ``*_file`` (a mounted Secret), or its
``SLA_PROBE_*`` variable, exactly one of them; never a flag, whose value shows in ``ps``.

A file is checked when the config is loaded (a bad one exits 2 at start) and read again
each time a client asks for the password, so a rotated Secret reaches the next client.
No error here quotes a secret's contents. (Not ``secrets.py``: no module of the package
may be named like a standard one, tests/test_module_names.py says why.)
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from probe.core.errors import ConfigError


def read_secret_file(path: Path) -> str:
    """A secret as its file holds it, without the trailing newline that ``echo``, editors
    and most secret stores add. Raises ValueError saying why the file cannot be used
    (never quoting its contents)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    secret = text.rstrip("\r\n")
    if not secret:
        raise ValueError(f"{path} is empty")
    return secret


# Secrets the environment may give, by the setting they fill (load() puts them there).
# None of them is a flag: a flag's value shows in `ps` and in a Pod's spec.
SECRET_VARIABLES = {
    "kafka.sasl.password": "SLA_PROBE_KAFKA_SASL_PASSWORD",
    "mirror.sasl.password": "SLA_PROBE_MIRROR_SASL_PASSWORD",
    "mqtt.password": "SLA_PROBE_MQTT_PASSWORD",
    "once.push_gateway.password": "SLA_PROBE_PUSH_GATEWAY_PASSWORD",
}


def _one_secret_source(inline: object, path: Path | None, setting: str, *, required: bool) -> None:
    """``setting`` (e.g. ``kafka.sasl.password``) given once: inline (or by its
    variable, which load() puts there), or as ``<setting>_file``. Checks the file
    can be read now, so a bad one exits 2 at start rather than at the first connection."""
    variable = SECRET_VARIABLES[setting]
    if inline is not None and path is not None:
        raise ValueError(f"give one of {setting}, {setting}_file or {variable}, not two")
    if required and inline is None and path is None:
        raise ValueError(f"no password: give {setting}_file, {variable} or {setting}")
    if path is not None:
        read_secret_file(path)


def _secret_value(inline: SecretStr | None, path: Path | None, setting: str) -> str | None:
    """The secret as it is now. The file is read at every call: the clients call this
    when they are created and, for Kafka, again when the file changed
    (probe.transport.kafka_client.CredentialFiles), so a password rotated in a mounted
    Secret reaches the next connection (an MQTT client's at every attempt), never a
    connection already open."""
    if path is None:
        return inline.get_secret_value() if inline is not None else None
    try:
        return read_secret_file(path)
    except ValueError as exc:
        raise ConfigError(f"{setting}_file", str(exc)) from None
