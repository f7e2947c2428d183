"""The metadata log's records as Kafka declares them (metadata/.../common/metadata/*.json), and
their framing. records.py maps the typed records onto these bodies, image.py writes and replays
snapshots with them, state.py frames the controller quorum's own records.

Every record is one of Kafka's metadata records (its name, api key and field names; version 0,
flexible as in today's Kafka), or a Raftka record under a Raftka api key (>= 10000, far from
Kafka's, which stop in the 20s). What a Raftka record carries that Kafka's does not travels as a
tagged field with a Raftka tag (>= 10000), so Kafka's own tags stay free:

    api key  record                           Raftka tags
    0        RegisterBrokerRecord             -     (the log writes broker_epoch -1: the epoch
                                                     is the record's offset, known at replay)
    2        TopicRecord                      10000 partitions [{replicas}] (log only: Kafka
                                                     writes PartitionRecords), 10001 configs
    3        PartitionRecord                  -     (snapshots: every partition; the log: the
                                                     partitions CreatePartitions adds)
    4        ConfigRecord                     the resource's changed keys as ``configs``
                                                     [{name, value, 10000 value_type}], one
                                                     record per resource (Kafka: one per key)
    5        PartitionChangeRecord            10000 topic_name, 10001 expected_partition_epoch
                                                     (a retried change is refused, not re-applied)
    6        UnregisterBrokerRecord           -
    7        FenceBrokerRecord                -
    9        RemoveTopicRecord                10000 topic_name
    11       UserScramCredentialRecord        -     (a user's credential for one mechanism:
                                                     salt, StoredKey, ServerKey, iterations;
                                                     never the password nor the salted password)
    14       UnfenceBrokerRecord              -
    15       ProducerIdsRecord                10000 first_producer_id (the block is refused
                                                     unless it starts at the next unassigned id)
    18       AccessControlEntryRecord         -     (one ACL binding under its uuid; common/acl.py)
    19       RemoveAccessControlEntryRecord   -
    22       RemoveUserScramCredentialRecord  -
    10000    ControllerEndpointRecord         a controller's RPC endpoint (the b"C" log entry).
                                              Kafka's RegisterControllerRecord (27) carries an
                                              incarnation id and features Raftka does not have.
    10001    MetadataSnapshotHeaderRecord     the first record of an image snapshot: its offset
    10002    ControllerSnapshotRecord         the controller state machine's snapshot

A config value keeps its type through the log as Kafka's DescribeConfigs spells types
(``value_type``: 1 BOOLEAN, 2 STRING, 5 LONG, 6 DOUBLE, 7 LIST; ``value`` is Kafka's string form).

Framing, as Kafka's metadata record serde: ``frame`` = unsigned varint frame version (1),
unsigned varint api key, unsigned varint record version, then the body. A **record sequence**
(one log entry, or a snapshot) = unsigned varint count, then per record an unsigned varint size
and the frame. Sizes let a reader cut each body before the codec sees it, so a body that does
not fill its frame exactly is refused; Raftka keeps no record batch around an entry (pysyncobj
already delivers each entry whole).

Every fault raises :class:`FrameError` (a ValueError) with a clear message; callers turn it into
their own typed error.
"""
from __future__ import annotations

import math
from typing import Any, Final, Iterable, Iterator, Mapping

from raftka.common import codec
from raftka.common.acl import HOST_BYTES_MAX, PRINCIPAL_BYTES_MAX, RESOURCE_NAME_BYTES_MAX
# Kafka's ConfigResource.Type ids (named apart from records.py's "topic"/"cluster" tags); Raftka's
# cluster-wide overrides are Kafka's cluster-default broker configs (BROKER with an empty name).
from raftka.common.messages.admin import RESOURCE_BROKER as RESOURCE_TYPE_BROKER
from raftka.common.messages.admin import RESOURCE_TOPIC as RESOURCE_TYPE_TOPIC
# Kafka's config types, used to read a value back as what was written.
from raftka.common.messages.admin import (CONFIG_TYPE_BOOLEAN, CONFIG_TYPE_DOUBLE, CONFIG_TYPE_LIST,
                                          CONFIG_TYPE_LONG, CONFIG_TYPE_STRING)
