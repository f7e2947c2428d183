"""Request bodies are checked at the boundary against one declaration per API (#hardening item 2).

Proves three things. Each type rule of common/schema.py holds alone (one unit test per rule).
Every declared API (common/msgpack_bodies.py, broker and controller listeners) takes a complete valid
body unchanged, and refuses every mutation the declaration rules out (a wrong type, an integer out
of range, a string too long, an array too long, a required field missing, a null where none is
allowed, a float infinity or NaN) with InvalidRequestError naming the mutated field's path; the
mutations are derived from the declarations themselves, so a new field is covered when declared.
And a real broker answers the known bad inputs (a float partition index in OffsetFetch, a string
max_wait_ms in Fetch, Fetch max_bytes = inf, a JoinGroup metadata of 134217728) INVALID_REQUEST
without a traceback in its log, and the same connection keeps serving; the same for a
controller's listener. Its answers to valid requests match the declared responses.
"""
from __future__ import annotations

import asyncio
import copy
import math
import timeit
from typing import Any, Iterator

import pytest

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import InvalidRequestError
from raftka.common.msgpack_bodies import BROKER_REQUESTS, CONTROLLER_REQUESTS
from raftka.common.schema import (ABSENT, INT_RANGES, REQUIRED, STRING_BYTES_MAX, Array, Field, Map, Message,
                                  Registry, Struct, compile_struct, in_versions, parse_versions)


def checker(*fields: Field):
    return compile_struct(Struct("T", fields), 0)


