"""One partition replica's log: a directory ``<log.dir>/<topic>-<partition>`` of segments.

Layers (each states its own contract): ``Log`` (offsets, epochs, high watermark, recovery,
retention, flush policy) -> ``LogSegment`` (one ``.log`` file) -> ``OffsetIndex`` /
``TimeIndex`` (sparse lookup aids) ; beside them ``LeaderEpochCache`` and the checkpoint files.

Files in the partition directory::

    00000000000000000000.log        record batches, byte for byte as produced (+ stamped offsets)
    00000000000000000000.index      sparse offset -> position index      (rebuilt when bad)
    00000000000000000000.timeindex  sparse max-timestamp -> offset index (rebuilt when bad)
    leader-epoch-checkpoint         epoch start offsets (written by flushes and truncations,
                                    atomic replace; a new epoch waits for the next flush)
    .clean-shutdown                 present only after a clean close()

The log's high watermark, recovery point and log start offset are kept, as in Kafka, in one file
of each kind per log dir, written by the LogManager (storage/manager.py)::

    <log.dir>/replication-offset-checkpoint     every partition's high watermark  (no fsync)
    <log.dir>/recovery-point-offset-checkpoint  offsets below it were fsynced     (fsync)
    <log.dir>/log-start-offset-checkpoint       first offset still readable       (fsync)

The Log exposes those offsets and reports their changes (``on_change``); ``Log.open`` takes what
the files held (``checkpoints``). Two changes must be on disk before the log goes on, and the
Log asks for that write (``checkpoint_now``): a DeleteRecords' new log start offset, before it is
acknowledged and before any segment goes; a recovery point a truncation lowered. A Log opened
without a LogManager keeps them in memory only.

Contract:
- Offsets are contiguous: each batch starts at the previous batch's last offset + 1, from the
  log start offset to the log end offset (the next offset to assign).
- An append is all or nothing: every batch is validated (length, magic, CRC, max.message.bytes)
  before a byte is written, and a failed write is cut back; the caller gets a typed error.
- A read returns whole batches only, never bytes past the last whole batch, never a batch that
  failed validation: recovery removed those before the log opened, and every batch read from a
  file is checked again (it decodes, continues the offsets, passes its CRC-32C; the tail cache,
  bytes validated at append and held in memory, is not). A batch that fails is *corruption*
  (the disk changed it after it was written): the read raises ``LogCorruptedError`` (a
  KAFKA_STORAGE_ERROR) naming the file and byte position, the log remembers it (``corruption``)
  and logs it at ERROR once per partition and cause. ``truncate_at_corruption`` then cuts the log
  after its last good batch (a follower fetches the rest again from its leader).
- Durability: ``flush`` fsyncs every segment written since the last flush and moves the recovery
  point; ``flush.messages`` / ``flush.ms`` decide when it runs (Kafka's default: never, leaving
  durability to replication; the page cache survives a process crash).
- Compaction (``storage/cleaner.py``) rewrites closed segments below the high watermark and
  swaps them in through ``replace_segments``; offsets then have gaps (reads return the first
  batch at or after the fetch offset).
- Recovery on open (``storage/loader.py``): segments wholly below the recovery point are trusted (indexes checked for
  shape, rebuilt if bad); from the segment holding the recovery point on, every batch is
  re-validated and the log is cut at the first bad one. A clean close skips that scan.

Thread safety: every public method takes the log's lock, so a broker may read from one thread
while another appends.
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from raftka.common.errors import (
    CODES,
    CorruptRecordError,
    FencedLeaderEpochError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    for_code,
)
from raftka.common.ratelog import RateLimitedLog
from raftka.common.records import (
    LOG_OVERHEAD_BYTES,
    BatchHeader,
    assign_offsets,
    set_log_append_time,
    validate_batch,
    validate_batches,
)
from raftka.storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, fsync_dir
from raftka.storage.config import LogConfig
from raftka.storage import loader
from raftka.storage.epoch_cache import LeaderEpochCache
from raftka.storage.index import RELATIVE_OFFSET_MAX, IndexError_
from raftka.storage.loader import CLEAN_SHUTDOWN_FILE
from raftka.storage.producer_state import ProducerStateManager
from raftka.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    AppendedBatch,
    CorruptBatchError,
    LogSegment,
    file_name,
)

log = logging.getLogger(__name__)
# The last appended batches stay in memory, so a fetch at the log's tail (followers and
# caught-up consumers, i.e. nearly every fetch) needs no pread and header scan. Whole batches;
# the newest is kept even when larger. Cleared by every change other than an append. Per
# partition, so a broker holds at most this x its partitions that take writes.
TAIL_CACHE_BYTES_MAX = 64 * 1024

RecordListTooLargeError = for_code(CODES["RECORD_LIST_TOO_LARGE"])
# Corruption found by reads is logged at ERROR once per partition and cause; consumers retrying
# the same read must not flood the log (the count of the repeats comes with the next line).
CORRUPTION_LOG_INTERVAL_S = 3600.0
_corruption_log = RateLimitedLog(log, interval_s=CORRUPTION_LOG_INTERVAL_S)


def _delete_files(segment: LogSegment) -> None:
    """Remove a segment's three files (whatever their suffix)."""
    segment.file.close()
    for path in (segment.log_path, segment.offset_index.path, segment.time_index.path):
        path.unlink(missing_ok=True)


