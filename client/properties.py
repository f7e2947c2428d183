"""Kafka's client properties as Raftka client keywords.

A Kafka user already has a ``client.properties`` file for the Java tools (``--command-config``)
and writes Spark's ``kafka.``-prefixed options with the same names: ``security.protocol``,
``ssl.truststore.location``, ``sasl.mechanism``, ``sasl.jaas.config``, ``client.id``,
``request.timeout.ms``... :func:`client_configs` turns such a mapping into the keyword arguments
of :class:`~raftka.client.Producer`, :class:`~raftka.client.Consumer` and
:class:`~raftka.client.AdminClient` (kafka-python's names), which then check the values as they
check any config.

Most names map by replacing dots with underscores. The ones that differ:

- ``ssl.truststore.location`` (PEM; ``ssl.truststore.type`` must be PEM) -> ``ssl_cafile``
- ``ssl.keystore.location`` (a PEM file holding the certificate chain and the private key;
  ``ssl.keystore.type`` must be PEM) -> ``ssl_certfile`` and ``ssl_keyfile``
- ``ssl.key.password`` -> ``ssl_password``
- ``ssl.endpoint.identification.algorithm``: ``https`` -> ``ssl_check_hostname=True``, empty ->
  False
- ``sasl.jaas.config`` (``...PlainLoginModule required username="u" password="p";`` or the
  ScramLoginModule's) -> ``sasl_plain_username`` and ``sasl_plain_password``

A value arrives as text; it becomes an int or a bool where the key's default is one. Java-only
keys a Raftka client has no use for (serializer classes, ``ssl.truststore.password`` of a PEM
truststore) are refused with the reason, as is any unknown key: a silently ignored security
setting is how a client ends up talking plaintext.
"""
from __future__ import annotations

from typing import Any, Mapping

from raftka.client.aio.configs import IGNORED as CLIENT_IGNORED
from raftka.common.errors import ConfigError
from raftka.common.sasl import parse_jaas_config  # shared with the broker's own login (server config)

# Kafka property -> client keyword, where the name does not simply follow (dots -> underscores).
RENAMED = {
    "ssl.truststore.location": "ssl_cafile",
    "ssl.key.password": "ssl_password",
    "ssl.keystore.location": None,  # both ssl_certfile and ssl_keyfile (see the module docstring)
    "ssl.endpoint.identification.algorithm": None,  # ssl_check_hostname
    "sasl.jaas.config": None,  # sasl_plain_username, sasl_plain_password
    "ssl.truststore.type": None,  # checked: PEM only
    "ssl.keystore.type": None,
}
# Accepted and ignored, as Kafka's Java clients need them and Raftka's do not.
IGNORED = {
    "key.serializer": "a Raftka client takes key_serializer= as a callable",
    "value.serializer": "a Raftka client takes value_serializer= as a callable",
    "key.deserializer": "a Raftka client takes key_deserializer= as a callable",
    "value.deserializer": "a Raftka client takes value_deserializer= as a callable",
}
REFUSED = {
    "ssl.truststore.password": "a PEM truststore has no password (JKS and PKCS12 stores are not read)",
    "ssl.keystore.password": "use ssl.key.password for an encrypted PEM key (JKS and PKCS12 stores are not read)",
    "sasl.login.callback.handler.class": "Java classes cannot be loaded",
    "sasl.client.callback.handler.class": "Java classes cannot be loaded",
}


def client_configs(properties: Mapping[str, str], known: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka client properties -> keyword arguments of a client whose defaults are ``known``
    (e.g. the Producer's DEFAULTS): ConfigError names a key the client cannot take."""
    out: dict[str, Any] = {}
    for name, raw in properties.items():
        value = raw.strip() if isinstance(raw, str) else raw
        if name in IGNORED:
            continue
        if name in REFUSED:
            raise ConfigError(name, f"not supported: {REFUSED[name]}")
        if name in ("ssl.truststore.type", "ssl.keystore.type"):
            if str(value).upper() != "PEM":
                raise ConfigError(name, f"only PEM files are read, got {value!r}")
            continue
        if name == "ssl.keystore.location":
            out["ssl_certfile"] = out["ssl_keyfile"] = value
        elif name == "ssl.endpoint.identification.algorithm":
            if str(value).lower() not in ("", "https"):
                raise ConfigError(name, f"must be https or empty, got {value!r}")
            out["ssl_check_hostname"] = str(value).lower() == "https"
        elif name == "sasl.jaas.config":
            options = parse_jaas_config(str(value))
            missing = [k for k in ("username", "password") if k not in options]
            if missing:
                raise ConfigError(name, f"has no {' or '.join(missing)} option")
            out["sasl_plain_username"], out["sasl_plain_password"] = options["username"], options["password"]
        else:
            keyword = RENAMED.get(name) or name.replace(".", "_")
            out[keyword] = _typed(name, value, known.get(keyword))
    unknown = sorted(set(out) - set(known) - set(CLIENT_IGNORED))  # api.version & co: every client ignores them
    if unknown:
        back = {v: k for k, v in RENAMED.items() if v}
        first = unknown[0]
        raise ConfigError(back.get(first, first.replace("_", ".")), "not a config this client takes")
    return out


def _typed(name: str, value: Any, default: Any) -> Any:
    """Text as the type of the key's default (bool, int, float); other values as they are."""
    if not isinstance(value, str):
        return value
    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise ConfigError(name, f"expected true or false, got {value!r}")
        return value.lower() == "true"
    if isinstance(default, int):
        try:
            return int(value)
        except ValueError:
            raise ConfigError(name, f"expected an integer, got {value!r}") from None
    if isinstance(default, float):
        try:
            return float(value)
        except ValueError:
            raise ConfigError(name, f"expected a number, got {value!r}") from None
    return value
