"""The broker-controller family's declarations (common/messages/controller.py) against Kafka's
message definitions.

The oracle is ``SPECS`` below: each message's api key, version range and every field (path, Kafka
type, versions, default, nullability, tag), transcribed by hand from Kafka's definitions and
independent of the declarations. Tests: the declarations match it field for field; every message
compiles at every version; a rich body (nested arrays, nulls, tagged fields) round-trips at every
version to the body with the fields that version lacks replaced by the SPECS default; an empty
body decodes to the SPECS defaults; hand-built byte vectors pin the wire layout of every API but
DescribeQuorum, whose bytes are cross-checked both ways with kafka-python at every version.
"""
from __future__ import annotations

import copy
import struct
import uuid

import pytest

from raftka.common.api import ApiKey
from raftka.common.codec import CodecError, decoder, encoder
from raftka.common.messages import controller as c
from raftka.common.schema import Array, Message, Struct

Z = "0" * 32
U1 = "00112233445566778899aabbccddeeff"
U2 = "f0e1d2c3b4a5968778695a4b3c2d1e0f"
U3 = "0123456789abcdef0123456789abcdef"

# -- the oracle: Kafka's definitions, by hand ------------------------------------------------------
# (path, Kafka type, versions, default[, {"nullable": versions, "tag": (tag, tagged versions)}])

REGISTRATION_REQUEST = [
    ("broker_id", "int32", "0+", 0),
    ("cluster_id", "string", "0+", ""),
    ("incarnation_id", "uuid", "0+", Z),
    ("listeners", "[]Listener", "0+", []),
    ("listeners[].name", "string", "0+", ""),
    ("listeners[].host", "string", "0+", ""),
    ("listeners[].port", "uint16", "0+", 0),
    ("listeners[].security_protocol", "int16", "0+", 0),
    ("features", "[]Feature", "0+", []),
    ("features[].name", "string", "0+", ""),
    ("features[].min_supported_version", "int16", "0+", 0),
    ("features[].max_supported_version", "int16", "0+", 0),
    ("rack", "string", "0+", "", {"nullable": "0+"}),
    ("is_migrating_zk_broker", "bool", "1+", False),
    ("log_dirs", "[]uuid", "2+", []),
    ("previous_broker_epoch", "int64", "3+", -1),
]
REGISTRATION_RESPONSE = [
    ("throttle_time_ms", "int32", "0+", 0),
    ("error_code", "int16", "0+", 0),
    ("broker_epoch", "int64", "0+", -1),
]
HEARTBEAT_REQUEST = [
    ("broker_id", "int32", "0+", 0),
    ("broker_epoch", "int64", "0+", -1),
    ("current_metadata_offset", "int64", "0+", 0),
    ("want_fence", "bool", "0+", False),
    ("want_shut_down", "bool", "0+", False),
    ("offline_log_dirs", "[]uuid", "1+", [], {"tag": (0, "1+")}),
]
HEARTBEAT_RESPONSE = [
    ("throttle_time_ms", "int32", "0+", 0),
    ("error_code", "int16", "0+", 0),
    ("is_caught_up", "bool", "0+", False),
    ("is_fenced", "bool", "0+", True),
    ("should_shut_down", "bool", "0+", False),
]
ALTER_PARTITION_REQUEST = [
    ("broker_id", "int32", "0+", 0),
    ("broker_epoch", "int64", "0+", -1),
    ("topics", "[]TopicData", "0+", []),
    ("topics[].topic_id", "uuid", "2+", Z),
    ("topics[].partitions", "[]PartitionData", "0+", []),
    ("topics[].partitions[].partition_index", "int32", "0+", 0),
    ("topics[].partitions[].leader_epoch", "int32", "0+", 0),
    ("topics[].partitions[].new_isr", "[]int32", "0-2", []),
    ("topics[].partitions[].new_isr_with_epochs", "[]BrokerState", "3+", []),
    ("topics[].partitions[].new_isr_with_epochs[].broker_id", "int32", "3+", 0),
    ("topics[].partitions[].new_isr_with_epochs[].broker_epoch", "int64", "3+", -1),
    ("topics[].partitions[].leader_recovery_state", "int8", "1+", 0),
    ("topics[].partitions[].partition_epoch", "int32", "0+", 0),
]
ALTER_PARTITION_RESPONSE = [
    ("throttle_time_ms", "int32", "0+", 0),
    ("error_code", "int16", "0+", 0),
    ("topics", "[]TopicData", "0+", []),
    ("topics[].topic_id", "uuid", "2+", Z),
    ("topics[].partitions", "[]PartitionData", "0+", []),
    ("topics[].partitions[].partition_index", "int32", "0+", 0),
    ("topics[].partitions[].error_code", "int16", "0+", 0),
    ("topics[].partitions[].leader_id", "int32", "0+", 0),
    ("topics[].partitions[].leader_epoch", "int32", "0+", 0),
    ("topics[].partitions[].isr", "[]int32", "0+", []),
    ("topics[].partitions[].leader_recovery_state", "int8", "1+", 0),
    ("topics[].partitions[].partition_epoch", "int32", "0+", 0),
]
UNREGISTER_REQUEST = [("broker_id", "int32", "0+", 0)]
UNREGISTER_RESPONSE = [
    ("throttle_time_ms", "int32", "0+", 0),
    ("error_code", "int16", "0+", 0),
    ("error_message", "string", "0+", "", {"nullable": "0+"}),
]
ALLOCATE_REQUEST = [("broker_id", "int32", "0+", 0), ("broker_epoch", "int64", "0+", -1)]
ALLOCATE_RESPONSE = [
    ("throttle_time_ms", "int32", "0+", 0),
    ("error_code", "int16", "0+", 0),
    ("producer_id_start", "int64", "0+", 0),
    ("producer_id_len", "int32", "0+", 0),
]
QUORUM_REQUEST = [
    ("topics", "[]TopicData", "0+", []),
    ("topics[].topic_name", "string", "0+", ""),
    ("topics[].partitions", "[]PartitionData", "0+", []),
    ("topics[].partitions[].partition_index", "int32", "0+", 0),
]


