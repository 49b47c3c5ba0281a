"""Certificates made at test time: a CA of the test's own, and what it signs.

>>> ca = CertificateAuthority("test CA")
>>> broker = ca.issue("127.0.0.1")  # a server certificate for that address
>>> broker.key_pem.startswith("-----BEGIN PRIVATE KEY-----")
True
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)
_CA_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
    encipher_only=False, decipher_only=False,
)  # fmt: skip
_CA_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
    encipher_only=False, decipher_only=False,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Issued:
    """A key (unencrypted PKCS#8, the form Kafka's PEM keystores take) and its
    certificate, PEM."""

    key_pem: str
    certificate_pem: str

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """``name``.crt and ``name``.key in ``directory``: (certificate, key)."""
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        cert.write_text(self.certificate_pem)
        key.write_text(self.key_pem)
        return cert, key


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, common_name: str) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._name = _name(common_name)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_CA_USAGE, critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.pem = self.certificate.public_bytes(serialization.Encoding.PEM).decode()

    def issue(self, *names: str, client: bool = False, expired: bool = False) -> Issued:
        """A certificate for these host names or IP addresses (a server's), or for a
        client (``client``, the first name its common name); ``expired``: valid until
        yesterday."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        until = now - _DAY if expired else now + 30 * _DAY
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(names[0]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - 2 * _DAY)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if not client:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(name) for name in names]),
                critical=False,
            )
        certificate = builder.sign(self._key, hashes.SHA256())
        return Issued(_key_pem(key), certificate.public_bytes(serialization.Encoding.PEM).decode())


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)
