"""The Kafka path's shims (broker/kafka_wire.py) and the listener's ApiVersions, without a cluster:
what tests/test_compat_clients.py found with real clients, pinned at every version it concerns."""
from __future__ import annotations

import copy

import pytest

from raftka.broker.kafka_wire import ANSWER_SHIMS, REQUEST_SHIMS
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.codec import decoder, encoder
from raftka.common.messages import BROKER_API
from raftka.common.server import Server

JOIN_REQUEST, JOIN_RESPONSE = BROKER_API[ApiKey.JOIN_GROUP]


@pytest.mark.parametrize("version", JOIN_RESPONSE.versions())
def test_a_join_group_error_answer_with_no_protocol_encodes_at_every_version(version):
    # The coordinator's MEMBER_ID_REQUIRED (v4+) and other join errors say "no protocol" with
    # null, which JoinGroup allows from v7 only; every client of v4..v6 (aiokafka, librdkafka)
    # got UNKNOWN_SERVER_ERROR instead of its member id before the shim.
    answer = {"error_code": errors.MEMBER_ID_REQUIRED, "error_message": "join again", "generation_id": -1,
              "protocol_type": None, "protocol_name": None, "leader": "", "skip_assignment": False,
              "member_id": "m-1", "members": []}
    shimmed = ANSWER_SHIMS[ApiKey.JOIN_GROUP](version, {}, answer)
    decoded = decoder(JOIN_RESPONSE, version)(encoder(JOIN_RESPONSE, version)(shimmed))
    assert decoded["error_code"] == errors.MEMBER_ID_REQUIRED and decoded["member_id"] == "m-1"
    assert decoded["protocol_name"] == ("" if version < 7 else None)


def test_api_versions_advertise_produce_from_v0_while_serving_v3_and_up():
    # KAFKA-18659: librdkafka sends compressed batches only to a broker whose Produce range meets v0.
    server = Server(lambda request: None, kafka_api=BROKER_API)
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in server.kafka_api_versions()}
    produce_request = BROKER_API[ApiKey.PRODUCE][0]
    assert ranges[ApiKey.PRODUCE] == (0, produce_request.versions()[-1])
    assert produce_request.versions()[0] == 3  # still served from v3 only
    fetch_request = BROKER_API[ApiKey.FETCH][0]
    assert ranges[ApiKey.FETCH] == (fetch_request.versions()[0], fetch_request.versions()[-1])


# -- the listener's request header, read by hand (common/server.py _decode_kafka) ---------------------

def _server() -> Server:
    async def handler(request):  # never called: these tests decode only
        return None
    return Server(handler, kafka_api=BROKER_API)


@pytest.mark.parametrize("client_id", ["client-1", None, "\u00e9t\u00e9", ""])
@pytest.mark.parametrize("version", [3, 8, 9, 10])  # header v1 below Produce v9, v2 from it
def test_the_hand_read_request_header_agrees_with_the_codec(client_id, version):
    from raftka.common.codec import encode_request_header, request_header_version
    request = BROKER_API[ApiKey.PRODUCE][0]
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"r"}]}]}
    header_version = request_header_version(request, version)
    payload = encode_request_header({"api_key": 0, "api_version": version, "correlation_id": 42,
                                     "client_id": client_id}, header_version) + encoder(request, version)(body)
    api_key, api_version, correlation_id, got_client_id, got_body, got_header = _server()._decode_kafka(payload)
    assert (api_key, api_version, correlation_id, got_client_id, got_header) == (0, version, 42, client_id,
                                                                                 header_version)
    assert got_body["topic_data"][0]["partition_data"][0]["records"] == b"r"


def test_a_v2_header_with_tagged_fields_is_read_past_them():
    from raftka.common.codec import encoder as enc
    request = BROKER_API[ApiKey.PRODUCE][0]
    body = enc(request, 10)({"acks": 1, "timeout_ms": 5, "topic_data": []})
    # api key 0, v10, correlation 9, client_id "c", then one unknown tagged field (tag 7, 2 bytes)
    header = bytes.fromhex("0000000a00000009") + b"\x00\x01c" + bytes.fromhex("01070201ff")
    assert _server()._decode_kafka(header + body)[:4] == (0, 10, 9, "c")