def _replica_state(prefix: str) -> list[tuple]:
    return [
        (f"{prefix}[].replica_id", "int32", "0+", 0),
        (f"{prefix}[].replica_directory_id", "uuid", "2+", Z),
        (f"{prefix}[].log_end_offset", "int64", "0+", 0),
        (f"{prefix}[].last_fetch_timestamp", "int64", "1+", -1),
        (f"{prefix}[].last_caught_up_timestamp", "int64", "1+", -1),
    ]


_QP = "topics[].partitions"
QUORUM_RESPONSE = [
    ("error_code", "int16", "0+", 0),
    ("error_message", "string", "2+", "", {"nullable": "2+"}),
    ("topics", "[]TopicData", "0+", []),
    ("topics[].topic_name", "string", "0+", ""),
    (_QP, "[]PartitionData", "0+", []),
    (f"{_QP}[].partition_index", "int32", "0+", 0),
    (f"{_QP}[].error_code", "int16", "0+", 0),
    (f"{_QP}[].error_message", "string", "2+", "", {"nullable": "2+"}),
    (f"{_QP}[].leader_id", "int32", "0+", 0),
    (f"{_QP}[].leader_epoch", "int32", "0+", 0),
    (f"{_QP}[].high_watermark", "int64", "0+", 0),
    (f"{_QP}[].current_voters", "[]ReplicaState", "0+", []),
    *_replica_state(f"{_QP}[].current_voters"),
    (f"{_QP}[].observers", "[]ReplicaState", "0+", []),
    *_replica_state(f"{_QP}[].observers"),
    ("nodes", "[]Node", "2+", []),
    ("nodes[].node_id", "int32", "2+", 0),
    ("nodes[].listeners", "[]Listener", "2+", []),
    ("nodes[].listeners[].name", "string", "2+", ""),
    ("nodes[].listeners[].host", "string", "2+", ""),
    ("nodes[].listeners[].port", "uint16", "2+", 0),
]

