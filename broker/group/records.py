"""What the group coordinator writes to ``__consumer_offsets``, and which partition a group lives in.

A group lives in partition ``abs(java_string_hash(group_id)) % offsets.topic.num.partitions``,
the partition Kafka picks (``Utils.abs(groupId.hashCode())``), so the same group id maps to the
same partition number in both systems. The leader of that partition is the group's coordinator.

Records: Kafka's own (group-coordinator's OffsetCommitKey/Value and GroupMetadataKey/Value), so a
``__consumer_offsets`` written by Raftka reads as Kafka's. A key is an int16 key version, which
says what the record is, then the key at that version; a value is an int16 value version, then
the value at that version. The coordinator replays every record from the log start and the last
record of a key wins; a null value is a tombstone. The topic is compacted (Kafka's
cleanup.policy=compact), which keeps just that: the last record of each key, and tombstones for
delete.retention.ms.

| record | key version: key | value versions (written): value |
|---|---|---|
| committed offset | 0-1 (1): OffsetCommitKey ``group, topic, partition`` | 0-4 (3): OffsetCommitValue ``offset, leader_epoch, metadata, commit_timestamp`` |
| group metadata | 2: GroupMetadataKey ``group`` | 0-4 (3): GroupMetadataValue ``protocol_type, generation, protocol, leader, current_state_timestamp, members[member_id, group_instance_id, client_id, client_host, rebalance_timeout, session_timeout, subscription, assignment]`` |

Raftka writes the versions Kafka writes (key 1 and value 3 for offsets, key 2 and value 3 for
groups). GroupMetadataValue v3 already holds everything a group needs to be reloaded (members,
their timeouts and static instance ids, the chosen protocol, each member's subscription and
assignment, the generation, the leader), so Raftka adds no tagged field of its own (one would
need the flexible v4, and a tag far above Kafka's, so Kafka skips it as unknown).

Reading follows Kafka (KIP-915): a value version above the newest known is read with the newest
layout, bytes after it ignored. A record the coordinator cannot read (a bad key or value, or a
key version Kafka uses for its newer group types) raises :class:`GroupRecordError` naming the
partition and offset; replaying skips it with a log line, never fatal: the partition stays usable.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Final, Iterable, Iterator

from raftka.common import records as rec
from raftka.common.codec import CodecError, decoder
from raftka.common.errors import CorruptMessageError
from raftka.common.messages.consumer_protocol import DATA_MESSAGE_KEY, decode_versioned, encode_versioned
from raftka.common.messages.limits import MEMBER_BYTES_MAX, MEMBERS_MAX
from raftka.common.schema import Array, Field, Message, Struct

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_KEY_VERSIONS = (0, 1)
OFFSET_KEY = 1  # the key version Kafka writes
GROUP_KEY = 2
OFFSET_VALUE_VERSION = 3  # Kafka's, when the commit has no expire timestamp (always, since 2.1)
GROUP_VALUE_VERSION = 3
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


OFFSET_COMMIT_KEY: Final = Message(DATA_MESSAGE_KEY, "OffsetCommitKey", "0-1", (
    Field("group", "string", about="the group id"),
    Field("topic", "string", about="the topic name"),
    Field("partition", "int32", about="the partition index"),
))

GROUP_METADATA_KEY: Final = Message(DATA_MESSAGE_KEY, "GroupMetadataKey", "2", (
    Field("group", "string", about="the group id"),
))

OFFSET_COMMIT_VALUE: Final = Message(DATA_MESSAGE_KEY, "OffsetCommitValue", "0-4", (
    Field("offset", "int64", about="the committed offset"),
    Field("leader_epoch", "int32", "3+", default=-1, about="the leader epoch of the last consumed record, or -1"),
    Field("metadata", "string", about="the committer's metadata"),
    Field("commit_timestamp", "int64", about="when it was committed (ms)"),
    Field("expire_timestamp", "int64", "1", default=-1, about="v1 only: when it expires (ms), or -1"),
), flexible_versions="4+")

GROUP_METADATA_VALUE: Final = Message(DATA_MESSAGE_KEY, "GroupMetadataValue", "0-4", (
    Field("protocol_type", "string", about='"consumer" for consumer groups; "" when none was chosen'),
    Field("generation", "int32", about="the group's generation"),
    Field("protocol", "string", nullable=True, about="the chosen protocol (assignor), or null"),
    Field("leader", "string", nullable=True, about="the leader's member id, or null"),
    Field("current_state_timestamp", "int64", "2+", default=-1, about="when the group last changed state (ms)"),
    Field("members", Array(Struct("MemberMetadata", (
        Field("member_id", "string", about="the member id"),
        Field("group_instance_id", "string", "3+", default=None, nullable_versions="3+",
              about="its static instance id (KIP-345), or null"),
        Field("client_id", "string", about="its client id"),
        Field("client_host", "string", about="its host"),
        Field("rebalance_timeout", "int32", "1+", default=-1,
              about="its rebalance timeout (ms); v0 has none: the session timeout serves"),
        Field("session_timeout", "int32", about="its session timeout (ms)"),
        Field("subscription", "bytes", max_length=MEMBER_BYTES_MAX, about="its metadata for the chosen protocol"),
        Field("assignment", "bytes", max_length=MEMBER_BYTES_MAX, about="its assignment"),
    )), max_count=MEMBERS_MAX), about="the members"),
), flexible_versions="4+")


class GroupRecordError(CorruptMessageError):  # type: ignore[misc, valid-type]
    """A ``__consumer_offsets`` record the coordinator cannot read; names its partition and offset."""

    def __init__(self, problem: str, *, partition: int, offset: int) -> None:
        self.offset = offset
        super().__init__(f"record at offset {offset}: {problem}", topic=OFFSETS_TOPIC,
                         partition=partition if partition >= 0 else None)


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    """The record key of a committed offset."""
    return encode_versioned(OFFSET_COMMIT_KEY, OFFSET_KEY, {"group": group_id, "topic": topic, "partition": partition})


def offset_value(committed: CommittedOffset) -> bytes:
    """The record value of a committed offset."""
    return encode_versioned(OFFSET_COMMIT_VALUE, OFFSET_VALUE_VERSION, {
        "offset": committed.offset, "leader_epoch": committed.leader_epoch, "metadata": committed.metadata,
        "commit_timestamp": committed.commit_timestamp})


def group_key(group_id: str) -> bytes:
    """The record key of a group's metadata."""
    return encode_versioned(GROUP_METADATA_KEY, GROUP_KEY, {"group": group_id})


