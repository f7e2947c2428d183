"""Declared configuration: each key has a name, type, default, validator and doc (Kafka's ConfigDef).

Values arrive as strings (properties files, the CLI, AlterConfigs) or as Python values (API
calls); ``ConfigDef.parse`` turns them into typed values or raises ``ConfigError`` naming the key
and what is wrong with it. ``TOPIC_CONFIGS`` is shared by the controller (validates CreateTopics
and AlterConfigs), the storage layer (segment, retention and flush policy) and the admin client.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Callable, Iterable, Mapping

from raftka.common.errors import ConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

Validator = Callable[[Any], "str | None"]  # returns a problem description, or None when valid


def at_least(low: int | float) -> Validator:
    return lambda v: None if v >= low else f"must be >= {low}, got {v}"


def between(low: int | float, high: int | float) -> Validator:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}, got {v}"


def one_of(*choices: str) -> Validator:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}, got {v!r}"


def items_of(*choices: str) -> Validator:
    """A non-empty list whose items are all among ``choices``."""
    def check(items: list[str]) -> str | None:
        if not items:
            return f"must list at least one of {', '.join(choices)}"
        bad = next((i for i in items if i not in choices), None)
        return None if bad is None else f"items must be among {', '.join(choices)}, got {bad!r}"
    return check


def throttled_replicas(items: list[str]) -> str | None:
    """A ``*.replication.throttled.replicas`` list: the literal "*" alone, or partitionId:brokerId
    items (Kafka's ThrottledReplicaListValidator, with its message)."""
    if [i.strip() for i in items] == ["*"]:
        return None
    bad = next((i for i in items if not _is_replica_item(i.strip())), None)
    return None if bad is None else ("must be the literal '*' or a list of replicas in the following format: "
                                     f"[partitionId]:[brokerId],[partitionId]:[brokerId],..., got {bad!r}")


def _is_replica_item(item: str) -> bool:
    partition, sep, broker = item.partition(":")
    return bool(sep) and partition.isascii() and partition.isdigit() and broker.isascii() and broker.isdigit()


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str  # "int", "long", "double", "bool", "string", "list", "password"
    default: Any
    doc: str
    validator: Validator | None = None

    def parse(self, raw: Any) -> Any:
        """Convert ``raw`` (a string or a Python value) to this key's type and validate it."""
        try:
            value = _CONVERTERS[self.type](raw)
        except (TypeError, ValueError):
            raise ConfigError(self.name, f"expected {_TYPE_WORDS[self.type]}, got {raw!r}") from None
        if self.type == "int" and not -2**31 <= value <= INT_MAX:
            raise ConfigError(self.name, f"{value} does not fit in a 32-bit int")
        if self.validator is not None and value is not None:
            problem = self.validator(value)
            if problem:
                raise ConfigError(self.name, problem)
        return value


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ValueError(raw)


def _to_int(raw: Any) -> int:
    if isinstance(raw, bool):
        raise TypeError(raw)
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        return int(raw.strip())
    raise TypeError(raw)


def _to_float(raw: Any) -> float:
    if isinstance(raw, bool):
        raise TypeError(raw)
    if isinstance(raw, (int, float)):
        return float(raw)
    if isinstance(raw, str):
        return float(raw.strip())
    raise TypeError(raw)


def _to_list(raw: Any) -> list[str]:
    if isinstance(raw, str):
        return [item.strip() for item in raw.split(",") if item.strip()]
    if isinstance(raw, (list, tuple)):
        return [str(item) for item in raw]
    raise TypeError(raw)


def _to_str(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    raise TypeError(raw)


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "int": _to_int, "long": _to_int, "double": _to_float, "bool": _to_bool,
    "string": _to_str, "password": _to_str, "list": _to_list,
}
_TYPE_WORDS = {
    "int": "an integer", "long": "an integer", "double": "a number", "bool": "true or false",
    "string": "a string", "password": "a string", "list": "a comma-separated list",
}


@dataclass
class ConfigDef:
    """A set of declared keys. ``parse`` fills defaults and types; unknown keys are refused."""

    keys: dict[str, ConfigKey] = field(default_factory=dict)

    def define(self, name: str, type: str, default: Any, doc: str,
               validator: Validator | None = None) -> "ConfigDef":
        assert type in _CONVERTERS, type
        assert name not in self.keys, f"{name} defined twice"
        self.keys[name] = ConfigKey(name, type, default, doc, validator)
        return self

    def __contains__(self, name: str) -> bool:
        return name in self.keys

    def names(self) -> Iterable[str]:
        return self.keys.keys()

    def parse(self, values: Mapping[str, Any], *, allow_unknown: bool = False,
              fill_defaults: bool = True) -> dict[str, Any]:
        """Typed values for ``values``; defaults for the keys not given (unless fill_defaults=False)."""
        out: dict[str, Any] = {}
        for name, raw in values.items():
            key = self.keys.get(name)
            if key is None:
                if allow_unknown:
                    out[name] = raw
                    continue
                raise ConfigError(name, "unknown configuration key")
            out[name] = key.parse(raw)
        if fill_defaults:
            for name, key in self.keys.items():
                if name not in out:
                    if key.default is REQUIRED:
                        raise ConfigError(name, "is required and was not set")
                    out[name] = key.default
        return out


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

# Topic-level configs, with Kafka's names and defaults. The broker-level defaults for some of
# them (log.retention.ms, log.segment.bytes, ...) are mapped onto these by the server config.
TOPIC_CONFIGS = (
    ConfigDef()
    .define("cleanup.policy", "list", ("delete",),
            "delete: closed segments go by retention.ms/retention.bytes; compact: the log cleaner keeps "
            "the latest record of each key (storage/cleaner.py); compact,delete: both.",
            items_of("delete", "compact"))
    .define("segment.bytes", "int", 1073741824, "Roll a new segment when the active one reaches this size.",
            at_least(14))
    .define("segment.ms", "long", 604800000, "Roll a new segment when the active one is this old.",
            at_least(1))
    .define("segment.index.bytes", "int", 10485760, "Maximum size of a segment's offset and time index.",
            at_least(8))
    .define("index.interval.bytes", "int", 4096, "Bytes of log between two entries of the sparse indexes.",
            at_least(0))
    .define("retention.ms", "long", 604800000, "Delete closed segments older than this; -1 keeps forever.",
            at_least(-1))
    .define("retention.bytes", "long", -1, "Delete closed segments while the log is larger than this; -1 is no limit.",
            at_least(-1))
    .define("max.message.bytes", "int", 1048588, "Largest record batch the log accepts.", at_least(0))
    .define("min.insync.replicas", "int", 1, "Smallest ISR with which acks=all writes are accepted.",
            at_least(1))
    .define("flush.messages", "long", LONG_MAX, "fsync after this many records have been appended.",
            at_least(1))
    .define("flush.ms", "long", LONG_MAX, "fsync when the oldest unflushed append is this old.", at_least(0))
    .define("unclean.leader.election.enable", "bool", False,
            "Elect a leader from outside the ISR when no ISR member is alive (may lose data).")
    .define("min.cleanable.dirty.ratio", "double", 0.5,
            "Compacted topics: clean a log once its dirty bytes are at least this share of its cleanable bytes.",
            between(0, 1))
    .define("min.compaction.lag.ms", "long", 0,
            "Compacted topics: a record stays uncompacted for at least this long after it was written.",
            at_least(0))
    .define("max.compaction.lag.ms", "long", LONG_MAX,
            "Compacted topics: a log whose oldest dirty record is this old is cleaned whatever its dirty ratio.",
            at_least(1))
    .define("delete.retention.ms", "long", 86400000,
            "Compacted topics: how long a tombstone (a null value) stays after the segment holding it was "
            "cleaned; a consumer reading from the start within this time sees every delete.",
            at_least(0))
    .define("message.timestamp.type", "string", "CreateTime",
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.",
            one_of("CreateTime", "LogAppendTime"))
    .define("leader.replication.throttled.replicas", "list", (),
            "Replicas whose leader sends to out-of-sync followers at most leader.replication.throttled.rate "
            "(broker/quota.py): partitionId:brokerId,... or * for every replica; raftka reassign --throttle "
            "sets it.", throttled_replicas)
    .define("follower.replication.throttled.replicas", "list", (),
            "Replicas that fetch while out of sync at most follower.replication.throttled.rate "
            "(broker/quota.py): partitionId:brokerId,... or * for every replica; raftka reassign --throttle "
            "sets it.", throttled_replicas)
)


class ConfigSource(IntEnum):
    """Where a described value comes from (Kafka's DescribeConfigsResponse.ConfigSource), in
    the order a broker looks: a per-broker dynamic override, then the cluster-wide one, then
    server.properties, then the default."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


# Kafka's ConfigEntry.ConfigType number of each declared type (DescribeConfigs v3+).
KAFKA_CONFIG_TYPES: Mapping[str, int] = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7,
                                         "password": 9}


def config_text(value: Any) -> str | None:
    """A typed value as Kafka writes it: a string ("true", "604800000", "a,b"), None as None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(config_text(v) or "" for v in value)
    return str(value)


# Broker configs that change at run time (Kafka's dynamic broker configs), set for one broker
# (resource name = its id) or cluster-wide (resource name ""): AlterConfigs and
# IncrementalAlterConfigs on a BROKER resource accept only these; every other broker key is read
# once from server.properties. The defaults are Kafka's; a key also in SERVER_CONFIGS
# (min.insync.replicas) falls back to server.properties first.
QUOTA_BYTES_PER_SECOND_DEFAULT = LONG_MAX  # Kafka's: no throttle
BROKER_DYNAMIC_CONFIGS = (
    ConfigDef()
    .define("min.insync.replicas", "int", 1,
            "min.insync.replicas of the topics that set none (the partition leader's broker decides).",
            at_least(1))
    .define("leader.replication.throttled.rate", "long", QUOTA_BYTES_PER_SECOND_DEFAULT,
            "Bytes per second a leader sends to out-of-sync followers of the replicas its topics list in "
            "leader.replication.throttled.replicas (broker/quota.py).", at_least(0))
    .define("follower.replication.throttled.rate", "long", QUOTA_BYTES_PER_SECOND_DEFAULT,
            "Bytes per second a follower fetches for its out-of-sync replicas that their topics list in "
            "follower.replication.throttled.replicas (broker/quota.py).", at_least(0))
)

# Name endings of keys whose values are secrets, whatever their declared type: never described.
_SENSITIVE_SUFFIXES = (".password", "sasl.jaas.config", "ssl.keystore.key", ".secret")


def is_sensitive(name: str, key: ConfigKey | None = None) -> bool:
    """Whether a config's value must never leave the process (DescribeConfigs answers null)."""
    return (key is not None and key.type == "password") or name.endswith(_SENSITIVE_SUFFIXES)
