"""Opening a partition directory: Kafka's LogLoader, split from the running ``Log``.

``load`` runs once, from ``Log.open``, before the Log holds anything, and returns what it found
(``LoadedLog``); the Log starts from that. It takes the log start offset, recovery point and high
watermark the LogManager read from its log dir's checkpoint files (``CheckpointedOffsets``; a
partition directory of an older Raftka still has its own files, read where the log dir's have no
entry, and reported in ``LoadedLog.legacy_checkpoints`` for the LogManager to delete once its
files cover the partition). It removes leftovers (``.tmp`` files, indexes whose segment is
gone, segments wholly below the log start offset), trusts segments below the recovery point
(indexes checked, rebuilt if bad) and re-validates every batch from there on, cutting the log at
the first batch that fails its length or CRC check. It then rebuilds the leader epoch cache and the producer state and sets
the log start offset, high watermark and recovery point.

The log cleaner's files (storage/cleaner.py) are settled first, as Kafka's LogLoader does:
``*.cleaned`` files (a cleaning interrupted before its output was complete) are deleted; each
``<base>.log.swap`` (a complete, fsynced cleaned segment whose swap was interrupted) replaces the
segments whose base offsets lie in [base, the swap's end) and is renamed to ``<base>.log``, its
``.index.swap`` / ``.timeindex.swap`` with it (indexes found missing are rebuilt). A segment the
cleaner rewrote may end before the next one begins (the records it dropped leave a gap): only a
segment recovery had to cut drops the segments after it. After a clean shutdown the recovery point
is the log end; after a crash it stays where it was, nothing is fsynced, and the next flush makes
what recovery validated durable (as Kafka's LogLoader). The broker's LogManager opens the logs of
a log dir on several threads (num.recovery.threads.per.data.dir).
"""
from __future__ import annotations

import logging
import os
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from raftka.common.errors import CorruptRecordError
from raftka.common.records import BATCH_OVERHEAD_BYTES, BatchHeader, read_header
from raftka.storage.checkpoint import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    OFFSET_CHECKPOINTS,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    CheckpointFile,
    fsync_dir,
)
from raftka.storage.epoch_cache import LeaderEpochCache
from raftka.storage.index import IndexError_
from raftka.storage.producer_state import ProducerStateManager
from raftka.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    file_name,
    parse_base_offset,
)

# Written by a clean close, removed on open: its presence lets the loader skip the batch scan.
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
# The log cleaner's suffixes (Kafka's): its output while being written, then while it replaces
# the segments it was cleaned from (storage/cleaner.py has the protocol).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

# The running log's logger: recovery's warnings keep the name they always had.
logger = logging.getLogger("raftka.storage.log")


@dataclass(frozen=True)
class CheckpointedOffsets:
    """A log's entries in its log dir's checkpoint files; None where a file has none (a new log,
    one opened without a LogManager, or one an older Raftka wrote, see the module docstring)."""

    log_start_offset: int | None = None
    recovery_point: int | None = None
    high_watermark: int | None = None


@dataclass
class LoadedLog:
    """What opening a partition directory found: the Log starts from this."""

    segments: list[LogSegment]
    log_start_offset: int
    high_watermark: int
    recovery_point: int  # everything in the segments is validated and flushed up to here
    leader_epoch_cache: LeaderEpochCache
    # Per-partition offset checkpoints of an older Raftka, to delete once the log dir's files
    # hold this log's entries.
    legacy_checkpoints: list[Path]


def _offset(name: str, directory: Path, kind: str, checkpointed: int | None, legacy: list[Path]) -> int:
    """The log dir's entry for ``kind``, else the value of the partition's own file an older
    Raftka wrote (in ``legacy``), else 0."""
    if checkpointed is not None:
        return checkpointed
    if directory / kind not in legacy:
        return 0
    try:
        return CheckpointFile(directory / kind, 1).read_value(0)
    except CheckpointError as error:
        logger.warning("%s: %s; using 0", name, error)
        return 0


def headers_from(segments: list[LogSegment], offset: int) -> Iterator[BatchHeader]:
    """Headers of every batch from the one holding ``offset`` to the end of ``segments``."""
    start = max(0, bisect_right([seg.base_offset for seg in segments], offset) - 1)
    for seg in segments[start:]:
        if seg.next_offset <= offset:
            continue
        found = seg.find(offset)
        if found is None:
            continue
        for _, header in seg.scan_headers(found[0]):
            yield header