from raftka.common.messages.limits import CONFIGS_MAX, LISTENERS_MAX, PARTITIONS_MAX, REPLICAS_MAX
from raftka.common.scram import SALT_BYTES_MAX, USER_NAME_BYTES_MAX
from raftka.common.schema import ABSENT, Array, Field, Message, Struct

FRAME_VERSION: Final = 1  # Kafka's AbstractApiMessageSerde.DEFAULT_FRAME_VERSION
RAFTKA_TAG_FIRST: Final = 10_000
RAFTKA_API_KEY_FIRST: Final = 10_000
CONTROLLERS_MAX: Final = 1_000  # controller endpoints one snapshot may hold (a quorum has 1-5)
SCRAM_KEY_BYTES_MAX: Final = 64  # a StoredKey or ServerKey: one digest (SHA-512's is the longest)

# Kafka's SecurityProtocol ids by listener name; a listener of another name is PLAINTEXT.
SECURITY_PROTOCOLS: Final = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


class FrameError(ValueError):
    """Bytes that are not a framed record sequence, or a record body the codec refused."""


def _raftka_tag(name: str, type_: Any, offset: int, default: Any = ABSENT, about: str = "", **options: Any) -> Field:
    return Field(name, type_, default=default, tag=RAFTKA_TAG_FIRST + offset, tagged_versions="0+",
                 about=about, **options)


_IDS = Array("int32", max_count=REPLICAS_MAX)

CONFIG_ENTRY: Final = Struct("ConfigEntry", (
    Field("name", "string"),
    Field("value", "string", default=None, nullable=True, about="Kafka's string form; null deletes the override"),
    _raftka_tag("value_type", "int8", 0, default=CONFIG_TYPE_STRING, about="Kafka's config type of the value"),
))
_CONFIGS = Array(CONFIG_ENTRY, max_count=CONFIGS_MAX)

REGISTER_BROKER: Final = Message(0, "RegisterBrokerRecord", "0", (
    Field("broker_id", "int32"),
    Field("incarnation_id", "uuid"),
    Field("broker_epoch", "int64", about="-1 in the log (the epoch is the record's offset)"),
    Field("end_points", Array(Struct("BrokerEndpoint", (
        Field("name", "string"), Field("host", "string"), Field("port", "uint16"), Field("security_protocol", "int16"),
    )), max_count=LISTENERS_MAX)),
    Field("features", Array(Struct("BrokerFeature", (
        Field("name", "string"), Field("min_supported_version", "int16"), Field("max_supported_version", "int16"),
    )), max_count=0), default=[], about="Raftka registers no features"),
    Field("rack", "string", default=None, nullable=True),
    Field("fenced", "bool", default=True),
), flexible_versions="0+")

TOPIC: Final = Message(2, "TopicRecord", "0", (
    Field("name", "string"),
    Field("topic_id", "uuid"),
    _raftka_tag("partitions", Array(Struct("PartitionAssignment", (Field("replicas", _IDS),)),
                                    max_count=PARTITIONS_MAX), 0, about="replica lists; log only"),
    _raftka_tag("configs", _CONFIGS, 1, default=[], about="the topic's config overrides; log only"),
), flexible_versions="0+")

PARTITION: Final = Message(3, "PartitionRecord", "0", (
    Field("partition_id", "int32", default=-1),
    Field("topic_id", "uuid"),
    Field("replicas", _IDS),
    Field("isr", _IDS),
    Field("removing_replicas", _IDS, default=None, nullable=True),
    Field("adding_replicas", _IDS, default=None, nullable=True),
    Field("leader", "int32", default=-1),
    Field("leader_epoch", "int32", default=-1),
    Field("partition_epoch", "int32", default=-1),
), flexible_versions="0+")

CONFIG: Final = Message(4, "ConfigRecord", "0", (
    Field("resource_type", "int8"),
    Field("resource_name", "string"),
    Field("configs", _CONFIGS, default=[]),
), flexible_versions="0+")

