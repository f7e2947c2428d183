"""Typed metadata records: what the active controller commits and every replica replays.

One metadata-log entry (the payload after the envelope's ``b"M"``, see state.py) is a record
sequence (record_schemas.py: a count, then each record framed as Kafka's metadata serde frames
it) replayed **atomically**: all of them or none (a broker fence and the leader moves it causes
land together). Each typed record below is one of Kafka's metadata records on the wire (its
name, api key and fields; what Raftka adds travels in Raftka-tagged fields, listed in
record_schemas.py). ``encode_entry([...])`` / ``decode_entry(bytes)``.

Every record carries what makes it idempotent (pysyncobj fails in-flight commands on a leader
change and callers retry, so the same record may be committed twice):

    RegisterBrokerRecord   {broker_id, incarnation_id, endpoints {listener: "host:port"}, rack}
                           broker epoch = the record's offset; the same incarnation again is a
                           no-op that answers the existing epoch. A (re-)registered broker starts
                           fenced.
    FenceBrokerRecord      {broker_id, broker_epoch}  refused for another epoch; no-op when fenced
    UnfenceBrokerRecord    {broker_id, broker_epoch}  refused for another epoch; no-op when unfenced
    UnregisterBrokerRecord {broker_id, broker_epoch}  removes the registration; refused for another
                           epoch; no-op when already gone
    TopicRecord            {name, topic_id, partitions [[replica ids]], configs}
                           creates the topic; leader = first replica, ISR = replicas, epochs 0.
                           The same topic id again is a no-op; another id for a taken name is
                           refused.
    PartitionRecord        {topic_id, partition, replicas, isr, leader, leader_epoch,
                           partition_epoch}  a new partition of an existing topic
                           (CreatePartitions): its index must be the topic's partition count.
                           The same index again is a no-op when the partition is exactly what
                           the record describes (a retried commit), else refused
                           INVALID_UPDATE_VERSION (decided on an image that moved on).
    RemoveTopicRecord      {name, topic_id}  no-op when that topic id is already gone
    PartitionChangeRecord  {topic, topic_id, partition, expected_partition_epoch, leader, isr}
                           leader / isr None = unchanged, leader -1 = offline. Refused unless the
                           partition epoch is the expected one (so a retry is refused, not
                           re-applied). A new leader bumps the leader epoch; every change bumps
                           the partition epoch.
    ConfigRecord           {resource_type "topic" | "cluster" | "broker", resource_name, configs {k: v or None}}
                           sets (None: deletes) overrides; re-applying gives the same configs.
                           "cluster" (name "") and "broker" (name = a broker id in decimal) are
                           both Kafka's BROKER resource on the wire, told apart by the name.
    ProducerIdsRecord      {broker_id, broker_epoch, first_id, size}
                           hands out [first_id, first_id + size); refused unless first_id is the
                           next unassigned id (so a retried block is refused, never handed out
                           twice).
    UserScramCredentialRecord {name, credential (mechanism, salt, stored_key, server_key,
                           iterations)}  sets the user's credential for that mechanism (replacing
                           the one it had); the same credential again changes nothing. Never a
                           password or a salted password: what SCRAM needs to check a proof.
    RemoveUserScramCredentialRecord {name, mechanism}  no-op when the user has no credential
                           for that mechanism (a retried removal)
    AccessControlEntryRecord {id, binding (common/acl.py AclBinding)}  adds an ACL; no-op when
                           that id, or an identical binding, is already there (a retried commit);
                           refused INVALID_REQUEST for a binding check_binding refuses, or an id
                           already holding another binding
    RemoveAccessControlEntryRecord {id}  no-op when that ACL is already gone

Topic and incarnation ids are Kafka's uuids, spelled as 32 lowercase hex digits. A config value is
None, a str, bool, int, finite float or a list of non-empty strings without commas (what Kafka's
string forms carry back exactly; record_schemas.py).

No record carries a time: nothing in the image depends on one. Decisions that need a clock
(fencing a silent broker) are taken by the active controller and committed as records.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, Sequence

from raftka.common import acl, errors
from raftka.common.acl import AclBinding
from raftka.common.scram import MECHANISMS_BY_NUMBER, ScramCredential, ScramMechanism
from raftka.raft_meta.metadata import record_schemas as schemas
from raftka.raft_meta.metadata.record_schemas import FrameError

ENTRY_BYTES_MAX = 1_048_576  # the Raft layer's RECORD_BYTES_MAX
RECORDS_PER_ENTRY_MAX = 20_000
PRODUCER_ID_BLOCK_SIZE_MAX = 1_000_000
RESOURCE_TOPIC = "topic"
RESOURCE_CLUSTER = "cluster"  # cluster-wide broker overrides (Kafka's BROKER resource named "")
RESOURCE_BROKER = "broker"  # one broker's overrides (Kafka's BROKER resource named by the broker id)
_RESOURCE_TYPES = {RESOURCE_TOPIC: schemas.RESOURCE_TYPE_TOPIC, RESOURCE_CLUSTER: schemas.RESOURCE_TYPE_BROKER,
                   RESOURCE_BROKER: schemas.RESOURCE_TYPE_BROKER}
BROKER_ID_DIGITS_MAX = 10  # a broker id is an int32 >= 0


def broker_resource_id(name: Any) -> int | None:
    """The broker id a BROKER resource name spells (decimal, no sign, no leading zero), else None."""
    if (name.__class__ is not str or not 0 < len(name) <= BROKER_ID_DIGITS_MAX or not name.isascii()
            or not name.isdigit() or (name[0] == "0" and name != "0") or int(name) > 2**31 - 1):
        return None
    return int(name)
_LEADER_UNCHANGED = -2  # Kafka's PartitionChangeRecord.Leader default
_HEX = frozenset("0123456789abcdef")


class MetadataRecordError(Exception):
    """A record that cannot be encoded, decoded or replayed; carries a wire error code and a message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def as_result(self) -> dict:
        return {"error": self.code, "message": self.message}


