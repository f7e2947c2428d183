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
