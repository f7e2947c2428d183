"""A private certificate authority for local clusters and tests: a CA, and certificates it issues
for brokers and clients, as PEM (the form Raftka's ``ssl.keystore.location`` and
``ssl.truststore.location`` read). Keys are ECDSA P-256; certificates carry the host names and
addresses they are for (subjectAltName) and may serve as TLS server and client both, since
brokers show theirs to each other.

Nothing here is for a production PKI: validity is short by default and the CA's key sits in a
file beside the cluster, mode 600.
"""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY_DAYS_DEFAULT = 365
CLOCK_SKEW = datetime.timedelta(minutes=5)  # valid a little before now: peers' clocks differ


@dataclass(frozen=True)
class Issued:
    """A private key and its certificate chain (leaf first, then the CA), as PEM."""
    key_pem: bytes
    chain_pem: bytes

    @property
    def keystore_pem(self) -> bytes:
        """Key and chain in one file: what ``ssl.keystore.location`` reads."""
        return self.key_pem + self.chain_pem

    def __repr__(self) -> str:  # the key stays out of logs and tracebacks
        return "Issued(<key>, <chain>)"


class CertificateAuthority:
    """A self-signed CA that issues leaf certificates."""

    def __init__(self, key: Any, cert: x509.Certificate) -> None:
        self.key = key
        self.cert = cert

    @classmethod
    def create(cls, common_name: str, days: int = VALIDITY_DAYS_DEFAULT) -> "CertificateAuthority":
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        cert = (_builder(name, name, key, key, days)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    @property
    def cert_pem(self) -> bytes:
        """The CA's certificate: what ``ssl.truststore.location`` and ``ssl_cafile`` read."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return _pem_key(self.key, None)

    def issue(self, common_name: str, hosts: tuple[str, ...] = (), *, days: int = VALIDITY_DAYS_DEFAULT,
              key_password: str | None = None) -> Issued:
        """A certificate for ``hosts`` (IP addresses and DNS names), usable as TLS server and
        client; the key encrypted with ``key_password`` when given."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (_builder(_name(common_name), self.cert.subject, key, self.key, days)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        names = [_general_name(host) for host in hosts]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.cert_pem
        return Issued(_pem_key(key, key_password), chain)


def write_pem(path: Path, data: bytes) -> Path:
    """Write ``data`` readable by its owner only (a key may be in it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)
    return path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _builder(subject: x509.Name, issuer: x509.Name, key: Any, issuer_key: Any, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                           critical=False))


def _pem_key(key: Any, password: str | None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
