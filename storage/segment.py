"""One log segment: ``<baseOffset>.log`` plus its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of RecordBatch v2 batches (common/records.py),
exactly as they travel on the wire; the file name is the segment's base offset, zero-padded to
20 digits. Each batch is checksummed by its own CRC-32C (attributes to end); baseOffset,
batchLength and partitionLeaderEpoch are outside the CRC and are checked by structure
instead (length within the file, offsets increasing from the segment's base offset). Offsets
are contiguous except in a segment the log cleaner rewrote (storage/cleaner.py): there a gap
may follow any batch, so the check is that each batch starts at or after the previous batch's
end (Kafka's rule), and exactly at an offset index entry's offset.

Contract:
- ``append`` writes whole batches at the end with positional writes; if the write fails the
  file is cut back to its previous size, so a failed append leaves nothing behind.
- Reads (``read``, ``find``, ``scan_headers``) use positional reads of the file and never look
  past ``size`` (bytes known to be whole batches).
- ``find`` and ``check_batches`` (the log's read path) raise ``CorruptBatchError`` for a batch
  that does not decode, runs past the end of the file, goes back in offsets, or (only
  ``check_batches``, which sees the whole batch) fails its CRC: with the file, the batch's byte
  position and the offset it should have begun with, so the log can cut there.
- ``recover`` re-validates every batch from position 0 (length, magic, CRC, increasing
  offsets), rebuilds both indexes, and truncates the file at the first bad byte.
- ``flush`` fsyncs the log file (unless this process fsynced it since its last write) and both
  indexes.
- The ``.log`` file's descriptor comes from a ``FileHandleCache`` (storage/file_handles.py,
  bounded by ``log.open.files.max``): it is opened on first use and may be closed while the
  segment is idle; every system call on the file goes through ``self.file``. ``close`` and
  ``delete`` take the file out of the cache.
Not thread-safe by itself; ``Log`` serialises access (the cache is safe across logs).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, NamedTuple

from raftka.common.errors import CorruptRecordError
from raftka.common.records import (
    BATCH_LENGTH_OFFSET,
    BATCH_OVERHEAD_BYTES,
    LOG_OVERHEAD_BYTES,
    BatchHeader,
    decode_batch,
    read_header,
    validate_batch,
)
from raftka.storage.file_handles import FileHandleCache, segment_files
from raftka.storage.index import RELATIVE_OFFSET_MAX, IndexError_, OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(name: str) -> int | None:
    stem, dot, _ = name.partition(".")
    if not dot or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class AppendedBatch(NamedTuple):
    """Where one appended batch sits, for the indexes: position relative to the write."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class CorruptBatchError(CorruptRecordError):
    """A batch of a segment file failed its check on read. ``path`` and ``position`` say where
    (the batch's first byte), ``offset`` the offset the batch should have begun with (so every
    offset from it on is unreadable here), ``cause`` which check failed: "crc", "header" (does not
    decode, or runs past the end of the file), "offsets" (going back) or "index" (the offset
    index points at another batch)."""

    def __init__(self, path: Path, position: int, offset: int, cause: str, problem: str) -> None:
        self.path = path
        self.position = position
        self.offset = offset
        self.cause = cause
        self.problem = problem
        self.checked_bytes = 0  # check_batches: bytes of whole good batches before this one
        super().__init__(f"{path} at byte {position} (offset {offset}): {problem}")


class RecoveryResult(NamedTuple):
    valid_bytes: int
    truncated_bytes: int
    next_offset: int
    headers: list[BatchHeader]
    problem: str | None