@pytest.mark.parametrize("payload, says", [
    (bytes.fromhex("0000000a000000"), "cut short"),
    (bytes.fromhex("0000000a00000009") + b"\x00\x09ab", "client_id cut short"),
    (bytes.fromhex("0000000a00000009") + b"\x00\x02\xff\xfe\x00", "not UTF-8"),
    (bytes.fromhex("0000000200000009ffff"), "version 2 is not supported"),
    (bytes.fromhex("00630000000000090000"), "unknown api key 99"),
])
def test_a_bad_request_header_closes_the_connection_with_a_reason(payload, says):
    from raftka.common.errors import FrameError
    with pytest.raises(FrameError, match=says):
        _server()._decode_kafka(payload)


@pytest.mark.parametrize("version", BROKER_API[ApiKey.DELETE_TOPICS][0].versions())
def test_delete_topics_of_every_version_reach_the_controller_in_v6s_shape(version):
    # The broker forwards DeleteTopics at v6 (broker/controller_channel.py), where topics are named
    # in ``topics``: v1-5's ``topic_names`` would be lost re-encoded at v6 without the shim.
    request = BROKER_API[ApiKey.DELETE_TOPICS][0]
    sent = {"topic_names": ["a", "b"], "timeout_ms": 5000,
            "topics": [{"name": "a", "topic_id": "0" * 32}, {"name": "b", "topic_id": "0" * 32}]}
    decoded = decoder(request, version)(encoder(request, version)(sent))
    shimmed = REQUEST_SHIMS[ApiKey.DELETE_TOPICS](version, decoded)
    forwarded = decoder(request, 6)(encoder(request, 6)(shimmed))
    assert [t["name"] for t in forwarded["topics"]] == ["a", "b"] and forwarded["timeout_ms"] == 5000


# The broker's DescribeCluster handler lists every registered broker with ``fenced`` and names the
# active controller (which may be a controller-only node no client can reach).
DESCRIBED = {"cluster_id": "c-1", "controller_id": 3001, "brokers": [
    {"broker_id": 1, "host": "h1", "port": 9092, "rack": None, "fenced": True},
    {"broker_id": 2, "host": "h2", "port": 9093, "rack": "r2", "fenced": False},
    {"broker_id": 3, "host": "h3", "port": 9094, "rack": None, "fenced": False}]}
CLUSTER_REQUEST, CLUSTER_RESPONSE = BROKER_API[ApiKey.DESCRIBE_CLUSTER]


@pytest.mark.parametrize("version", CLUSTER_RESPONSE.versions())
@pytest.mark.parametrize("include_fenced", [False, True])
def test_describe_cluster_lists_unfenced_brokers_unless_v2_asks_and_names_a_live_broker_controller(
        version, include_fenced):
    request = decoder(CLUSTER_REQUEST, version)(encoder(CLUSTER_REQUEST, version)(
        {"include_cluster_authorized_operations": False, "endpoint_type": 1,
         "include_fenced_brokers": include_fenced}))
    body = REQUEST_SHIMS[ApiKey.DESCRIBE_CLUSTER](version, request)
    shimmed = ANSWER_SHIMS[ApiKey.DESCRIBE_CLUSTER](version, body, copy.deepcopy(DESCRIBED))
    decoded = decoder(CLUSTER_RESPONSE, version)(encoder(CLUSTER_RESPONSE, version)(shimmed))
    listed = [b["broker_id"] for b in decoded["brokers"]]
    assert listed == ([1, 2, 3] if include_fenced and version >= 2 else [2, 3])
    if version >= 2:
        assert [b["is_fenced"] for b in decoded["brokers"]] == [b == 1 for b in listed]
    assert decoded["controller_id"] == 2  # Metadata's rule: the lowest live broker, never controller 3001
    assert decoded["endpoint_type"] == 1  # v0 lacks the field: it decodes as Kafka's default, 1


def test_describe_cluster_asked_for_controllers_answers_mismatched_endpoint_type():
    request = {"include_cluster_authorized_operations": False, "endpoint_type": 2, "include_fenced_brokers": False}
    with pytest.raises(errors.MismatchedEndpointTypeError, match="endpoint type 2"):
        REQUEST_SHIMS[ApiKey.DESCRIBE_CLUSTER](1, request)
