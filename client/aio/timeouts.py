"""Bounded waits that never lose a cancellation.

On Python 3.11, ``asyncio.wait_for`` loses a ``Task.cancel()`` that arrives in the event-loop turn
in which the awaited thing completes: it returns that result (or raises that exception, e.g. a
refused connection) instead of ``CancelledError``. A retry loop inside the cancelled task then
carries on as if nothing happened: ``close()`` cancelled it and it kept running (seen as
``Producer.close`` waiting on its InitProducerId task, which retried against dead brokers).

``asyncio.timeout`` (3.11+) counts cancellations (``Task.cancelling``/``uncancel``) and so tells
its own timeout from a cancel by someone else; Python 3.12's ``wait_for`` is built on it. The
client uses :func:`wait_for` below instead of ``asyncio.wait_for``.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Iterable, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


async def wait_for(aw: Awaitable[T], timeout_s: float | None) -> T:
    """Await ``aw`` for at most ``timeout_s`` seconds (None: no limit), then raise TimeoutError
    (``asyncio.TimeoutError`` is the same class). A cancellation of the calling task always
    propagates as CancelledError, even when ``aw`` completes in the same loop turn."""
    if timeout_s is None:
        return await aw
    async with asyncio.timeout(timeout_s):
        return await aw


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any] | None], timeout_s: float) -> set[asyncio.Future[Any]]:
    """Cancel ``tasks`` (None entries skipped) and wait up to ``timeout_s`` for them to finish:
    a close() must return even if one is slow to unwind. Exceptions of finished tasks are
    retrieved (asyncio would log them as never retrieved). Returns the tasks still running."""
    pending = {t for t in tasks if t is not None}
    for task in pending:
        task.cancel()
    if not pending:
        return set()
    done, still = await asyncio.wait(pending, timeout=timeout_s)
    for task in done:
        if not task.cancelled():
            task.exception()
    if still:
        log.warning("%d task(s) still running %.1f s after they were cancelled: %s", len(still),
                    timeout_s, ", ".join(sorted(_name(t) for t in still)))
    return still


def _name(task: asyncio.Future[Any]) -> str:
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    return getattr(coro, "__qualname__", None) or repr(task)
