"""The data family's declarations (common/messages/data.py) against Kafka's own definitions.

Four checks, each able to fail on its own:

1. every request and response compiles, encoder and decoder, at every version it declares;
2. each declaration matches Kafka's JSON definition field by field: order, snake_case name, type
   (struct names included), the versions it exists, is nullable and is tagged in (within our
   range), its tag and its default, and the message's api key and flexible versions; our range
   lies within Kafka's;
3. a representative body (nested arrays, nulls, tagged fields, values that only fit the right
   integer width) decodes to itself after encoding at every version, with the fields that version
   lacks back at their defaults;
4. kafka-python (its own generated codec, from the same JSON) and ours agree at every version both
   have: the same bytes for the same body, and each decodes the other's bytes to the same values,
   including the defaults of the fields a version lacks; plus a few vectors written by hand.
"""
from __future__ import annotations

import copy
import re
import uuid
from typing import Any

import pytest

from raftka.common.codec import decoder, encoder
from raftka.common.messages import data
from raftka.common.schema import Array, Field, Message, Struct, in_versions, parse_versions

MESSAGES = data.REQUESTS + data.RESPONSES
AT_EVERY_VERSION = [pytest.param(m, v, id=f"{m.name}-v{v}") for m in MESSAGES for v in m.versions()]

U1 = "0123456789abcdef0123456789abcdef"
U2 = "fedcba9876543210fedcba9876543210"
BIG = 2**40 + 7  # only an int64 holds it
WIDE16 = 300  # only an int16 or wider holds it
RECORDS = bytes(range(61)) * 3


# -- representative bodies, every field set away from its default -----------------------------------

LEADER = {"leader_id": 3, "leader_epoch": 17}
NODE = {"node_id": 3, "host": "broker-3.example", "port": 9092, "rack": "rack-b"}