_SP = "topics[].partitions"
FETCH_SNAPSHOT_REQUEST = [
    ("cluster_id", "string", "0+", None, {"nullable": "0+", "tag": (0, "0+")}),
    ("replica_id", "int32", "0+", -1),
    ("max_bytes", "int32", "0+", 0x7FFFFFFF),
    ("topics", "[]TopicSnapshot", "0+", []),
    ("topics[].name", "string", "0+", ""),
    (_SP, "[]PartitionSnapshot", "0+", []),
    (f"{_SP}[].partition", "int32", "0+", 0),
    (f"{_SP}[].current_leader_epoch", "int32", "0+", 0),
    (f"{_SP}[].snapshot_id", "SnapshotId", "0+", {"end_offset": 0, "epoch": 0}),
    (f"{_SP}[].snapshot_id.end_offset", "int64", "0+", 0),
    (f"{_SP}[].snapshot_id.epoch", "int32", "0+", 0),
    (f"{_SP}[].position", "int64", "0+", 0),
    (f"{_SP}[].replica_directory_id", "uuid", "1+", Z, {"tag": (0, "1+")}),
]
FETCH_SNAPSHOT_RESPONSE = [
    ("throttle_time_ms", "int32", "0+", 0),
    ("error_code", "int16", "0+", 0),
    ("topics", "[]TopicSnapshot", "0+", []),
    ("topics[].name", "string", "0+", ""),
    (_SP, "[]PartitionSnapshot", "0+", []),
    (f"{_SP}[].index", "int32", "0+", 0),
    (f"{_SP}[].error_code", "int16", "0+", 0),
    (f"{_SP}[].snapshot_id", "SnapshotId", "0+", {"end_offset": 0, "epoch": 0}),
    (f"{_SP}[].snapshot_id.end_offset", "int64", "0+", 0),
    (f"{_SP}[].snapshot_id.epoch", "int32", "0+", 0),
    (f"{_SP}[].current_leader", "LeaderIdAndEpoch", "0+", {"leader_id": 0, "leader_epoch": 0}, {"tag": (0, "0+")}),
    (f"{_SP}[].current_leader.leader_id", "int32", "0+", 0),
    (f"{_SP}[].current_leader.leader_epoch", "int32", "0+", 0),
    (f"{_SP}[].size", "int64", "0+", 0),
    (f"{_SP}[].position", "int64", "0+", 0),
    (f"{_SP}[].unaligned_records", "records", "0+", b""),
    ("node_endpoints", "[]NodeEndpoint", "1+", [], {"tag": (0, "1+")}),
    ("node_endpoints[].node_id", "int32", "1+", 0),
    ("node_endpoints[].host", "string", "1+", ""),
    ("node_endpoints[].port", "uint16", "1+", 0),
]

# message -> (api key, valid versions, fields); every one is flexible in all versions ("0+").
SPECS: dict[str, tuple[Message, int, str, list[tuple]]] = {
    "BrokerRegistrationRequest": (c.BROKER_REGISTRATION_REQUEST, 62, "0-4", REGISTRATION_REQUEST),
    "BrokerRegistrationResponse": (c.BROKER_REGISTRATION_RESPONSE, 62, "0-4", REGISTRATION_RESPONSE),
    "BrokerHeartbeatRequest": (c.BROKER_HEARTBEAT_REQUEST, 63, "0-1", HEARTBEAT_REQUEST),
    "BrokerHeartbeatResponse": (c.BROKER_HEARTBEAT_RESPONSE, 63, "0-1", HEARTBEAT_RESPONSE),
    "AlterPartitionRequest": (c.ALTER_PARTITION_REQUEST, 56, "2-3", ALTER_PARTITION_REQUEST),
    "AlterPartitionResponse": (c.ALTER_PARTITION_RESPONSE, 56, "2-3", ALTER_PARTITION_RESPONSE),
    "UnregisterBrokerRequest": (c.UNREGISTER_BROKER_REQUEST, 64, "0", UNREGISTER_REQUEST),
    "UnregisterBrokerResponse": (c.UNREGISTER_BROKER_RESPONSE, 64, "0", UNREGISTER_RESPONSE),
    "AllocateProducerIdsRequest": (c.ALLOCATE_PRODUCER_IDS_REQUEST, 67, "0", ALLOCATE_REQUEST),
    "AllocateProducerIdsResponse": (c.ALLOCATE_PRODUCER_IDS_RESPONSE, 67, "0", ALLOCATE_RESPONSE),
    "DescribeQuorumRequest": (c.DESCRIBE_QUORUM_REQUEST, 55, "0-2", QUORUM_REQUEST),
    "DescribeQuorumResponse": (c.DESCRIBE_QUORUM_RESPONSE, 55, "0-2", QUORUM_RESPONSE),
    "FetchSnapshotRequest": (c.FETCH_SNAPSHOT_REQUEST, 59, "0-1", FETCH_SNAPSHOT_REQUEST),
    "FetchSnapshotResponse": (c.FETCH_SNAPSHOT_RESPONSE, 59, "0-1", FETCH_SNAPSHOT_RESPONSE),
}
ALL = c.REQUESTS + c.RESPONSES


def versions_of(text: str) -> range:
    low, _, high = text.partition("-")
    return range(int(low), int(high or low) + 1)


def has(version: int, text: str) -> bool:
    """Kafka's version string, parsed here without the schema module."""
    if text.endswith("+"):
        return version >= int(text[:-1])
    return version in versions_of(text)


