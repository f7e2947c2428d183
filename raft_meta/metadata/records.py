"""Typed metadata records: what the active controller commits and every replica replays.

One metadata-log entry (the payload after the envelope's ``b"M"``, see controller/state.py) is a
msgpack array of records, replayed **atomically**: all of them or none (a broker fence and the
leader moves it causes land together). Each record is a msgpack map with a ``"type"`` tag and
the fields of its dataclass below. ``encode_entry([...])`` / ``decode_entry(bytes)``.

Every record carries what makes it idempotent (pysyncobj fails in-flight commands on a leader
change and callers retry, so the same record may be committed twice):

    register_broker   {broker_id, incarnation_id, endpoints {listener: "host:port"}, rack}
                      broker epoch = the record's offset; the same incarnation again is a no-op
                      that answers the existing epoch. A (re-)registered broker starts fenced.
    fence_broker      {broker_id, broker_epoch}    refused for another epoch; no-op when fenced
    unfence_broker    {broker_id, broker_epoch}    refused for another epoch; no-op when unfenced
    topic             {name, topic_id, partitions [[replica ids]], configs}
                      creates the topic; leader = first replica, ISR = replicas, epochs 0.
                      The same topic id again is a no-op; another id for a taken name is refused.
    remove_topic      {name, topic_id}             no-op when that topic id is already gone
    partition_change  {topic, topic_id, partition, expected_partition_epoch, leader, isr}
                      leader / isr None = unchanged, leader -1 = offline. Refused unless the
                      partition epoch is the expected one (so a retry is refused, not re-applied).
                      A new leader bumps the leader epoch; every change bumps the partition epoch.
    config            {resource_type "topic" | "cluster", resource_name, configs {k: v or None}}
                      sets (None: deletes) overrides; re-applying gives the same configs.
    producer_ids      {broker_id, broker_epoch, first_id, size}
                      hands out [first_id, first_id + size); refused unless first_id is the next
                      unassigned id (so a retried block is refused, never handed out twice).

No record carries a time: nothing in the image depends on one. Decisions that need a clock
(fencing a silent broker) are taken by the active controller and committed as records.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, Sequence

import msgpack

from raftka.common import errors

ENTRY_BYTES_MAX = 1_048_576  # the Raft layer's RECORD_BYTES_MAX
RECORDS_PER_ENTRY_MAX = 20_000
PRODUCER_ID_BLOCK_SIZE_MAX = 1_000_000
RESOURCE_TOPIC = "topic"
RESOURCE_CLUSTER = "cluster"


class MetadataRecordError(Exception):
    """A record that cannot be decoded or replayed; carries a wire error code and a message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def as_result(self) -> dict:
        return {"error": self.code, "message": self.message}


def _bad(message: str) -> MetadataRecordError:
    return MetadataRecordError(errors.INVALID_REQUEST, message)


# -- field checkers: bad shapes become MetadataRecordError, never TypeError/KeyError -----------

def _int(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(f"field {name!r} must be an integer, got {type(value).__name__}")
    return value


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"field {name!r} must be a string, got {type(value).__name__}")
    return value


def _opt_str(value: Any, name: str) -> str | None:
    return None if value is None else _str(value, name)


def _opt_int(value: Any, name: str) -> int | None:
    return None if value is None else _int(value, name)


