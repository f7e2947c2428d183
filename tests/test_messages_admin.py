"""The admin family's declarations (common/messages/admin.py) against Kafka's wire format.

Every message compiles at every version it declares. A representative body of each (several topics
or resources, nested arrays, nulls, a tagged field) decodes to itself after encoding at every
version, with the fields a version lacks back at their defaults; a few bodies are checked byte for
byte against encodings written here by hand on either side of each flexible boundary. Each
declaration is compared field by field (names, order, types, versions, nullable versions, tags,
defaults) with Kafka's JSON definition shipped by kafka-python, and kafka-python's own encoder and
decoder are cross-checked against ours both ways at every version. Mutants of a declaration (a
wrong type, boundary or default) must fail those checks.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import warnings
from typing import Any

import pytest

from raftka.common.codec import CodecError, decoder, encoder
from raftka.common.messages import admin
from raftka.common.schema import ZERO_UUID
from raftka.common.schema import Array, Field, Message, Struct, in_versions, parse_versions

MESSAGES = admin.REQUESTS + admin.RESPONSES
AT_EVERY_VERSION = [(m, v) for m in MESSAGES for v in m.versions()]
IDS = [f"{m.name}-v{v}" for m, v in AT_EVERY_VERSION]

UUID_A = "5f3c9a0e8b2d4c71a6e0f1d2c3b4a596"
UUID_B = "0123456789abcdef0123456789abcdef"


# -- representative bodies, one per message, shaped for the version ------------------------------------

def create_topics_request(v: int) -> dict:
    return {"topics": [
        {"name": "orders", "num_partitions": -1, "replication_factor": -1,
         "assignments": [{"partition_index": 0, "broker_ids": [1, 2, 3]},
                         {"partition_index": 1, "broker_ids": [2, 3, 1]}],
         "configs": [{"name": "cleanup.policy", "value": "compact"}, {"name": "retention.ms", "value": None}]},
        {"name": "\u00e9v\u00e9nements", "num_partitions": 12, "replication_factor": 3, "assignments": [],
         "configs": []},
    ], "timeout_ms": 30_000, "validate_only": True}


def create_topics_response(v: int) -> dict:
    return {"throttle_time_ms": 5, "topics": [
        {"name": "orders", "topic_id": UUID_A, "error_code": 0, "error_message": None, "topic_config_error_code": 29,
         "num_partitions": 2, "replication_factor": 3, "configs": [
             {"name": "cleanup.policy", "value": "compact", "read_only": False, "config_source": 1,
              "is_sensitive": False},
             {"name": "sasl.jaas.config", "value": None, "read_only": True, "config_source": 5, "is_sensitive": True}]},
        {"name": "taken", "topic_id": ZERO_UUID, "error_code": 36, "error_message": "Topic 'taken' already exists.",
         "topic_config_error_code": 0, "num_partitions": -1, "replication_factor": -1, "configs": None},
    ]}


def delete_topics_request(v: int) -> dict:
    return {"topics": [{"name": "orders", "topic_id": ZERO_UUID}, {"name": None, "topic_id": UUID_B}],
            "topic_names": ["orders", "logs"], "timeout_ms": 15_000}


def delete_topics_response(v: int) -> dict:
    return {"throttle_time_ms": 7, "responses": [
        {"name": "orders", "topic_id": UUID_A, "error_code": 0, "error_message": None},
        {"name": None if v >= 6 else "gone", "topic_id": UUID_B, "error_code": 100, "error_message": "unknown id"},
    ]}


def create_partitions_request(v: int) -> dict:
    return {"topics": [{"name": "orders", "count": 6, "assignments": [{"broker_ids": [1, 2]}, {"broker_ids": [2, 3]}]},
                       {"name": "logs", "count": 4, "assignments": None}],
            "timeout_ms": 10_000, "validate_only": False}


def create_partitions_response(v: int) -> dict:
    return {"throttle_time_ms": 1, "results": [{"name": "orders", "error_code": 0, "error_message": None},
                                               {"name": "logs", "error_code": 37, "error_message": "count must grow"}]}


def delete_records_request(v: int) -> dict:
    return {"topics": [{"name": "orders", "partitions": [{"partition_index": 0, "offset": 1_000_000_000_000},
                                                         {"partition_index": 3, "offset": -1}]},
                       {"name": "logs", "partitions": []}], "timeout_ms": 5_000}


def delete_records_response(v: int) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0, "low_watermark": 1_000_000_000_000, "error_code": 0},
                                          {"partition_index": 3, "low_watermark": -1, "error_code": 6}]}]}


def describe_configs_request(v: int) -> dict:
    return {"resources": [{"resource_type": 2, "resource_name": "orders",
                           "configuration_keys": ["retention.ms", "cleanup.policy"]},
                          {"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
            "include_synonyms": True, "include_documentation": True}


def describe_configs_response(v: int) -> dict:
    return {"throttle_time_ms": 3, "results": [
        {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "orders", "configs": [
            {"name": "retention.ms", "value": "86400000", "read_only": False, "config_source": 1, "is_sensitive": False,
             "synonyms": [{"name": "retention.ms", "value": "86400000", "source": 1},
                          {"name": "log.retention.hours", "value": None, "source": 5}],
             "config_type": 5, "documentation": "How long to keep records."},
            {"name": "ssl.key.password", "value": None, "read_only": True, "config_source": 4, "is_sensitive": True,
             "synonyms": [], "config_type": 9, "documentation": None}]},
        {"error_code": 3, "error_message": "no such topic", "resource_type": 2, "resource_name": "gone",
         "configs": []},
    ]}


def alter_configs_request(v: int) -> dict:
    return {"resources": [{"resource_type": 2, "resource_name": "orders", "configs": [
        {"name": "retention.ms", "value": "3600000"}, {"name": "cleanup.policy", "value": None}]},
        {"resource_type": 4, "resource_name": "", "configs": []}], "validate_only": True}


def alter_configs_response(v: int) -> dict:
    return {"throttle_time_ms": 2, "responses": [
        {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "orders"},
        {"error_code": 40, "error_message": "bad value", "resource_type": 4, "resource_name": "1"}]}


def incremental_alter_configs_request(v: int) -> dict:
    return {"resources": [{"resource_type": 2, "resource_name": "orders", "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "3600000"},
        {"name": "cleanup.policy", "config_operation": 1, "value": None},
        {"name": "follower.replication.throttled.replicas", "config_operation": 2, "value": "0:1"}]}],
        "validate_only": False}


BODIES = {
    "CreateTopicsRequest": create_topics_request, "CreateTopicsResponse": create_topics_response,
    "DeleteTopicsRequest": delete_topics_request, "DeleteTopicsResponse": delete_topics_response,
    "CreatePartitionsRequest": create_partitions_request, "CreatePartitionsResponse": create_partitions_response,
    "DeleteRecordsRequest": delete_records_request, "DeleteRecordsResponse": delete_records_response,
    "DescribeConfigsRequest": describe_configs_request, "DescribeConfigsResponse": describe_configs_response,
    "AlterConfigsRequest": alter_configs_request, "AlterConfigsResponse": alter_configs_response,
    "IncrementalAlterConfigsRequest": incremental_alter_configs_request,
    "IncrementalAlterConfigsResponse": alter_configs_response,
}


def body_of(message: Message, version: int) -> dict:
    return BODIES[message.name](version)


def at_version(struct: Struct, body: dict, version: int) -> dict:
    """``body`` as a decoder at ``version`` gives it back: the fields the version lacks, or the
    body leaves out, at their defaults, nested structs alike."""
    out = {}
    for f in struct.fields:
        if not in_versions(version, f.versions) or f.name not in body:
            out[f.name] = copy.deepcopy(f.default)
            continue
        value = body[f.name]
        if isinstance(f.type, Array) and isinstance(f.type.of, Struct) and value is not None:
            value = [at_version(f.type.of, entry, version) for entry in value]
        out[f.name] = value
    return out


# -- the module --------------------------------------------------------------------------------------------

def test_the_module_lists_each_api_once_request_and_response_alike():
    keys = [m.api_key for m in admin.REQUESTS]
    assert keys == [19, 20, 21, 32, 33, 37, 44]
    assert [m.api_key for m in admin.RESPONSES] == keys
    for request, response in zip(admin.REQUESTS, admin.RESPONSES):
        assert request.name.endswith("Request") and response.name == request.name[:-7] + "Response"
        assert (request.valid_versions, request.flexible_versions) == (response.valid_versions,
                                                                       response.flexible_versions)
    assert set(BODIES) == {m.name for m in MESSAGES}


@pytest.mark.parametrize("message, version", AT_EVERY_VERSION, ids=IDS)
def test_every_message_compiles_at_every_version(message, version):
    assert callable(encoder(message, version)) and callable(decoder(message, version))


def test_versions_outside_the_declared_range_do_not_compile():
    for message in MESSAGES:
        low, high = parse_versions(message.valid_versions)
        for version in (low - 1, high + 1):
            if version >= 0:
                with pytest.raises(ValueError):
                    encoder(message, version)


# -- round trips -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("message, version", AT_EVERY_VERSION, ids=IDS)
def test_a_representative_body_decodes_to_itself_after_encoding(message, version):
    body = body_of(message, version)
    wire = encoder(message, version)(body)
    decoded = decoder(message, version)(wire)
    assert typed(decoded) == typed(at_version(message.struct, body, version))
    assert encoder(message, version)(decoded) == wire


def test_version_boundaries_seen_in_decoded_bodies():
    def round_trip(message: Message, version: int, body: dict) -> dict:
        return decoder(message, version)(encoder(message, version)(body))

    request = delete_topics_request(6)
    v5, v6 = round_trip(admin.DELETE_TOPICS_REQUEST, 5, request), round_trip(admin.DELETE_TOPICS_REQUEST, 6, request)
    assert v5["topics"] == [] and v5["topic_names"] == ["orders", "logs"]
    assert v6["topic_names"] == [] and v6["topics"][1] == {"name": None, "topic_id": UUID_B}
    assert round_trip(admin.DELETE_TOPICS_RESPONSE, 4, delete_topics_response(4))["responses"][1]["error_message"] \
        is None  # Kafka's default for a version without the field: null
    assert round_trip(admin.DELETE_TOPICS_RESPONSE, 5, delete_topics_response(5))["responses"][1]["error_message"] \
        == "unknown id"

    created = create_topics_response(7)
    old = round_trip(admin.CREATE_TOPICS_RESPONSE, 4, created)["topics"][0]
    assert (old["topic_id"], old["topic_config_error_code"], old["num_partitions"], old["replication_factor"],
            old["configs"]) == (ZERO_UUID, 0, -1, -1, [])
    flexible = round_trip(admin.CREATE_TOPICS_RESPONSE, 5, created)["topics"][0]
    assert (flexible["topic_id"], flexible["topic_config_error_code"], flexible["num_partitions"]) == (ZERO_UUID, 29, 2)
    assert round_trip(admin.CREATE_TOPICS_RESPONSE, 7, created)["topics"][0]["topic_id"] == UUID_A
    assert round_trip(admin.CREATE_TOPICS_REQUEST, 2, {"topics": []}) == {
        "topics": [], "timeout_ms": 60_000, "validate_only": False}

    described = describe_configs_response(4)
    entry = round_trip(admin.DESCRIBE_CONFIGS_RESPONSE, 2, described)["results"][0]["configs"][0]
    assert (entry["config_type"], entry["documentation"], entry["config_source"]) == (0, "", 1)
    assert len(entry["synonyms"]) == 2
    assert round_trip(admin.DESCRIBE_CONFIGS_REQUEST, 2, describe_configs_request(2))["include_documentation"] is False
    assert round_trip(admin.DESCRIBE_CONFIGS_REQUEST, 3, describe_configs_request(3))["include_documentation"] is True


def test_nulls_only_where_kafka_allows_them():
    with pytest.raises(CodecError) as caught:
        encoder(admin.DELETE_TOPICS_RESPONSE, 5)(delete_topics_response(6))  # a null name before v6
    assert caught.value.field == "responses[1].name"
    with pytest.raises(CodecError):
        encoder(admin.CREATE_TOPICS_REQUEST, 5)({"topics": [{"name": None}]})
    with pytest.raises(CodecError):
        encoder(admin.DESCRIBE_CONFIGS_RESPONSE, 4)({"results": [{"resource_name": None}]})


# -- byte for byte, by hand, either side of each flexible boundary ----------------------------------------

_UUID_B_BYTES = bytes.fromhex(UUID_B)
ONE = b"\x00\x00\x00\x01"
HAND_VECTORS = [
    # (message, version, body, wire)
    (admin.CREATE_TOPICS_REQUEST, 4, {"topics": [], "timeout_ms": 1, "validate_only": True},
     b"\x00\x00\x00\x00" + ONE + b"\x01"),
    (admin.CREATE_TOPICS_REQUEST, 5, {"topics": [], "timeout_ms": 1, "validate_only": True},
     b"\x01" + ONE + b"\x01" b"\x00"),
    (admin.CREATE_TOPICS_RESPONSE, 4, {"throttle_time_ms": 0, "topics": [{"name": "a", "error_code": 0,
                                                                        "error_message": None}]},
     b"\x00\x00\x00\x00" + ONE + b"\x00\x01a" b"\x00\x00" b"\xff\xff"),
    # v5: compact strings and arrays, a null configs array, the tagged config error code (tag 0, 2 bytes)
    (admin.CREATE_TOPICS_RESPONSE, 5, {"throttle_time_ms": 0, "topics": [
        {"name": "a", "error_code": 0, "error_message": None, "topic_config_error_code": 3, "num_partitions": 1,
         "replication_factor": 1, "configs": None}]},
     b"\x00\x00\x00\x00" b"\x02" b"\x02a" b"\x00\x00" b"\x00" + ONE + b"\x00\x01" b"\x00"
     b"\x01\x00\x02\x00\x03" b"\x00"),
    (admin.DELETE_TOPICS_REQUEST, 3, {"topic_names": ["a"], "timeout_ms": 1}, ONE + b"\x00\x01a" + ONE),
    (admin.DELETE_TOPICS_REQUEST, 4, {"topic_names": ["a"], "timeout_ms": 1}, b"\x02\x02a" + ONE + b"\x00"),
    (admin.DELETE_TOPICS_REQUEST, 6, {"topics": [{"name": None, "topic_id": UUID_B}], "timeout_ms": 1},
     b"\x02" b"\x00" + _UUID_B_BYTES + b"\x00" + ONE + b"\x00"),
    (admin.DELETE_RECORDS_REQUEST, 1, {"topics": [], "timeout_ms": 1}, b"\x00\x00\x00\x00" + ONE),
    (admin.DELETE_RECORDS_REQUEST, 2, {"topics": [], "timeout_ms": 1}, b"\x01" + ONE + b"\x00"),
    (admin.CREATE_PARTITIONS_REQUEST, 1, {"topics": [{"name": "a", "count": 2, "assignments": None}],
                                          "timeout_ms": 1, "validate_only": False},
     ONE + b"\x00\x01a" b"\x00\x00\x00\x02" b"\xff\xff\xff\xff" + ONE + b"\x00"),
    (admin.CREATE_PARTITIONS_REQUEST, 2, {"topics": [{"name": "a", "count": 2, "assignments": None}],
                                          "timeout_ms": 1, "validate_only": False},
     b"\x02\x02a" b"\x00\x00\x00\x02" b"\x00" b"\x00" + ONE + b"\x00" b"\x00"),
    (admin.DESCRIBE_CONFIGS_REQUEST, 3, {"resources": [{"resource_type": 2, "resource_name": "a",
                                                        "configuration_keys": None}],
                                         "include_synonyms": False, "include_documentation": True},
     ONE + b"\x02" b"\x00\x01a" b"\xff\xff\xff\xff" b"\x00\x01"),
    (admin.DESCRIBE_CONFIGS_REQUEST, 4, {"resources": [{"resource_type": 2, "resource_name": "a",
                                                        "configuration_keys": None}],
                                         "include_synonyms": False, "include_documentation": True},
     b"\x02" b"\x02" b"\x02a" b"\x00" b"\x00" b"\x00\x01" b"\x00"),
    (admin.ALTER_CONFIGS_REQUEST, 1, {"resources": [], "validate_only": True}, b"\x00\x00\x00\x00\x01"),
    (admin.ALTER_CONFIGS_REQUEST, 2, {"resources": [], "validate_only": True}, b"\x01\x01\x00"),
    (admin.INCREMENTAL_ALTER_CONFIGS_REQUEST, 0, {"resources": [{"resource_type": 2, "resource_name": "a", "configs": [
        {"name": "b", "config_operation": 1, "value": None}]}], "validate_only": False},
     ONE + b"\x02" b"\x00\x01a" + ONE + b"\x00\x01b" b"\x01" b"\xff\xff" b"\x00"),
    (admin.INCREMENTAL_ALTER_CONFIGS_REQUEST, 1, {"resources": [{"resource_type": 2, "resource_name": "a", "configs": [
        {"name": "b", "config_operation": 1, "value": None}]}], "validate_only": False},
     b"\x02" b"\x02" b"\x02a" b"\x02" b"\x02b" b"\x01" b"\x00" b"\x00" b"\x00" b"\x00" b"\x00"),
    (admin.INCREMENTAL_ALTER_CONFIGS_RESPONSE, 1, {"throttle_time_ms": 0, "responses": [
        {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "a"}]},
     b"\x00\x00\x00\x00" b"\x02" b"\x00\x00" b"\x00" b"\x02" b"\x02a" b"\x00" b"\x00"),
]


@pytest.mark.parametrize("message, version, body, wire", HAND_VECTORS,
                         ids=[f"{m.name}-v{v}" for m, v, _, _ in HAND_VECTORS])
def test_hand_written_encodings(message, version, body, wire):
    assert encoder(message, version)(body) == wire
    assert decoder(message, version)(wire) == at_version(message.struct, body, version)


# -- against Kafka's JSON definitions ---------------------------------------------------------------------

@functools.cache
def kafka_json(name: str) -> dict:
    pytest.importorskip("kafka.protocol")
    from kafka.protocol.schemas import load_json
    with warnings.catch_warnings():  # its loader uses importlib.resources' deprecated read_text
        warnings.simplefilter("ignore", DeprecationWarning)
        return load_json(name)  # type: ignore[no-any-return]


def snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))


def overlaps(versions: str, low: int, high: int) -> bool:
    first, last = parse_versions(versions)
    return first <= high and (last is None or last >= low)


def expected_default(spec: dict) -> Any:
    """The brief's translation of Kafka's default: its value when given, else the type's zero."""
    kind, given = spec["type"], spec.get("default")
    if kind.startswith("[]"):
        return None if given == "null" else []
    if given == "null":
        return None
    if kind == "bool":
        return given == "true"
    if kind in ("int8", "int16", "int32", "int64", "uint16"):
        return int(given, 0) if given else 0
    if kind == "uuid":
        return ZERO_UUID
    return given or ""


