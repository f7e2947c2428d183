"""A thread-safe future with kafka-python's surface: ``get(timeout)``, ``add_callback``,
``add_errback``, ``succeeded()``, ``failed()``, ``is_done``, ``value``, ``exception``.

Light on purpose (one lock, an Event only when someone blocks in ``get``): the producer makes
one per record.
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Callable, Generic, TypeVar

from raftka.client.errors import KafkaTimeoutError
from raftka.client.structs import RecordMetadata


log = logging.getLogger(__name__)
T = TypeVar("T")
_PENDING = object()
_new_tuple = tuple.__new__  # builds a NamedTuple without its Python-level __new__


class Future(Generic[T]):
    """Completed once, from any thread. Callbacks run on the thread that completes it (the
    client's I/O thread) or at once when added after completion; they must not block."""

    __slots__ = ("_value", "_error", "_lock", "_event", "_callbacks")

    def __init__(self) -> None:
        self._value: Any = _PENDING
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[["Future[T]"], None]] | None = None

    # -- completion (client side) --
    def _complete(self, value: Any, error: BaseException | None) -> "Future[T]":
        with self._lock:
            if self._value is not _PENDING or self._error is not None:
                return self
            self._value, self._error = value, error
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks or ():
            callback(self)
        return self

    def success(self, value: T) -> "Future[T]":
        """Complete with ``value`` (ignored when already complete)."""
        return self._complete(value, None)

    def failure(self, error: BaseException) -> "Future[T]":
        """Complete with ``error`` (ignored when already complete)."""
        return self._complete(None, error)

    # -- kafka-python's API --
    @property
    def is_done(self) -> bool:
        """True once completed either way."""
        return self._value is not _PENDING or self._error is not None

    def succeeded(self) -> bool:
        """True once completed with a value."""
        return self._value is not _PENDING and self._error is None

    def failed(self) -> bool:
        """True once completed with an error."""
        return self._error is not None

    @property
    def value(self) -> T | None:
        """The value once succeeded, else None."""
        return self._value if self.succeeded() else None

    @property
    def exception(self) -> BaseException | None:
        """The error once failed, else None."""
        return self._error

    def get(self, timeout: float | None = None) -> T:
        """The value, or raise the error; ``KafkaTimeoutError`` after ``timeout`` seconds."""
        if not self.is_done:
            with self._lock:
                if self._event is None:
                    self._event = threading.Event()
                event = self._event
            if not self.is_done and not event.wait(timeout):
                raise KafkaTimeoutError(f"no result within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value

    def _add(self, callback: Callable[["Future[T]"], None]) -> None:
        with self._lock:
            if not self.is_done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback(self)

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "Future[T]":
        """Call ``fn(*args, value, **kwargs)`` on success."""
        call = functools.partial(fn, *args, **kwargs)
        self._add(lambda f: _safely(call, f.value) if f.exception is None else None)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "Future[T]":
        """Call ``fn(*args, exception, **kwargs)`` on failure."""
        call = functools.partial(fn, *args, **kwargs)
        self._add(lambda f: _safely(call, f.exception) if f.exception is not None else None)
        return self

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "Future[T]":
        """Call ``fn`` with the value or the exception, whichever comes."""
        self.add_callback(fn, *args, **kwargs)
        self.add_errback(fn, *args, **kwargs)
        return self


def _safely(call: Callable[[Any], Any], arg: Any) -> None:
    # A user callback that raises must not break the client's I/O thread.
    try:
        call(arg)
    except Exception:
        log.exception("user callback raised")


class ProduceRequestResult:
    """The outcome of one producer batch, shared by the futures of its records: completed once
    (from the I/O thread) for the whole batch, so per record there is no lock, event or callback
    list unless someone asks for one (Kafka's ProduceRequestResult)."""

    __slots__ = ("topic", "partition", "base_offset", "log_append_time_ms", "log_start_offset",
                 "error", "done", "_lock", "_event", "_waiting")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.log_start_offset = -1
        self.error: BaseException | None = None
        self.done = False
        self._lock = threading.Lock()
        self._event: threading.Event | None = None
        # Per record with callbacks, in the order added: (future, fn, args, kwargs, on_error).
        # ``args`` None: ``fn(future)`` either way (a done-callback); else kafka-python's
        # ``fn(*args, metadata_or_error, **kwargs)``, on success (on_error False) or failure.
        self._waiting: list[tuple[Any, Callable[..., Any], Any, Any, bool]] | None = None

    def complete(self, base_offset: int, log_append_time_ms: int, log_start_offset: int,
                 error: BaseException | None) -> None:
        """Resolve every record of the batch; callbacks run after, on this thread."""
        with self._lock:
            if self.done:
                return
            self.base_offset, self.log_append_time_ms = base_offset, log_append_time_ms
            self.log_start_offset, self.error = log_start_offset, error
            self.done = True
            waiting, self._waiting = self._waiting, None
            event = self._event
        if event is not None:
            event.set()
        for future, fn, args, kwargs, on_error in waiting or ():
            if args is None:
                fn(future)
            elif on_error is (error is not None):
                try:  # a user callback that raises must not break the client's I/O thread
                    if error is None:
                        fn(*args, future._metadata(), **kwargs)
                    else:
                        fn(*args, error, **kwargs)
                except Exception:
                    log.exception("user callback raised")

    def wait(self, timeout: float | None) -> bool:
        """Block until done (up to ``timeout`` seconds); True when done."""
        if self.done:
            return True
        with self._lock:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return self.done or event.wait(timeout)



class FutureRecordMetadata(Future["RecordMetadata"]):  # noqa: F821
    """What ``Producer.send`` returns; ``get()`` gives ``RecordMetadata``.

    Resolved by its batch (a shared :class:`ProduceRequestResult`) rather than one by one, so a
    record costs one small object: its RecordMetadata is built when asked for, its callbacks
    are kept by the batch. Without a batch (``FutureRecordMetadata()``) it is a plain Future."""

    __slots__ = ("_result", "_index", "_timestamp_ms", "_key_size", "_value_size", "_header_size")

    def __init__(self, result: ProduceRequestResult | None = None, index: int = 0,
                 timestamp_ms: int = -1, key_size: int = -1, value_size: int = -1,
                 header_size: int = 0) -> None:
        # The inherited slots (_value, _error, _lock, ...) stay unset for a batch's record.
        self._result = result
        if result is None:
            Future.__init__(self)
            return
        self._index = index
        self._timestamp_ms = timestamp_ms
        self._key_size = key_size
        self._value_size = value_size
        self._header_size = header_size

    def _metadata(self) -> "RecordMetadata":
        result = self._result
        ts = result.log_append_time_ms
        base = result.base_offset
        return _new_tuple(RecordMetadata, (
            result.topic, result.partition, base + self._index if base >= 0 else -1,
            ts if ts is not None and ts != -1 else self._timestamp_ms, result.log_start_offset,
            self._key_size, self._value_size, self._header_size))

    def _complete(self, value: Any, error: BaseException | None) -> "Future[RecordMetadata]":
        if self._result is not None:
            raise RuntimeError("this record's future is completed by its batch")
        return Future._complete(self, value, error)

    @property
    def is_done(self) -> bool:
        """True once completed either way."""
        result = self._result
        return result.done if result is not None else Future.is_done.fget(self)  # type: ignore[attr-defined]

    def succeeded(self) -> bool:
        """True once completed with a value."""
        result = self._result
        if result is None:
            return Future.succeeded(self)
        return result.done and result.error is None

    def failed(self) -> bool:
        """True once completed with an error."""
        result = self._result
        if result is None:
            return Future.failed(self)
        return result.done and result.error is not None

    @property
    def value(self) -> "RecordMetadata | None":
        """The value once succeeded, else None."""
        if self._result is None:
            return Future.value.fget(self)  # type: ignore[attr-defined]
        return self._metadata() if self.succeeded() else None

    @property
    def exception(self) -> BaseException | None:
        """The error once failed, else None."""
        result = self._result
        if result is None:
            return self._error
        return result.error if result.done else None

    def get(self, timeout: float | None = None) -> "RecordMetadata":
        """The value, or raise the error; ``KafkaTimeoutError`` after ``timeout`` seconds."""
        result = self._result
        if result is None:
            return Future.get(self, timeout)
        if not result.wait(timeout):
            raise KafkaTimeoutError(f"no result within {timeout} s")
        if result.error is not None:
            raise result.error
        return self._metadata()

    def _add(self, callback: Callable[["Future[RecordMetadata]"], None]) -> None:
        result = self._result
        if result is None:
            return Future._add(self, callback)
        with result._lock:  # the batch's completion takes the callbacks under the same lock
            if not result.done:
                if result._waiting is None:
                    result._waiting = []
                result._waiting.append((self, callback, None, None, False))
                return
        callback(self)

    def _add_call(self, fn: Callable[..., Any], args: tuple, kwargs: dict, on_error: bool) -> "FutureRecordMetadata":
        # One entry in the batch's list, called straight from its completion: no partial, no
        # closure, no RecordMetadata for a record whose outcome the callback does not take.
        result = self._result
        with result._lock:
            if not result.done:
                if result._waiting is None:
                    result._waiting = []
                result._waiting.append((self, fn, args, kwargs, on_error))
                return self
        if on_error is (result.error is not None):
            _safely(functools.partial(fn, *args, **kwargs),
                    result.error if on_error else self._metadata())
        return self

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """Call ``fn(*args, record_metadata, **kwargs)`` on success (on the I/O thread)."""
        if self._result is None:
            return Future.add_callback(self, fn, *args, **kwargs)  # type: ignore[return-value]
        return self._add_call(fn, args, kwargs, False)

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """Call ``fn(*args, exception, **kwargs)`` on failure (on the I/O thread)."""
        if self._result is None:
            return Future.add_errback(self, fn, *args, **kwargs)  # type: ignore[return-value]
        return self._add_call(fn, args, kwargs, True)
