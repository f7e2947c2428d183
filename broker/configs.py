"""A broker's own configs, as Kafka's DescribeConfigs describes a BROKER resource.

Only a broker knows its server.properties, so a broker answers DescribeConfigs for its BROKER
resource itself, as a Kafka broker does; the topics of the same request go on to the active
controller (``BrokerServer.describe_configs``). Changing broker configs is the controller's
(AlterConfigs, IncrementalAlterConfigs: raft_meta/controller/quorum_controller.py), which
commits them as ConfigRecords every broker follows.

The resource named by this broker's id lists every broker key with its effective value and
where it comes from, first found wins (Kafka's precedence and ConfigSource names):

    DYNAMIC_BROKER_CONFIG          this broker's own override (a ConfigRecord named by its id)
    DYNAMIC_DEFAULT_BROKER_CONFIG  the cluster-wide override (a ConfigRecord named "")
    STATIC_BROKER_CONFIG           server.properties
    DEFAULT_CONFIG                 the declared default

with the others behind it as synonyms when asked (``include_synonyms``). The resource named ""
(the cluster-wide default) lists only the cluster-wide overrides, as Kafka does. Another broker's
id is INVALID_REQUEST: the client asks that broker.

Nothing secret leaves: a password-type key, or one whose name says it holds a secret
(common/configs.py ``is_sensitive``), is described with ``is_sensitive`` true and a null value,
in its synonyms too. ``read_only`` is true for every key but those of BROKER_DYNAMIC_CONFIGS.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

from raftka.common import errors
from raftka.common.configs import (BROKER_DYNAMIC_CONFIGS, KAFKA_CONFIG_TYPES, REQUIRED, ConfigKey, ConfigSource,
                                   config_text, is_sensitive)
from raftka.common.server_config import JAAS_CONFIG, LISTENER_PREFIX, SERVER_CONFIGS, ServerConfig

RESOURCE_BROKER = 4  # Kafka's ConfigResource.Type.BROKER


def is_broker_resource(resource: dict) -> bool:
    return resource.get("resource_type") == RESOURCE_BROKER


def describe(config: ServerConfig, view: Any, resource: dict, *, include_synonyms: bool = False,
             include_documentation: bool = False) -> dict:
    """The DescribeConfigsResult of one BROKER resource, answered by the broker ``config`` is of,
    with the dynamic overrides of its metadata ``view``."""
    name = resource["resource_name"]
    result: dict[str, Any] = {"resource_type": RESOURCE_BROKER, "resource_name": name, "error_code": errors.NONE,
                              "error_message": None, "configs": []}
    if name == "":
        entries = _cluster_default_entries(view)
    elif name == str(config.node_id):
        entries = _broker_entries(config, view)
    else:
        result.update(error_code=errors.INVALID_REQUEST,
                      error_message=f"unexpected broker id, expected {config.node_id} or empty string, but received "
                                    f"{name!r:.40}: ask that broker for its configs")
        return result
    wanted = resource.get("configuration_keys")
    keys = None if wanted is None else set(wanted)
    result["configs"] = [_answer(key_name, key, sources, include_synonyms, include_documentation)
                         for key_name, key, sources in entries if keys is None or key_name in keys]
    return result


Sources = list[tuple[ConfigSource, Any]]  # (source, typed value), highest precedence first


def _dynamic_sources(name: str, own: Mapping[str, Any], cluster: Mapping[str, Any]) -> Sources:
    out: Sources = []
    if name in own:
        out.append((ConfigSource.DYNAMIC_BROKER_CONFIG, own[name]))
    if name in cluster:
        out.append((ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, cluster[name]))
    return out


def _broker_entries(config: ServerConfig, view: Any) -> Iterator[tuple[str, ConfigKey, Sources]]:
    """(name, declared key, sources) of every key of this broker, by name."""
    own = getattr(view, "broker_configs", {}).get(config.node_id, {})
    cluster = view.cluster_configs
    declared = {**SERVER_CONFIGS.keys, **{k: v for k, v in BROKER_DYNAMIC_CONFIGS.keys.items()
                                           if k not in SERVER_CONFIGS}}
    per_listener = {f"{LISTENER_PREFIX}{listener.lower()}.{key}": (SERVER_CONFIGS.keys.get(key, JAAS_CONFIG), value)
                    for listener, values in config.listener_values.items() for key, value in values.items()}
    for name in sorted({*declared, *per_listener}):
        if name in per_listener:  # listener.name.<listener>.<key>: only ever from server.properties
            key, value = per_listener[name]
            yield name, key, [(ConfigSource.STATIC_BROKER_CONFIG, value)]
            continue
        key = declared[name]
        sources = _dynamic_sources(name, own, cluster) if name in BROKER_DYNAMIC_CONFIGS else []
        if name in config.given:
            sources.append((ConfigSource.STATIC_BROKER_CONFIG, config.values[name]))
        if key.default is not REQUIRED and key.default is not None:  # None: no default to fall back to
            sources.append((ConfigSource.DEFAULT_CONFIG, key.default))
        yield name, key, sources


def _cluster_default_entries(view: Any) -> Iterator[tuple[str, ConfigKey, Sources]]:
    """The cluster-wide overrides only (Kafka describes the "" resource so)."""
    for name, value in sorted(view.cluster_configs.items()):
        key = BROKER_DYNAMIC_CONFIGS.keys.get(name) or SERVER_CONFIGS.keys.get(name)
        if key is None:  # committed before it was declared, or by a newer controller
            key = ConfigKey(name, "string", None, "")
        yield name, key, [(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, value)]


def _answer(name: str, key: ConfigKey, sources: Sources, include_synonyms: bool,
            include_documentation: bool) -> dict:
    secret = is_sensitive(name, key)

    def text(value: Any) -> str | None:
        return None if secret else config_text(value)
    source, value = sources[0] if sources else (ConfigSource.DEFAULT_CONFIG, None)
    return {"name": name, "value": text(value), "read_only": name not in BROKER_DYNAMIC_CONFIGS,
            "config_source": int(source), "is_sensitive": secret,
            "synonyms": [{"name": name, "value": text(v), "source": int(s)} for s, v in sources]
            if include_synonyms else [],
            "config_type": KAFKA_CONFIG_TYPES.get(key.type, 0),
            "documentation": key.doc if include_documentation else None}
