"""The server side of the shared transport: an asyncio server for Raftka frames.

Every listener stands on it: the broker's client and replication listeners, the controller's RPC
listener. Frames are those of transport.py (docs/protocol.md). :class:`Server` starts one handler
task per request, in arrival order, so a handler's code before its first ``await`` runs in arrival
order; it writes the answers in that same order. Bad bytes, or a request for an api key the
server does not serve, close that connection only, with one log line.

Pure asyncio; imports only the shared layer (``raftka.common``).
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Final, Mapping, NamedTuple, Union

from raftka.common import errors
from raftka.common.api import SUPPORTED_API_VERSIONS, api_name
from raftka.common.errors import FrameError, RaftkaError
from raftka.common.transport import (
    CLOSE_TIMEOUT_MS, CONNECTIONS_MAX_IDLE_MS_DEFAULT, HANDLER_TIMEOUT_MS_DEFAULT, LENGTH_BYTES,
    MAX_BUFFERED_BYTES_PER_CONNECTION_DEFAULT, MAX_CONNECTIONS_DEFAULT,
    MAX_IN_FLIGHT_PER_CONNECTION_DEFAULT, QUEUED_MAX_REQUEST_BYTES_DEFAULT,
    SOCKET_REQUEST_MAX_BYTES_DEFAULT, STREAM_LIMIT_BYTES, decode_request, encode_response, is_int,
    read_frame,
)

log = logging.getLogger(__name__)


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


class Response(NamedTuple):
    """A handler's answer: the frame's error code and body (a map; None is sent as ``{}``)."""

    error_code: int
    body: Any = None


HandlerResult = Union[Response, "tuple[int, Any]", None]
Handler = Callable[[Request], Awaitable[HandlerResult]]

UNKNOWN_API_KEY_LABEL: Final = -1  # metrics count unknown api keys under one label (bounded)


@dataclass
class ServerMetrics:
    """Counters of one Server (monotonic except the gauges on Server)."""

    requests: collections.Counter = field(default_factory=collections.Counter)  # by api key
    errors: collections.Counter = field(default_factory=collections.Counter)  # non-zero frame error codes
    bytes_in: int = 0
    bytes_out: int = 0
    connections_accepted: int = 0
    connections_refused: int = 0  # over max_connections
    connections_closed_idle: int = 0  # connections.max.idle.ms
    connections_closed_bad_frame: int = 0


class _ServerConnection:
    __slots__ = ("id", "peer", "reader", "writer", "queue", "running", "buffered_bytes",
                 "last_activity", "wake_reader", "reader_done", "closing", "finished", "answered",
                 "reaped_unsent")

    def __init__(self, connection_id: int, peer: Any, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.id = connection_id
        self.peer = peer
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
    """An asyncio server for Raftka frames, calling ``handler(request)`` once per request.

    Per connection, requests are handled concurrently (one task each, created in arrival order)
    and answered in arrival order. A handler returns a :class:`Response` (or an
    ``(error_code, body)`` tuple), or None to send nothing (Produce with acks=0). A handler
    raising a RaftkaError is answered with that error's code and ``error_message``; any other
    exception is logged and answered UNKNOWN_SERVER_ERROR. The connection keeps serving.

    Limits: ``max_frame_bytes`` (socket.request.max.bytes), ``max_connections``
    (max.connections; more are refused), ``max_in_flight_per_connection`` and
    ``max_buffered_bytes_per_connection`` (past either, the server stops reading that socket
    until answers drain), ``queued_max_request_bytes`` (queued.max.request.bytes: request bytes
    being handled, all connections, past which no connection's next request starts; one always
    may), ``idle_timeout_ms`` (connections.max.idle.ms: a connection with no
    handler running and no bytes read or written for that long is closed). ``api_versions``
    maps the api keys served to their ``(min, max)`` versions: a request for any other api key
    closes its connection (as a bad frame does, as Kafka does); a served key at a version
    outside the range is answered UNSUPPORTED_VERSION without calling the handler. ``handler_timeout_ms`` is a safety net: a
    handler still running after it is cancelled and answered REQUEST_TIMED_OUT (handlers bound
    their own waits, e.g. a Fetch's ``max_wait_ms``, far below it).

    A handler for a request that expects no answer (Produce with acks=0) must return None even
    on errors: if it raises, the transport answers, and the client, expecting nothing, closes
    the connection on the unexpected correlation id (much as Kafka closes the connection when an
    acks=0 produce fails, so the client refreshes its metadata).
    """

    def __init__(self, handler: Handler, *,
                 max_frame_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                 max_connections: int = MAX_CONNECTIONS_DEFAULT,
                 max_in_flight_per_connection: int = MAX_IN_FLIGHT_PER_CONNECTION_DEFAULT,
                 max_buffered_bytes_per_connection: int = MAX_BUFFERED_BYTES_PER_CONNECTION_DEFAULT,
                 idle_timeout_ms: int = CONNECTIONS_MAX_IDLE_MS_DEFAULT,
                 api_versions: Mapping[int, tuple[int, int]] | None = None,
                 handler_timeout_ms: int = HANDLER_TIMEOUT_MS_DEFAULT,
                 queued_max_request_bytes: int = QUEUED_MAX_REQUEST_BYTES_DEFAULT,
                 name: str = "server") -> None:
        for key, value in (("max_frame_bytes", max_frame_bytes), ("max_connections", max_connections),
                           ("max_in_flight_per_connection", max_in_flight_per_connection),
                           ("max_buffered_bytes_per_connection", max_buffered_bytes_per_connection),
                           ("idle_timeout_ms", idle_timeout_ms), ("handler_timeout_ms", handler_timeout_ms),
                           ("queued_max_request_bytes", queued_max_request_bytes)):
            if not is_int(value) or value < 1:
                raise errors.ConfigError(key, f"must be a positive integer, got {value!r}")
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.max_in_flight_per_connection = max_in_flight_per_connection
        self.max_buffered_bytes_per_connection = max_buffered_bytes_per_connection
        self.idle_timeout_ms = idle_timeout_ms
        self.handler_timeout_ms = handler_timeout_ms
        self.queued_max_request_bytes = queued_max_request_bytes
        self.request_bytes_in_flight = 0  # request frames being handled, all connections
        self._waiting_for_bytes: set[_ServerConnection] = set()
        self.api_versions: Mapping[int, tuple[int, int]] = (
            SUPPORTED_API_VERSIONS if api_versions is None else dict(api_versions))
        self.name = name
        self.metrics = ServerMetrics()
        self.port: int | None = None
        self.host: str | None = None
        self._connections: dict[int, _ServerConnection] = {}
        self._next_connection_id = 0
        # handler task -> when it started (time.monotonic()); the reaper enforces handler_timeout_ms
        self._handler_tasks: dict[asyncio.Task, float] = {}
        self._timed_out: set[asyncio.Task] = set()  # cancelled by the reaper for handler_timeout_ms
        self._server: asyncio.base_events.Server | None = None
        self._reaper: asyncio.Task | None = None
        self._closed = False
        # Called with a connection's id when the peer closed it (EOF or reset), not when this
        # server did (idle, bad frame, close): a controller fences a broker whose heartbeat
        # connection a kill -9 closed. Must not raise or block.
        self.on_peer_closed: Callable[[int], None] | None = None

    # -- lifecycle --
    async def start(self, host: str, port: int) -> "Server":
        """Listen on ``host:port`` (port 0: any free port, then see ``self.port``)."""
        self._server = await asyncio.start_server(self._serve, host, port, limit=STREAM_LIMIT_BYTES)
        self.host = host
        self.port = self._server.sockets[0].getsockname()[1]
        self._reaper = asyncio.get_running_loop().create_task(self._reap_idle())
        return self

    async def close(self) -> None:
        """Stop listening, close every connection, cancel handlers still running."""
        self._closed = True
        if self._server is not None:
            self._server.close()
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

    def metrics_snapshot(self) -> dict[str, Any]:
        """Counters and gauges as plain data (for /metrics and logs)."""
        m = self.metrics
        return {
            "requests": {api_name(k): v for k, v in m.requests.items()},
            "errors": {api_name(k): v for k, v in m.errors.items()},
            "bytes_in": m.bytes_in, "bytes_out": m.bytes_out,
            "connections": self.connection_count, "request_queue_depth": self.request_queue_depth,
            "connections_accepted": m.connections_accepted, "connections_refused": m.connections_refused,
            "connections_closed_idle": m.connections_closed_idle,
            "connections_closed_bad_frame": m.connections_closed_bad_frame,
        }

    # -- per connection --
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if self._closed or len(self._connections) >= self.max_connections:
            self.metrics.connections_refused += 1
            log.warning("%s: refusing connection from %s: %d connections open (max.connections=%d)",
                        self.name, peer, len(self._connections), self.max_connections)
            writer.transport.abort()
            return
        self._next_connection_id += 1
        # Past this many unsent bytes the read loop holds the next request (backpressure).
        writer.transport.set_write_buffer_limits(high=self.max_buffered_bytes_per_connection)
        conn = _ServerConnection(self._next_connection_id, peer, reader, writer)
        conn.answered = functools.partial(self._answered, conn)
        self._connections[conn.id] = conn
        self.metrics.connections_accepted += 1
        peer_closed = False
        try:
            await self._read_loop(conn)
            peer_closed = not conn.closing  # EOF from the peer, not our own abort
        except FrameError as error:
            self.metrics.connections_closed_bad_frame += 1
            log.warning("%s: closing connection from %s: %s", self.name, peer, error.message)
            conn.abort()
        except (ConnectionError, OSError):
            peer_closed = not conn.closing
            conn.abort()
        finally:
            conn.reader_done = True
            if not conn.queue:
                self._finish(conn)
            if peer_closed and not self._closed and self.on_peer_closed is not None:
                try:
                    self.on_peer_closed(conn.id)
                except Exception:  # a listener's bug must not break the server
                    log.exception("%s: on_peer_closed failed", self.name)

    async def _read_loop(self, conn: _ServerConnection) -> None:
        loop = asyncio.get_running_loop()
        while not conn.closing:
            payload = await read_frame(conn.reader, self.max_frame_bytes)
            if payload is None:
                return
            conn.last_activity = time.monotonic()
            self.metrics.bytes_in += LENGTH_BYTES + len(payload)
            api_key, api_version, correlation_id, client_id, body = decode_request(
                payload, self.max_frame_bytes)
            if api_key not in self.api_versions:
                # As Kafka: a request for an API this server does not have closes the connection
                # (the client speaks something else); a known API at an unsupported version is
                # answered UNSUPPORTED_VERSION below.
                self.metrics.requests[UNKNOWN_API_KEY_LABEL] += 1
                raise FrameError(f"unknown api key {api_key} (this server serves "
                                 f"{', '.join(map(str, sorted(self.api_versions)))})")
            # Backpressure: while too much is owed to this client, hold this request and read
            # no further (the socket pauses once asyncio's read buffer fills). Checked after the
            # read, as answers may have piled up while we waited for this frame.
            size = LENGTH_BYTES + len(payload)
            while (len(conn.queue) >= self.max_in_flight_per_connection
                   or conn.unsent_bytes() > self.max_buffered_bytes_per_connection
                   or (self.request_bytes_in_flight
                       and self.request_bytes_in_flight + size > self.queued_max_request_bytes)):
                conn.wake_reader.clear()
                self._waiting_for_bytes.add(conn)
                try:
                    # Set by this connection's writer, by any finished handler, or by abort;
                    # the idle reaper bounds the wait.
                    await conn.wake_reader.wait()
                finally:
                    self._waiting_for_bytes.discard(conn)
                if conn.closing:
                    return
            self.request_bytes_in_flight += size
            request = Request(api_key, api_version, correlation_id, client_id, body, conn.peer,
                              conn.id, conn.last_activity)
            self.metrics.requests[api_key if api_key in self.api_versions else UNKNOWN_API_KEY_LABEL] += 1
            conn.running += 1
            task = loop.create_task(self._run(conn, request, size))
            self._handler_tasks[task] = conn.last_activity
            task.add_done_callback(conn.answered)
            conn.queue.append(task)

    async def _run(self, conn: _ServerConnection, request: Request, size: int) -> bytes | None:
        """Handle one request; the encoded answer frame, or None to send nothing."""
        try:
            code, body = await self._answer(request)
        except _NoAnswer:
            return None
        finally:
            conn.running -= 1
            self.request_bytes_in_flight -= size
            for waiting in self._waiting_for_bytes:
                waiting.wake_reader.set()
        if code != errors.NONE:
            label = request.api_key if request.api_key in self.api_versions else UNKNOWN_API_KEY_LABEL
            self.metrics.errors[label] += 1
        try:
            frame = encode_response(request.correlation_id, code, {} if body is None else body)
        except FrameError as error:
            log.error("%s: answer to %s cannot be encoded: %s", self.name, api_name(request.api_key),
                      error.message)
            frame = encode_response(request.correlation_id, errors.UNKNOWN_SERVER_ERROR,
                                    {"error_message": "the server could not encode its answer"})
        conn.buffered_bytes += len(frame)
        return frame

    async def _answer(self, request: Request) -> tuple[int, Any]:
        versions = self.api_versions[request.api_key]  # unknown keys closed the connection
        if not versions[0] <= request.api_version <= versions[1]:
            return errors.UNSUPPORTED_VERSION, {
                "error_message": f"{api_name(request.api_key)} version {request.api_version} is not "
                                 f"supported (versions {versions[0]}..{versions[1]})"}
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
        self._connections.pop(conn.id, None)
        conn.closing = True
        conn.wake_reader.set()
        transport = conn.writer.transport
        if transport is not None and not transport.is_closing():
            transport.close()  # flushes what is written, then closes

    async def _reap_idle(self) -> None:
        """Close connections idle for idle_timeout_ms (connections.max.idle.ms), and cancel
        handlers running over handler_timeout_ms (answered REQUEST_TIMED_OUT)."""
        period_s = min(self.idle_timeout_ms / 4, self.handler_timeout_ms / 4, 1000) / 1000
        while True:
            await asyncio.sleep(period_s)
            now = time.monotonic()
            started_before = now - self.handler_timeout_ms / 1000
            for task, started in list(self._handler_tasks.items()):
                if started <= started_before and not task.done() and task not in self._timed_out:
                    self._timed_out.add(task)
                    task.cancel()
            for conn in list(self._connections.values()):
                # A client still taking answers off a full buffer is not idle.
                transport = conn.writer.transport
                unsent = transport.get_write_buffer_size() if transport is not None else 0
                if unsent < conn.reaped_unsent:
                    conn.last_activity = now
                conn.reaped_unsent = unsent
                if conn.running == 0 and (now - conn.last_activity) * 1000 >= self.idle_timeout_ms:
                    self.metrics.connections_closed_idle += 1
                    log.info("%s: closing connection from %s: idle for %d ms (connections.max.idle.ms)",
                             self.name, conn.peer, self.idle_timeout_ms)
                    conn.abort()
                    self._connections.pop(conn.id, None)


class _NoAnswer(Exception):
    """Internal: the handler answered None (send nothing)."""