def tree(rows: list[tuple], prefix: str = "") -> dict[str, tuple]:
    """The rows under ``prefix`` as {name: (type, versions, default, children)}."""
    out = {}
    for row in rows:
        path, type_, versions, default = row[:4]
        if path.startswith(prefix) and "." not in path[len(prefix):]:
            name = path[len(prefix):]
            if type_[2:3].isupper():  # an array of structs
                out[name] = (type_, versions, default, tree(rows, f"{path}[]."))
            elif type_[:1].isupper():  # a struct: its fields under "path."
                out[name] = (type_, versions, default, ("struct", tree(rows, f"{path}.")))
            else:
                out[name] = (type_, versions, default, None)
    return out


def project(spec: dict[str, tuple], body: dict, version: int, *, defaults: bool = True) -> dict:
    """``body`` as a decoder at ``version`` must return it: each field the version has, its
    entries projected in turn; each field it lacks, its SPECS default (``defaults=False``: left out)."""
    out = {}
    for name, (_, versions, default, children) in spec.items():
        if not has(version, versions):
            if defaults:
                out[name] = copy.deepcopy(default)
            continue
        value = body.get(name, copy.deepcopy(default))
        if isinstance(children, tuple) and value is not None:
            value = project(children[1], value, version, defaults=defaults)
        elif children is not None and value is not None:
            value = [project(children, item, version, defaults=defaults) for item in value]
        out[name] = value
    return out


def expected(name: str, body: dict, version: int, *, defaults: bool = True) -> dict:
    return project(tree(SPECS[name][3]), body, version, defaults=defaults)


# -- 0. the declarations are the oracle's ----------------------------------------------------------

def declared_rows(struct_: Struct, prefix: str = "") -> list[tuple]:
    rows = []
    for f in struct_.fields:
        extra = {}
        if f.nullable:
            extra["nullable"] = "always"
        if f.nullable_versions is not None:
            extra["nullable"] = f.nullable_versions
        if f.tag is not None:
            extra["tag"] = (f.tag, f.tagged_versions)
        of = f.type.of if isinstance(f.type, Array) else None
        kind = (f"[]{of.name}" if isinstance(of, Struct) else f"[]{of}") if of is not None else f.type
        if isinstance(f.type, Struct):
            kind = f.type.name
        rows.append((prefix + f.name, kind, f.versions, f.default, extra))
        if isinstance(of, Struct):
            rows.extend(declared_rows(of, f"{prefix}{f.name}[]."))
        if isinstance(f.type, Struct):
            rows.extend(declared_rows(f.type, f"{prefix}{f.name}."))
    return rows


def normal(row: tuple) -> tuple:
    """A row with its default's type spelled out (False is not 0, [] is not "")."""
    path, type_, versions, default, *extra = row
    return path, type_, versions, type(default).__name__, repr(default), (extra or [{}])[0]


@pytest.mark.parametrize("name", SPECS)
def test_declaration_matches_kafkas_definition(name):
    message, api_key, valid, rows = SPECS[name]
    assert (message.name, int(message.api_key), message.valid_versions) == (name, api_key, valid)
    assert message.flexible_versions == "0+"
    assert [normal(r) for r in declared_rows(message.struct)] == [normal(r) for r in rows]


def test_family_lists_every_message_once():
    assert {m.name for m in c.REQUESTS} == {n for n in SPECS if n.endswith("Request")}
    assert {m.name for m in c.RESPONSES} == {n for n in SPECS if n.endswith("Response")}
    assert len(ALL) == len(SPECS)
    for request, response in zip(c.REQUESTS, c.RESPONSES):
        assert (request.api_key, request.valid_versions) == (response.api_key, response.valid_versions)
    assert ApiKey.UNREGISTER_BROKER == 64


# -- 1. every version compiles; none outside the range does ------------------------------------------

@pytest.mark.parametrize("message", ALL, ids=lambda m: m.name)
def test_compiles_at_every_version_and_refuses_others(message):
    span = versions_of(SPECS[message.name][2])
    assert list(message.versions()) == list(span)
    for version in span:
        assert callable(encoder(message, version)) and callable(decoder(message, version))
    for outside in (span.start - 1, span.stop):
        if outside >= 0:
            with pytest.raises(ValueError):
                encoder(message, outside)


# -- 2. round trips ---------------------------------------------------------------------------------

LISTENERS = [{"name": "PLAINTEXT", "host": "broker-3.rack-b.example", "port": 9092, "security_protocol": 0},
             {"name": "SSL", "host": "10.0.0.3", "port": 65_535, "security_protocol": 1}]