def refused(check, body: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        check(body)
    assert caught.value.code == errors.INVALID_REQUEST
    return caught.value


# -- one unit test per type rule -------------------------------------------------------------------

@pytest.mark.parametrize("type_name", sorted(INT_RANGES))
def test_an_integer_type_takes_its_range_and_refuses_bools_floats_and_one_past_each_end(type_name):
    low, high = INT_RANGES[type_name]
    check = checker(Field("n", type_name))
    for good in (low, high, 0):
        assert check({"n": good}) == {"n": good}
    for bad, says in ((low - 1, "out of range"), (high + 1, "out of range"), (True, "got bool"),
                      (1.0, "got float"), (float("inf"), "got inf"), (float("nan"), "got nan"), ("1", "got string")):
        error = refused(check, {"n": bad})
        assert error.field == "n" and says in error.message, (bad, error.message)


def test_an_integer_field_may_narrow_its_range():
    check = checker(Field("timeout_ms", "int32", min=0, max=10))
    assert check({"timeout_ms": 10})
    assert "out of range [0, 10]" in refused(check, {"timeout_ms": -1}).message


def test_bool_is_only_true_or_false():
    check = checker(Field("b", "bool"))
    assert check({"b": False}) == {"b": False}
    for bad in (0, 1, "true", None):
        assert refused(check, {"b": bad}).field == "b"


def test_float64_is_finite():
    check = checker(Field("f", "float64"))
    assert check({"f": 1.5}) and check({"f": 2})
    for bad in (float("inf"), float("-inf"), float("nan"), "1.5", True):
        assert refused(check, {"f": bad}).field == "f"


def test_a_string_is_at_most_its_byte_length_counted_in_utf8():
    check = checker(Field("s", "string"))
    assert check({"s": "x" * STRING_BYTES_MAX})
    assert "at most 32767" in refused(check, {"s": "x" * (STRING_BYTES_MAX + 1)}).message
    assert "bytes" in refused(check, {"s": "\u2603" * 11_000}).message  # 33,000 bytes in 11,000 characters
    short = checker(Field("s", "string", max_length=3))
    assert short({"s": "\u2603"}) and refused(short, {"s": "\u2603\u2603"}).field == "s"
    for bad in (b"bytes", 5, ["x"]):
        assert refused(check, {"s": bad}).field == "s"


@pytest.mark.parametrize("type_name", ["bytes", "records"])
def test_bytes_and_records_are_binary_of_bounded_size_never_a_number(type_name):
    check = checker(Field("b", type_name, max_length=4))
    assert check({"b": b"1234"}) and check({"b": bytearray(b"12")})
    assert "at most 4" in refused(check, {"b": b"12345"}).message
    error = refused(check, {"b": 134_217_728})  # bytes(n) would allocate n zero bytes
    assert error.field == "b" and "got integer" in error.message
    assert refused(check, {"b": "text"}).field == "b"


def test_uuid_is_32_hex_digits():
    check = checker(Field("topic_id", "uuid"))
    assert check({"topic_id": "0123456789abcdef" * 2})
    for bad in ("xyz", "0" * 31, b"0" * 16, 7):
        assert refused(check, {"topic_id": bad}).field == "topic_id"


def test_an_array_checks_its_count_before_its_entries_and_names_the_bad_entry():
    check = checker(Field("ids", Array("int32", max_count=3)),
                    Field("topics", Array(Struct("Topic", (Field("name", "string"),)), max_count=2)))
    assert check({"ids": [1, 2, 3], "topics": [{"name": "a"}]})
    assert "4 entries, at most 3" in refused(check, {"ids": [1.0] * 4, "topics": []}).message
    assert refused(check, {"ids": [1, 2.5], "topics": []}).field == "ids[1]"
    assert refused(check, {"ids": [], "topics": [{"name": "a"}, {"name": 5}]}).field == "topics[1].name"
    assert refused(check, {"ids": [], "topics": [7]}).field == "topics[0]"
    assert refused(check, {"ids": "1,2", "topics": []}).field == "ids"


def test_a_map_has_string_keys_bounded_entries_and_optionally_null_values():
    check = checker(Field("configs", Map("string", max_count=2, nullable_values=True)),
                    Field("listeners", Map("string", max_count=2), default=ABSENT))
    assert check({"configs": {"a": "1", "b": None}})
    assert refused(check, {"configs": {"a": "1", "b": "2", "c": "3"}}).field == "configs"
    assert "map key" in refused(check, {"configs": {7: "x"}}).message
    assert refused(check, {"configs": {"a": 5}}).field == "configs['a']"
    assert refused(check, {"configs": {}, "listeners": {"PLAINTEXT": None}}).field == "listeners['PLAINTEXT']"


def test_a_union_takes_any_of_its_types():
    check = checker(Field("resource_type", ("int8", "string")))
    assert check({"resource_type": 2}) and check({"resource_type": "topic"})
    assert "expected int8 or string" in refused(check, {"resource_type": 2.0}).message


def test_required_fields_defaults_absent_fields_nulls_and_unknown_keys():
    check = checker(Field("group_id", "string"), Field("acks", "int16", default=-1),
                    Field("topics", Array("string"), default=[]), Field("max_bytes", "int32", default=ABSENT),
                    Field("reason", "string", nullable=True, default=ABSENT))
    assert refused(check, {}).field == "group_id"
    filled = check({"group_id": "g", "reason": None, "extra": object()})
    assert filled["acks"] == -1 and filled["topics"] == [] and "max_bytes" not in filled
    other = check({"group_id": "g"})
    assert other["topics"] is not filled["topics"]  # a fresh list each time
    error = refused(check, {"group_id": None})
    assert error.field == "group_id" and "null" in error.message
    assert refused(check, ["not", "a", "map"]).field == ""


def test_versions_follow_kafkas_notation_and_select_the_fields_of_each_version():
    assert parse_versions("0+") == (0, None) and parse_versions("1-3") == (1, 3) and parse_versions("2") == (2, 2)
    assert in_versions(5, "0+") and not in_versions(4, "1-3") and in_versions(3, "1-3")
    message = Message(99, "TestRequest", "0-1", (Field("a", "int32"), Field("b", "int32", versions="1+")))
    registry = Registry({99: message})
    assert registry.check(99, 0, {"a": 1}) == {"a": 1}
    assert refused(lambda body: registry.check(99, 1, body), {"a": 1}).field == "b"
    assert "no declared body" in refused(lambda body: registry.check(99, 2, body), {"a": 1}).message


# -- every declared API: a valid body passes unchanged, each mutation is refused by name ----------

BATCH = bytes(61) + b"records"  # opaque here: the leader's record walk is elsewhere
TOPIC_ID = "0123456789abcdef0123456789abcdef"

# One complete body per declared API (every declared field present), per listener.
VALID: dict[int, dict] = {
    ApiKey.PRODUCE: {"transactional_id": None, "acks": -1, "timeout_ms": 30_000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": BATCH}]}]},
    ApiKey.FETCH: {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52_428_800,
                   "isolation_level": 0, "topics": [{"topic": "t", "partitions": [
                       {"partition": 0, "current_leader_epoch": 3, "fetch_offset": 100, "last_fetched_epoch": -1,
                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]},
    ApiKey.LIST_OFFSETS: {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]},
    ApiKey.METADATA: {"topics": ["t"], "allow_auto_topic_creation": False},
    ApiKey.OFFSET_COMMIT: {"group_id": "g", "generation_id": 3, "member_id": "m", "group_instance_id": "i",
                           "topics": [{"name": "t", "partitions": [
                               {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 1,
                                "committed_metadata": "meta"}]}]},
    ApiKey.OFFSET_FETCH: {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
    ApiKey.FIND_COORDINATOR: {"key": "g", "key_type": 0},
    ApiKey.JOIN_GROUP: {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 300_000,
                        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                        "protocols": [{"name": "range", "metadata": b"subscription"}], "reason": "joining"},
    ApiKey.HEARTBEAT: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
                       "max_wait_ms": 1000},
    ApiKey.LEAVE_GROUP: {"group_id": "g", "member_id": "m", "members": [
        {"member_id": "m", "group_instance_id": None, "reason": "closing"}]},
    ApiKey.SYNC_GROUP: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
                        "protocol_type": "consumer", "protocol_name": "range",
                        "assignments": [{"member_id": "m", "assignment": b"assignment"}]},
    ApiKey.DESCRIBE_GROUPS: {"groups": ["g"]},
    ApiKey.LIST_GROUPS: {"states_filter": ["Stable"]},
    ApiKey.DELETE_GROUPS: {"groups_names": ["g"]},
    ApiKey.API_VERSIONS: {},
    ApiKey.INIT_PRODUCER_ID: {"transactional_id": None, "transaction_timeout_ms": 60_000},
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {"replica_id": -1, "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 2, "leader_epoch": 1}]}]},
    ApiKey.DESCRIBE_CLUSTER: {},
}

DECLARED = ([("broker", key, BROKER_REQUESTS, VALID[key]) for key in sorted(BROKER_REQUESTS.messages)]
            + [("controller", key, CONTROLLER_REQUESTS, VALID[key])
               for key in sorted(CONTROLLER_REQUESTS.messages)])
IDS = [f"{listener}-{BROKER_REQUESTS.messages.get(key, CONTROLLER_REQUESTS.messages.get(key)).name}"
       for listener, key, _, _ in DECLARED]

DELETE = object()


def _wrong_type(declared: Any) -> Any:
    if isinstance(declared, tuple):
        return 1.5
    if isinstance(declared, (Array, Map, Struct)):
        return "not a container"
    return {"string": 5, "bytes": 134_217_728, "records": 134_217_728, "bool": 1, "uuid": 5,
            "float64": "1.0"}.get(declared, "7")


def _scalar_mutants(declared: Any, max_length: int | None, low: int | None, high: int | None,
                    nullable: bool) -> Iterator[tuple[str, Any]]:
    yield "wrong type", _wrong_type(declared)
    if not nullable:
        yield "null", None
    if isinstance(declared, str) and declared in INT_RANGES:
        type_low, type_high = INT_RANGES[declared]
        yield "above range", (type_high if high is None else min(high, type_high)) + 1
        yield "below range", (type_low if low is None else max(low, type_low)) - 1
        yield "infinity", float("inf")
        yield "nan", float("nan")
    if declared == "float64":
        yield "infinity", float("inf")
        yield "nan", float("nan")
    if declared == "string":
        yield "too long", "x" * ((max_length or STRING_BYTES_MAX) + 1)


def mutants(struct: Struct, body: dict, path: tuple = ()) -> Iterator[tuple[tuple, str, Any]]:
    """(path, what, replacement) for each mutation the declaration rules out, fields present in
    ``body`` (every field, in the VALID bodies) and their nested entries."""
    for field in struct.fields:
        here = path + (field.name,)
        if field.default is REQUIRED:
            yield here, "missing", DELETE
        if field.name not in body or body[field.name] is None:
            continue
        declared, value = field.type, body[field.name]
        if isinstance(declared, Array):
            yield here, "wrong type", _wrong_type(declared)
            if not field.nullable:
                yield here, "null", None
            yield here, "huge count", [value[0] if value else 0] * (declared.max_count + 1)
            if value:
                if isinstance(declared.of, Struct):
                    yield here + (0,), "entry not a struct", 5
                    yield from mutants(declared.of, value[0], here + (0,))
                else:
                    for what, bad in _scalar_mutants(declared.of, declared.max_length, None, None, False):
                        yield here + (0,), what, bad
        elif isinstance(declared, Map):
            yield here, "wrong type", []
            yield here, "too many entries", {f"k{i}": "v" for i in range(declared.max_count + 1)}
            yield here, "key not a string", {7: "v"}
            if value:
                key = next(iter(value))
                for what, bad in _scalar_mutants(declared.of, declared.max_length, None, None,
                                                 declared.nullable_values):
                    yield here + (key,), what, bad
        else:
            for what, bad in _scalar_mutants(declared, field.max_length, field.min, field.max, field.nullable):
                yield here, what, bad


def apply(body: dict, path: tuple, replacement: Any) -> dict:
    out = copy.deepcopy(body)
    target = out
    for part in path[:-1]:
        target = target[part]
    if replacement is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = replacement
    return out


def expected_field(struct: Struct, path: tuple) -> str:
    """The error's field path: struct fields joined by dots, array entries [i], map entries ['k']."""
    text, current = "", struct
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
            continue
        if isinstance(current, Map):
            text += f"[{part!r}]"
            continue
        field = next(f for f in current.fields if f.name == part)
        text += ("." if text else "") + part
        current = field.type.of if isinstance(field.type, Array) else field.type
    return text


@pytest.mark.parametrize("listener,api_key,registry,valid", DECLARED, ids=IDS)
def test_a_complete_valid_body_passes_unchanged(listener, api_key, registry, valid):
    body = copy.deepcopy(valid)
    assert registry.check(api_key, 0, body) == valid
    declared = {f.name for f in registry.messages[api_key].fields}
    assert declared == set(valid), "the table's valid body should name every declared field"


@pytest.mark.parametrize("listener,api_key,registry,valid", DECLARED, ids=IDS)
def test_every_ruled_out_mutation_is_refused_naming_its_field(listener, api_key, registry, valid):
    struct = registry.messages[api_key].struct
    seen = 0
    for path, what, replacement in mutants(struct, valid):
        body = apply(valid, path, replacement)
        with pytest.raises(InvalidRequestError) as caught:
            registry.check(api_key, 0, body)
        expected = expected_field(struct, path)
        if what == "key not a string":
            assert caught.value.field == expected and "map key" in caught.value.message
        elif what == "entry not a struct":
            assert caught.value.field == expected, (what, path)
        else:
            assert caught.value.field == expected, (what, path, caught.value.message)
        assert caught.value.message.startswith(expected + ": ") or not expected
        seen += 1
    assert seen >= 1 or not struct.fields


def test_the_mutations_cover_each_kind_somewhere():
    kinds = {what for _, key, registry, valid in DECLARED for _, what, _ in
             mutants(registry.messages[key].struct, valid)}
    assert {"wrong type", "above range", "too long", "huge count", "missing", "null", "infinity", "nan"} <= kinds


def test_a_minimal_body_gets_the_handlers_defaults():
    fetch = BROKER_REQUESTS.check(ApiKey.FETCH, 0, {"topics": [{"topic": "t", "partitions": [{"partition": 0}]}]})
    assert (fetch["replica_id"], fetch["max_wait_ms"], fetch["min_bytes"], fetch["isolation_level"]) == (-1, 0, 1, 0)
    assert "max_bytes" not in fetch  # fetch.max.bytes: the broker's config decides
    part = fetch["topics"][0]["partitions"][0]
    assert (part["fetch_offset"], part["last_fetched_epoch"], part["partition_max_bytes"]) == (0, -1, 1 << 20)
    produce = BROKER_REQUESTS.check(ApiKey.PRODUCE, 0, {"topic_data": [{"name": "t"}]})
    assert (produce["acks"], produce["timeout_ms"], produce["topic_data"][0]["partition_data"]) == (-1, 30_000, [])


def test_the_check_costs_microseconds_on_the_hot_apis():
    """Measured per Produce and per Fetch body (one partition each), as the broker checks them;
    the bound is loose (a slow CI machine), the printed numbers are what docs/protocol.md quotes."""
    costs = {}
    for key in (ApiKey.PRODUCE, ApiKey.FETCH):
        body = copy.deepcopy(VALID[key])
        number = 20_000
        best = min(timeit.repeat(lambda: BROKER_REQUESTS.check(key, 0, body), number=number, repeat=5))
        costs[key.name] = best / number * 1e6
    print("check cost per request (us):", {k: round(v, 2) for k, v in costs.items()})
    assert all(cost < 50 for cost in costs.values()), costs
    assert not math.isnan(sum(costs.values()))


# -- against a real broker ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 1 broker."""
    return module_cluster_factory("declared", controllers=1, brokers=1,
                                  configs={"default.replication.factor": 1, "min.insync.replicas": 1})


KNOWN_BAD = [
    (ApiKey.OFFSET_FETCH, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1.5]}]},
     "topics[0].partition_indexes[1]"),
    (ApiKey.FETCH, {"max_wait_ms": "soon", "topics": []}, "max_wait_ms"),
    (ApiKey.FETCH, {"max_bytes": float("inf"), "topics": []}, "max_bytes"),
    (ApiKey.JOIN_GROUP, {"group_id": "g", "session_timeout_ms": 10_000, "member_id": "", "protocol_type": "consumer",
                         "protocols": [{"name": "range", "metadata": 134_217_728}]}, "protocols[0].metadata"),
    (ApiKey.PRODUCE, {"acks": 1, "topic_data": [{"name": "t", "partition_data": "nope"}]},
     "topic_data[0].partition_data"),
    (ApiKey.METADATA, {"topics": "all"}, "topics"),
    (ApiKey.FETCH, ["not", "a", "map"], ""),
]


