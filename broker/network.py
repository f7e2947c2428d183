"""The broker's side of the shared transport (common/transport.py).

The listener is ``transport.Server`` (per-request tasks started in arrival order, answers in
arrival order, backpressure past ``queued.max.requests`` in flight per connection, bad frames
close one connection). Outgoing, :class:`PeerConnection` keeps one pipelined
``transport.Connection`` to a peer and reopens it after a failure; to another broker's SASL_*
inter-broker listener it logs in first (``sasl``: sasl.mechanism.inter.broker.protocol and the
broker's own jaas login).

A request that times out closes the connection (as Kafka's NetworkClient disconnects on a
request timeout): a frozen (SIGSTOPped) or black-holed peer would otherwise keep every
in-flight slot of that connection taken by answers that never come, and each later request
would queue behind them. Reopening after a failure waits a reconnect backoff that doubles per
consecutive failure, from ``reconnect_backoff_ms`` up to ``reconnect_backoff_max_ms`` (Kafka's
names and defaults), with +-20% jitter so that many fetchers do not redial in step. A refused
login counts as a failed connect: a broker whose credential is wrong (or not created yet) logs
in at most about once a second per peer, not once per fetch round.
"""
from __future__ import annotations

import asyncio
import contextvars
import random
import ssl
import time
from typing import Any, Final, Mapping

from raftka.common.errors import NetworkExceptionError, RaftkaError, RequestTimedOutError
from raftka.common.sasl import SaslClientSettings
from raftka.common.server import Request, Response, Server
from raftka.common.transport import Connection

__all__ = ["LISTENER", "PeerConnection", "Request", "Response", "Server"]

# The listener name the request being handled came in on (set in each request's own task by the
# broker's per-listener handler): Metadata and FindCoordinator answer with endpoints on that
# same listener, as Kafka does, so a client on the SSL listener is sent to SSL ports.
LISTENER: contextvars.ContextVar[str] = contextvars.ContextVar("raftka_listener", default="PLAINTEXT")

RECONNECT_BACKOFF_MS_DEFAULT: Final = 50  # reconnect.backoff.ms
RECONNECT_BACKOFF_MAX_MS_DEFAULT: Final = 1000  # reconnect.backoff.max.ms
RECONNECT_JITTER: Final = 0.2


class PeerConnection:
    """A connection to ``host:port`` opened on first use, closed when a request times out or the
    connection fails, and reopened (after the reconnect backoff) by the next request.
    Failures raise NetworkExceptionError / RequestTimedOutError (both retriable), and
    SaslAuthenticationFailedError when the peer refuses this broker's login."""

    def __init__(self, address: str, *, client_id: str, max_frame_bytes: int,
                 connect_timeout_ms: int = 5000,
                 reconnect_backoff_ms: int = RECONNECT_BACKOFF_MS_DEFAULT,
                 reconnect_backoff_max_ms: int = RECONNECT_BACKOFF_MAX_MS_DEFAULT,
                 rng: random.Random | None = None, kafka_versions: Mapping[int, int] | None = None,
                 ssl: ssl.SSLContext | None = None, sasl: SaslClientSettings | None = None) -> None:
        self.address = address
        self.ssl = ssl  # the peer's listener is TLS (inter.broker.listener.name)
        self.sasl = sasl  # the peer's listener is SASL_*: log in with these before any request
        # api key -> the version it is sent at (transport.Connection); others at the newest declared
        self.kafka_versions = dict(kafka_versions or {})
        self.client_id = client_id
        self.max_frame_bytes = max_frame_bytes
        self.connect_timeout_ms = connect_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = max(reconnect_backoff_max_ms, reconnect_backoff_ms)
        self._rng = rng or random.Random()
        self._connection: Connection | None = None
        self._opening = asyncio.Lock()  # concurrent first requests share one new connection
        self._failures = 0  # consecutive failed connects or requests
        self._retry_at = 0.0  # monotonic time before which no new connection is opened
        self.disconnects = 0  # connections dropped after a failure or timeout (for tests, metrics)
        self.opened_at = 0.0  # monotonic time the current connection was opened

    def open_since(self) -> float | None:
        """When the current connection was opened, or None when there is none or it is closed
        (the connection's read loop notices a close by the peer at once)."""
        connection = self._connection
        if connection is None or connection.closed:
            return None
        return self.opened_at

    def backoff_ms(self) -> float:
        """The reconnect backoff after the current number of consecutive failures (0 when none)."""
        if self._failures == 0:
            return 0.0
        base = min(self.reconnect_backoff_ms * 2 ** min(self._failures - 1, 30), self.reconnect_backoff_max_ms)
        return base * self._rng.uniform(1 - RECONNECT_JITTER, 1 + RECONNECT_JITTER)

    def _note_failure(self) -> None:
        self._failures += 1
        self._retry_at = time.monotonic() + self.backoff_ms() / 1000

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def _open(self, timeout_ms: int) -> Connection:
        wait_s = self._retry_at - time.monotonic()
        if wait_s > 0:
            if wait_s * 1000 >= timeout_ms:
                raise NetworkExceptionError(f"{self.address}: reconnecting after {self._failures} failure(s); "
                                            f"next attempt in {wait_s * 1000:.0f} ms")
            await asyncio.sleep(wait_s)
            timeout_ms -= int(wait_s * 1000)
        host, _, port = self.address.rpartition(":")
        try:
            return await Connection.open(host, int(port), client_id=self.client_id,
                                         connect_timeout_ms=max(1, min(self.connect_timeout_ms, timeout_ms)),
                                         max_frame_bytes=self.max_frame_bytes,
                                         request_timeout_ms=timeout_ms, kafka_versions=self.kafka_versions,
                                         ssl=self.ssl, sasl=self.sasl)
        except RaftkaError:  # refused, timed out, TLS or SASL refused: all back off alike
            self._note_failure()
            raise

    async def request(self, api_key: int, body: Any, *, timeout_ms: int) -> tuple[int, Any]:
        """Send one request on the (re)opened connection; (error_code, body)."""
        if self._connection is None or self._connection.closed:
            started = time.monotonic()
            try:
                async with asyncio.timeout(timeout_ms / 1000), self._opening:
                    if self._connection is None or self._connection.closed:
                        self._connection = None
                        self._connection = await self._open(timeout_ms)
                        self.opened_at = time.monotonic()
            except TimeoutError:
                raise RequestTimedOutError(f"connecting to {self.address} took over {timeout_ms} ms") from None
            timeout_ms = max(1, timeout_ms - int((time.monotonic() - started) * 1000))
        connection = self._connection
        try:
            answer = await connection.request(api_key, body, timeout_ms=timeout_ms)
        except (RequestTimedOutError, NetworkExceptionError):
            if self._connection is connection:  # not already dropped by a concurrent request
                self._note_failure()
                self.disconnects += 1
                await self._drop()
            raise
        self._failures = 0
        return answer

    async def close(self) -> None:
        """Close the connection, if open."""
        await self._drop()