FULL: dict[str, dict] = {
    "BrokerRegistrationRequest": {
        "broker_id": 3, "cluster_id": "MkU3OEVBNTcwNTJENDM2Qk", "incarnation_id": U1, "listeners": LISTENERS,
        "features": [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 21},
                     {"name": "kraft.version", "min_supported_version": 0, "max_supported_version": 1}],
        "rack": "rack-b", "is_migrating_zk_broker": True, "log_dirs": [U2, U3], "previous_broker_epoch": 41},
    "BrokerRegistrationResponse": {"throttle_time_ms": 12, "error_code": 101, "broker_epoch": 42},
    "BrokerHeartbeatRequest": {"broker_id": 3, "broker_epoch": 42, "current_metadata_offset": 2**40 + 7,
                               "want_fence": True, "want_shut_down": True, "offline_log_dirs": [U2, U3]},
    "BrokerHeartbeatResponse": {"throttle_time_ms": 1, "error_code": 15, "is_caught_up": True, "is_fenced": False,
                                "should_shut_down": True},
    "AlterPartitionRequest": {"broker_id": 1, "broker_epoch": 42, "topics": [
        {"topic_id": U1, "partitions": [
            {"partition_index": 0, "leader_epoch": 5, "new_isr": [1, 2, 3],
             "new_isr_with_epochs": [{"broker_id": 1, "broker_epoch": 42}, {"broker_id": 2, "broker_epoch": -1},
                                     {"broker_id": 3, "broker_epoch": 2**33}],
             "leader_recovery_state": 1, "partition_epoch": 9},
            {"partition_index": 7, "leader_epoch": 2, "new_isr": [2], "new_isr_with_epochs": [
                {"broker_id": 2, "broker_epoch": 40}], "leader_recovery_state": 0, "partition_epoch": 3}]},
        {"topic_id": U2, "partitions": []}]},
    "AlterPartitionResponse": {"throttle_time_ms": 3, "error_code": 0, "topics": [
        {"topic_id": U3, "partitions": [
            {"partition_index": 4, "error_code": 0, "leader_id": 1, "leader_epoch": 5, "isr": [1, 3],
             "leader_recovery_state": 1, "partition_epoch": 10},
            {"partition_index": 5, "error_code": 108, "leader_id": -1, "leader_epoch": -1, "isr": [],
             "leader_recovery_state": 0, "partition_epoch": 0}]}]},
    "UnregisterBrokerRequest": {"broker_id": 4},
    "UnregisterBrokerResponse": {"throttle_time_ms": 2, "error_code": 69, "error_message": "broker 4 is alive"},
    "AllocateProducerIdsRequest": {"broker_id": 2, "broker_epoch": 17},
    "AllocateProducerIdsResponse": {"throttle_time_ms": 5, "error_code": 41, "producer_id_start": 2**35,
                                    "producer_id_len": 1000},
    "DescribeQuorumRequest": {"topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0}, {"partition_index": 1}]}, {"topic_name": "other", "partitions": []}]},
    "DescribeQuorumResponse": {"error_code": 7, "error_message": "not the leader", "topics": [
        {"topic_name": "__cluster_metadata", "partitions": [{
            "partition_index": 0, "error_code": 6, "error_message": None, "leader_id": 1, "leader_epoch": 7,
            "high_watermark": 2**34,
            "current_voters": [
                {"replica_id": 1, "replica_directory_id": U1, "log_end_offset": 2**34,
                 "last_fetch_timestamp": 1_764_000_000_000, "last_caught_up_timestamp": 1_764_000_000_001},
                {"replica_id": 2, "replica_directory_id": Z, "log_end_offset": -1,
                 "last_fetch_timestamp": 5, "last_caught_up_timestamp": 6}],
            "observers": [{"replica_id": 4, "replica_directory_id": U2, "log_end_offset": 99,
                           "last_fetch_timestamp": 8, "last_caught_up_timestamp": 9}]}]}],
        "nodes": [{"node_id": 1, "listeners": [{"name": "CONTROLLER", "host": "c1.example", "port": 9093},
                                               {"name": "CONTROLLER_SSL", "host": "c1.example", "port": 9094}]},
                  {"node_id": 2, "listeners": []}]},
    "FetchSnapshotRequest": {"cluster_id": "MkU3OEVBNTcwNTJENDM2Qk", "replica_id": 4, "max_bytes": 1 << 20, "topics": [
        {"name": "__cluster_metadata", "partitions": [
            {"partition": 0, "current_leader_epoch": 7, "snapshot_id": {"end_offset": 2**33, "epoch": 7},
             "position": 2**20, "replica_directory_id": U1}]}]},
    "FetchSnapshotResponse": {"throttle_time_ms": 0, "error_code": 0, "topics": [
        {"name": "__cluster_metadata", "partitions": [
            {"index": 0, "error_code": 98, "snapshot_id": {"end_offset": 100, "epoch": 3},
             "current_leader": {"leader_id": 2, "leader_epoch": 3}, "size": 5000, "position": 4096,
             "unaligned_records": b"\x00\x01snapshot bytes"}]}],
        "node_endpoints": [{"node_id": 2, "host": "c2.example", "port": 9093}]},
}
# The same bodies with every nullable field null.
NULLS: dict[str, dict] = {
    "BrokerRegistrationRequest": {**FULL["BrokerRegistrationRequest"], "rack": None},
    "UnregisterBrokerResponse": {**FULL["UnregisterBrokerResponse"], "error_message": None},
    "DescribeQuorumResponse": {**FULL["DescribeQuorumResponse"], "error_message": None},
    "FetchSnapshotRequest": {**FULL["FetchSnapshotRequest"], "cluster_id": None},
}
CASES = [(m, v, "full") for m in ALL for v in m.versions()] + \
        [(m, v, "nulls") for m in ALL if m.name in NULLS for v in m.versions()]