PARTITION_CHANGE: Final = Message(5, "PartitionChangeRecord", "0", (
    Field("partition_id", "int32", default=-1),
    Field("topic_id", "uuid"),
    Field("isr", _IDS, default=None, nullable=True, tag=0, tagged_versions="0+"),
    Field("leader", "int32", default=-2, tag=1, tagged_versions="0+",
          about="-2 unchanged, -1 no leader"),
    Field("replicas", _IDS, default=None, nullable=True, tag=2, tagged_versions="0+", about="null: unchanged"),
    Field("removing_replicas", _IDS, default=None, nullable=True, tag=3, tagged_versions="0+",
          about="null: unchanged; replicas a reassignment takes out once the adding ones are in the ISR"),
    Field("adding_replicas", _IDS, default=None, nullable=True, tag=4, tagged_versions="0+",
          about="null: unchanged; replicas a reassignment adds"),
    _raftka_tag("topic_name", "string", 0),
    _raftka_tag("expected_partition_epoch", "int32", 1),
), flexible_versions="0+")

UNREGISTER_BROKER: Final = Message(6, "UnregisterBrokerRecord", "0", (
    Field("broker_id", "int32"),
    Field("broker_epoch", "int64"),
), flexible_versions="0+")

FENCE_BROKER: Final = Message(7, "FenceBrokerRecord", "0", (
    Field("id", "int32"),
    Field("epoch", "int64"),
), flexible_versions="0+")

REMOVE_TOPIC: Final = Message(9, "RemoveTopicRecord", "0", (
    Field("topic_id", "uuid"),
    _raftka_tag("topic_name", "string", 0),
), flexible_versions="0+")

UNFENCE_BROKER: Final = Message(14, "UnfenceBrokerRecord", "0", (
    Field("id", "int32"),
    Field("epoch", "int64"),
), flexible_versions="0+")

PRODUCER_IDS: Final = Message(15, "ProducerIdsRecord", "0", (
    Field("broker_id", "int32"),
    Field("broker_epoch", "int64", default=-1),
    Field("next_producer_id", "int64"),
    _raftka_tag("first_producer_id", "int64", 0, about="the block's first id; log only"),
), flexible_versions="0+")

USER_SCRAM_CREDENTIAL: Final = Message(11, "UserScramCredentialRecord", "0", (
    Field("name", "string", max_length=USER_NAME_BYTES_MAX),
    Field("mechanism", "int8", about="Kafka's ScramMechanism: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512"),
    Field("salt", "bytes", max_length=SALT_BYTES_MAX),
    Field("stored_key", "bytes", max_length=SCRAM_KEY_BYTES_MAX),
    Field("server_key", "bytes", max_length=SCRAM_KEY_BYTES_MAX),
    Field("iterations", "int32"),
), flexible_versions="0+")

REMOVE_USER_SCRAM_CREDENTIAL: Final = Message(22, "RemoveUserScramCredentialRecord", "0", (
    Field("name", "string", max_length=USER_NAME_BYTES_MAX),
    Field("mechanism", "int8"),
), flexible_versions="0+")

ACCESS_CONTROL_ENTRY: Final = Message(18, "AccessControlEntryRecord", "0", (
    Field("id", "uuid", about="the ACL's id, chosen by the active controller"),
    Field("resource_type", "int8"),
    Field("resource_name", "string", max_length=RESOURCE_NAME_BYTES_MAX),
    Field("pattern_type", "int8"),
    Field("principal", "string", max_length=PRINCIPAL_BYTES_MAX),
    Field("host", "string", max_length=HOST_BYTES_MAX),
    Field("operation", "int8"),
    Field("permission_type", "int8"),
), flexible_versions="0+")

REMOVE_ACCESS_CONTROL_ENTRY: Final = Message(19, "RemoveAccessControlEntryRecord", "0", (
    Field("id", "uuid"),
), flexible_versions="0+")

