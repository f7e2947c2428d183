"""Plain data the client hands to and gets from users: the names kafka-python users know."""
from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple, Sequence


class TopicPartition(NamedTuple):
    """A topic and a partition index."""

    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed. ``offset`` is -1 with ``acks=0`` (nobody said)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    log_start_offset: int = -1
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    serialized_header_size: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        """``TopicPartition(topic, partition)``."""
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(NamedTuple):
    """One record as the consumer returns it. ``timestamp_type`` is 0 (create time) or 1
    (log append time)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes]]
    checksum: int | None = None
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    serialized_header_size: int = -1
    leader_epoch: int = -1


class NewTopic(NamedTuple):
    """A topic to create. -1 means the cluster default (``num.partitions``,
    ``default.replication.factor``)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    topic_configs: dict[str, Any] | None = None


class NewPartitions(NamedTuple):
    """The partitions a topic should have in all, for ``AdminClient.create_partitions``.
    ``new_assignments``: one replica list (broker ids) per added partition; None lets the
    controller place them."""

    total_count: int
    new_assignments: Sequence[Sequence[int]] | None = None


class OffsetAndTimestamp(NamedTuple):
    """The first offset whose timestamp is >= a searched timestamp, and that record's timestamp."""

    offset: int
    timestamp: int


class BrokerMetadata(NamedTuple):
    """A broker as Metadata describes it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionMetadata(NamedTuple):
    """One partition as the cluster's metadata describes it (-1 leader: offline)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: Sequence[int]
    isr: Sequence[int]
    offline_replicas: Sequence[int] = ()


class AlterConfigOpType(IntEnum):
    """What one change of incremental_alter_configs does (Kafka's AlterConfigOp.OpType)."""

    SET = 0  # the key's override becomes the value
    DELETE = 1  # the override goes: the key is back at its default
    APPEND = 2  # list configs: the value's items join the list (those already there once)
    SUBTRACT = 3  # list configs: the value's items leave the list


class AlterConfigOp(NamedTuple):
    """One change of incremental_alter_configs (Java's AlterConfigOp): ``value`` is a string or a
    Python value (lists as lists or "a,b"); None with DELETE."""

    name: str
    value: Any = None
    op_type: AlterConfigOpType = AlterConfigOpType.SET


class ConfigResourceType(IntEnum):
    """The kind of a config resource (kafka-python's ConfigResourceType, Kafka's numbers)."""

    BROKER = 4
    TOPIC = 2


def config_resource_type(value: "ConfigResourceType | str | int") -> ConfigResourceType:
    """A ConfigResourceType from itself, its name in any case ('topic', 'BROKER') or its number;
    ValueError naming the choices."""
    if isinstance(value, str):
        found = ConfigResourceType.__members__.get(value.strip().upper())
        if found is not None:
            return found
    elif isinstance(value, int) and not isinstance(value, bool) and value in ConfigResourceType._value2member_map_:
        return ConfigResourceType(value)
    raise ValueError(f"resource_type must be 'topic' or 'broker' (or ConfigResourceType), got {value!r}")


class _ConfigResourceFields(NamedTuple):
    resource_type: ConfigResourceType
    name: str
    configs: dict[str, Any] | None = None
    incremental_configs: Sequence[AlterConfigOp] = ()


class ConfigResource(_ConfigResourceFields):
    """A resource for describe_configs and the alter calls: ``resource_type`` is a
    ConfigResourceType or 'topic' / 'broker' (any case; kept as the enum), ``name`` a topic, a
    broker id ("1"), or "" for the cluster-wide broker default. ``configs`` is the whole set of
    overrides for alter_configs ({key: value}; a key left out or None goes back to its default);
    ``incremental_configs`` the changes for incremental_alter_configs (keys left out keep their
    value)."""

    __slots__ = ()

    def __new__(cls, resource_type: "ConfigResourceType | str", name: "str | int",
                configs: dict[str, Any] | None = None,
                incremental_configs: Sequence[AlterConfigOp] = ()) -> "ConfigResource":
        return super().__new__(cls, config_resource_type(resource_type), str(name), configs, incremental_configs)


class ConfigEntry(NamedTuple):
    """One config of a described resource. ``source`` is Kafka's ConfigSource name
    (DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG, DEFAULT_CONFIG); a sensitive entry's ``value`` is None. ``synonyms``:
    (name, value, source) of every value the key falls back to, highest first (asked for with
    ``include_synonyms``)."""

    name: str
    value: Any
    is_default: bool
    source: str = "UNKNOWN"
    is_sensitive: bool = False
    read_only: bool = False
    synonyms: tuple[tuple[str, Any, str], ...] = ()


class OffsetAndMetadata(NamedTuple):
    """A committed offset (the next record to read), with its free-form metadata and the leader
    epoch of the last record read (-1 when unknown): kafka-python's OffsetAndMetadata."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1
