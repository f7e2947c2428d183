"""All partition logs of one broker, spread over its ``log.dirs``.

Each log dir holds one directory per partition replica, ``<topic>-<partition>`` (except
``__cluster_metadata-0``, the controller's Raft journal in combined mode, which is left alone), and a
``.lock`` file held (flock) while a LogManager uses the dir, so two brokers never share one.
A new partition goes to the dir holding the fewest partitions (as Kafka does). Deleting a
partition renames its directory to ``<topic>-<partition>.<random>-delete`` first (one atomic
step: the partition is gone even if the removal is interrupted) and then removes it; leftovers
are removed at the next start.

``run_maintenance(now_ms)`` is the one periodic duty the broker's loop calls: retention,
the flush.ms policy, and the high-watermark and recovery-point checkpoints. It costs what
changed, not what is hosted: each log reports its changes (``Log.on_change``: appends, high
watermark, flushes, configs) into a set, so flushes and checkpoints visit only those logs (a
flush waits in a heap until its flush.ms deadline); retention and producer-id expiry, which
depend on time alone, scan every log once per ``retention_check_interval_ms``.
"""
from __future__ import annotations

import fcntl
import heapq
import itertools
import logging
import os
import re
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping

from raftka.common.errors import ConfigError, InvalidTopicError, KafkaStorageError
from raftka.storage.config import LogConfig
from raftka.storage.log import Log

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
DELETE_SUFFIX = "-delete"
# The controller's Raft journal lives in <log.dirs[0]>/__cluster_metadata-0 in combined mode:
# never a partition log (Kafka's LogManager skips it the same way).
METADATA_LOG_TOPIC = "__cluster_metadata"
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Threads opening one log dir's partition logs at start (num.recovery.threads.per.data.dir;
# Kafka's default is 1, but here opening a log mostly waits on the disk).
RECOVERY_THREADS_PER_DATA_DIR_DEFAULT = 8
_PARTITION_DIR = re.compile(r"^(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>\d+)$")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _outcome(fn: Callable[[Any], Any], arg: Any) -> Any:
    """fn(arg), or the exception it raised (so one failed open does not hide the others)."""
    try:
        return fn(arg)
    except Exception as error:
        return error