CONTROLLER_ENDPOINT: Final = Message(RAFTKA_API_KEY_FIRST, "ControllerEndpointRecord", "0", (
    Field("node_id", "int32"),
    Field("host", "string"),
    Field("port", "uint16"),
), flexible_versions="0+")

METADATA_SNAPSHOT_HEADER: Final = Message(RAFTKA_API_KEY_FIRST + 1, "MetadataSnapshotHeaderRecord", "0", (
    Field("offset", "int64", about="the last metadata offset the snapshot holds (Kafka: the snapshot id)"),
), flexible_versions="0+")

CONTROLLER_SNAPSHOT: Final = Message(RAFTKA_API_KEY_FIRST + 2, "ControllerSnapshotRecord", "0", (
    Field("offset", "int64", about="the Raft index of the last applied record"),
    Field("controllers", Array(CONTROLLER_ENDPOINT.struct, max_count=CONTROLLERS_MAX)),
    Field("metadata", "bytes", about="the metadata state machine's own snapshot"),
), flexible_versions="0+")

RECORDS: Final[Mapping[int, Message]] = {m.api_key: m for m in (
    REGISTER_BROKER, TOPIC, PARTITION, CONFIG, PARTITION_CHANGE, UNREGISTER_BROKER, FENCE_BROKER, REMOVE_TOPIC,
    UNFENCE_BROKER, PRODUCER_IDS, USER_SCRAM_CREDENTIAL, REMOVE_USER_SCRAM_CREDENTIAL, ACCESS_CONTROL_ENTRY,
    REMOVE_ACCESS_CONTROL_ENTRY, CONTROLLER_ENDPOINT,
    METADATA_SNAPSHOT_HEADER, CONTROLLER_SNAPSHOT)}
# (frame header, encode_into) per api key: each record type has one version.
_WRITERS: Final = {key: (bytes((FRAME_VERSION,)) + codec.encode_uvarint(key) + bytes((0,)),
                         codec.encoder_into(m, 0)) for key, m in RECORDS.items()}
_READERS: Final = {key: codec.decoder(m, 0) for key, m in RECORDS.items()}
_SMALL: Final = tuple(bytes((n,)) for n in range(0x80))


# -- framing ---------------------------------------------------------------------------------------

def encode_frame(api_key: int, body: dict[str, Any]) -> bytes:
    """One framed record (frame version, api key, version 0, body)."""
    header, encode_into = _WRITERS[api_key]
    buf = bytearray(header)
    try:
        encode_into(body, buf)
    except codec.CodecError as error:
        raise FrameError(error.message) from None
    return bytes(buf)


def encode_records(records: Iterable[tuple[int, dict[str, Any]]]) -> bytes:
    """A record sequence of (api key, body) records, framed into one buffer as they come."""
    out = bytearray()
    frame = bytearray()  # reused: one record at a time, to learn its size before it is written
    count = 0
    for api_key, body in records:
        header, encode_into = _WRITERS[api_key]
        frame[:] = header
        try:
            encode_into(body, frame)
        except codec.CodecError as error:
            raise FrameError(f"record {count}: {error.message}") from None
        size = len(frame)
        out += _SMALL[size] if size < 0x80 else codec.encode_uvarint(size)
        out += frame
        count += 1
    return codec.encode_uvarint(count) + out


def encode_sequence(frames: list[bytes]) -> bytes:
    """A record sequence of already framed records (what a test or a tool builds by hand)."""
    out = bytearray(codec.encode_uvarint(len(frames)))
    for frame in frames:
        out += codec.encode_uvarint(len(frame))
        out += frame
    return bytes(out)


def _uvarint(buf: memoryview, pos: int, what: str) -> tuple[int, int]:
    if pos >= len(buf):
        raise FrameError(f"truncated: the data ends before the {what}")
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    try:
        return codec.decode_uvarint(buf, pos)
    except codec.CodecError as error:
        raise FrameError(f"bad {what}: {error.message}") from None


