"""The server side of the shared transport: an asyncio server for Kafka's wire protocol.

Every listener stands on it: the broker's client and replication listeners, the controller's RPC
listener. Frames are Kafka's (transport.py, docs/protocol.md). :class:`Server` starts one handler
task per request, in arrival order, so a handler's code before its first ``await`` runs in arrival
order; it writes the answers in that same order. Bytes that are not a Kafka request as the
listener declares it (an api key it does not serve, a version it does not declare, a body that
does not decode) close that connection only, with one log line, as Kafka does.

Limits against clients that take resources and give nothing back (one line each here; the
details are on :class:`Server` and in docs/protocol.md):

- connections: ``max_connections`` in all, ``max_connections_per_ip`` per address (with
  per-address overrides). At either limit the oldest connection that has been open at least
  ``UNUSED_EVICTION_MIN_AGE_MS`` and never completed a request is closed to make room (a client
  that asks something at once is never crowded out by idle sockets); when there is none, the new
  connection is closed at once.
- time: a connection must send its first byte within ``first_byte_timeout_ms``; a frame, once
  its first byte is here, must end within ``request_frame_timeout_ms`` (slowloris).
- memory in: frames larger than ``LARGE_FRAME_BYTES`` are read chunk by chunk, never allocated
  at their declared length, and their bytes count against ``queued_max_request_bytes`` together
  with the requests being handled; past it, those sockets are not read.
- memory out: answers not yet taken by the client, and an estimate of the answers of handlers
  still running, count against ``max_buffered_bytes_per_connection``; past it that socket is not
  read.

Log lines for these causes are rate limited (``raftka.common.ratelog``): one per cause per
minute, with a count.

Pure asyncio; imports only the shared layer (``raftka.common``).
"""
from __future__ import annotations

import asyncio
import collections
import functools
import ipaddress
import logging
import mmap
import socket
import ssl as ssl_module
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Final, Mapping, NamedTuple, Union

from raftka.common import errors
from raftka.common.api import api_name
from raftka.common.authenticator import ANONYMOUS, SASL_API_KEYS, Authenticator
from raftka.common.errors import FrameError, RaftkaError
from raftka.common.codec import (CodecError, decode_request_header, decoder, encoder_into, request_header_version,
                                 response_header_version)
from raftka.common.messages import KAFKA_API, TRAILING_BYTES_ALLOWED
from raftka.common.messages.error_answers import error_answer
from raftka.common.ratelog import RateLimitedLog
from raftka.common.sasl import SaslServerSettings
from raftka.common.schema import FieldError, Message
from raftka.common.transport import (
    CLOSE_TIMEOUT_MS, CONNECTIONS_FIRST_BYTE_TIMEOUT_MS_DEFAULT, CONNECTIONS_MAX_IDLE_MS_DEFAULT,
    HANDLER_TIMEOUT_MS_DEFAULT, LENGTH, LENGTH_BYTES, MAX_BUFFERED_BYTES_PER_CONNECTION_DEFAULT,
    MAX_CONNECTIONS_DEFAULT, MAX_CONNECTIONS_PER_IP_DEFAULT, MAX_IN_FLIGHT_PER_CONNECTION_DEFAULT,
    QUEUED_MAX_REQUEST_BYTES_DEFAULT, REQUEST_FRAME_TIMEOUT_MS_DEFAULT,
    SOCKET_REQUEST_MAX_BYTES_DEFAULT, STREAM_LIMIT_BYTES, is_int,
)

log = logging.getLogger(__name__)

# A never-used connection younger than this is not closed to make room: clients get a moment to
# send their first request, and a burst of connects does not close its own members.
UNUSED_EVICTION_MIN_AGE_MS: Final = 1000
# Frames up to asyncio's StreamReader limit, plus room for a request's headers, are read whole
# (the hot path: one copy fewer; a producer's requests are at most max.request.size, 1 MiB, of
# records, so a busy producer's frames are just over 1 MiB: read in chunks, they cost 7% of
# acks=all throughput); longer ones in chunks, counted against queued.max.request.bytes. So one
# connection holds at most READ_WINDOW_BYTES outside that limit, times max.connections
# connections. (A reader limit of 256 KiB would make that 768 KiB, but costs 8% on 600 KB
# frames: pause and resume.)
LARGE_FRAME_BYTES: Final = STREAM_LIMIT_BYTES + 64 * 1024
# What asyncio's StreamReader may hold for one connection before it pauses the socket: twice its
# limit, plus one recv (selector transports read at most 256 KiB at a time). A frame read in
# chunks is charged this much at its start, so what sits in the reader counts too.
READ_WINDOW_BYTES: Final = 2 * STREAM_LIMIT_BYTES + 256 * 1024
# Chunks of one recv's size (chunks of one size let the allocator reuse what the reader frees:
# 1 MiB chunks left 9% more RSS than the bytes held), copied into the frame's mappings
# (_FrameBlocks), which take exactly what is written. Each is charged a sixteenth more for what
# the reader and the allocator hold meanwhile: charged a page more, 4 partial frames grew RSS by
# 98-99.6% of the charge (30 runs); the RSS test must hold every time.
READ_CHUNK_BYTES: Final = 256 * 1024
READ_CHUNK_OVERHEAD_BYTES: Final = READ_CHUNK_BYTES // 16
FRAME_BLOCK_BYTES: Final = 4 * 1024 * 1024  # a large frame is held in mappings of this size (_FrameBlocks)
# Answer size estimates (max_buffered_bytes_per_connection): until an api key has been answered,
# a request to it reserves 1/8 of the cap; an estimate reserves at most 1/2 of it (so one large
# answer in flight never holds back a small request on the same connection); estimates halve
# every ANSWER_ESTIMATE_DECAY_S, so one huge answer does not slow a connection for ever.
ANSWER_ESTIMATE_UNKNOWN_DIVISOR: Final = 8
ANSWER_ESTIMATE_MAX_DIVISOR: Final = 2
ANSWER_ESTIMATE_DECAY_S: Final = 60.0
# Memory given back to the OS: once connections that closed had held this many bytes (unsent
# answers, as the reaper last saw them, and partial frames), the reaper asks the C allocator to
# return its free pages (glibc's malloc_trim, a few ms), at most once per interval.
# Without it, glibc keeps most of what buffers of a few MiB took (its mmap threshold rises to
# the largest block freed): 5 clients that never read their answers left +48 MiB for good.
TRIM_AFTER_RELEASED_BYTES: Final = 32 * 1024 * 1024
TRIM_INTERVAL_S: Final = 10.0
LISTEN_BACKLOG: Final = 100  # a TLS listener's accept queue (asyncio's servers use the same)


