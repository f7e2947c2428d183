"""Kafka's RecordBatch v2 (magic 2): the one byte format from producer to leader to disk to consumer.

Batch layout (all integers big-endian; offsets are from the start of the batch)::

    offset  size  field
         0     8  baseOffset            offset of the first record
         8     4  batchLength           bytes after this field (the batch is batchLength + 12 long)
        12     4  partitionLeaderEpoch  leader epoch of the leader that appended it
        16     1  magic                 2
        17     4  crc                   CRC-32C (Castagnoli) of everything from attributes to the end
        21     2  attributes            bits 0-2 codec (0 none, 3 lz4), bit 3 timestamp type
                                        (0 CreateTime, 1 LogAppendTime), bit 4 transactional,
                                        bit 5 control
        23     4  lastOffsetDelta       offset of the last record minus baseOffset
        27     8  baseTimestamp         timestamp of the first record
        35     8  maxTimestamp          largest timestamp in the batch
        43     8  producerId            -1 when not idempotent
        51     2  producerEpoch
        53     4  baseSequence          sequence number of the first record, -1 when not idempotent
        57     4  recordCount
        61     .  records               compressed as a whole when the codec is not 0

baseOffset and partitionLeaderEpoch lie outside the CRC, so the leader can stamp them
(:func:`assign_offsets`) without recomputing it. Each record (before compression)::

    length          varint   bytes of the record after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - baseTimestamp
    offsetDelta     varint   offset - baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headersCount    varint
    headers         [headerKeyLength varint, headerKey utf-8,
                     headerValueLength varint (-1 null), headerValue bytes]

varint/varlong are zigzag-encoded base-128 integers, as in Protocol Buffers' sint32/sint64.

Header-level functions (:func:`read_header`, :func:`validate_batch`, :func:`validate_batches`,
:func:`iter_batches`, :func:`assign_offsets`, :func:`set_log_append_time`) never look at
individual records: they are what the broker and the log use. :class:`BatchBuilder` (producers)
and :func:`decode_batch` / :func:`iter_records` (consumers) handle records.
"""
from __future__ import annotations

import struct
from typing import Final, Iterator, NamedTuple

import crc32c as _crc32c

from client.protocol.errors import (
    CODES,
    CorruptRecordError,
    MessageTooLargeError,
    for_code,
)

InvalidRecordError = for_code(CODES["INVALID_RECORD"])

# --- layout -----------------------------------------------------------------------------------
BASE_OFFSET_OFFSET: Final = 0
BATCH_LENGTH_OFFSET: Final = BASE_OFFSET_OFFSET + 8
PARTITION_LEADER_EPOCH_OFFSET: Final = BATCH_LENGTH_OFFSET + 4
MAGIC_OFFSET: Final = PARTITION_LEADER_EPOCH_OFFSET + 4
CRC_OFFSET: Final = MAGIC_OFFSET + 1
ATTRIBUTES_OFFSET: Final = CRC_OFFSET + 4
LAST_OFFSET_DELTA_OFFSET: Final = ATTRIBUTES_OFFSET + 2
BASE_TIMESTAMP_OFFSET: Final = LAST_OFFSET_DELTA_OFFSET + 4
MAX_TIMESTAMP_OFFSET: Final = BASE_TIMESTAMP_OFFSET + 8
PRODUCER_ID_OFFSET: Final = MAX_TIMESTAMP_OFFSET + 8
PRODUCER_EPOCH_OFFSET: Final = PRODUCER_ID_OFFSET + 8
BASE_SEQUENCE_OFFSET: Final = PRODUCER_EPOCH_OFFSET + 2
RECORD_COUNT_OFFSET: Final = BASE_SEQUENCE_OFFSET + 4
RECORDS_OFFSET: Final = RECORD_COUNT_OFFSET + 4

BATCH_OVERHEAD_BYTES: Final = RECORDS_OFFSET          # 61: header bytes before the records
LOG_OVERHEAD_BYTES: Final = BATCH_LENGTH_OFFSET + 4   # 12: baseOffset + batchLength
# batchLength of an empty batch: everything of the header after the batchLength field.
BATCH_LENGTH_MIN: Final = BATCH_OVERHEAD_BYTES - LOG_OVERHEAD_BYTES
# No batch can be larger than this (a segment can hold at most 1 GiB); a larger batchLength is
# treated as corruption rather than a reason to wait for (or allocate) that many bytes.
BATCH_BYTES_MAX: Final = 1 << 30

MAGIC: Final = 2

