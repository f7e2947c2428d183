"""The controller's RPC listener and one-shot client: a thin adapter over the shared transport
(client/protocol/transport.py), kept for the controller's callers.

- ``RpcServer(handle, ...)`` serves ``handle(api_key, api_version, body, ctx) -> (code, body)``
  on a transport :class:`~client.protocol.transport.Server` (requests of one connection handled
  concurrently, answered in arrival order; bad bytes close that connection only).
- ``call`` / ``call_sync``: one request on a fresh connection.
- ``encode_frame``, ``decode_payload``, ``read_frame``: the transport's frame helpers.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Iterable

from client.protocol.api import CONTROLLER_API_KEYS, ApiKey, api_versions_body
from client.protocol.errors import RequestTimedOutError
from client.protocol.transport import (  # noqa: F401  (re-exported for existing callers)
    CONNECT_TIMEOUT_MS_DEFAULT, LENGTH, SOCKET_REQUEST_MAX_BYTES_DEFAULT, Connection, Request,
    Response, Server, decode_payload, encode_frame, read_frame,
)

FRAME_BYTES_MAX_DEFAULT = SOCKET_REQUEST_MAX_BYTES_DEFAULT

Handle = Callable[[int, int, Any, Any], Awaitable[tuple[int, Any]]]


class RpcServer:
    """The controller listener: calls ``handle(api_key, api_version, body, ctx)`` per request,
    ``ctx`` being ``{"peer", "client_id", "connection_id"}``, and answers ApiVersions itself.
    Metrics: ``server.metrics``."""

    def __init__(self, handle: Handle, *, max_frame_bytes: int = FRAME_BYTES_MAX_DEFAULT,
                 max_connections: int = 1000, idle_timeout_ms: int = 600_000,
                 name: str = "controller",
                 api_keys: Iterable[int] | None = CONTROLLER_API_KEYS) -> None:
        self.handle = handle
        # ApiVersions (18) is answered here from ``api_keys`` (None: passed to ``handle``).
        self.api_keys = None if api_keys is None else frozenset(api_keys)
        self.server = Server(self._on_request, max_frame_bytes=max_frame_bytes,
                             max_connections=max_connections, idle_timeout_ms=idle_timeout_ms,
                             name=name)

    @property
    def port(self) -> int | None:
        return self.server.port

    @property
    def on_peer_closed(self) -> Callable[[int], None] | None:
        """Called with a connection id when the peer closed that connection (see transport.Server)."""
        return self.server.on_peer_closed

    @on_peer_closed.setter
    def on_peer_closed(self, listener: Callable[[int], None] | None) -> None:
        self.server.on_peer_closed = listener

    @property
    def connection_count(self) -> int:
        return self.server.connection_count

    async def _on_request(self, request: Request) -> Response:
        if request.api_key == ApiKey.API_VERSIONS and self.api_keys is not None:
            return Response(0, api_versions_body(self.api_keys))
        ctx = {"peer": request.peer, "client_id": request.client_id,
               "connection_id": request.connection_id}
        code, out = await self.handle(request.api_key, request.api_version, request.body, ctx)
        return Response(code, out)

    async def start(self, host: str, port: int) -> "RpcServer":
        await self.server.start(host, port)
        return self

    async def close(self) -> None:
        await self.server.close()


async def call(address: str, api_key: int, body: Any, *, api_version: int = 0,
               timeout_ms: int = 5000, client_id: str = "raftka-tool",
               max_frame_bytes: int = FRAME_BYTES_MAX_DEFAULT) -> tuple[int, Any]:
    """One request on a fresh connection; (error_code, body). ``timeout_ms`` bounds connecting
    and answering together. Network failures raise typed, retriable errors
    (NetworkExceptionError, RequestTimedOutError)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_ms / 1000
    conn = await Connection.open(host, int(port), client_id=client_id, connect_timeout_ms=timeout_ms,
                                 max_in_flight_requests=1, max_frame_bytes=max_frame_bytes)
    try:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            raise RequestTimedOutError(f"{address} did not answer within {timeout_ms} ms")
        return await conn.request(api_key, body, api_version, timeout_ms=left_ms)
    finally:
        await conn.close()


def call_sync(address: str, api_key: int, body: Any, **kwargs: Any) -> tuple[int, Any]:
    """``call`` for code without an event loop (the CLI, tests, the cluster API)."""
    return asyncio.run(call(address, api_key, body, **kwargs))


__all__ = ["RpcServer", "call", "call_sync", "encode_frame", "decode_payload", "read_frame",
           "FRAME_BYTES_MAX_DEFAULT"]