def _ids(value: Any, name: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise _bad(f"field {name!r} must be a list of broker ids")
    return tuple(_int(v, name) for v in value)


def _opt_ids(value: Any, name: str) -> tuple[int, ...] | None:
    return None if value is None else _ids(value, name)


def _str_map(value: Any, name: str) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise _bad(f"field {name!r} must be a map")
    return MappingProxyType({_str(k, name): _str(v, name) for k, v in value.items()})


def _config_map(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(f"field {name!r} must be a map")
    out = {}
    for key, item in value.items():
        if item is not None and not isinstance(item, (str, int, float, bool, list)):
            raise _bad(f"config {key!r} has a value of type {type(item).__name__}")
        out[_str(key, name)] = tuple(item) if isinstance(item, list) else item
    return MappingProxyType(out)


def _assignment(value: Any, name: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        raise _bad(f"field {name!r} must be a list of replica lists")
    return tuple(_ids(v, name) for v in value)


def _plain(value: Any) -> Any:
    """Record field -> msgpack-friendly value."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


class MetadataRecord:
    """Base of the typed records: ``TYPE`` tag, ``to_map()``, ``from_map()``."""

    TYPE: ClassVar[str] = ""
    _CHECKS: ClassVar[dict[str, Any]] = {}

    def to_map(self) -> dict:
        out = {"type": self.TYPE}
        for f in fields(self):  # type: ignore[arg-type]
            out[f.name] = _plain(getattr(self, f.name))
        return out

    @classmethod
    def from_map(cls, raw: Mapping) -> "MetadataRecord":
        kwargs = {}
        for name, check in cls._CHECKS.items():
            if name not in raw:
                raise _bad(f"{cls.TYPE} record is missing field {name!r}")
            kwargs[name] = check(raw[name], name)
        return cls(**kwargs)


@dataclass(frozen=True)
class RegisterBrokerRecord(MetadataRecord):
    """A broker (re-)registers; its broker epoch is this record's offset."""

    TYPE: ClassVar[str] = "register_broker"
    _CHECKS: ClassVar[dict] = {"broker_id": _int, "incarnation_id": _str, "endpoints": _str_map, "rack": _opt_str}
    broker_id: int
    incarnation_id: str
    endpoints: Mapping[str, str]
    rack: str | None = None


@dataclass(frozen=True)
class FenceBrokerRecord(MetadataRecord):
    """The broker may no longer lead or be in an ISR (leader moves come in the same entry)."""

    TYPE: ClassVar[str] = "fence_broker"
    _CHECKS: ClassVar[dict] = {"broker_id": _int, "broker_epoch": _int}
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class UnfenceBrokerRecord(MetadataRecord):
    """The broker caught up and may lead and join ISRs again."""

    TYPE: ClassVar[str] = "unfence_broker"
    _CHECKS: ClassVar[dict] = {"broker_id": _int, "broker_epoch": _int}
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class TopicRecord(MetadataRecord):
    """A topic is created with these replica lists (leader = first replica, ISR = replicas)."""

    TYPE: ClassVar[str] = "topic"
    _CHECKS: ClassVar[dict] = {"name": _str, "topic_id": _str, "partitions": _assignment, "configs": _config_map}
    name: str
    topic_id: str
    partitions: tuple[tuple[int, ...], ...]
    configs: Mapping[str, Any]


@dataclass(frozen=True)
class RemoveTopicRecord(MetadataRecord):
    """A topic (this topic id) is deleted."""

    TYPE: ClassVar[str] = "remove_topic"
    _CHECKS: ClassVar[dict] = {"name": _str, "topic_id": _str}
    name: str
    topic_id: str


@dataclass(frozen=True)
class PartitionChangeRecord(MetadataRecord):
    """A partition's leader and/or ISR change, if its partition epoch is still the expected one."""

    TYPE: ClassVar[str] = "partition_change"
    _CHECKS: ClassVar[dict] = {"topic": _str, "topic_id": _str, "partition": _int,
                               "expected_partition_epoch": _int, "leader": _opt_int, "isr": _opt_ids}
    topic: str
    topic_id: str
    partition: int
    expected_partition_epoch: int
    leader: int | None = None  # None: unchanged; -1: no leader (offline)
    isr: tuple[int, ...] | None = None  # None: unchanged


@dataclass(frozen=True)
class ConfigRecord(MetadataRecord):
    """Config overrides of a topic or of the cluster are set (None: removed)."""

    TYPE: ClassVar[str] = "config"
    _CHECKS: ClassVar[dict] = {"resource_type": _str, "resource_name": _str, "configs": _config_map}
    resource_type: str  # "topic" or "cluster"
    resource_name: str  # the topic name; "" for the cluster
    configs: Mapping[str, Any]  # value None deletes the override


@dataclass(frozen=True)
class ProducerIdsRecord(MetadataRecord):
    """A block of producer ids [first_id, first_id + size) is handed out."""

    TYPE: ClassVar[str] = "producer_ids"
    _CHECKS: ClassVar[dict] = {"broker_id": _int, "broker_epoch": _int, "first_id": _int, "size": _int}
    broker_id: int  # who asked (a broker, or the controller's own node id)
    broker_epoch: int  # -1 for the controller's own block
    first_id: int
    size: int


RECORD_TYPES: Mapping[str, type[MetadataRecord]] = MappingProxyType({
    cls.TYPE: cls for cls in (RegisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord, TopicRecord,
                              RemoveTopicRecord, PartitionChangeRecord, ConfigRecord, ProducerIdsRecord)})


def record_from_map(raw: Any) -> MetadataRecord:
    """A typed record from its msgpack map; MetadataRecordError for unknown types or bad fields."""
    if not isinstance(raw, Mapping):
        raise _bad(f"a metadata record must be a map, got {type(raw).__name__}")
    kind = raw.get("type")
    cls = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise _bad(f"unknown metadata record type {kind!r}")
    return cls.from_map(raw)


def encode_entry(records: Sequence[MetadataRecord]) -> bytes:
    """One metadata-log entry (replayed atomically) holding ``records``."""
    assert records, "an entry holds at least one record"
    return msgpack.packb([r.to_map() for r in records], use_bin_type=True)


def decode_entry(payload: bytes) -> list[MetadataRecord]:
    """The records of one entry; MetadataRecordError for anything ``encode_entry`` did not write."""
    if len(payload) > ENTRY_BYTES_MAX:
        raise _bad(f"metadata entry of {len(payload)} bytes; at most {ENTRY_BYTES_MAX}")
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as error:
        raise _bad(f"undecodable metadata entry: {error!r}") from None
    if not isinstance(raw, list) or not raw:
        raise _bad("a metadata entry must be a non-empty array of records")
    if len(raw) > RECORDS_PER_ENTRY_MAX:
        raise _bad(f"{len(raw)} records in one entry; at most {RECORDS_PER_ENTRY_MAX}")
    return [record_from_map(item) for item in raw]
