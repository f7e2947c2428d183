"""Log lines for causes that an outsider can repeat at will (a bad frame, a peer with the wrong
secret, a refused connection): one line per cause per interval, with the count of the ones not
written, so a flood of bad input cannot flood the log too.

    rejected = RateLimitedLog(log, interval_s=60.0)
    rejected.warning("bad-frame", "closed %s: %s", peer, reason)

The first occurrence of a cause is written at once; later ones within ``interval_s`` are only
counted, and the first one after the interval is written with "(N more like this in the last
M s)". Causes are kept in a bounded table (``causes_max``): when it is full, the oldest cause is
forgotten (its unwritten count is lost, never the process's memory).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Callable

INTERVAL_S = 60.0
CAUSES_MAX = 1024


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval_s: float = INTERVAL_S, causes_max: int = CAUSES_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.causes_max = causes_max
        self.clock = clock
        self._lock = threading.Lock()  # callers may be the event loop and a library's own thread
        self._causes: OrderedDict[str, list[float | int]] = OrderedDict()  # cause -> [written at, unwritten]

    def log(self, level: int, cause: str, message: str, *args: Any) -> bool:
        """Write ``message % args`` at ``level`` unless ``cause`` was written less than
        ``interval_s`` ago (then count it). True when it was written."""
        now = self.clock()
        with self._lock:
            entry = self._causes.get(cause)
            if entry is not None and now - entry[0] < self.interval_s:
                entry[1] += 1
                return False
            skipped = int(entry[1]) if entry is not None else 0
            since = now - entry[0] if entry is not None else 0.0
            self._causes[cause] = [now, 0]
            self._causes.move_to_end(cause)
            while len(self._causes) > self.causes_max:
                self._causes.popitem(last=False)
        if skipped:
            message += " (%d more like this in the last %.0f s)"
            args = (*args, skipped, since)
        self.logger.log(level, message, *args)
        return True

    def warning(self, cause: str, message: str, *args: Any) -> bool:
        return self.log(logging.WARNING, cause, message, *args)

    def error(self, cause: str, message: str, *args: Any) -> bool:
        return self.log(logging.ERROR, cause, message, *args)