@pytest.mark.parametrize("message, version, kind", CASES, ids=lambda x: getattr(x, "name", str(x)))
def test_round_trip_at_every_version(message, version, kind):
    body = (FULL if kind == "full" else NULLS)[message.name]
    wire = encoder(message, version)(copy.deepcopy(body))
    assert decoder(message, version)(wire) == expected(message.name, body, version)
    # fields a version lacks play no part in its bytes
    assert encoder(message, version)(expected(message.name, body, version, defaults=False)) == wire


@pytest.mark.parametrize("message", ALL, ids=lambda m: m.name)
def test_empty_body_decodes_to_kafkas_defaults(message):
    for version in message.versions():
        assert decoder(message, version)(encoder(message, version)({})) == expected(message.name, {}, version)


def test_declared_limits_are_enforced_both_ways():
    many = {"listeners": [LISTENERS[0]] * (c.LISTENERS_MAX + 1)}
    with pytest.raises(CodecError, match="listeners"):
        encoder(c.BROKER_REGISTRATION_REQUEST, 0)(many)
    wire = bytes(4) + b"\x01" + bytes(16) + bytes([c.LISTENERS_MAX + 2]) + b"\x00" * 40
    with pytest.raises(CodecError, match="listeners"):
        decoder(c.BROKER_REGISTRATION_REQUEST, 0)(wire)


# -- hand-built bytes (Kafka's protocol guide: compact lengths are n + 1, tagged sections) -------------

T = b"\x00"  # an empty tagged-field section


def cs(text: str | None) -> bytes:
    """A compact (nullable) string."""
    if text is None:
        return b"\x00"
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def ca(count: int) -> bytes:
    """A compact array's count (small arrays only)."""
    return bytes([count + 1])


def ints(fmt: str, *values: object) -> bytes:
    return struct.pack(">" + fmt, *values)


REGISTRATION_SMALL = {"broker_id": 3, "cluster_id": "c", "incarnation_id": U1,
                      "listeners": [{"name": "P", "host": "h", "port": 9092, "security_protocol": 1}],
                      "features": [{"name": "mv", "min_supported_version": 1, "max_supported_version": 21}],
                      "rack": None, "is_migrating_zk_broker": False, "log_dirs": [U2], "previous_broker_epoch": 41}
_REG_V0 = (ints("i", 3) + cs("c") + bytes.fromhex(U1) + ca(1) + cs("P") + cs("h") + ints("Hh", 9092, 1) + T
           + ca(1) + cs("mv") + ints("hh", 1, 21) + T + cs(None))
