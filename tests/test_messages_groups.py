"""The group coordinator's messages (common/messages/groups.py) against Kafka's.

Proves four things. Every request and response compiles to an encoder and a decoder at every
version Raftka serves. A hand-written body per message, with nested arrays and non-default values
in every field of every version, decodes to itself after encoding at each version, with the
fields that version lacks read as their defaults; so does the same body with every field that may
be null at that version set to null (and a flexible body skips a tag it does not know). Each
declaration matches Kafka's own definition (the JSON files kafka-python ships) field by field:
name, order, type, versions, nullable versions, default, struct names and flexible versions, and
each range is the one this family documents. And the bytes agree with kafka-python's independent
codec both ways at every version: kafka-python's encoding is byte for byte ours, our decoder reads
kafka-python's bytes, and kafka-python reads ours (its defaults for the fields a version lacks
included). The last tests break a declaration on purpose (a type, a version boundary, a default)
and show that the checks above catch each.

One field is not Kafka's: Raftka's documented extension, HeartbeatRequest v4's tagged
``max_wait_ms`` (common/messages/groups.py). The Kafka comparison leaves out exactly the fields
listed in ``RAFTKA_EXTENSIONS``, after checking each is tagged in Raftka's tag range and that no
other field is; the byte comparison shows kafka-python skips the tag, and writes the same bytes
as ours when the extension is at its default (absent).
"""
from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import pytest

from raftka.common.api import ApiKey
from raftka.common.codec import decoder, encoder
from raftka.common.messages import groups
from raftka.common.messages.groups import (DESCRIBE_GROUPS_RESPONSE, HEARTBEAT_REQUEST, JOIN_GROUP_REQUEST,
                                           OFFSET_FETCH_RESPONSE, RAFTKA_TAG_MIN, REQUESTS, RESPONSES)
from raftka.common.schema import Array, Field, Message, Struct, in_versions, parse_versions

# kafka-python 3.0.12 reads its JSON with importlib.resources' deprecated read_text.
pytestmark = pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")

MESSAGES = REQUESTS + RESPONSES
CASES = [(m, v) for m in MESSAGES for v in m.versions()]
CASE_IDS = [f"{m.name}-v{v}" for m, v in CASES]

# The ranges this family serves (its module docstring says why each stops where it does).
EXPECTED_RANGES = {
    "FindCoordinator": "0-4", "JoinGroup": "0-9", "Heartbeat": "0-4", "LeaveGroup": "0-5", "SyncGroup": "0-5",
    "OffsetCommit": "2-8", "OffsetFetch": "1-8", "DescribeGroups": "0-5", "ListGroups": "0-4",
    "DeleteGroups": "0-2", "OffsetDelete": "0",
}
API_KEYS = {
    "FindCoordinator": ApiKey.FIND_COORDINATOR, "JoinGroup": ApiKey.JOIN_GROUP, "Heartbeat": ApiKey.HEARTBEAT,
    "LeaveGroup": ApiKey.LEAVE_GROUP, "SyncGroup": ApiKey.SYNC_GROUP, "OffsetCommit": ApiKey.OFFSET_COMMIT,
    "OffsetFetch": ApiKey.OFFSET_FETCH, "DescribeGroups": ApiKey.DESCRIBE_GROUPS, "ListGroups": ApiKey.LIST_GROUPS,
    "DeleteGroups": ApiKey.DELETE_GROUPS, "OffsetDelete": 47,
}

# Raftka's own fields (top level, tagged from RAFTKA_TAG_MIN on), by message: the only fields Kafka's
# definitions are allowed to lack.
RAFTKA_EXTENSIONS = {"HeartbeatRequest": ("max_wait_ms",)}

# -- representative bodies: every field of every version, none at its default -------------------------

META = b"\x00\x01\x00\x00\x00\x01\x00\x06orders" + bytes(range(40))  # a consumer subscription's shape

