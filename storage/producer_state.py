"""Idempotent-producer state: per producer id, its epoch and its last few batches' sequences.

Why: a producer with ``enable_idempotence`` numbers its batches per partition (producer id,
epoch, base sequence). When it retries a batch whose first attempt was in fact appended, the
leader must answer with the ORIGINAL offsets and append nothing; a gap in sequences or a stale
epoch is refused. The state follows the log: it is updated by every append (leader and
follower), so a follower that becomes leader already knows every producer.

Rules on a leader append of a batch with producer_id >= 0 (as Kafka):
- epoch older than the known epoch -> InvalidProducerEpochError;
- epoch newer than the known one (or an unknown producer): the batch must start at sequence 0,
  else OutOfOrderSequenceNumberError;
- same epoch: a batch whose (first, last) sequence equals one of the last
  ``BATCHES_PER_PRODUCER`` batches is a duplicate (its original offsets are returned);
  otherwise it must start right after the last sequence (wrapping at 2**31), else
  OutOfOrderSequenceNumberError.

Persistence: ``<offset>.snapshot`` files hold the whole state as of ``offset`` (every batch
below it applied). Written at segment roll and at close (temp file + rename). Format: a 4-byte
big-endian CRC-32 (zlib) of the rest, then UTF-8 JSON
``{"version": 1, "offset": N, "producers": [[pid, epoch, last_append_ms, [[first_seq,
last_seq, first_offset, last_offset], ...]], ...]}``. **Checksummed**: a snapshot that fails its
CRC or does not parse is deleted and an older one (or the log itself) is used. On open the
state is the newest good snapshot at or below the log end offset, plus a replay of the batch
headers after it (headers only: records are never decoded). Truncation rebuilds it the same way.
"""
from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from collections import deque
from pathlib import Path
from typing import Callable, Iterable

from raftka.common.errors import CODES, OutOfOrderSequenceNumberError, for_code
from raftka.common.records import BatchHeader
from raftka.storage.checkpoint import write_atomic

log = logging.getLogger(__name__)

InvalidProducerEpochError = for_code(CODES["INVALID_PRODUCER_EPOCH"])
DuplicateSequenceNumberError = for_code(CODES["DUPLICATE_SEQUENCE_NUMBER"])

BATCHES_PER_PRODUCER = 5          # Kafka's max.in.flight.requests.per.connection bound
SNAPSHOTS_KEPT_MAX = 3
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default (1 day)
SEQUENCE_MODULUS = 2**31
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_CRC = struct.Struct(">I")


