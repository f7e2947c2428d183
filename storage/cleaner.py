"""Log compaction (``cleanup.policy=compact``): Kafka's LogCleaner, one log at a time.

What one cleaning of a log does (``Cleaner.clean``):

- **Dirty section.** From the log's first dirty offset (its entry in the log dir's
  ``cleaner-offset-checkpoint``; the log start offset when it has none, or when the entry lies
  outside [log start, active segment base]) to the first uncleanable offset: the base of the
  first segment that is the active one, is not wholly below the high watermark, or holds a
  record newer than ``min.compaction.lag.ms`` (by its largest timestamp). The active segment is
  never cleaned; nothing at or past the first uncleanable offset is touched.
- **Offset map.** key -> latest offset over the dirty section, keys stored as 16-byte BLAKE2b
  digests (Kafka stores an MD5 of the key: a collision could drop a record, with odds of about
  n^2 / 2^129). Bounded: ``log.cleaner.dedupe.buffer.size`` bytes at ``OFFSET_MAP_ENTRY_BYTES``
  per entry (Kafka's accounting; Python's dict costs more per entry, ~150 bytes, which the
  broker's setting must allow for) times ``log.cleaner.io.buffer.load.factor``. A dirty section
  with more keys than that is cleaned in parts: the map stops before the batch that would
  overflow it, that part is cleaned and checkpointed, and the next part starts there.
- **Rewrite.** Every segment from the log's first one up to the end of the map's part is
  rewritten, in groups merged as Kafka groups them (``group_segments``: the group's bytes fit
  ``segment.bytes``, its index entries ``segment.index.bytes``, its offsets 32-bit relative
  ones). A record is kept unless the map holds its key at a later offset, or it is a tombstone
  (a key and a null value) below the first dirty offset whose first cleaning was at least
  ``delete.retention.ms`` ago. When each offset was first cleaned is kept per partition in
  ``cleaner-history`` (below), by offset, not by segment: merging segments never resets or
  advances a tombstone's clock. Offsets are kept (the dropped ones leave gaps), as is the order
  of what remains.
- **Records without a key** cannot be compacted (see the end of this docstring).
- **Transactional and control batches** (transaction markers) are copied as they are and their
  records stay out of the map: aborted transactions are not tracked yet.
- **Batches.** A batch keeping all its records is copied byte for byte. A batch keeping some is
  re-encoded: this is the one place where the broker re-encodes a batch. The new batch keeps
  the base offset, lastOffsetDelta, producer id, epoch and base sequence, partition leader
  epoch, base and max timestamps, attributes and codec (an lz4 batch stays lz4); the kept
  records' bytes are copied unchanged (their offset and timestamp deltas stay valid because the
  base offset and base timestamp do), then compressed again, and recordCount, batchLength and
  the CRC are recomputed. The max timestamp may then exceed every remaining record's (retention
  and the time index keep seeing the original time). A batch left with no record is dropped,
  except, by Kafka's rule (``LogCleaner``'s ``isBatchLastRecordOfProducer``, RETAIN_EMPTY), the
  batch holding the last data offset of an idempotent producer the log still tracks: it stays
  as an empty batch (header only, no codec, as Kafka's ``writeEmptyHeader``) so the producer's
  epoch and last sequence survive a reload of the producer state from the log.

Crash safety (Kafka's order; storage/loader.py settles whatever a crash leaves):

1. the group's output is written to ``<base>.log.cleaned`` / ``.index.cleaned`` /
   ``.timeindex.cleaned``, fsynced (a crash here: the loader deletes ``*.cleaned``);
2. ``Log.replace_segments`` renames them to ``.swap`` and fsyncs the directory (from here a crash
   is completed by the loader: the ``.swap`` replaces the segments whose base offsets lie in
   [its base, its end)), deletes the old segments, renames the ``.swap`` files to their plain
   names (the log last) and fsyncs the directory;
3. after every group of a part, the log dir's ``cleaner-offset-checkpoint`` (Kafka's name and
   text format) gets the part's end as the log's first dirty offset. A crash before it only
   means that part counts as dirty again;
4. then the partition's ``cleaner-history`` gets ``part_end now``. Raftka's own file (Kafka
   keeps this time in each batch since KIP-534, as a delete horizon replacing the base
   timestamp; here timestamps stay as produced): a text checkpoint (storage/checkpoint.py) of
   ``end_offset cleaned_ms`` entries, offsets below ``end_offset`` and at or past the previous
   entry's first cleaned at ``cleaned_ms``. Written atomically with fsync. A crash between 3
   and 4, or a lost file, leaves clean offsets without a time: the next cleaning records them as
   cleaned "now", which only keeps tombstones longer. Entries whose time is past
   ``delete.retention.ms`` are merged into one (with the latest of their times), and at most
   ``HISTORY_ENTRIES_MAX`` are kept (the oldest merged the same way): merging only ever makes
   a time later.

A segment left out of a swap by a crash (its base past the end of the swapped data) stays as it
was: uncleaned, never lost. ``fault(step)`` is called before each step (tests stop a cleaning
there).

Limits: the offset map (above); reads in ``io_buffer_bytes`` chunks (a batch larger than that is
read whole); one group's output is at most ``segment.bytes``; the bytes read and written pass
``throttle`` (the broker's log.cleaner.io.max.bytes.per.second).

Records without a key: refused at produce time on a compacted topic (Log.append_as_leader,
Kafka's rule); one the cleaner still finds (written before the topic became compacted) is kept.
"""
from __future__ import annotations

