"""What the group coordinator writes to ``__consumer_offsets``, and which partition a group lives in.

A group lives in partition ``abs(java_string_hash(group_id)) % offsets.topic.num.partitions``,
the partition Kafka picks (``Utils.abs(groupId.hashCode())``), so the same group id maps to the
same partition number in both systems. The leader of that partition is the group's coordinator.

Records (the key and value of each record are msgpack; the log is never compacted, so the
coordinator replays every record from the log start and the last record of a key wins):

| record | key | value (None = tombstone) |
|---|---|---|
| committed offset | ``[1, group, topic, partition]`` | ``{offset, leader_epoch, metadata, commit_timestamp}`` |
| group metadata | ``[2, group]`` | ``{protocol_type, generation, protocol, leader, state_timestamp, members: [{member_id, group_instance_id, client_id, client_host, session_timeout, rebalance_timeout, subscription, assignment}]}`` |

The key numbers follow Kafka's key versions (0/1 offsets, 2 group metadata). A record the
coordinator cannot read is skipped with a log line, never fatal: the partition stays usable.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import msgpack

from raftka.common import records as rec

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_KEY = 1
GROUP_KEY = 2
BATCH_BYTES_MAX = 1_000_000  # one coordinator write; below the default max.message.bytes


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (UTF-16 code units, 32-bit wrap-around), as a signed int."""
    h = 0
    for unit in _utf16_units(text):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _utf16_units(text: str) -> Iterator[int]:
    for ch in text:
        code = ord(ch)
        if code < 0x10000:
            yield code
        else:  # a surrogate pair, as Java stores it
            code -= 0x10000
            yield 0xD800 + (code >> 10)
            yield 0xDC00 + (code & 0x3FF)


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id`` (Kafka's ``Utils.abs(hash) % n``)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True)
class CommittedOffset:
    """One committed offset as stored: offset, leader epoch, metadata, commit time (ms)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    log_offset: int = -1  # where its record sits in __consumer_offsets (newer record wins)
    written_ms: int = 0  # timestamp of that record (retention deletes old segments: rewrite before)


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    """The record key of a committed offset."""
    return msgpack.packb([OFFSET_KEY, group_id, topic, partition])


def offset_value(committed: CommittedOffset) -> bytes:
    """The record value of a committed offset."""
    return msgpack.packb({"offset": committed.offset, "leader_epoch": committed.leader_epoch,
                          "metadata": committed.metadata, "commit_timestamp": committed.commit_timestamp})


def group_key(group_id: str) -> bytes:
    """The record key of a group's metadata."""
    return msgpack.packb([GROUP_KEY, group_id])


def group_value(value: dict) -> bytes:
    """The record value of a group's metadata (see the module table)."""
    return msgpack.packb(value, use_bin_type=True)


def tombstones(group_id: str, partitions: Iterable[tuple[str, int]]) -> list[tuple[bytes, bytes | None]]:
    """The records deleting a group: its committed offsets (``partitions``), then its metadata."""
    return [(offset_key(group_id, *tp), None) for tp in partitions] + [(group_key(group_id), None)]


def build_batch(entries: list[tuple[bytes, bytes | None]], now_ms: int | None = None) -> bytes:
    """One RecordBatch v2 holding ``(key, value)`` records (value None: a tombstone)."""
    builder = rec.BatchBuilder(batch_size=BATCH_BYTES_MAX)
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    for key, value in entries:
        if not builder.append(stamp, key, value):
            raise ValueError(f"a coordinator write of {len(entries)} records does not fit in one batch")
    return builder.build()


@dataclass
class Loaded:
    """What replaying a ``__consumer_offsets`` partition found, group by group."""

    offsets: dict[str, dict[tuple[str, int], CommittedOffset]]
    groups: dict[str, dict | None]  # group id -> last metadata value (None: deleted)
    group_written_ms: dict[str, int] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0


def replay(loaded: Loaded, buf: bytes) -> int:
    """Apply every record of the whole batches in ``buf``; returns the offset after the last one."""
    next_offset = -1
    for pos, header in rec.iter_batches(buf):
        next_offset = header.next_offset
        if header.is_control:
            continue
        _header, records = rec.decode_batch(buf, pos)
        for record in records:
            loaded.records += 1
            try:
                apply_record(loaded, record.key, record.value, record.offset, record.timestamp)
            except (ValueError, TypeError, KeyError, IndexError, msgpack.UnpackException) as error:
                loaded.skipped += 1
                log.warning("%s: skipping unreadable record at offset %d: %s", OFFSETS_TOPIC, record.offset, error)
    return next_offset


def apply_record(loaded: Loaded, key: bytes | None, value: bytes | None, log_offset: int,
                 timestamp_ms: int = 0) -> None:
    """Apply one record (last one of a key wins)."""
    if key is None:
        raise ValueError("record without a key")
    parts = msgpack.unpackb(key)
    kind = parts[0]
    if kind in (0, OFFSET_KEY):
        group_id, topic, partition = str(parts[1]), str(parts[2]), int(parts[3])
        offsets = loaded.offsets.setdefault(group_id, {})
        if value is None:
            offsets.pop((topic, partition), None)
            return
        v = msgpack.unpackb(value)
        offsets[(topic, partition)] = CommittedOffset(int(v["offset"]), int(v.get("leader_epoch", -1)),
                                                      str(v.get("metadata") or ""),
                                                      int(v.get("commit_timestamp", 0)), log_offset, timestamp_ms)
    elif kind == GROUP_KEY:
        group_id = str(parts[1])
        loaded.groups[group_id] = None if value is None else decode_group_value(msgpack.unpackb(value, raw=False))
        loaded.group_written_ms[group_id] = timestamp_ms
    else:
        raise ValueError(f"unknown record key type {kind!r}")


def decode_group_value(value: Any) -> dict:
    """Check a group metadata value's shape (raises ValueError/KeyError/TypeError when wrong)."""
    if not isinstance(value, dict):
        raise TypeError("group metadata must be a map")
    for member in value.get("members") or []:
        for field in ("member_id", "session_timeout", "rebalance_timeout"):
            if field not in member:
                raise KeyError(field)
    return value