_HB = ints("iqq??", 3, 42, 100, False, True)
_AP_PART = ints("ii", 0, 5)
VECTORS = [
    (c.BROKER_REGISTRATION_REQUEST, 0, REGISTRATION_SMALL, _REG_V0 + T),
    (c.BROKER_REGISTRATION_REQUEST, 1, REGISTRATION_SMALL, _REG_V0 + b"\x00" + T),
    (c.BROKER_REGISTRATION_REQUEST, 3, REGISTRATION_SMALL,
     _REG_V0 + b"\x00" + ca(1) + bytes.fromhex(U2) + ints("q", 41) + T),
    (c.BROKER_REGISTRATION_RESPONSE, 4, {"throttle_time_ms": 1, "error_code": 2, "broker_epoch": 42},
     ints("ihq", 1, 2, 42) + T),
    (c.BROKER_HEARTBEAT_REQUEST, 0, {"broker_id": 3, "broker_epoch": 42, "current_metadata_offset": 100,
                                     "want_fence": False, "want_shut_down": True}, _HB + T),
    (c.BROKER_HEARTBEAT_REQUEST, 1, {"broker_id": 3, "broker_epoch": 42, "current_metadata_offset": 100,
                                     "want_fence": False, "want_shut_down": True, "offline_log_dirs": [U2]},
     _HB + b"\x01" + b"\x00" + bytes([17]) + ca(1) + bytes.fromhex(U2)),  # one tag: 0, 17 bytes
    (c.BROKER_HEARTBEAT_RESPONSE, 1, {"throttle_time_ms": 0, "error_code": 0, "is_caught_up": True,
                                      "is_fenced": False, "should_shut_down": False}, ints("ih???", 0, 0, 1, 0, 0) + T),
    (c.ALTER_PARTITION_REQUEST, 2, {"broker_id": 1, "broker_epoch": 42, "topics": [{"topic_id": U1, "partitions": [
        {"partition_index": 0, "leader_epoch": 5, "new_isr": [1, 2], "leader_recovery_state": 1,
         "partition_epoch": 9}]}]},
     ints("iq", 1, 42) + ca(1) + bytes.fromhex(U1) + ca(1) + _AP_PART + ca(2) + ints("ii", 1, 2) + ints("bi", 1, 9)
     + T + T + T),
    (c.ALTER_PARTITION_REQUEST, 3, {"broker_id": 1, "broker_epoch": 42, "topics": [{"topic_id": U1, "partitions": [
        {"partition_index": 0, "leader_epoch": 5, "new_isr_with_epochs": [{"broker_id": 2, "broker_epoch": 7}],
         "leader_recovery_state": 0, "partition_epoch": 9}]}]},
     ints("iq", 1, 42) + ca(1) + bytes.fromhex(U1) + ca(1) + _AP_PART + ca(1) + ints("iq", 2, 7) + T
     + ints("bi", 0, 9) + T + T + T),
    (c.ALTER_PARTITION_RESPONSE, 2, {"throttle_time_ms": 0, "error_code": 0, "topics": [{"topic_id": U3, "partitions": [
        {"partition_index": 4, "error_code": 0, "leader_id": 1, "leader_epoch": 5, "isr": [1, 3],
         "leader_recovery_state": 0, "partition_epoch": 10}]}]},
     ints("ih", 0, 0) + ca(1) + bytes.fromhex(U3) + ca(1) + ints("ihii", 4, 0, 1, 5) + ca(2) + ints("ii", 1, 3)
     + ints("bi", 0, 10) + T + T + T),
    (c.UNREGISTER_BROKER_REQUEST, 0, {"broker_id": 4}, ints("i", 4) + T),
    (c.UNREGISTER_BROKER_RESPONSE, 0, {"throttle_time_ms": 0, "error_code": 0, "error_message": None},
     ints("ih", 0, 0) + cs(None) + T),
    (c.UNREGISTER_BROKER_RESPONSE, 0, {"throttle_time_ms": 0, "error_code": 69, "error_message": "ab"},
     ints("ih", 0, 69) + cs("ab") + T),
    (c.ALLOCATE_PRODUCER_IDS_REQUEST, 0, {"broker_id": 2, "broker_epoch": 17}, ints("iq", 2, 17) + T),
    (c.ALLOCATE_PRODUCER_IDS_RESPONSE, 0, {"throttle_time_ms": 3, "error_code": 41, "producer_id_start": 2000,
                                           "producer_id_len": 1000}, ints("ihqi", 3, 41, 2000, 1000) + T),
]


@pytest.mark.parametrize("message, version, body, wire", VECTORS,
                         ids=[f"{m.name}-v{v}-{i}" for i, (m, v, _, _) in enumerate(VECTORS)])
def test_wire_layout_by_hand(message, version, body, wire):
    assert encoder(message, version)(body) == wire
    assert decoder(message, version)(wire) == expected(message.name, body, version)


# -- 3. kafka-python cross-check (it has DescribeQuorum; none of the others) ----------------------------

def _kafka_python():
    protocol = pytest.importorskip("kafka.protocol")
    from kafka.protocol.admin.cluster import DescribeQuorumRequest, DescribeQuorumResponse
    return protocol, {"DescribeQuorumRequest": DescribeQuorumRequest, "DescribeQuorumResponse": DescribeQuorumResponse}