def _bad(message: str) -> MetadataRecordError:
    return MetadataRecordError(errors.INVALID_REQUEST, message)


def _uuid(value: Any, what: str) -> str:
    """``value`` when it is a uuid as Raftka spells one (the codec reads back lowercase hex)."""
    if value.__class__ is not str or len(value) != 32 or not _HEX.issuperset(value):
        raise _bad(f"{what} must be a uuid (32 lowercase hex digits), got {value!r:.40}")
    return value


def _end_points(endpoints: Mapping[str, str], broker_id: int, protocols: Mapping[str, int]) -> list[dict]:
    """{listener: "host:port"} as Kafka's BrokerEndpoint bodies, each with its security protocol."""
    out = []
    for name, address in endpoints.items():
        host, _, port = address.rpartition(":") if address.__class__ is str else ("", "", "")
        if not host or not port.isdigit() or str(int(port)) != port or int(port) > 65535:
            raise _bad(f"broker {broker_id}: endpoint {name!r} must be host:port, got {address!r:.60}")
        protocol = protocols.get(name, schemas.SECURITY_PROTOCOLS.get(name, 0))
        if protocol not in schemas.SECURITY_PROTOCOLS.values():
            raise _bad(f"broker {broker_id}: endpoint {name!r} has security protocol {protocol!r}, "
                       f"not one of {sorted(schemas.SECURITY_PROTOCOLS.values())}")
        out.append({"name": name, "host": host, "port": int(port), "security_protocol": protocol})
    return out


class MetadataRecord:
    """Base of the typed records: ``SCHEMA`` (its declaration), ``to_body()``, ``from_body()``."""

    SCHEMA: ClassVar[Any] = None

    def to_body(self) -> dict:
        """The record's body in its declaration's shape; MetadataRecordError for a value it cannot carry."""
        raise NotImplementedError

    @classmethod
    def from_body(cls, body: dict) -> "MetadataRecord":
        raise NotImplementedError