def compare_fields(specs: list[dict], fields: tuple[Field, ...], low: int, high: int, where: str) -> None:
    live = [s for s in specs if overlaps(s["versions"], low, high)]
    assert [snake(s["name"]) for s in live] == [f.name for f in fields], where
    for spec, f in zip(live, fields):
        at = f"{where}.{f.name}"
        assert f.versions == spec["versions"], at
        assert f.nullable is False and f.nullable_versions == spec.get("nullableVersions"), at
        assert (f.tag, f.tagged_versions) == (spec.get("tag"), spec.get("taggedVersions")), at
        assert f.flexible_versions == spec.get("flexibleVersions"), at
        assert f.default == expected_default(spec) and type(f.default) is type(expected_default(spec)), at
        kind = spec["type"]
        if kind.startswith("[]"):
            assert isinstance(f.type, Array), at
            if "fields" in spec:
                assert isinstance(f.type.of, Struct) and f.type.of.name == kind[2:], at
                compare_fields(spec["fields"], f.type.of.fields, low, high, at)
            else:
                assert f.type.of == kind[2:], at
        else:
            assert f.type == kind and "fields" not in spec, at


def compare_with_kafka(message: Message) -> None:
    spec = kafka_json(message.name)
    assert (message.api_key, message.name) == (spec["apiKey"], spec["name"])
    assert message.valid_versions == spec["validVersions"]
    assert message.flexible_versions == spec["flexibleVersions"]
    low, high = parse_versions(message.valid_versions)
    compare_fields(spec["fields"], message.fields, low, high, message.name)