def to_kafka_python(cls, body: dict, version: int | None = None):
    """A kafka-python data object from one of our bodies (only the fields ``version`` has)."""
    values = {}
    for name, field in cls._struct.fields.items():
        if name not in body:
            continue
        value = body[name]
        if field.is_struct_array():
            value = [to_kafka_python(field.data_class, item) for item in value]
        values[name] = value
    return cls(version=version, **values) if version is not None else cls(**values)


def from_kafka_python(value, uuid_paths: set[str], path: str = ""):
    """kafka-python's decoded dict in our shape: uuids as 32 hex digits (its None for the zero uuid of a
    non-nullable uuid field: ours is the zero uuid)."""
    if isinstance(value, dict):
        return {k: from_kafka_python(v, uuid_paths, f"{path}{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [from_kafka_python(v, uuid_paths, f"{path}[].") for v in value]
    if isinstance(value, uuid.UUID):
        return value.hex
    if value is None and path in uuid_paths:
        return Z
    return value


@pytest.mark.parametrize("message", [c.DESCRIBE_QUORUM_REQUEST, c.DESCRIBE_QUORUM_RESPONSE], ids=lambda m: m.name)
def test_kafka_python_reads_ours_and_we_read_theirs(message):
    _, classes = _kafka_python()
    theirs = classes[message.name]
    assert theirs.API_KEY == message.api_key
    low, high = theirs.valid_versions
    uuid_paths = {row[0] for row in SPECS[message.name][3] if row[1] == "uuid"}
    both = [v for v in message.versions() if low <= v <= high]
    assert both == list(message.versions())  # kafka-python knows every version we declare
    bodies = [FULL[message.name]] + ([NULLS[message.name]] if message.name in NULLS else [])
    for version in both:
        for body in bodies:
            ours = encoder(message, version)(copy.deepcopy(body))
            decoded = theirs.decode(ours, version=version).to_dict(json=False)
            assert from_kafka_python(decoded, uuid_paths) == expected(message.name, body, version, defaults=False)
            in_version = expected(message.name, body, version, defaults=False)
            their_wire = to_kafka_python(theirs, in_version, version).encode(version=version)
            assert their_wire == ours
            assert decoder(message, version)(their_wire) == expected(message.name, body, version)


def test_fetch_snapshot_bytes_by_hand():
    """FetchSnapshot v0/v1, every field in Kafka's order: a tagged section after each struct,
    the request's cluster_id (tag 0) and v1's replica_directory_id (tag 0 of the partition), the
    answer's current_leader (tag 0 of the partition) and v1's node_endpoints (tag 0, top level)."""
    snapshot_id = ints("qi", 100, 3) + T
    request = {"replica_id": 4, "max_bytes": 4096, "topics": [{"name": "m", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "snapshot_id": {"end_offset": 100, "epoch": 3},
         "position": 10, "replica_directory_id": U1}]}]}
    part = ints("ii", 0, -1) + snapshot_id + ints("q", 10)
    head = ints("ii", 4, 4096) + ca(1) + cs("m") + ca(1)
    assert encoder(c.FETCH_SNAPSHOT_REQUEST, 0)(request) == head + part + T + T + T
    assert encoder(c.FETCH_SNAPSHOT_REQUEST, 1)(request) == \
        head + part + b"\x01\x00\x10" + bytes.fromhex(U1) + T + T
    response = {"throttle_time_ms": 0, "error_code": 0, "topics": [{"name": "m", "partitions": [
        {"index": 0, "error_code": 0, "snapshot_id": {"end_offset": 100, "epoch": 3},
         "current_leader": {"leader_id": 2, "leader_epoch": 3}, "size": 5, "position": 2,
         "unaligned_records": b"abc"}]}], "node_endpoints": [{"node_id": 2, "host": "h", "port": 9093}]}
    answer_part = ints("ih", 0, 0) + snapshot_id + ints("qq", 5, 2) + bytes([4]) + b"abc"
    leader = b"\x01\x00\x09" + ints("ii", 2, 3) + T
    answer_head = ints("ih", 0, 0) + ca(1) + cs("m") + ca(1)
    assert encoder(c.FETCH_SNAPSHOT_RESPONSE, 0)(response) == answer_head + answer_part + leader + T + T
    endpoints = ca(1) + ints("i", 2) + cs("h") + ints("H", 9093) + T
    assert encoder(c.FETCH_SNAPSHOT_RESPONSE, 1)(response) == \
        answer_head + answer_part + leader + T + b"\x01\x00" + bytes([len(endpoints)]) + endpoints
