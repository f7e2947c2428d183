"""Security protocols and TLS, shared by servers, brokers and clients (docs/security.md).

Kafka's four security protocols, by its names and ids (the ``security_protocol`` of a
BrokerRegistration listener): PLAINTEXT 0, SSL 1, SASL_PLAINTEXT 2, SASL_SSL 3. A listener's
protocol comes from ``listener.security.protocol.map`` (``NAME:PROTOCOL,...``), as in Kafka.

TLS is the standard library's ``ssl`` module, with certificates and keys in PEM:
:func:`server_ssl_context` for a listener (its keystore, and its truststore when clients must
show a certificate) and :func:`client_ssl_context` for whoever dials one (a client, a follower).
Both allow TLS 1.2 and 1.3 only and verify the peer's certificate; a problem with a file or a
password raises ConfigError naming the config key that gave it (``names`` maps each argument to
its key, as the server and the client name them differently). Key passwords never appear in an
error message.

A TLS handshake that fails on the dialling side raises :class:`SslAuthenticationError`.

Pure standard library; imports only the shared layer (``raftka.common``).
"""
from __future__ import annotations

import os
import ssl
import tempfile
from typing import Final, Iterable, Mapping

from raftka.common.errors import ConfigError, NetworkExceptionError

PLAINTEXT: Final = "PLAINTEXT"
SSL: Final = "SSL"
SASL_PLAINTEXT: Final = "SASL_PLAINTEXT"
SASL_SSL: Final = "SASL_SSL"
# Kafka's SecurityProtocol ids (BrokerRegistration's listeners carry them).
SECURITY_PROTOCOLS: Final = {PLAINTEXT: 0, SSL: 1, SASL_PLAINTEXT: 2, SASL_SSL: 3}

TLS_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
ENABLED_PROTOCOLS_DEFAULT: Final = ("TLSv1.2", "TLSv1.3")
CLIENT_AUTH_MODES: Final = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
PEM_FILE_BYTES_MAX: Final = 1_048_576  # a certificate chain is a few KiB; a bigger file is not one


class SslAuthenticationError(NetworkExceptionError):  # type: ignore[misc, valid-type]
    """The TLS handshake failed: the peer's certificate is not trusted or names another host, a
    certificate the peer requires was not given, or the two sides share no TLS version. Not
    retriable, as Kafka's SslAuthenticationException: trying again fails the same way until
    certificates or configs change."""

    retriable = False


def uses_tls(protocol: str) -> bool:
    return protocol in (SSL, SASL_SSL)


def uses_sasl(protocol: str) -> bool:
    return protocol in (SASL_PLAINTEXT, SASL_SSL)


def parse_protocol_map(items: Iterable[str], key: str = "listener.security.protocol.map") -> dict[str, str]:
    """``["PLAINTEXT:PLAINTEXT", "INTERNAL:SSL"]`` -> {listener name: security protocol};
    ConfigError naming ``key`` for a bad entry, an unknown protocol or a name given twice."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip(), protocol.strip().upper()
        if not sep or not name:
            raise ConfigError(key, f"expected NAME:PROTOCOL entries, got {item!r}")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(key, f"{name}: unknown security protocol {protocol!r} "
                                   f"(expected {', '.join(SECURITY_PROTOCOLS)})")
        if name in out:
            raise ConfigError(key, f"listener {name} given twice")
        out[name] = protocol
    return out


def _tls_range(context: ssl.SSLContext, protocols: Iterable[str], key: str) -> None:
    versions = []
    for name in protocols:
        version = TLS_VERSIONS.get(name)
        if version is None:
            raise ConfigError(key, f"{name!r} is not allowed (allowed: {', '.join(TLS_VERSIONS)})")
        versions.append(version)
    if not versions:
        raise ConfigError(key, f"name at least one of {', '.join(TLS_VERSIONS)}")
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)


def _readable(path: str, key: str) -> None:
    """ConfigError naming ``key`` unless ``path`` is a readable file of sane size."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb"):
            pass
    except OSError as error:
        raise ConfigError(key, f"cannot read {path}: {error.strerror}") from None
    if size > PEM_FILE_BYTES_MAX:
        raise ConfigError(key, f"{path} is {size} bytes; a PEM file of at most {PEM_FILE_BYTES_MAX} expected")


def _no_password() -> bytes:
    # Without a password callback OpenSSL would prompt on the terminal for an encrypted key.
    raise _EncryptedKey


class _EncryptedKey(Exception):
    pass


def _load_keystore(context: ssl.SSLContext, names: Mapping[str, str], *, certfile: str | None,
                   keyfile: str | None, certificate_chain: str | None, key: str | None,
                   password: str | None) -> None:
    """The certificate chain and private key into ``context``: from files, or from PEM text
    (written to a private temporary file for ``load_cert_chain``, removed at once)."""
    if certificate_chain is not None or key is not None:
        if certificate_chain is None or key is None:
            missing = "certificate_chain" if certificate_chain is None else "key"
            raise ConfigError(names[missing], "PEM text needs both the certificate chain and the key")
        with tempfile.TemporaryDirectory(prefix="raftka-tls-") as directory:  # mode 700
            path = os.path.join(directory, "keystore.pem")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="ascii") as f:
                f.write(key.strip() + "\n" + certificate_chain.strip() + "\n")
            _load_chain(context, names, "certificate_chain", path, None, password)
        return
    assert certfile is not None
    _readable(certfile, names["certfile"])
    if keyfile is not None:
        _readable(keyfile, names["keyfile"])
    _load_chain(context, names, "certfile", certfile, keyfile, password)