def group_value(value: dict) -> bytes:
    """The record value of a group's metadata (GroupMetadataValue's fields, see the module table)."""
    return encode_versioned(GROUP_METADATA_VALUE, GROUP_VALUE_VERSION, value)


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
    groups: dict[str, dict | None]  # group id -> last GroupMetadataValue (None: deleted)
    group_written_ms: dict[str, int] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0
    partition: int = -1  # which __consumer_offsets partition (named in GroupRecordError)


def replay(loaded: Loaded, buf: bytes) -> int:
    """Apply every record of the whole batches in ``buf``; returns the offset after the last one.
    An unreadable record is skipped (logged, counted in ``loaded.skipped``)."""
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
            except GroupRecordError as error:
                loaded.skipped += 1
                log.warning("skipping: %s", error)
    return next_offset


def apply_record(loaded: Loaded, key: bytes | None, value: bytes | None, log_offset: int,
                 timestamp_ms: int = 0) -> None:
    """Apply one record (last one of a key wins); GroupRecordError when it is unreadable."""
    if key is None:
        raise GroupRecordError("no key", partition=loaded.partition, offset=log_offset)
    try:
        if len(key) < 2:
            raise CodecError(f"key of {len(key)} byte(s): the key version takes 2")
        key_version = int.from_bytes(key[:2], "big", signed=True)
        if key_version in OFFSET_KEY_VERSIONS:
            k = decoder(OFFSET_COMMIT_KEY, key_version)(memoryview(key)[2:])
            offsets = loaded.offsets.setdefault(k["group"], {})
            tp = (k["topic"], k["partition"])
            if value is None:
                offsets.pop(tp, None)
                return
            _version, v = decode_versioned(OFFSET_COMMIT_VALUE, value)
            offsets[tp] = CommittedOffset(v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"],
                                          log_offset, timestamp_ms)
        elif key_version == GROUP_KEY:
            group_id = decoder(GROUP_METADATA_KEY, key_version)(memoryview(key)[2:])["group"]
            loaded.groups[group_id] = None if value is None else decode_versioned(GROUP_METADATA_VALUE, value)[1]
            loaded.group_written_ms[group_id] = timestamp_ms
        else:  # Kafka's newer group types (KIP-848 consumer groups, share groups) are not served here
            raise CodecError(f"key version {key_version} is not an offset commit (0, 1) or group metadata (2)")
    except CodecError as bad:
        raise GroupRecordError(bad.message, partition=loaded.partition, offset=log_offset) from None