class ProducerEntry:
    """One producer's epoch and last batches: (first_seq, last_seq, first_offset, last_offset)."""

    __slots__ = ("epoch", "batches", "last_timestamp")

    def __init__(self, epoch: int, last_timestamp: int = -1) -> None:
        self.epoch = epoch
        self.batches: deque[tuple[int, int, int, int]] = deque(maxlen=BATCHES_PER_PRODUCER)
        self.last_timestamp = last_timestamp

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> tuple[int, int] | None:
        for batch in self.batches:
            if batch[0] == first_seq and batch[1] == last_seq:
                return batch[2], batch[3]
        return None


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    """The producer state of one partition log (see the module docstring)."""

    def __init__(self, directory: Path, clock_ms: Callable[[], int]) -> None:
        self.directory = directory
        self.clock_ms = clock_ms
        self._producers: dict[int, ProducerEntry] = {}

    # --- queries -----------------------------------------------------------------------------
    def producers(self) -> dict[int, ProducerEntry]:
        return dict(self._producers)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    # --- the leader's check --------------------------------------------------------------------
    def check_leader_append(self, headers: list[BatchHeader], base_offset: int) -> tuple[int, int] | None:
        """Check every idempotent batch of one append. Returns the original (first, last)
        offsets when the append is a retry of a single batch already in the log; raises
        InvalidProducerEpochError / OutOfOrderSequenceNumberError / DuplicateSequenceNumberError;
        None when the append may go ahead. Changes nothing (``on_append`` does)."""
        pending: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last_seq) within this append
        for header in headers:
            pid = header.producer_id
            if pid < 0:
                continue
            entry = self._producers.get(pid)
            if pid in pending:
                epoch, last_seq = pending[pid]
            elif entry is not None:
                epoch, last_seq = entry.epoch, entry.last_sequence
            else:
                epoch, last_seq = None, -1
            first_seq = header.base_sequence
            if epoch is not None and header.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} sent epoch {header.producer_epoch}, but epoch {epoch} "
                    f"has already written to this partition")
            if epoch is None or header.producer_epoch > epoch:
                if first_seq != 0:
                    known = "an unknown producer" if epoch is None else f"a new epoch {header.producer_epoch}"
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid}: the first batch of {known} must start at sequence 0, "
                        f"got {first_seq}")
            else:
                if entry is not None and pid not in pending:
                    duplicate = entry.find_duplicate(first_seq, header.last_sequence)
                    if duplicate is not None:
                        if len(headers) == 1:
                            return duplicate
                        raise DuplicateSequenceNumberError(
                            f"producer {pid}: batch with sequences {first_seq}-"
                            f"{header.last_sequence} is already in the log")
                expected = (last_seq + 1) % SEQUENCE_MODULUS
                if first_seq != expected:
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid} epoch {header.producer_epoch}: expected sequence "
                        f"{expected}, got {first_seq}")
            pending[pid] = (header.producer_epoch, header.last_sequence)
        return None

    # --- updates -------------------------------------------------------------------------------
    def on_append(self, headers: Iterable[BatchHeader], base_offset: int | None = None) -> None:
        """Record appended batches. ``base_offset``: the offset the first one got (leader
        appends, whose headers carry the producer's offsets); None when the headers already
        carry their log offsets (follower appends, replay)."""
        offset = base_offset
        now = self.clock_ms()
        for header in headers:
            first = header.base_offset if offset is None else offset
            last = first + header.last_offset_delta
            if offset is not None:
                offset = last + 1
            pid = header.producer_id
            if pid < 0:
                continue
            entry = self._producers.get(pid)
            if entry is None or header.producer_epoch > entry.epoch:
                entry = self._producers[pid] = ProducerEntry(header.producer_epoch)
            entry.batches.append((header.base_sequence, header.last_sequence, first, last))
            entry.last_timestamp = now

    def remove_expired(self, now_ms: int, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forget producers silent for ``expiration_ms``. Silence is measured on the log's clock
        (when their last batch was appended, or replayed at open), not by the batches' own
        timestamps, which producers choose."""
        doomed = [pid for pid, e in self._producers.items() if now_ms - e.last_timestamp > expiration_ms]
        for pid in doomed:
            del self._producers[pid]
        return len(doomed)

    def clear(self) -> None:
        self._producers.clear()
        for path in self._snapshot_files():
            path.unlink(missing_ok=True)

    # --- snapshots -----------------------------------------------------------------------------
    def _snapshot_files(self) -> list[Path]:
        found = []
        for name in os.listdir(self.directory):
            if name.endswith(SNAPSHOT_SUFFIX) and name[:20].isdigit() and len(name) == 20 + len(SNAPSHOT_SUFFIX):
                found.append(self.directory / name)
        return sorted(found)

    def take_snapshot(self, offset: int, *, fsync: bool = True) -> None:
        """Write the state as of ``offset`` (every batch below it applied); keep the newest few."""
        body = json.dumps({
            "version": SNAPSHOT_VERSION, "offset": offset,
            "producers": [[pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches]]
                          for pid, e in sorted(self._producers.items())],
        }, separators=(",", ":")).encode()
        write_atomic(snapshot_path(self.directory, offset), _CRC.pack(zlib.crc32(body)) + body,
                     fsync=fsync)
        for path in self._snapshot_files()[:-SNAPSHOTS_KEPT_MAX]:
            path.unlink(missing_ok=True)

    def on_roll(self, base_offset: int) -> None:
        """A new segment starts at ``base_offset``: snapshot the state there (no fsync; the CRC
        catches a torn file)."""
        self.take_snapshot(base_offset, fsync=False)

    def delete_snapshots_below(self, offset: int) -> None:
        """Retention moved the log start offset: drop snapshots before it, keeping the newest."""
        files = self._snapshot_files()
        for path in files[:-1]:
            if int(path.name[:20]) < offset:
                path.unlink(missing_ok=True)

    def _read_snapshot(self, path: Path) -> dict[int, ProducerEntry] | None:
        try:
            data = path.read_bytes()
            if len(data) < 4 or _CRC.unpack_from(data)[0] != zlib.crc32(data[4:]):
                raise ValueError("CRC mismatch")
            doc = json.loads(data[4:])
            if doc.get("version") != SNAPSHOT_VERSION:
                raise ValueError(f"unknown version {doc.get('version')}")
            producers = {}
            for pid, epoch, last_ts, batches in doc["producers"]:
                entry = ProducerEntry(int(epoch), int(last_ts))
                for first_seq, last_seq, first, last in batches:
                    entry.batches.append((int(first_seq), int(last_seq), int(first), int(last)))
                producers[int(pid)] = entry
            return producers
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("producer snapshot %s is unusable (%s); deleting it", path, error)
            path.unlink(missing_ok=True)
            return None

    def load(self, headers_from: Callable[[int], Iterable[BatchHeader]], log_start_offset: int,
             log_end_offset: int) -> None:
        """Rebuild the state: newest good snapshot at or below the log end offset, then replay
        the batch headers after it. Snapshots past the log end (a truncated tail) are deleted."""
        self._producers = {}
        start = log_start_offset
        for path in reversed(self._snapshot_files()):
            offset = int(path.name[:20])
            if offset > log_end_offset:
                path.unlink(missing_ok=True)
                continue
            producers = self._read_snapshot(path)
            if producers is not None:
                self._producers = producers
                start = max(offset, log_start_offset)
                break
        if start < log_end_offset:
            self.on_append(headers_from(start))