COMPRESSION_NONE: Final = 0
COMPRESSION_GZIP: Final = 1     # Kafka's codec ids; Raftka reads and writes only none and lz4.
COMPRESSION_SNAPPY: Final = 2
COMPRESSION_LZ4: Final = 3
COMPRESSION_ZSTD: Final = 4
SUPPORTED_COMPRESSION: Final = frozenset((COMPRESSION_NONE, COMPRESSION_LZ4))
COMPRESSION_NAMES: Final = {"none": COMPRESSION_NONE, "gzip": COMPRESSION_GZIP,
                            "snappy": COMPRESSION_SNAPPY, "lz4": COMPRESSION_LZ4,
                            "zstd": COMPRESSION_ZSTD}

TIMESTAMP_TYPE_CREATE_TIME: Final = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME: Final = 1

ATTR_COMPRESSION_MASK: Final = 0x07
ATTR_TIMESTAMP_TYPE: Final = 0x08
ATTR_TRANSACTIONAL: Final = 0x10
ATTR_CONTROL: Final = 0x20

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
INT32_MAX: Final = (1 << 31) - 1

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_OVERHEAD_BYTES
_LENGTH = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

_crc = _crc32c.crc32c


class BatchHeader(NamedTuple):
    """The 61-byte header of one RecordBatch v2, as stored (see the module docstring)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD_BYTES

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset right after this batch (log end offset once it is appended)."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record; sequences wrap from INT32_MAX to 0 as in Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (INT32_MAX + 1)


_new_header = tuple.__new__


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the header of the batch starting at ``pos`` in ``buf`` (bytes-like). No CRC check.

    Raises CorruptRecordError when fewer than 61 bytes are left, the magic is not 2, or the
    batchLength, recordCount or lastOffsetDelta cannot be right. The batch body need not be
    present: use :func:`validate_batch` for that.
    """
    if pos < 0 or len(buf) - pos < BATCH_OVERHEAD_BYTES:
        raise CorruptRecordError(
            f"a record batch header needs {BATCH_OVERHEAD_BYTES} bytes, only "
            f"{max(len(buf) - pos, 0)} left at position {pos}")
    fields = _HEADER.unpack_from(buf, pos)
    header: BatchHeader = _new_header(BatchHeader, fields)
    if fields[3] != MAGIC:
        raise CorruptRecordError(
            f"record batch at position {pos} has magic {fields[3]}, only magic {MAGIC} is supported")
    length = fields[1]
    if length < BATCH_LENGTH_MIN or length > BATCH_BYTES_MAX - LOG_OVERHEAD_BYTES:
        raise CorruptRecordError(
            f"record batch at position {pos} declares batchLength {length}, outside "
            f"[{BATCH_LENGTH_MIN}, {BATCH_BYTES_MAX - LOG_OVERHEAD_BYTES}]")
    if fields[12] < 0 or fields[6] < 0:
        raise CorruptRecordError(
            f"record batch at position {pos} declares recordCount {fields[12]} and "
            f"lastOffsetDelta {fields[6]}; neither may be negative")
    return header


def _check_crc(buf, pos: int, header: BatchHeader) -> None:
    end = pos + header.batch_length + LOG_OVERHEAD_BYTES
    with memoryview(buf) as view:
        computed = _crc(view[pos + ATTRIBUTES_OFFSET:end])
    if computed != header.crc:
        raise CorruptRecordError(
            f"record batch at position {pos} (baseOffset {header.base_offset}) failed its CRC check",
            stored_crc=header.crc, computed_crc=computed)


def validate_batch(buf, pos: int = 0) -> BatchHeader:
    """Check the batch at ``pos``: whole, magic 2, sane lengths, CRC-32C matches. Returns its header.

    Raises CorruptRecordError (with ``stored_crc`` and ``computed_crc`` on a CRC mismatch).
    Computes the CRC over a memoryview: no copy of the batch.
    """
    header = read_header(buf, pos)
    available = len(buf) - pos
    if available < header.batch_length + LOG_OVERHEAD_BYTES:
        raise CorruptRecordError(
            f"record batch at position {pos} declares {header.batch_length + LOG_OVERHEAD_BYTES} "
            f"bytes but only {available} are present")
    _check_crc(buf, pos, header)
    return header


