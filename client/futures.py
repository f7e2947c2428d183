"""A thread-safe future with kafka-python's surface: ``get(timeout)``, ``add_callback``,
``add_errback``, ``succeeded()``, ``failed()``, ``is_done``, ``value``, ``exception``."""
from __future__ import annotations

import concurrent.futures
import functools
import logging
from typing import Any, Callable, Generic, TypeVar

from client.errors import KafkaTimeoutError

log = logging.getLogger(__name__)
T = TypeVar("T")


class Future(Generic[T]):
    """Completed once, from any thread. Callbacks run on the thread that completes it (the
    client's I/O thread) or at once when added after completion; they must not block."""

    def __init__(self) -> None:
        self._future: concurrent.futures.Future[T] = concurrent.futures.Future()

    # -- completion (client side) --
    def success(self, value: T) -> "Future[T]":
        if not self._future.done():
            self._future.set_result(value)
        return self

    def failure(self, error: BaseException) -> "Future[T]":
        if not self._future.done():
            self._future.set_exception(error)
        return self

    # -- kafka-python's API --
    @property
    def is_done(self) -> bool:
        return self._future.done()

    def succeeded(self) -> bool:
        return self._future.done() and self._future.exception() is None

    def failed(self) -> bool:
        return self._future.done() and self._future.exception() is not None

    @property
    def value(self) -> T | None:
        return self._future.result() if self.succeeded() else None

    @property
    def exception(self) -> BaseException | None:
        return self._future.exception() if self._future.done() else None

    def get(self, timeout: float | None = None) -> T:
        """The value, or raise the error; ``KafkaTimeoutError`` after ``timeout`` seconds."""
        try:
            return self._future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise KafkaTimeoutError(f"no result within {timeout} s") from None

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "Future[T]":
        """Call ``fn(*args, value, **kwargs)`` on success."""
        call = functools.partial(fn, *args, **kwargs)

        def done(f: concurrent.futures.Future[T]) -> None:
            if f.exception() is None:
                _safely(call, f.result())
        self._future.add_done_callback(done)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "Future[T]":
        """Call ``fn(*args, exception, **kwargs)`` on failure."""
        call = functools.partial(fn, *args, **kwargs)

        def done(f: concurrent.futures.Future[T]) -> None:
            error = f.exception()
            if error is not None:
                _safely(call, error)
        self._future.add_done_callback(done)
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