BODIES: dict[str, dict[str, Any]] = {
    "FindCoordinatorRequest": {"key": "orders-app", "key_type": 1,
                               "coordinator_keys": ["orders-app", "billing", "caf\u00e9"]},
    "FindCoordinatorResponse": {
        "throttle_time_ms": 12, "error_code": 15, "error_message": "loading", "node_id": 3, "host": "broker-3",
        "port": 19092,
        "coordinators": [
            {"key": "orders-app", "node_id": 1, "host": "broker-1", "port": 9092, "error_code": 0,
             "error_message": "fine"},
            {"key": "billing", "node_id": -1, "host": "", "port": -1, "error_code": 15,
             "error_message": "coordinator not available"},
        ]},
    "JoinGroupRequest": {
        "group_id": "orders-app", "session_timeout_ms": 45_000, "rebalance_timeout_ms": 300_000,
        "member_id": "consumer-1-0f3a", "group_instance_id": "pod-7", "protocol_type": "consumer",
        "protocols": [{"name": "cooperative-sticky", "metadata": META}, {"name": "range", "metadata": b""}],
        "reason": "rebalance after metadata change"},
    "JoinGroupResponse": {
        "throttle_time_ms": 5, "error_code": 79, "generation_id": 42, "protocol_type": "consumer",
        "protocol_name": "range", "leader": "consumer-1-0f3a", "skip_assignment": True,
        "member_id": "consumer-2-77b1",
        "members": [{"member_id": "consumer-1-0f3a", "group_instance_id": "pod-7", "metadata": META},
                    {"member_id": "consumer-2-77b1", "group_instance_id": "pod-8", "metadata": b"\xff"}]},
    "HeartbeatRequest": {"group_id": "orders-app", "generation_id": 42, "member_id": "consumer-1-0f3a",
                         "group_instance_id": "pod-7", "max_wait_ms": 3000},
    "HeartbeatResponse": {"throttle_time_ms": 9, "error_code": 27},
    "LeaveGroupRequest": {
        "group_id": "orders-app", "member_id": "consumer-1-0f3a",
        "members": [{"member_id": "consumer-1-0f3a", "group_instance_id": "pod-7", "reason": "shutting down"},
                    {"member_id": "", "group_instance_id": "pod-8", "reason": "scaled in"}]},
    "LeaveGroupResponse": {
        "throttle_time_ms": 3, "error_code": 25,
        "members": [{"member_id": "consumer-1-0f3a", "group_instance_id": "pod-7", "error_code": 0},
                    {"member_id": "gone", "group_instance_id": "pod-9", "error_code": 25}]},
    "SyncGroupRequest": {
        "group_id": "orders-app", "generation_id": 42, "member_id": "consumer-1-0f3a",
        "group_instance_id": "pod-7", "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": "consumer-1-0f3a", "assignment": META},
                        {"member_id": "consumer-2-77b1", "assignment": b"\x00\x03"}]},
    "SyncGroupResponse": {"throttle_time_ms": 2, "error_code": 27, "protocol_type": "consumer",
                          "protocol_name": "range", "assignment": META},
    "OffsetCommitRequest": {
        "group_id": "orders-app", "generation_id_or_member_epoch": 42, "member_id": "consumer-1-0f3a",
        "group_instance_id": "pod-7", "retention_time_ms": 86_400_000,
        "topics": [
            {"name": "orders", "partitions": [
                {"partition_index": 0, "committed_offset": 1_234_567_890_123, "committed_leader_epoch": 7,
                 "committed_metadata": "batch-17"},
                {"partition_index": 5, "committed_offset": 0, "committed_leader_epoch": 8,
                 "committed_metadata": ""}]},
            {"name": "payments", "partitions": [
                {"partition_index": 2, "committed_offset": 99, "committed_leader_epoch": 1,
                 "committed_metadata": "n\u00e9"}]},
        ]},
    "OffsetCommitResponse": {
        "throttle_time_ms": 4,
        "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "error_code": 0},
                                                     {"partition_index": 5, "error_code": 22}]},
                   {"name": "payments", "partitions": [{"partition_index": 2, "error_code": 3}]}]},
    "OffsetFetchRequest": {
        "group_id": "orders-app",
        "topics": [{"name": "orders", "partition_indexes": [0, 5, 9]}, {"name": "payments", "partition_indexes": []}],
        "groups": [
            {"group_id": "orders-app", "topics": [{"name": "orders", "partition_indexes": [0, 5]}]},
            {"group_id": "billing", "topics": [{"name": "invoices", "partition_indexes": [1]},
                                               {"name": "refunds", "partition_indexes": [0, 2, 4]}]},
        ],
        "require_stable": True},
    "OffsetFetchResponse": {
        "throttle_time_ms": 6,
        "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "committed_offset": 1_234_567_890_123, "committed_leader_epoch": 7,
             "metadata": "batch-17", "error_code": 0},
            {"partition_index": 5, "committed_offset": 17, "committed_leader_epoch": 2, "metadata": "",
             "error_code": 88}]}],
        "error_code": 16,
        "groups": [
            {"group_id": "orders-app", "topics": [{"name": "orders", "partitions": [
                {"partition_index": 0, "committed_offset": 55, "committed_leader_epoch": 3, "metadata": "m",
                 "error_code": 0}]}], "error_code": 0},
            {"group_id": "billing", "topics": [], "error_code": 69},
        ]},
    "DescribeGroupsRequest": {"groups": ["orders-app", "billing"], "include_authorized_operations": True},
    "DescribeGroupsResponse": {
        "throttle_time_ms": 8,
        "groups": [
            {"error_code": 0, "group_id": "orders-app", "group_state": "Stable", "protocol_type": "consumer",
             "protocol_data": "range",
             "members": [{"member_id": "consumer-1-0f3a", "group_instance_id": "pod-7", "client_id": "app-1",
                          "client_host": "/10.0.0.7", "member_metadata": META, "member_assignment": b"\x00\x01"},
                         {"member_id": "consumer-2-77b1", "group_instance_id": "pod-8", "client_id": "app-2",
                          "client_host": "/10.0.0.8", "member_metadata": b"\x02", "member_assignment": b""}],
             "authorized_operations": 0b1011_1000},
            {"error_code": 69, "group_id": "billing", "group_state": "Dead", "protocol_type": "", "protocol_data": "",
             "members": [], "authorized_operations": 0x7fff_ffff},
        ]},
    "ListGroupsRequest": {"states_filter": ["Stable", "PreparingRebalance"]},
    "ListGroupsResponse": {
        "throttle_time_ms": 1, "error_code": 14,
        "groups": [{"group_id": "orders-app", "protocol_type": "consumer", "group_state": "Stable"},
                   {"group_id": "connect-sink", "protocol_type": "connect", "group_state": "Empty"}]},
    "DeleteGroupsRequest": {"groups_names": ["orders-app", "billing", "old"]},
    "DeleteGroupsResponse": {"throttle_time_ms": 11, "results": [{"group_id": "orders-app", "error_code": 0},
                                                                  {"group_id": "billing", "error_code": 68}]},
    "OffsetDeleteRequest": {"group_id": "orders-app", "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0}, {"partition_index": 5}]},
        {"name": "payments", "partitions": [{"partition_index": 2}]}]},
    "OffsetDeleteResponse": {"error_code": 0, "throttle_time_ms": 10, "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0, "error_code": 0},
                                          {"partition_index": 5, "error_code": 86}]}]},
}