@pytest.mark.parametrize("message", MESSAGES, ids=[m.name for m in MESSAGES])
def test_declaration_matches_kafkas_definition(message):
    compare_with_kafka(message)


# -- against kafka-python's encoder and decoder -----------------------------------------------------------

@functools.cache
def kafka_classes() -> dict[str, type]:
    pytest.importorskip("kafka.protocol")
    from kafka.protocol.admin import configs, topics
    return {name: getattr(module, name) for module in (configs, topics) for name in module.__all__}


def to_kafka(cls: type, struct: Struct, body: dict, version: int, *, top: bool = False) -> Any:
    """Our body as a kafka-python object of ``cls`` at ``version`` (nested entries as its generated
    classes); it writes the fields Kafka has at ``version``, whatever we declare."""
    values = {}
    for f in struct.fields:
        if f.name not in body:
            continue
        value = body[f.name]
        if isinstance(f.type, Array) and isinstance(f.type.of, Struct) and value is not None:
            entry_cls = cls._struct.fields[f.name].data_class
            value = [to_kafka(entry_cls, f.type.of, entry, version) for entry in value]
        values[f.name] = value
    if not top:
        return cls(**values)
    if struct.name == "DeleteTopicsRequest" and version <= 5:
        values.pop("topics", None)  # else kafka-python's encode() fills topic_names from it, a client nicety
    return cls(**values, version=version)