@dataclass(frozen=True)
class RegisterBrokerRecord(MetadataRecord):
    """A broker (re-)registers; its broker epoch is this record's offset."""

    SCHEMA: ClassVar[Any] = schemas.REGISTER_BROKER
    broker_id: int
    incarnation_id: str
    endpoints: Mapping[str, str]
    rack: str | None = None
    # listener -> Kafka's security protocol id (0 PLAINTEXT .. 3 SASL_SSL), as the broker
    # registered it; a listener missing here is taken from its name (PLAINTEXT for others)
    security_protocols: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def protocol_overrides(self) -> dict[str, int]:
        """The endpoints' security protocol ids that their listener's name does not say (a
        listener named SSL is SSL; INTERNAL is PLAINTEXT unless given here)."""
        return {name: protocol for name, protocol in self.security_protocols.items()
                if name in self.endpoints and protocol != schemas.SECURITY_PROTOCOLS.get(name, 0)}

    def to_body(self) -> dict:
        return {"broker_id": self.broker_id, "incarnation_id": _uuid(self.incarnation_id, "incarnation_id"),
                "broker_epoch": -1, "end_points": _end_points(self.endpoints, self.broker_id, self.security_protocols),
                "rack": self.rack}

    @classmethod
    def from_body(cls, body: dict) -> "RegisterBrokerRecord":
        endpoints = MappingProxyType({e["name"]: f"{e['host']}:{e['port']}" for e in body["end_points"]})
        # Only what the name does not say: a record decodes equal to the one encoded.
        protocols = MappingProxyType({e["name"]: e["security_protocol"] for e in body["end_points"]
                                      if e["security_protocol"] != schemas.SECURITY_PROTOCOLS.get(e["name"], 0)})
        return cls(body["broker_id"], body["incarnation_id"], endpoints, body["rack"], protocols)


@dataclass(frozen=True)
class FenceBrokerRecord(MetadataRecord):
    """The broker may no longer lead or be in an ISR (leader moves come in the same entry)."""

    SCHEMA: ClassVar[Any] = schemas.FENCE_BROKER
    broker_id: int
    broker_epoch: int

    def to_body(self) -> dict:
        return {"id": self.broker_id, "epoch": self.broker_epoch}

    @classmethod
    def from_body(cls, body: dict) -> "FenceBrokerRecord":
        return cls(body["id"], body["epoch"])


@dataclass(frozen=True)
class UnfenceBrokerRecord(MetadataRecord):
    """The broker caught up and may lead and join ISRs again."""

    SCHEMA: ClassVar[Any] = schemas.UNFENCE_BROKER
    broker_id: int
    broker_epoch: int

    def to_body(self) -> dict:
        return {"id": self.broker_id, "epoch": self.broker_epoch}

    @classmethod
    def from_body(cls, body: dict) -> "UnfenceBrokerRecord":
        return cls(body["id"], body["epoch"])


@dataclass(frozen=True)
class UnregisterBrokerRecord(MetadataRecord):
    """The broker's registration is removed (its leaderships and ISR places move in the same entry)."""

    SCHEMA: ClassVar[Any] = schemas.UNREGISTER_BROKER
    broker_id: int
    broker_epoch: int

    def to_body(self) -> dict:
        return {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch}

    @classmethod
    def from_body(cls, body: dict) -> "UnregisterBrokerRecord":
        return cls(body["broker_id"], body["broker_epoch"])


@dataclass(frozen=True)
class TopicRecord(MetadataRecord):
    """A topic is created with these replica lists (leader = first replica, ISR = replicas)."""

    SCHEMA: ClassVar[Any] = schemas.TOPIC
    name: str
    topic_id: str
    partitions: tuple[tuple[int, ...], ...]
    configs: Mapping[str, Any]

    def to_body(self) -> dict:
        return {"name": self.name, "topic_id": _uuid(self.topic_id, f"topic {self.name!r}: topic_id"),
                "partitions": [{"replicas": replicas} for replicas in self.partitions],
                "configs": _config_entries(self.configs)}

    @classmethod
    def from_body(cls, body: dict) -> "TopicRecord":
        partitions = body.get("partitions")
        if partitions is None:
            raise _bad(f"TopicRecord of {body['name']!r} has no partitions (a snapshot's record, not a log entry's)")
        return cls(body["name"], body["topic_id"], tuple(tuple(p["replicas"]) for p in partitions),
                   _config_values(body["configs"]))