def load(directory: Path, name: str, checkpoints: CheckpointedOffsets, producer_state: ProducerStateManager,
         new_segment: Callable[[int, bool], LogSegment], log_end_offset: Callable[[], int]) -> LoadedLog:
    """Recover the log in ``directory`` (see the module docstring). ``name`` is the log's name
    in warnings; ``checkpoints`` its offsets in the log dir's checkpoint files;
    ``new_segment(base_offset, create)`` opens a segment with the log's config;
    ``log_end_offset`` is the running log's (for the leader epoch cache it hands back).
    ``producer_state`` is rebuilt in place. A failure closes every segment it opened."""
    segments: list[LogSegment] = []
    try:
        return _load(directory, name, checkpoints, producer_state, new_segment, log_end_offset, segments)
    except BaseException:
        for seg in segments:
            seg.close()
        raise


def swap_end_offset(path: Path) -> int:
    """The offset after the last whole batch of the cleaned segment file ``path`` (its base
    offset when it holds none): the end of the offsets it replaces."""
    end = parse_base_offset(path.name)
    assert end is not None, path
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position < size:
            try:
                header = read_header(os.pread(fd, BATCH_OVERHEAD_BYTES, position), 0)
            except CorruptRecordError:
                break
            if position + header.size > size:
                break
            end = header.next_offset
            position += header.size
    finally:
        os.close(fd)
    return end


def settle_cleaner_files(directory: Path, name: str) -> None:
    """Delete ``.cleaned`` leftovers and complete every ``.swap`` (module docstring). Idempotent:
    a crash inside it leaves files it completes at the next open."""
    swaps: list[int] = []
    bases: set[int] = set()
    for entry in os.scandir(directory):
        if entry.name.endswith(CLEANED_SUFFIX):
            os.unlink(entry.path)
            continue
        base = parse_base_offset(entry.name)
        if base is None:
            continue
        if entry.name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            swaps.append(base)
        elif entry.name.endswith(LOG_SUFFIX):
            bases.add(base)
    changed = False
    for base in sorted(swaps):
        swap = directory / (file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
        end = max(swap_end_offset(swap), base + 1)  # an empty swap still replaces its namesake
        replaced = sorted(b for b in bases if base <= b < end)
        for b in replaced:
            for suffix in SEGMENT_SUFFIXES:
                (directory / file_name(b, suffix)).unlink(missing_ok=True)
            bases.discard(b)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):  # the log last: the commit
            path = directory / (file_name(base, suffix) + SWAP_SUFFIX)
            if path.exists():
                os.replace(path, directory / file_name(base, suffix))
        bases.add(base)
        changed = True
        logger.warning("%s: completed the swap of cleaned segment %s (replacing %s)", name,
                       file_name(base, LOG_SUFFIX), ", ".join(str(b) for b in replaced) or "nothing")
    for entry in os.scandir(directory):  # index swaps whose log had been renamed, or never was
        if entry.name.endswith(SWAP_SUFFIX):
            os.unlink(entry.path)
            changed = True
    if changed:
        fsync_dir(directory)