def _load_chain(context: ssl.SSLContext, names: Mapping[str, str], what: str, certfile: str,
                keyfile: str | None, password: str | None) -> None:
    try:
        context.load_cert_chain(certfile, keyfile, password if password is not None else _no_password)
    except _EncryptedKey:
        raise ConfigError(names["password"], "the private key is encrypted and no password was given") from None
    except ssl.SSLError as error:
        if password is not None and _encrypted(context, certfile, keyfile):
            raise ConfigError(names["password"], "does not decrypt the private key") from None
        # OpenSSL's reason only: never the password.
        reason = error.reason or "not a PEM certificate chain with its private key"
        raise ConfigError(names[what], f"cannot load the certificate chain and private key: {reason}") from None


def _encrypted(context: ssl.SSLContext, certfile: str, keyfile: str | None) -> bool:
    """Whether the key asks for a password (OpenSSL says only "PEM lib" for a wrong one)."""
    try:
        context.load_cert_chain(certfile, keyfile, _no_password)
    except _EncryptedKey:
        return True
    except ssl.SSLError:
        pass
    return False


def _load_trust(context: ssl.SSLContext, cafile: str, key: str) -> None:
    _readable(cafile, key)
    try:
        context.load_verify_locations(cafile=cafile)
    except ssl.SSLError as error:
        raise ConfigError(key, f"{cafile}: not PEM certificates ({error.reason or error})") from None


SERVER_KEY_NAMES: Final = {
    "certfile": "ssl.keystore.location", "keyfile": "ssl.keystore.location",
    "certificate_chain": "ssl.keystore.certificate.chain", "key": "ssl.keystore.key",
    "password": "ssl.key.password", "cafile": "ssl.truststore.location",
    "client_auth": "ssl.client.auth", "enabled_protocols": "ssl.enabled.protocols",
}
CLIENT_KEY_NAMES: Final = {
    "certfile": "ssl_certfile", "keyfile": "ssl_keyfile", "certificate_chain": "ssl_certfile",
    "key": "ssl_keyfile", "password": "ssl_password", "cafile": "ssl_cafile",
    "enabled_protocols": "ssl_enabled_protocols",
}


def server_ssl_context(*, certfile: str | None = None, keyfile: str | None = None,
                       certificate_chain: str | None = None, key: str | None = None,
                       password: str | None = None, cafile: str | None = None, client_auth: str = "none",
                       enabled_protocols: Iterable[str] = ENABLED_PROTOCOLS_DEFAULT,
                       names: Mapping[str, str] = SERVER_KEY_NAMES) -> ssl.SSLContext:
    """A TLS listener's context: its certificate chain and key (``certfile`` [+ ``keyfile``],
    or PEM text ``certificate_chain`` + ``key``), and for ``client_auth`` "requested" or
    "required" the CA certificates client certificates must chain to (``cafile``)."""
    if client_auth not in CLIENT_AUTH_MODES:
        raise ConfigError(names["client_auth"], f"must be one of {', '.join(CLIENT_AUTH_MODES)}, got {client_auth!r}")
    if certfile is None and certificate_chain is None and key is None:
        raise ConfigError(names["certfile"], "a TLS listener needs its certificate chain and private key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _tls_range(context, enabled_protocols, names["enabled_protocols"])
    _load_keystore(context, names, certfile=certfile, keyfile=keyfile, certificate_chain=certificate_chain,
                   key=key, password=password)
    if client_auth != "none":
        if cafile is None:
            raise ConfigError(names["cafile"], f"{names['client_auth']}={client_auth} needs the CA certificates "
                                               "client certificates are checked against")
        _load_trust(context, cafile, names["cafile"])
    elif cafile is not None:
        _load_trust(context, cafile, names["cafile"])  # checked now rather than ignored silently
    context.verify_mode = CLIENT_AUTH_MODES[client_auth]
    return context


def client_ssl_context(cafile: str | None = None, certfile: str | None = None, keyfile: str | None = None,
                       password: str | None = None, check_hostname: bool = True, *,
                       certificate_chain: str | None = None, key: str | None = None,
                       enabled_protocols: Iterable[str] = ENABLED_PROTOCOLS_DEFAULT,
                       names: Mapping[str, str] = CLIENT_KEY_NAMES) -> ssl.SSLContext:
    """A dialling side's context: the server's certificate must chain to ``cafile`` (the
    system's CA certificates when None) and, with ``check_hostname``, name the host dialled;
    ``certfile`` (+ ``keyfile``), or PEM text ``certificate_chain`` + ``key``, is the
    certificate shown when the server asks for one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED
    context.check_hostname = bool(check_hostname)
    _tls_range(context, enabled_protocols, names["enabled_protocols"])
    if cafile is not None:
        _load_trust(context, cafile, names["cafile"])
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if certfile is not None or certificate_chain is not None or key is not None:
        _load_keystore(context, names, certfile=certfile, keyfile=keyfile, certificate_chain=certificate_chain,
                       key=key, password=password)
    elif keyfile is not None:
        raise ConfigError(names["certfile"], f"{names['keyfile']} is given without its certificate")
    return context


def handshake_failure(error: BaseException, address: str) -> SslAuthenticationError:
    """The dialling side's error for a failed handshake with ``address``: what went wrong in
    words (OpenSSL's verify message or reason), never a traceback."""
    if isinstance(error, ssl.SSLCertVerificationError):
        why = f"the server's certificate was refused: {error.verify_message}"
    elif isinstance(error, ssl.SSLError):
        why = (error.reason or str(error)).replace("_", " ").lower()
    else:
        why = str(error) or type(error).__name__
    return SslAuthenticationError(f"TLS handshake with {address} failed: {why}")