@dataclass(frozen=True)
class PartitionRecord(MetadataRecord):
    """A partition added to an existing topic (CreatePartitions); also the snapshot's record of
    every partition (image.py writes those bodies itself)."""

    SCHEMA: ClassVar[Any] = schemas.PARTITION
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()  # a reassignment under way (Kafka's KIP-455 fields)
    adding_replicas: tuple[int, ...] = ()

    def to_body(self) -> dict:
        return {"partition_id": self.partition,
                "topic_id": _uuid(self.topic_id, f"partition {self.partition}: topic_id"),
                "replicas": self.replicas, "isr": self.isr, "leader": self.leader,
                "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch,
                "removing_replicas": self.removing_replicas or None, "adding_replicas": self.adding_replicas or None}

    @classmethod
    def from_body(cls, body: dict) -> "PartitionRecord":
        return cls(body["topic_id"], body["partition_id"], tuple(body["replicas"]), tuple(body["isr"]),
                   body["leader"], body["leader_epoch"], body["partition_epoch"],
                   tuple(body["removing_replicas"] or ()), tuple(body["adding_replicas"] or ()))


@dataclass(frozen=True)
class RemoveTopicRecord(MetadataRecord):
    """A topic (this topic id) is deleted."""

    SCHEMA: ClassVar[Any] = schemas.REMOVE_TOPIC
    name: str
    topic_id: str

    def to_body(self) -> dict:
        return {"topic_id": _uuid(self.topic_id, f"topic {self.name!r}: topic_id"), "topic_name": self.name}

    @classmethod
    def from_body(cls, body: dict) -> "RemoveTopicRecord":
        return cls(_required(body, "topic_name"), body["topic_id"])


@dataclass(frozen=True)
class PartitionChangeRecord(MetadataRecord):
    """A partition's leader and/or ISR change, if its partition epoch is still the expected one."""

    SCHEMA: ClassVar[Any] = schemas.PARTITION_CHANGE
    topic: str
    topic_id: str
    partition: int
    expected_partition_epoch: int
    leader: int | None = None  # None: unchanged; -1: no leader (offline)
    isr: tuple[int, ...] | None = None  # None: unchanged
    # A reassignment (KIP-455): the replica list, and which of them are being added and removed;
    # None: unchanged, () for adding/removing: none (the reassignment is over).
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None

    def to_body(self) -> dict:
        if self.leader is not None and self.leader < -1:
            raise _bad(f"partition {self.topic}-{self.partition}: leader must be a broker id or -1, got {self.leader}")
        return {"partition_id": self.partition,
                "topic_id": _uuid(self.topic_id, f"partition {self.topic}-{self.partition}: topic_id"),
                "isr": self.isr, "leader": _LEADER_UNCHANGED if self.leader is None else self.leader,
                "replicas": self.replicas, "removing_replicas": self.removing_replicas,
                "adding_replicas": self.adding_replicas,
                "topic_name": self.topic, "expected_partition_epoch": self.expected_partition_epoch}

    @classmethod
    def from_body(cls, body: dict) -> "PartitionChangeRecord":
        leader, isr = body["leader"], body["isr"]

        def ids(key: str) -> tuple[int, ...] | None:
            return None if body[key] is None else tuple(body[key])
        return cls(_required(body, "topic_name"), body["topic_id"], body["partition_id"],
                   _required(body, "expected_partition_epoch"),
                   None if leader == _LEADER_UNCHANGED else leader, ids("isr"), ids("replicas"),
                   ids("removing_replicas"), ids("adding_replicas"))


@dataclass(frozen=True)
class ConfigRecord(MetadataRecord):
    """Config overrides of a topic, of the cluster's brokers or of one broker are set (None: removed)."""

    SCHEMA: ClassVar[Any] = schemas.CONFIG
    resource_type: str  # "topic", "cluster" or "broker"
    resource_name: str  # the topic name; "" for the cluster; the broker id in decimal for a broker
    configs: Mapping[str, Any]  # value None deletes the override

    def to_body(self) -> dict:
        code = _RESOURCE_TYPES.get(self.resource_type)
        if code is None:
            raise _bad(f"config resource type must be {RESOURCE_TOPIC!r}, {RESOURCE_CLUSTER!r} or "
                       f"{RESOURCE_BROKER!r}, got {self.resource_type!r}")
        # The wire tells "cluster" from "broker" by the name alone: each must carry its own kind.
        if self.resource_type == RESOURCE_CLUSTER and self.resource_name != "":
            raise _bad(f"cluster config overrides are named \"\", got {self.resource_name!r:.40}")
        if self.resource_type == RESOURCE_BROKER and broker_resource_id(self.resource_name) is None:
            raise _bad(f"a broker's config overrides are named by its id, got {self.resource_name!r:.40}")
        return {"resource_type": code, "resource_name": self.resource_name,
                "configs": _config_entries(self.configs)}

    @classmethod
    def from_body(cls, body: dict) -> "ConfigRecord":
        code, name = body["resource_type"], body["resource_name"]
        if code == schemas.RESOURCE_TYPE_TOPIC:
            kind = RESOURCE_TOPIC
        elif code == schemas.RESOURCE_TYPE_BROKER:
            kind = RESOURCE_CLUSTER if name == "" else RESOURCE_BROKER
        else:
            raise _bad(f"ConfigRecord: resource type {code} is not a topic (2) or broker (4)")
        return cls(kind, name, _config_values(body["configs"]))


