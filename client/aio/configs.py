"""The config keys every client takes alike: kafka-python's keys that mean nothing here (accepted
and ignored), the ones refused with a reason, and the check of a constructor's keywords.

One definition for the Producer, Consumer and AdminClient (blocking and asyncio): a program
written for kafka-python passes the same keywords to all three, and each must accept them the
same way. A key one client uses (``max_in_flight_requests_per_connection`` in the producer) is
in that client's DEFAULTS, which win over IGNORED. An unknown key fails with ConfigError naming
it and the closest known key, if there is one: a misspelt key silently ignored is a setting
silently lost.
"""
from __future__ import annotations

import difflib
from typing import Any, Final, Mapping

from raftka.client.aio.metrics import METRICS_DEFAULTS, metric_config
from raftka.common.errors import ConfigError

# Keys with a meaning in every client, with kafka-python's names and defaults.
CLIENT_DEFAULTS: Final[Mapping[str, Any]] = {
    # How long the constructor (the asyncio start()) waits for a first Metadata answer from a
    # bootstrap server before NoBrokersAvailable (kafka-python 3's key). None: request_timeout_ms,
    # so kafka-python's 30000 by default, and a caller that set request_timeout_ms as its whole
    # budget (the CLI's --timeout-ms) is not kept waiting longer by the bootstrap.
    "bootstrap_timeout_ms": None,
    **METRICS_DEFAULTS,
}
_VERSIONS = "API versions are agreed with each broker (ApiVersions) on every connection"
_SOCKET = "sockets keep the operating system's defaults"

# kafka-python keys without a meaning in a Raftka client -> why.
IGNORED: Final[Mapping[str, str]] = {
    "api_version": _VERSIONS,
    "api_version_auto_timeout_ms": _VERSIONS,
    "connections_max_idle_ms": "a connection stays open while the client lives; one the broker closed "
                               "is opened again on next use",
    "reconnect_backoff_ms": "an address that failed is tried again after retry_backoff_ms, last in line",
    "reconnect_backoff_max_ms": "an address that failed is tried again after retry_backoff_ms, last in line",
    "receive_buffer_bytes": _SOCKET,
    "send_buffer_bytes": _SOCKET,
    "socket_options": _SOCKET,
    "sock_chunk_bytes": "asyncio reads whole frames",
    "sock_chunk_buffer_count": "asyncio reads whole frames",
    "selector": "the I/O runs on an asyncio event loop",
    "kafka_client": "the network layer is Raftka's own (client/aio/cluster.py)",
    "metric_reporters": "metrics() returns the figures",
    "metrics_enabled": "the figures metrics() returns are always kept",
    "metric_group_prefix": "metrics() uses Kafka's group names",
    "max_in_flight_requests_per_connection": "only the producer limits its requests in flight; "
                                             "the consumer keeps one Fetch in flight per broker",
    "isolation_level": "Raftka has no transactions: every record is committed, so read_committed "
                       "and read_uncommitted read the same",
    "enable_incremental_fetch_sessions": "the consumer always uses fetch sessions (KIP-227)",
    "allow_auto_create_topics": "topics are created with the admin client or raftka topics",
    "legacy_iterator": "the consumer has one iterator",
    "sasl_kerberos_service_name": "only GSSAPI uses it, and sasl_mechanism is PLAIN or SCRAM",
    "sasl_kerberos_domain_name": "only GSSAPI uses it, and sasl_mechanism is PLAIN or SCRAM",
    "sasl_kerberos_name": "only GSSAPI uses it, and sasl_mechanism is PLAIN or SCRAM",
    "client_dns_lookup": "every address a name resolves to is tried (use_all_dns_ips)",
    "receive_message_max_bytes": "answers are bounded by the transport's frame limit",
    "transaction_timeout_ms": "only transactional producers use it (transactional_id is refused)",
    "client_rack": "the consumer fetches from partition leaders (no follower fetching, KIP-392)",
}

# kafka-python keys a Raftka client refuses (unless None, their default) -> why.
REFUSED: Final[Mapping[str, str]] = {
    "transactional_id": "transactions are not supported (idempotence is: enable_idempotence)",
    "sasl_oauth_token_provider": "SASL/OAUTHBEARER is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 are)",
    "ssl_crlfile": "certificate revocation lists are not checked",
    "ssl_ciphers": "the cipher suites are Python's defaults",
    "proxy_url": "connections go straight to the brokers",
    "socks5_proxy": "connections go straight to the brokers",
}


def check_config(kind: str, configs: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` updated with ``configs``, the keys in IGNORED (and not in ``defaults``)
    dropped. ConfigError for a REFUSED key (unless None) or an unknown one, with the closest
    known name. ``kind`` ("producer", "consumer", "admin") goes in the message."""
    for key in sorted(configs):
        if key in defaults or key in IGNORED:
            continue
        if key in REFUSED:
            if configs[key] is None:
                continue
            raise ConfigError(key, f"not supported by the Raftka {kind}: {REFUSED[key]}")
        raise ConfigError(key, f"unknown {kind} config{_suggestion(key, defaults)}")
    config = {**defaults, **{k: v for k, v in configs.items() if k in defaults}}
    if "bootstrap_timeout_ms" in config:
        value = config["bootstrap_timeout_ms"]
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError("bootstrap_timeout_ms", f"must be a positive int (milliseconds) or None, "
                                                      f"got {value!r}")
    metric_config(config)  # checks the metrics_* keys
    return config


def _suggestion(key: str, defaults: Mapping[str, Any]) -> str:
    known = [k for k in (*defaults, *IGNORED) if not k.startswith("_")]
    python_name = key.replace(".", "_").replace("-", "_").lower()  # a Java property name given as is
    if python_name in defaults:
        return f" (did you mean {python_name!r}?)"
    close = difflib.get_close_matches(python_name, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
