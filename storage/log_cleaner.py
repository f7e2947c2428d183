"""The broker's log cleaner threads (Kafka's LogCleaner): compaction in the background.

storage/cleaner.py cleans one log; this module decides when and runs it. Each of
``log.cleaner.threads`` threads loops: take the filthiest compacted log no other thread holds
(``Cleaner.filthiest``: one past max.compaction.lag.ms first, else the highest dirty ratio at or
above its min.cleanable.dirty.ratio), clean it, and when none is due wait
``log.cleaner.backoff.ms``. The logs come from the LogManager, which also tells the cleaner of
truncations (``truncated``: the first dirty offset may not stay above the new end) and deletions
(``forget``).

Bounds: the offset maps of all threads share ``log.cleaner.dedupe.buffer.size`` (each thread
gets its share, as in Kafka); reads and writes of all threads together stay under
``log.cleaner.io.max.bytes.per.second`` (``Throttler``); a thread that meets an error backs off
``log.cleaner.backoff.ms`` before it tries that log again, so a broken log cannot make it spin.

Races with the broker's own work are settled by the log: a cleaning reads a snapshot of the
segments and ``Log.replace_segments`` refuses the swap (CleaningAbortedError) when retention,
truncation or deletion changed them meanwhile; the cleaned files are then dropped and the next
pass starts over. Nothing the broker does waits for the cleaner, except the swap itself (under
the log's lock, a few renames and two directory fsyncs).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from raftka.common.errors import ConfigError
from raftka.storage.cleaner import (
    DEDUPE_BUFFER_BYTES_DEFAULT,
    DEDUPE_BUFFER_LOAD_FACTOR_DEFAULT,
    IO_BUFFER_BYTES_DEFAULT,
    Cleaner,
    CleanerStats,
    CleaningAbortedError,
)
from raftka.storage.log import Log

logger = logging.getLogger(__name__)

BACKOFF_MS_DEFAULT = 15_000  # Kafka's log.cleaner.backoff.ms
THREADS_MAX = 16
UNLIMITED_BYTES_PER_SECOND = 1e300  # Kafka's default for log.cleaner.io.max.bytes.per.second: Double.MAX_VALUE
FAILED_LOG_BACKOFF_ROUNDS = 4  # a log whose cleaning failed sits out this many backoffs
# storage/cleaner.py's step names outside Log.replace_segments: where a stop may cut a cleaning.
_ABORTABLE_STEPS = ("create ", "copied ", "fsync ", "write ")


@dataclass(frozen=True)
class LogCleanerConfig:
    """The broker's ``log.cleaner.*`` keys (common/server_config.py parses them), Kafka's
    names and defaults."""

    enable: bool = True
    threads: int = 1
    backoff_ms: int = BACKOFF_MS_DEFAULT
    dedupe_buffer_size: int = DEDUPE_BUFFER_BYTES_DEFAULT
    io_buffer_size: int = IO_BUFFER_BYTES_DEFAULT
    io_buffer_load_factor: float = DEDUPE_BUFFER_LOAD_FACTOR_DEFAULT
    io_max_bytes_per_second: float = float("inf")

    def check(self) -> None:
        if not 1 <= self.threads <= THREADS_MAX:
            raise ConfigError("log.cleaner.threads", f"must be 1 to {THREADS_MAX}, got {self.threads}")
        if self.backoff_ms < 0:
            raise ConfigError("log.cleaner.backoff.ms", f"must be at least 0, got {self.backoff_ms}")
        if not 0 < self.io_buffer_load_factor <= 1:
            raise ConfigError("log.cleaner.io.buffer.load.factor",
                              f"must be in (0, 1], got {self.io_buffer_load_factor}")
        if not self.io_max_bytes_per_second > 0:
            raise ConfigError("log.cleaner.io.max.bytes.per.second",
                              f"must be positive, got {self.io_max_bytes_per_second}")
        # Each thread's share must hold an offset map entry: Cleaner raises ConfigError otherwise.
        Cleaner(dedupe_buffer_bytes=self.dedupe_buffer_size // self.threads,
                load_factor=self.io_buffer_load_factor, io_buffer_bytes=self.io_buffer_size)


class Throttler:
    """Keeps the bytes passed to ``__call__`` under ``rate`` per second, averaged since the
    first call (Kafka's Throttler): a caller ahead of that pace sleeps, interruptibly (``stop``)."""

    def __init__(self, rate: float, stop: threading.Event, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.stop = stop
        self.clock = clock
        self._lock = threading.Lock()
        self._start: float | None = None
        self._bytes = 0
        self.slept_s = 0.0

    def __call__(self, n: int) -> None:
        if self.rate >= UNLIMITED_BYTES_PER_SECOND:
            return
        with self._lock:
            now = self.clock()
            if self._start is None:
                self._start = now
            self._bytes += n
            due = self._start + self._bytes / self.rate
        delay = due - now
        if delay > 0.001:
            self.slept_s += delay
            self.stop.wait(delay)


class LogCleaner:
    """``config.threads`` threads compacting the logs ``logs()`` returns (module docstring)."""

    def __init__(self, config: LogCleanerConfig, logs: Callable[[], list[Log]],
                 clock_ms: Callable[[], int]) -> None:
        self.config = config
        self._logs = logs
        self._clock_ms = clock_ms
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._woken = False
        self.throttler = Throttler(config.io_max_bytes_per_second, self._stop)
        share = config.dedupe_buffer_size // config.threads
        # One Cleaner (and so one set of checkpoint files per log dir) shared by the threads:
        # their checkpoint writes go through its locks.
        self.cleaner = Cleaner(dedupe_buffer_bytes=share, load_factor=config.io_buffer_load_factor,
                               io_buffer_bytes=config.io_buffer_size, throttle=self.throttler)
        self._lock = threading.Lock()
        self._in_progress: set[Log] = set()
        self._sit_out: dict[Log, int] = {}  # a log whose cleaning failed: backoffs left
        self._aborting: set[Log] = set()  # deleted while being cleaned: stop at the next step
        self._threads: list[threading.Thread] = []
        # What the threads did, for tests and /metrics.
        self.cleanings = 0
        self.aborted = 0
        self.failures = 0
        self.last_stats: CleanerStats | None = None

    def start(self) -> None:
        for i in range(self.config.threads):
            thread = threading.Thread(target=self._run, name=f"log-cleaner-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the threads to stop and wait up to ``timeout_s`` (a cleaning in progress finishes
        its current group: a swap is never left half done by a stop)."""
        self._stop.set()
        self.wake()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]
        if self._threads:
            logger.warning("%d log cleaner thread(s) still cleaning after %.1f s", len(self._threads), timeout_s)

    def wake(self) -> None:
        """Look for work now instead of at the end of the backoff (a config changed; tests)."""
        with self._wake:
            self._woken = True
            self._wake.notify_all()

    # --- the LogManager's notices -------------------------------------------------------------
    def truncated(self, lg: Log, end_offset: int) -> None:
        """``lg`` was truncated to ``end_offset`` (Log.on_truncate, under its lock)."""
        try:
            self.cleaner.truncate_checkpoint(lg, end_offset)
        except Exception as error:  # the first dirty offset is clamped to the log at each use anyway
            logger.warning("%s: could not lower the cleaner checkpoint to %d: %s", lg, end_offset, error)

    def forget(self, lg: Log) -> None:
        """``lg`` is being deleted: a cleaning of it in progress stops at its next step (nothing
        waits for it: its files go with the directory), and its checkpoint entry goes."""
        with self._lock:
            self._sit_out.pop(lg, None)
            if lg in self._in_progress:
                self._aborting.add(lg)
        try:
            self.cleaner.forget(lg)
        except Exception as error:
            logger.warning("%s: could not drop its cleaner checkpoint entry: %s", lg, error)

    # --- the threads --------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_once()
            except Exception:  # a bug: logged, never the end of compaction on this broker
                logger.exception("log cleaner pass failed")
                cleaned = False
            if not cleaned:
                with self._wake:
                    if not self._woken and not self._stop.is_set():
                        self._wake.wait(self.config.backoff_ms / 1000)
                    self._woken = False
                with self._lock:
                    for lg in list(self._sit_out):
                        self._sit_out[lg] -= 1
                        if self._sit_out[lg] <= 0:
                            del self._sit_out[lg]

    def clean_once(self) -> bool:
        """Clean the filthiest log that is due, if any; True when one was cleaned (or tried)."""
        now_ms = self._clock_ms()
        with self._lock:
            # Only compacted logs: a snapshot of each of 10,000 delete-policy logs every backoff
            # would cost the broker's other threads the GIL for nothing.
            candidates = [lg for lg in self._logs() if lg.config.compact
                          and lg not in self._in_progress and lg not in self._sit_out]
        found = self.cleaner.filthiest(candidates, now_ms)
        if found is None:
            return False
        lg = found.log
        with self._lock:
            if lg in self._in_progress:
                return True  # another thread took it meanwhile
            self._in_progress.add(lg)
        def step(name: str) -> None:
            # Only between the cleaner's own steps: one raised inside the swap (renames,
            # deletes, directory fsyncs) would take the log offline.
            if (lg in self._aborting or self._stop.is_set()) and name.startswith(_ABORTABLE_STEPS) \
                    and not name.startswith("fsync the directory"):
                raise CleaningAbortedError(f"{lg}: stopped before {name!r}")

        try:
            stats = self.cleaner.clean(lg, now_ms, fault=step)
            self.cleanings += 1
            self.last_stats = stats
        except CleaningAbortedError as error:
            self.aborted += 1
            logger.info("%s: cleaning aborted: %s", lg, error)
        except Exception as error:
            self.failures += 1
            with self._lock:
                self._sit_out[lg] = FAILED_LOG_BACKOFF_ROUNDS
            if lg.is_usable:
                logger.warning("%s: cleaning failed (trying again after %d backoffs): %s", lg,
                               FAILED_LOG_BACKOFF_ROUNDS, error)
            else:  # deleted, closed or offline meanwhile
                logger.info("%s: cleaning stopped: %s", lg, error)
        finally:
            with self._lock:
                self._in_progress.discard(lg)
                self._aborting.discard(lg)
        return True


__all__ = ["LogCleaner", "LogCleanerConfig", "Throttler"]