@dataclass(frozen=True)
class ProducerIdsRecord(MetadataRecord):
    """A block of producer ids [first_id, first_id + size) is handed out."""

    SCHEMA: ClassVar[Any] = schemas.PRODUCER_IDS
    broker_id: int  # who asked (a broker, or the controller's own node id)
    broker_epoch: int  # -1 for the controller's own block
    first_id: int
    size: int

    def to_body(self) -> dict:
        return {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch,
                "next_producer_id": self.first_id + self.size, "first_producer_id": self.first_id}

    @classmethod
    def from_body(cls, body: dict) -> "ProducerIdsRecord":
        first = _required(body, "first_producer_id")
        return cls(body["broker_id"], body["broker_epoch"], first, body["next_producer_id"] - first)


@dataclass(frozen=True)
class UserScramCredentialRecord(MetadataRecord):
    """A user's SCRAM credential for one mechanism is set. The credential's repr shows its
    mechanism and iterations only, so neither this record's repr nor a log line carries a key."""

    SCHEMA: ClassVar[Any] = schemas.USER_SCRAM_CREDENTIAL
    name: str
    credential: ScramCredential

    def to_body(self) -> dict:
        c = self.credential
        return {"name": self.name, "mechanism": c.mechanism.number, "salt": c.salt, "stored_key": c.stored_key,
                "server_key": c.server_key, "iterations": c.iterations}

    @classmethod
    def from_body(cls, body: dict) -> "UserScramCredentialRecord":
        return cls(body["name"], ScramCredential(_mechanism(body["mechanism"], body["name"]), body["salt"],
                                                 body["stored_key"], body["server_key"], body["iterations"]))


@dataclass(frozen=True)
class RemoveUserScramCredentialRecord(MetadataRecord):
    """A user's SCRAM credential for one mechanism is removed."""

    SCHEMA: ClassVar[Any] = schemas.REMOVE_USER_SCRAM_CREDENTIAL
    name: str
    mechanism: ScramMechanism

    def to_body(self) -> dict:
        return {"name": self.name, "mechanism": self.mechanism.number}

    @classmethod
    def from_body(cls, body: dict) -> "RemoveUserScramCredentialRecord":
        return cls(body["name"], _mechanism(body["mechanism"], body["name"]))


@dataclass(frozen=True)
class AccessControlEntryRecord(MetadataRecord):
    """An ACL binding is added under ``acl_id``."""

    SCHEMA: ClassVar[Any] = schemas.ACCESS_CONTROL_ENTRY
    acl_id: str
    binding: AclBinding

    def to_body(self) -> dict:
        b = self.binding
        return {"id": _uuid(self.acl_id, "ACL id"), "resource_type": int(b.resource_type),
                "resource_name": b.resource_name, "pattern_type": int(b.pattern_type), "principal": b.principal,
                "host": b.host, "operation": int(b.operation), "permission_type": int(b.permission)}

    @classmethod
    def from_body(cls, body: dict) -> "AccessControlEntryRecord":
        return cls(body["id"], binding_of(body))


