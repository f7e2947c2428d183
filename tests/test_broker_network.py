"""broker/network.py PeerConnection: a request timeout closes the connection, and reopening
waits a bounded, growing reconnect backoff.

A "frozen" peer is a real TCP listener (127.0.0.1, port 0) that accepts connections and reads
them but never answers on the first one, as a SIGSTOPped or black-holed broker does; later
connections are answered by a real transport.Server. Every wait is bounded.
"""
from __future__ import annotations

import asyncio
import random
import time

import pytest

from raftka.broker.network import PeerConnection
from raftka.common import errors
from raftka.common.errors import NetworkExceptionError, RequestTimedOutError
from raftka.common.api import ApiKey
from raftka.common.messages import KAFKA_API
from raftka.common.server import Server

HOST = "127.0.0.1"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


class FreezeFirstConnection:
    """A proxy in front of a real Server: the first accepted connection is read and never
    answered (the frozen peer); every later one is piped through to the server."""

    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self.accepted = 0
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> int:
        self._listener = await asyncio.start_server(self._accept, HOST, 0)
        return self._listener.sockets[0].getsockname()[1]

    async def _accept(self, reader, writer) -> None:
        self.accepted += 1
        if self.accepted == 1:
            while await reader.read(65536):  # swallow everything, answer nothing
                pass
            return
        up_reader, up_writer = await asyncio.open_connection(HOST, self.server_port)

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        self._listener.close()


async def never(request):
    raise AssertionError("ApiVersions is the transport's own answer")


def test_a_timed_out_request_closes_the_connection_so_the_next_one_is_not_stuck_behind_it():
    async def main():
        server = Server(never, kafka_api={ApiKey.API_VERSIONS: KAFKA_API[ApiKey.API_VERSIONS]})
        await server.start(HOST, 0)
        frozen = FreezeFirstConnection(server.port)
        port = await frozen.start()
        peer = PeerConnection(f"{HOST}:{port}", client_id="t", max_frame_bytes=1 << 20)
        # Fill the first connection's in-flight window with requests the frozen peer never answers.
        stuck = [asyncio.create_task(peer.request(ApiKey.API_VERSIONS, {}, timeout_ms=300)) for _ in range(5)]
        outcomes = await asyncio.gather(*stuck, return_exceptions=True)
        assert all(isinstance(o, (RequestTimedOutError, NetworkExceptionError)) for o in outcomes), outcomes
        assert peer.disconnects == 1
        started = time.monotonic()
        code, body = await peer.request(ApiKey.API_VERSIONS, {}, timeout_ms=5000)
        took = time.monotonic() - started
        assert (code, body["error_code"]) == (errors.NONE, errors.NONE) and body["api_keys"]
        assert frozen.accepted == 2  # a new connection, not the frozen one
        assert took < 2.0, took  # reconnect backoff (<= 1 s) plus a round trip, not a timeout
        await peer.close()
        await frozen.close()
        await server.close()
    run(main())


def test_the_reconnect_backoff_doubles_per_failure_up_to_its_maximum_and_resets_on_success():
    rng = random.Random(7)
    peer = PeerConnection("127.0.0.1:1", client_id="t", max_frame_bytes=1 << 20,
                          reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000, rng=rng)
    assert peer.backoff_ms() == 0
    seen = []
    for failures in range(1, 9):
        peer._failures = failures
        seen.append(peer.backoff_ms())
    for failures, ms in enumerate(seen, start=1):
        nominal = min(50 * 2 ** (failures - 1), 1000)
        assert nominal * 0.8 <= ms <= nominal * 1.2, (failures, ms)
    assert max(seen) <= 1200


def test_connecting_to_a_closed_port_fails_fast_and_the_next_attempt_waits_the_backoff():
    async def main():
        import socket
        with socket.socket() as s:  # a port nobody listens on
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        peer = PeerConnection(f"{HOST}:{port}", client_id="t", max_frame_bytes=1 << 20,
                              reconnect_backoff_ms=300, reconnect_backoff_max_ms=300,
                              rng=random.Random(1))
        with pytest.raises(NetworkExceptionError):
            await peer.request(18, {}, timeout_ms=1000)
        # Inside the backoff, a request with less time than the backoff left fails at once.
        started = time.monotonic()
        with pytest.raises(NetworkExceptionError, match="next attempt in"):
            await peer.request(18, {}, timeout_ms=50)
        assert time.monotonic() - started < 0.2
        # With more time, the request waits out the backoff and then tries (and fails) again.
        started = time.monotonic()
        with pytest.raises(NetworkExceptionError):
            await peer.request(18, {}, timeout_ms=2000)
        assert time.monotonic() - started >= 0.1
    run(main())
