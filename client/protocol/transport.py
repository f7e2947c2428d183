"""The wire transport every Raftka process speaks: frames, a pipelined client connection, a server.

Frames (docs/protocol.md)::

    frame    = length payload            length: 4-byte big-endian, bytes of payload
    request  = [api_key, api_version, correlation_id, client_id, body]     (msgpack array)
    response = [correlation_id, error_code, body]                          (msgpack array)

``api_key``, ``api_version`` and ``correlation_id`` are integers, ``client_id`` a string (or
nil), ``error_code`` an integer from the error table (client/protocol/errors.py), ``body`` any
msgpack value (a map for every API today). Binary fields are msgpack ``bin``.

:class:`Connection` (client side) pipelines requests on one TCP connection: in-flight requests
wait in a FIFO keyed by correlation id, and since a server answers in arrival order, every
response must belong to the oldest request in flight; any other correlation id is a protocol
error that closes the connection. A lost connection fails every request in flight with
NetworkExceptionError (retriable); a request that outlives its ``timeout_ms`` fails alone with
RequestTimedOutError (its slot stays taken until its late answer arrives and is dropped).

:class:`Server` (server side) starts one handler task per request, in arrival order, so a
handler's code before its first ``await`` runs in arrival order; it writes the answers in that
same order. Bad bytes, or a request for an api key the server does not serve, close that
connection only, with one log line.

Pure asyncio + msgpack; imports only ``client.protocol``.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Final, Mapping, NamedTuple, Union

import msgpack

from client.protocol import errors
from client.protocol.api import SUPPORTED_API_VERSIONS, api_name
from client.protocol.errors import FrameError, NetworkExceptionError, RaftkaError, RequestTimedOutError

log = logging.getLogger(__name__)

LENGTH: Final = struct.Struct(">I")
LENGTH_BYTES: Final = LENGTH.size
REQUEST_ARITY: Final = 5
RESPONSE_ARITY: Final = 3
CORRELATION_ID_MAX: Final = 2**31 - 1  # Kafka's correlation id is an int32; we wrap before it

# Kafka's names and defaults where Kafka has the limit.
SOCKET_REQUEST_MAX_BYTES_DEFAULT: Final = 104_857_600  # socket.request.max.bytes
CONNECTIONS_MAX_IDLE_MS_DEFAULT: Final = 600_000  # connections.max.idle.ms
MAX_CONNECTIONS_DEFAULT: Final = 1000  # max.connections (Kafka: unbounded; we bound it)
MAX_IN_FLIGHT_PER_CONNECTION_DEFAULT: Final = 100  # server: requests of one connection in flight
MAX_BUFFERED_BYTES_PER_CONNECTION_DEFAULT: Final = 8 * 1024 * 1024  # server: unsent answers
QUEUED_MAX_REQUEST_BYTES_DEFAULT: Final = 512 * 1024 * 1024  # queued.max.request.bytes (Kafka: unbounded)
MAX_IN_FLIGHT_REQUESTS_DEFAULT: Final = 5  # max.in.flight.requests.per.connection
REQUEST_TIMEOUT_MS_DEFAULT: Final = 30_000  # request.timeout.ms
CONNECT_TIMEOUT_MS_DEFAULT: Final = 10_000  # socket.connection.setup.timeout.ms
HANDLER_TIMEOUT_MS_DEFAULT: Final = 300_000  # server: a safety net, far above any request's own timeout
CLOSE_TIMEOUT_MS: Final = 2_000  # how long close() waits for sockets and tasks to finish
STREAM_LIMIT_BYTES: Final = 1 << 20  # asyncio StreamReader buffer before it pauses the socket


# --------------------------------------------------------------------------------------------
# Frames: pure functions, no I/O except read_frame.

def _pack(value: Any) -> bytes:
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as error:
        raise FrameError(f"cannot encode {type(value).__name__} as msgpack: {error}") from None


def encode_frame(items: list) -> bytes:
    """A whole frame (length prefix + msgpack array) for ``items``."""
    payload = _pack(items)
    return LENGTH.pack(len(payload)) + payload


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """A request frame."""
    return encode_frame([api_key, api_version, correlation_id, client_id, body])


def encode_response(correlation_id: int, error_code: int, body: Any) -> bytes:
    """A response frame."""
    return encode_frame([correlation_id, error_code, body])


def _request_frame_from_packed_body(api_key: int, api_version: int, correlation_id: int,
                                    client_id: str | None, packed_body: bytes) -> bytes:
    # A fixarray of 5 is one byte (0x95); the body is packed once, before the correlation id
    # is known, so a body that cannot be encoded fails before it takes a slot.
    head = _pack([api_key, api_version, correlation_id, client_id])
    head = b"\x95" + head[1:]  # fixarray of 4 -> fixarray of 5, the body follows
    return LENGTH.pack(len(head) + len(packed_body)) + head + packed_body


def decode_payload(payload: bytes, arity: int, max_frame_bytes: int) -> list:
    """The msgpack array of ``arity`` items in a frame's payload; FrameError for anything else."""
    try:
        items = msgpack.unpackb(payload, raw=False, strict_map_key=False,
                                max_bin_len=max_frame_bytes, max_str_len=max_frame_bytes,
                                max_array_len=max_frame_bytes, max_map_len=max_frame_bytes,
                                max_ext_len=0)
    except Exception as error:  # msgpack raises several unrelated types for bad bytes
        raise FrameError(f"frame is not valid msgpack ({type(error).__name__})") from None
    if not isinstance(items, list) or len(items) != arity:
        raise FrameError(f"frame must be a msgpack array of {arity} items")
    return items


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def decode_request(payload: bytes, max_frame_bytes: int) -> tuple[int, int, int, str | None, Any]:
    """``(api_key, api_version, correlation_id, client_id, body)``; FrameError when malformed."""
    api_key, api_version, correlation_id, client_id, body = decode_payload(
        payload, REQUEST_ARITY, max_frame_bytes)
    if not (_is_int(api_key) and _is_int(api_version) and _is_int(correlation_id)):
        raise FrameError("api_key, api_version and correlation_id must be integers")
    if client_id is not None and not isinstance(client_id, str):
        raise FrameError("client_id must be a string or nil")
    return api_key, api_version, correlation_id, client_id, body