class LogSegment:
    """A segment file and its two sparse indexes (see the module docstring for the contract)."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 index_bytes_max: int, create: bool, files: FileHandleCache | None = None,
                 suffix: str = "") -> None:
        # ``suffix``: ".cleaned" for the log cleaner's output (storage/cleaner.py), which is
        # renamed to the plain names by the swap protocol; "" for a segment of the log.
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix
        self.log_path = directory / (file_name(base_offset, LOG_SUFFIX) + suffix)
        self.index_interval_bytes = index_interval_bytes
        files = segment_files() if files is None else files
        if create:  # a new segment is the active one: written next, so opened now
            self.file = files.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            self.size = 0
        else:  # opened on first use: loading thousands of logs opens only what it reads
            self.size = os.stat(self.log_path).st_size
            self.file = files.file(self.log_path, os.O_RDWR)
        self.offset_index = OffsetIndex(directory / (file_name(base_offset, INDEX_SUFFIX) + suffix),
                                        base_offset, index_bytes_max)
        self.time_index = TimeIndex(directory / (file_name(base_offset, TIME_INDEX_SUFFIX) + suffix),
                                    base_offset, index_bytes_max)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp = -1  # Kafka rolls by the first batch's timestamp
        self.created_ms = -1             # ... or by the time of the first append when none
        self.bytes_since_last_index_entry = 0

    # --- appends -----------------------------------------------------------------------------
    def append(self, data: bytes, batches: list[AppendedBatch]) -> None:
        """Write ``data`` (whole batches) at the end; index the batches. OSError leaves the file
        as it was (the partial write is cut off) and is re-raised."""
        start = self.size
        try:
            self.file.write_at(data, start)
        except OSError:
            try:
                self.file.truncate(start)
            except OSError:
                pass  # the Log marks itself failed; recovery cuts the tail at next open
            raise
        self.size = start + len(data)
        for batch in batches:
            self._index_batch(start + batch.position, batch.size, batch.base_offset,
                              batch.max_timestamp)
        last = batches[-1]
        self.next_offset = last.last_offset + 1

    def _index_batch(self, position: int, size: int, base_offset: int, max_timestamp: int) -> None:
        if position == 0:
            self.first_batch_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    @property
    def indexes_full(self) -> bool:
        # Asked at every append: the two indexes' lengths read directly, not through .full.
        offsets, times = self.offset_index, self.time_index
        return len(offsets.relative_offsets) >= offsets.max_entries or len(times.timestamps) >= times.max_entries

    def rolling_timestamp(self, now_ms: int) -> int:
        """The time this segment's age is counted from (first batch's timestamp, as Kafka)."""
        if self.first_batch_timestamp >= 0:
            return self.first_batch_timestamp
        if self.created_ms < 0:
            self.created_ms = now_ms
        return self.created_ms

    def on_become_inactive(self) -> None:
        """At roll: make the time index end with the segment's largest timestamp, and write
        both indexes to their files, fsynced (flush() skips the active segment's indexes; the
        log data itself is fsynced by the next flush)."""
        if self.max_timestamp > self.time_index.last_timestamp:
            self.time_index.timestamps.append(self.max_timestamp)
            self.time_index.relative_offsets.append(self.offset_of_max_timestamp - self.base_offset)
        self.offset_index.sync_to_file(fsync=True)
        self.time_index.sync_to_file(fsync=True)

    # --- reads -------------------------------------------------------------------------------
    def pread(self, position: int, length: int) -> bytes:
        """``length`` bytes at ``position`` (fewer only at the end of the file)."""
        return self.file.pread(length, position)

    def header_at(self, position: int) -> BatchHeader:
        return read_header(self.pread(position, BATCH_OVERHEAD_BYTES), 0)

    def scan_headers(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``position`` up to ``end`` (default: size)."""
        end = self.size if end is None else end
        while position < end:
            header = self.header_at(position)
            yield position, header
            position += header.batch_length + LOG_OVERHEAD_BYTES

    def checked_header(self, position: int, expected_offset: int) -> BatchHeader:
        """The header of the batch at ``position``, which must begin at ``expected_offset`` and
        end inside the file; CorruptBatchError otherwise."""
        try:
            header = self.header_at(position)
        except CorruptRecordError as error:
            raise CorruptBatchError(self.log_path, position, expected_offset, "header",
                                    error.message.replace("at position 0", f"at byte {position}")) from None
        if header.base_offset < expected_offset:
            raise CorruptBatchError(self.log_path, position, expected_offset, "offsets",
                                    f"the batch there begins at offset {header.base_offset}, "
                                    f"expected {expected_offset} or later")
        if position + header.size > self.size:
            raise CorruptBatchError(self.log_path, position, expected_offset, "header",
                                    f"the batch declares {header.size} bytes, past the end of the "
                                    f"file ({self.size - position} bytes left)")
        return header

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``. The headers
        on the way must decode and continue the offsets (no CRC: the caller checks what it reads);
        CorruptBatchError otherwise."""
        indexed_offset, position = self.offset_index.lookup(offset)
        expected = indexed_offset
        while position < self.size:
            try:
                header = self.checked_header(position, expected)
                if position and expected == indexed_offset and header.base_offset != indexed_offset:
                    # An index entry names a batch's base offset exactly, gaps or not.
                    raise CorruptBatchError(self.log_path, position, expected, "offsets",
                                            f"the batch there begins at offset {header.base_offset}, "
                                            f"expected {expected}")
            except CorruptBatchError as error:
                if error.cause == "offsets" and position and expected == indexed_offset:
                    # The index or the batch is wrong, and which one cannot be told: nothing in
                    # this segment can be located, so the damage is counted from its start (a
                    # boundary for certain, should the log be cut there).
                    raise CorruptBatchError(self.log_path, 0, self.base_offset, "index",
                                            f"{self.offset_index.path.name} says offset {indexed_offset} "
                                            f"is at byte {position}: {error.problem}") from None
                raise
            if header.last_offset >= offset:
                return position, header
            expected = header.next_offset
            position += header.size
        return None

    def check_batches(self, data: bytes, position: int, expected_offset: int, limit: int | None = None) -> int:
        """Check the batches at the start of ``data``, read from ``position``: each decodes, ends
        inside the file, continues the offsets from ``expected_offset`` and passes its CRC-32C.
        Stops before the first batch reaching offset ``limit`` and at a batch that ``data`` holds
        only part of (a read cut at its byte budget). Returns how many bytes of whole batches
        passed; CorruptBatchError for the first that did not (its ``checked_bytes``: how many
        passed before it).

        The read path's one cost beyond the pread: a CRC-32C per batch read from the file (in C,
        tens of GB/s); the tail cache serves most fetches from memory without it."""
        total = len(data)
        pos = 0
        expected = expected_offset
        try:
            while total - pos >= LOG_OVERHEAD_BYTES:
                where = position + pos
                size = int.from_bytes(data[pos + BATCH_LENGTH_OFFSET:pos + LOG_OVERHEAD_BYTES], "big",
                                      signed=True) + LOG_OVERHEAD_BYTES
                if size < BATCH_OVERHEAD_BYTES or where + size > self.size:
                    raise CorruptBatchError(self.log_path, where, expected, "header",
                                            f"the batch declares {size} bytes; the file has "
                                            f"{self.size - where} from there")
                if total - pos < size:
                    break  # cut by the read's byte budget
                try:
                    header = validate_batch(data, pos)
                except CorruptRecordError as error:
                    if error.stored_crc is not None:
                        raise CorruptBatchError(self.log_path, where, expected, "crc",
                                                f"the batch failed its CRC check (stored crc {error.stored_crc:#010x}, "
                                                f"computed {error.computed_crc:#010x})") from None
                    raise CorruptBatchError(self.log_path, where, expected, "header",
                                            error.message.replace(f"at position {pos}", f"at byte {where}")) from None
                if header.base_offset < expected:
                    raise CorruptBatchError(self.log_path, where, expected, "offsets",
                                            f"the batch there begins at offset {header.base_offset}, "
                                            f"expected {expected} or later")
                if limit is not None and header.last_offset >= limit:
                    break
                expected = header.next_offset
                pos += size
        except CorruptBatchError as error:
            error.checked_bytes = pos
            raise
        return pos

    def find_by_timestamp(self, timestamp: int, min_offset: int = 0) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record at or past ``min_offset`` whose timestamp is
        >= ``timestamp`` (Kafka's ListOffsets by timestamp), or None.

        The time index and batch headers (max_timestamp) find the first batch that can hold
        such a record without decoding anything; only that batch is then decoded (CRC checked),
        because record timestamps inside a batch need not be in order.
        """
        if self.max_timestamp < timestamp:
            return None
        start_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(start_offset, min_offset))
        for pos, header in self.scan_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < min_offset:
                continue
            try:
                _, records = decode_batch(self.pread(pos, header.size), 0)
            except CorruptRecordError as error:
                raise CorruptBatchError(self.log_path, pos, header.base_offset,
                                        "crc" if error.stored_crc is not None else "header",
                                        error.message.replace("at position 0", f"at byte {pos}")) from None
            for record in records:
                if record.offset >= min_offset and record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return None

    def largest_timestamp(self) -> int:
        """For retention: the largest record timestamp, or the file's mtime when there is none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(self.file.stat().st_mtime * 1000)

    # --- opening and recovery ----------------------------------------------------------------
    def load(self, next_offset_hint: int | None) -> None:
        """Trust the segment (it is below the recovery point): load its indexes, find its end.

        ``next_offset_hint`` is the next segment's base offset (None for the last segment,
        whose tail after the last index entry is scanned). Raises IndexError_ or
        CorruptRecordError when something does not add up; the caller then runs ``recover``.
        """
        if not self.offset_index.path.exists() or not self.time_index.path.exists():
            raise IndexError_("index file missing")
        self.offset_index.load(self.size)
        if self.size == 0:
            self.next_offset = self.base_offset
        else:
            last_offset, position = self.offset_index.last_entry()
            header = self.header_at(position)
            if position == 0 and header.base_offset >= last_offset:
                pass  # no entry: a cleaned segment's first batch may start past its base
            elif header.base_offset != last_offset:
                raise IndexError_(f"{self.offset_index.path.name}: last entry points at "
                                  f"offset {header.base_offset}, not {last_offset}")
            next_offset = None
            for pos, header in self.scan_headers(position):
                if pos + header.batch_length + LOG_OVERHEAD_BYTES > self.size:
                    raise CorruptRecordError(f"{self.log_path.name}: batch at {pos} runs past the end")
                next_offset = header.next_offset
            assert next_offset is not None
            if next_offset_hint is not None and next_offset > next_offset_hint:
                raise CorruptRecordError(f"{self.log_path.name}: ends at {next_offset}, "
                                         f"past the next segment's base {next_offset_hint}")
            self.next_offset = next_offset
            self.bytes_since_last_index_entry = self.size - position
        self.time_index.load(max(self.next_offset, self.base_offset + 1))
        if self.time_index.timestamps:
            self.max_timestamp = self.time_index.timestamps[-1]
            self.offset_of_max_timestamp = self.base_offset + self.time_index.relative_offsets[-1]
        if self.size:
            self.first_batch_timestamp = self.header_at(0).max_timestamp

    def recover(self) -> RecoveryResult:
        """Validate every batch from the start; rebuild the indexes; cut the file after the last
        good batch. Returns what was kept and why the rest (if any) was cut."""
        self.offset_index.clear()
        self.time_index.clear()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = -1
        self.bytes_since_last_index_entry = 0
        expected = self.base_offset
        headers: list[BatchHeader] = []
        position = 0
        problem: str | None = None
        size = self.file.size()
        if size:
            with self.file.map_read(size) as mapped:
                while position < size:
                    try:
                        header = validate_batch(mapped, position)
                    except CorruptRecordError as error:
                        problem = error.message
                        break
                    if header.base_offset < expected:
                        problem = (f"batch at position {position} has base offset "
                                   f"{header.base_offset}, expected {expected} or later")
                        break
                    # The base offset lies outside the CRC: a damaged one can leap past what a
                    # segment's relative offsets can hold (Kafka's ensureOffsetInRange).
                    if header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
                        problem = (f"batch at position {position} ends at offset {header.last_offset}, "
                                   f"past what segment {self.base_offset} can hold")
                        break
                    headers.append(header)
                    self._index_batch(position, header.size, header.base_offset, header.max_timestamp)
                    expected = header.next_offset
                    position += header.size
        truncated = size - position
        if truncated:
            self.file.truncate(position)
        self.size = position
        self.next_offset = expected
        self.offset_index.rewrite()
        self.time_index.rewrite()
        return RecoveryResult(position, truncated, expected, headers, problem)

    # --- truncation, flush, close ------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed.
        The segment then ends at the base offset of the first removed batch."""
        found = self.find(offset)
        if found is None:
            return 0
        position, header = found
        return self.truncate_at(position, header.base_offset)

    def truncate_at(self, position: int, next_offset: int) -> int:
        """Cut the file at ``position``, a batch boundary where offset ``next_offset`` begins
        (``truncate_to``, or a corrupt batch a read found there: nothing at or past ``position``
        is read). Returns bytes removed."""
        removed = self.size - position
        self.file.truncate(position)
        self.size = position
        self.next_offset = next_offset
        self.offset_index.truncate_to(next_offset)
        self.time_index.truncate_to(next_offset)
        # Recompute the largest timestamp and the index cadence from what is left.
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        _, last_position = self.offset_index.last_entry()
        self.bytes_since_last_index_entry = 0
        for pos, h in self.scan_headers(0):
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.base_offset
            if pos >= last_position:
                self.bytes_since_last_index_entry += h.size
        if self.size == 0:
            self.first_batch_timestamp = -1
            self.created_ms = -1
        self.offset_index.sync_to_file(fsync=False)
        self.time_index.sync_to_file(fsync=False)
        return removed

    def flush(self, *, indexes: bool = True) -> None:
        """Make the log file durable (fsync), and both indexes unless ``indexes`` is False. The
        active segment's indexes are rebuilt after any unclean stop, so writing them at every
        flush would buy nothing (and their growing files make each fsync's journal commit
        heavier); they reach their files at roll and close. A log file this process fsynced
        since its last write is skipped (the cache does not reopen it)."""
        self.file.fsync()
        if indexes:
            self.offset_index.sync_to_file(fsync=True)
            self.time_index.sync_to_file(fsync=True)

    def trim_to_size(self) -> None:
        """Cut the file back to ``size`` when a failed write left bytes past it (OSError when
        that fails too)."""
        if self.file.size() != self.size:
            self.file.truncate(self.size)

    def close(self) -> None:
        if not self.file.closed:
            try:
                self.offset_index.sync_to_file(fsync=False)
                self.time_index.sync_to_file(fsync=False)
            finally:
                self.file.close()

    def delete(self) -> None:
        """Close and remove the segment's files."""
        self.file.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"