def _load(directory: Path, name: str, checkpoints: CheckpointedOffsets, producer_state: ProducerStateManager,
          new_segment: Callable[[int, bool], LogSegment], log_end_offset: Callable[[], int],
          segments: list[LogSegment]) -> LoadedLog:
    clean = (directory / CLEAN_SHUTDOWN_FILE).exists()
    settle_cleaner_files(directory, name)
    bases: set[int] = set()
    legacy: list[Path] = []
    for entry in os.scandir(directory):
        if entry.name.endswith(".tmp"):
            os.unlink(entry.path)  # an interrupted atomic write; the old file is intact
            continue
        if entry.name in OFFSET_CHECKPOINTS:
            legacy.append(Path(entry.path))
            continue
        base = parse_base_offset(entry.name)
        if base is not None and entry.name.endswith(LOG_SUFFIX):
            bases.add(base)
    lso_ckpt = _offset(name, directory, LOG_START_OFFSET_CHECKPOINT, checkpoints.log_start_offset, legacy)
    rp_ckpt = _offset(name, directory, RECOVERY_POINT_CHECKPOINT, checkpoints.recovery_point, legacy)
    hw_ckpt = _offset(name, directory, HIGH_WATERMARK_CHECKPOINT, checkpoints.high_watermark, legacy)
    for entry in os.scandir(directory):  # indexes and snapshots whose segment is gone
        base = parse_base_offset(entry.name)
        if base is not None and base not in bases and entry.name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            os.unlink(entry.path)

    for base in sorted(bases):  # filled in place, so a failed open can close them
        segments.append(new_segment(base, False))
    # Segments wholly below the checkpointed log start offset were being deleted.
    while len(segments) > 1 and segments[1].base_offset <= lso_ckpt:
        segments.pop(0).delete()
    if not segments:
        segments.append(new_segment(lso_ckpt, True))

    recovered_headers: list[BatchHeader] = []
    rebuilt_flushed = False  # a segment below the recovery point had to be recovered
    i = 0
    while i < len(segments):
        seg = segments[i]
        is_last = i == len(segments) - 1
        next_base = None if is_last else segments[i + 1].base_offset
        trusted = flushed = clean or (next_base is not None and next_base <= rp_ckpt)
        if trusted:
            try:
                seg.load(next_base)
            except (IndexError_, CorruptRecordError) as error:
                logger.warning("%s: %s: %s; rebuilding", name, seg.log_path.name, error)
                trusted = False
                rebuilt_flushed = True
        cut = False
        if not trusted:
            result = seg.recover()
            cut = result.truncated_bytes > 0
            recovered_headers.extend(result.headers)
            if result.truncated_bytes:
                # A torn tail past the recovery point is what a crash leaves (WARNING); below it,
                # or after a clean shutdown, every batch was whole and flushed, so a bad one is
                # corruption and records are lost here (ERROR).
                logger.log(logging.ERROR if flushed else logging.WARNING,
                           "%s: recovery cut %d bytes from %s at position %d: %s", name,
                           result.truncated_bytes, seg.log_path, result.valid_bytes, result.problem)
        # A cleaned segment may end before the next begins (a gap); one recovery cut may have
        # lost its tail, so what follows it cannot be trusted to continue it (Kafka's rule).
        if next_base is not None and (seg.next_offset > next_base or (cut and seg.next_offset != next_base)):
            logger.warning("%s: %s ends at offset %d but the next segment starts at %d; "
                           "deleting the %d segment(s) after it", name, seg.log_path.name,
                           seg.next_offset, next_base, len(segments) - i - 1)
            for later in segments[i + 1:]:
                later.delete()
            del segments[i + 1:]
        i += 1

    leo = segments[-1].next_offset
    log_start_offset = min(max(lso_ckpt, segments[0].base_offset), leo)

    # Leader epochs: the checkpoint, then the epochs of every recovered batch.
    epoch_file = LeaderEpochCache(directory, log_end_offset).checkpoint
    try:
        entries = epoch_file.read()
    except CheckpointError as error:
        logger.warning("%s: %s; rebuilding from batch headers", name, error)
        entries = None
    if entries is None:
        rebuilt = [(header.partition_leader_epoch, header.base_offset)
                   for seg in segments for _, header in seg.scan_headers(0)]
        epochs = LeaderEpochCache(directory, log_end_offset, rebuilt)
        if epochs.epoch_entries() or epochs.checkpoint.path.exists():
            epochs.flush()
    else:
        epochs = LeaderEpochCache(directory, log_end_offset, [(e, s) for e, s in entries])
        for header in recovered_headers:  # epochs whose checkpoint write a crash pre-empted
            if header.partition_leader_epoch > epochs.latest_epoch:
                epochs.assign(header.partition_leader_epoch, header.base_offset)
    # Unsynced: done again at the next open (epoch_cache.py); synced below after a clean stop.
    epochs.truncate_from_end(leo, fsync=False)
    epochs.truncate_from_start(log_start_offset, fsync=False)

    producer_state.load(lambda offset: headers_from(segments, offset), log_start_offset, leo)

    # After an unclean stop the recovery point stays where it was (as Kafka's LogLoader does):
    # what recovery validated is in the page cache, not on disk, and moving the point past it
    # would let a machine crash before the next flush skip its re-validation. Fsyncing every
    # recovered log instead (its segment, both indexes, the checkpoint and the directory) cost
    # ~5 fsyncs per partition: most of a broker's restart at thousands of partitions. The
    # price is a rescan from the same point after another crash.
    recovery_point = leo if clean else min(rp_ckpt, leo)
    # The LogManager writes them to its checkpoint files where they changed.
    if clean or rebuilt_flushed:
        epochs.sync()  # epochs re-assigned from batches the recovery point has passed
    if clean:
        os.unlink(directory / CLEAN_SHUTDOWN_FILE)
        fsync_dir(directory)
    return LoadedLog(segments=segments, log_start_offset=log_start_offset,
                     high_watermark=min(max(hw_ckpt, log_start_offset), leo), recovery_point=recovery_point,
                     leader_epoch_cache=epochs, legacy_checkpoints=legacy)
