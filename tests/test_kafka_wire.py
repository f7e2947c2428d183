"""The Kafka path's shims (broker/kafka_wire.py) and the listener's ApiVersions, without a cluster:
what tests/test_compat_clients.py found with real clients, pinned at every version it concerns."""
from __future__ import annotations

import asyncio

import pytest

from raftka.broker.kafka_wire import ANSWER_SHIMS, HANDLER_WRAPPERS
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


@pytest.mark.parametrize("session_id, epoch, code", [
    (0, -1, None), (0, 0, None), (9, -1, None), (9, 0, None), (9, 1, 70), (9, 5, 70), (0, 1, 70),
])
def test_fetch_sessions_are_declined_and_an_incremental_fetch_finds_no_session(session_id, epoch, code):
    called = []

    async def handler(body):
        called.append(body)
        return errors.NONE, {"error_code": 0, "session_id": 0, "responses": []}

    result = asyncio.run(HANDLER_WRAPPERS[ApiKey.FETCH](handler, 12, {"session_id": session_id,
                                                                       "session_epoch": epoch}))
    if code is None:
        assert len(called) == 1 and result[1]["error_code"] == 0
    else:
        assert not called and result == (errors.NONE, {"error_code": code, "session_id": 0, "responses": []})


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


@pytest.mark.parametrize("version", BROKER_API[ApiKey.DESCRIBE_CONFIGS][1].versions())
def test_describe_configs_values_go_out_as_kafkas_strings_with_their_source(version):
    # The controller keeps typed values; Kafka's answer carries strings ("true", "a,b", "604800000").
    request = {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": ["retention.ms",
                                                                                              "cleanup.policy"]}]}
    answer = {"results": [{"resource_name": "t", "error_code": 0, "error_message": None, "configs": [
        {"name": "retention.ms", "value": 604800000, "is_default": True},
        {"name": "cleanup.policy", "value": ["delete", "compact"], "is_default": False},
        {"name": "preallocate", "value": False, "is_default": True}]}]}
    response = BROKER_API[ApiKey.DESCRIBE_CONFIGS][1]
    shimmed = ANSWER_SHIMS[ApiKey.DESCRIBE_CONFIGS](version, request, answer)
    decoded = decoder(response, version)(encoder(response, version)(shimmed))
    configs = {c["name"]: c for c in decoded["results"][0]["configs"]}
    assert set(configs) == {"retention.ms", "cleanup.policy"}  # the keys asked for only
    assert configs["retention.ms"]["value"] == "604800000" and configs["cleanup.policy"]["value"] == "delete,compact"
    assert configs["retention.ms"]["config_source"] == 5 and configs["cleanup.policy"]["config_source"] == 1
    assert decoded["results"][0]["resource_type"] == 2