def typed(value: Any) -> Any:
    """``value`` with each scalar's type beside it, so that True and 1 differ."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def from_kafka(obj: Any, struct: Struct) -> dict:
    """A kafka-python object read through our declaration: every field we declare, those its
    version lacks at kafka-python's defaults; uuids as our 32 hex digits (its null: the zero uuid)."""
    out = {}
    for f in struct.fields:
        value = getattr(obj, f.name)
        if isinstance(f.type, Array) and isinstance(f.type.of, Struct) and value is not None:
            value = [from_kafka(entry, f.type.of) for entry in value]
        elif f.type == "uuid":
            value = ZERO_UUID if value is None else value.hex
        out[f.name] = value
    return out


def cross_check(message: Message, version: int, body: dict) -> None:
    cls = kafka_classes()[message.name]
    theirs = to_kafka(cls, message.struct, body, version, top=True).encode(version=version)
    ours = encoder(message, version)(body)
    expected = at_version(message.struct, body, version)
    assert typed(decoder(message, version)(theirs)) == typed(expected)  # kafka-python encodes, we decode
    assert typed(from_kafka(cls.decode(ours, version=version), message.struct)) == typed(expected)  # and back
    assert ours == theirs


@pytest.mark.parametrize("message, version", AT_EVERY_VERSION, ids=IDS)
def test_bytes_agree_with_kafka_python_both_ways(message, version):
    cross_check(message, version, body_of(message, version))