def validate_batches(buf, *, max_batch_bytes: int | None = None) -> list[BatchHeader]:
    """Validate a Produce request's ``records``: one or more whole batches and nothing else.

    Each batch must pass :func:`validate_batch`, use a codec Raftka supports, hold at least one
    record, and have ``lastOffsetDelta == recordCount - 1`` (a producer's batch has contiguous
    offsets; the broker assigns offsets from the headers alone). Raises CorruptRecordError for
    broken bytes, InvalidRecordError for well-formed batches a producer must not send, and
    MessageTooLargeError for a batch larger than ``max_batch_bytes``.
    """
    total = len(buf)
    if total == 0:
        raise CorruptRecordError("the records field holds no record batch")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < total:
        header = read_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD_BYTES
        if max_batch_bytes is not None and size > max_batch_bytes:
            raise MessageTooLargeError(
                f"record batch at position {pos} is {size} bytes, larger than the "
                f"{max_batch_bytes} bytes allowed (max.message.bytes)")
        if total - pos < size:
            raise CorruptRecordError(
                f"record batch at position {pos} declares {size} bytes but only {total - pos} "
                f"are present: the records field must hold whole batches")
        _check_crc(buf, pos, header)
        codec = header.attributes & ATTR_COMPRESSION_MASK
        if codec not in SUPPORTED_COMPRESSION:
            raise InvalidRecordError(
                f"record batch at position {pos} uses compression codec {codec}; "
                f"Raftka supports none (0) and lz4 (3)")
        if header.record_count < 1 or header.last_offset_delta != header.record_count - 1:
            raise InvalidRecordError(
                f"record batch at position {pos} has recordCount {header.record_count} and "
                f"lastOffsetDelta {header.last_offset_delta}; a producer's batch must hold at "
                f"least one record with contiguous offsets")
        headers.append(header)
        pos += size
    return headers


def iter_batches(buf, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each whole batch from ``pos`` on; no CRC check.

    Stops silently at a trailing partial batch (a fetch response cut at its size limit, or the
    torn tail of a log after a crash). Raises CorruptRecordError for a header that cannot be
    right (bad magic, impossible batchLength); the batches yielded before it are whole, so log
    recovery can truncate at the last yielded position + size.
    """
    total = len(buf)
    while total - pos >= LOG_OVERHEAD_BYTES:
        length = _LENGTH.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0]
        if length < BATCH_LENGTH_MIN or length > BATCH_BYTES_MAX - LOG_OVERHEAD_BYTES:
            raise CorruptRecordError(
                f"record batch at position {pos} declares batchLength {length}, outside "
                f"[{BATCH_LENGTH_MIN}, {BATCH_BYTES_MAX - LOG_OVERHEAD_BYTES}]")
        size = length + LOG_OVERHEAD_BYTES
        if total - pos < size:
            return
        yield pos, read_header(buf, pos)
        pos += size


def _whole_batches(buf) -> list[tuple[int, BatchHeader]]:
    """Positions and headers of the batches in ``buf``, which must be exactly whole batches."""
    found: list[tuple[int, BatchHeader]] = []
    end = 0
    for pos, header in iter_batches(buf):
        found.append((pos, header))
        end = pos + header.batch_length + LOG_OVERHEAD_BYTES
    if end != len(buf):
        raise CorruptRecordError(
            f"{len(buf) - end} bytes at position {end} are not a whole record batch")
    return found


def assign_offsets(buf, base_offset: int, partition_leader_epoch: int) -> bytes:
    """Stamp baseOffset and partitionLeaderEpoch on every batch of ``buf``; return new bytes.

    The first batch gets ``base_offset``, each next batch the offset after the previous one
    (``next_offset``), so offsets stay contiguous. Both fields lie outside the CRC: no record
    is touched and the CRC stays valid. ``buf`` must be exactly whole batches
    (bytes, bytearray or memoryview); CorruptRecordError otherwise.
    """
    out = bytearray(buf)
    offset = base_offset
    for pos, header in _whole_batches(out):
        _INT64.pack_into(out, pos + BASE_OFFSET_OFFSET, offset)
        _INT32.pack_into(out, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
        offset += header.last_offset_delta + 1
    return bytes(out)


def set_log_append_time(buf, timestamp_ms: int) -> bytes:
    """Mark every batch of ``buf`` as LogAppendTime with ``timestamp_ms``; return new bytes.

    Under LogAppendTime (topic config ``message.timestamp.type=LogAppendTime``) every record's
    timestamp reads as the batch's maxTimestamp (see :func:`decode_batch`). attributes and
    maxTimestamp lie inside the CRC, so the CRC of each batch is recomputed. Batches must
    already be validated: their old CRC is not checked here.
    """
    out = bytearray(buf)
    with memoryview(out) as view:
        for pos, header in _whole_batches(out):
            end = pos + header.batch_length + LOG_OVERHEAD_BYTES
            _INT16.pack_into(out, pos + ATTRIBUTES_OFFSET, header.attributes | ATTR_TIMESTAMP_TYPE)
            _INT64.pack_into(out, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
            _UINT32.pack_into(out, pos + CRC_OFFSET, _crc(view[pos + ATTRIBUTES_OFFSET:end]))
    return bytes(out)
