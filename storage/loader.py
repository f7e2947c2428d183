"""Opening a partition directory: Kafka's LogLoader, split from the running ``Log``.

``load(log)`` runs once, from ``Log.open``, on a Log that holds nothing yet. It reads the
checkpoints, removes leftovers (``.tmp`` files, indexes whose segment is gone, segments wholly
below the log start offset), trusts segments below the recovery point (indexes checked, rebuilt
if bad) and re-validates every batch from there on, cutting the log at the first batch that fails
its length or CRC check. It then rebuilds the leader epoch cache and the producer state, sets the
log start offset, high watermark and recovery point, and makes what it validated durable.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from raftka.common.errors import CorruptRecordError
from raftka.common.records import BatchHeader
from raftka.storage.checkpoint import CheckpointError, CheckpointFile, fsync_dir
from raftka.storage.epoch_cache import LeaderEpochCache
from raftka.storage.index import IndexError_
from raftka.storage.segment import (
    INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, parse_base_offset,
)

if TYPE_CHECKING:
    from raftka.storage.log import Log

# Written by a clean close, removed on open: its presence lets the loader skip the batch scan.
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"

# The running log's logger: recovery's warnings keep the name they always had.
logger = logging.getLogger("raftka.storage.log")


def _read_checkpoint(log: "Log", file: CheckpointFile, default: int) -> int:
    try:
        return file.read_value(default)
    except CheckpointError as error:
        logger.warning("%s: %s; using %d", log, error, default)
        return default


def load(log: "Log") -> None:
    """Recover ``log`` from its directory (see the module docstring)."""
    clean = (log.dir / CLEAN_SHUTDOWN_FILE).exists()
    lso_ckpt = _read_checkpoint(log, log._lso_file, 0)
    rp_ckpt = _read_checkpoint(log, log._rp_file, 0)
    hw_ckpt = _read_checkpoint(log, log._hw_file, 0)

    bases: set[int] = set()
    for entry in os.scandir(log.dir):
        name = entry.name
        if name.endswith(".tmp"):
            os.unlink(entry.path)  # an interrupted atomic write; the old file is intact
            continue
        base = parse_base_offset(name)
        if base is not None and name.endswith(LOG_SUFFIX):
            bases.add(base)
    for entry in os.scandir(log.dir):  # indexes and snapshots whose segment is gone
        base = parse_base_offset(entry.name)
        if base is not None and base not in bases and entry.name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            os.unlink(entry.path)

    segments = log._segments  # filled in place, so a failed open can close them
    for base in sorted(bases):
        segments.append(log._new_segment(base, create=False))
    # Segments wholly below the checkpointed log start offset were being deleted.
    while len(segments) > 1 and segments[1].base_offset <= lso_ckpt:
        segments.pop(0).delete()
    if not segments:
        segments.append(log._new_segment(lso_ckpt, create=True))

    recovered_headers: list[BatchHeader] = []
    i = 0
    while i < len(segments):
        seg = segments[i]
        is_last = i == len(segments) - 1
        next_base = None if is_last else segments[i + 1].base_offset
        trusted = clean or (next_base is not None and next_base <= rp_ckpt)
        if trusted:
            try:
                seg.load(next_base)
            except (IndexError_, CorruptRecordError) as error:
                logger.warning("%s: %s: %s; rebuilding", log, seg.log_path.name, error)
                trusted = False
        if not trusted:
            result = seg.recover()
            recovered_headers.extend(result.headers)
            if result.truncated_bytes:
                logger.warning("%s: recovery cut %d bytes from %s at position %d: %s", log,
                            result.truncated_bytes, seg.log_path.name, result.valid_bytes,
                            result.problem)
        if next_base is not None and seg.next_offset != next_base:
            logger.warning("%s: %s ends at offset %d but the next segment starts at %d; "
                        "deleting the %d segment(s) after it", log, seg.log_path.name,
                        seg.next_offset, next_base, len(segments) - i - 1)
            for later in segments[i + 1:]:
                later.delete()
            del segments[i + 1:]
        i += 1
    log._set_segments(segments)

    leo = log.log_end_offset
    log.log_start_offset = max(lso_ckpt, segments[0].base_offset)
    if log.log_start_offset > leo:
        log.log_start_offset = leo

    # Leader epochs: the checkpoint, then the epochs of every recovered batch.
    try:
        entries = log.leader_epoch_cache.checkpoint.read()
    except CheckpointError as error:
        logger.warning("%s: %s; rebuilding from batch headers", log, error)
        entries = None
    if entries is None:
        log.leader_epoch_cache = LeaderEpochCache(log.dir, lambda: log.log_end_offset)
        for _, header in log._all_headers():
            log.leader_epoch_cache._assign(header.partition_leader_epoch, header.base_offset)
        if log.leader_epoch_cache.epoch_entries() or log.leader_epoch_cache.checkpoint.path.exists():
            log.leader_epoch_cache.flush()
    else:
        log.leader_epoch_cache = LeaderEpochCache(log.dir, lambda: log.log_end_offset,
                                                   [(e, s) for e, s in entries])
        for header in recovered_headers:  # epochs whose checkpoint write a crash pre-empted
            if header.partition_leader_epoch > log.leader_epoch_cache.latest_epoch:
                log.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
    log.leader_epoch_cache.truncate_from_end(leo)
    log.leader_epoch_cache.truncate_from_start(log.log_start_offset)

    log.high_watermark = min(max(hw_ckpt, log.log_start_offset), leo)
    log._hw_checkpointed = hw_ckpt

    log.producer_state.load(log._headers_from, log.log_start_offset, leo)

    # Everything now in the files has been validated: make it durable and say so.
    if not clean:
        for seg in log._segments:
            if seg.size and (seg.next_offset > rp_ckpt or seg is log._segments[-1]):
                seg.flush()
    log.recovery_point = leo
    log._rp_checkpointed = rp_ckpt if log._rp_file.path.exists() else 0
    log._checkpoint_recovery_point()
    if lso_ckpt != log.log_start_offset:  # a missing file reads as 0
        log._lso_file.write_value(log.log_start_offset)
    if clean:
        os.unlink(log.dir / CLEAN_SHUTDOWN_FILE)
        fsync_dir(log.dir)
