"""The client's security keys (kafka-python's names and defaults), shared by Producer, Consumer
and AdminClient.

``security_protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL. With SASL_* every
connection authenticates before its first request (common/sasl.py) with ``sasl_mechanism``
(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), ``sasl_plain_username`` and ``sasl_plain_password``
(kafka-python's names, for SCRAM too; the password never appears in a message or repr); a
refusal raises SaslAuthenticationFailedError, which is not retried. With SSL or SASL_SSL every
connection, bootstrap included, is TLS: the broker's certificate must chain to ``ssl_cafile``
(the system's CA certificates when None) and, with
``ssl_check_hostname`` (default True), name the host dialled; ``ssl_certfile`` (PEM; with
``ssl_keyfile`` when the key is in its own file, ``ssl_password`` when it is encrypted) is the
client certificate a listener with ``ssl.client.auth`` asks for. A ready ``ssl_context`` wins
over the ``ssl_*`` files. A handshake that fails raises SslAuthenticationError
(a NetworkExceptionError) saying why.
"""
from __future__ import annotations

import functools
import ssl
from typing import Any, Final

from raftka.client.aio.protocol import KAFKA_VERSIONS
from raftka.common import security
from raftka.common.errors import ConfigError
from raftka.common.sasl import SaslClientSettings, client_settings

SECURITY_DEFAULTS: Final[dict[str, Any]] = {
    "security_protocol": "PLAINTEXT",
    "ssl_context": None,
    "ssl_check_hostname": True,
    "ssl_cafile": None,
    "ssl_certfile": None,
    "ssl_keyfile": None,
    "ssl_password": None,
    "sasl_mechanism": None,
    "sasl_plain_username": None,
    "sasl_plain_password": None,
}
_SSL_FILES: Final = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
_SASL_KEYS: Final = ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password")


async def tls_connection_factory(context: ssl.SSLContext | None, host: str, port: int, client_id: str, *,
                                 sasl: SaslClientSettings | None = None) -> Any:
    """A pipelined connection over TLS (``context``) and/or authenticated with SASL (the shared
    transport, common/transport.py)."""
    from raftka.common.transport import Connection  # the shared transport
    return await Connection.open(host, port, client_id=client_id, kafka_versions=KAFKA_VERSIONS, ssl=context,
                                 sasl=sasl)


def apply_security(config: dict[str, Any]) -> None:
    """Check the security keys of a client's ``config`` (defaults already filled in) and, for
    SSL and SASL_*, make its ``connection_factory`` one that dials TLS and/or authenticates
    (unless the caller gave their own).
    ConfigError names the key; the password never appears in a message."""
    context, sasl = dial_settings(config)
    if (context is not None or sasl is not None) and config.get("connection_factory") is None:
        config["connection_factory"] = functools.partial(tls_connection_factory, context, sasl=sasl)


def dial_settings(config: dict[str, Any]) -> tuple[ssl.SSLContext | None, SaslClientSettings | None]:
    """(TLS context, SASL login) a client with these security keys (kafka-python's, defaults
    filled in) dials with: None, None for PLAINTEXT. ``security_protocol`` is upper-cased in
    ``config``. Also what tools dialling the controllers use (raftka/cluster/controller_client.py).
    ConfigError names the key; the password never appears in a message."""
    protocol = config["security_protocol"]
    if not isinstance(protocol, str) or protocol.upper() not in security.SECURITY_PROTOCOLS:
        raise ConfigError("security_protocol", f"must be one of {', '.join(security.SECURITY_PROTOCOLS)}, "
                                               f"got {protocol!r}")
    protocol = config["security_protocol"] = protocol.upper()
    for key in _SSL_FILES:
        if config[key] is not None and not isinstance(config[key], str):
            raise ConfigError(key, f"must be a file path (str) or None, got {type(config[key]).__name__}")
    if config["ssl_password"] is not None and not isinstance(config["ssl_password"], str):
        raise ConfigError("ssl_password", "must be a str or None")
    if not isinstance(config["ssl_check_hostname"], bool):
        raise ConfigError("ssl_check_hostname", f"must be True or False, got {config['ssl_check_hostname']!r}")
    context = config["ssl_context"]
    if context is not None and not isinstance(context, ssl.SSLContext):
        raise ConfigError("ssl_context", f"must be an ssl.SSLContext or None, got {type(context).__name__}")
    sasl = client_settings(config)  # None unless SASL_*; ConfigError for a missing key
    if sasl is None:
        given = [key for key in _SASL_KEYS if config[key] is not None]
        if given:  # a silently ignored SASL setting is how a client ends up unauthenticated
            raise ConfigError("security_protocol", f"is {protocol} but {', '.join(given)} is set; "
                                                   "use security_protocol='SASL_PLAINTEXT' or 'SASL_SSL'")
    if not security.uses_tls(protocol):
        given = [key for key in (*_SSL_FILES, "ssl_context") if config[key] is not None]
        if given:  # a silently ignored TLS setting is how a client ends up talking plaintext
            raise ConfigError("security_protocol", f"is {protocol} but {', '.join(given)} is set; "
                                                   "use security_protocol='SSL'")
        return None, sasl
    if context is None:
        context = security.client_ssl_context(config["ssl_cafile"], config["ssl_certfile"], config["ssl_keyfile"],
                                              config["ssl_password"], config["ssl_check_hostname"])
    return context, sasl