BODIES: dict[str, list[dict[str, Any]]] = {
    "ProduceRequest": [
        {"transactional_id": "tx-1", "acks": -1, "timeout_ms": 30_000, "topic_data": [
            {"name": "orders", "partition_data": [{"index": 0, "records": RECORDS},
                                                  {"index": 7, "records": None}]},
            {"name": "empty", "partition_data": []}]},
        {"transactional_id": None, "acks": 1, "timeout_ms": 0, "topic_data": []},
    ],
    "ProduceResponse": [
        {"responses": [{"name": "orders", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": BIG, "log_append_time_ms": BIG + 1,
             "log_start_offset": BIG - 1, "record_errors": [
                 {"batch_index": 4, "batch_index_error_message": "bad key"},
                 {"batch_index": 5, "batch_index_error_message": None}],
             "error_message": "two records were refused", "current_leader": LEADER},
            {"index": 1, "error_code": 6, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
             "record_errors": [], "error_message": None,
             "current_leader": {"leader_id": -1, "leader_epoch": -1}}]}],
         "throttle_time_ms": 250, "node_endpoints": [NODE, {**NODE, "node_id": 4, "rack": None}]},
    ],
    "FetchRequest": [
        {"cluster_id": "c-42", "replica_id": 2, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52_428_800,
         "isolation_level": 1, "session_id": 77, "session_epoch": 3, "topics": [
             {"topic": "orders", "partitions": [
                 {"partition": 0, "current_leader_epoch": 17, "fetch_offset": BIG, "last_fetched_epoch": 16,
                  "log_start_offset": 12, "partition_max_bytes": 1_048_576},
                 {"partition": 9, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                  "log_start_offset": -1, "partition_max_bytes": 1}]}],
         "forgotten_topics_data": [{"topic": "old", "partitions": [1, 2, 3]}], "rack_id": "rack-a"},
        {"cluster_id": None, "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1,
         "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [],
         "forgotten_topics_data": [], "rack_id": ""},
    ],
    "FetchResponse": [
        {"throttle_time_ms": 9, "error_code": 0, "session_id": 77, "responses": [
            {"topic": "orders", "partitions": [
                {"partition_index": 0, "error_code": 0, "high_watermark": BIG, "last_stable_offset": BIG - 3,
                 "log_start_offset": 5, "diverging_epoch": {"epoch": 15, "end_offset": BIG - 10},
                 "current_leader": LEADER, "snapshot_id": {"end_offset": 4096, "epoch": 2},
                 "aborted_transactions": [{"producer_id": BIG, "first_offset": 11}],
                 "preferred_read_replica": 2, "records": RECORDS},
                {"partition_index": 1, "error_code": 74, "high_watermark": -1, "last_stable_offset": -1,
                 "log_start_offset": -1, "diverging_epoch": {"epoch": -1, "end_offset": -1},
                 "current_leader": {"leader_id": -1, "leader_epoch": -1},
                 "snapshot_id": {"end_offset": -1, "epoch": -1}, "aborted_transactions": None,
                 "preferred_read_replica": -1, "records": None}]}]},
    ],
    "ListOffsetsRequest": [
        {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": "orders", "partitions": [
                {"partition_index": 0, "current_leader_epoch": 17, "timestamp": -2},
                {"partition_index": 1, "current_leader_epoch": -1, "timestamp": 1_700_000_000_000}]}]},
    ],
    "ListOffsetsResponse": [
        {"throttle_time_ms": 3, "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "error_code": 0, "timestamp": 1_700_000_000_000, "offset": BIG,
             "leader_epoch": 17},
            {"partition_index": 1, "error_code": 3, "timestamp": -1, "offset": -1, "leader_epoch": -1}]}]},
    ],
    "MetadataRequest": [
        {"topics": [{"topic_id": U1, "name": "orders"}, {"topic_id": "0" * 32, "name": "clicks"}],
         "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
         "include_topic_authorized_operations": True},
        {"topics": None, "allow_auto_topic_creation": True, "include_cluster_authorized_operations": False,
         "include_topic_authorized_operations": False},
        {"topics": [{"topic_id": U2, "name": None}], "allow_auto_topic_creation": True,
         "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False},
    ],
    "MetadataResponse": [
        {"throttle_time_ms": 5, "brokers": [{"node_id": 1, "host": "b1", "port": 9092, "rack": "r1"},
                                            {"node_id": 2, "host": "b2", "port": 9093, "rack": None}],
         "cluster_id": "c-42", "controller_id": 1, "topics": [
             {"error_code": 0, "name": "orders", "topic_id": U1, "is_internal": True, "partitions": [
                 {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 17,
                  "replica_nodes": [1, 2, 3], "isr_nodes": [1, 2], "offline_replicas": [3]},
                 {"error_code": 5, "partition_index": 1, "leader_id": -1, "leader_epoch": -1,
                  "replica_nodes": [], "isr_nodes": [], "offline_replicas": []}],
              "topic_authorized_operations": 0b1010_1000},
             {"error_code": 3, "name": None, "topic_id": U2, "is_internal": False, "partitions": [],
              "topic_authorized_operations": -2**31}],
         "cluster_authorized_operations": 0b110},
        {"throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": -1, "topics": [],
         "cluster_authorized_operations": -2**31},
    ],
    "OffsetForLeaderEpochRequest": [
        {"replica_id": 2, "topics": [{"topic": "orders", "partitions": [
            {"partition": 0, "current_leader_epoch": 17, "leader_epoch": 15},
            {"partition": 4, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
    ],
    "OffsetForLeaderEpochResponse": [
        {"throttle_time_ms": 1, "topics": [{"topic": "orders", "partitions": [
            {"error_code": 0, "partition": 0, "leader_epoch": 15, "end_offset": BIG},
            {"error_code": 75, "partition": 4, "leader_epoch": -1, "end_offset": -1}]}]},
    ],
    "ApiVersionsRequest": [
        {"client_software_name": "raftka-client", "client_software_version": "0.1.0"},
    ],
    "ApiVersionsResponse": [
        {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 10},
                                       {"api_key": 18, "min_version": 0, "max_version": 3},
                                       {"api_key": WIDE16, "min_version": WIDE16, "max_version": WIDE16}],
         "throttle_time_ms": 7,
         "supported_features": [{"name": "metadata.version", "min_version": 1, "max_version": WIDE16}],
         "finalized_features_epoch": BIG,
         "finalized_features": [{"name": "metadata.version", "max_version_level": WIDE16, "min_version_level": 1}],
         "zk_migration_ready": True},
    ],
    "InitProducerIdRequest": [
        {"transactional_id": "tx-1", "transaction_timeout_ms": 60_000, "producer_id": BIG, "producer_epoch": WIDE16},
        {"transactional_id": None, "transaction_timeout_ms": 0, "producer_id": -1, "producer_epoch": -1},
    ],
    "InitProducerIdResponse": [
        {"throttle_time_ms": 2, "error_code": 0, "producer_id": BIG, "producer_epoch": WIDE16},
        {"throttle_time_ms": 0, "error_code": 47, "producer_id": -1, "producer_epoch": -1},
    ],
    "DescribeClusterRequest": [
        {"include_cluster_authorized_operations": True, "endpoint_type": 2, "include_fenced_brokers": True},
    ],
    "DescribeClusterResponse": [
        {"throttle_time_ms": 4, "error_code": 0, "error_message": "all good", "endpoint_type": 2,
         "cluster_id": "c-42", "controller_id": 1, "brokers": [
             {"broker_id": 1, "host": "b1", "port": 9092, "rack": "r1", "is_fenced": False},
             {"broker_id": 2, "host": "b2", "port": 9093, "rack": None, "is_fenced": True}],
         "cluster_authorized_operations": 0b1_0000_0100},
        {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1, "cluster_id": "",
         "controller_id": -1, "brokers": [], "cluster_authorized_operations": -2**31},
    ],
}
CASES = [pytest.param(m, v, i, id=f"{m.name}-v{v}-{i}")
         for m in MESSAGES for v in m.versions() for i in range(len(BODIES[m.name]))]


def at_version(struct: Struct, version: int, body: dict[str, Any], *, absent: str) -> dict[str, Any]:
    """``body`` as ``version`` can carry it: a null where the field is not yet nullable becomes
    the default; a field the version lacks is dropped (``absent="drop"``), becomes its default
    (``"default"``: what a decoder must hand back) or keeps its value (``"keep"``)."""
    out = {}
    for f in struct.fields:
        value = body[f.name]
        if not in_versions(version, f.versions):
            if absent != "drop":
                out[f.name] = copy.deepcopy(f.default) if absent == "default" else value
            continue
        if value is None and not f.nullable_in(version):
            value = copy.deepcopy(f.default)
        if value is not None and isinstance(f.type, Struct):
            value = at_version(f.type, version, value, absent=absent)
        elif value is not None and isinstance(f.type, Array) and isinstance(f.type.of, Struct):
            value = [at_version(f.type.of, version, x, absent=absent) for x in value]
        out[f.name] = value
    return out


def every_field_named(struct: Struct, body: dict[str, Any]) -> None:
    """A representative body names every declared field, nested ones included."""
    assert set(body) == {f.name for f in struct.fields}, struct.name
    for f in struct.fields:
        value = body[f.name]
        if isinstance(f.type, Struct) and value is not None:
            every_field_named(f.type, value)
        if isinstance(f.type, Array) and isinstance(f.type.of, Struct) and value:
            for x in value:
                every_field_named(f.type.of, x)


# -- 1. compiles ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("message, version", AT_EVERY_VERSION)
def test_compiles_at_every_version(message, version):
    assert callable(encoder(message, version)) and callable(decoder(message, version))


def test_families_are_complete():
    assert [m.name for m in data.REQUESTS] == [m.name.replace("Response", "Request") for m in data.RESPONSES]
    for request, response in zip(data.REQUESTS, data.RESPONSES):
        assert request.api_key == response.api_key and request.valid_versions == response.valid_versions
    expected = {0: "3-10", 1: "4-12", 2: "1-6", 3: "0-12", 23: "2-4", 18: "0-3", 22: "0-4", 60: "0-2"}
    assert {int(m.api_key): m.valid_versions for m in data.REQUESTS} == expected
    for message in MESSAGES:
        for body in BODIES[message.name]:
            every_field_named(message.struct, body)


# -- 2. Kafka's JSON definitions ------------------------------------------------------------------------

def kafka_json(name: str) -> dict[str, Any]:
    pytest.importorskip("kafka.protocol")
    from kafka.protocol.schemas import load_json
    return load_json(name)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def json_default(spec: dict[str, Any], declared: Field) -> Any:
    """Kafka's default of a JSON field, in Raftka's terms."""
    kind = spec["type"]
    default = spec.get("default", "")
    if kind.startswith("[]"):
        return None if default == "null" else []
    if "fields" in spec:  # a (tagged) struct: the struct of its fields' defaults
        return {snake(x["name"]): json_default(x, next(g for g in declared.type.fields if g.name == snake(x["name"])))
                for x in spec["fields"]}
    if default == "null":
        return None
    if kind == "bool":
        return str(default).lower() == "true"
    if kind in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(str(default), 0) if default != "" else 0
    if kind == "string":
        return default
    if kind in ("bytes", "records"):
        return b""
    if kind == "uuid":
        return "0" * 32 if default == "" else uuid.UUID(default).hex
    raise AssertionError(f"unexpected type {kind}")


def version_set(text: str | None, versions: range) -> set[int]:
    return {v for v in versions if text is not None and in_versions(v, text)}


def compare(specs: list[dict[str, Any]], struct: Struct, versions: range, where: str) -> None:
    """``struct`` declares exactly Kafka's fields that exist somewhere in ``versions``, in order."""
    live = [s for s in specs if version_set(s["versions"], versions)]
    assert [f.name for f in struct.fields] == [snake(s["name"]) for s in live], where
    for spec, f in zip(live, struct.fields):
        at = f"{where}.{f.name}"
        exists = version_set(spec["versions"], versions)
        assert version_set(f.versions, versions) == exists, at
        assert not f.nullable, at
        nullable = version_set(spec.get("nullableVersions"), versions) & exists
        assert {v for v in exists if f.nullable_in(v)} == nullable, at
        assert f.tag == spec.get("tag"), at
        assert {v for v in exists if f.tagged_in(v)} == version_set(spec.get("taggedVersions"), versions) & exists, at
        assert f.default == json_default(spec, f), at
        kind = spec["type"]
        if kind.startswith("[]"):
            assert isinstance(f.type, Array), at
            inner = kind[2:]
            if "fields" in spec:
                assert isinstance(f.type.of, Struct) and f.type.of.name == inner, at
                compare(spec["fields"], f.type.of, range(min(exists), max(exists) + 1), at)
            else:
                assert f.type.of == inner, at
        elif "fields" in spec:
            assert isinstance(f.type, Struct) and f.type.name == kind, at
            compare(spec["fields"], f.type, range(min(exists), max(exists) + 1), at)
        else:
            assert f.type == kind, at


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.name)
def test_matches_kafkas_definition(message):
    spec = kafka_json(message.name)
    assert message.api_key == spec["apiKey"] and message.name == spec["name"]
    assert message.flexible_versions == spec["flexibleVersions"]
    low, high = parse_versions(spec["validVersions"])
    ours = message.versions()
    assert low <= ours.start and (high is None or ours.stop - 1 <= high)
    compare(spec["fields"], message.struct, ours, message.name)


# -- 3. round trips ------------------------------------------------------------------------------------

@pytest.mark.parametrize("message, version, i", CASES)
def test_round_trip(message, version, i):
    body = BODIES[message.name][i]
    sent = at_version(message.struct, version, body, absent="drop")
    wire = encoder(message, version)(sent)
    expected = at_version(message.struct, version, body, absent="default")
    assert decoder(message, version)(wire) == expected
    # what the version lacks is not on the wire: a body that still holds it encodes the same
    assert encoder(message, version)(at_version(message.struct, version, body, absent="keep")) == wire


def test_fields_a_version_lacks_decode_to_kafkas_defaults():
    """Spot checks written out by hand (independent of the JSON walk)."""
    produce = decoder(data.PRODUCE_RESPONSE, 4)(encoder(data.PRODUCE_RESPONSE, 4)(BODIES["ProduceResponse"][0]))
    part = produce["responses"][0]["partition_responses"][0]
    assert part["log_start_offset"] == -1 and part["record_errors"] == [] and part["error_message"] is None
    assert part["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
    assert produce["node_endpoints"] == []
    fetch = decoder(data.FETCH_REQUEST, 4)(encoder(data.FETCH_REQUEST, 4)(BODIES["FetchRequest"][0]))
    assert (fetch["session_id"], fetch["session_epoch"], fetch["rack_id"], fetch["cluster_id"]) == (0, -1, "", None)
    assert fetch["topics"][0]["partitions"][0]["current_leader_epoch"] == -1
    assert fetch["topics"][0]["partitions"][0]["log_start_offset"] == -1
    assert fetch["forgotten_topics_data"] == [] and fetch["topics"][0]["partitions"][0]["last_fetched_epoch"] == -1
    meta = decoder(data.METADATA_REQUEST, 0)(encoder(data.METADATA_REQUEST, 0)({"topics": []}))
    assert meta["allow_auto_topic_creation"] is True and meta["include_topic_authorized_operations"] is False
    answer = decoder(data.METADATA_RESPONSE, 0)(encoder(data.METADATA_RESPONSE, 0)(
        at_version(data.METADATA_RESPONSE.struct, 0, BODIES["MetadataResponse"][0], absent="drop")))
    assert answer["controller_id"] == -1 and answer["cluster_id"] is None
    assert answer["topics"][0]["topic_id"] == "0" * 32
    assert answer["topics"][0]["topic_authorized_operations"] == -2**31
    epoch = decoder(data.OFFSET_FOR_LEADER_EPOCH_REQUEST, 2)(
        encoder(data.OFFSET_FOR_LEADER_EPOCH_REQUEST, 2)(BODIES["OffsetForLeaderEpochRequest"][0]))
    assert epoch["replica_id"] == -2
    init = decoder(data.INIT_PRODUCER_ID_REQUEST, 2)(encoder(data.INIT_PRODUCER_ID_REQUEST, 2)(
        BODIES["InitProducerIdRequest"][0]))
    assert (init["producer_id"], init["producer_epoch"]) == (-1, -1)
    cluster = decoder(data.DESCRIBE_CLUSTER_REQUEST, 0)(b"\x01\x00")
    assert cluster == {"include_cluster_authorized_operations": True, "endpoint_type": 1,
                       "include_fenced_brokers": False}


@pytest.mark.parametrize("message, version, wire, body", [
    (data.API_VERSIONS_REQUEST, 3, b"\x07raftka\x040.1\x00",
     {"client_software_name": "raftka", "client_software_version": "0.1"}),
    (data.API_VERSIONS_REQUEST, 2, b"", {"client_software_name": "", "client_software_version": ""}),
    (data.METADATA_REQUEST, 0, b"\x00\x00\x00\x00", {"topics": [], "allow_auto_topic_creation": True,
                                                       "include_cluster_authorized_operations": False,
                                                       "include_topic_authorized_operations": False}),
    (data.METADATA_REQUEST, 4, b"\xff\xff\xff\xff\x00", {"topics": None, "allow_auto_topic_creation": False,
                                                           "include_cluster_authorized_operations": False,
                                                           "include_topic_authorized_operations": False}),
    (data.INIT_PRODUCER_ID_REQUEST, 0, b"\xff\xff\x00\x00\xea\x60",
     {"transactional_id": None, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1}),
    # v12 partition: tagged current_leader (tag 1, 9 bytes: two int32 and an empty tag section)
    (data.FETCH_RESPONSE, 12,
     b"\x00\x00\x00\x00" b"\x00\x00" b"\x00\x00\x00\x00" b"\x02" b"\x02t"
     b"\x02" b"\x00\x00\x00\x01" b"\x00\x00" + (5).to_bytes(8, "big") + (-1).to_bytes(8, "big", signed=True) * 2
     + b"\x00" b"\xff\xff\xff\xff" b"\x00" b"\x01" b"\x01\x09" b"\x00\x00\x00\x02\x00\x00\x00\x07\x00" b"\x00" b"\x00",
     {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [
         {"partition_index": 1, "error_code": 0, "high_watermark": 5, "last_stable_offset": -1,
          "log_start_offset": -1, "diverging_epoch": {"epoch": -1, "end_offset": -1},
          "current_leader": {"leader_id": 2, "leader_epoch": 7}, "snapshot_id": {"end_offset": -1, "epoch": -1},
          "aborted_transactions": None, "preferred_read_replica": -1, "records": None}]}]}),
], ids=["ApiVersions-v3", "ApiVersions-v2", "Metadata-v0-all", "Metadata-v4-all", "InitProducerId-v0",
        "Fetch-v12-tag"])
def test_hand_written_vectors(message, version, wire, body):
    assert encoder(message, version)(body) == wire
    assert decoder(message, version)(wire) == body


# -- 4. kafka-python agrees --------------------------------------------------------------------------------

def kafka_class(message: Message) -> Any:
    pytest.importorskip("kafka.protocol")
    from kafka.protocol import admin, consumer, metadata, producer
    for module in (producer, consumer, metadata, admin):
        if hasattr(module, message.name):
            return getattr(module, message.name)
    raise AssertionError(f"kafka-python has no {message.name}")


# kafka-python renames the authorized-operations fields and reads them as sets of bits.
RENAMED = {"topic_authorized_operations": "authorized_operations",
           "cluster_authorized_operations": "authorized_operations"}
NO_OPERATIONS = -2**31


def kp_field(kp_struct: Any, name: str) -> tuple[str, Any]:
    fields = kp_struct.fields
    kp_name = name if name in fields else RENAMED[name]
    return kp_name, fields[kp_name]


def to_kafka_python(kp_struct: Any, struct: Struct, version: int, body: dict[str, Any], top: bool = False) -> Any:
    values = {}
    for f in struct.fields:
        if not in_versions(version, f.versions):
            continue
        kp_name, field = kp_field(kp_struct, f.name)
        values[kp_name] = kp_value(field, f, version, body[f.name])
    return kp_struct.data_class(version=version, **values) if top else kp_struct.data_class(**values)


def kp_value(field: Any, f: Field, version: int, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(f.type, Struct):
        if f.tagged_in(version) and value == f.default:
            return None  # kafka-python's "not set"
        return to_kafka_python(field, f.type, version, value)
    if isinstance(f.type, Array) and isinstance(f.type.of, Struct):
        return [to_kafka_python(field, f.type.of, version, x) for x in value]
    if f.type == "uuid":
        return uuid.UUID(hex=value)
    if f.name in RENAMED:  # a bit set; -2**31 is "not asked for"
        return None if value == NO_OPERATIONS else {b for b in range(32) if value & (1 << b)}
    return value


def from_kafka_python(kp_struct: Any, struct: Struct, obj: Any) -> dict[str, Any]:
    """Every declared field, read from kafka-python's object (its defaults where the version lacks one)."""
    out = {}
    for f in struct.fields:
        kp_name, field = kp_field(kp_struct, f.name)
        value = getattr(obj, kp_name)
        if isinstance(f.type, Struct):
            value = copy.deepcopy(f.default) if value is None else from_kafka_python(field, f.type, value)
        elif isinstance(f.type, Array) and isinstance(f.type.of, Struct):
            value = None if value is None else [from_kafka_python(field, f.type.of, x) for x in value]
        elif f.type == "uuid":
            value = "0" * 32 if value is None else value.hex
        elif f.name in RENAMED:
            bits = sum(1 << b for b in value) if value is not None else 1 << 31
            value = bits - 2**32 if bits >= 2**31 else bits
        elif isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        out[f.name] = value
    return out


@pytest.mark.parametrize("message, version, i", CASES)
def test_kafka_python_agrees(message, version, i):
    cls = kafka_class(message)
    body = BODIES[message.name][i]
    sent = at_version(message.struct, version, body, absent="drop")
    expected = at_version(message.struct, version, body, absent="default")
    ours = encoder(message, version)(sent)
    theirs = bytes(to_kafka_python(cls._struct, message.struct, version, sent, top=True).encode(version=version))
    assert theirs == ours
    assert decoder(message, version)(theirs) == expected
    assert from_kafka_python(cls._struct, message.struct, cls.decode(ours, version=version)) == expected