@dataclass(slots=True)
class Request:
    """One decoded request, as a server handler sees it (read-only by convention: not frozen,
    whose ``__init__`` costs 4x as much, once per request)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    peer: Any  # (host, port) of the client
    connection_id: int  # unique per accepted connection of this server
    received_monotonic: float = 0.0
    header_version: int = 1  # Kafka's request header version: 1, or 2 for a flexible version
    principal: str = ANONYMOUS  # who the connection authenticated as (SASL: User:<name>)


class Response(NamedTuple):
    """A handler's answer: an error code for the whole request (NONE, or spread into the answer's
    error fields, common/messages/error_answers.py) and the body in its declared shape."""

    error_code: int
    body: Any = None


HandlerResult = Union[Response, "tuple[int, Any]", None]
Handler = Callable[[Request], Awaitable[HandlerResult]]

_KAFKA_HEADER: Final = struct.Struct(">hhih")  # api key, version, correlation id, client_id's length
_LENGTH_AND_CORRELATION: Final = struct.Struct(">Ii")
API_VERSIONS_KEY: Final = 18  # ApiVersions: the transport answers it for Kafka clients
PRODUCE_KEY: Final = 0
# Versions advertised in ApiVersions below the lowest one served (KAFKA-18659). Older librdkafka
# (2.0.2, which Debian's kcat links) compresses a batch only if the broker's Produce range meets
# [0, the codec's version]; without v0 it sends gzip, snappy and lz4 uncompressed, silently.
# Kafka 4.0 advertises Produce from v0 while serving v3+ only, and so does Raftka: a Produce
# below v3 still closes the connection (_decode_kafka), as any undeclared version does.
ADVERTISED_MIN_VERSIONS: Final = {PRODUCE_KEY: 0}
UNKNOWN_API_KEY_LABEL: Final = -1  # metrics count unknown api keys under one label (bounded)


@dataclass
class ServerMetrics:
    """Counters of one Server (monotonic except the gauges on Server)."""

    requests: collections.Counter = field(default_factory=collections.Counter)  # by api key
    errors: collections.Counter = field(default_factory=collections.Counter)  # non-zero frame error codes
    bytes_in: int = 0
    bytes_out: int = 0
    connections_accepted: int = 0
    connections_refused: int = 0  # over max_connections, none to close instead
    connections_refused_per_ip: int = 0  # over max_connections_per_ip, none to close instead
    connections_closed_unused: int = 0  # never completed a request, closed to make room
    connections_closed_idle: int = 0  # connections.max.idle.ms
    connections_closed_bad_frame: int = 0  # not a Kafka request this listener declares
    connections_closed_frame_timeout: int = 0  # request.frame.timeout.ms
    connections_closed_first_byte_timeout: int = 0  # connections.first.byte.timeout.ms
    connections_closed_unauthenticated: int = 0  # SASL: another request before authentication, or a failed one
    connections_closed_tls_handshake: int = 0  # a TLS listener's handshake failed (plaintext, garbage, bad cert)


class _ServerConnection:
    __slots__ = ("id", "peer", "host", "reader", "writer", "queue", "running", "buffered_bytes",
                 "last_activity", "wake_reader", "reader_done", "closing", "finished", "answered",
                 "reaped_unsent", "connected_at", "frames", "in_frame", "frame_seen_at",
                 "frame_seen_frames", "partial_bytes", "reserved_bytes", "unsent_peak", "authenticator",
                 "principal")

    def __init__(self, connection_id: int, peer: Any, host: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.id = connection_id
        self.peer = peer
        self.host = host  # the peer's address, the key of max_connections_per_ip
        self.reader = reader
        self.writer = writer
        self.queue: collections.deque[asyncio.Task] = collections.deque()  # arrival order
        self.running = 0  # handler tasks not finished
        self.buffered_bytes = 0  # encoded answers waiting for an earlier one
        self.last_activity = time.monotonic()
        self.wake_reader = asyncio.Event()
        self.reader_done = False
        self.closing = False
        self.finished = False
        self.answered: Callable[[asyncio.Task], None] | None = None  # the handler tasks' done callback
        self.reaped_unsent = 0  # unsent bytes at the idle reaper's last look
        self.connected_at = self.last_activity
        self.frames = 0  # complete request frames read (0: never used)
        self.in_frame = False  # between a frame's length and its last byte
        self.frame_seen_at: float | None = None  # when the reaper first saw the frame in progress
        self.frame_seen_frames = 0  # ... and self.frames then (a new frame restarts the clock)
        self.partial_bytes = 0  # charged to Server.partial_frame_bytes for a frame read in chunks
        self.reserved_bytes = 0  # estimated answer bytes of this connection's running handlers
        self.unsent_peak = 0  # most unsent answer bytes seen (reaper, backpressure): freed at the close
        self.authenticator: Authenticator | None = None  # a SASL listener's gate (common/authenticator.py)
        self.principal = ANONYMOUS

    def unsent_bytes(self) -> int:
        transport = self.writer.transport
        return self.buffered_bytes + (transport.get_write_buffer_size() if transport else 0)

    def abort(self) -> None:
        self.closing = True
        transport = self.writer.transport
        if transport is not None:
            transport.abort()
        self.wake_reader.set()


class Server:
    """An asyncio server for Kafka's wire protocol, calling ``handler(request)`` once per request.

    Per connection, requests are handled concurrently (one task each, created in arrival order)
    and answered in arrival order. A handler returns a :class:`Response` (or an
    ``(error_code, body)`` tuple), or None to send nothing (Produce with acks=0). A handler
    raising a RaftkaError is answered with that error's code and ``error_message``; any other
    exception is logged and answered UNKNOWN_SERVER_ERROR. The connection keeps serving.

    Limits (Kafka's config names where Kafka has the limit):

    - ``max_frame_bytes`` (socket.request.max.bytes): a longer frame closes its connection.
    - ``max_connections`` (max.connections) and ``max_connections_per_ip``
      (max.connections.per.ip, with ``max_connections_per_ip_overrides``: address -> count,
      host names resolved once here). At a limit the server closes the oldest connection that
      is at least ``UNUSED_EVICTION_MIN_AGE_MS`` old and has never completed a request (of that
      address, for the per-address limit) and takes the new one; when there is none, the new
      connection is closed at once. So idle sockets, even a thousand from the client's own
      address, never lock out a client that sends its request at once; a connection that has
      completed a request is never closed to make room.
    - ``first_byte_timeout_ms`` (connections.first.byte.timeout.ms): a connection that sends
      nothing for that long after its connect is closed.
    - ``request_frame_timeout_ms`` (request.frame.timeout.ms): a frame whose first byte came
      that long ago and whose last has not is closed (slowloris), time spent waiting for this
      server's own memory included (the client's request.timeout.ms has expired by then too).
      Measured by the reaper, so closed up to two reaper periods (a quarter of it each) late.
    - ``idle_timeout_ms`` (connections.max.idle.ms): a connection with no handler running and
      no bytes read or written for that long is closed.
    - ``max_in_flight_per_connection``: past it the server stops reading that socket until
      answers are written.
    - ``max_buffered_bytes_per_connection``: answers not yet taken by the client, plus an
      estimate for each running handler's answer (the largest recent answer to its api key,
      capped at half this limit), past which no next request of that connection starts and the
      socket is not read. A client that never reads its answers stops being read at about this
      limit plus one or two answers.
    - ``queued_max_request_bytes`` (queued.max.request.bytes): request bytes held, all
      connections. A frame longer than ``LARGE_FRAME_BYTES`` (1 MiB + 64 KiB) is read chunk by chunk (never
      allocated at its declared length), charged ``READ_WINDOW_BYTES`` for what asyncio buffers
      as soon as it starts and each chunk before it is read, and read further only while partial frames and running handlers'
      requests together stay under the limit (one partial frame alone always may go on). A
      complete request starts only while running handlers' request bytes stay under the limit,
      or when its connection has no handler running: each connection can always run one
      request, so a follower's Fetch is never held behind produce requests waiting for it. A
      partial frame that can no longer be read is closed by ``request_frame_timeout_ms``.
      Outside the limit, each connection's socket read buffer holds at most
      ``READ_WINDOW_BYTES`` (2.25 MiB).

    ``kafka_api`` maps the api keys served to their (request, response) declarations
    (common/messages/): a frame whose first byte is not 0 (no Kafka api key starts so), a request
    for any other api key, at a version not declared, or whose bytes do not decode as declared
    closes its connection (counted in ``connections_closed_bad_frame``), as Kafka does; ApiVersions
    (18) is answered here from the declarations.
    ``sasl`` (common/sasl.py's SaslServerSettings: enabled mechanisms, ``credential_lookup``)
    makes a SASL listener: each connection must authenticate before anything but ApiVersions,
    SaslHandshake and SaslAuthenticate is served (common/authenticator.py; this server answers
    those two itself), and its requests then carry ``principal`` ``User:<name>``; without it
    every request's principal is ``User:ANONYMOUS``.
    ``handler_timeout_ms`` is a safety net: a handler still running after it is cancelled and
    answered REQUEST_TIMED_OUT (handlers bound their own waits, e.g. a Fetch's
    ``max_wait_ms``, far below it).

    A handler for a request that expects no answer (Produce with acks=0) must return None even
    on errors: if it raises, the transport answers, and the client, expecting nothing, closes
    the connection on the unexpected correlation id (much as Kafka closes the connection when an
    acks=0 produce fails, so the client refreshes its metadata).
    """

    def __init__(self, handler: Handler, *,
                 max_frame_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                 max_connections: int = MAX_CONNECTIONS_DEFAULT,
                 max_connections_per_ip: int = MAX_CONNECTIONS_PER_IP_DEFAULT,
                 max_connections_per_ip_overrides: Mapping[str, int] | None = None,
                 max_in_flight_per_connection: int = MAX_IN_FLIGHT_PER_CONNECTION_DEFAULT,
                 max_buffered_bytes_per_connection: int = MAX_BUFFERED_BYTES_PER_CONNECTION_DEFAULT,
                 idle_timeout_ms: int = CONNECTIONS_MAX_IDLE_MS_DEFAULT,
                 first_byte_timeout_ms: int = CONNECTIONS_FIRST_BYTE_TIMEOUT_MS_DEFAULT,
                 request_frame_timeout_ms: int = REQUEST_FRAME_TIMEOUT_MS_DEFAULT,
                 handler_timeout_ms: int = HANDLER_TIMEOUT_MS_DEFAULT,
                 queued_max_request_bytes: int = QUEUED_MAX_REQUEST_BYTES_DEFAULT,
                 kafka_api: Mapping[int, tuple[Message, Message]],
                 name: str = "server", sasl: SaslServerSettings | None = None) -> None:
        for key, value in (("max_frame_bytes", max_frame_bytes), ("max_connections", max_connections),
                           ("max_in_flight_per_connection", max_in_flight_per_connection),
                           ("max_buffered_bytes_per_connection", max_buffered_bytes_per_connection),
                           ("idle_timeout_ms", idle_timeout_ms), ("handler_timeout_ms", handler_timeout_ms),
                           ("first_byte_timeout_ms", first_byte_timeout_ms),
                           ("request_frame_timeout_ms", request_frame_timeout_ms),
                           ("queued_max_request_bytes", queued_max_request_bytes)):
            if not is_int(value) or value < 1:
                raise errors.ConfigError(key, f"must be a positive integer, got {value!r}")
        if not is_int(max_connections_per_ip) or max_connections_per_ip < 0:
            raise errors.ConfigError("max_connections_per_ip",
                                     f"must be a non-negative integer, got {max_connections_per_ip!r}")
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.max_connections_per_ip_overrides = _resolve_overrides(max_connections_per_ip_overrides or {})
        self.max_in_flight_per_connection = max_in_flight_per_connection
        self.max_buffered_bytes_per_connection = max_buffered_bytes_per_connection
        self.idle_timeout_ms = idle_timeout_ms
        self.first_byte_timeout_ms = first_byte_timeout_ms
        self.request_frame_timeout_ms = request_frame_timeout_ms
        self.handler_timeout_ms = handler_timeout_ms
        self.queued_max_request_bytes = queued_max_request_bytes
        self.request_bytes_in_flight = 0  # request frames being handled, all connections
        self.partial_frame_bytes = 0  # frames being read in chunks (and not started), all connections
        self._released_bytes = 0  # bytes that closed connections and finished frames held (TRIM_...)
        # Connections whose read loop waits for memory (theirs or the server's); woken when any is freed.
        self._waiting_for_bytes: set[_ServerConnection] = set()
        # api key -> estimated answer bytes (see max_buffered_bytes_per_connection)
        self._answer_estimates: dict[int, int] = {}
        self._answer_estimate_unknown = max(1, max_buffered_bytes_per_connection // ANSWER_ESTIMATE_UNKNOWN_DIVISOR)
        self._answer_estimate_max = max(1, max_buffered_bytes_per_connection // ANSWER_ESTIMATE_MAX_DIVISOR)
        # api key -> (request, response) declarations this listener serves (common/messages/);
        # their versions are what ApiVersions advertises.
        self.kafka_api: dict[int, tuple[Message, Message]] = dict(kafka_api)
        # A SASL listener: each connection authenticates first (common/authenticator.py), and
        # this server answers SaslHandshake and SaslAuthenticate itself.
        self.sasl = sasl
        if sasl is not None:
            self.kafka_api.update({key: KAFKA_API[key] for key in SASL_API_KEYS})
        # (api key, version) -> what decodes and answers it (_kafka_plan); one per declared pair
        self._kafka_plans: dict[tuple[int, int], tuple[int, Any, int, Any]] = {}
        self.name = name
        self.metrics = ServerMetrics()
        self.port: int | None = None
        self.host: str | None = None
        self._connections: dict[int, _ServerConnection] = {}
        self._connections_per_ip: dict[str, int] = {}  # address -> open connections (no zeros kept)
        # Connections that have not completed a request, oldest first: the ones closed to make room.
        self._unused: dict[int, _ServerConnection] = {}
        self._next_connection_id = 0
        # handler task -> when it started (time.monotonic()); the reaper enforces handler_timeout_ms
        self._handler_tasks: dict[asyncio.Task, float] = {}
        self._timed_out: set[asyncio.Task] = set()  # cancelled by the reaper for handler_timeout_ms
        self._server: asyncio.base_events.Server | None = None
        self.ssl: ssl_module.SSLContext | None = None  # start(ssl=...): a TLS listener
        self._listening: socket.socket | None = None  # a TLS listener's socket, and its accept loop
        self._accepting: asyncio.Task | None = None
        self._handshakes: set[asyncio.Task] = set()  # TLS handshakes in progress
        self._reaper: asyncio.Task | None = None
        self._closed = False
        # Causes an outsider can repeat at will: one log line per cause per minute, with a count.
        self._rejected = RateLimitedLog(log)
        # Called with a connection's id when the peer closed it (EOF or reset), not when this
        # server did (idle, bad frame, close): a controller fences a broker whose heartbeat
        # connection a kill -9 closed. Must not raise or block.
        self.on_peer_closed: Callable[[int], None] | None = None

    # -- lifecycle --
    async def start(self, host: str, port: int, ssl: "ssl_module.SSLContext | None" = None) -> "Server":
        """Listen on ``host:port`` (port 0: any free port, then see ``self.port``); with ``ssl``,
        every connection starts with a TLS handshake (common/security.py, _accept_tls)."""
        loop = asyncio.get_running_loop()
        self.ssl = ssl
        if ssl is None:
            self._server = await asyncio.start_server(self._serve, host, port, limit=STREAM_LIMIT_BYTES)
            self.port = self._server.sockets[0].getsockname()[1]
        else:
            self._listening = _listening_socket(host, port)
            self.port = self._listening.getsockname()[1]
            self._accepting = loop.create_task(self._accept_tls(self._listening))
        self.host = host
        self._reaper = loop.create_task(self._reap())
        return self

    # -- TLS listeners --
    # Accepted here rather than by asyncio's TLS server: that one drops a failed handshake
    # without telling anyone (no count, no log line), and StreamWriter.start_tls on an accepted
    # connection loses the client's first bytes under uvloop (it reads them before the
    # connection's task runs). The handshake runs before _serve, so the connection limits
    # (with their eviction of unused connections) apply once it is done; handshakes in
    # progress are bounded by max_connections on their own, each by first_byte_timeout_ms.
    async def _accept_tls(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as error:  # EMFILE and the like: the next accept may succeed
                self._rejected.warning("accept", "%s: accept failed: %s", self.name, error)
                await asyncio.sleep(0.1)
                continue
            if len(self._handshakes) >= self.max_connections:
                self.metrics.connections_refused += 1
                self._rejected.warning("refused-handshakes", "%s: refusing connection from %s: %d TLS handshakes "
                                       "in progress (max.connections=%d)", self.name, peer, len(self._handshakes),
                                       self.max_connections)
                sock.close()
                continue
            task = loop.create_task(self._handshake(sock, peer))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, sock: socket.socket, peer: Any) -> None:
        """One TLS handshake, within first_byte_timeout_ms; then the connection is served as any
        other (_serve). A plaintext client, garbage or a refused certificate costs its
        connection only, with one log line per minute."""
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=STREAM_LIMIT_BYTES, loop=loop),
                                                     self._serve, loop=loop),
                sock, ssl=self.ssl, ssl_handshake_timeout=self.first_byte_timeout_ms / 1000)
        except (ssl_module.SSLError, OSError, asyncio.TimeoutError) as error:
            sock.close()
            self.metrics.connections_closed_tls_handshake += 1
            reason = getattr(error, "reason", None) or str(error) or type(error).__name__
            self._rejected.warning("tls-handshake", "%s: closing connection from %s: TLS handshake failed: %s",
                                   self.name, peer, reason)

    async def close(self) -> None:
        """Stop listening, close every connection, cancel handlers still running."""
        self._closed = True
        if self._server is not None:
            self._server.close()
        if self._accepting is not None:
            self._accepting.cancel()
            for task in self._handshakes:
                task.cancel()
            await asyncio.wait([self._accepting, *self._handshakes], timeout=CLOSE_TIMEOUT_MS / 1000)
        if self._listening is not None:
            self._listening.close()
        if self._reaper is not None:
            self._reaper.cancel()
        for conn in list(self._connections.values()):
            conn.abort()
        for task in list(self._handler_tasks):
            task.cancel()
        pending = list(self._handler_tasks)
        if self._reaper is not None:
            pending.append(self._reaper)
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_TIMEOUT_MS / 1000)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), CLOSE_TIMEOUT_MS / 1000)
            except asyncio.TimeoutError:
                pass

    # -- gauges --
    @property
    def connection_count(self) -> int:
        """Connections open now."""
        return len(self._connections)

    @property
    def request_queue_depth(self) -> int:
        """Requests received and not yet answered, all connections."""
        return sum(len(c.queue) for c in self._connections.values())

    @property
    def answer_bytes_unsent(self) -> int:
        """Answer bytes written or encoded and not yet taken by the clients, all connections."""
        return sum(c.unsent_bytes() for c in self._connections.values())

    def metrics_snapshot(self) -> dict[str, Any]:
        """Counters and gauges as plain data (for /metrics and logs)."""
        m = self.metrics
        return {
            "requests": {api_name(k): v for k, v in m.requests.items()},
            "errors": {api_name(k): v for k, v in m.errors.items()},
            "bytes_in": m.bytes_in, "bytes_out": m.bytes_out,
            "connections": self.connection_count, "request_queue_depth": self.request_queue_depth,
            "connections_accepted": m.connections_accepted, "connections_refused": m.connections_refused,
            "connections_refused_per_ip": m.connections_refused_per_ip,
            "connections_closed_unused": m.connections_closed_unused,
            "connections_closed_idle": m.connections_closed_idle,
            "connections_closed_bad_frame": m.connections_closed_bad_frame,
            "connections_closed_frame_timeout": m.connections_closed_frame_timeout,
            "connections_closed_first_byte_timeout": m.connections_closed_first_byte_timeout,
            "connections_closed_unauthenticated": m.connections_closed_unauthenticated,
            "connections_closed_tls_handshake": m.connections_closed_tls_handshake,
            "answer_bytes_unsent": self.answer_bytes_unsent,
            "request_bytes_in_flight": self.request_bytes_in_flight,
            "partial_frame_bytes": self.partial_frame_bytes,
        }

    # -- per connection --
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = _host_of(peer)
        if self._closed or not self._admit(host, peer):
            writer.transport.abort()  # closed at once: no buffer, no task kept
            return
        self._next_connection_id += 1
        # Past this many unsent bytes the read loop holds the next request (backpressure).
        writer.transport.set_write_buffer_limits(high=self.max_buffered_bytes_per_connection)
        conn = _ServerConnection(self._next_connection_id, peer, host, reader, writer)
        conn.answered = functools.partial(self._answered, conn)
        if self.sasl is not None:
            conn.authenticator = Authenticator(self.sasl, peer, self.name)
        self._connections[conn.id] = conn
        self._connections_per_ip[host] = self._connections_per_ip.get(host, 0) + 1
        self._unused[conn.id] = conn
        self.metrics.connections_accepted += 1
        peer_closed = False
        try:
            await self._read_loop(conn)
            peer_closed = not conn.closing  # EOF from the peer, not our own abort
        except FrameError as error:
            if not conn.closing:  # else this server closed it (a timeout) inside a frame
                self.metrics.connections_closed_bad_frame += 1
                self._rejected.warning("bad-frame", "%s: closing connection from %s: %s", self.name, peer,
                                       error.message)
                conn.abort()
        except (ConnectionError, OSError):
            peer_closed = not conn.closing
            conn.abort()
        finally:
            conn.reader_done = True
            self._release_partial(conn)
            if not conn.queue:
                self._finish(conn)
            if peer_closed and not self._closed and self.on_peer_closed is not None:
                try:
                    self.on_peer_closed(conn.id)
                except Exception:  # a listener's bug must not break the server
                    log.exception("%s: on_peer_closed failed", self.name)

    def _admit(self, host: str, peer: Any) -> bool:
        """Room for one more connection from ``host``, made by closing a never-used one if need
        be (see the class docstring); False to refuse it."""
        limit = self.max_connections_per_ip_overrides.get(host, self.max_connections_per_ip)
        if self._connections_per_ip.get(host, 0) >= limit and not self._close_oldest_unused(host):
            self.metrics.connections_refused_per_ip += 1
            self._rejected.warning("refused-per-ip", "%s: refusing connection from %s: %d connections "
                                   "open from %s (max.connections.per.ip=%d)", self.name, peer,
                                   self._connections_per_ip.get(host, 0), host, limit)
            return False
        if len(self._connections) >= self.max_connections and not self._close_oldest_unused(None):
            self.metrics.connections_refused += 1
            self._rejected.warning("refused-max", "%s: refusing connection from %s: %d connections open "
                                   "(max.connections=%d)", self.name, peer, len(self._connections),
                                   self.max_connections)
            return False
        return True

    def _close_oldest_unused(self, host: str | None) -> bool:
        """Close the oldest connection (of ``host``, or any) old enough that never completed a
        request; False when there is none."""
        cutoff = time.monotonic() - UNUSED_EVICTION_MIN_AGE_MS / 1000
        for conn in self._unused.values():  # oldest first
            if conn.connected_at > cutoff:
                return False  # the rest are younger still
            if host is None or conn.host == host:
                self._close(conn, "unused", "connections_closed_unused", logging.INFO,
                            "never completed a request; closed to make room for a new connection")
                return True
        return False

    def _close(self, conn: _ServerConnection, cause: str, counter: str, level: int, why: str) -> None:
        """Close ``conn`` for a limit (counted in ``metrics.<counter>``, logged rate limited)."""
        setattr(self.metrics, counter, getattr(self.metrics, counter) + 1)
        self._rejected.log(level, cause, "%s: closing connection from %s: %s", self.name, conn.peer, why)
        conn.abort()
        self._forget(conn)

    async def _read_loop(self, conn: _ServerConnection) -> None:
        loop = asyncio.get_running_loop()
        reader = conn.reader
        unpack_length = LENGTH.unpack
        while not conn.closing:
            try:
                header = await reader.readexactly(LENGTH_BYTES)
            except asyncio.IncompleteReadError as error:
                if error.partial:
                    raise FrameError("connection closed inside a frame header") from None
                return
            (length,) = unpack_length(header)
            if length > self.max_frame_bytes:
                raise FrameError(f"frame of {length} bytes exceeds socket.request.max.bytes={self.max_frame_bytes}")
            conn.in_frame = True
            if length <= LARGE_FRAME_BYTES:
                try:
                    payload = await reader.readexactly(length)
                except asyncio.IncompleteReadError:
                    raise FrameError("connection closed inside a frame") from None
            else:
                payload = await self._read_large_payload(conn, length)
                if payload is None:
                    return  # closed while waiting for memory
            conn.in_frame = False
            if not conn.frames:
                self._unused.pop(conn.id, None)  # used: never closed to make room
            conn.frames += 1
            conn.last_activity = time.monotonic()
            self.metrics.bytes_in += LENGTH_BYTES + length
            # A Kafka request header starts with its api key, an int16 below 256: a zero byte.
            # Anything else speaks another protocol (or none): closed before any decoding.
            if payload[:1] != b"\x00":
                self.metrics.requests[UNKNOWN_API_KEY_LABEL] += 1
                raise FrameError(f"not a Kafka request (first byte 0x{payload[:1].hex() or 'none'})")
            api_key, api_version, correlation_id, client_id, body, header_version = self._decode_kafka(payload)
            del payload  # a large frame's bytes are freed here, not at the next frame
            authenticator = conn.authenticator
            if authenticator is not None and not authenticator.allows(api_key):
                self._close(conn, "sasl-unauthenticated", "connections_closed_unauthenticated", logging.INFO,
                            f"{api_name(api_key)} before SASL authentication")
                return
            # Backpressure: while too much is owed to this client (answers unsent, or estimated
            # for handlers still running), or too many request bytes are being handled, hold this
            # request and read no further (the socket pauses once asyncio's read buffer fills).
            # Checked after the read, as answers may have piled up while we waited for this frame.
            size = LENGTH_BYTES + length
            estimate = self._answer_estimates.get(api_key, self._answer_estimate_unknown)
            cap = self.max_buffered_bytes_per_connection
            while (len(conn.queue) >= self.max_in_flight_per_connection
                   or (unsent := conn.unsent_bytes()) > cap
                   or (conn.reserved_bytes and unsent + conn.reserved_bytes + estimate > cap)
                   or (conn.running and self.request_bytes_in_flight + size > self.queued_max_request_bytes)):
                conn.unsent_peak = max(conn.unsent_peak, conn.unsent_bytes())  # memory freed at the close
                if not await self._wait_for_memory(conn):
                    return
            if conn.partial_bytes:  # a large frame's bytes move from the partial count to this one
                self._release_partial(conn)
            self.request_bytes_in_flight += size
            conn.reserved_bytes += estimate
            request = Request(api_key, api_version, correlation_id, client_id, body, conn.peer,
                              conn.id, conn.last_activity, header_version, conn.principal)
            self.metrics.requests[api_key] += 1
            conn.running += 1
            task = loop.create_task(self._run(conn, request, size, estimate))
            self._handler_tasks[task] = conn.last_activity
            task.add_done_callback(conn.answered)
            conn.queue.append(task)
            if authenticator is not None and api_key in SASL_API_KEYS and not authenticator.complete:
                # The next request must meet the state this one leaves: wait for its answer.
                await asyncio.wait((task,))
                if authenticator.failed:  # answered; closed once the answer is written
                    self.metrics.connections_closed_unauthenticated += 1
                    conn.closing = True
                    return
                if authenticator.complete:
                    conn.principal = authenticator.principal or ANONYMOUS

    def _decode_kafka(self, payload: bytes) -> tuple[int, int, int, str | None, Any, int]:
        """A Kafka request frame's (api_key, api_version, correlation_id, client_id, body,
        header_version). As Kafka: an api key this listener does not serve, a version it does not
        declare (but ApiVersions', answered below) or bytes that do not decode as declared close
        the connection (FrameError), since the client speaks something else."""
        try:
            api_key, api_version, correlation_id, client_id_length = _KAFKA_HEADER.unpack_from(payload)
        except struct.error:
            raise FrameError(f"request header cut short ({len(payload)} bytes)") from None
        plan = self._kafka_plans.get((api_key, api_version))
        if plan is None:
            plan = self._kafka_plan(api_key, api_version)
            if plan is None:  # ApiVersions at a version this server does not know (KIP-511): a v0 answer
                header, _ = decode_request_header(payload, 1)
                return api_key, api_version, header["correlation_id"], header["client_id"], None, 1
        header_version, decode_body = plan[0], plan[1]
        # The header by hand (it is the same for every API; the codec's generic path costs 1 us).
        position = _KAFKA_HEADER.size
        client_id = None
        if client_id_length >= 0:
            position += client_id_length
            if position > len(payload):
                raise FrameError("request header: client_id cut short")
            try:
                client_id = str(payload[_KAFKA_HEADER.size:position], "utf-8")
            except UnicodeDecodeError:
                raise FrameError("request header: client_id is not UTF-8") from None
        try:
            if header_version == 2:
                if payload[position:position + 1] == b"\x00":  # no tagged fields: the usual case
                    position += 1
                else:
                    _, position = decode_request_header(payload, 2)
            body = decode_body(memoryview(payload)[position:])
        except CodecError as error:
            raise FrameError(f"{api_name(api_key)} v{api_version}: {error.message}") from None
        return api_key, api_version, correlation_id, client_id, body, header_version

    def _kafka_plan(self, api_key: int, version: int) -> tuple[int, Any, int, Any] | None:
        """(request header version, body decoder, response header version, answer encoder) of a
        declared api key and version, kept for the next request; None for ApiVersions at a
        version it does not declare; FrameError for anything else not declared."""
        messages = self.kafka_api.get(api_key)
        if messages is None:
            self.metrics.requests[UNKNOWN_API_KEY_LABEL] += 1
            raise FrameError(f"unknown api key {api_key} (this listener serves "
                             f"{', '.join(map(str, sorted(self.kafka_api)))})")
        request_message, response_message = messages
        versions = request_message.versions()
        if version not in versions:
            if api_key == API_VERSIONS_KEY:
                return None
            raise FrameError(f"{api_name(api_key)} version {version} is not supported "
                             f"(versions {versions[0]}..{versions[-1]})")
        decode = decoder(request_message, version, allow_trailing=api_key in TRAILING_BYTES_ALLOWED)
        plan = (request_header_version(request_message, version), decode,
                response_header_version(response_message, version), encoder_into(response_message, version))
        self._kafka_plans[(api_key, version)] = plan  # at most one per declared api key and version
        return plan

    def _encode_kafka(self, request: Request, code: int, body: Any) -> bytes | None:
        """The answer frame in Kafka's protocol; a whole-request error (``code``) becomes the
        error in every error field of the answer (error_answers.py). None: nothing encodes."""
        request_message, response_message = self.kafka_api[request.api_key]
        version = request.api_version
        if request.api_key == API_VERSIONS_KEY and request.body is None:  # a version it does not know
            version, code = 0, errors.UNSUPPORTED_VERSION
            body = {"error_code": code, "api_keys": self.kafka_api_versions()}
            response_header, encode_into = 0, encoder_into(response_message, 0)
        else:
            _, _, response_header, encode_into = self._kafka_plans[(request.api_key, version)]
        if code != errors.NONE:
            message = body.get("error_message") if isinstance(body, dict) else None
            body = error_answer(request_message, response_message, version, request.body, code, message)
        # One buffer for the whole frame (length, header, body): a Fetch answer's records are
        # copied into it once. Response header v0 is the correlation id; v1 adds an empty
        # tagged-field section.
        frame = bytearray(_LENGTH_AND_CORRELATION.size)
        _LENGTH_AND_CORRELATION.pack_into(frame, 0, 0, request.correlation_id)
        if response_header:
            frame.append(0)
        header_end = len(frame)
        try:
            encode_into(body, frame)
        except CodecError as error:
            # A bug of ours, but one a client can repeat at will: rate limited like the others.
            self._rejected.error(f"unencodable-{request.api_key}", "%s: answer to %s v%d cannot be encoded: %s",
                                 self.name, api_name(request.api_key), version, error.message)
            del frame[header_end:]
            try:
                encode_into(error_answer(request_message, response_message, version, request.body,
                                         errors.UNKNOWN_SERVER_ERROR, "the server could not encode its answer"),
                            frame)
            except (CodecError, FieldError):
                return None
        LENGTH.pack_into(frame, 0, len(frame) - LENGTH_BYTES)
        return frame  # type: ignore[return-value]  # a bytearray: written as is

    def kafka_api_versions(self) -> list[dict[str, int]]:
        """ApiVersions' api_keys for Kafka clients: each declared request's version range (with
        Produce from v0, see ADVERTISED_MIN_VERSIONS)."""
        return [{"api_key": key, "max_version": request.versions()[-1],
                 "min_version": min(request.versions()[0], ADVERTISED_MIN_VERSIONS.get(key, request.versions()[0]))}
                for key, (request, _) in sorted(self.kafka_api.items())]

    async def _read_large_payload(self, conn: _ServerConnection, length: int) -> bytes | None:
        """A frame longer than the StreamReader's limit, read chunk by chunk as memory allows
        (queued_max_request_bytes); None when the connection was closed while it waited."""
        reader = conn.reader
        held = _FrameBlocks()
        try:
            return await self._read_chunks(conn, reader, length, held)
        finally:
            held.close()

    async def _read_chunks(self, conn: _ServerConnection, reader: asyncio.StreamReader, length: int,
                           held: "_FrameBlocks") -> bytes | None:
        left = length
        # What the reader buffers is charged at once, waiting or not: asyncio has read those
        # bytes already (charged only with the first chunk, four waiting connections left
        # 9 MiB outside the limit). Each chunk is charged before it is read.
        self.partial_frame_bytes += READ_WINDOW_BYTES
        conn.partial_bytes += READ_WINDOW_BYTES
        charge = min(left, READ_CHUNK_BYTES) + READ_CHUNK_OVERHEAD_BYTES
        while left:
            # One partial frame alone always may go on: a frame of socket.request.max.bytes
            # must be readable whatever the limit.
            while (self.partial_frame_bytes + self.request_bytes_in_flight + charge > self.queued_max_request_bytes
                   and self.partial_frame_bytes > conn.partial_bytes):
                if not await self._wait_for_memory(conn):
                    return None
            self.partial_frame_bytes += charge
            conn.partial_bytes += charge
            want = min(left, READ_CHUNK_BYTES)
            try:
                chunk = await reader.readexactly(want)
            except asyncio.IncompleteReadError:
                raise FrameError("connection closed inside a frame") from None
            held.write(chunk)
            del chunk
            left -= want
            charge = min(left, READ_CHUNK_BYTES) + READ_CHUNK_OVERHEAD_BYTES
        return held.getvalue()

    async def _wait_for_memory(self, conn: _ServerConnection) -> bool:
        """Wait until this connection's writer, any finished handler, any released partial
        frame, or an abort wakes us; False when the connection is closing."""
        conn.wake_reader.clear()
        self._waiting_for_bytes.add(conn)
        try:
            # The reaper bounds the wait (idle, request.frame.timeout.ms).
            await conn.wake_reader.wait()
        finally:
            self._waiting_for_bytes.discard(conn)
        transport = conn.writer.transport
        return not conn.closing and transport is not None and not transport.is_closing()

    def _release_partial(self, conn: _ServerConnection) -> None:
        if conn.partial_bytes:
            self._released_bytes += conn.partial_bytes
            self.partial_frame_bytes -= conn.partial_bytes
            conn.partial_bytes = 0
            for waiting in self._waiting_for_bytes:
                waiting.wake_reader.set()

    async def _run(self, conn: _ServerConnection, request: Request, size: int,
                   estimate: int) -> bytes | None:
        """Handle one request; the encoded answer frame, or None to send nothing."""
        try:
            if conn.authenticator is not None and request.api_key in SASL_API_KEYS:
                code, body = errors.NONE, await conn.authenticator.answer(request.api_key, request.body)
            else:
                code, body = await self._answer(request)
        except _NoAnswer:
            return None
        finally:
            conn.running -= 1
            conn.reserved_bytes -= estimate
            self.request_bytes_in_flight -= size
            for waiting in self._waiting_for_bytes:
                waiting.wake_reader.set()
        if code != errors.NONE:
            self.metrics.errors[request.api_key] += 1  # a served key: others never reach a handler
        frame = self._encode_kafka(request, code, body)
        if frame is None:  # logged; the client would wait for an answer that never comes
            conn.abort()
            return None
        if len(frame) > estimate or estimate == self._answer_estimate_unknown:  # learn; see _reap
            self._answer_estimates[request.api_key] = min(len(frame), self._answer_estimate_max)
        conn.buffered_bytes += len(frame)
        return frame

    async def _answer(self, request: Request) -> tuple[int, Any]:
        if request.api_key == API_VERSIONS_KEY:
            # The transport's own answer: what this listener declares (an unknown version's
            # v0 answer is built when it is encoded).
            return errors.NONE, {"error_code": errors.NONE, "api_keys": self.kafka_api_versions()}
        try:
            result = await self.handler(request)
            if result is None:
                raise _NoAnswer
            code, body = result
            if not is_int(code):
                raise TypeError(f"handler answered error code {code!r}")
            return code, body
        except _NoAnswer:
            raise
        except RaftkaError as error:
            return error.code, {"error_message": error.message}
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task not in self._timed_out:
                raise  # the server is closing
            # handler_timeout_ms (enforced by the reaper: no timer per request)
            self._timed_out.discard(task)
            task.uncancel()
            log.error("%s: handler for %s from %s ran over %d ms; cancelled", self.name,
                      api_name(request.api_key), request.peer, self.handler_timeout_ms)
            return errors.REQUEST_TIMED_OUT, {
                "error_message": f"{self.name} gave up on {api_name(request.api_key)} after "
                                 f"{self.handler_timeout_ms} ms"}
        except Exception:  # a TimeoutError of the handler's own making included: a handler bug
            return self._handler_failed(request)

    def _handler_failed(self, request: Request) -> tuple[int, Any]:
        log.exception("%s: handler failed for %s from %s", self.name, api_name(request.api_key),
                      request.peer)
        return errors.UNKNOWN_SERVER_ERROR, {
            "error_message": f"{self.name} failed to handle {api_name(request.api_key)}; see its log"}

    def _answered(self, conn: _ServerConnection, task: asyncio.Task) -> None:
        """A handler task finished (done callback): write every answer now ready at the head
        of the connection's queue, in arrival order, in one write. Answers finished in the same
        loop iteration have their callbacks run back to back, so the first writes them all and
        the others find nothing to do: one system call per burst, no writer task."""
        self._handler_tasks.pop(task, None)
        self._timed_out.discard(task)
        queue = conn.queue
        if queue and queue[0].done():
            chunks: list[bytes] = []
            while queue and queue[0].done():
                head = queue.popleft()
                if head.cancelled() or head.exception() is not None:
                    continue  # server closing (cancelled); _run never raises otherwise
                frame = head.result()
                if frame is not None:
                    conn.buffered_bytes -= len(frame)
                    chunks.append(frame)
            if chunks and not conn.closing:
                data = b"".join(chunks) if len(chunks) > 1 else chunks[0]
                try:
                    if conn.writer.transport.is_closing():  # uvloop raises RuntimeError for it
                        raise ConnectionResetError("the client's connection is closing")
                    conn.writer.write(data)  # the transport buffers what the socket does not take
                except (ConnectionError, OSError):
                    conn.abort()
                else:
                    self.metrics.bytes_out += len(data)
                    conn.last_activity = time.monotonic()
            conn.wake_reader.set()
        if not queue and (conn.reader_done or conn.closing):
            self._finish(conn)

    def _finish(self, conn: _ServerConnection) -> None:
        """Every answer written and no more requests: forget the connection and close it."""
        if conn.finished:
            return
        conn.finished = True
        self._forget(conn)
        conn.closing = True
        conn.wake_reader.set()
        transport = conn.writer.transport
        if transport is not None and not transport.is_closing():
            transport.close()  # flushes what is written, then closes

    def _forget(self, conn: _ServerConnection) -> None:
        """Stop counting ``conn`` against the connection limits (idempotent): nothing of it is
        kept once its tasks end."""
        if self._connections.pop(conn.id, None) is None:
            return
        self._released_bytes += conn.unsent_peak
        self._unused.pop(conn.id, None)
        left = self._connections_per_ip[conn.host] - 1
        if left:
            self._connections_per_ip[conn.host] = left
        else:
            del self._connections_per_ip[conn.host]

    async def _reap(self) -> None:
        """Once a period: cancel handlers running over handler_timeout_ms (answered
        REQUEST_TIMED_OUT); close connections idle for idle_timeout_ms, silent for
        first_byte_timeout_ms after their connect, or inside one frame for
        request_frame_timeout_ms; halve the answer size estimates every ANSWER_ESTIMATE_DECAY_S.
        No timer per request or per frame: the read loop only flips ``in_frame``."""
        period_s = min(self.idle_timeout_ms / 4, self.handler_timeout_ms / 4, self.first_byte_timeout_ms / 4,
                       self.request_frame_timeout_ms / 4, 1000) / 1000
        decay_at = time.monotonic() + ANSWER_ESTIMATE_DECAY_S
        trimmed_at = 0.0
        while True:
            await asyncio.sleep(period_s)
            now = time.monotonic()
            started_before = now - self.handler_timeout_ms / 1000
            for task, started in list(self._handler_tasks.items()):
                if started <= started_before and not task.done() and task not in self._timed_out:
                    self._timed_out.add(task)
                    task.cancel()
            if now >= decay_at:
                decay_at = now + ANSWER_ESTIMATE_DECAY_S
                for api_key, estimate in self._answer_estimates.items():
                    self._answer_estimates[api_key] = max(1, estimate // 2)
            for conn in list(self._connections.values()):
                self._reap_connection(conn, now)
            if self._released_bytes >= TRIM_AFTER_RELEASED_BYTES and now - trimmed_at >= TRIM_INTERVAL_S:
                _release_free_memory()
                self._released_bytes, trimmed_at = 0, now

    def _reap_connection(self, conn: _ServerConnection, now: float) -> None:
        transport = conn.writer.transport
        if conn in self._waiting_for_bytes and (transport is None or transport.is_closing()):
            # Lost while its read loop waited for memory (a client that never read its answers
            # went away): nothing else would wake it.
            conn.wake_reader.set()
            return
        # A client still taking answers off a full buffer is not idle.
        unsent = transport.get_write_buffer_size() if transport is not None else 0
        if unsent < conn.reaped_unsent:
            conn.last_activity = now
        conn.reaped_unsent = unsent
        if conn.running == 0 and (now - conn.last_activity) * 1000 >= self.idle_timeout_ms:
            self._close(conn, "idle", "connections_closed_idle", logging.INFO,
                        f"idle for {self.idle_timeout_ms} ms (connections.max.idle.ms)")
            return
        conn.unsent_peak = max(conn.unsent_peak, unsent + conn.buffered_bytes)
        # Inside a frame: past its length (in_frame), or bytes of a frame header waiting in the
        # reader while the read loop waits for more (not while it holds a complete request back).
        if conn.in_frame or (conn not in self._waiting_for_bytes and _buffered_bytes(conn.reader)):
            if conn.frame_seen_at is None or conn.frame_seen_frames != conn.frames:
                conn.frame_seen_at = now
                conn.frame_seen_frames = conn.frames
            elif (now - conn.frame_seen_at) * 1000 >= self.request_frame_timeout_ms:
                self._close(conn, "frame-timeout", "connections_closed_frame_timeout", logging.WARNING,
                            f"a frame did not complete within {self.request_frame_timeout_ms} ms "
                            "(request.frame.timeout.ms)")
            return
        conn.frame_seen_at = None
        if not conn.frames and (now - conn.connected_at) * 1000 >= self.first_byte_timeout_ms:
            self._close(conn, "first-byte-timeout", "connections_closed_first_byte_timeout", logging.INFO,
                        f"sent nothing within {self.first_byte_timeout_ms} ms of its connect "
                        "(connections.first.byte.timeout.ms)")


class _FrameBlocks:
    """A large frame's bytes as they arrive, in anonymous mappings of FRAME_BLOCK_BYTES.

    Off the C heap on purpose: kept 256 KiB chunks interleaved there with the reader's transient
    buffers, and how well glibc reused the holes varied, so 4 partial frames took up to 19 MiB
    more RSS than they held in about 1 run in 25. A mapping takes pages only as they are written
    and gives them all back when closed."""

    __slots__ = ("blocks", "used")

    def __init__(self) -> None:
        self.blocks: list[mmap.mmap] = []
        self.used = 0  # bytes written into the last block

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if not self.blocks or self.used == FRAME_BLOCK_BYTES:
                self.blocks.append(mmap.mmap(-1, FRAME_BLOCK_BYTES))
                self.used = 0
            n = min(len(view), FRAME_BLOCK_BYTES - self.used)
            self.blocks[-1][self.used:self.used + n] = view[:n]
            self.used += n
            view = view[n:]

    def getvalue(self) -> bytes:
        last = len(self.blocks) - 1
        return b"".join(memoryview(b)[:self.used if i == last else FRAME_BLOCK_BYTES]
                        for i, b in enumerate(self.blocks))

    def close(self) -> None:
        for block in self.blocks:
            block.close()
        self.blocks.clear()


def _glibc(name: str) -> Any:
    try:
        import ctypes
        return getattr(ctypes.CDLL(None), name)  # glibc; other C libraries have none (nothing to do)
    except (AttributeError, OSError):
        return None


_malloc_trim = _glibc("malloc_trim")


def _release_free_memory() -> None:
    """Give the C allocator's free pages back to the OS (see TRIM_AFTER_RELEASED_BYTES)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _listening_socket(host: str, port: int) -> socket.socket:
    """A non-blocking listening socket on ``host:port`` (SO_REUSEADDR, as asyncio's servers)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]
    listening = socket.create_server(address, family=family, backlog=LISTEN_BACKLOG)
    listening.setblocking(False)
    return listening


def _host_of(peer: Any) -> str:
    """The address a peer is counted under (max_connections_per_ip): an IPv4 client of a dual
    stack listener counts under its IPv4 address."""
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
    return host[7:] if host.startswith("::ffff:") and "." in host else host


def _resolve_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """max_connections_per_ip_overrides with host names resolved to their addresses (once,
    here, as Kafka does); ConfigError for a bad count or a name that does not resolve."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        if not is_int(count) or count < 0:
            raise errors.ConfigError("max.connections.per.ip.overrides",
                                     f"count for {host} must be a non-negative integer, got {count!r}")
        try:
            addresses = [str(ipaddress.ip_address(host.strip("[]")))]
        except ValueError:
            try:
                addresses = sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
            except OSError as error:
                raise errors.ConfigError("max.connections.per.ip.overrides",
                                         f"cannot resolve {host}: {error}") from None
        for address in addresses:
            out[_host_of((address, 0))] = count
    return out


def _buffered_bytes(reader: asyncio.StreamReader) -> int:
    """Bytes received and not yet read. asyncio has no public call for it; its StreamReader has
    kept them in ``_buffer`` since Python 3.4 (read only by the reaper: the hot path pays nothing;
    tests/test_server_limits.py fails if it goes away, as a partial header then goes unseen)."""
    return len(getattr(reader, "_buffer", b""))


class _NoAnswer(Exception):
    """Internal: the handler answered None (send nothing)."""
