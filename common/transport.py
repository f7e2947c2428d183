"""The wire transport every Raftka process speaks: Kafka's, framed and pipelined on one connection.

Frames are Kafka's (docs/protocol.md)::

    request  = length request_header body     header v1 (non-flexible versions) or v2 (flexible)
    response = length response_header body    header v0 (correlation id) or v1 (+ tagged fields)

``length`` is a 4-byte big-endian count of the bytes after it. Each API's body is encoded and
decoded from its declaration (common/messages/, compiled by common/codec.py); a Kafka answer has
no frame-level error code, its errors stand in its body's ``error_code`` fields.

:class:`Connection` (client side) pipelines requests on one TCP connection: in-flight requests
wait in a FIFO keyed by correlation id, and since a server answers in arrival order, every
response must belong to the oldest request in flight; any other correlation id is a protocol
error that closes the connection. A lost connection fails every request in flight with
NetworkExceptionError (retriable); a request that outlives its ``timeout_ms`` fails alone with
RequestTimedOutError (its slot stays taken until its late answer arrives and is dropped).

``call`` / ``call_sync``: one request on a fresh connection (tools, tests). The server side is
server.py.

Pure asyncio; imports only the shared layer (``raftka.common``).
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import ssl as ssl_module
import struct
import time
from typing import Any, Final, Mapping

from raftka.common import errors
from raftka.common.api import api_name
from raftka.common.codec import (CodecError, decode_response_header, decoder, encoder_into,
                                 request_header_version, response_header_version)
from raftka.common.errors import FrameError, NetworkExceptionError, RaftkaError, RequestTimedOutError
from raftka.common.messages import KAFKA_API
from raftka.common.sasl import SaslClientSettings, authenticate
from raftka.common.schema import Message
from raftka.common.security import handshake_failure

log = logging.getLogger(__name__)

LENGTH: Final = struct.Struct(">I")
LENGTH_BYTES: Final = LENGTH.size
CORRELATION_ID_MAX: Final = 2**31 - 1  # Kafka's correlation id is an int32; we wrap before it

# Kafka's names and defaults where Kafka has the limit.
SOCKET_REQUEST_MAX_BYTES_DEFAULT: Final = 104_857_600  # socket.request.max.bytes
CONNECTIONS_MAX_IDLE_MS_DEFAULT: Final = 600_000  # connections.max.idle.ms
MAX_CONNECTIONS_DEFAULT: Final = 1000  # max.connections (Kafka: unbounded; we bound it)
# max.connections.per.ip: Kafka's default (no limit of its own). Not bounded lower here: many
# clients share one address (NAT, a proxy, every client of a one-machine cluster on 127.0.0.1),
# and max.connections is not the way one address locks the others out anyway, because the server
# closes the oldest connection that never completed a request to make room (see server.py).
MAX_CONNECTIONS_PER_IP_DEFAULT: Final = 2**31 - 1
MAX_IN_FLIGHT_PER_CONNECTION_DEFAULT: Final = 100  # server: requests of one connection in flight
MAX_BUFFERED_BYTES_PER_CONNECTION_DEFAULT: Final = 8 * 1024 * 1024  # server: unsent answers
# queued.max.request.bytes (Kafka: unbounded): request bytes a server holds, partial frames
# included; at most socket.request.max.bytes, so a frame of the largest size can always be read.
QUEUED_MAX_REQUEST_BYTES_DEFAULT: Final = 100 * 1024 * 1024
REQUEST_FRAME_TIMEOUT_MS_DEFAULT: Final = 30_000  # server (Raftka): a started frame must end within it
CONNECTIONS_FIRST_BYTE_TIMEOUT_MS_DEFAULT: Final = 10_000  # server (Raftka): a new connection's first byte
MAX_IN_FLIGHT_REQUESTS_DEFAULT: Final = 5  # max.in.flight.requests.per.connection
REQUEST_TIMEOUT_MS_DEFAULT: Final = 30_000  # request.timeout.ms
CONNECT_TIMEOUT_MS_DEFAULT: Final = 10_000  # socket.connection.setup.timeout.ms
HANDLER_TIMEOUT_MS_DEFAULT: Final = 300_000  # server: a safety net, far above any request's own timeout
CLOSE_TIMEOUT_MS: Final = 2_000  # how long close() waits for sockets and tasks to finish
STREAM_LIMIT_BYTES: Final = 1 << 20  # asyncio StreamReader buffer before it pauses the socket


# --------------------------------------------------------------------------------------------
# Frames: pure functions, no I/O except read_frame.

def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    __slots__ = ("correlation_id", "api_key", "future", "timer", "version")

    def __init__(self, correlation_id: int, api_key: int, future: asyncio.Future,
                 timer: asyncio.TimerHandle | None, version: int) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.future = future
        self.timer = timer  # submit()'s timeout; cancelled when the answer comes
        self.version = version  # the version it was sent at: its answer is decoded at it


_CORRELATION_ID = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">Ihhih")  # frame length, api key, version, correlation id, client_id's length
Declarations = Mapping[int, "tuple[Message, Message]"]  # api key -> (request, response)
Plan = tuple[int, Any, int, Any]  # request header version, body encoder, response header version, body decoder
Plans = dict[tuple[int, int], Plan]
# (api key, version) -> its Plan for common/messages/ (KAFKA_API): one per declared pair, built on
# first use (the codec's own lookups cost ~2 us a request). Other declarations (tests) keep their own.
_KAFKA_PLANS: Plans = {}


def _kafka_plan(api_key: int, version: int, api: Declarations = KAFKA_API,
                plans: Plans = _KAFKA_PLANS) -> Plan:
    plan = plans.get((api_key, version))
    if plan is None:
        request, response = _declared(api, api_key)
        if version not in request.versions():
            raise FrameError(f"{api_name(api_key)} v{version} is not declared (versions {request.valid_versions})")
        plan = plans[(api_key, version)] = (
            request_header_version(request, version), encoder_into(request, version),
            response_header_version(response, version), decoder(response, version))
    return plan


def _declared(api: Declarations, api_key: int) -> "tuple[Message, Message]":
    messages = api.get(api_key)
    if messages is None:
        raise FrameError(f"{api_name(api_key)} (api key {api_key}) has no declaration in common/messages/")
    return messages


def newest_version(api_key: int, api: Declarations = KAFKA_API) -> int:
    """The newest version of ``api_key`` declared in ``api``; FrameError for an undeclared key."""
    return _declared(api, api_key)[0].versions()[-1]


def _kafka_request_frame(request_header: int, api_key: int, version: int, correlation_id: int,
                         client_id: str | None, encoded_body: bytes) -> bytes:
    """Length, request header v1 or v2 (by hand: the same for every API), body."""
    client = b"" if client_id is None else client_id.encode()
    flexible = request_header == 2
    length = _REQUEST_HEADER.size - LENGTH_BYTES + len(client) + flexible + len(encoded_body)
    head = _REQUEST_HEADER.pack(length, api_key, version, correlation_id, -1 if client_id is None else len(client))
    return b"".join((head, client, b"\x00" if flexible else b"", encoded_body))


def decode_kafka_response(payload: bytes, api_key: int, version: int, api: Declarations = KAFKA_API,
                          plans: Plans = _KAFKA_PLANS) -> tuple[int, Any]:
    """(correlation_id, body) of a Kafka answer to ``api_key`` at ``version``; FrameError when
    the bytes are not what that answer declares."""
    _, _, response_header, decode = _kafka_plan(api_key, version, api, plans)
    try:
        (correlation_id,) = _CORRELATION_ID.unpack_from(payload)
        start = 4
        if response_header == 1:  # header v1: a tagged-field section after the correlation id
            if payload[4:5] == b"\x00":
                start = 5
            else:
                _, start = decode_response_header(payload, 1)
        return correlation_id, decode(memoryview(payload)[start:])
    except (CodecError, struct.error) as error:
        raise FrameError(f"{api_name(api_key)} v{version} answer: {getattr(error, 'message', error)}") from None

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

    Each API goes at the version ``kafka_versions`` lists for it, else at the newest version
    ``kafka_api`` declares (common/messages/, unless a test declares its own); a request may
    name its own ``api_version``. An API without a declaration is a FrameError, raised before
    anything is sent.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, host: str,
                 port: int, client_id: str | None, max_in_flight_requests: int,
                 max_frame_bytes: int, request_timeout_ms: int,
                 kafka_versions: Mapping[int, int] | None = None,
                 kafka_api: Declarations = KAFKA_API) -> None:
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
        # api key -> the version this connection sends it at; an API not listed goes at the
        # newest version declared in ``kafka_api`` (common/messages/ unless a test declares its own).
        self.kafka_versions: dict[int, int] = dict(kafka_versions or {})
        self.kafka_api = kafka_api
        self._plans: Plans = _KAFKA_PLANS if kafka_api is KAFKA_API else {}
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
                   request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
                   kafka_versions: Mapping[int, int] | None = None,
                   kafka_api: Declarations = KAFKA_API,
                   ssl: "ssl_module.SSLContext | None" = None,
                   sasl: SaslClientSettings | None = None) -> "Connection":
        """Connect to ``host:port`` (over TLS with ``ssl``, checking the certificate against
        ``host`` when the context checks host names). RequestTimedOutError after
        ``connect_timeout_ms`` (the TLS handshake included), NetworkExceptionError when the
        connection is refused or fails, SslAuthenticationError when the handshake fails.
        With ``sasl`` (a SASL_PLAINTEXT or SASL_SSL listener) the connection authenticates
        before it is returned (common/sasl.py): SaslAuthenticationFailedError when refused."""
        # asyncio.timeout, not asyncio.wait_for: on Python 3.11 wait_for loses a cancel that lands
        # as the connect completes (see client/aio/timeouts.py); a cancelled caller got a connection.
        try:
            async with asyncio.timeout(connect_timeout_ms / 1000):
                reader, writer = await asyncio.open_connection(
                    host, port, limit=STREAM_LIMIT_BYTES, ssl=ssl, server_hostname=host if ssl is not None else None,
                    ssl_handshake_timeout=connect_timeout_ms / 1000 if ssl is not None else None)
        except asyncio.TimeoutError:
            raise RequestTimedOutError(f"connecting to {host}:{port} took over {connect_timeout_ms} ms") from None
        except ssl_module.SSLError as error:
            raise handshake_failure(error, f"{host}:{port}") from None
        except OSError as error:
            raise NetworkExceptionError(f"cannot connect to {host}:{port}: {_os_error_text(error)}") from None
        connection = cls(reader, writer, host=host, port=port, client_id=client_id,
                         max_in_flight_requests=max_in_flight_requests, max_frame_bytes=max_frame_bytes,
                         request_timeout_ms=request_timeout_ms, kafka_versions=kafka_versions,
                         kafka_api=kafka_api)
        if sasl is not None:
            try:
                await authenticate(connection, sasl, connection.address)
            except BaseException:
                await connection.close()
                raise
        return connection

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

    def _encode_body(self, api_key: int, api_version: int | None, body: Any) -> tuple[int, bytearray]:
        """(the version it goes at, the encoded body): FrameError when it cannot be encoded."""
        if api_version is None:
            api_version = self.kafka_versions.get(api_key)
            if api_version is None:
                api_version = newest_version(api_key, self.kafka_api)
        plan = _kafka_plan(api_key, api_version, self.kafka_api, self._plans)
        try:
            encoded = bytearray()  # kept as is: the frame copies it once
            plan[1](body, encoded)
            return api_version, encoded
        except CodecError as error:
            raise FrameError(f"cannot encode {api_name(api_key)} v{api_version}: {error.message}") from None

    def _frame(self, api_key: int, version: int, correlation_id: int, encoded_body: bytes) -> bytes:
        request_header = self._plans[(api_key, version)][0]
        return _kafka_request_frame(request_header, api_key, version, correlation_id, self.client_id, encoded_body)

    def _raise_closed(self) -> None:
        assert self._close_error is not None
        raise NetworkExceptionError(f"connection to {self.address} is closed: {self._close_error.message}")

    async def request(self, api_key: int, body: Any, api_version: int | None = None, *,
                      timeout_ms: int | None = None,
                      expect_response: bool = True) -> tuple[int, Any]:
        """Send one request at ``api_version`` (default: the connection's version for the API);
        ``(error_code, body)`` of its answer, the code always NONE (Kafka's answers carry their
        errors in the body).

        ``timeout_ms`` (default ``request_timeout_ms``) bounds the whole request: waiting for an
        in-flight slot, writing, and the answer. ``expect_response=False`` (Produce with acks=0)
        returns ``(0, None)`` once the frame is written. Raises NetworkExceptionError when the
        connection is or gets lost, RequestTimedOutError on timeout, FrameError when ``body``
        cannot be encoded.
        """
        if self._close_error is not None:
            self._raise_closed()
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        version, encoded_body = self._encode_body(api_key, api_version, body)
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
                frame = self._frame(api_key, version, correlation_id, encoded_body)
                future: asyncio.Future | None = None
                if expect_response:
                    future = asyncio.get_running_loop().create_future()
                    # From here the read loop owns the slot: it is freed when the answer arrives
                    # (or the connection dies), even if this caller gives up first.
                    self._in_flight.append(_InFlight(correlation_id, api_key, future, None, version))
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

    def submit(self, api_key: int, body: Any, api_version: int | None = None, *,
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
        version, encoded_body = self._encode_body(api_key, api_version, body)
        loop = self._loop
        future = loop.create_future()
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        timer = loop.call_at(loop.time() + timeout_ms / 1000, _time_out, future, api_key,
                             self.address, timeout_ms)
        if self._slots.try_acquire():
            self._write_submitted(api_key, version, encoded_body, future, timer)
        else:
            self._slots.wait_nowait().add_done_callback(functools.partial(
                self._slot_granted, api_key, version, encoded_body, future, timer))
        return future

    def _slot_granted(self, api_key: int, version: int, encoded_body: bytes,
                      future: asyncio.Future, timer: asyncio.TimerHandle, waiter: asyncio.Future) -> None:
        if self._close_error is not None or future.done():  # lost, or timed out while waiting
            timer.cancel()
            self._slots.release()
            if not future.done():
                future.set_exception(NetworkExceptionError(
                    f"connection to {self.address} is closed: {self._close_error.message}"))
            return
        self._write_submitted(api_key, version, encoded_body, future, timer)

    def _write_submitted(self, api_key: int, version: int, encoded_body: bytes,
                         future: asyncio.Future, timer: asyncio.TimerHandle) -> None:
        correlation_id = self._next_correlation_id
        self._next_correlation_id = 0 if correlation_id >= CORRELATION_ID_MAX else correlation_id + 1
        frame = self._frame(api_key, version, correlation_id, encoded_body)
        # From here the read loop owns the slot, as in request().
        self._in_flight.append(_InFlight(correlation_id, api_key, future, timer, version))
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
        if self._writer.transport.is_closing():
            # The peer went away and the read loop has not said so yet. uvloop raises
            # RuntimeError for a write on a closed handle (asyncio's loop drops it): a lost
            # connection either way, failed by the caller like any other.
            raise ConnectionResetError("the connection is closing")
        self._flush_scheduled = True
        asyncio.get_running_loop().call_soon(self._flush)
        self._writer.write(frame)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._outgoing:
            return
        data = b"".join(self._outgoing) if len(self._outgoing) > 1 else self._outgoing[0]
        self._outgoing.clear()
        # Closing (see _send): the frames' requests are in flight and fail with the connection.
        if self._close_error is None and not self._writer.transport.is_closing():
            self._writer.write(data)

    async def _read_loop(self) -> None:
        error: RaftkaError
        try:
            while True:
                payload = await read_frame(self._reader, self.max_frame_bytes)
                if payload is None:
                    error = NetworkExceptionError(f"{self.address} closed the connection")
                    break
                if not self._in_flight:
                    raise FrameError("an answer came with no request in flight")
                oldest = self._in_flight[0]
                correlation_id, body = decode_kafka_response(payload, oldest.api_key, oldest.version,
                                                             self.kafka_api, self._plans)
                if oldest.correlation_id != correlation_id:
                    raise FrameError(f"answer with correlation id {correlation_id}, expected "
                                     f"{oldest.correlation_id} (answers must come in request order)")
                self._in_flight.popleft()
                self._slots.release()
                if oldest.timer is not None:
                    oldest.timer.cancel()
                if not oldest.future.done():  # done: its caller timed out or was cancelled
                    oldest.future.set_result((errors.NONE, body))  # Kafka's errors are in the body
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


async def call(address: str, api_key: int, body: Any, *, api_version: int | None = None,
               timeout_ms: int = 5000, client_id: str = "raftka-tool",
               max_frame_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT) -> tuple[int, Any]:
    """One request on a fresh connection, at ``api_version`` (default: the newest declared);
    (error_code, body), the code always NONE (the answer's errors are in its body).
    ``timeout_ms`` bounds connecting and answering together. Network failures raise typed,
    retriable errors (NetworkExceptionError, RequestTimedOutError)."""
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
    """``call`` for code without an event loop (the CLI, tests, the cluster kit)."""
    return asyncio.run(call(address, api_key, body, **kwargs))