class AppendInfo(NamedTuple):  # a tuple: built per append, a frozen dataclass costs 2.4x
    """What an append did. ``duplicate``: an idempotent retry; the offsets are the original ones
    and nothing was appended."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 under CreateTime
    record_count: int
    batch_count: int
    duplicate: bool = False


class FetchData(NamedTuple):  # a tuple: built per read
    """Whole batches read from the log. ``first_offset``: base offset of the first batch
    returned (may be below the fetch offset, which lies inside that batch, or above it, past a
    gap the log cleaner left); the fetch offset itself when ``records`` is empty."""

    records: bytes
    first_offset: int


@dataclass(frozen=True)
class Corruption:
    """A batch that failed its check when read: where it is, and the first offset it makes
    unreadable. ``cause``: "crc", "header", "offsets" or "index" (storage/segment.py)."""

    file: Path
    position: int
    offset: int
    cause: str
    problem: str

    def describe(self) -> str:
        return f"corrupt record batch in {self.file} at byte {self.position} (offset {self.offset}): {self.problem}"


class CleaningView(NamedTuple):
    """What the log cleaner reads of a log, taken under the log's lock (``snapshot_for_cleaning``).
    ``producer_last_offsets``: each active idempotent producer's last data offset (the batch
    ending there keeps the producer's state and is never dropped)."""

    segments: list[LogSegment]
    log_start_offset: int
    high_watermark: int
    config: LogConfig
    producer_last_offsets: dict[int, int]


class CleaningAbortedError(Exception):
    """The segments a cleaning read changed before its swap (truncation, retention, deletion):
    its output is deleted and the log is left as it is."""


class LogCorruptedError(KafkaStorageError):  # type: ignore[misc, valid-type]
    """KAFKA_STORAGE_ERROR for a read that met a corrupt batch; carries the ``Corruption``."""

    def __init__(self, corruption: Corruption, *, topic: str, partition: int) -> None:
        self.corruption = corruption
        super().__init__(corruption.describe(), topic=topic, partition=partition)


def _now_ms() -> int:
    return int(time.time() * 1000)


