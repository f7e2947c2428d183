"""Sparse per-segment indexes: ``<baseOffset>.index`` (offset -> position) and ``.timeindex``.

Both are lookup aids, never the source of truth: the segment's batches are. Entries are added
at most every ``index.interval.bytes`` of log (and at each roll for the time index), held in
memory as arrays, and appended to the file at flush, roll and close.

File formats (fixed-size big-endian entries, no header, **not checksummed**):

- ``.index``: 8 bytes per entry, ``relative_offset:u32 position:u32``, where relative_offset =
  the base offset of a batch minus the segment's base offset, and position its byte position in
  the ``.log`` file. Both strictly increase.
- ``.timeindex``: 12 bytes per entry, ``timestamp:i64 relative_offset:u32``: the largest batch
  max_timestamp seen in the segment up to and including the batch at relative_offset. Timestamps
  strictly increase, relative offsets do not decrease.

After a crash an index may be short, long or garbage. ``load`` checks its shape against the log
file (size a multiple of the entry size, monotonic, positions inside the log, not more than
``segment.index.bytes``); a failed check, or any segment past the recovery point, gets its
indexes rebuilt from the batch headers (``LogSegment.recover``).
"""
from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")
RELATIVE_OFFSET_MAX = 2**31 - 1  # a segment rolls before its relative offsets would overflow


class IndexError_(ValueError):  # noqa: N801 - distinct from the builtin IndexError
    """An index file failed its sanity check; the caller rebuilds it."""


def _write_all(fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, pos)
        view = view[written:]
        pos += written


class _IndexFile:
    """Shared file handling: append unpersisted entries, truncate, fsync, delete."""

    entry: struct.Struct

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_entries = max(1, max_bytes // self.entry.size)
        self.persisted = 0  # entries already written to the file

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def full(self) -> bool:
        return len(self) >= self.max_entries

    def _pack_from(self, start: int) -> bytes:
        raise NotImplementedError

    def sync_to_file(self, fsync: bool) -> None:
        """Write the entries not yet in the file; with fsync, make them durable."""
        count = len(self)
        if self.persisted == count and not fsync:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self.persisted < count:
                _write_all(fd, self._pack_from(self.persisted), self.persisted * self.entry.size)
                self.persisted = count
            if os.fstat(fd).st_size > count * self.entry.size:
                os.ftruncate(fd, count * self.entry.size)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def rewrite(self) -> None:
        """Write the whole index afresh (after a rebuild), without fsync."""
        self.persisted = 0
        try:
            os.truncate(self.path, 0)
        except FileNotFoundError:
            pass
        self.sync_to_file(fsync=False)

    def delete_file(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _read_raw(self) -> bytes:
        data = self.path.read_bytes()
        if len(data) % self.entry.size:
            raise IndexError_(f"{self.path.name}: size {len(data)} is not a multiple of {self.entry.size}")
        if len(data) // self.entry.size > self.max_entries + 1:  # +1: the time index's roll entry
            raise IndexError_(f"{self.path.name}: more entries than segment.index.bytes allows")
        return data


class OffsetIndex(_IndexFile):
    """Sparse map from a batch's base offset to its byte position in the segment."""

    entry = OFFSET_ENTRY

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, max_bytes)
        self.base_offset = base_offset
        self.relative_offsets = array("I")
        self.positions = array("I")

    def __len__(self) -> int:
        return len(self.relative_offsets)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        assert 0 <= rel <= RELATIVE_OFFSET_MAX, (offset, self.base_offset)
        if self.relative_offsets and (rel <= self.relative_offsets[-1] or position <= self.positions[-1]):
            raise AssertionError(f"index entry ({offset}, {position}) does not advance")
        self.relative_offsets.append(rel)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(base offset, position) of the last indexed batch starting at or before ``offset``;
        (segment base offset, 0) when none is."""
        i = bisect_right(self.relative_offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.relative_offsets[i], self.positions[i]

    def last_entry(self) -> tuple[int, int]:
        if not self.relative_offsets:
            return self.base_offset, 0
        return self.base_offset + self.relative_offsets[-1], self.positions[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for batches starting at or after ``offset``."""
        i = bisect_right(self.relative_offsets, offset - 1 - self.base_offset)
        del self.relative_offsets[i:]
        del self.positions[i:]
        self.persisted = min(self.persisted, i)

    def clear(self) -> None:
        self.truncate_to(self.base_offset)

    def _pack_from(self, start: int) -> bytes:
        pack = self.entry.pack
        return b"".join(pack(r, p) for r, p in zip(self.relative_offsets[start:], self.positions[start:]))

    def load(self, log_size: int) -> None:
        """Read the file and check its shape against a log of ``log_size`` bytes (IndexError_)."""
        data = self._read_raw()
        rels = array("I")
        poss = array("I")
        for rel, pos in self.entry.iter_unpack(data):
            if rels and (rel <= rels[-1] or pos <= poss[-1]):
                raise IndexError_(f"{self.path.name}: entries do not increase")
            if pos >= log_size or rel > RELATIVE_OFFSET_MAX:
                raise IndexError_(f"{self.path.name}: entry points past the end of the log")
            rels.append(rel)
            poss.append(pos)
        self.relative_offsets, self.positions = rels, poss
        self.persisted = len(rels)


class TimeIndex(_IndexFile):
    """Sparse map from the largest timestamp so far to the batch where it was reached."""

    entry = TIME_ENTRY

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, max_bytes)
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.relative_offsets = array("I")

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if it raises the largest timestamp indexed so far."""
        if timestamp <= self.last_timestamp:
            return
        rel = offset - self.base_offset
        if self.relative_offsets and rel < self.relative_offsets[-1]:
            return
        self.timestamps.append(timestamp)
        self.relative_offsets.append(rel)

    def lookup(self, timestamp: int) -> int:
        """An offset from which scanning finds the first batch with max_timestamp >= timestamp:
        the batch of the last entry whose timestamp is below it, or the segment's base offset."""
        i = bisect_right(self.timestamps, timestamp - 1) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self.relative_offsets[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for batches starting at or after ``offset``."""
        keep = bisect_left(self.relative_offsets, offset - self.base_offset)
        del self.timestamps[keep:]
        del self.relative_offsets[keep:]
        self.persisted = min(self.persisted, keep)

    def clear(self) -> None:
        self.truncate_to(self.base_offset)

    def _pack_from(self, start: int) -> bytes:
        pack = self.entry.pack
        return b"".join(pack(t, r) for t, r in zip(self.timestamps[start:], self.relative_offsets[start:]))

    def load(self, next_offset: int) -> None:
        """Read the file and check its shape against a segment ending at ``next_offset``."""
        data = self._read_raw()
        tss = array("q")
        rels = array("I")
        for ts, rel in self.entry.iter_unpack(data):
            if tss and (ts <= tss[-1] or rel < rels[-1]):
                raise IndexError_(f"{self.path.name}: entries do not increase")
            if self.base_offset + rel >= next_offset:
                raise IndexError_(f"{self.path.name}: entry points past the end of the log")
            tss.append(ts)
            rels.append(rel)
        self.timestamps, self.relative_offsets = tss, rels
        self.persisted = len(tss)