def decode_response(payload: bytes, max_frame_bytes: int) -> tuple[int, int, Any]:
    """``(correlation_id, error_code, body)``; FrameError when malformed."""
    correlation_id, error_code, body = decode_payload(payload, RESPONSE_ARITY, max_frame_bytes)
    if not (_is_int(correlation_id) and _is_int(error_code)):
        raise FrameError("correlation_id and error_code must be integers")
    return correlation_id, error_code, body


async def read_frame(reader: asyncio.StreamReader, max_frame_bytes: int,
                     idle_timeout_ms: int | None = None) -> bytes | None:
    """One frame's payload, or None at a clean end of stream (or after ``idle_timeout_ms``
    without the start of a frame). FrameError for a length over ``max_frame_bytes`` or a stream
    that ends inside a frame."""
    try:
        if idle_timeout_ms is None:
            header = await reader.readexactly(LENGTH_BYTES)
        else:
            try:
                header = await asyncio.wait_for(reader.readexactly(LENGTH_BYTES), idle_timeout_ms / 1000)
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


def _os_error_text(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


# --------------------------------------------------------------------------------------------
# Client side.

class _InFlight:
    __slots__ = ("correlation_id", "api_key", "future", "timer")

    def __init__(self, correlation_id: int, api_key: int, future: asyncio.Future,
                 timer: asyncio.TimerHandle | None = None) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.future = future
        self.timer = timer  # submit()'s timeout; cancelled when the answer comes


class _Slots:
    """In-flight slots of one connection: ``acquire`` waits (first come, first served),
    ``try_acquire`` takes one only when one is free and nobody waits (so it never jumps the
    queue). An asyncio.Semaphore has no way to take a slot without awaiting."""

    __slots__ = ("free", "_waiters")

    def __init__(self, count: int) -> None:
        self.free = count
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def try_acquire(self) -> bool:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    def wait_nowait(self) -> asyncio.Future[None]:
        """Join the queue for a slot without awaiting: done (result None) when the slot is
        this waiter's, in queue order. Whoever is handed one must release it."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    def wake_all(self) -> None:
        """The connection is gone: hand every waiter a slot; each sees it closed and gives up."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        waiter = self.wait_nowait()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot in the turn it was cancelled: pass it on
            else:
                waiter.cancel()  # release() skips it
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes straight to the oldest waiter
                return
        self.free += 1


def _time_out(future: asyncio.Future, api_key: int, address: str, timeout_ms: int) -> None:
    if not future.done():
        future.set_exception(RequestTimedOutError(
            f"{api_name(api_key)} to {address} got no answer within {timeout_ms} ms"))


class Connection:
    """One client-side TCP connection with pipelined requests. Open with :meth:`open`; it
    belongs to the event loop that opened it.

    At most ``max_in_flight_requests`` requests wait for answers; more wait for a slot (within
    their own timeout). Answers are matched to requests by correlation id, oldest first. A timed
    out request leaves the connection open (a slow server answers later requests behind it); a
    caller that suspects a dead peer closes it and opens a new one.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, host: str,
                 port: int, client_id: str | None, max_in_flight_requests: int,
                 max_frame_bytes: int, request_timeout_ms: int) -> None:
        if max_in_flight_requests < 1:
            raise errors.ConfigError("max_in_flight_requests", f"must be >= 1, got {max_in_flight_requests}")
        if client_id is not None and not isinstance(client_id, str):
            raise errors.ConfigError("client_id", f"must be a string, got {type(client_id).__name__}")
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_in_flight_requests = max_in_flight_requests
        self.max_frame_bytes = max_frame_bytes
        self.request_timeout_ms = request_timeout_ms
        self._reader = reader
        self._writer = writer
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._slots = _Slots(max_in_flight_requests)
        self._next_correlation_id = 0
        self._close_error: RaftkaError | None = None
        self._outgoing: list[bytes] = []
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()
        self._read_task = self._loop.create_task(self._read_loop())

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str | None = "raftka",
                   connect_timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT,
                   max_in_flight_requests: int = MAX_IN_FLIGHT_REQUESTS_DEFAULT,
                   max_frame_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                   request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT) -> "Connection":
        """Connect to ``host:port``. RequestTimedOutError after ``connect_timeout_ms``,
        NetworkExceptionError when the connection is refused or fails."""
        # asyncio.timeout, not asyncio.wait_for: on Python 3.11 wait_for loses a cancel that lands
        # as the connect completes (see client/aio/timeouts.py); a cancelled caller got a connection.
        try:
            async with asyncio.timeout(connect_timeout_ms / 1000):
                reader, writer = await asyncio.open_connection(host, port, limit=STREAM_LIMIT_BYTES)
        except asyncio.TimeoutError:
            raise RequestTimedOutError(f"connecting to {host}:{port} took over {connect_timeout_ms} ms") from None
        except OSError as error:
            raise NetworkExceptionError(f"cannot connect to {host}:{port}: {_os_error_text(error)}") from None
        return cls(reader, writer, host=host, port=port, client_id=client_id,
                   max_in_flight_requests=max_in_flight_requests, max_frame_bytes=max_frame_bytes,
                   request_timeout_ms=request_timeout_ms)

    @property
    def address(self) -> str:
        """``host:port`` of the peer."""
        return f"{self.host}:{self.port}"

    @property
    def closed(self) -> bool:
        """True once the connection is closed (by either side) or broken."""
        return self._close_error is not None

    @property
    def in_flight_count(self) -> int:
        """Requests sent and not yet answered (including timed-out ones still owed an answer)."""
        return len(self._in_flight)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._in_flight)} in flight"
        return f"<Connection {self.address} {state}>"

    def _raise_closed(self) -> None:
        assert self._close_error is not None
        raise NetworkExceptionError(f"connection to {self.address} is closed: {self._close_error.message}")

    async def request(self, api_key: int, body: Any, api_version: int = 0, *,
                      timeout_ms: int | None = None,
                      expect_response: bool = True) -> tuple[int, Any]:
        """Send one request; ``(error_code, body)`` of its answer.

        ``timeout_ms`` (default ``request_timeout_ms``) bounds the whole request: waiting for an
        in-flight slot, writing, and the answer. ``expect_response=False`` (Produce with acks=0)
        returns ``(0, None)`` once the frame is written. Raises NetworkExceptionError when the
        connection is or gets lost, RequestTimedOutError on timeout, FrameError when ``body``
        cannot be encoded.
        """
        if self._close_error is not None:
            self._raise_closed()
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        packed_body = _pack(body)
        slot_taken = False
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                if expect_response:
                    await self._slots.acquire()
                    slot_taken = True
                    if self._close_error is not None:
                        self._raise_closed()
                correlation_id = self._next_correlation_id
                self._next_correlation_id = 0 if correlation_id >= CORRELATION_ID_MAX else correlation_id + 1
                frame = _request_frame_from_packed_body(api_key, api_version, correlation_id,
                                                        self.client_id, packed_body)
                future: asyncio.Future | None = None
                if expect_response:
                    future = asyncio.get_running_loop().create_future()
                    # From here the read loop owns the slot: it is freed when the answer arrives
                    # (or the connection dies), even if this caller gives up first.
                    self._in_flight.append(_InFlight(correlation_id, api_key, future))
                    slot_taken = False
                self._send(frame)
                await self._writer.drain()  # waits only while the socket's buffer is full
                if future is None:
                    return errors.NONE, None
                return await future
        except TimeoutError:
            raise RequestTimedOutError(f"{api_name(api_key)} to {self.address} got no answer within "
                                       f"{timeout_ms} ms") from None
        except (ConnectionError, OSError) as error:
            self._fail(NetworkExceptionError(f"connection to {self.address} failed: {_os_error_text(error)}"))
            self._raise_closed()
            raise  # unreachable; for type checkers
        finally:
            if slot_taken:
                self._slots.release()

    def submit(self, api_key: int, body: Any, api_version: int = 0, *,
               timeout_ms: int | None = None) -> "asyncio.Future[tuple[int, Any]]":
        """Send one request without awaiting anything: the future of ``(error_code, body)``.
        Written at once when an in-flight slot is free, else queued for one behind the requests
        already waiting (never overtaking them), so requests go out in submit order. The future
        fails with RequestTimedOutError ``timeout_ms`` (default ``request_timeout_ms``) after the
        call, waiting included, and with NetworkExceptionError when the connection is lost. No
        task, coroutine or timeout context per request: the producer's path for each batch.
        Raises NetworkExceptionError when closed, FrameError when ``body`` cannot be encoded."""
        if self._close_error is not None:
            self._raise_closed()
        packed_body = _pack(body)
        loop = self._loop
        future = loop.create_future()
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        timer = loop.call_at(loop.time() + timeout_ms / 1000, _time_out, future, api_key,
                             self.address, timeout_ms)
        if self._slots.try_acquire():
            self._write_submitted(api_key, api_version, packed_body, future, timer)
        else:
            self._slots.wait_nowait().add_done_callback(functools.partial(
                self._slot_granted, api_key, api_version, packed_body, future, timer))
        return future

    def _slot_granted(self, api_key: int, api_version: int, packed_body: bytes,
                      future: asyncio.Future, timer: asyncio.TimerHandle, waiter: asyncio.Future) -> None:
        if self._close_error is not None or future.done():  # lost, or timed out while waiting
            timer.cancel()
            self._slots.release()
            if not future.done():
                future.set_exception(NetworkExceptionError(
                    f"connection to {self.address} is closed: {self._close_error.message}"))
            return
        self._write_submitted(api_key, api_version, packed_body, future, timer)

    def _write_submitted(self, api_key: int, api_version: int, packed_body: bytes,
                         future: asyncio.Future, timer: asyncio.TimerHandle) -> None:
        correlation_id = self._next_correlation_id
        self._next_correlation_id = 0 if correlation_id >= CORRELATION_ID_MAX else correlation_id + 1
        frame = _request_frame_from_packed_body(api_key, api_version, correlation_id, self.client_id,
                                                packed_body)
        # From here the read loop owns the slot, as in request().
        self._in_flight.append(_InFlight(correlation_id, api_key, future, timer))
        try:
            self._send(frame)
        except (ConnectionError, OSError) as error:
            self._fail(NetworkExceptionError(f"connection to {self.address} failed: {_os_error_text(error)}"))

    def _send(self, frame: bytes) -> None:
        # The first frame of a turn of the event loop is written at once (no added latency);
        # the ones after it in the same turn go out together in one write at the end of the
        # turn (one system call for a burst of pipelined requests). Order = order of _send calls.
        if self._flush_scheduled:
            self._outgoing.append(frame)
            return
        self._flush_scheduled = True
        asyncio.get_running_loop().call_soon(self._flush)
        self._writer.write(frame)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._outgoing:
            return
        data = b"".join(self._outgoing) if len(self._outgoing) > 1 else self._outgoing[0]
        self._outgoing.clear()
        if self._close_error is None:
            self._writer.write(data)

    async def _read_loop(self) -> None:
        error: RaftkaError
        try:
            while True:
                payload = await read_frame(self._reader, self.max_frame_bytes)
                if payload is None:
                    error = NetworkExceptionError(f"{self.address} closed the connection")
                    break
                correlation_id, code, body = decode_response(payload, self.max_frame_bytes)
                if not self._in_flight:
                    raise FrameError(f"answer with correlation id {correlation_id} but no request in flight")
                oldest = self._in_flight[0]
                if oldest.correlation_id != correlation_id:
                    raise FrameError(f"answer with correlation id {correlation_id}, expected "
                                     f"{oldest.correlation_id} (answers must come in request order)")
                self._in_flight.popleft()
                self._slots.release()
                if oldest.timer is not None:
                    oldest.timer.cancel()
                if not oldest.future.done():  # done: its caller timed out or was cancelled
                    oldest.future.set_result((code, body))
        except FrameError as frame_error:
            log.warning("closing connection to %s: %s", self.address, frame_error.message)
            error = NetworkExceptionError(f"protocol error from {self.address}: {frame_error.message}")
        except (ConnectionError, OSError) as os_error:
            error = NetworkExceptionError(f"connection to {self.address} lost: {_os_error_text(os_error)}")
        except asyncio.CancelledError:
            error = NetworkExceptionError("connection closed by the client")
            self._fail(error)
            raise
        self._fail(error)

    def _fail(self, error: RaftkaError) -> None:
        """Close the socket and fail every request in flight with ``error`` (idempotent)."""
        if self._close_error is not None:
            return
        self._flush()  # frames already accepted (acks=0 requests) still go out before the close
        self._close_error = error
        self._writer.close()
        while self._in_flight:
            entry = self._in_flight.popleft()
            if entry.timer is not None:
                entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_exception(NetworkExceptionError(error.message))
            self._slots.release()
        self._slots.wake_all()  # waiters for a slot see the connection closed
        if self._read_task is not asyncio.current_task():
            self._read_task.cancel()

    async def close(self) -> None:
        """Close the connection; requests in flight fail with NetworkExceptionError."""
        self._fail(NetworkExceptionError("connection closed by the client"))
        try:  # asyncio.timeout: a cancel of the closing caller is never lost (see open())
            async with asyncio.timeout(CLOSE_TIMEOUT_MS / 1000):
                await self._writer.wait_closed()
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass
        if self._read_task is not asyncio.current_task():
            # Let the cancelled read loop finish, so no task is left pending if the caller
            # stops its event loop next.
            await asyncio.wait({self._read_task}, timeout=CLOSE_TIMEOUT_MS / 1000)


# --------------------------------------------------------------------------------------------
# Server side.

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
            if not _is_int(value) or value < 1:
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
            if not _is_int(code):
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
