"""Small text checkpoint files, replaced atomically (write a temp file, fsync, rename, fsync dir;
``fsync=False`` where an older file is safe).

Format (Kafka's checkpoint layout): line 1 the format version (0), line 2 the number of entries,
then one entry per line, fields separated by one space. Two kinds of entries:

- ``CheckpointFile``: integers only, as a partition's ``leader-epoch-checkpoint``
  (``epoch start_offset``)::

    0
    2
    0 0
    3 1500

- ``OffsetCheckpointFile``: ``topic partition offset``, one file per log dir for every partition
  in it (``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint``; the LogManager owns them). Topic names are Kafka-legal
  (``[a-zA-Z0-9._-]``, no spaces), so a space separates the fields::

    0
    2
    orders 0 1500
    orders 1 1498

Not checksummed: the atomic rename means a reader sees either the old or the new file, never a
torn one. A file that does not parse (hand-edited, disk trouble) raises ``CheckpointError``; each
caller decides the safe fallback (recover from offset 0, rebuild from batch headers, ...).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

CHECKPOINT_VERSION = 0
CHECKPOINT_ENTRIES_MAX = 1_000_000  # refuse absurd counts instead of building huge lists

# The three offset checkpoints of a log dir (Kafka's names). Older Raftka kept one of each in
# every partition directory: storage/loader.py reads those once and the LogManager deletes them.
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
OFFSET_CHECKPOINTS = (HIGH_WATERMARK_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)

TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's legal topic names
TopicPartition = tuple[str, int]


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


def _read_lines(path: Path) -> list[str] | None:
    """The entry lines of the checkpoint at ``path`` (header checked), or None when it does not
    exist; CheckpointError when it is bad."""
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{path.name}: not a text checkpoint ({error})") from None
    lines = text.splitlines()
    try:
        if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
            raise CheckpointError(f"{path.name}: unknown version or missing header")
        count = int(lines[1])
    except ValueError as error:
        raise CheckpointError(f"{path.name}: {error}") from None
    if not 0 <= count <= CHECKPOINT_ENTRIES_MAX or len(lines) != count + 2:
        raise CheckpointError(f"{path.name}: expected {count} entries, found {len(lines) - 2}")
    return lines[2:]


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
        lines = _read_lines(self.path)
        if lines is None:
            return None
        entries = []
        try:
            for line in lines:
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


class OffsetCheckpointFile:
    """A log dir's checkpoint of one offset per partition (``topic partition offset`` entries,
    see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, offsets: Mapping[TopicPartition, int], *, fsync: bool) -> None:
        """Replace the file with ``offsets``, in the mapping's order (``fsync``: as
        ``write_atomic``)."""
        if len(offsets) > CHECKPOINT_ENTRIES_MAX:
            raise CheckpointError(f"{self.path.name}: {len(offsets)} entries, more than "
                                  f"{CHECKPOINT_ENTRIES_MAX}")
        lines = [f"{topic} {partition} {offset}\n" for (topic, partition), offset in offsets.items()]
        header = f"{CHECKPOINT_VERSION}\n{len(lines)}\n"
        write_atomic(self.path, (header + "".join(lines)).encode(), fsync=fsync)

    def read(self) -> dict[TopicPartition, int] | None:
        """The offsets, or None when the file does not exist; CheckpointError when it is bad (a
        malformed entry, an illegal topic name, a partition listed twice)."""
        lines = _read_lines(self.path)
        if lines is None:
            return None
        offsets: dict[TopicPartition, int] = {}
        for line in lines:
            fields = line.split(" ")
            if (len(fields) != 3 or not TOPIC_NAME.fullmatch(fields[0]) or not fields[1].isdigit()
                    or not fields[2].isdigit()):
                raise CheckpointError(f"{self.path.name}: entry {line[:80]!r} is not 'topic partition offset' "
                                      f"(a legal topic name and two non-negative integers)")
            key = (fields[0], int(fields[1]))
            if key in offsets:
                raise CheckpointError(f"{self.path.name}: {key[0]}-{key[1]} is listed twice")
            offsets[key] = int(fields[2])
        return offsets