@dataclass(frozen=True)
class RemoveAccessControlEntryRecord(MetadataRecord):
    """The ACL ``acl_id`` is removed."""

    SCHEMA: ClassVar[Any] = schemas.REMOVE_ACCESS_CONTROL_ENTRY
    acl_id: str

    def to_body(self) -> dict:
        return {"id": _uuid(self.acl_id, "ACL id")}

    @classmethod
    def from_body(cls, body: dict) -> "RemoveAccessControlEntryRecord":
        return cls(body["id"])


def binding_of(body: dict) -> AclBinding:
    """The checked binding of an AccessControlEntryRecord body; MetadataRecordError INVALID_REQUEST."""
    try:
        return acl.binding(body["resource_type"], body["resource_name"], body["pattern_type"], body["principal"],
                           body["host"], body["operation"], body["permission_type"])
    except errors.InvalidRequestError as error:
        raise _bad(f"ACL {body['id']}: {error.message}") from None


def _mechanism(number: int, user: str) -> ScramMechanism:
    found = MECHANISMS_BY_NUMBER.get(number)
    if found is None:
        raise MetadataRecordError(errors.UNSUPPORTED_SASL_MECHANISM,
                                  f"user {user!r:.80}: unknown SCRAM mechanism number {number}")
    return found


def _required(body: dict, name: str) -> Any:
    """A Raftka-tagged field a log record must carry (the codec leaves an absent tag out)."""
    if name not in body:
        raise _bad(f"metadata record is missing its Raftka field {name!r}")
    return body[name]


def _config_entries(configs: Mapping[str, Any]) -> list[dict]:
    try:
        return schemas.config_entries(configs)
    except FrameError as error:
        raise _bad(str(error)) from None


def _config_values(entries: list[dict]) -> Mapping[str, Any]:
    try:
        return MappingProxyType(schemas.config_values(entries))
    except FrameError as error:
        raise _bad(str(error)) from None


# Records a log entry may hold, by api key (the controller's own records are not among them).
RECORD_TYPES: Mapping[int, type[MetadataRecord]] = MappingProxyType({
    cls.SCHEMA.api_key: cls for cls in (RegisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord,
                                        UnregisterBrokerRecord, TopicRecord, PartitionRecord, RemoveTopicRecord,
                                        PartitionChangeRecord, ConfigRecord, ProducerIdsRecord,
                                        UserScramCredentialRecord, RemoveUserScramCredentialRecord,
                                        AccessControlEntryRecord, RemoveAccessControlEntryRecord)})


def encode_entry(records: Sequence[MetadataRecord]) -> bytes:
    """One metadata-log entry (replayed atomically) holding ``records``; MetadataRecordError for a
    record the declarations cannot carry or an entry beyond the limits."""
    assert records, "an entry holds at least one record"
    if len(records) > RECORDS_PER_ENTRY_MAX:
        raise _bad(f"{len(records)} records in one entry; at most {RECORDS_PER_ENTRY_MAX}")
    bodies = []
    for record in records:
        try:
            bodies.append((record.SCHEMA.api_key, record.to_body()))
        except (AttributeError, TypeError) as error:  # a field of a type the record never holds
            raise _bad(f"unencodable metadata record {record!r:.200}: {error}") from None
    try:
        payload = schemas.encode_records(bodies)
    except FrameError as error:
        raise _bad(f"unencodable metadata record: {error}") from None
    if len(payload) > ENTRY_BYTES_MAX:
        raise _bad(f"metadata entry of {len(payload)} bytes; at most {ENTRY_BYTES_MAX}")
    return payload


def decode_entry(payload: bytes) -> list[MetadataRecord]:
    """The records of one entry; MetadataRecordError for anything ``encode_entry`` did not write."""
    if len(payload) > ENTRY_BYTES_MAX:
        raise _bad(f"metadata entry of {len(payload)} bytes; at most {ENTRY_BYTES_MAX}")
    out: list[MetadataRecord] = []
    try:
        for api_key, body in schemas.iter_sequence(payload, RECORDS_PER_ENTRY_MAX):
            cls = RECORD_TYPES.get(api_key)
            if cls is None:
                raise _bad(f"record {len(out)}: {schemas.RECORDS[api_key].name} is not a metadata-log record")
            out.append(cls.from_body(body))
    except FrameError as error:
        raise _bad(f"undecodable metadata entry: {error}") from None
    if not out:
        raise _bad("a metadata entry holds at least one record")
    return out
