"""The operations family's declarations (common/messages/operations.py): ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments against Kafka's wire format.

kafka-python ships no definition of these three, so instead of its cross-check: every message
compiles at every version it declares, a representative body (nulls included: every partition,
a cancel) decodes to itself after encoding, the version boundaries behave as Kafka's (v0 has no
election type, v2 turns flexible), and two requests are checked byte for byte against encodings
written here by hand.
"""
from __future__ import annotations

import struct

import pytest

from raftka.common.codec import decoder, encoder
from raftka.common.messages import operations as ops

MESSAGES = ops.REQUESTS + ops.RESPONSES
AT_EVERY_VERSION = [(m, v) for m in MESSAGES for v in m.versions()]
IDS = [f"{m.name}-v{v}" for m, v in AT_EVERY_VERSION]

BODIES = {
    "ElectLeadersRequest": {"election_type": 1, "timeout_ms": 30_000,
                            "topic_partitions": [{"topic": "orders", "partition_id": [0, 2]},
                                                 {"topic": "logs", "partition_id": []}]},
    "ElectLeadersResponse": {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
        {"topic": "orders", "partition_result": [
            {"partition_id": 0, "error_code": 0, "error_message": None},
            {"partition_id": 2, "error_code": 84, "error_message": "broker 3, the preferred replica, leads"}]}]},
    "AlterPartitionReassignmentsRequest": {"timeout_ms": 60_000, "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0, "replicas": [4, 5, 6]},
                                          {"partition_index": 1, "replicas": None}]}]},
    "AlterPartitionReassignmentsResponse": {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                                            "responses": [{"name": "orders", "partitions": [
                                                {"partition_index": 0, "error_code": 0, "error_message": None},
                                                {"partition_index": 1, "error_code": 85,
                                                 "error_message": "none in progress"}]}]},
    "ListPartitionReassignmentsRequest": {"timeout_ms": 60_000, "topics": None},
    "ListPartitionReassignmentsResponse": {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0, "replicas": [4, 5, 6, 1, 2, 3],
                                           "adding_replicas": [4, 5, 6], "removing_replicas": [1, 2, 3]}]}]},
}


def test_the_module_lists_each_api_once_request_and_response_alike():
    assert [m.api_key for m in ops.REQUESTS] == [43, 45, 46] == [m.api_key for m in ops.RESPONSES]
    for request, response in zip(ops.REQUESTS, ops.RESPONSES):
        assert response.name == request.name[:-7] + "Response"
        assert (request.valid_versions, request.flexible_versions) == (response.valid_versions,
                                                                       response.flexible_versions)
    assert set(BODIES) == {m.name for m in MESSAGES}


@pytest.mark.parametrize("message, version", AT_EVERY_VERSION, ids=IDS)
def test_a_representative_body_decodes_to_itself_after_encoding(message, version):
    body = dict(BODIES[message.name])
    if message.name == "ElectLeadersRequest" and version == 0:
        body["election_type"] = 0  # v0 has no election type: preferred, its default
    wire = encoder(message, version)(body)
    decoded = decoder(message, version)(wire)
    assert decoded == body
    assert encoder(message, version)(decoded) == wire


def test_version_boundaries_of_elect_leaders():
    request = ops.ELECT_LEADERS_REQUEST
    v0 = decoder(request, 0)(encoder(request, 0)(BODIES["ElectLeadersRequest"]))
    assert v0["election_type"] == 0  # not on the wire before v1
    every = {"election_type": 0, "topic_partitions": None, "timeout_ms": 1000}
    for version in (0, 1, 2):
        assert decoder(request, version)(encoder(request, version)(every))["topic_partitions"] is None
    response = ops.ELECT_LEADERS_RESPONSE
    assert decoder(response, 0)(encoder(response, 0)({**BODIES["ElectLeadersResponse"], "error_code": 41}))[
        "error_code"] == 0  # no top-level error before v1


def test_requests_byte_for_byte():
    v0 = encoder(ops.ELECT_LEADERS_REQUEST, 0)({"topic_partitions": [{"topic": "t", "partition_id": [1, 2]}],
                                                 "timeout_ms": 500})
    assert v0 == (struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 1, 2)
                  + struct.pack(">i", 500))
    # flexible (v0 already): compact arrays and strings (length + 1), a null array is 0, tagged-field sections
    alter = encoder(ops.ALTER_PARTITION_REASSIGNMENTS_REQUEST, 0)(
        {"timeout_ms": 500, "topics": [{"name": "t", "partitions": [{"partition_index": 3, "replicas": None}]}]})
    assert alter == (struct.pack(">i", 500) + bytes([2]) + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 3)
                     + bytes([0]) + bytes([0]) + bytes([0]) + bytes([0]))