def decode_frame(frame: memoryview) -> tuple[int, dict[str, Any]]:
    """(api key, body) of one framed record that fills ``frame`` exactly."""
    if len(frame) > 3 and frame[0] == FRAME_VERSION and frame[1] < 0x80 and frame[2] == 0:
        api_key, record_version, pos = frame[1], 0, 3  # Kafka's own keys: each varint is one byte
    else:
        version, pos = _uvarint(frame, 0, "frame version")
        if version != FRAME_VERSION:
            raise FrameError(f"unknown frame version {version} (expected {FRAME_VERSION})")
        api_key, pos = _uvarint(frame, pos, "api key")
        record_version, pos = _uvarint(frame, pos, "record version")
    read = _READERS.get(api_key)
    if read is None:
        raise FrameError(f"unknown metadata record api key {api_key}")
    if record_version != 0:
        raise FrameError(f"{RECORDS[api_key].name} version {record_version} is not known (only 0)")
    try:
        return api_key, read(frame[pos:])
    except codec.CodecError as error:
        raise FrameError(error.message) from None


def iter_sequence(data: bytes, count_max: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(api key, body) of each record of a record sequence of at most ``count_max`` records."""
    buf = memoryview(data)
    count, pos = _uvarint(buf, 0, "record count")
    if count > count_max:
        raise FrameError(f"{count} records, at most {count_max}")
    if count * 4 > len(buf) - pos:  # a size and the shortest frame take at least 4 bytes
        raise FrameError(f"truncated: {count} records declared in {len(buf) - pos} bytes")
    for index in range(count):
        size = buf[pos] if pos < len(buf) else 0x80  # past the end: _uvarint words the fault
        if size < 0x80:
            pos += 1
        else:
            size, pos = _uvarint(buf, pos, f"size of record {index}")
        end = pos + size
        if end > len(buf):
            raise FrameError(f"truncated: record {index} of {size} bytes, {len(buf) - pos} left")
        try:
            yield decode_frame(buf[pos:end])
        except FrameError as error:
            raise FrameError(f"record {index}: {error}") from None
        pos = end
    if pos != len(buf):
        raise FrameError(f"{len(buf) - pos} bytes after the last record")


# -- config values -----------------------------------------------------------------------------------

def config_entries(configs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A config map {key: value or None} as ConfigEntry bodies; FrameError for a value Kafka's
    string form cannot carry back."""
    out = []
    for name, value in configs.items():
        kind = value.__class__
        if value is None or kind is str:
            out.append({"name": name, "value": value})
        elif kind is bool:
            out.append({"name": name, "value": "true" if value else "false", "value_type": CONFIG_TYPE_BOOLEAN})
        elif kind is int:
            out.append({"name": name, "value": str(value), "value_type": CONFIG_TYPE_LONG})
        elif kind is float and math.isfinite(value):
            out.append({"name": name, "value": repr(value), "value_type": CONFIG_TYPE_DOUBLE})
        elif kind in (list, tuple) and all(item.__class__ is str and "," not in item and item for item in value):
            out.append({"name": name, "value": ",".join(value), "value_type": CONFIG_TYPE_LIST})
        else:
            raise FrameError(f"config {name!r}: a {kind.__name__} value {value!r:.40} has no Kafka string form "
                             "(lists hold non-empty strings without commas)")
    return out


def config_values(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Inverse of :func:`config_entries` (lists come back as tuples)."""
    out: dict[str, Any] = {}
    for entry in entries:
        name, value, kind = entry["name"], entry["value"], entry["value_type"]
        if value is None or kind == CONFIG_TYPE_STRING:
            out[name] = value
        elif kind == CONFIG_TYPE_LIST:
            out[name] = tuple(value.split(",")) if value else ()
        elif kind == CONFIG_TYPE_BOOLEAN and value in ("true", "false"):
            out[name] = value == "true"
        elif kind in (CONFIG_TYPE_LONG, CONFIG_TYPE_DOUBLE):
            try:
                out[name] = int(value) if kind == CONFIG_TYPE_LONG else float(value)
            except ValueError:
                raise FrameError(f"config {name!r}: {value!r:.40} is not a value of config type {kind}") from None
        else:
            raise FrameError(f"config {name!r}: {value!r:.40} is not a value of config type {kind}")
    return out