import hashlib
import logging
import struct
import threading
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import crc32c

from raftka.common.errors import ConfigError
from raftka.common import records as _records
from raftka.common.records import (
    ATTR_COMPRESSION_MASK,
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_MIN,
    BATCH_OVERHEAD_BYTES,
    COMPRESSION_NONE,
    BatchHeader,
    decode_varint,
    read_header,
    records_section,
)
from raftka.storage.checkpoint import CheckpointError, CheckpointFile, OffsetCheckpointFile
from raftka.storage.index import OFFSET_ENTRY, RELATIVE_OFFSET_MAX, TIME_ENTRY
from raftka.storage.loader import CLEANED_SUFFIX
from raftka.storage.log import CleaningAbortedError, CleaningView, Log
from raftka.storage.segment import AppendedBatch, LogSegment

logger = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # Kafka's name, one per log dir
CLEANER_HISTORY = "cleaner-history"  # Raftka's, one per partition dir (module docstring)
HISTORY_ENTRIES_MAX = 1000
# Kafka's accounting per offset map entry: a 16-byte key hash and an 8-byte offset.
OFFSET_MAP_ENTRY_BYTES = 24
KEY_HASH_BYTES = 16
# Kafka's defaults: log.cleaner.dedupe.buffer.size (128 MiB, for all cleaner threads),
# log.cleaner.io.buffer.load.factor, log.cleaner.io.buffer.size (512 KiB).
DEDUPE_BUFFER_BYTES_DEFAULT = 128 * 1024 * 1024
DEDUPE_BUFFER_LOAD_FACTOR_DEFAULT = 0.9
IO_BUFFER_BYTES_DEFAULT = 512 * 1024

# The header as stored (common/records.py's layout): baseOffset, batchLength,
# partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp,
# producerId, producerEpoch, baseSequence, recordCount.
_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_OVERHEAD_BYTES
_CRC = struct.Struct(">I")
_CRC_OFFSET = ATTRIBUTES_OFFSET - 4


def _key_hash(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=KEY_HASH_BYTES).digest()


