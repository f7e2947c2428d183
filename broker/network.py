"""The broker's listener and its outgoing connections (DESIGN.md frames).

INTERIM: ``client/protocol/transport.py`` (Server, Connection) replaces this module when it
lands; the bytes on the wire are the same (``raft_meta/controller/rpc.py`` frames).

Server: per connection, a reader loop decodes frames and starts one handler task per request
in arrival order; a writer loop writes the answers in that same order. A handler answering
``None`` sends nothing (Produce with acks=0). At most ``max_in_flight_per_connection`` requests
of one connection are in flight: past that the reader stops reading the socket (backpressure).
A malformed frame or one over ``max_frame_bytes`` closes that connection with one log line.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from client.protocol import errors
from client.protocol.errors import FrameError, NetworkExceptionError, RequestTimedOutError
from raft_meta.controller.rpc import decode_payload, encode_frame, read_frame

log = logging.getLogger(__name__)


@dataclass
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: Any
    body: Any
    peer: Any
    received_monotonic: float


Handler = Callable[[Request], Awaitable["tuple[int, Any] | None"]]


class Server:
    def __init__(self, handler: Handler, *, max_frame_bytes: int, max_connections: int = 1000,
                 max_in_flight_per_connection: int = 500, idle_timeout_ms: int = 600_000) -> None:
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.max_in_flight = max_in_flight_per_connection
        self.idle_timeout_ms = idle_timeout_ms
        self.connections: set[asyncio.StreamWriter] = set()
        self.in_flight = 0  # requests being handled, all connections (request-queue depth)
        self.port: int | None = None
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> "Server":
        self._server = await asyncio.start_server(self._serve, host, port, limit=2**20)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self.connections):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if len(self.connections) >= self.max_connections:
            log.warning("refusing connection from %s: %d connections open", peer, len(self.connections))
            writer.close()
            return
        self.connections.add(writer)
        pending: asyncio.Queue = asyncio.Queue(self.max_in_flight)  # full queue = stop reading
        writer_task = asyncio.create_task(self._write_loop(pending, writer))
        try:
            while True:
                payload = await read_frame(reader, self.max_frame_bytes, self.idle_timeout_ms)
                if payload is None:
                    break
                api_key, api_version, correlation_id, client_id, body = decode_payload(
                    payload, 5, self.max_frame_bytes)
                if not (isinstance(api_key, int) and isinstance(api_version, int)
                        and isinstance(correlation_id, int)):
                    raise FrameError("api_key, api_version and correlation_id must be integers")
                request = Request(api_key, api_version, correlation_id, client_id, body, peer, time.monotonic())
                task = asyncio.create_task(self._handle(request))
                await pending.put((correlation_id, task))
        except FrameError as error:
            log.warning("closing connection from %s: %s", peer, error.message)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await pending.put(None)
            try:
                await writer_task
            except Exception:
                pass
            self.connections.discard(writer)
            writer.close()

    async def _handle(self, request: Request) -> "tuple[int, Any] | None":
        self.in_flight += 1
        try:
            return await self.handler(request)
        except errors.RaftkaError as error:
            return error.code, {"error_message": error.message}
        except Exception:
            log.exception("handler failed for api key %s", request.api_key)
            return errors.UNKNOWN_SERVER_ERROR, {"error_message": "internal error; see the broker log"}
        finally:
            self.in_flight -= 1

    async def _write_loop(self, pending: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        broken = False
        while True:
            item = await pending.get()
            if item is None:
                return
            correlation_id, task = item
            try:
                result = await task
            except asyncio.CancelledError:
                return
            if result is None or broken:
                continue
            code, body = result
            try:
                writer.write(encode_frame([correlation_id, code, body]))
                await writer.drain()
            except (ConnectionError, RuntimeError):
                broken = True  # keep draining tasks so the reader never blocks on a full queue


class Connection:
    """One outgoing connection; requests are sent one at a time (a lock), answers matched by
    correlation id. Failures raise NetworkExceptionError / RequestTimedOutError and close it."""

    def __init__(self, address: str, *, client_id: str = "raftka-broker",
                 max_frame_bytes: int = 104_857_600, connect_timeout_ms: int = 5000) -> None:
        self.address = address
        self.client_id = client_id
        self.max_frame_bytes = max_frame_bytes
        self.connect_timeout_ms = connect_timeout_ms
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._correlation = 0

    async def _connect(self) -> None:
        host, _, port = self.address.rpartition(":")
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port), limit=2**20), self.connect_timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise RequestTimedOutError(f"connecting to {self.address} took over {self.connect_timeout_ms} ms") from None
        except OSError as error:
            raise NetworkExceptionError(f"cannot connect to {self.address}: {error.strerror or error}") from None

    async def request(self, api_key: int, body: Any, *, timeout_ms: int, api_version: int = 0) -> tuple[int, Any]:
        async with self._lock:
            try:
                if self._writer is None:
                    await self._connect()
                assert self._reader is not None and self._writer is not None
                self._correlation += 1
                self._writer.write(encode_frame([api_key, api_version, self._correlation, self.client_id, body]))
                await self._writer.drain()
                payload = await asyncio.wait_for(read_frame(self._reader, self.max_frame_bytes), timeout_ms / 1000)
                if payload is None:
                    raise NetworkExceptionError(f"{self.address} closed the connection")
                correlation_id, code, out = decode_payload(payload, 3, self.max_frame_bytes)
                if correlation_id != self._correlation:
                    raise FrameError(f"answer for correlation id {correlation_id}, expected {self._correlation}")
                return code, out
            except asyncio.TimeoutError:
                self.close()
                raise RequestTimedOutError(f"{self.address} did not answer within {timeout_ms} ms") from None
            except OSError as error:
                self.close()
                raise NetworkExceptionError(f"connection to {self.address} failed: {error.strerror or error}") from None
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
