"""The broker's side of the shared transport (client/protocol/transport.py).

The listener is ``transport.Server`` (per-request tasks started in arrival order, answers in
arrival order, backpressure past ``queued.max.requests`` in flight per connection, bad frames
close one connection). Outgoing, :class:`PeerConnection` keeps one pipelined
``transport.Connection`` to a peer and reopens it after a failure.
"""
from __future__ import annotations

from typing import Any

from client.protocol.transport import Connection, Request, Response, Server

__all__ = ["PeerConnection", "Request", "Response", "Server"]


class PeerConnection:
    """A connection to ``host:port`` opened on first use and reopened after it breaks.
    Failures raise NetworkExceptionError / RequestTimedOutError (both retriable)."""

    def __init__(self, address: str, *, client_id: str, max_frame_bytes: int,
                 connect_timeout_ms: int = 5000) -> None:
        self.address = address
        self.client_id = client_id
        self.max_frame_bytes = max_frame_bytes
        self.connect_timeout_ms = connect_timeout_ms
        self._connection: Connection | None = None

    async def request(self, api_key: int, body: Any, *, timeout_ms: int) -> tuple[int, Any]:
        """Send one request on the (re)opened connection; (error_code, body)."""
        if self._connection is None or self._connection.closed:
            host, _, port = self.address.rpartition(":")
            self._connection = await Connection.open(host, int(port), client_id=self.client_id,
                                                     connect_timeout_ms=min(self.connect_timeout_ms, timeout_ms),
                                                     max_frame_bytes=self.max_frame_bytes,
                                                     request_timeout_ms=timeout_ms)
        return await self._connection.request(api_key, body, timeout_ms=timeout_ms)

    async def close(self) -> None:
        """Close the connection, if open."""
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