class OffsetMap:
    """key hash -> latest offset, at most ``capacity`` entries (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an offset map needs room for at least one key, got {capacity}")
        self.capacity = capacity
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    @classmethod
    def for_buffer(cls, dedupe_buffer_bytes: int, load_factor: float = DEDUPE_BUFFER_LOAD_FACTOR_DEFAULT) -> "OffsetMap":
        return cls(int(dedupe_buffer_bytes * load_factor) // OFFSET_MAP_ENTRY_BYTES)

    def __len__(self) -> int:
        return len(self._offsets)

    def room(self) -> int:
        return self.capacity - len(self._offsets)

    def put(self, key_hash: bytes, offset: int) -> None:
        if key_hash not in self._offsets and len(self._offsets) >= self.capacity:
            raise OverflowError("offset map full")
        self._offsets[key_hash] = offset
        self.latest_offset = max(self.latest_offset, offset)

    def get(self, key_hash: bytes) -> int:
        return self._offsets.get(key_hash, -1)


class _Record(NamedTuple):
    """One record of a batch's (decompressed) records section: its bytes and what the cleaner
    decides on."""

    start: int
    end: int
    offset: int
    key: bytes | None
    tombstone: bool


def _split_records(header: BatchHeader, data: bytes) -> list[_Record]:
    """The records of a records section, each with its byte span (length varint included)."""
    out = []
    i = 0
    n = len(data)
    while i < n:
        start = i
        length, i = decode_varint(data, i)
        end = i + length
        i += 1  # attributes
        _, i = decode_varint(data, i, 10)  # timestamp delta
        offset_delta, i = decode_varint(data, i)
        key_length, i = decode_varint(data, i)
        key = None
        if key_length >= 0:
            key = bytes(data[i:i + key_length])
            i += key_length
        value_length, i = decode_varint(data, i)
        if end > n:
            raise _records.CorruptRecordError(f"batch at offset {header.base_offset}: a record runs past the batch")
        out.append(_Record(start, end, header.base_offset + offset_delta, key, value_length < 0))
        i = end
    if len(out) != header.record_count:
        raise _records.CorruptRecordError(f"batch at offset {header.base_offset} declares {header.record_count} "
                                          f"records but holds {len(out)}")
    return out


def _encode_batch(header: BatchHeader, records: bytes, record_count: int, attributes: int) -> bytes:
    """A batch with ``header``'s fields, ``records`` (already compressed) and a new CRC."""
    out = bytearray(_HEADER.size)
    _HEADER.pack_into(out, 0, header.base_offset, BATCH_LENGTH_MIN + len(records), header.partition_leader_epoch,
                      header.magic, 0, attributes, header.last_offset_delta, header.base_timestamp,
                      header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
                      record_count)
    crc = crc32c.crc32c(records, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    _CRC.pack_into(out, _CRC_OFFSET, crc)
    out += records
    return bytes(out)


def filtered_batch(batch: bytes, keep: Callable[[_Record], bool], keep_empty: bool) -> bytes | None:
    """``batch`` with only the records ``keep`` accepts (module docstring, "Batches"); None when
    nothing is left and ``keep_empty`` is False. ``batch`` is returned itself when every record
    stays."""
    header, data = records_section(batch, 0)
    recs = _split_records(header, data)
    kept = [r for r in recs if keep(r)]
    if len(kept) == len(recs):
        return batch
    if not kept:
        if not keep_empty:
            return None
        return _encode_batch(header, b"", 0, header.attributes & ~ATTR_COMPRESSION_MASK)
    body = b"".join(data[r.start:r.end] for r in kept)
    codec = header.compression
    if codec != COMPRESSION_NONE:
        body = _records._COMPRESS[codec](body)  # the codec the producer chose
    return _encode_batch(header, body, len(kept), header.attributes)


def _batches(seg: LogSegment, io_buffer_bytes: int, start: int = 0,
             throttle: Callable[[int], None] | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of each batch of ``seg`` from byte ``start``, read ``io_buffer_bytes`` at a
    time (a larger batch is read whole); ``throttle(n)`` after each read of n bytes."""
    position = start
    size = seg.size
    while position < size:
        chunk = seg.pread(position, min(io_buffer_bytes, size - position))
        if throttle is not None:
            throttle(len(chunk))
        view = memoryview(chunk)
        used = 0
        while len(chunk) - used >= BATCH_OVERHEAD_BYTES:
            header = read_header(chunk, used)
            if used + header.size > len(chunk):
                break
            yield header, bytes(view[used:used + header.size])
            used += header.size
        if used == 0:  # one batch larger than the buffer
            header = seg.header_at(position)
            yield header, seg.pread(position, header.size)
            used = header.size
        position += used


@dataclass
class CleanerStats:
    """What one ``Cleaner.clean`` did."""

    parts: int = 0
    segments_read: int = 0
    segments_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_kept: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    batches_reencoded: int = 0
    empty_batches_kept: int = 0
    first_dirty_offset: int = 0
    end_offset: int = 0  # the new first dirty offset


@dataclass(frozen=True)
class LogToClean:
    """A log's cleanable state (Kafka's LogToClean): ``dirty_ratio`` = dirty bytes / (clean +
    dirty bytes), over [log start, first uncleanable offset)."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    must_clean: bool  # max.compaction.lag.ms passed for its oldest dirty segment

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _following_bases(segments: list[LogSegment]) -> list[int]:
    return [seg.base_offset for seg in segments[1:]]


def first_uncleanable_offset(view: CleaningView, first_dirty: int, now_ms: int) -> int:
    """The base of the first segment at or past ``first_dirty`` that may not be cleaned (module
    docstring); the active segment's base at most."""
    segments = view.segments
    end = segments[-1].base_offset
    lag = view.config.min_compaction_lag_ms
    for seg, following in zip(segments[:-1], _following_bases(segments)):
        if following <= first_dirty:
            continue  # wholly clean
        if following > view.high_watermark:
            return min(end, seg.base_offset)
        if lag > 0 and seg.largest_timestamp() > now_ms - lag:
            return min(end, seg.base_offset)
    return end


def group_segments(segments: list[LogSegment], segment_bytes: int, index_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments merged while the group's bytes fit ``segment_bytes``, its offset and
    time index entries fit ``index_bytes`` and its offsets stay 32-bit relative to its base
    (Kafka's groupSegmentsBySize; one entry per segment of room for the merged indexes'
    own cadence). ``segments`` ends with the segment after the last one to group (its base
    bounds the last group's offsets); that one is not grouped."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments) - 1:
        group = [segments[i]]
        size = segments[i].size
        offsets = len(segments[i].offset_index) + 1
        times = len(segments[i].time_index) + 1
        i += 1
        while i < len(segments) - 1:
            seg = segments[i]
            last_offset = segments[i + 1].base_offset - 1
            if (size + seg.size > segment_bytes
                    or (offsets + len(seg.offset_index) + 1) * OFFSET_ENTRY.size > index_bytes
                    or (times + len(seg.time_index) + 1) * TIME_ENTRY.size > index_bytes
                    or last_offset - group[0].base_offset > RELATIVE_OFFSET_MAX):
                break
            group.append(seg)
            size += seg.size
            offsets += len(seg.offset_index) + 1
            times += len(seg.time_index) + 1
            i += 1
        groups.append(group)
    return groups


class CleanerCheckpoint:
    """A log dir's ``cleaner-offset-checkpoint``: each compacted log's first dirty offset
    (``topic partition offset`` entries, storage/checkpoint.py). Read once, written whole
    (atomic replace, fsynced) when an entry changes; a bad file reads as empty (every log dirty
    again from its start: more work, nothing lost)."""

    def __init__(self, log_dir: Path) -> None:
        self.file = OffsetCheckpointFile(Path(log_dir) / CLEANER_OFFSET_CHECKPOINT)
        self._lock = threading.Lock()
        try:
            self._offsets = self.file.read() or {}
        except CheckpointError as error:
            logger.warning("%s; every compacted log in %s counts as dirty from its start", error, log_dir)
            self._offsets = {}

    def get(self, topic: str, partition: int) -> int | None:
        with self._lock:
            return self._offsets.get((topic, partition))

    def update(self, topic: str, partition: int, offset: int | None) -> None:
        """Set (or, with None, remove) a log's entry and write the file if it changed."""
        with self._lock:
            key = (topic, partition)
            if self._offsets.get(key) == offset:
                return
            if offset is None:
                del self._offsets[key]
            else:
                self._offsets[key] = offset
            self.file.write(dict(self._offsets), fsync=True)


class CleanerHistory:
    """When each clean offset of a partition was first cleaned (module docstring, step 4)."""

    def __init__(self, partition_dir: Path) -> None:
        self.file = CheckpointFile(Path(partition_dir) / CLEANER_HISTORY, 2)
        try:
            entries = self.file.read() or []
        except CheckpointError as error:
            logger.warning("%s; its clean offsets count as cleaned now", error)
            entries = []
        self.ends = [int(e[0]) for e in entries]
        self.times = [int(e[1]) for e in entries]
        if self.ends != sorted(set(self.ends)):
            logger.warning("%s: entries out of order; its clean offsets count as cleaned now", self.file.path)
            self.ends, self.times = [], []

    @property
    def end(self) -> int:
        return self.ends[-1] if self.ends else 0

    def cleaned_ms(self, offset: int) -> int | None:
        """When ``offset`` was first cleaned; None when unknown."""
        i = bisect_right(self.ends, offset)
        return self.times[i] if i < len(self.ends) else None

    def record(self, end_offset: int, now_ms: int, retention_ms: int) -> None:
        """Offsets from the current end up to ``end_offset`` were first cleaned at ``now_ms``;
        prune, write (fsynced)."""
        if end_offset <= self.end:
            return
        self.ends.append(end_offset)
        self.times.append(now_ms)
        expired = 0
        while expired < len(self.ends) - 1 and self.times[expired] + retention_ms <= now_ms:
            expired += 1
        if expired > 1:  # one entry for all the expired ones: the latest end, the latest time
            self.ends[:expired] = [self.ends[expired - 1]]
            self.times[:expired] = [max(self.times[:expired])]
        while len(self.ends) > HISTORY_ENTRIES_MAX:  # merge the oldest two: a later time only
            self.times[1] = max(self.times[0], self.times[1])
            del self.ends[0], self.times[0]
        self.file.write(list(zip(self.ends, self.times)), fsync=True)

    def truncate(self, offset: int) -> None:
        """A truncation to ``offset``: offsets from it on are new, never cleaned."""
        i = bisect_right(self.ends, offset)
        if i < len(self.ends):
            self.ends[i:] = [offset] if offset > (self.ends[i - 1] if i else 0) else []
            self.times = self.times[:len(self.ends)]
            self.file.write(list(zip(self.ends, self.times)), fsync=True)


class Cleaner:
    """Cleans logs (module docstring). ``dedupe_buffer_bytes``: the offset map's bound
    (log.cleaner.dedupe.buffer.size); ``io_buffer_bytes``: the read size
    (log.cleaner.io.buffer.size). One cleaning at a time per Cleaner; checkpoints are kept per
    log dir (the parent of each log's directory)."""

    def __init__(self, *, dedupe_buffer_bytes: int = DEDUPE_BUFFER_BYTES_DEFAULT,
                 load_factor: float = DEDUPE_BUFFER_LOAD_FACTOR_DEFAULT,
                 io_buffer_bytes: int = IO_BUFFER_BYTES_DEFAULT,
                 throttle: Callable[[int], None] | None = None) -> None:
        if int(dedupe_buffer_bytes * load_factor) < OFFSET_MAP_ENTRY_BYTES:
            raise ConfigError("log.cleaner.dedupe.buffer.size",
                              f"{dedupe_buffer_bytes} bytes hold no offset map entry ({OFFSET_MAP_ENTRY_BYTES} bytes each)")
        if io_buffer_bytes < BATCH_OVERHEAD_BYTES:
            raise ConfigError("log.cleaner.io.buffer.size", f"must be at least {BATCH_OVERHEAD_BYTES}, got {io_buffer_bytes}")
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.load_factor = load_factor
        self.io_buffer_bytes = io_buffer_bytes
        # Called with each read's and write's byte count: log.cleaner.io.max.bytes.per.second
        # (storage/log_cleaner.py) sleeps there.
        self.throttle = throttle
        self._checkpoints: dict[Path, CleanerCheckpoint] = {}
        self._checkpoints_lock = threading.Lock()

    # --- checkpoints -------------------------------------------------------------------------
    def checkpoint_of(self, lg: Log) -> CleanerCheckpoint:
        log_dir = lg.dir.parent
        with self._checkpoints_lock:
            found = self._checkpoints.get(log_dir)
            if found is None:
                found = self._checkpoints[log_dir] = CleanerCheckpoint(log_dir)
            return found

    def first_dirty_offset(self, lg: Log, view: CleaningView | None = None) -> int:
        """The checkpointed first dirty offset, or the log start offset where there is none or it
        lies outside [log start, active segment base] (a truncation or a new log)."""
        view = view or lg.snapshot_for_cleaning()
        found = self.checkpoint_of(lg).get(lg.topic, lg.partition)
        active_base = view.segments[-1].base_offset
        if found is None or not view.log_start_offset <= found <= active_base:
            return view.log_start_offset
        return found

    def truncate_checkpoint(self, lg: Log, offset: int) -> None:
        """After a truncation of ``lg`` to ``offset``: its first dirty offset may not stay above,
        and what is appended from there on was never cleaned."""
        checkpoint = self.checkpoint_of(lg)
        found = checkpoint.get(lg.topic, lg.partition)
        if found is not None and found > offset:
            checkpoint.update(lg.topic, lg.partition, offset)
        CleanerHistory(lg.dir).truncate(offset)

    def forget(self, lg: Log) -> None:
        """A deleted log: drop its entry."""
        self.checkpoint_of(lg).update(lg.topic, lg.partition, None)

    # --- choosing ----------------------------------------------------------------------------
    def to_clean(self, lg: Log, now_ms: int) -> LogToClean | None:
        """``lg``'s cleanable state, or None when it is not compacted or has nothing cleanable."""
        view = lg.snapshot_for_cleaning()
        if not view.config.compact:
            return None
        first_dirty = self.first_dirty_offset(lg, view)
        end = first_uncleanable_offset(view, first_dirty, now_ms)
        clean = dirty = 0
        oldest_dirty_ts = -1
        for seg, following in zip(view.segments[:-1], _following_bases(view.segments)):
            if seg.base_offset >= end:
                break
            if following <= first_dirty:
                clean += seg.size
            else:
                dirty += seg.size
                if oldest_dirty_ts < 0 and seg.first_batch_timestamp >= 0:
                    oldest_dirty_ts = seg.first_batch_timestamp
        if not dirty:
            return None
        must = oldest_dirty_ts >= 0 and now_ms - oldest_dirty_ts > view.config.max_compaction_lag_ms
        return LogToClean(lg, first_dirty, end, clean, dirty, must)

    def filthiest(self, logs: list[Log], now_ms: int) -> LogToClean | None:
        """The log to clean next: one past max.compaction.lag.ms first, else the highest dirty
        ratio at or above its min.cleanable.dirty.ratio (Kafka's grabFilthiestCompactedLog)."""
        best: LogToClean | None = None
        for lg in logs:
            try:
                candidate = self.to_clean(lg, now_ms)
            except Exception as error:  # an offline or closed log is skipped
                logger.debug("%s: not cleanable now: %s", lg, error)
                continue
            if candidate is None:
                continue
            if not candidate.must_clean and candidate.dirty_ratio < lg.config.min_cleanable_dirty_ratio:
                continue
            key = (candidate.must_clean, candidate.dirty_ratio)
            if best is None or key > (best.must_clean, best.dirty_ratio):
                best = candidate
        return best

    # --- cleaning ----------------------------------------------------------------------------
    def clean(self, lg: Log, now_ms: int, *, fault: Callable[[str], None] | None = None) -> CleanerStats:
        """Clean ``lg``'s whole dirty section (in parts when the offset map cannot hold it) and
        checkpoint its new first dirty offset after each part. CleaningAbortedError when its
        segments changed meanwhile; KafkaStorageError from the log; CorruptRecordError for a
        batch that fails its check (the log is left as it was)."""
        step = fault or (lambda _name: None)
        view = lg.snapshot_for_cleaning()
        stats = CleanerStats()
        if not view.config.compact:
            return stats
        first_dirty = stats.first_dirty_offset = stats.end_offset = self.first_dirty_offset(lg, view)
        end = first_uncleanable_offset(view, first_dirty, now_ms)
        checkpoint = self.checkpoint_of(lg)
        history = CleanerHistory(lg.dir)
        retention_ms = view.config.delete_retention_ms
        while first_dirty < end:
            if history.end < first_dirty:  # clean offsets without a time (module docstring)
                step(f"write {CLEANER_HISTORY}")
                history.record(first_dirty, now_ms, retention_ms)
            view = lg.snapshot_for_cleaning()
            offset_map = OffsetMap.for_buffer(self.dedupe_buffer_bytes, self.load_factor)
            part_end = self._build_offset_map(view.segments, first_dirty, end, offset_map)
            self._clean_part(lg, view, first_dirty, part_end, offset_map, history, now_ms, stats, step)
            step(f"write {CLEANER_OFFSET_CHECKPOINT}")
            checkpoint.update(lg.topic, lg.partition, part_end)
            step(f"write {CLEANER_HISTORY}")
            history.record(part_end, now_ms, retention_ms)
            stats.parts += 1
            first_dirty = stats.end_offset = part_end
        if stats.parts:
            logger.info("%s: cleaned [%d, %d) in %d part(s): %d segment(s) of %d bytes into %d of %d bytes; "
                        "%d record(s) removed (%d tombstones), %d kept", lg, stats.first_dirty_offset,
                        stats.end_offset, stats.parts, stats.segments_read, stats.bytes_read,
                        stats.segments_written, stats.bytes_written, stats.records_removed,
                        stats.tombstones_removed, stats.records_kept)
        return stats

    def _build_offset_map(self, segments: list[LogSegment], start: int, end: int, offset_map: OffsetMap) -> int:
        """Fill ``offset_map`` from the batches in [start, end) and return where it stopped:
        ``end``, or the base offset of the first batch it had no room for."""
        for seg, following in zip(segments[:-1], _following_bases(segments)):
            if following <= start:
                continue
            if seg.base_offset >= end:
                break
            found = seg.find(start) if seg.base_offset < start else None
            position = found[0] if found else 0
            for header, batch in _batches(seg, self.io_buffer_bytes, position, self.throttle):
                if header.last_offset < start:
                    continue
                if header.is_control or header.is_transactional:
                    continue  # never compacted (module docstring)
                if header.record_count > offset_map.room():
                    if not len(offset_map):
                        raise ConfigError("log.cleaner.dedupe.buffer.size",
                                          f"the offset map holds {offset_map.capacity} keys, fewer than the "
                                          f"{header.record_count} records of the batch at offset {header.base_offset}")
                    return header.base_offset
                _, data = records_section(batch, 0)
                for record in _split_records(header, data):
                    if record.key is not None:
                        offset_map.put(_key_hash(record.key), record.offset)
        return end

    def _clean_part(self, lg: Log, view: CleaningView, first_dirty: int, part_end: int, offset_map: OffsetMap,
                    history: CleanerHistory, now_ms: int, stats: CleanerStats, step: Callable[[str], None]) -> None:
        segments = view.segments
        # The segments with base offsets below part_end, plus the one after the last (bounds).
        count = sum(1 for seg in segments[:-1] if seg.base_offset < part_end)
        cfg = view.config
        # A tombstone may go once its offset was first cleaned delete.retention.ms ago.
        horizon = now_ms - cfg.delete_retention_ms

        def tombstone_expired(offset: int) -> bool:
            if offset >= first_dirty:
                return False
            cleaned = history.cleaned_ms(offset)
            return cleaned is not None and cleaned <= horizon

        for group in group_segments(segments[:count + 1], cfg.segment_bytes, cfg.segment_index_bytes):
            self._clean_group(lg, view, group, offset_map, tombstone_expired, stats, step)

    def _clean_group(self, lg: Log, view: CleaningView, group: list[LogSegment], offset_map: OffsetMap,
                     tombstone_expired: Callable[[int], bool], stats: CleanerStats,
                     step: Callable[[str], None]) -> None:
        cfg = view.config
        base = group[0].base_offset
        sizes = [seg.size for seg in group]
        cleaned = None
        step(f"create {base:020d}.log{CLEANED_SUFFIX}")
        for suffix in (".log", ".index", ".timeindex"):  # a leftover of an earlier failure
            (lg.dir / f"{base:020d}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)
        cleaned = LogSegment(lg.dir, base, index_interval_bytes=cfg.index_interval_bytes,
                             index_bytes_max=cfg.segment_index_bytes, create=True, suffix=CLEANED_SUFFIX)
        try:
            for seg in group:
                self._copy_segment(seg, cleaned, offset_map, tombstone_expired, view.producer_last_offsets, stats)
                stats.segments_read += 1
                stats.bytes_read += seg.size
                step(f"copied {seg.log_path.name} into {cleaned.log_path.name}")
            step(f"fsync {cleaned.log_path.name}")
            cleaned.flush()
            cleaned.close()
        except BaseException:
            cleaned.file.close()
            for path in (cleaned.log_path, cleaned.offset_index.path, cleaned.time_index.path):
                path.unlink(missing_ok=True)
            raise
        written = cleaned.size
        lg.replace_segments(group, sizes, cleaned, fault=step)
        stats.segments_written += 1
        stats.bytes_written += written

    def _copy_segment(self, seg: LogSegment, cleaned: LogSegment, offset_map: OffsetMap,
                      tombstone_expired: Callable[[int], bool], producer_last: dict[int, int],
                      stats: CleanerStats) -> None:
        pending: list[bytes] = []
        pending_batches: list[AppendedBatch] = []
        pending_bytes = 0

        def keep(record: _Record) -> bool:
            if record.key is None:
                return True  # keyless: cannot be compacted (module docstring)
            if offset_map.get(_key_hash(record.key)) > record.offset:
                return False
            if record.tombstone and tombstone_expired(record.offset):
                stats.tombstones_removed += 1
                return False
            return True

        def write() -> None:
            nonlocal pending, pending_batches, pending_bytes
            if pending:
                cleaned.append(b"".join(pending), pending_batches)
                if self.throttle is not None:
                    self.throttle(pending_bytes)
            pending, pending_batches, pending_bytes = [], [], 0

        for header, batch in _batches(seg, self.io_buffer_bytes, 0, self.throttle):
            if header.is_control or header.is_transactional:
                out: bytes | None = batch
            else:
                keep_empty = header.producer_id >= 0 and producer_last.get(header.producer_id) == header.last_offset
                out = filtered_batch(batch, keep, keep_empty)
                if out is not batch:
                    kept = read_header(out, 0).record_count if out is not None else 0
                    stats.records_removed += header.record_count - kept
                    if out is not None:
                        if kept:
                            stats.batches_reencoded += 1
                        else:
                            stats.empty_batches_kept += 1
            if out is None:
                continue
            stats.records_kept += read_header(out, 0).record_count
            pending_batches.append(AppendedBatch(pending_bytes, len(out), header.base_offset, header.last_offset,
                                                 header.max_timestamp))
            pending.append(out)
            pending_bytes += len(out)
            if pending_bytes >= self.io_buffer_bytes:
                write()
        write()


__all__ = ["CLEANER_HISTORY", "CLEANER_OFFSET_CHECKPOINT", "Cleaner", "CleanerCheckpoint", "CleanerHistory", "CleanerStats", "CleaningAbortedError",
           "LogToClean", "OffsetMap", "filtered_batch", "first_uncleanable_offset", "group_segments"]