def test_known_bad_inputs_get_invalid_request_naming_the_field_and_the_connection_keeps_serving(cluster):
    from test_broker import RawConnection
    broker_id = cluster.broker_ids[0]
    conn = RawConnection(cluster.broker_address(broker_id))
    try:
        for api_key, body, field in KNOWN_BAD:
            conn.send(api_key, body)
            _, code, answer = conn.receive()
            assert code == errors.INVALID_REQUEST, (api_key, body, code, answer)
            assert field in answer["error_message"], answer
        conn.send(ApiKey.PRODUCE, {"acks": 0, "topic_data": "nope"})  # acks=0: no answer, even to this
        conn.send(ApiKey.API_VERSIONS, {})
        correlation, code, _ = conn.receive()
        assert (correlation, code) == (conn.correlation, errors.NONE)
        conn.send(ApiKey.METADATA, {"topics": []})
        assert conn.receive()[1] == errors.NONE
    finally:
        conn.close()
    log_text = cluster.nodes[broker_id].log_path.read_text()
    assert "Traceback" not in log_text
    assert "refused a Fetch request" in log_text  # logged, once a minute per API
    assert log_text.count("refused a Fetch request") == 1


def test_the_controller_listener_checks_its_bodies_too(cluster):
    from raftka.common.transport import call_sync
    address = cluster.bootstrap_controllers.split(",")[0]
    code, out = call_sync(address, ApiKey.METADATA, {"topics": [float("nan")]}, timeout_ms=10_000)
    assert code == errors.INVALID_REQUEST and "topics" in out["error_message"]
    # The broker-controller APIs are Kafka's only: a msgpack frame for one is refused, not served.
    code, out = call_sync(address, ApiKey.BROKER_HEARTBEAT, {"broker_id": 1, "broker_epoch": 1}, timeout_ms=10_000)
    assert code == errors.UNSUPPORTED_VERSION and "Kafka" in out["error_message"]
    code, out = call_sync(address, ApiKey.FETCH, {"fetch_offset": 0, "max_wait_ms": 0}, timeout_ms=10_000)
    assert code == errors.UNSUPPORTED_VERSION and "Kafka" in out["error_message"]
    from raftka.raft_meta.metadata.fetcher import fetch_entries
    assert asyncio.run(fetch_entries(address))[1]  # the metadata log, in Kafka's Fetch
    controller_id = cluster.controller_ids[0]
    assert "Traceback" not in cluster.nodes[controller_id].log_path.read_text()