def _struct_array(f: Field) -> Struct | None:
    return f.type.of if isinstance(f.type, Array) and isinstance(f.type.of, Struct) else None


def typed(value: Any) -> Any:
    """``value`` with each scalar paired with its type, so True and 1 (bool and int8) differ."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    return type(value).__name__, value


def at_version(struct: Struct, body: dict[str, Any], version: int) -> dict[str, Any]:
    """What ``body`` decodes to at ``version``: the fields that version lacks at their defaults."""
    out: dict[str, Any] = {}
    for f in struct.fields:
        if not in_versions(version, f.versions):
            out[f.name] = copy.deepcopy(f.default)
            continue
        value = body[f.name]
        inner = _struct_array(f)
        if inner is not None and value is not None:
            value = [at_version(inner, entry, version) for entry in value]
        out[f.name] = value
    return out


def with_nulls(struct: Struct, body: dict[str, Any], version: int) -> dict[str, Any]:
    """``body`` with each field that may be null at ``version`` set to null (in arrays of structs:
    in the first entry only, so the others keep their values)."""
    out = dict(body)
    for f in struct.fields:
        if not in_versions(version, f.versions):
            continue
        inner = _struct_array(f)
        if f.nullable_in(version):
            out[f.name] = None
        elif inner is not None and out[f.name]:
            out[f.name] = [with_nulls(inner, out[f.name][0], version), *out[f.name][1:]]
    return out


def bodies(message: Message, version: int) -> list[dict[str, Any]]:
    """The representative body at ``version`` and its variant with nulls (when there are any)."""
    full = at_version(message.struct, BODIES[message.name], version)
    nulls = with_nulls(message.struct, full, version)
    return [full] if nulls == full else [full, nulls]


def test_every_message_has_a_body_an_api_key_and_the_documented_range():
    assert {m.name for m in MESSAGES} == set(BODIES)
    assert [m.name for m in REQUESTS] == [m.name.replace("Response", "Request") for m in RESPONSES]
    for message in MESSAGES:
        api = message.name.removesuffix("Request").removesuffix("Response")
        assert message.valid_versions == EXPECTED_RANGES[api], message.name
        assert message.api_key == API_KEYS[api], message.name
    assert ApiKey.OFFSET_DELETE == 47


@pytest.mark.parametrize("message, version", CASES, ids=CASE_IDS)
def test_every_message_compiles_at_every_version(message, version):
    assert callable(encoder(message, version)) and callable(decoder(message, version))


@pytest.mark.parametrize("message, version", CASES, ids=CASE_IDS)
def test_a_representative_body_decodes_to_itself_at_every_version(message, version):
    encode, decode = encoder(message, version), decoder(message, version)
    for body in bodies(message, version):
        assert typed(decode(encode(body))) == typed(body)
    # Fields a version lacks are not written: the full body (every version's fields) encodes
    # exactly as its projection at this version does.
    full = BODIES[message.name]
    assert encode(full) == encode(at_version(message.struct, full, version))


@pytest.mark.parametrize("message, version", [c for c in CASES if c[0].flexible(c[1])],
                         ids=[i for c, i in zip(CASES, CASE_IDS) if c[0].flexible(c[1])])
def test_a_flexible_body_skips_a_tagged_field_it_does_not_know(message, version):
    body = bodies(message, version)[0]
    body.update({f.name: f.default for f in message.fields if f.tag is not None})  # no tag of ours written
    data = encoder(message, version)(body)
    assert data[-1] == 0  # the top-level struct's empty tagged-field section
    tagged = data[:-1] + bytes([1, 99, 3]) + b"new"  # one field: tag 99, 3 bytes
    assert typed(decoder(message, version)(tagged)) == typed(body)


# -- Kafka's definitions, field by field ----------------------------------------------------------------

def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def overlaps(text: str, low: int, high: int) -> bool:
    first, last = parse_versions(text)
    return first <= high and (last is None or last >= low)


KAFKA_ZERO = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "bool": False, "string": "",
              "bytes": b"", "records": None, "float64": 0.0, "uuid": None}


def kafka_default(spec: dict[str, Any]) -> Any:
    """Kafka's default of a field: its "default", else the type's zero."""
    kind, given = spec["type"], spec.get("default")
    if kind.startswith("[]"):
        return None if given == "null" else []
    if given is None:
        return KAFKA_ZERO[kind]
    if given == "null":
        return None
    if kind == "bool":
        return given == "true"
    if kind == "string":
        return given
    return int(given, 0)


def check_struct(struct: Struct, specs: list[dict[str, Any]], low: int, high: int) -> None:
    """``struct`` declares exactly Kafka's fields that exist within versions low..high."""
    wanted = [s for s in specs if overlaps(s["versions"], low, high)]
    assert [f.name for f in struct.fields] == [snake(s["name"]) for s in wanted], struct.name
    for f, spec in zip(struct.fields, wanted):
        where = f"{struct.name}.{f.name}"
        assert f.versions == spec["versions"], where
        assert not f.nullable and f.nullable_versions == spec.get("nullableVersions"), where
        assert (f.tag, f.tagged_versions) == (spec.get("tag"), spec.get("taggedVersions")), where
        assert f.flexible_versions is None, where
        expected = kafka_default(spec)
        assert f.default == expected and type(f.default) is type(expected), where
        kind = spec["type"]
        if kind.startswith("[]"):
            assert isinstance(f.type, Array), where
            if "fields" in spec:
                assert isinstance(f.type.of, Struct) and f.type.of.name == kind[2:], where
                check_struct(f.type.of, spec["fields"], low, high)
            else:
                assert f.type.of == kind[2:], where
        else:
            assert "fields" not in spec and f.type == kind, where


