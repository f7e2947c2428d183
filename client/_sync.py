"""The bridge from the blocking API to the asyncio one: one event-loop thread per client object."""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
import weakref
from typing import Any, Coroutine, Protocol, TypeVar

from raftka.client.errors import KafkaClosedError, KafkaTimeoutError
from raftka.common import event_loop

T = TypeVar("T")
LOOP_START_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


class _Closable(Protocol):
    def close(self) -> Any: ...


# Blocking clients not yet closed. Held weakly: the exit hook keeps nothing alive, and a client
# collected unclosed (its __del__ stops its thread) drops out by itself.
_open_clients: "weakref.WeakSet[_Closable]" = weakref.WeakSet()
_open_clients_lock = threading.Lock()  # guards _open_clients and _exit_hook_registered
_exit_hook_registered = False


def close_at_exit(client: _Closable) -> None:
    """Have ``client.close()`` run at interpreter exit unless the client is closed (or collected)
    first, as kafka-python's clients do: otherwise its event loop dies with tasks pending and
    Python prints "Task was destroyed but it is pending!"."""
    global _exit_hook_registered
    with _open_clients_lock:
        _open_clients.add(client)
        if not _exit_hook_registered:
            atexit.register(_close_open_clients)
            _exit_hook_registered = True


def forget_at_exit(client: _Closable) -> None:
    """``client`` was closed: nothing left to do for it at exit."""
    with _open_clients_lock:
        _open_clients.discard(client)


def _close_open_clients() -> None:
    # atexit runs before daemon threads are frozen, so each client's I/O thread still answers.
    with _open_clients_lock:
        clients = list(_open_clients)
        _open_clients.clear()
    for client in clients:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - at exit a failed close is logged, never raised
            log.warning("closing %s at interpreter exit failed", type(client).__name__, exc_info=True)


class LoopThread:
    """A daemon thread running its own event loop until ``stop()``."""

    def __init__(self, name: str) -> None:
        self.loop = event_loop.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        if not self._started.wait(LOOP_START_TIMEOUT_S):
            raise RuntimeError("client event loop thread did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; a concurrent future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for it; the coroutine is cancelled on timeout."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a blocking client call from its own I/O thread (a callback?) "
                               "would deadlock; use the asyncio client there")
        if self.loop.is_closed() or not self._thread.is_alive():
            coro.close()
            raise KafkaClosedError("the client is closed")
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise KafkaTimeoutError(f"no result within {timeout_s} s") from None

    def call_soon(self, fn: Any, *args: Any) -> None:
        """Call ``fn(*args)`` on the loop thread."""
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the loop and join its thread (up to ``timeout_s``)."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        """True while the loop thread runs."""
        return self._thread.is_alive()