def sparse(struct: Struct, body: dict) -> dict:
    """Only ``body``'s arrays of structs, their entries alike sparse: every other field left to
    its default, as a handler may leave a field out when Kafka's default is what it means."""
    out = {}
    for f in struct.fields:
        if isinstance(f.type, Array) and isinstance(f.type.of, Struct):
            entries = body[f.name]
            out[f.name] = None if entries is None else [sparse(f.type.of, entry) for entry in entries]
    return out


@pytest.mark.parametrize("message, version", AT_EVERY_VERSION, ids=IDS)
def test_fields_left_out_get_kafka_pythons_defaults(message, version):
    cross_check(message, version, sparse(message.struct, body_of(message, version)))


def empty_check(message: Message, version: int) -> None:
    """Every top-level field at its default, on both sides."""
    cls = kafka_classes()[message.name]
    ours = encoder(message, version)({})
    defaults = typed(decoder(message, version)(ours))
    assert typed(from_kafka(cls.decode(ours, version=version), message.struct)) == defaults
    assert typed(decoder(message, version)(cls(version=version).encode(version=version))) == defaults


@pytest.mark.parametrize("message, version", AT_EVERY_VERSION, ids=IDS)
def test_an_empty_body_agrees_with_kafka_python(message, version):
    empty_check(message, version)