def kafka_struct(message: Message) -> Struct:
    """``message``'s struct without Raftka's extensions, each checked to be one: listed in
    RAFTKA_EXTENSIONS, top level, tagged in Raftka's range in every version it has, with a default
    (absent on the wire). Any other field in that tag range is an undocumented extension."""
    extensions = RAFTKA_EXTENSIONS.get(message.name, ())
    for f in message.fields:
        if f.name in extensions:
            assert f.tag is not None and f.tag >= RAFTKA_TAG_MIN and f.tagged_versions == f.versions, f.name
            assert f.about.startswith("Raftka:"), f.name
        else:
            assert f.tag is None or f.tag < RAFTKA_TAG_MIN, f"{message.name}.{f.name}: undocumented extension"
    assert set(extensions) <= {f.name for f in message.fields}, message.name
    return Struct(message.name, tuple(f for f in message.fields if f.name not in extensions))


def without_extensions(message: Message, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as Kafka's message has it: Raftka's top-level extensions dropped."""
    extensions = RAFTKA_EXTENSIONS.get(message.name, ())
    return {k: v for k, v in body.items() if k not in extensions}


def check_against_kafka(message: Message) -> None:
    load_json = pytest.importorskip("kafka.protocol.schemas").load_json
    spec = load_json(message.name)
    low, high = message.versions()[0], message.versions()[-1]
    kafka_low, kafka_high = parse_versions(spec["validVersions"])
    assert kafka_low <= low and high <= kafka_high, message.name
    assert message.api_key == spec["apiKey"] and message.flexible_versions == spec["flexibleVersions"]
    check_struct(kafka_struct(message), spec["fields"], low, high)


@pytest.mark.parametrize("message", MESSAGES, ids=[m.name for m in MESSAGES])
def test_each_declaration_matches_kafkas_definition(message):
    check_against_kafka(message)


def test_kafka_4_starts_where_each_range_starts():
    """Kafka 4 removed OffsetCommit v0-1 and OffsetFetch v0 (KIP-896) and kept JoinGroup v0-1
    (KAFKA-19444); every other range here starts at Kafka's first version too."""
    load_json = pytest.importorskip("kafka.protocol.schemas").load_json
    for message in MESSAGES:
        assert message.versions()[0] == parse_versions(load_json(message.name)["validVersions"])[0], message.name


# -- kafka-python's codec, both ways ------------------------------------------------------------------------

def kafka_class(name: str) -> Any:
    pytest.importorskip("kafka.protocol")
    from kafka.protocol.admin import groups as admin_groups
    from kafka.protocol.consumer import group
    from kafka.protocol.metadata import find_coordinator
    for module in (group, admin_groups, find_coordinator):
        if hasattr(module, name):
            return getattr(module, name)
    raise LookupError(name)


def _to_bits(value: int) -> set[int] | None:
    """kafka-python reads DescribeGroups' authorized_operations as a set of bit numbers (None for -2^31)."""
    return None if value == -2**31 else {bit for bit in range(32) if (value & 0xFFFF_FFFF) >> bit & 1}


def _from_bits(bits: set[int] | None) -> int:
    if bits is None:
        return -2**31
    value = sum(1 << bit for bit in bits)
    return value - 2**32 if value >= 2**31 else value


def to_kafka(cls: Any, struct: Struct, body: dict[str, Any], version: int) -> Any:
    """``body`` as kafka-python's object of class ``cls`` at ``version`` (the fields that version has)."""
    values = {}
    for f in struct.fields:
        if not in_versions(version, f.versions):
            continue
        value, inner = body[f.name], _struct_array(f)
        if inner is not None and value is not None:
            value = [to_kafka(getattr(cls, inner.name), inner, entry, version) for entry in value]
        elif struct.name == "DescribedGroup" and f.name == "authorized_operations":
            value = _to_bits(value)
        values[f.name] = value
    return cls(version=version, **values)


def from_kafka(obj: Any, struct: Struct) -> dict[str, Any]:
    """kafka-python's object as our dict: every declared field, kafka-python's default where the
    version lacks it."""
    out = {}
    for f in struct.fields:
        value, inner = getattr(obj, f.name), _struct_array(f)
        if inner is not None and value is not None:
            value = [from_kafka(entry, inner) for entry in value]
        elif struct.name == "DescribedGroup" and f.name == "authorized_operations":
            value = _from_bits(value)
        elif isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        out[f.name] = value
    return out


def cross_check(message: Message, version: int, body: dict[str, Any]) -> None:
    """kafka-python and our codec write the same bytes for ``body`` and read each other's. Raftka's
    extensions: kafka-python skips them in our bytes; we read them as their defaults in its bytes,
    which are ours for the body with the extensions at their defaults."""
    cls, struct = kafka_class(message.name), kafka_struct(message)
    kafka_body = without_extensions(message, body)
    plain = {**body, **{f.name: f.default for f in message.fields if f.name not in kafka_body}}
    theirs = bytes(to_kafka(cls, struct, kafka_body, version).encode(version=version))
    ours = encoder(message, version)(body)
    assert typed(decoder(message, version)(theirs)) == typed(plain)
    assert typed(from_kafka(cls.decode(ours, version=version), struct)) == typed(kafka_body)
    assert encoder(message, version)(plain) == theirs
    if plain == body:
        assert ours == theirs


@pytest.mark.parametrize("message, version", CASES, ids=CASE_IDS)
def test_kafka_python_and_our_codec_agree_both_ways(message, version):
    for body in bodies(message, version):
        cross_check(message, version, body)


# -- the checks can fail ------------------------------------------------------------------------------------

def broken(message: Message, name: str, **changes: Any) -> Message:
    """``message`` with its top-level field ``name`` changed."""
    fields = tuple(dataclasses.replace(f, **changes) if f.name == name else f for f in message.fields)
    assert fields != message.fields
    return dataclasses.replace(message, fields=fields)


def fails(check: Any, *args: Any) -> bool:
    """Did ``check`` refuse: an assertion, or a codec error on bytes it could not read."""
    try:
        check(*args)
    except Exception:  # noqa: BLE001 - AssertionError, CodecError, kafka-python's own errors
        return True
    return False


@pytest.mark.parametrize("mistake", [
    {"type": "int64"},  # a wrong type
    {"versions": "2+"},  # a wrong version boundary (Kafka: "1+")
    {"default": 0},  # a wrong default (Kafka: -1)
], ids=["type", "versions", "default"])
def test_a_wrong_declaration_fails_both_kafkas_definition_and_kafka_pythons_bytes(mistake):
    wrong = broken(JOIN_GROUP_REQUEST, "rebalance_timeout_ms", **mistake)
    assert fails(check_against_kafka, wrong)
    # Bytes: at v1 (a type or a boundary changes what is on the wire) or at v0 (where kafka-python
    # reads the absent field as Kafka's default).
    assert any(fails(cross_check, wrong, version, at_version(wrong.struct, BODIES[wrong.name], version))
               for version in (0, 1))


def test_heartbeats_max_wait_ms_is_a_tag_kafka_skips_and_absent_at_its_default():
    body = BODIES["HeartbeatRequest"]
    held = encoder(HEARTBEAT_REQUEST, 4)(body)
    immediate = encoder(HEARTBEAT_REQUEST, 4)({**body, "max_wait_ms": 0})
    assert immediate[-1] == 0 and len(held) > len(immediate)  # 0: no tag written, Kafka's own bytes
    cls = kafka_class("HeartbeatRequest")
    kafka_view = from_kafka(cls.decode(held, version=4), kafka_struct(HEARTBEAT_REQUEST))
    assert kafka_view == without_extensions(HEARTBEAT_REQUEST, body)
    assert decoder(HEARTBEAT_REQUEST, 4)(held)["max_wait_ms"] == 3000
    assert decoder(HEARTBEAT_REQUEST, 3)(encoder(HEARTBEAT_REQUEST, 3)(body))["max_wait_ms"] == 0


def test_an_undocumented_extension_fails_the_comparison_with_kafka():
    # tagged in Raftka's range, not listed
    wrong = dataclasses.replace(HEARTBEAT_REQUEST, fields=tuple(
        dataclasses.replace(f, name="hold_ms") if f.name == "max_wait_ms" else f for f in HEARTBEAT_REQUEST.fields))
    assert fails(check_against_kafka, wrong)
    wrong = broken(HEARTBEAT_REQUEST, "max_wait_ms", tag=3)  # listed, but in Kafka's tag range
    assert fails(check_against_kafka, wrong)
    wrong = broken(HEARTBEAT_REQUEST, "max_wait_ms", tag=None, tagged_versions=None)  # an untagged field
    assert fails(check_against_kafka, wrong)


def test_a_wrong_nullable_version_or_nested_boundary_fails():
    wrong = broken(OFFSET_FETCH_RESPONSE, "error_code", versions="2+")
    assert fails(check_against_kafka, wrong)
    assert fails(cross_check, wrong, 8, at_version(wrong.struct, BODIES[wrong.name], 8))
    wrong = broken(JOIN_GROUP_REQUEST, "reason", nullable_versions="7+")
    assert fails(check_against_kafka, wrong)
    members = DESCRIBE_GROUPS_RESPONSE.fields[1]
    described = members.type.of
    inner = tuple(dataclasses.replace(f, versions="2+") if f.name == "authorized_operations" else f
                  for f in described.fields)
    wrong = broken(DESCRIBE_GROUPS_RESPONSE, "groups",
                   type=dataclasses.replace(members.type, of=Struct(described.name, inner)))
    assert fails(check_against_kafka, wrong)
    assert fails(cross_check, wrong, 2, at_version(wrong.struct, BODIES[wrong.name], 2))