def test_a_brokers_answers_match_the_declared_responses(cluster):
    """Answers to valid requests (and to ones that get per-partition or per-group errors) have
    the shape common/msgpack_bodies.py declares for #kafka-protocol's codec."""
    from raftka.common.msgpack_bodies import BROKER_RESPONSES
    from raftka.common.records import BatchBuilder
    from raftka.common.transport import Connection, call_sync
    from raftka.cluster import wait_until
    address = cluster.broker_address(cluster.broker_ids[0])

    def answer(api_key: int, body: dict) -> dict:
        code, out = call_sync(address, api_key, body, timeout_ms=10_000)
        assert code == errors.NONE, (api_key, code, out)
        return BROKER_RESPONSES.check(api_key, 0, out)

    async def create() -> dict:  # CreateTopics is served in Kafka's protocol only
        host, _, port = address.rpartition(":")
        connection = await Connection.open(host, int(port), kafka_versions={ApiKey.CREATE_TOPICS: 7})
        try:
            return (await connection.request(ApiKey.CREATE_TOPICS, {"topics": [
                {"name": "shapes", "num_partitions": 1, "replication_factor": 1}]}, timeout_ms=10_000))[1]
        finally:
            await connection.close()
    assert asyncio.run(create())["topics"][0]["error_code"] == errors.NONE
    wait_until(lambda: answer(ApiKey.METADATA, {"topics": ["shapes"]})["topics"][0]["partitions"][0]["leader_id"] >= 0,
               20, what="a leader for shapes")
    builder = BatchBuilder(batch_size=1 << 16)
    builder.append(1_000, None, b"value")
    produced = answer(ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 5_000, "topic_data": [
        {"name": "shapes", "partition_data": [{"index": 0, "records": builder.build()}]},
        {"name": "no-such-topic", "partition_data": [{"index": 0, "records": builder.build()}]}]})
    assert produced["responses"][1]["partition_responses"][0]["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
    fetched = answer(ApiKey.FETCH, {"topics": [{"topic": "shapes", "partitions": [{"partition": 0}]},
                                               {"topic": "no-such-topic", "partitions": [{"partition": 0}]}]})
    assert fetched["responses"][0]["partitions"][0]["records"]
    answer(ApiKey.LIST_OFFSETS, {"topics": [{"name": "shapes", "partitions": [{"partition_index": 0, "timestamp": -1}]},
                                            {"name": "no-such-topic", "partitions": [{"partition_index": 0}]}]})
    answer(ApiKey.OFFSET_FOR_LEADER_EPOCH, {"topics": [{"topic": "shapes", "partitions": [
        {"partition": 0, "leader_epoch": 0}]}]})
    answer(ApiKey.METADATA, {"topics": None})
    answer(ApiKey.METADATA, {"topics": ["shapes", "no-such-topic"]})
    answer(ApiKey.API_VERSIONS, {})
    answer(ApiKey.INIT_PRODUCER_ID, {})
    answer(ApiKey.DESCRIBE_CLUSTER, {})
    answer(ApiKey.FIND_COORDINATOR, {"key": "shapes-group"})
    answer(ApiKey.HEARTBEAT, {"group_id": "shapes-group", "generation_id": 1, "member_id": "nobody"})
    answer(ApiKey.OFFSET_COMMIT, {"group_id": "shapes-group", "topics": [
        {"name": "shapes", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
    answer(ApiKey.OFFSET_FETCH, {"group_id": "shapes-group", "topics": [{"name": "shapes", "partition_indexes": [0]}]})
