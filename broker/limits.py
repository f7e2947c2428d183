"""Bounds on what a broker holds in memory.

``ByteBudget``: produce payloads in flight (appended, waiting for acks=all, or waiting to be
appended) take bytes from ``queued.max.request.bytes``. A request that does not fit waits, in
strict arrival order (a later request never overtakes an earlier one, so appends stay in
arrival order); while it waits its connection's in-flight requests pile up until the transport
stops reading that socket: backpressure instead of unbounded memory. A request larger than the
whole budget runs alone once everything else has drained.
"""
from __future__ import annotations

import asyncio
import collections


class ByteBudget:
    """Bytes taken and given back, with FIFO waiters (see the module docstring)."""
    def __init__(self, max_bytes: int) -> None:
        assert max_bytes > 0
        self.max_bytes = max_bytes
        self.used = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    def _fits(self, size: int) -> bool:
        return self.used + size <= self.max_bytes or self.used == 0

    def try_acquire(self, size: int) -> bool:
        """Take ``size`` bytes now if they fit and nobody waits before us (no await)."""
        if not self._waiters and self._fits(size):
            self.used += size
            return True
        return False

    async def acquire(self, size: int) -> None:
        """Take ``size`` bytes, waiting behind every earlier waiter."""
        if self.try_acquire(size):
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((size, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(size)  # granted just as we were cancelled
            else:
                self._waiters.remove((size, future))
                self._wake()
            raise

    def release(self, size: int) -> None:
        """Give ``size`` bytes back and wake waiters that now fit, in order."""
        self.used -= size
        assert self.used >= 0
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            size, future = self._waiters.popleft()
            if future.done():
                continue
            self.used += size
            future.set_result(None)

    @property
    def waiting(self) -> int:
        """Requests waiting for bytes now."""
        return len(self._waiters)
