"""The leader-epoch cache: which leader epoch started at which offset, persisted in
``leader-epoch-checkpoint`` (a text checkpoint, see storage/checkpoint.py, entries
``epoch start_offset``).

Followers and new leaders use ``end_offset_for`` (OffsetsForLeaderEpoch) to find where their log
diverges from the leader's, instead of trusting the high watermark. Entries are kept sorted with
both epoch and start offset strictly increasing.

After a crash the checkpoint may lag the log (an epoch's first batch was appended but the
checkpoint not yet replaced): recovery re-assigns from the partitionLeaderEpoch of each
recovered batch, and truncates entries past the log end offset. A missing or unreadable file is
rebuilt from the batch headers of the whole log.

A new epoch (``assign``: a leader change, or a batch of a new epoch) changes memory only; the
file is written, with an fsync, by ``sync``, which the log calls before it moves the recovery
point. Recovery re-assigns epochs from the batches past the recovery point, so an entry the file
lacks after a crash is one recovery finds again. Kafka writes the file at each new epoch (without
an fsync since KAFKA-15046); here even that write was the cost: the first records of thousands of
new partitions (or the first after a leader change) each created or rewrote a file on the event
loop, ~0.03 ms idle and ~1 ms when other writers fill the filesystem's journal: half of a
follower's time in a produce spread over 5,000 new partitions.
Truncations, rare and not re-derivable, still fsync at once, except those of opening a log: the
loader truncates to the recovered log end and log start at every open, so the entries it drops
only leave memory; the file keeps them until the next write of the cache (``sync``).
A crash before that loses nothing, the next open drops them again. (A restart of a broker would
otherwise rewrite the file, temp file and rename, of every partition whose latest epoch starts at
its log end, as a leader's does until its first record: most of opening 10,000 logs.)
"""
from __future__ import annotations

import logging
from bisect import bisect_right
from pathlib import Path
from typing import Callable

from raftka.storage.checkpoint import CheckpointFile

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

log = logging.getLogger(__name__)


class LeaderEpochCache:
    """epoch -> start offset, with Kafka's end-offset-for-epoch lookup."""

    def __init__(self, directory: Path, log_end_offset: Callable[[], int],
                 entries: list[tuple[int, int]] | None = None) -> None:
        self.checkpoint = CheckpointFile(directory / LEADER_EPOCH_CHECKPOINT, 2)
        self._log_end_offset = log_end_offset
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self._unsynced = False  # the file lags the entries or is not fsynced (module docstring)
        for epoch, start in entries or []:
            self._assign(epoch, start)

    # --- queries -----------------------------------------------------------------------------
    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 when no epoch is known."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def epoch_entries(self) -> list[tuple[int, int]]:
        """All (epoch, start_offset) entries, oldest first."""
        return list(zip(self._epochs, self._starts))

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds ``offset`` (-1 when before the first entry)."""
        i = bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer for ``requested_epoch``: (epoch, end_offset).

        - requested is the latest epoch: (latest, log end offset);
        - otherwise the largest known epoch <= requested, and the start offset of the first
          epoch after it (where the requested epoch's records end on this replica);
        - requested older than every entry: (requested, start offset of the first entry);
        - requested newer than the latest, unknown (-1), or no entries: (-1, -1).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, self._log_end_offset()
        higher = bisect_right(self._epochs, requested_epoch)
        if higher >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    # --- changes -----------------------------------------------------------------------------
    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0:
            return False
        if self._epochs:
            latest = self._epochs[-1]
            if epoch == latest:
                return False  # the epoch's first offset is already known
            if epoch < latest:
                log.warning("leader epoch %d at offset %d is older than the latest epoch %d; ignored",
                            epoch, start_offset, latest)
                return False
            # A newer epoch starting at or before earlier entries replaces them (they held no
            # records on this replica).
            while self._starts and self._starts[-1] >= start_offset:
                self._epochs.pop()
                self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``: in memory until ``sync`` (module
        docstring)."""
        if self._assign(epoch, start_offset):
            self._unsynced = True

    def truncate_from_end(self, end_offset: int, *, fsync: bool = True) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there).
        ``fsync=False``: for opening a log, which truncates again at every open (as Kafka's
        truncateFromEndAsyncFlush): in memory only, written by the next ``sync`` or ``assign``."""
        i = bisect_right(self._starts, end_offset - 1)
        if i < len(self._starts):
            del self._epochs[i:]
            del self._starts[i:]
            self._write(fsync)

    def truncate_from_start(self, start_offset: int, *, fsync: bool = True) -> None:
        """Drop entries wholly below ``start_offset``; the one holding it now starts there.
        ``fsync``: as ``truncate_from_end``."""
        i = bisect_right(self._starts, start_offset) - 1
        if i < 0 or (i == 0 and self._starts[0] == start_offset):
            return
        epoch = self._epochs[i]
        del self._epochs[:i + 1]
        del self._starts[:i + 1]
        self._epochs.insert(0, epoch)
        self._starts.insert(0, start_offset)
        self._write(fsync)

    def _write(self, fsync: bool) -> None:
        if fsync:
            self.flush()
        else:
            self._unsynced = True  # deferred (module docstring): the file holds a superset

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()
        self.flush()

    def flush(self) -> None:
        self.checkpoint.write(self.epoch_entries())
        self._unsynced = False

    def sync(self) -> None:
        """Make the entries durable: those ``assign`` wrote, and an opening truncation not written
        yet (a write and an fsync only when there are some)."""
        if self._unsynced:
            self.flush()
