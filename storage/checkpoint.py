"""Small text checkpoint files, replaced atomically (write a temp file, fsync, rename, fsync dir),
or, where an older or unreadable file is safe (the high watermark, the leader-epoch cache's
unsynced entries), overwritten in place.

Format (Kafka's checkpoint layout): line 1 the format version (0), line 2 the number of entries,
then one entry per line, fields separated by one space, all integers::

    0
    2
    0 0
    3 1500

Not checksummed: the atomic rename means a reader sees either the old or the new file, never a
torn one. A file that does not parse (hand-edited, disk trouble) raises ``CheckpointError``; each
caller decides the safe fallback (recover from offset 0, rebuild from batch headers, ...).
"""
from __future__ import annotations

import os
from pathlib import Path

CHECKPOINT_VERSION = 0
CHECKPOINT_ENTRIES_MAX = 1_000_000  # refuse absurd counts instead of building huge lists


class CheckpointError(ValueError):
    """A checkpoint file exists but is not a valid checkpoint."""


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or unlink inside it survives a machine crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename over, fsync the directory.
    Without ``fsync`` the rename still makes the swap atomic for readers and process crashes;
    only a machine crash may then lose (or, for checksummed files, tear) the new content."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


class CheckpointFile:
    """One checkpoint file whose entries are tuples of ``width`` integers."""

    def __init__(self, path: Path, width: int) -> None:
        self.path = Path(path)
        self.width = width

    def write(self, entries: list[tuple[int, ...]], *, fsync: bool = True) -> None:
        """Replace the file with ``entries`` (``fsync``: as ``write_atomic``)."""
        write_atomic(self.path, self._text(entries), fsync=fsync)

    def _text(self, entries: list[tuple[int, ...]]) -> bytes:
        lines = [str(CHECKPOINT_VERSION), str(len(entries))]
        for entry in entries:
            assert len(entry) == self.width, entry
            lines.append(" ".join(str(int(v)) for v in entry))
        return ("\n".join(lines) + "\n").encode()

    def read(self) -> list[tuple[int, ...]] | None:
        """The entries, or None when the file does not exist; CheckpointError when it is bad."""
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return None
        except (UnicodeDecodeError, ValueError) as error:
            raise CheckpointError(f"{self.path.name}: not a text checkpoint ({error})") from None
        lines = text.splitlines()
        try:
            if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
                raise CheckpointError(f"{self.path.name}: unknown version or missing header")
            count = int(lines[1])
            if not 0 <= count <= CHECKPOINT_ENTRIES_MAX or len(lines) != count + 2:
                raise CheckpointError(f"{self.path.name}: expected {count} entries, found {len(lines) - 2}")
            entries = []
            for line in lines[2:]:
                fields = tuple(int(f) for f in line.split(" "))
                if len(fields) != self.width:
                    raise CheckpointError(f"{self.path.name}: entry {line!r} is not {self.width} integers")
                entries.append(fields)
        except ValueError as error:
            raise CheckpointError(f"{self.path.name}: {error}") from None
        return entries

    def read_value(self, default: int) -> int:
        """For one-integer checkpoints: the value, or ``default`` when missing or empty."""
        entries = self.read()
        if not entries:
            return default
        return entries[0][0]

    def write_value(self, value: int) -> None:
        self.write([(value,)])

    def overwrite_value(self, value: int) -> None:
        """For one-integer checkpoints written often (the high watermark): ``overwrite``."""
        self.overwrite([(value,)])

    def overwrite(self, entries: list[tuple[int, ...]]) -> None:
        """For checkpoints written often where an older or unreadable file is safe (the high
        watermark; the leader-epoch cache's unsynced entries, rebuilt from the batches): the
        text written over the file's bytes in place, without a temp file, rename or fsync; a
        missing file is created in place. On this box's ext4 a temp file and a rename cost
        ~0.23 ms idle (~0.5 ms under load; the rename flushes the new file's data), an in-place
        write ~0.005 ms: at 10,000 partitions a pass (or a leader change of each) would
        otherwise cost seconds of a broker's event loop. A write of a few bytes at offset 0 is
        seen whole; a machine crash may leave the old content, and a crash between a shorter
        write and the truncation behind it leaves a file that does not parse (CheckpointError:
        the caller's fallback)."""
        data = self._text(entries)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
            if os.fstat(fd).st_size > len(data):
                os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
