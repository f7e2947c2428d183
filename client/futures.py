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

from client.errors import KafkaTimeoutError

log = logging.getLogger(__name__)
T = TypeVar("T")
_PENDING = object()


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
        self._add(lambda f: _safely(call, f._value) if f._error is None else None)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "Future[T]":
        """Call ``fn(*args, exception, **kwargs)`` on failure."""
        call = functools.partial(fn, *args, **kwargs)
        self._add(lambda f: _safely(call, f._error) if f._error is not None else None)
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


class FutureRecordMetadata(Future["RecordMetadata"]):  # noqa: F821
    """What ``Producer.send`` returns; ``get()`` gives ``RecordMetadata``."""

    __slots__ = ()
