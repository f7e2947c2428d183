"""The controller's RPC listener: a thin adapter over the shared server (common/server.py).

``RpcServer(handle, ...)`` serves ``handle(api_key, api_version, body, ctx) -> (code, body)`` on
a :class:`~raftka.common.server.Server` (requests of one connection handled concurrently,
answered in arrival order; bad bytes close that connection only) and answers ApiVersions itself.
Every body is checked against its declaration (``requests``: common/msgpack_bodies.py's
CONTROLLER_REQUESTS) before ``handle`` sees it: a bad one is answered INVALID_REQUEST naming the
field, with one log line per API per minute.
One-shot requests to a controller use ``raftka.common.transport.call``.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Iterable

from raftka.common import errors
from raftka.common.api import CONTROLLER_API_KEYS, ApiKey, api_name, api_versions_body
from raftka.common.errors import InvalidRequestError
from raftka.common.messages import KAFKA_API
from raftka.common.msgpack_bodies import CONTROLLER_REQUESTS
from raftka.common.ratelog import RateLimitedLog
from raftka.common.schema import Registry
from raftka.common.server import Request, Response, Server
from raftka.common.transport import SOCKET_REQUEST_MAX_BYTES_DEFAULT

Handle = Callable[[int, int, Any, Any], Awaitable[tuple[int, Any]]]

log = logging.getLogger(__name__)
refused_log = RateLimitedLog(log)


class RpcServer:
    """The controller listener: calls ``handle(api_key, api_version, body, ctx)`` per request,
    ``ctx`` being ``{"peer", "client_id", "connection_id"}``, and answers ApiVersions itself.
    Metrics: ``server.metrics``."""

    def __init__(self, handle: Handle, *, max_frame_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                 max_connections: int = 1000, idle_timeout_ms: int = 600_000,
                 name: str = "controller",
                 api_keys: Iterable[int] | None = CONTROLLER_API_KEYS,
                 requests: Registry | None = CONTROLLER_REQUESTS, **limits: Any) -> None:
        self.handle = handle
        # Declared request bodies, checked before ``handle`` (None: bodies pass unchecked).
        self.requests = requests
        # ApiVersions (18) is answered here from ``api_keys`` (None: passed to ``handle``).
        self.api_keys = None if api_keys is None else frozenset(api_keys)
        # ``limits``: the Server's other limits (max_connections_per_ip, ...; ServerConfig.server_limits)
        # Kafka's wire protocol for every declared key this listener serves (common/messages/);
        # a Kafka-framed body arrives decoded and type-checked, in Kafka's shape (ctx["kafka"]).
        kafka_api = {k: KAFKA_API[k] for k in (self.api_keys or ()) if k in KAFKA_API}
        self.server = Server(self._on_request, max_frame_bytes=max_frame_bytes,
                             max_connections=max_connections, idle_timeout_ms=idle_timeout_ms,
                             kafka_api=kafka_api, name=name, **limits)

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
        if request.api_key == ApiKey.API_VERSIONS and self.api_keys is not None and not request.kafka:
            return Response(0, api_versions_body(self.api_keys))
        body = request.body
        if not request.kafka and self.requests is not None and request.api_key in self.requests:
            try:
                body = self.requests.check(request.api_key, request.api_version, {} if body is None else body)
            except InvalidRequestError as error:
                refused_log.warning(f"invalid-body-{request.api_key}", "%s: refused a %s request from %s: %s",
                                    self.server.name, api_name(request.api_key), request.peer, error.message)
                return Response(errors.INVALID_REQUEST, {
                    "error_message": f"invalid {api_name(request.api_key)} request: {error.message}"})
        ctx = {"peer": request.peer, "client_id": request.client_id,
               "connection_id": request.connection_id, "kafka": request.kafka}
        code, out = await self.handle(request.api_key, request.api_version, body, ctx)
        return Response(code, out)

    async def start(self, host: str, port: int) -> "RpcServer":
        await self.server.start(host, port)
        return self

    async def close(self) -> None:
        await self.server.close()


__all__ = ["RpcServer"]