class LogManager:
    """The logs of one broker (see the module docstring)."""

    def __init__(self, log_dirs: list[str] | str, default_config: Mapping[str, Any] | None = None, *,
                 clock_ms: Callable[[], int] = _now_ms,
                 hw_checkpoint_interval_ms: int = 5000,
                 recovery_point_checkpoint_interval_ms: int = 60000,
                 retention_check_interval_ms: int = 300_000,
                 recovery_threads_per_data_dir: int = RECOVERY_THREADS_PER_DATA_DIR_DEFAULT) -> None:
        if isinstance(log_dirs, str):  # "a,b" as written in a properties file
            log_dirs = [d.strip() for d in log_dirs.split(",") if d.strip()]
        if not log_dirs:
            raise KafkaStorageError("log.dirs is empty: a broker needs at least one log directory")
        self.default_config = dict(default_config or {})
        LogConfig.from_mapping(self.default_config)  # ConfigError naming a bad key, now
        self.clock_ms = clock_ms
        self.hw_checkpoint_interval_ms = hw_checkpoint_interval_ms
        self.recovery_point_checkpoint_interval_ms = recovery_point_checkpoint_interval_ms
        self._last_hw_checkpoint_ms = clock_ms()
        self._last_rp_checkpoint_ms = clock_ms()
        self.retention_check_interval_ms = retention_check_interval_ms
        self._last_retention_check_ms = clock_ms()
        # Logs that reported a change since the last run_maintenance (Log.on_change), and those
        # that may need a checkpoint or a flush (module docstring).
        self._changed: set[Log] = set()
        self._hw_due: set[Log] = set()
        self._rp_due: set[Log] = set()
        self._flush_due: dict[Log, int] = {}  # log -> its flush deadline (ms) in _flush_heap
        self._flush_heap: list[tuple[int, int, Log]] = []  # (deadline, tie-breaker, log)
        self._flush_seq = itertools.count()
        self._lock = threading.RLock()
        self._logs: dict[tuple[str, int], Log] = {}
        # Partitions per log dir, kept up to date so that placing a new partition is O(number
        # of dirs), not a scan of every open log (that made creating N partitions O(N^2)).
        self._dir_counts: dict[Path, int] = {}
        self._lock_fds: list[int] = []
        self.log_dirs = [Path(d) for d in log_dirs]
        self._dir_counts = {d: 0 for d in self.log_dirs}
        if recovery_threads_per_data_dir < 1:
            raise ConfigError("num.recovery.threads.per.data.dir",
                              f"must be at least 1, got {recovery_threads_per_data_dir}")
        try:
            for d in self.log_dirs:
                self._lock_dir(d)
            for d in self.log_dirs:
                self._load_dir(d, recovery_threads_per_data_dir)
        except BaseException:
            self.close()
            raise

    def _lock_dir(self, d: Path) -> None:
        try:
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise KafkaStorageError(f"cannot use log dir {d}: {error.strerror or error}") from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise KafkaStorageError(f"log dir {d} is in use by another process (locked {d / LOCK_FILE})") from None
        self._lock_fds.append(fd)

    def _load_dir(self, d: Path, threads: int) -> None:
        """Open every partition log of ``d`` on ``threads`` threads (Kafka's
        num.recovery.threads.per.data.dir): opening is mostly waiting on the disk (reads, and
        fsyncs after a clean shutdown), which releases the GIL. Logs are added in name order;
        the first failure, in that order, closes the others and is raised."""
        found: list[tuple[tuple[str, int], Path]] = []
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            match = _PARTITION_DIR.match(entry.name)
            if not match or match["topic"] == METADATA_LOG_TOPIC:
                continue
            key = (match["topic"], int(match["partition"]))
            if key in self._logs:
                raise KafkaStorageError(f"partition {key[0]}-{key[1]} is in two log dirs: "
                                        f"{self._logs[key].dir} and {entry.path}")
            found.append((key, Path(entry.path)))

        def open_log(item: tuple[tuple[str, int], Path]) -> Log:
            (topic, partition), path = item
            return Log.open(path, self.default_config, topic=topic, partition=partition, clock_ms=self.clock_ms)

        started = time.monotonic()
        with ThreadPoolExecutor(max(1, min(threads, len(found))), thread_name_prefix="log-recovery") as pool:
            opened = list(pool.map(lambda item: _outcome(open_log, item), found))
        failure = next((o for o in opened if isinstance(o, BaseException)), None)
        if failure is not None:
            for o in opened:
                if isinstance(o, Log):
                    o.close()
            raise failure
        for (key, _), lg in zip(found, opened):
            self._logs[key] = self._watch(lg)
            self._dir_counts[d] += 1
        if found:
            log.info("opened %d partition logs in %s in %.2f s on %d thread(s)", len(found), d,
                     time.monotonic() - started, min(threads, len(found)))

    def _watch(self, lg: Log) -> Log:
        lg.on_change = self._log_changed
        self._changed.add(lg)  # its checkpoints may lag behind what recovery found
        return lg

    def _log_changed(self, lg: Log) -> None:
        self._changed.add(lg)  # set.add: safe from any thread under the GIL

    def _merged(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        merged = dict(self.default_config)
        merged.update(config or {})
        return merged

    # --- partitions ----------------------------------------------------------------------------
    def get_or_create(self, topic: str, partition: int, config: Mapping[str, Any] | None = None) -> Log:
        """The log of ``topic``-``partition``, created in the emptiest log dir if new. ``config``
        (topic overrides of the default config) is applied to an existing log too."""
        if not _TOPIC_NAME.match(topic) or topic in (".", ".."):
            raise InvalidTopicError(f"topic name {topic!r} is not a legal Kafka topic name")
        if topic == METADATA_LOG_TOPIC:
            raise InvalidTopicError(f"{topic} is the controllers' metadata log, not a partition log")
        if not isinstance(partition, int) or partition < 0:
            raise InvalidTopicError(f"partition {partition!r} must be a non-negative integer")
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                if config is not None:
                    existing.update_config(self._merged(config))
                return existing
            target = min(self.log_dirs, key=lambda d: self._dir_counts[d])
            lg = Log.open(target / f"{topic}-{partition}", self._merged(config), topic=topic,
                          partition=partition, clock_ms=self.clock_ms)
            self._logs[(topic, partition)] = self._watch(lg)
            self._dir_counts[target] += 1
            return lg

    def get(self, topic: str, partition: int) -> Log | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def delete(self, topic: str, partition: int) -> bool:
        """Remove the partition's log and its directory; False when there was none."""
        with self._lock:
            lg = self._logs.pop((topic, partition), None)
            if lg is not None and lg.dir.parent in self._dir_counts:
                self._dir_counts[lg.dir.parent] -= 1
        if lg is None:
            return False
        lg.on_change = None
        for pending in (self._changed, self._hw_due, self._rp_due):
            pending.discard(lg)
        self._flush_due.pop(lg, None)  # its heap entry is skipped as stale
        lg.close()
        doomed = lg.dir.with_name(f"{lg.dir.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            os.rename(lg.dir, doomed)
        except OSError as error:
            raise KafkaStorageError(f"could not delete {lg.dir}: {error.strerror or error}",
                                    topic=topic, partition=partition) from error
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    # --- periodic duties -----------------------------------------------------------------------
    def run_maintenance(self, now_ms: int | None = None) -> dict[str, int]:
        """Flushes due by flush.ms, (every few seconds) the HW and recovery-point checkpoints of
        the logs whose offsets moved, and (every ``retention_check_interval_ms``) retention and
        producer-id expiry over every log. A disk error on one log is logged and does not stop
        the others."""
        now = self.clock_ms() if now_ms is None else now_ms
        deleted = flushed = errors = 0
        while self._changed:
            lg = self._changed.pop()  # pop, not a swap: a change reported meanwhile is kept
            self._hw_due.add(lg)
            self._rp_due.add(lg)
            self._schedule_flush(lg)

        def each(logs: Any, duty: Callable[[Log], Any]) -> list[Log]:
            nonlocal errors
            failed = []
            for lg in logs:
                try:
                    duty(lg)
                except KafkaStorageError as error:
                    errors += 1
                    failed.append(lg)
                    log.error("maintenance of %s: %s", lg, error)
            return failed

        if now - self._last_retention_check_ms >= self.retention_check_interval_ms:
            self._last_retention_check_ms = now

            def retention(lg: Log) -> None:
                nonlocal deleted
                deleted += lg.delete_old_segments(now)
                lg.remove_expired_producers(now)
            each(self.logs(), retention)
        due = []
        while self._flush_heap and self._flush_heap[0][0] <= now:
            deadline, _, lg = heapq.heappop(self._flush_heap)
            if self._flush_due.get(lg) == deadline:  # else rescheduled or deleted since: stale
                del self._flush_due[lg]
                due.append(lg)

        def flush(lg: Log) -> None:
            nonlocal flushed
            flushed += lg.maybe_flush(now)
        each(due, flush)
        for lg in due:
            self._schedule_flush(lg)  # still unflushed (flush.ms raised meanwhile): later
        if now - self._last_hw_checkpoint_ms >= self.hw_checkpoint_interval_ms:
            self._last_hw_checkpoint_ms = now
            logs, self._hw_due = self._hw_due, set()
            self._hw_due.update(each(logs, Log.checkpoint_high_watermark))  # writes only a HW that moved
        if now - self._last_rp_checkpoint_ms >= self.recovery_point_checkpoint_interval_ms:
            self._last_rp_checkpoint_ms = now
            logs, self._rp_due = self._rp_due, set()
            self._rp_due.update(each(logs, Log.checkpoint_recovery_point))
        return {"deleted_segments": deleted, "flushed_logs": flushed, "errors": errors}

    def _schedule_flush(self, lg: Log) -> None:
        """Put ``lg`` in the flush heap at its flush.ms deadline, unless nothing waits to be
        flushed or it is already there at an earlier one."""
        deadline = lg.flush_due_ms()
        if deadline is None:
            return
        scheduled = self._flush_due.get(lg)
        if scheduled is not None and scheduled <= deadline:
            return
        self._flush_due[lg] = deadline
        heapq.heappush(self._flush_heap, (deadline, next(self._flush_seq), lg))

    def checkpoint_high_watermarks(self) -> None:
        for lg in self.logs():
            lg.checkpoint_high_watermark()

    def close(self) -> None:
        """Close every log cleanly (flush, checkpoints) and release the log dirs."""
        with self._lock:
            logs = list(self._logs.values())
            self._logs.clear()
            self._dir_counts = {d: 0 for d in self.log_dirs}
        for lg in logs:
            try:
                lg.close()
            except KafkaStorageError as error:
                log.error("closing %s: %s", lg, error)
        for fd in self._lock_fds:
            try:
                os.close(fd)  # releases the flock
            except OSError:
                pass
        self._lock_fds.clear()