# -- the checks above catch a wrong declaration -----------------------------------------------------------

def mutate(message: Message, path: list[str], **changes: Any) -> Message:
    """``message`` with the field at ``path`` (names through arrays of structs) changed."""
    def rebuilt(fields: tuple[Field, ...], rest: list[str]) -> tuple[Field, ...]:
        out = []
        for f in fields:
            if f.name == rest[0]:
                if len(rest) == 1:
                    f = dataclasses.replace(f, **changes)
                else:
                    of = f.type.of  # type: ignore[union-attr]
                    f = dataclasses.replace(f, type=dataclasses.replace(
                        f.type, of=Struct(of.name, rebuilt(of.fields, rest[1:]))))  # type: ignore[arg-type]
            out.append(f)
        return tuple(out)
    return Message(message.api_key, message.name, message.valid_versions, rebuilt(message.fields, path),
                   flexible_versions=message.flexible_versions)


MUTANTS = [
    ("wrong type", admin.DELETE_RECORDS_REQUEST, ["topics", "partitions", "offset"], {"type": "int32"}),
    ("wrong type", admin.ALTER_CONFIGS_REQUEST, ["validate_only"], {"type": "int8"}),  # the same byte on the wire
    ("wrong boundary", admin.CREATE_TOPICS_RESPONSE, ["topics", "topic_config_error_code"], {"versions": "6+"}),
    ("wrong boundary", admin.CREATE_TOPICS_RESPONSE, ["topics", "topic_id"], {"versions": "6+"}),
    ("wrong boundary", admin.DESCRIBE_CONFIGS_REQUEST, ["include_documentation"], {"versions": "2+"}),
    ("wrong default", admin.CREATE_TOPICS_RESPONSE, ["topics", "num_partitions"], {"default": 0}),
    ("wrong default", admin.DESCRIBE_CONFIGS_RESPONSE, ["results", "configs", "config_source"], {"default": 0}),
    ("wrong default", admin.DELETE_TOPICS_RESPONSE, ["responses", "error_message"], {"default": ""}),
    ("wrong default", admin.CREATE_TOPICS_REQUEST, ["timeout_ms"], {"default": 0}),
    ("wrong nullability", admin.CREATE_PARTITIONS_REQUEST, ["topics", "assignments"], {"nullable_versions": None}),
    ("wrong tag", admin.CREATE_TOPICS_RESPONSE, ["topics", "topic_config_error_code"], {"tag": 1}),
]


@pytest.mark.parametrize("what, message, path, changes", MUTANTS, ids=[f"{w}-{'.'.join(p)}" for w, _, p, _ in MUTANTS])
def test_a_mutant_declaration_fails_the_checks(what, message, path, changes):
    mutant = mutate(message, path, **changes)
    with pytest.raises(AssertionError):
        compare_with_kafka(mutant)
    failed = 0
    for version in mutant.versions():
        try:
            cross_check(mutant, version, body_of(message, version))
            cross_check(mutant, version, sparse(mutant.struct, body_of(message, version)))
            empty_check(mutant, version)
        except (AssertionError, CodecError):
            failed += 1
    assert failed, f"{what}: kafka-python's bytes did not tell the mutant apart"