class Log:
    """A partition replica's log (see the module docstring). Create with ``Log.open``."""

    def __init__(self, directory: Path, config: LogConfig, *, topic: str, partition: int,
                 clock_ms: Callable[[], int]) -> None:
        self.dir = directory
        self.config = config
        self.topic = topic
        self.partition = partition
        self.clock_ms = clock_ms
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._tail_bases: list[int] = []  # the tail cache: base offsets, in log order
        self._tail: list[tuple[int, bytes | memoryview]] = []  # (last offset, the batch's bytes)
        self._tail_bytes = 0
        self.log_start_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock_ms()
        self._failed: str | None = None
        self._closed = False
        self.corruption: Corruption | None = None  # the lowest corrupt batch reads have met
        # Per-partition offset checkpoints of an older Raftka found at open (loader.py), for the
        # LogManager to delete once its log dir's files cover this log.
        self.legacy_checkpoints: list[Path] = []
        self.leader_epoch_cache = LeaderEpochCache(directory, lambda: self.log_end_offset)
        self.producer_state = ProducerStateManager(directory, clock_ms)
        # Called (by the appending thread, under the log's lock) whenever the high watermark, the
        # unflushed records, the recovery point, the log start offset or the config change: the
        # LogManager's periodic duties then visit only the logs that changed.
        self.on_change: Callable[["Log"], None] | None = None
        # Called under the log's lock with a checkpoint's name and this log's new offset for it,
        # when that must be on disk before the log goes on (module docstring); the LogManager
        # writes its log dir's file at once. OSError when it cannot.
        self.checkpoint_now: Callable[["Log", str, int], None] | None = None
        # Called under the log's lock with the new log end offset after a truncation: the log
        # cleaner's first dirty offset may not stay above it (LogManager).
        self.on_truncate: Callable[["Log", int], None] | None = None

    # --- opening -----------------------------------------------------------------------------
    @classmethod
    def open(cls, dir: Path, config: Mapping[str, Any] | LogConfig | None = None, *, topic: str,
             partition: int, clock_ms: Callable[[], int] = _now_ms,
             checkpoints: loader.CheckpointedOffsets = loader.CheckpointedOffsets()) -> "Log":
        """Open (creating if needed) the log in ``dir`` and run recovery. ``checkpoints``: the
        log's offsets in its log dir's checkpoint files (none by default: a new log, or one
        opened without a LogManager). ConfigError for a bad config value, KafkaStorageError
        when the directory cannot be read or written."""
        cfg = config if isinstance(config, LogConfig) else LogConfig.from_mapping(config)
        directory = Path(dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self = cls(directory, cfg, topic=topic, partition=partition, clock_ms=clock_ms)
            self._start_from(loader.load(
                directory, str(self), checkpoints, self.producer_state,
                lambda base, create: self._new_segment(base, create=create),
                lambda: self.log_end_offset))
        except BaseException as error:  # the loader closed the segments it had opened
            if isinstance(error, OSError):
                raise KafkaStorageError(f"cannot open the log in {directory}: {error}",
                                        topic=topic, partition=partition) from error
            raise
        return self

    def _new_segment(self, base_offset: int, *, create: bool) -> LogSegment:
        return LogSegment(self.dir, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                          index_bytes_max=self.config.segment_index_bytes, create=create)

    def _start_from(self, loaded: loader.LoadedLog) -> None:
        """Take what the loader found."""
        self._set_segments(loaded.segments)
        self.log_start_offset = loaded.log_start_offset
        self.high_watermark = loaded.high_watermark
        self.recovery_point = loaded.recovery_point
        self.leader_epoch_cache = loaded.leader_epoch_cache
        self.legacy_checkpoints = loaded.legacy_checkpoints

    def _headers_from(self, offset: int) -> Iterable[BatchHeader]:
        """Headers of every batch from the one holding ``offset`` to the log end."""
        return loader.headers_from(self._segments, offset)

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self._segments = segments
        self._bases = [seg.base_offset for seg in segments]
        self._tail_bases, self._tail, self._tail_bytes = [], [], 0  # truncated or trimmed

    def _cache_tail(self, data: bytes, batches: list[AppendedBatch]) -> None:
        if len(batches) == 1:
            b = batches[0]
            self._tail_bases.append(b.base_offset)
            self._tail.append((b.last_offset, data))
        else:
            view = memoryview(data)
            for b in batches:
                self._tail_bases.append(b.base_offset)
                self._tail.append((b.last_offset, view[b.position:b.position + b.size]))
        self._tail_bytes += len(data)
        if self._tail_bytes > TAIL_CACHE_BYTES_MAX:
            drop = 0
            while self._tail_bytes > TAIL_CACHE_BYTES_MAX and drop < len(self._tail) - 1:
                self._tail_bytes -= len(self._tail[drop][1])
                drop += 1
            del self._tail_bases[:drop], self._tail[:drop]

    def _read_tail(self, fetch_offset: int, max_bytes: int, limit: int,
                   min_one_batch: bool) -> FetchData | None:
        """``read`` from the tail cache; None when ``fetch_offset`` lies before it."""
        bases = self._tail_bases
        if not bases or fetch_offset < bases[0]:
            return None
        i = bisect_right(bases, fetch_offset) - 1
        tail = self._tail
        chunks: list[bytes | memoryview] = []
        first_offset = -1
        budget = max_bytes
        for j in range(i, len(tail)):
            last, data = tail[j]
            if last < fetch_offset:
                continue
            if last >= limit:
                break
            size = len(data)
            if size > budget:
                if first_offset < 0 and min_one_batch:
                    chunks.append(data)
                    first_offset = bases[j]
                break
            if first_offset < 0:
                first_offset = bases[j]
            chunks.append(data)
            budget -= size
        if not chunks:
            return FetchData(b"", fetch_offset)
        records = chunks[0] if len(chunks) == 1 and isinstance(chunks[0], bytes) else b"".join(chunks)
        return FetchData(records, first_offset)

    # --- state -------------------------------------------------------------------------------
    @property
    def log_end_offset(self) -> int:
        """The next offset to assign."""
        return self._segments[-1].next_offset

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a copy of the list)."""
        with self._lock:
            return list(self._segments)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(seg.size for seg in self._segments)

    def __repr__(self) -> str:
        return f"Log({self.topic}-{self.partition})"

    def update_config(self, config: Mapping[str, Any] | LogConfig) -> None:
        """Apply new topic configs (AlterConfigs); ConfigError names a bad key."""
        cfg = config if isinstance(config, LogConfig) else LogConfig.from_mapping(config)
        with self._lock:
            self.config = cfg
            for seg in self._segments:
                seg.index_interval_bytes = cfg.index_interval_bytes
            self._changed()  # flush.ms may have moved

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    def _error(self, cls: type, message: str) -> Exception:
        return cls(message, topic=self.topic, partition=self.partition)

    @property
    def is_usable(self) -> bool:
        """Neither closed (or deleted) nor offline after a disk error."""
        return not self._closed and not self._failed

    def _check_usable(self) -> None:
        if self._closed:
            raise self._error(KafkaStorageError, f"the log in {self.dir} is closed")
        if self._failed:
            raise self._error(KafkaStorageError, f"the log in {self.dir} is offline after a disk "
                              f"error: {self._failed}")

    # --- appends -----------------------------------------------------------------------------
    def append_as_leader(self, records: bytes, leader_epoch: int) -> AppendInfo:
        """Validate ``records`` (one or more batches), stamp offsets from the log end offset and
        ``leader_epoch``, append. Errors (nothing appended): CorruptRecordError, InvalidRecord,
        MessageTooLargeError (a batch over max.message.bytes), RecordListTooLarge (over
        segment.bytes), FencedLeaderEpochError (older than the latest epoch), producer-state
        errors, KafkaStorageError."""
        with self._lock:
            self._check_usable()
            headers = validate_batches(records, max_batch_bytes=self.config.max_message_bytes,
                                       require_keys=self.config.compact)
            if len(records) > self.config.segment_bytes:
                raise self._error(RecordListTooLargeError,
                                  f"{len(records)} bytes of batches do not fit in a segment "
                                  f"(segment.bytes={self.config.segment_bytes})")
            if leader_epoch < self.leader_epoch_cache.latest_epoch:
                raise self._error(FencedLeaderEpochError,
                                  f"leader epoch {leader_epoch} is older than the log's latest "
                                  f"epoch {self.leader_epoch_cache.latest_epoch}")
            base = self.log_end_offset
            duplicate = self.producer_state.check_leader_append(headers, base)
            if duplicate is not None:
                first, last = duplicate
                return AppendInfo(first, last, max(h.max_timestamp for h in headers), -1,
                                  sum(h.record_count for h in headers), len(headers), True)
            data = assign_offsets(records, base, leader_epoch, headers)
            append_time = -1
            if self.config.log_append_time:
                append_time = self.clock_ms()
                data = set_log_append_time(data, append_time)
            return self._append(data, headers, base, leader_epoch, append_time, leader=True)

    def append_as_follower(self, records: bytes) -> AppendInfo:
        """Append batches copied from the leader, offsets and epochs included. Each batch must
        pass its CRC and its offsets must lie past the previous batch's. Gaps are allowed: a
        compacted leader's log has them where the cleaner removed records (Kafka's followers
        take them too). Errors as ``append_as_leader``; an overlap is a CorruptRecordError. max.message.bytes
        is not checked: the leader accepted the batch (as in Kafka). More bytes than a segment
        holds are appended in several runs (rolling between them); validation still covers
        every batch before the first byte is written."""
        with self._lock:
            self._check_usable()
            headers = []
            pos = 0
            expected = self._segments[-1].next_offset
            total = len(records)
            if total == 0:
                raise CorruptRecordError("the records field holds no record batch",
                                         topic=self.topic, partition=self.partition)
            while pos < total:
                header = validate_batch(records, pos)
                if header.base_offset < expected:
                    raise CorruptRecordError(
                        f"batch at position {pos} starts at offset {header.base_offset}, but the "
                        f"log ends at {expected}: offsets must increase",
                        topic=self.topic, partition=self.partition)
                headers.append(header)
                expected = header.base_offset + header.last_offset_delta + 1
                pos += header.batch_length + LOG_OVERHEAD_BYTES
            segment_bytes = self.config.segment_bytes
            if total <= segment_bytes:  # the usual fetch: one write
                data = records if type(records) is bytes else bytes(records)
                return self._append(data, headers, headers[0].base_offset, None, -1, leader=False)
            # A fetch may bring more than a segment holds: append it in runs of whole batches
            # that each fit one segment (a single batch larger than a segment is refused).
            runs: list[tuple[int, int, list[BatchHeader]]] = []
            start = 0
            for header in headers:
                size = header.batch_length + LOG_OVERHEAD_BYTES
                if size > segment_bytes:
                    raise self._error(RecordListTooLargeError,
                                      f"a {size}-byte batch does not fit in a segment "
                                      f"(segment.bytes={segment_bytes})")
                if runs and runs[-1][1] - runs[-1][0] + size <= segment_bytes:
                    runs[-1][2].append(header)
                    runs[-1] = (runs[-1][0], runs[-1][1] + size, runs[-1][2])
                else:
                    runs.append((start, start + size, [header]))
                start += size
            view = memoryview(records)
            infos = [self._append(bytes(view[a:b]), run, run[0].base_offset, None, -1, leader=False)
                     for a, b, run in runs]
            first, last = infos[0], infos[-1]
            return AppendInfo(first.first_offset, last.last_offset,
                              max(i.max_timestamp for i in infos), -1,
                              sum(i.record_count for i in infos), len(headers), False)

    def _append(self, data: bytes, headers: list[BatchHeader], base: int, leader_epoch: int | None,
                 append_time: int, *, leader: bool) -> AppendInfo:
        if len(headers) == 1:  # the usual append (one producer batch, or a follower's one): no loop
            header = headers[0]
            last_offset = base + header.last_offset_delta
            max_ts = append_time if append_time >= 0 else header.max_timestamp
            records = header.record_count
            batches = [AppendedBatch(0, len(data), base, last_offset, max_ts)]
        else:
            batches = []
            position = 0
            offset = base
            max_ts = -1
            records = 0
            for header in headers:
                if not leader:
                    offset = header.base_offset  # the leader's, gaps included
                last = offset + header.last_offset_delta
                ts = append_time if append_time >= 0 else header.max_timestamp
                size = header.batch_length + LOG_OVERHEAD_BYTES
                batches.append(AppendedBatch(position, size, offset, last, ts))
                if ts > max_ts:
                    max_ts = ts
                records += header.record_count
                position += size
                offset = last + 1
            last_offset = offset - 1
        seg = self._maybe_roll(len(data), batches[0].max_timestamp, base, last_offset)
        if seg.size == 0:
            seg.created_ms = self.clock_ms()
        try:
            seg.append(data, batches)
        except OSError as error:
            self._after_write_error(seg, error)
            raise self._error(KafkaStorageError,
                              f"could not append {len(data)} bytes to {seg.log_path}: "
                              f"{error.strerror or error}; nothing was appended") from error
        self._cache_tail(data, batches)
        # Epochs and producer state follow the bytes now in the log.
        self.producer_state.on_append(headers, base if leader else None)
        if leader_epoch is not None:
            self.leader_epoch_cache.assign(leader_epoch, base)
        else:
            for header in headers:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        self._unflushed_messages += records
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        self._changed()
        return AppendInfo(base, last_offset, max_ts, append_time, records, len(headers), False)

    def _after_write_error(self, seg: LogSegment, error: OSError) -> None:
        try:
            seg.trim_to_size()
        except OSError as second:
            self._failed = f"{error}; then could not cut the partial write: {second}"
            log.error("%s: %s", self, self._failed)

    def _maybe_roll(self, size: int, first_timestamp: int, base: int, last_offset: int) -> LogSegment:
        seg = self._segments[-1]
        if seg.size == 0:
            return seg
        config = self.config
        reason = None
        if seg.size + size > config.segment_bytes:
            reason = "segment.bytes"
        elif seg.indexes_full:
            reason = "index full"
        elif last_offset - seg.base_offset > RELATIVE_OFFSET_MAX:
            reason = "relative offset overflow"
        else:
            if seg.first_batch_timestamp >= 0 and first_timestamp >= 0:
                waited = first_timestamp - seg.first_batch_timestamp  # no clock read per append
            else:
                now = self.clock_ms()
                waited = now - seg.rolling_timestamp(now)
            if waited > config.segment_ms:
                reason = "segment.ms"
        if reason is None:
            return seg
        # Past a gap wider than relative offsets reach, the new segment starts at the batch.
        return self._roll(reason, base if last_offset - seg.next_offset > RELATIVE_OFFSET_MAX else None)

    def _roll(self, reason: str, at: int | None = None) -> LogSegment:
        old = self._segments[-1]
        base = old.next_offset if at is None else at
        try:
            self.producer_state.on_roll(base)
            old.on_become_inactive()
            new = self._new_segment(base, create=True)
        except OSError as error:
            raise self._error(KafkaStorageError, f"could not roll a new segment at offset {base} "
                              f"in {self.dir}: {error.strerror or error}; nothing was appended") from error
        self._segments.append(new)
        self._bases.append(base)
        log.debug("%s: rolled segment %d (%s)", self, base, reason)
        return new

    def roll(self) -> None:
        """Start a new segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_usable()
            if self._segments[-1].size:
                self._roll("requested")

    # --- reads -------------------------------------------------------------------------------
    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchData:
        """Whole batches from the one holding ``fetch_offset``, up to ``max_bytes`` (the first
        batch even when larger, if ``min_one_batch``), excluding batches that reach
        ``max_offset`` (the high watermark, for consumers). OffsetOutOfRangeError outside
        [log_start_offset, log_end_offset]; at log_end_offset the records are empty."""
        with self._lock:
            self._check_usable()
            leo = self.log_end_offset
            if fetch_offset < self.log_start_offset or fetch_offset > leo:
                raise self._error(OffsetOutOfRangeError,
                                  f"offset {fetch_offset} is outside the log's range "
                                  f"[{self.log_start_offset}, {leo}]")
            limit = leo if max_offset is None else min(max_offset, leo)
            if fetch_offset >= limit:
                return FetchData(b"", fetch_offset)
            cached = self._read_tail(fetch_offset, max_bytes, limit, min_one_batch)
            if cached is not None:
                return cached
            chunks: list[bytes] = []
            first_offset = -1
            budget = max_bytes
            i = self._segment_index_for(fetch_offset)
            data = b""
            try:
                while i < len(self._segments):
                    seg = self._segments[i]
                    i += 1
                    if seg.size == 0 or seg.next_offset <= fetch_offset:
                        continue
                    if first_offset < 0:
                        found = seg.find(fetch_offset)
                        if found is None:
                            continue
                        position, header = found
                    else:
                        position, header = 0, seg.checked_header(0, seg.base_offset)
                    if header.last_offset >= limit:
                        break
                    if header.size > budget:
                        if first_offset < 0 and min_one_batch:
                            data = seg.pread(position, header.size)
                            seg.check_batches(data, position, header.base_offset)
                            chunks.append(data)
                            first_offset = header.base_offset
                        break
                    if first_offset < 0:
                        first_offset = header.base_offset
                    data = seg.pread(position, min(budget, seg.size - position))
                    end = seg.check_batches(data, position, header.base_offset, limit)
                    chunks.append(data[:end] if end < len(data) else data)
                    budget -= end
                    if position + end < seg.size:
                        break  # stopped by max_bytes or max_offset, not by the segment's end
            except CorruptBatchError as error:
                failure = self._corrupted(error)
                if error.checked_bytes:
                    chunks.append(data[:error.checked_bytes])
                if not chunks:
                    raise failure from None
                # The good batches before it go out; a read from the corrupt one raises.
            except CorruptRecordError as error:
                raise self._error(KafkaStorageError, f"reading offset {fetch_offset}: {error.message}") from error
            except OSError as error:
                raise self._error(KafkaStorageError, f"reading offset {fetch_offset} in {self.dir}: "
                                  f"{error.strerror or error}") from error
            records = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            return FetchData(records, first_offset if records else fetch_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record at or past the log start offset whose
        timestamp is >= ``timestamp_ms`` (Kafka's ListOffsets by timestamp), or None when there
        is none. Only the one batch holding that record is decoded."""
        with self._lock:
            self._check_usable()
            try:
                for seg in self._segments:
                    if seg.max_timestamp >= timestamp_ms and seg.next_offset > self.log_start_offset:
                        found = seg.find_by_timestamp(timestamp_ms, self.log_start_offset)
                        if found is not None:
                            return found
            except CorruptBatchError as error:
                raise self._corrupted(error) from None
            except CorruptRecordError as error:
                raise self._error(KafkaStorageError, f"looking up timestamp {timestamp_ms}: "
                                  f"{error.message}") from error
            except OSError as error:
                raise self._error(KafkaStorageError, f"looking up timestamp {timestamp_ms} in "
                                  f"{self.dir}: {error.strerror or error}") from error
            return None

    def _corrupted(self, error: CorruptBatchError) -> LogCorruptedError:
        """A read met a corrupt batch: remember the lowest one, log it (ERROR, once per
        partition and cause), and return the error the read raises."""
        found = Corruption(error.path, error.position, error.offset, error.cause, error.problem)
        if self.corruption is None or found.offset < self.corruption.offset:
            self.corruption = found
        _corruption_log.error(f"{self.topic}-{self.partition}:{found.cause}",
                              "%s: %s; offsets from %d on cannot be read from this replica",
                              self, found.describe(), found.offset)
        return LogCorruptedError(found, topic=self.topic, partition=self.partition)

    # --- high watermark, flush ---------------------------------------------------------------
    def update_high_watermark(self, hw: int) -> int:
        """Set the high watermark (clamped to [log_start_offset, log_end_offset]); returns it."""
        with self._lock:
            hw = min(max(hw, self.log_start_offset), self.log_end_offset)
            if hw != self.high_watermark:
                self.high_watermark = hw
                self._changed()
            return hw

    def _checkpoint_now(self, name: str, offset: int) -> None:
        """Have ``offset`` written to this log dir's checkpoint ``name`` now (module docstring)."""
        if self.checkpoint_now is not None:
            self.checkpoint_now(self, name, offset)

    def flush(self, *, active_indexes: bool = False) -> None:
        """fsync every segment with data at or past the recovery point; move the recovery point
        to the log end offset. KafkaStorageError on a disk error (the log goes offline).
        The active segment's indexes are fsynced only with ``active_indexes`` (at close): after
        an unclean stop recovery rebuilds them anyway."""
        with self._lock:
            self._check_usable()
            leo = self.log_end_offset
            active = self._segments[-1]
            try:
                for seg in self._segments[self._segment_index_for(self.recovery_point):]:
                    seg.flush(indexes=active_indexes or seg is not active)
                self.leader_epoch_cache.sync()  # the epochs of what the recovery point passes
            except OSError as error:
                # After a failed fsync the kernel may have dropped the dirty pages: nothing
                # written since the last good flush can be trusted any more.
                self._failed = f"fsync failed: {error.strerror or error}"
                raise self._error(KafkaStorageError, f"could not flush the log in {self.dir}: "
                                  f"{error.strerror or error}") from error
            self.recovery_point = leo
            self._unflushed_messages = 0
            self._last_flush_ms = self.clock_ms()
            self._changed()  # the recovery point moved

    def flush_due_ms(self) -> int | None:
        """When flush.ms asks for the next flush, or None while nothing waits to be flushed."""
        with self._lock:
            if self._closed or self._failed or not self._unflushed_messages:
                return None
            return self._last_flush_ms + self.config.flush_ms

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush when records are waiting and flush.ms has passed since the last flush."""
        with self._lock:
            if self._closed or self._failed or not self._unflushed_messages:
                return False
            if now_ms - self._last_flush_ms >= self.config.flush_ms:
                self.flush()
                return True
            return False

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    # --- truncation and retention ------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding offsets >= ``offset`` (followers: a divergent tail). A batch
        straddling ``offset`` goes too, so the log may end below it. Trims the epoch cache, the
        high watermark, the recovery point and the producer state."""
        with self._lock:
            self._check_usable()
            if offset >= self.log_end_offset:
                return
            if offset < self.log_start_offset:
                self.truncate_fully_and_start_at(offset)
                return
            try:
                i = self._segment_index_for(offset)
                for seg in self._segments[i + 1:]:
                    seg.delete()
                self._set_segments(self._segments[:i + 1])
                self._segments[-1].truncate_to(offset)
                self._after_truncation()
            except OSError as error:
                self._failed = f"truncation failed: {error}"
                raise self._error(KafkaStorageError, f"could not truncate the log in {self.dir} "
                                  f"to {offset}: {error.strerror or error}") from error

    def _after_truncation(self) -> None:
        # A segment emptied by truncation other than the first goes: the one before it ends
        # where it began, keeping base offsets unique and contiguous.
        while len(self._segments) > 1 and self._segments[-1].size == 0:
            self._segments[-1].delete()
            self._set_segments(self._segments[:-1])
        leo = self.log_end_offset
        if self.recovery_point > leo:
            # A stale, higher recovery point on disk would let the next open trust records
            # written after this truncation without re-validating them.
            self.recovery_point = leo
            self._checkpoint_now(RECOVERY_POINT_CHECKPOINT, leo)
        self.high_watermark = min(self.high_watermark, leo)
        self._changed()
        self.leader_epoch_cache.truncate_from_end(leo)
        self.producer_state.load(self._headers_from, self.log_start_offset, leo)
        if self.corruption is not None and self.corruption.offset >= leo:
            self.corruption = None  # cut away with the rest
        if self.on_truncate is not None:
            self.on_truncate(self, leo)

    def truncate_at_corruption(self) -> int | None:
        """Heal: remove the corrupt batch a read met (``corruption``) and every batch after it,
        so the log ends with the last batch before it (a follower then fetches the rest again
        from its leader). Nothing at or past the corrupt batch is read. Returns the new log end
        offset, or None when no corruption is known. Like ``truncate_to``, only for a replica
        that does not lead: the leader's log is the one others copy."""
        with self._lock:
            self._check_usable()
            found = self.corruption
            if found is None:
                return None
            index = next((i for i, seg in enumerate(self._segments) if seg.log_path == found.file), None)
            if index is None:  # its segment is gone (retention, truncation): nothing to cut
                self.corruption = None
                return None
            try:
                for seg in self._segments[index + 1:]:
                    seg.delete()
                self._set_segments(self._segments[:index + 1])
                self._segments[-1].truncate_at(found.position, found.offset)
                self.corruption = None
                self._after_truncation()
            except OSError as error:
                self._failed = f"truncation failed: {error}"
                raise self._error(KafkaStorageError, f"could not cut the corrupt log in {self.dir} "
                                  f"at {found.file.name} byte {found.position}: {error.strerror or error}") from error
            log.warning("%s: cut the log at %s byte %d (the corrupt batch and everything after it); "
                        "it now ends at offset %d", self, found.file.name, found.position, self.log_end_offset)
            return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (a follower far behind the
        leader's log start offset)."""
        with self._lock:
            self._check_usable()
            try:
                for seg in self._segments:
                    seg.delete()
                self.producer_state.clear()
                self._set_segments([self._new_segment(offset, create=True)])
                # The offset may lie below the old log start and recovery point (truncate_to
                # below the log start): stale, higher ones on disk would hide or trust records
                # appended from here on.
                self._checkpoint_now(LOG_START_OFFSET_CHECKPOINT, offset)
                self.log_start_offset = offset
                if offset < self.recovery_point:
                    self._checkpoint_now(RECOVERY_POINT_CHECKPOINT, offset)
                self.recovery_point = offset
                self.high_watermark = offset
                self._changed()
                self.leader_epoch_cache.clear()
                self._unflushed_messages = 0
                self.corruption = None
                if self.on_truncate is not None:
                    self.on_truncate(self, offset)
            except OSError as error:
                self._failed = f"truncation failed: {error}"
                raise self._error(KafkaStorageError, f"could not reset the log in {self.dir} "
                                  f"at {offset}: {error.strerror or error}") from error

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: delete the oldest closed segments past retention.ms (by their largest
        timestamp) or while the log exceeds retention.bytes; only segments wholly below the
        high watermark, and only when cleanup.policy includes delete. Advances the log start offset; returns how many were deleted."""
        with self._lock:
            if self._closed or self._failed:
                return 0
            cfg = self.config
            if not cfg.delete:  # cleanup.policy=compact: only the log cleaner removes records
                return 0
            total = sum(seg.size for seg in self._segments)
            count = 0
            while len(self._segments) - count > 1:
                seg = self._segments[count]
                following = self._segments[count + 1]
                if following.base_offset > self.high_watermark:
                    break
                by_time = cfg.retention_ms >= 0 and now_ms - seg.largest_timestamp() > cfg.retention_ms
                by_size = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
                if not (by_time or by_size):
                    break
                total -= seg.size
                count += 1
            if not count:
                return 0
            new_start = self._segments[count].base_offset
            self._advance_start(new_start, count, "retention")
            return count

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the log start offset (nothing below it is read again)
        and delete the segments wholly below it. ``offset`` may not pass the high watermark
        (OffsetOutOfRangeError); at or below the current start it changes nothing. Returns the
        log start offset. Durable before it returns: the log dir's log-start-offset checkpoint is
        written first (``checkpoint_now``)."""
        with self._lock:
            self._check_usable()
            if offset > self.high_watermark:
                raise self._error(OffsetOutOfRangeError,
                                  f"cannot delete records before offset {offset}: past the high "
                                  f"watermark {self.high_watermark}")
            if offset > self.log_start_offset:
                count = 0
                while count < len(self._segments) - 1 and self._segments[count + 1].base_offset <= offset:
                    count += 1
                self._advance_start(offset, count, "records deleted", durable=True)
            return self.log_start_offset

    def _advance_start(self, new_start: int, count: int, why: str, *, durable: bool = False) -> None:
        """Move the log start offset to ``new_start`` and delete the first ``count`` segments
        (all wholly below it). ``durable``: the checkpoint goes first (DeleteRecords, which may
        move the start inside a segment; after a crash, open() deletes what lies below it).
        Otherwise (retention, whole segments) the next maintenance pass writes it: a crash
        before that leaves an older start below the first remaining segment, which open() moves
        up to that segment's base offset."""
        doomed = self._segments[:count]
        try:
            if durable:
                self._checkpoint_now(LOG_START_OFFSET_CHECKPOINT, new_start)
            self.log_start_offset = new_start
            self._set_segments(self._segments[count:])
            for seg in doomed:
                seg.delete()
            self.producer_state.delete_snapshots_below(new_start)
            self.leader_epoch_cache.truncate_from_start(new_start)
            if self.corruption is not None and self.corruption.offset < new_start:
                self.corruption = None  # its segment is gone
            self._changed()
        except OSError as error:
            raise self._error(KafkaStorageError, f"{why} in {self.dir}: "
                              f"{error.strerror or error}") from error
        log.info("%s: %s: deleted %d segment(s); log start offset now %d", self, why, count, new_start)

    # --- the log cleaner's two calls (storage/cleaner.py) -------------------------------------
    def snapshot_for_cleaning(self) -> CleaningView:
        with self._lock:
            self._check_usable()
            last = {pid: entry.batches[-1][3] for pid, entry in self.producer_state.producers().items()
                    if entry.batches}
            return CleaningView(list(self._segments), self.log_start_offset, self.high_watermark,
                                self.config, last)

    def replace_segments(self, old: list[LogSegment], sizes: list[int], cleaned: LogSegment,
                         fault: Callable[[str], None] | None = None) -> LogSegment:
        """Swap ``cleaned`` (a complete ``.cleaned`` segment, fsynced and closed, based at
        ``old[0]``'s base offset) in for ``old``, consecutive closed segments of this log that
        must still have the ``sizes`` the cleaner read. Kafka's order, each step durable before
        the next: rename the cleaned files to ``.swap`` (indexes, then the log), fsync the
        directory; delete ``old``; rename the ``.swap`` files to their plain names (the log
        last), fsync the directory. A crash at any step is completed or undone by the loader.
        ``fault(step)`` is called before each file operation (tests inject crashes there).

        CleaningAbortedError (the cleaned files deleted, the log untouched) when ``old`` changed
        meanwhile; KafkaStorageError when a step fails: the log then goes offline (every later
        call fails) and the next open completes the swap."""
        step = fault or (lambda _name: None)
        with self._lock:
            self._check_usable()
            try:
                i = next(j for j, seg in enumerate(self._segments) if seg is old[0])
            except StopIteration:
                i = -1
            if (i < 0 or i + len(old) >= len(self._segments)
                    or any(self._segments[i + j] is not seg or seg.size != size
                           for j, (seg, size) in enumerate(zip(old, sizes)))):
                _delete_files(cleaned)
                raise CleaningAbortedError(f"{self}: segments {[s.base_offset for s in old]} changed "
                                           f"while they were cleaned")
            base = old[0].base_offset
            assert cleaned.base_offset == base and cleaned.file.closed, cleaned
            next_base = self._segments[i + len(old)].base_offset
            try:
                for path in (cleaned.offset_index.path, cleaned.time_index.path, cleaned.log_path):
                    step(f"rename {path.name} to .swap")
                    os.replace(path, path.with_name(path.name[:-len(cleaned.suffix)] + loader.SWAP_SUFFIX))
                step("fsync the directory after the .swap renames")
                fsync_dir(self.dir)
                for seg in old:
                    step(f"delete {seg.log_path.name}")
                    seg.delete()
                for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):  # the log last
                    plain = self.dir / file_name(base, suffix)
                    step(f"rename {plain.name}{loader.SWAP_SUFFIX} to {plain.name}")
                    os.replace(plain.with_name(plain.name + loader.SWAP_SUFFIX), plain)
                step("fsync the directory after the renames")
                fsync_dir(self.dir)
                new = self._new_segment(base, create=False)
                try:
                    new.load(next_base)
                except (IndexError_, CorruptRecordError) as error:  # not expected: it was just written
                    log.warning("%s: cleaned segment %s: %s; rebuilding its indexes", self, new.log_path.name, error)
                    new.recover()
            except BaseException as error:
                self._failed = f"swapping cleaned segment {base} failed: {error}"
                raise self._error(KafkaStorageError, f"{self._failed}; the log is offline until it is "
                                  f"opened again") from error
            self._set_segments(self._segments[:i] + [new] + self._segments[i + len(old):])
            if self.corruption is not None and base <= self.corruption.offset < next_base:
                self.corruption = None  # its segment is gone
            return new

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget idempotent producers silent for producer.id.expiration.ms (1 day)."""
        with self._lock:
            return self.producer_state.remove_expired(now_ms)

    # --- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Flush, snapshot the producer state, mark the shutdown clean, close the files (the
        LogManager then writes the offsets to its log dir's checkpoint files)."""
        with self._lock:
            if self._closed:
                return
            try:
                if not self._failed:
                    self.flush(active_indexes=True)
                    # Snapshot unsynced (it is checksummed); one directory fsync then makes
                    # its rename and the clean-shutdown marker durable together.
                    self.producer_state.take_snapshot(self.log_end_offset, fsync=False)
                    os.close(os.open(self.dir / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT, 0o644))
                    fsync_dir(self.dir)
            except OSError as error:
                # Not marked clean: the next open recovers from the last recovery point.
                raise self._error(KafkaStorageError, f"closing the log in {self.dir}: "
                                  f"{error.strerror or error}") from error
            finally:
                self._closed = True
                for seg in self._segments:
                    try:
                        seg.close()
                    except OSError:
                        pass

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                try:
                    seg.delete()
                except OSError:
                    pass
            shutil.rmtree(self.dir, ignore_errors=True)
