"""A minimal server and client for DESIGN.md's frames, used by the controller until the shared
transport (client/protocol/transport.py) lands; then this module shrinks to an adapter.

Frame: 4-byte big-endian length, then a msgpack array. Request
``[api_key, api_version, correlation_id, client_id, body]``, response
``[correlation_id, error_code, body]``. Requests on one connection are answered in order.

Bad bytes (a length over ``max_frame_bytes``, undecodable msgpack, a wrong shape) close that
connection only, with one log line; the server keeps serving every other connection.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any, Awaitable, Callable

import msgpack

from client.protocol import errors
from client.protocol.errors import FrameError, NetworkExceptionError, RequestTimedOutError

log = logging.getLogger(__name__)

LENGTH = struct.Struct(">I")
FRAME_BYTES_MAX_DEFAULT = 104_857_600
CONNECT_TIMEOUT_MS_DEFAULT = 5000

Handle = Callable[[int, int, Any, Any], Awaitable[tuple[int, Any]]]


def encode_frame(items: list) -> bytes:
    payload = msgpack.packb(items, use_bin_type=True)
    return LENGTH.pack(len(payload)) + payload


def decode_payload(payload: bytes, arity: int, max_frame_bytes: int) -> list:
    try:
        items = msgpack.unpackb(payload, raw=False, strict_map_key=False, max_bin_len=max_frame_bytes,
                                max_str_len=max_frame_bytes, max_array_len=max_frame_bytes,
                                max_map_len=max_frame_bytes)
    except Exception as error:
        raise FrameError(f"frame is not valid msgpack ({type(error).__name__})") from None
    if not isinstance(items, list) or len(items) != arity:
        raise FrameError(f"frame must be a msgpack array of {arity} items")
    return items


async def read_frame(reader: asyncio.StreamReader, max_frame_bytes: int,
                     idle_timeout_ms: int | None = None) -> bytes | None:
    """One frame's payload, or None at a clean end of stream or after ``idle_timeout_ms``
    without the start of a frame."""
    try:
        if idle_timeout_ms is None:
            header = await reader.readexactly(4)
        else:
            try:
                header = await asyncio.wait_for(reader.readexactly(4), idle_timeout_ms / 1000)
            except asyncio.TimeoutError:
                return None
    except asyncio.IncompleteReadError as error:
        if error.partial:
            raise FrameError("connection closed inside a frame header") from None
        return None
    (length,) = LENGTH.unpack(header)
    if length > max_frame_bytes:
        raise FrameError(f"frame of {length} bytes exceeds socket.request.max.bytes={max_frame_bytes}")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FrameError("connection closed inside a frame") from None


class RpcServer:
    """asyncio server calling ``handle(api_key, api_version, body, ctx)`` per request."""

    def __init__(self, handle: Handle, *, max_frame_bytes: int = FRAME_BYTES_MAX_DEFAULT,
                 max_connections: int = 1000, idle_timeout_ms: int = 600_000) -> None:
        self.handle = handle
        self.idle_timeout_ms = idle_timeout_ms
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.connections: set[asyncio.StreamWriter] = set()
        self._server: asyncio.base_events.Server | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int) -> "RpcServer":
        self._server = await asyncio.start_server(self._serve, host, port, limit=2**20)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self.connections):
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if len(self.connections) >= self.max_connections:
            log.warning("refusing connection from %s: %d connections open (connections.max)",
                        peer, len(self.connections))
            writer.close()
            return
        self.connections.add(writer)
        try:
            while True:
                payload = await read_frame(reader, self.max_frame_bytes, self.idle_timeout_ms)
                if payload is None:
                    return
                api_key, api_version, correlation_id, client_id, body = decode_payload(
                    payload, 5, self.max_frame_bytes)
                if not (isinstance(api_key, int) and isinstance(api_version, int)
                        and isinstance(correlation_id, int)):
                    raise FrameError("api_key, api_version and correlation_id must be integers")
                ctx = {"peer": peer, "client_id": client_id}
                try:
                    code, out = await self.handle(api_key, api_version, body, ctx)
                except Exception:
                    log.exception("handler failed for api key %s", api_key)
                    code, out = errors.UNKNOWN_SERVER_ERROR, {}
                writer.write(encode_frame([correlation_id, code, out]))
                await writer.drain()
        except FrameError as error:
            log.warning("closing connection from %s: %s", peer, error.message)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.connections.discard(writer)
            writer.close()


async def call(address: str, api_key: int, body: Any, *, api_version: int = 0,
               timeout_ms: int = 5000, client_id: str = "raftka-tool",
               max_frame_bytes: int = FRAME_BYTES_MAX_DEFAULT) -> tuple[int, Any]:
    """One request on a fresh connection; (error_code, body). Network failures raise typed,
    retriable errors (NetworkExceptionError, RequestTimedOutError)."""
    host, _, port = address.rpartition(":")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout_ms / 1000)
    except asyncio.TimeoutError:
        raise RequestTimedOutError(f"connecting to {address} took over {timeout_ms} ms") from None
    except OSError as error:
        raise NetworkExceptionError(f"cannot connect to {address}: {error.strerror or error}") from None
    try:
        writer.write(encode_frame([api_key, api_version, 1, client_id, body]))
        await writer.drain()
        payload = await asyncio.wait_for(read_frame(reader, max_frame_bytes), timeout_ms / 1000)
        if payload is None:
            raise NetworkExceptionError(f"{address} closed the connection before answering")
        correlation_id, code, out = decode_payload(payload, 3, max_frame_bytes)
        if correlation_id != 1:
            raise FrameError(f"response for correlation id {correlation_id}, expected 1")
        return code, out
    except asyncio.TimeoutError:
        raise RequestTimedOutError(f"{address} did not answer within {timeout_ms} ms") from None
    except OSError as error:
        raise NetworkExceptionError(f"connection to {address} failed: {error.strerror or error}") from None
    finally:
        writer.close()


def call_sync(address: str, api_key: int, body: Any, **kwargs: Any) -> tuple[int, Any]:
    """``call`` for code without an event loop (the CLI, tests, the cluster API)."""
    return asyncio.run(call(address, api_key, body, **kwargs))
