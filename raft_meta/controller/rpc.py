"""The controller's RPC listener: a thin adapter over the shared server (common/server.py).

``RpcServer(handle, ...)`` serves ``handle(api_key, api_version, body, ctx) -> (code, body)`` on
a :class:`~raftka.common.server.Server` (requests of one connection handled concurrently,
answered in arrival order; bad bytes close that connection only). Requests are Kafka's, decoded
and checked against their declarations (common/messages/) before ``handle`` sees them; the
transport answers ApiVersions itself.
One-shot requests to a controller use ``raftka.cluster.controller_client``.
"""
from __future__ import annotations

import logging
import ssl as ssl_module
from typing import Any, Awaitable, Callable, Iterable

from raftka.common.api import ApiKey
from raftka.common.messages import KAFKA_API
from raftka.common.sasl import SaslServerSettings
from raftka.common.server import Request, Response, Server
from raftka.common.transport import SOCKET_REQUEST_MAX_BYTES_DEFAULT
from raftka.raft_meta.controller.service import CONTROLLER_APIS

Handle = Callable[[int, int, Any, Any], Awaitable[tuple[int, Any]]]

log = logging.getLogger(__name__)

# What a controller's listener serves: every API of the service (service.CONTROLLER_APIS), and
# ApiVersions, which the transport answers.
CONTROLLER_API_KEYS: frozenset[int] = frozenset({*CONTROLLER_APIS, ApiKey.API_VERSIONS})


class RpcServer:
    """The controller listener: calls ``handle(api_key, api_version, body, ctx)`` per request,
    ``ctx`` being ``{"peer", "client_id", "connection_id", "principal"}``. ``sasl``: a SASL_*
    listener's settings (connections log in first); ``start(ssl=...)``: a TLS listener.
    Metrics: ``server.metrics``."""

    def __init__(self, handle: Handle, *, max_frame_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                 max_connections: int = 1000, idle_timeout_ms: int = 600_000,
                 name: str = "controller", api_keys: Iterable[int] = CONTROLLER_API_KEYS,
                 sasl: SaslServerSettings | None = None, **limits: Any) -> None:
        self.handle = handle
        # ``limits``: the Server's other limits (max_connections_per_ip, ...; ServerConfig.server_limits)
        self.server = Server(self._on_request, max_frame_bytes=max_frame_bytes,
                             max_connections=max_connections, idle_timeout_ms=idle_timeout_ms,
                             kafka_api={k: KAFKA_API[k] for k in api_keys}, name=name, sasl=sasl, **limits)

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
        ctx = {"peer": request.peer, "client_id": request.client_id, "connection_id": request.connection_id,
               "principal": request.principal}
        code, out = await self.handle(request.api_key, request.api_version, request.body, ctx)
        return Response(code, out)

    async def start(self, host: str, port: int, ssl: "ssl_module.SSLContext | None" = None) -> "RpcServer":
        await self.server.start(host, port, ssl=ssl)
        return self

    async def close(self) -> None:
        await self.server.close()


__all__ = ["CONTROLLER_API_KEYS", "RpcServer"]
