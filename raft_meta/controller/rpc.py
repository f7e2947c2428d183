"""The controller's RPC listener: a thin adapter over the shared server (common/server.py).

``RpcServer(handle, ...)`` serves ``handle(api_key, api_version, body, ctx) -> (code, body)`` on
a :class:`~raftka.common.server.Server` (requests of one connection handled concurrently,
answered in arrival order; bad bytes close that connection only) and answers ApiVersions itself.
One-shot requests to a controller use ``raftka.common.transport.call``.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable

from raftka.common.api import CONTROLLER_API_KEYS, ApiKey, api_versions_body
from raftka.common.server import Request, Response, Server
from raftka.common.transport import SOCKET_REQUEST_MAX_BYTES_DEFAULT

Handle = Callable[[int, int, Any, Any], Awaitable[tuple[int, Any]]]


class RpcServer:
    """The controller listener: calls ``handle(api_key, api_version, body, ctx)`` per request,
    ``ctx`` being ``{"peer", "client_id", "connection_id"}``, and answers ApiVersions itself.
    Metrics: ``server.metrics``."""

    def __init__(self, handle: Handle, *, max_frame_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT,
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


__all__ = ["RpcServer"]
