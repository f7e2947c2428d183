"""All partition logs of one broker, spread over its ``log.dirs``.

Each log dir holds one directory per partition replica, ``<topic>-<partition>`` (except
``__cluster_metadata-0``, the controller's Raft journal in combined mode, which is left alone), and a
``.lock`` file held (flock) while a LogManager uses the dir, so two brokers never share one.
A new partition goes to the dir holding the fewest partitions (as Kafka does). Deleting a
partition renames its directory to ``<topic>-<partition>.<random>-delete`` first (one atomic
step: the partition is gone even if the removal is interrupted) and then removes it; leftovers
are removed at the next start.

Offset checkpoints (Kafka's layout): each log dir holds one file of each kind for all its
partitions, ``replication-offset-checkpoint`` (high watermarks), ``recovery-point-offset-checkpoint``
and ``log-start-offset-checkpoint``, entries ``topic partition offset`` (storage/checkpoint.py).
The manager reads them once at start and hands each log its entries (``Log.open(checkpoints=)``),
then writes them atomically (temp file and rename; the recovery points and log start offsets
fsynced, the high watermarks not: an older one is a safe lower bound) and only when an entry
changed. One file per dir replaced the three files every partition directory had: at 10,000
partitions a high-watermark pass created or wrote up to 10,000 files (~0.5 ms each: seconds of a
broker's event loop), where one file of 10,000 lines takes a few milliseconds. Two writes cannot
wait for a pass and are made at once, when a log asks (``Log.checkpoint_now``): a DeleteRecords'
new log start offset, and a recovery point a truncation lowered below the one on disk. A
deleted partition leaves the files at the next write; one re-created before that write first
has its stale entries written away. Partition directories of an older Raftka still hold their
own three files: the loader reads them where the dir's files have no entry, and they are
deleted once the dir's files cover the partition (at start).

``run_maintenance(now_ms)`` is the one periodic duty the broker's loop calls: retention,
the flush.ms policy, and the checkpoints (high watermarks every
``hw_checkpoint_interval_ms``, recovery points and log start offsets every
``recovery_point_checkpoint_interval_ms``). It costs what changed, not what is hosted: each log
reports its changes (``Log.on_change``: appends, high watermark, flushes, log start, configs)
into a set, so flushes and checkpoint entries visit only those logs (a flush waits in a heap
until its flush.ms deadline); retention and producer-id expiry, which depend on time alone, scan
every log once per ``retention_check_interval_ms``.
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
from typing import Any, Callable, Iterable, Mapping

from raftka.common.errors import ConfigError, InvalidTopicError, KafkaStorageError
from raftka.storage.checkpoint import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    OFFSET_CHECKPOINTS,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    OffsetCheckpointFile,
    TopicPartition,
)
from raftka.storage.config import LogConfig
from raftka.storage.file_handles import resolve_open_files_max, segment_files
from raftka.storage.loader import CheckpointedOffsets
from raftka.storage.log import Log
from raftka.storage.log_cleaner import LogCleaner, LogCleanerConfig

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


# The log's offset each checkpoint of a log dir holds.
_OFFSET_OF: dict[str, Callable[[Log], int]] = {
    HIGH_WATERMARK_CHECKPOINT: lambda lg: lg.high_watermark,
    RECOVERY_POINT_CHECKPOINT: lambda lg: lg.recovery_point,
    LOG_START_OFFSET_CHECKPOINT: lambda lg: lg.log_start_offset,
}


def _now_ms() -> int:
    return int(time.time() * 1000)


class _DirCheckpoint:
    """One offset checkpoint file of a log dir and the entries its next write holds (those of
    every log in the dir, updated by ``note`` and ``forget``); ``dirty`` while they differ from
    the file. ``removed``: partitions forgotten since the last write (the file still lists
    them). ``legacy``: per-partition files of an older Raftka that its next write covers."""

    def __init__(self, path: Path, *, fsync: bool) -> None:
        self.file = OffsetCheckpointFile(path)
        self.fsync = fsync
        self.entries: dict[TopicPartition, int] = {}
        self.dirty = False
        self.removed: set[TopicPartition] = set()
        self.legacy: list[Path] = []

    def note(self, key: TopicPartition, offset: int) -> None:
        if self.entries.get(key) != offset:
            self.entries[key] = offset
            self.dirty = True

    def forget(self, key: TopicPartition) -> None:
        if self.entries.pop(key, None) is not None:
            self.dirty = True
            self.removed.add(key)

    def write(self) -> None:
        """Replace the file when an entry changed, then delete the legacy files it covers.
        OSError when the file cannot be written (it stays dirty: the next pass tries again)."""
        if self.dirty:
            self.file.write(self.entries, fsync=self.fsync)
            self.dirty = False
            self.removed.clear()
        for path in self.legacy:
            path.unlink(missing_ok=True)
        self.legacy.clear()


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
                 recovery_threads_per_data_dir: int = RECOVERY_THREADS_PER_DATA_DIR_DEFAULT,
                 open_files_max: int | None = None,
                 cleaner_config: LogCleanerConfig | None = None) -> None:
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
        # Each log dir's offset checkpoints, by file name. Their own lock: a log's lock may be
        # held when it is taken (Log.checkpoint_now), so nothing under it takes a log's lock.
        self._checkpoints = {d: {name: _DirCheckpoint(d / name, fsync=name != HIGH_WATERMARK_CHECKPOINT)
                                 for name in OFFSET_CHECKPOINTS} for d in self.log_dirs}
        self._checkpoints_of: dict[Log, dict[str, _DirCheckpoint]] = {}  # each hosted log's dir's
        self._checkpoint_lock = threading.Lock()
        # Compaction (log.cleaner.*): started once the logs are open; None with
        # log.cleaner.enable=false (and for tools that open logs without a broker).
        self.cleaner: LogCleaner | None = None
        if recovery_threads_per_data_dir < 1:
            raise ConfigError("num.recovery.threads.per.data.dir",
                              f"must be at least 1, got {recovery_threads_per_data_dir}")
        if open_files_max is not None:  # log.open.files.max: the process-wide segment file cache
            segment_files().set_max(resolve_open_files_max(open_files_max))
        try:
            for d in self.log_dirs:
                self._lock_dir(d)
            for d in self.log_dirs:
                self._load_dir(d, recovery_threads_per_data_dir)
        except BaseException:
            self.close()
            raise
        if cleaner_config is not None and cleaner_config.enable:
            self.cleaner = LogCleaner(cleaner_config, self.logs, clock_ms)
            self.cleaner.start()

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
        checkpoints = self._checkpoints[d]
        on_disk = {name: self._read_checkpoint(state) for name, state in checkpoints.items()}  # None: bad
        found: list[tuple[tuple[str, int], Path]] = []
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            if not entry.is_dir():
                if entry.name.endswith(".tmp") and entry.name[:-4] in OFFSET_CHECKPOINTS:
                    os.unlink(entry.path)  # an interrupted write; the file itself is intact
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
            key, path = item
            offsets = CheckpointedOffsets(*((on_disk[name] or {}).get(key) for name in (
                LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT)))
            return Log.open(path, self.default_config, topic=key[0], partition=key[1], clock_ms=self.clock_ms,
                            checkpoints=offsets)

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
        # What opening found (a recovered log start, a clean open's recovery point, entries of
        # logs from an older Raftka, entries of partitions that are gone) is written now.
        for name, state in checkpoints.items():
            for (key, _), lg in zip(found, opened):
                state.note(key, _OFFSET_OF[name](lg))
                state.legacy.extend(path for path in lg.legacy_checkpoints if path.name == name)
            state.dirty = state.entries != on_disk[name]  # a bad file (None) too
            try:
                state.write()
            except OSError as error:
                raise KafkaStorageError(f"cannot write {state.file.path}: {error.strerror or error}") from error
        for lg in opened:
            lg.legacy_checkpoints = []
        if found:
            log.info("opened %d partition logs in %s in %.2f s on %d thread(s)", len(found), d,
                     time.monotonic() - started, min(threads, len(found)))

    @staticmethod
    def _read_checkpoint(state: _DirCheckpoint) -> dict[TopicPartition, int] | None:
        """A log dir's checkpoint file as found at start (a missing one is empty), or None when
        it is bad (logged): each log then opens as if it had no entry, the safe fallback
        (recovery from offset 0, the log start at its first segment, a high watermark of 0)."""
        try:
            return state.file.read() or {}
        except CheckpointError as error:
            log.warning("%s: %s; opening its logs without it", state.file.path.parent, error)
            return None

    def _watch(self, lg: Log) -> Log:
        self._checkpoints_of[lg] = self._checkpoints[lg.dir.parent]
        lg.on_change = self._log_changed
        lg.checkpoint_now = self._checkpoint_now
        lg.on_truncate = self._log_truncated
        self._changed.add(lg)
        return lg

    def _log_truncated(self, lg: Log, end_offset: int) -> None:
        if self.cleaner is not None:
            self.cleaner.truncated(lg, end_offset)

    def _checkpoint_now(self, lg: Log, name: str, offset: int) -> None:
        """``Log.checkpoint_now``: write the log dir's checkpoint ``name`` with ``lg``'s new
        ``offset`` at once. A lowered recovery point only when the file may hold a higher one."""
        key = (lg.topic, lg.partition)
        with self._checkpoint_lock:
            state = self._checkpoints_of[lg][name]
            if name == RECOVERY_POINT_CHECKPOINT and not state.dirty and state.entries.get(key, 0) <= offset:
                return
            state.note(key, offset)
            state.write()

    def _write_checkpoints(self, logs: Iterable[Log], names: tuple[str, ...]) -> int:
        """Note the offsets of ``logs`` (those still hosted) for the checkpoints ``names``,
        then write each of those files that changed. Returns the number of files that could
        not be written (logged; they are tried again at the next pass)."""
        failed = 0
        with self._checkpoint_lock:
            for lg in logs:
                checkpoints = self._checkpoints_of.get(lg)
                if checkpoints is None:
                    continue  # deleted meanwhile
                for name in names:
                    checkpoints[name].note((lg.topic, lg.partition), _OFFSET_OF[name](lg))
            for checkpoints in self._checkpoints.values():
                for name in names:
                    try:
                        checkpoints[name].write()
                    except (OSError, CheckpointError) as error:
                        failed += 1
                        log.error("writing %s: %s", checkpoints[name].file.path,
                                  getattr(error, "strerror", None) or error)
        return failed

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
            self._write_away_stale_entries(target, (topic, partition))
            lg = Log.open(target / f"{topic}-{partition}", self._merged(config), topic=topic,
                          partition=partition, clock_ms=self.clock_ms)
            self._logs[(topic, partition)] = self._watch(lg)
            self._dir_counts[target] += 1
            with self._checkpoint_lock:
                for name, state in self._checkpoints[target].items():
                    state.note((topic, partition), _OFFSET_OF[name](lg))
            return lg

    def _write_away_stale_entries(self, d: Path, key: TopicPartition) -> None:
        """Before ``key`` is created in ``d``: write the checkpoints that still list it from a
        deletion (a crash would otherwise open the new log with the old one's offsets)."""
        with self._checkpoint_lock:
            for state in self._checkpoints[d].values():
                if key in state.removed:
                    try:
                        state.write()
                    except OSError as error:
                        raise KafkaStorageError(f"could not write {state.file.path}: {error.strerror or error}",
                                                topic=key[0], partition=key[1]) from error

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
        lg.checkpoint_now = None
        lg.on_truncate = None
        if self.cleaner is not None:
            self.cleaner.forget(lg)
        for pending in (self._changed, self._hw_due, self._rp_due):
            pending.discard(lg)
        self._flush_due.pop(lg, None)  # its heap entry is skipped as stale
        with self._checkpoint_lock:
            for state in self._checkpoints_of.pop(lg).values():
                state.forget((topic, partition))  # written at the next pass
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
        """Flushes due by flush.ms, (every few seconds) the log dirs' checkpoints where an
        offset moved, and (every ``retention_check_interval_ms``) retention and producer-id
        expiry over every log. A disk error on one log or file is logged (and counted in
        ``errors``) and does not stop the others."""
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
            errors += self._write_checkpoints(logs, (HIGH_WATERMARK_CHECKPOINT,))
        if now - self._last_rp_checkpoint_ms >= self.recovery_point_checkpoint_interval_ms:
            self._last_rp_checkpoint_ms = now
            logs, self._rp_due = self._rp_due, set()
            errors += self._write_checkpoints(logs, (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT))
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
        """Write every log dir's high-watermark checkpoint now (where one moved);
        KafkaStorageError when a file cannot be written."""
        if self._write_checkpoints(self.logs(), (HIGH_WATERMARK_CHECKPOINT,)):
            raise KafkaStorageError("could not write every high-watermark checkpoint (logged)")

    def close(self) -> None:
        """Close every log cleanly (flush), write the log dirs' checkpoints and release the
        log dirs."""
        if self.cleaner is not None:
            self.cleaner.stop()
        with self._lock:
            logs = list(self._logs.values())
        for lg in logs:
            try:
                lg.close()
            except KafkaStorageError as error:
                log.error("closing %s: %s", lg, error)
        self._write_checkpoints(logs, OFFSET_CHECKPOINTS)  # after the flushes: recovery points at the log ends
        with self._lock:
            self._checkpoints_of.clear()
            self._logs.clear()
            self._dir_counts = {d: 0 for d in self.log_dirs}
        for fd in self._lock_fds:
            try:
                os.close(fd)  # releases the flock
            except OSError:
                pass
        self._lock_fds.clear()
