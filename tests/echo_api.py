"""A test-only API for the transport tests: one request shape that steers a handler, declared as
every API is (common/schema.py), so the tests exercise Kafka's framing, header versions and codec
without a real API's handler.

``ECHO_API`` serves it under Produce (0), Fetch (1) and Metadata (3), so metrics and logs name
real APIs. Version 0 is non-flexible (request header v1, response header v0), version 1 flexible
(request header v2, response header v1); a connection sends the newest, v1, unless told.
"""
from __future__ import annotations

import struct
from typing import Any, Final

from raftka.common.api import ApiKey
from raftka.common.codec import encoder, request_header_version
from raftka.common.schema import Field, Message
from raftka.common.server import Handler, Server
from raftka.common.transport import Connection, decode_kafka_response

ECHO_VERSIONS: Final = "0-1"
ECHO_FLEXIBLE: Final = "1+"


def _request(api_key: int) -> Message:
    return Message(api_key, "EchoRequest", ECHO_VERSIONS, (
        Field("i", "int32", default=0, about="echoed back; handlers record the order they start in"),
        Field("delay_ms", "int32", default=0, about="the handler sleeps this long"),
        Field("gate", "bool", default=False, about="the handler waits for the test's gate"),
        Field("no_answer", "bool", default=False, about="the handler answers None (as acks=0)"),
        Field("fail", "string", default=None, nullable=True, about="bug, own-timeout or typed"),
        Field("answer_bytes", "int32", default=0, about="bytes of padding the answer carries"),
        Field("pad", "bytes", default=b""),
    ), flexible_versions=ECHO_FLEXIBLE)


def _response(api_key: int) -> Message:
    return Message(api_key, "EchoResponse", ECHO_VERSIONS, (
        Field("error_code", "int16", default=0),
        Field("error_message", "string", default=None, nullable=True),
        Field("i", "int32", default=0),
        Field("pad", "bytes", default=b""),
    ), flexible_versions=ECHO_FLEXIBLE)


ECHO_API: Final = {key: (_request(key), _response(key)) for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA)}


def echo_server(handler: Handler, **limits: Any) -> Server:
    """A Server serving ECHO_API with ``handler`` (start it with ``await ....start(host, 0)``)."""
    return Server(handler, kafka_api=ECHO_API, **limits)


async def echo_connection(host: str, port: int, **options: Any) -> Connection:
    """A client Connection that sends ECHO_API's requests."""
    return await Connection.open(host, port, kafka_api=ECHO_API, **options)


def echo_frame(api_key: int, correlation_id: int, body: dict, *, version: int = 1,
               client_id: str | None = "raw") -> bytes:
    """A whole request frame (length, header, body) as raw bytes, for tests that write sockets."""
    request = ECHO_API[api_key][0]
    client = b"" if client_id is None else client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, -1 if client_id is None else len(client)) + client
    if request_header_version(request, version) == 2:
        header += b"\x00"  # no tagged fields
    payload = header + encoder(request, version)(body)
    return struct.pack(">I", len(payload)) + payload


def echo_answer(payload: bytes, api_key: int, version: int = 1) -> tuple[int, dict]:
    """(correlation_id, body) of an answer frame's payload (after its length)."""
    return decode_kafka_response(payload, api_key, version, ECHO_API, {})


def echo_answer_frame(api_key: int, correlation_id: int, body: dict, *, version: int = 1) -> bytes:
    """A whole answer frame (length, response header, body) as a server would write it."""
    response = ECHO_API[api_key][1]
    payload = struct.pack(">i", correlation_id) + (b"\x00" if response.flexible(version) else b"")
    payload += encoder(response, version)(body)
    return struct.pack(">I", len(payload)) + payload
