"""The shared transport (common/transport.py) over real sockets on 127.0.0.1, port 0.

Each test runs its own event loop (asyncio.run) with a Server and Connections in-process; no
mocks of our own parts. Every wait in these tests has a timeout, so a hang fails fast.
"""
from __future__ import annotations

import asyncio
import random
import socket
import struct
import time
from typing import Any

import pytest

from echo_api import echo_answer, echo_answer_frame, echo_connection, echo_frame, echo_server
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import FrameError, NetworkExceptionError, RequestTimedOutError
from raftka.common.server import Request, Response
from raftka.common.transport import CORRELATION_ID_MAX, Connection

HOST = "127.0.0.1"
WAIT_S = 5.0  # upper bound of any wait in these tests


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


async def until(predicate, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def raw_exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes on a fresh socket; everything the server sends until it closes."""
    with socket.create_connection((HOST, port), timeout=WAIT_S) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # so a frame cut short ends in EOF, not a wait
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk


class Echo:
    """A handler recording the order handlers start in; bodies (tests/echo_api.py) steer it:
    ``delay_ms`` sleep, ``gate`` wait on an event, ``no_answer`` answer None, ``fail`` raise."""

    def __init__(self) -> None:
        self.started: list[Any] = []
        self.gate = asyncio.Event()

    async def __call__(self, request: Request) -> Response | None:
        body = request.body
        self.started.append(body["i"])
        if body["fail"] == "bug":
            raise KeyError("a bug in the handler")
        if body["fail"] == "own-timeout":
            await asyncio.wait_for(asyncio.sleep(1), 0.01)
        if body["fail"] == "typed":
            raise errors.NotLeaderOrFollowerError("broker 2 leads it now")
        if body["gate"]:
            await asyncio.wait_for(self.gate.wait(), WAIT_S)
        if body["delay_ms"]:
            await asyncio.sleep(body["delay_ms"] / 1000)
        if body["no_answer"]:
            return None
        return Response(errors.NONE, {"i": body["i"], "pad": body["pad"]})


def test_requests_go_at_the_newest_declared_version_unless_told_and_both_header_versions_are_served():
    async def main() -> None:
        versions: list[tuple[int, int]] = []

        async def handler(request: Request) -> Response:
            versions.append((request.api_version, request.header_version))
            return Response(errors.NONE, {"i": request.body["i"]})
        server = await echo_server(handler).start(HOST, 0)
        pinned = await echo_connection(HOST, server.port, kafka_versions={ApiKey.FETCH: 0})
        try:
            assert (await pinned.request(ApiKey.METADATA, {"i": 1}))[1]["i"] == 1  # newest: v1, flexible
            assert (await pinned.request(ApiKey.FETCH, {"i": 2}))[1]["i"] == 2  # pinned: v0
            assert (await pinned.request(ApiKey.METADATA, {"i": 3}, api_version=0))[1]["i"] == 3
            assert versions == [(1, 2), (0, 1), (0, 1)]
            with pytest.raises(FrameError, match="not declared"):
                await pinned.request(ApiKey.METADATA, {"i": 4}, api_version=7)
            with pytest.raises(FrameError, match="no declaration"):
                await pinned.request(999, {})
            assert not pinned.closed
        finally:
            await pinned.close()
            await server.close()
    run(main())


def test_pipelined_requests_are_answered_in_arrival_order_even_when_handled_out_of_order():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo, name="test").start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=20)
        try:
            answered: list[int] = []

            async def one(i: int) -> None:
                # Early requests are the slowest, so handlers finish in reverse order.
                code, body = await conn.request(ApiKey.METADATA, {"i": i, "delay_ms": (20 - i) * 3},
                                                timeout_ms=5000)
                assert (code, body["i"]) == (errors.NONE, i)
                answered.append(i)
            await asyncio.gather(*(one(i) for i in range(20)))
            assert echo.started == list(range(20)), "handlers start in arrival order"
            assert answered == list(range(20)), "answers come back in arrival order"
            assert server.metrics.requests[ApiKey.METADATA] == 20
            assert not conn.closed
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_requests_without_an_answer_interleave_with_answered_ones():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=50)
        try:
            async def one(i: int) -> Any:
                no_answer = i % 3 == 0  # like Produce with acks=0
                result = await conn.request(ApiKey.PRODUCE, {"i": i, "no_answer": no_answer,
                                                             "delay_ms": i % 4},
                                            expect_response=not no_answer, timeout_ms=5000)
                return no_answer, result
            results = await asyncio.gather(*(one(i) for i in range(30)))
            for i, (no_answer, (code, body)) in enumerate(results):
                assert code == errors.NONE
                assert body is None if no_answer else body["i"] == i
            assert echo.started == list(range(30))
            assert not conn.closed and conn.in_flight_count == 0
        finally:
            await conn.close()
            await server.close()
    run(main())


@pytest.mark.parametrize("bad_bytes", [
    pytest.param(b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1", id="first-byte-not-zero"),
    pytest.param(b"\xff\xff\xff\xff", id="length-over-socket.request.max.bytes"),
    pytest.param(struct.pack(">I", 3) + b"\x00\x03\x00", id="header-cut-short"),
    pytest.param(echo_frame(ApiKey.METADATA, 1, {"i": 1})[:-1], id="frame-cut-short-then-eof"),
    pytest.param(echo_frame(ApiKey.METADATA, 1, {"i": 1})[:-3] + b"\x00\x00", id="body-cut-short"),
    pytest.param(b"\x00\x00\x00\x08" + struct.pack(">hhi", ApiKey.METADATA, 1, 1), id="client-id-missing"),
    pytest.param(echo_frame(ApiKey.METADATA, 1, {"i": 1}, version=0).replace(b"\x00\x00\x00\x00\x00\x00\x00",
                                                                          b"\x00\x00\x00\x00\x00\x00\x05", 1)
                 + b"\x00", id="string-length-past-the-end"),
])
def test_bad_bytes_close_only_that_connection(bad_bytes):
    async def main() -> None:
        server = await echo_server(Echo(), max_frame_bytes=1 << 20).start(HOST, 0)
        good = await echo_connection(HOST, server.port)
        try:
            assert (await good.request(ApiKey.METADATA, {"i": 1}, timeout_ms=5000))[1]["i"] == 1
            received = await asyncio.get_running_loop().run_in_executor(None, raw_exchange, server.port, bad_bytes)
            assert received == b"", "the server closes a bad connection without answering"
            assert (await good.request(ApiKey.METADATA, {"i": 2}, timeout_ms=5000))[1]["i"] == 2
            assert not good.closed
            await until(lambda: server.connection_count == 1)
            # A frame that came whole but is not a request as declared counts as a bad frame.
            assert server.metrics.connections_closed_bad_frame <= 1
        finally:
            await good.close()
            await server.close()
    run(main())


@pytest.mark.parametrize("payload", [
    pytest.param(b"\x95\x03\x00\x01\xa1c\x80", id="an-array-tag-first"),
    pytest.param(b"GET / HTTP/1.1\r\n\r\n", id="http"),
])
def test_a_frame_that_is_not_a_kafka_request_closes_the_connection_and_counts_as_a_bad_frame(payload):
    async def main() -> None:
        server = await echo_server(Echo()).start(HOST, 0)
        try:
            received = await asyncio.get_running_loop().run_in_executor(
                None, raw_exchange, server.port, struct.pack(">I", len(payload)) + payload)
            assert received == b""
            await until(lambda: server.metrics.connections_closed_bad_frame == 1)
        finally:
            await server.close()
    run(main())


def test_a_client_that_half_closes_still_gets_every_answer_then_the_server_closes():
    async def main() -> None:
        server = await echo_server(Echo()).start(HOST, 0)
        try:
            frames = b"".join(echo_frame(ApiKey.METADATA, i, {"i": i, "delay_ms": 5 - i}) for i in range(3))
            received = await asyncio.get_running_loop().run_in_executor(None, raw_exchange, server.port, frames)
            answers = []
            while received:
                (length,) = struct.unpack(">I", received[:4])
                answers.append(echo_answer(received[4:4 + length], ApiKey.METADATA))
                received = received[4 + length:]
            assert [(cid, body["error_code"], body["i"]) for cid, body in answers] == [(0, 0, 0), (1, 0, 1), (2, 0, 2)]
        finally:
            await server.close()
    run(main())


def test_an_undeclared_version_or_api_key_closes_that_connection_only_as_kafka_does():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo, name="broker 1").start(HOST, 0)
        other = await echo_connection(HOST, server.port)
        try:
            for frame in (echo_frame(ApiKey.FETCH, 0, {"i": 2}).replace(b"\x00\x01\x00\x01", b"\x00\x01\x00\x07", 1),
                          echo_frame(ApiKey.FETCH, 0, {"i": 2}).replace(b"\x00\x01\x00\x01", b"\x00\x63\x00\x01", 1)):
                received = await asyncio.get_running_loop().run_in_executor(None, raw_exchange, server.port, frame)
                assert received == b""
            await until(lambda: server.metrics.connections_closed_bad_frame == 2)
            assert echo.started == [], "no handler ran"
            assert server.metrics.requests[-1] == 1, "the unknown api key is counted under one label"
            assert (await other.request(ApiKey.FETCH, {"i": 4}, timeout_ms=5000))[1]["i"] == 4
        finally:
            await other.close()
            await server.close()
    run(main())


def test_a_handler_exception_is_answered_unknown_server_error_and_the_connection_survives(caplog):
    async def main() -> None:
        server = await echo_server(Echo()).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        try:
            # Kafka's answers carry a whole-request error in their error fields (error_answers.py).
            code, body = await conn.request(ApiKey.PRODUCE, {"i": 1, "fail": "bug"}, timeout_ms=5000)
            assert code == errors.NONE and body["error_code"] == errors.UNKNOWN_SERVER_ERROR and body["error_message"]
            code, body = await conn.request(ApiKey.PRODUCE, {"i": 2, "fail": "typed"}, timeout_ms=5000)
            assert body["error_code"] == errors.NOT_LEADER_OR_FOLLOWER
            assert body["error_message"] == "broker 2 leads it now"
            assert (await conn.request(ApiKey.PRODUCE, {"i": 3}, timeout_ms=5000)) == (
                0, {"error_code": 0, "error_message": None, "i": 3, "pad": b""})
            assert not conn.closed
        finally:
            await conn.close()
            await server.close()
    run(main())
    assert any("handler failed" in r.getMessage() for r in caplog.records)


def test_a_handler_over_handler_timeout_ms_is_cancelled_and_answered_request_timed_out():
    async def main() -> None:
        server = await echo_server(Echo(), handler_timeout_ms=100).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        try:
            _, body = await conn.request(ApiKey.FETCH, {"i": 1, "delay_ms": 2000}, timeout_ms=5000)
            assert body["error_code"] == errors.REQUEST_TIMED_OUT and "100 ms" in body["error_message"]
            # A TimeoutError of the handler's own making is a handler failure, not ours.
            _, body = await conn.request(ApiKey.FETCH, {"i": 3, "fail": "own-timeout"}, timeout_ms=5000)
            assert body["error_code"] == errors.UNKNOWN_SERVER_ERROR
            assert (await conn.request(ApiKey.FETCH, {"i": 2}, timeout_ms=5000))[1]["i"] == 2
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_losing_the_connection_fails_every_request_in_flight_with_network_exception():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        try:
            tasks = [asyncio.create_task(conn.request(ApiKey.FETCH, {"i": i, "gate": True}, timeout_ms=5000))
                     for i in range(3)]
            await until(lambda: len(echo.started) == 3)
            await server.close()  # drops every connection
            for task in tasks:
                with pytest.raises(NetworkExceptionError) as caught:
                    await task
                assert caught.value.retriable
            assert conn.closed
            with pytest.raises(NetworkExceptionError):
                await conn.request(ApiKey.FETCH, {"i": 9}, timeout_ms=5000)
        finally:
            await conn.close()
    run(main())


def test_connecting_to_a_closed_port_raises_network_exception():
    async def main() -> None:
        server = await echo_server(Echo()).start(HOST, 0)
        port = server.port
        await server.close()
        with pytest.raises(NetworkExceptionError):
            await echo_connection(HOST, port, connect_timeout_ms=2000)
    run(main())


def test_a_request_over_its_timeout_fails_alone_and_the_late_answer_is_dropped():
    async def main() -> None:
        server = await echo_server(Echo()).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        try:
            started = time.monotonic()
            with pytest.raises(RequestTimedOutError):
                await conn.request(ApiKey.FETCH, {"i": 1, "delay_ms": 300}, timeout_ms=100)
            assert 0.09 < time.monotonic() - started < 0.25
            # The next request waits behind the slow one, then gets its own answer.
            code, body = await conn.request(ApiKey.FETCH, {"i": 2}, timeout_ms=5000)
            assert (code, body["i"]) == (errors.NONE, 2)
            assert not conn.closed and conn.in_flight_count == 0
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_the_client_keeps_at_most_max_in_flight_requests_and_the_sixth_waits():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=5)
        try:
            tasks = [asyncio.create_task(conn.request(ApiKey.FETCH, {"i": i, "gate": True}, timeout_ms=5000))
                     for i in range(6)]
            await until(lambda: len(echo.started) == 5)
            await asyncio.sleep(0.1)
            assert len(echo.started) == 5 and conn.in_flight_count == 5
            # A waiter for a slot gives up at its own timeout.
            with pytest.raises(RequestTimedOutError):
                await conn.request(ApiKey.FETCH, {"i": 99}, timeout_ms=50)
            echo.gate.set()
            assert [(await t)[1]["i"] for t in tasks] == list(range(6))
            assert echo.started == list(range(6))
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_submit_writes_at_once_or_queues_in_order_behind_waiting_requests():
    # The producer's path per batch: a future, no task. Without a free slot it queues, and the
    # requests go out in the order they were made, submit() and request() alike.
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=1)
        try:
            first = conn.submit(ApiKey.FETCH, {"i": 0, "gate": True}, timeout_ms=5000)
            await until(lambda: echo.started == [0])  # written at once: no task had to run
            waiting = asyncio.create_task(conn.request(ApiKey.FETCH, {"i": 1}, timeout_ms=5000))
            await asyncio.sleep(0.01)
            queued = [conn.submit(ApiKey.FETCH, {"i": i}, timeout_ms=5000) for i in (2, 3)]
            echo.gate.set()
            assert (await first)[1]["i"] == 0
            assert (await waiting)[1]["i"] == 1
            assert [(await f)[1]["i"] for f in queued] == [2, 3]
            assert echo.started == [0, 1, 2, 3] and conn.in_flight_count == 0
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_submit_times_out_alone_and_fails_with_the_connection():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=2)
        try:
            started = time.monotonic()
            slow = conn.submit(ApiKey.FETCH, {"i": 1, "delay_ms": 300}, timeout_ms=100)
            with pytest.raises(RequestTimedOutError):
                await slow
            assert 0.09 < time.monotonic() - started < 0.25
            # The late answer is dropped; the connection and its order survive.
            assert (await conn.submit(ApiKey.FETCH, {"i": 2}, timeout_ms=5000))[1]["i"] == 2
            # A timeout counts the wait for a slot too.
            gated = [conn.submit(ApiKey.FETCH, {"i": i, "gate": True}, timeout_ms=5000) for i in (3, 4)]
            behind = conn.submit(ApiKey.FETCH, {"i": 5}, timeout_ms=100)
            with pytest.raises(RequestTimedOutError):
                await behind
            await until(lambda: echo.started[-2:] == [3, 4])
            queued = conn.submit(ApiKey.FETCH, {"i": 6}, timeout_ms=5000)  # waits for a slot
            await server.close()  # drops the connection: in flight and queued fail alike
            for future in (*gated, queued):
                with pytest.raises(NetworkExceptionError):
                    await future
            assert 5 not in echo.started and 6 not in echo.started
            with pytest.raises(NetworkExceptionError):
                conn.submit(ApiKey.FETCH, {"i": 9})
        finally:
            await conn.close()
    run(main())


def test_a_request_cancelled_while_it_waits_for_a_slot_passes_the_slot_on():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=1)
        try:
            held = asyncio.create_task(conn.request(ApiKey.FETCH, {"i": 0, "gate": True}, timeout_ms=5000))
            await until(lambda: echo.started == [0])
            cancelled = asyncio.create_task(conn.request(ApiKey.FETCH, {"i": 1}, timeout_ms=5000))
            after = asyncio.create_task(conn.request(ApiKey.FETCH, {"i": 2}, timeout_ms=5000))
            await asyncio.sleep(0.01)
            cancelled.cancel()
            echo.gate.set()
            assert (await held)[1]["i"] == 0 and (await after)[1]["i"] == 2
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            assert echo.started == [0, 2]
            assert (await conn.request(ApiKey.FETCH, {"i": 3}, timeout_ms=5000))[1]["i"] == 3
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_the_server_stops_reading_a_connection_at_max_in_flight_per_connection():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo, max_in_flight_per_connection=3).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=10)
        try:
            tasks = [asyncio.create_task(conn.request(ApiKey.FETCH, {"i": i, "gate": True}, timeout_ms=5000))
                     for i in range(10)]
            await until(lambda: len(echo.started) == 3)
            await asyncio.sleep(0.15)
            assert len(echo.started) == 3 and server.request_queue_depth == 3
            echo.gate.set()
            assert [(await t)[1]["i"] for t in tasks] == list(range(10))
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_request_bytes_being_handled_across_connections_stay_under_queued_max_request_bytes():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo, queued_max_request_bytes=5000).start(HOST, 0)
        conns = [await echo_connection(HOST, server.port, max_in_flight_requests=10) for _ in range(2)]
        try:
            tasks = [asyncio.create_task(conn.request(ApiKey.PRODUCE, {"i": n * 10 + i, "gate": True,
                                                                       "pad": b"x" * 2000}, timeout_ms=5000))
                     for n, conn in enumerate(conns) for i in range(5)]
            await until(lambda: len(echo.started) == 3)
            await asyncio.sleep(0.15)
            # Two ~2 KB requests fit in 5000 bytes, a third does not; but a connection with no
            # handler running always may start one (a follower's Fetch is never held behind
            # produce requests that wait for it), so each connection runs at least one.
            assert len(echo.started) == 3, "two fit, the other connection runs one, no more"
            assert {i // 10 for i in echo.started} == {0, 1}
            assert server.request_bytes_in_flight <= 5000 + 2100
            echo.gate.set()
            results = [await t for t in tasks]
            assert sorted(body["i"] for _, body in results) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
            assert server.request_bytes_in_flight == 0
        finally:
            for conn in conns:
                await conn.close()
            await server.close()
    run(main())


def test_the_server_stops_reading_while_answers_over_max_buffered_bytes_wait():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo, max_buffered_bytes_per_connection=1000).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=10)
        try:
            slow = asyncio.create_task(conn.request(ApiKey.FETCH, {"i": 0, "gate": True}, timeout_ms=5000))
            big = asyncio.create_task(conn.request(ApiKey.FETCH, {"i": 1, "pad": b"x" * 2000}, timeout_ms=5000))
            await until(lambda: len(echo.started) == 2)
            await asyncio.sleep(0.05)  # answer 1 (2000 bytes) is encoded, waiting behind answer 0
            rest = [asyncio.create_task(conn.request(ApiKey.FETCH, {"i": i}, timeout_ms=5000)) for i in range(2, 5)]
            await asyncio.sleep(0.15)
            assert echo.started == [0, 1], "no more requests read while 2000 unsent bytes wait"
            echo.gate.set()
            results = [await t for t in [slow, big, *rest]]
            assert [body["i"] for _, body in results] == [0, 1, 2, 3, 4]
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_idle_connections_are_closed_after_connections_max_idle_ms_but_busy_ones_are_not():
    async def main() -> None:
        server = await echo_server(Echo(), idle_timeout_ms=500).start(HOST, 0)
        idle = await echo_connection(HOST, server.port)
        busy = None
        try:
            assert (await idle.request(ApiKey.METADATA, {"i": 1}, timeout_ms=5000))[0] == 0
            # A handler running longer than the idle timeout keeps its connection open. Opened
            # just before its request, so a loaded machine cannot idle it out before it asks.
            busy = await echo_connection(HOST, server.port)
            code, body = await busy.request(ApiKey.FETCH, {"i": 2, "delay_ms": 1200}, timeout_ms=5000)
            assert (code, body["i"]) == (0, 2)
            assert idle.closed and not busy.closed
            assert server.metrics.connections_closed_idle == 1
            await until(lambda: busy.closed)  # then it is idle too
        finally:
            await idle.close()
            if busy is not None:
                await busy.close()
            await server.close()
    run(main())


def test_connections_over_max_connections_are_refused_and_the_others_keep_working():
    async def main() -> None:
        server = await echo_server(Echo(), max_connections=2).start(HOST, 0)
        conns = [await echo_connection(HOST, server.port) for _ in range(3)]
        try:
            await until(lambda: conns[2].closed)
            for i, conn in enumerate(conns[:2]):
                assert (await conn.request(ApiKey.METADATA, {"i": i}, timeout_ms=5000))[1]["i"] == i
            assert server.metrics.connections_refused == 1
        finally:
            for conn in conns:
                await conn.close()
            await server.close()
    run(main())


def test_a_response_for_the_wrong_correlation_id_closes_the_client_connection():
    async def main() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            header = await reader.readexactly(4)
            await reader.readexactly(struct.unpack(">I", header)[0])
            writer.write(echo_answer_frame(ApiKey.METADATA, 12345, {"i": 1}))  # not the id the client sent
            await writer.drain()
            await asyncio.sleep(1)
            writer.close()
        fake = await asyncio.start_server(serve, HOST, 0)
        port = fake.sockets[0].getsockname()[1]
        conn = await echo_connection(HOST, port)
        try:
            with pytest.raises(NetworkExceptionError, match="correlation id 12345"):
                await conn.request(ApiKey.METADATA, {}, timeout_ms=5000)
            assert conn.closed
        finally:
            await conn.close()
            fake.close()
    run(main())


def test_a_body_its_declaration_cannot_encode_raises_frame_error_and_the_connection_survives():
    async def main() -> None:
        server = await echo_server(Echo()).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        try:
            with pytest.raises(FrameError):
                await conn.request(ApiKey.METADATA, {"i": "not an int32"}, timeout_ms=5000)
            with pytest.raises(FrameError):
                await conn.request(ApiKey.METADATA, {"i": 2**31}, timeout_ms=5000)
            assert (await conn.request(ApiKey.METADATA, {"i": 1}, timeout_ms=5000))[1]["i"] == 1
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_an_answer_its_declaration_cannot_encode_is_sent_as_unknown_server_error():
    async def main() -> None:
        async def handler(request: Request) -> Response:
            return Response(0, {"i": "not an int32"} if request.body["gate"] else {"i": 5})
        server = await echo_server(handler).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        try:
            _, body = await conn.request(ApiKey.METADATA, {"gate": True}, timeout_ms=5000)
            assert body["error_code"] == errors.UNKNOWN_SERVER_ERROR and "encode" in body["error_message"]
            assert (await conn.request(ApiKey.METADATA, {}, timeout_ms=5000))[1]["i"] == 5
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_an_answer_over_the_client_max_frame_bytes_closes_the_client_connection():
    async def main() -> None:
        server = await echo_server(Echo()).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_frame_bytes=1000)
        try:
            with pytest.raises(NetworkExceptionError, match="socket.request.max.bytes"):
                await conn.request(ApiKey.FETCH, {"i": 1, "pad": b"x" * 5000}, timeout_ms=5000)
            assert conn.closed
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_a_request_without_an_answer_sent_just_before_close_still_reaches_the_server():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        try:
            assert await conn.request(ApiKey.PRODUCE, {"i": 7, "no_answer": True},
                                      expect_response=False) == (0, None)
            await conn.close()
            await until(lambda: echo.started == [7])
        finally:
            await server.close()
    run(main())


def test_a_client_that_never_reads_its_answers_is_closed_after_connections_max_idle_ms():
    async def main() -> None:
        server = await echo_server(Echo(), idle_timeout_ms=300, max_buffered_bytes_per_connection=65536,
                              max_frame_bytes=64 << 20).start(HOST, 0)
        reader, writer = await asyncio.open_connection(HOST, server.port)
        try:
            # Ask for 48 MiB of answers and read none of them: more than the socket buffers hold.
            for i in range(12):
                writer.write(echo_frame(ApiKey.FETCH, i, {"i": i, "pad": b"x" * (4 << 20)}))
            try:
                await asyncio.wait_for(writer.drain(), WAIT_S)
            except ConnectionError:
                pass  # the server stopped reading us, then reset the connection
            await until(lambda: server.connection_count == 0)
            assert server.metrics.connections_closed_idle == 1
        finally:
            writer.close()
            await server.close()
    run(main())


def test_answers_far_larger_than_max_buffered_bytes_still_all_arrive():
    async def main() -> None:
        server = await echo_server(Echo(), max_buffered_bytes_per_connection=4096, idle_timeout_ms=2000).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=20)
        try:
            results = await asyncio.gather(*(
                conn.request(ApiKey.FETCH, {"i": i, "pad": b"x" * 200_000}, timeout_ms=5000) for i in range(20)))
            assert [body["i"] for _, body in results] == list(range(20))
            assert all(len(body["pad"]) == 200_000 for _, body in results)
        finally:
            await conn.close()
            await server.close()
    run(main())


def test_closing_the_server_cancels_running_handlers_and_returns_promptly():
    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        task = asyncio.create_task(conn.request(ApiKey.FETCH, {"i": 1, "gate": True}, timeout_ms=5000))
        await until(lambda: echo.started == [1])
        assert server.request_queue_depth == 1 and server.connection_count == 1
        started = time.monotonic()
        await server.close()
        assert time.monotonic() - started < 1.0
        with pytest.raises(NetworkExceptionError):
            await task
        await conn.close()
        snapshot = server.metrics_snapshot()
        assert snapshot["requests"] == {"Fetch": 1} and snapshot["bytes_in"] > 0
        assert snapshot["connections"] == 0
    run(main())


def test_correlation_ids_wrap_before_int32_overflow():
    async def main() -> None:
        server = await echo_server(Echo()).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        try:
            conn._next_correlation_id = CORRELATION_ID_MAX - 2
            results = await asyncio.gather(*(conn.request(ApiKey.METADATA, {"i": i}, timeout_ms=5000)
                                             for i in range(5)))
            assert [body["i"] for _, body in results] == list(range(5))
            assert conn._next_correlation_id == 2
        finally:
            await conn.close()
            await server.close()
    run(main())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_seeded_random_mix_of_slow_failing_silent_and_timed_out_requests_keeps_every_answer_matched(seed):
    """Four connections, 400 requests with random delays, acks=0-style requests, handler errors
    and client timeouts: every answered request gets its own body, nothing is misrouted, and the
    connections survive."""
    rng = random.Random(seed)
    plans = [[{"i": c * 100 + i, "delay_ms": rng.choice([0, 0, 1, 3, 8]),
               "no_answer": rng.random() < 0.15, "fail": rng.choice([None] * 8 + ["bug", "typed"]),
               "timeout_ms": rng.choice([5000] * 9 + [2])} for i in range(100)] for c in range(4)]
    for plan in (p for conn_plans in plans for p in conn_plans):
        if plan["no_answer"]:  # a handler owing no answer must not fail (see Server's docstring)
            plan["fail"] = None

    async def main() -> None:
        echo = Echo()
        server = await echo_server(echo, max_in_flight_per_connection=16).start(HOST, 0)
        conns = [await echo_connection(HOST, server.port, max_in_flight_requests=8) for _ in plans]
        completed: set[int] = set()
        try:
            async def one(conn: Connection, plan: dict) -> None:
                body = {k: v for k, v in plan.items() if k != "timeout_ms"}
                try:
                    code, answer = await conn.request(ApiKey.PRODUCE, body, timeout_ms=plan["timeout_ms"],
                                                      expect_response=not plan["no_answer"])
                except RequestTimedOutError:
                    assert plan["timeout_ms"] == 2, f"seed {seed}: unexpected timeout for {plan}"
                    return  # perhaps never sent: it may have timed out waiting for a slot
                completed.add(plan["i"])
                if plan["no_answer"]:
                    assert (code, answer) == (0, None)
                elif plan["fail"] == "bug":
                    assert answer["error_code"] == errors.UNKNOWN_SERVER_ERROR, f"seed {seed}"
                elif plan["fail"] == "typed":
                    assert answer["error_code"] == errors.NOT_LEADER_OR_FOLLOWER, f"seed {seed}"
                else:
                    assert (code, answer["i"]) == (0, plan["i"]), f"seed {seed}: answer misrouted"
            await asyncio.gather(*(one(conn, p) for conn, plan in zip(conns, plans) for p in plan))
            assert not any(c.closed for c in conns), f"seed {seed}"
            await until(lambda: all(c.in_flight_count == 0 for c in conns))
            assert completed <= set(echo.started), f"seed {seed}: answered but never handled?"
            assert len(echo.started) == len(set(echo.started)), f"seed {seed}: handled twice"
            assert len(completed) > 300
        finally:
            for conn in conns:
                await conn.close()
            await server.close()
    run(main())


def test_the_controller_rpc_adapter_serves_its_handle_and_answers_api_versions_itself():
    from raftka.common.transport import call
    from raftka.raft_meta.controller.rpc import RpcServer

    async def handle(api_key: int, api_version: int, body: Any, ctx: Any) -> tuple[int, Any]:
        return errors.NONE, {"error_message": f"{api_key} v{api_version} from {ctx['client_id']}"}

    async def main() -> None:
        server = await RpcServer(handle).start(HOST, 0)
        address = f"{HOST}:{server.port}"
        try:
            code, body = await call(address, ApiKey.DESCRIBE_QUORUM, {}, client_id="t")
            assert (code, body["error_code"], body["error_message"]) == (0, 0, "55 v2 from t")
            code, body = await call(address, ApiKey.API_VERSIONS, {})
            keys = {entry["api_key"] for entry in body["api_keys"]}
            assert code == 0 and {ApiKey.FETCH, ApiKey.DESCRIBE_QUORUM, ApiKey.API_VERSIONS} <= keys
            assert ApiKey.PRODUCE not in keys
        finally:
            await server.close()
        with pytest.raises(NetworkExceptionError):
            await call(address, ApiKey.DESCRIBE_QUORUM, {}, timeout_ms=2000)
    run(main())


@pytest.mark.perf
def test_round_trips_per_second_on_loopback():
    """Prints sequential round trips/s and pipelined requests/s (one connection, one loop)."""
    async def main() -> tuple[float, float]:
        async def handler(request: Request) -> Response:
            return Response(0, request.body)
        server = await echo_server(handler).start(HOST, 0)
        conn = await echo_connection(HOST, server.port, max_in_flight_requests=100)
        try:
            n = 5000
            started = time.perf_counter()
            for i in range(n):
                await conn.request(ApiKey.METADATA, {"i": i})
            sequential = n / (time.perf_counter() - started)
            n = 20000
            started = time.perf_counter()
            await asyncio.gather(*(conn.request(ApiKey.METADATA, {"i": i}) for i in range(n)))
            pipelined = n / (time.perf_counter() - started)
            return sequential, pipelined
        finally:
            await conn.close()
            await server.close()
    sequential, pipelined = run(main())
    print(f"\ntransport on loopback: {sequential:,.0f} sequential round trips/s, "
          f"{pipelined:,.0f} pipelined requests/s (100 in flight)")
    assert sequential > 500 and pipelined > 1000


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_request_on_a_connection_closed_under_it_fails_with_network_exception(loop_name):
    # The peer is gone and the transport has closed (uvloop: its handle) but the read loop has
    # not run yet: a request submitted then fails like any lost connection. uvloop raised
    # RuntimeError for the write; it escaped to the producer's sender, whose acknowledgements then
    # stopped (scripts/bench.sh failover, 2026-11-26).
    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop_errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
        server = await echo_server(Echo()).start(HOST, 0)
        conn = await echo_connection(HOST, server.port)
        transport = conn._writer.transport
        submitted: asyncio.Future = loop.create_future()

        def closed() -> bool:  # uvloop: the handle itself closed (a turn after abort())
            return transport.is_closing() and (loop_name == "asyncio" or "closed=True" in repr(transport))

        def submit_once_closed() -> None:  # a callback each turn, ahead of the read loop's wake-up
            if not closed():
                loop.call_soon(submit_once_closed)
                return
            try:
                submitted.set_result(conn.submit(ApiKey.FETCH, {"i": 3}, timeout_ms=5000))
            except BaseException as error:  # noqa: BLE001 - the test reports what escaped
                submitted.set_exception(error)
        try:
            first = conn.submit(ApiKey.FETCH, {"i": 1}, timeout_ms=5000)
            queued = conn.submit(ApiKey.FETCH, {"i": 2}, timeout_ms=5000)  # written at the end of the turn
            transport.abort()
            loop.call_soon(submit_once_closed)
            late = await submitted  # a RuntimeError from the write would be raised here
            for future in (first, queued, late):
                with pytest.raises(NetworkExceptionError):
                    await future
            assert conn.closed
            assert loop_errors == []
        finally:
            await conn.close()
            await server.close()
    factory = __import__("uvloop").new_event_loop if loop_name == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(asyncio.wait_for(main(), 30))
