"""Kafka's RecordBatch v2 (magic 2): the one byte format from producer to leader to disk to consumer.

Batch layout (all integers big-endian; offsets are from the start of the batch)::

    offset  size  field
         0     8  baseOffset            offset of the first record
         8     4  batchLength           bytes after this field (the batch is batchLength + 12 long)
        12     4  partitionLeaderEpoch  leader epoch of the leader that appended it
        16     1  magic                 2
        17     4  crc                   CRC-32C (Castagnoli) of everything from attributes to the end
        21     2  attributes            bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4,
                                        4 zstd), bit 3 timestamp type
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
and :func:`decode_batch` / :func:`iter_records` (consumers; :func:`records_section` gives a batch's
records decompressed) handle records. Their per-record loops run in C when the extension is
built (``records_ext`` below; docs/performance.md), the Python loops here being the reference.
"""
from __future__ import annotations

import os
import struct
from types import ModuleType
from typing import Final, Iterator, NamedTuple

import crc32c as _crc32c

from raftka.common.errors import (
    CODES,
    CorruptRecordError,
    MessageTooLargeError,
    for_code,
)

InvalidRecordError = for_code(CODES["INVALID_RECORD"])

# The per-record loops in C (common/_records_ext.c): each answers "OK, here is the result" or
# "not OK" and builds no error; on "not OK" the pure-Python function here runs and raises its
# exact error. RAFTKA_NO_EXTENSIONS=1 (read at import) forces the pure-Python path; an install
# without a C compiler has no extension and takes it too.
records_ext: ModuleType | None = None
if os.environ.get("RAFTKA_NO_EXTENSIONS", "") in ("", "0"):
    try:
        from raftka.common import _records_ext as records_ext
    except ImportError:
        pass

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
COMPRESSION_GZIP: Final = 1     # Kafka's codec ids; Raftka reads and writes all five.
COMPRESSION_SNAPPY: Final = 2
COMPRESSION_LZ4: Final = 3
COMPRESSION_ZSTD: Final = 4
SUPPORTED_COMPRESSION: Final = frozenset((COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY,
                                          COMPRESSION_LZ4, COMPRESSION_ZSTD))
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


def validate_batches(buf, *, max_batch_bytes: int | None = None, check_records: bool = True,
                     require_keys: bool = False) -> list[BatchHeader]:
    """Validate a Produce request's ``records``: one or more whole batches and nothing else.

    Each batch must pass :func:`validate_batch`, use a codec Raftka supports, hold at least one
    record, and have ``lastOffsetDelta == recordCount - 1`` (a producer's batch has contiguous
    offsets; the broker assigns offsets from the headers alone). Raises CorruptRecordError for
    broken bytes, InvalidRecordError for well-formed batches a producer must not send, and
    MessageTooLargeError for a batch larger than ``max_batch_bytes``. With ``check_records``
    (the leader's append) every record of every batch is walked too, compressed ones
    decompressed: nothing a consumer could not read is stored. With ``require_keys`` (a
    compacted topic) a record without a key is an InvalidRecordError too: the cleaner keeps
    the latest record of each key, and a keyless one has none.
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
                f"record batch at position {pos} uses compression codec {codec}; Raftka supports "
                f"none (0), gzip (1), snappy (2), lz4 (3) and zstd (4)")
        if header.record_count < 1 or header.last_offset_delta != header.record_count - 1:
            raise InvalidRecordError(
                f"record batch at position {pos} has recordCount {header.record_count} and "
                f"lastOffsetDelta {header.last_offset_delta}; a producer's batch must hold at "
                f"least one record with contiguous offsets")
        if check_records:
            _check_batch_records(buf, pos, header, size, codec, require_keys)
        headers.append(header)
        pos += size
    return headers


def _check_batch_records(buf, pos: int, header: BatchHeader, size: int, codec: int,
                         require_keys: bool = False) -> None:
    """The record walk of a Produce's batch (Kafka's LogValidator): the batch's records,
    decompressed, each well formed and in place. A valid CRC only says the bytes are what the
    producer sent, not that a consumer can read them."""
    with memoryview(buf) as view:
        section = view[pos + RECORDS_OFFSET:pos + size]
        # bytes: indexing them is as fast as a view's, and a copy is a memcpy next to the walk
        if codec == COMPRESSION_NONE:
            data = bytes(section)
        else:
            data = _DECOMPRESS[codec](section, pos, DECOMPRESSED_BYTES_MAX)
        section.release()
    if records_ext is not None and records_ext.walk_records(data, header.record_count, require_keys):
        return
    where = f"record batch at position {pos} (baseOffset {header.base_offset})"
    try:
        _walk_records(data, header.record_count, require_keys)
    except (IndexError, ValueError) as exc:  # cut inside a record, or a header key not UTF-8
        raise CorruptRecordError(f"{where} holds a malformed record: {exc}") from None
    except InvalidRecordError as exc:
        raise InvalidRecordError(f"{where}: {exc.message}") from None
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"{where}: {exc.message}") from None


def _walk_records(data, count: int, require_keys: bool = False) -> None:
    """Check every record of an uncompressed records section without building anything:
    length, attributes, timestamp delta, offset delta (the record's index: offsets are
    contiguous from the batch's base), key, value and headers, each record's fields filling
    exactly its declared length, and ``count`` records in all. CorruptRecordError for bytes
    that do not parse, InvalidRecordError for a well-formed record out of place.

    Hot loop (every produced record passes here): one- and two-byte varints are read inline
    from tables, as in ``_decode_records``; keys and values are skipped, never copied."""
    one = _ONE_BYTE
    two = _TWO_BYTES
    n = len(data)
    i = 0
    index = 0
    while i < n:
        b = data[i]
        if b < 0x80:
            length = one[b]
            i += 1
        elif data[i + 1] < 0x80:
            length = two[(data[i + 1] << 7) | (b & 0x7F)]
            i += 2
        else:
            length, i = decode_varint(data, i)
        end = i + length
        if length < RECORD_BYTES_MIN - 1 or end > n:
            raise CorruptRecordError(f"record {index} declares length {length}, {n - i} bytes are left")
        i += 1  # attributes: no record-level attribute is defined
        b = data[i]
        if b < 0x80:
            i += 1
        elif data[i + 1] < 0x80:
            i += 2
        else:
            _, i = decode_varint(data, i, 10)  # the timestamp delta is a varlong
        b = data[i]
        if b < 0x80:
            offset_delta = one[b]
            i += 1
        elif data[i + 1] < 0x80:
            offset_delta = two[(data[i + 1] << 7) | (b & 0x7F)]
            i += 2
        else:
            offset_delta, i = decode_varint(data, i)
        if offset_delta != index:
            raise InvalidRecordError(f"record {index} has offset delta {offset_delta}; a producer's "
                                     f"records are numbered 0, 1, 2, ... within their batch")
        b = data[i]
        if b < 0x80:
            key_length = one[b]
            i += 1
        elif data[i + 1] < 0x80:
            key_length = two[(data[i + 1] << 7) | (b & 0x7F)]
            i += 2
        else:
            key_length, i = decode_varint(data, i)
        if key_length > 0:
            i += key_length
        elif key_length < -1:
            raise CorruptRecordError(f"record {index} has key length {key_length}")
        elif key_length == -1 and require_keys:
            raise InvalidRecordError(f"record {index} has no key; a compacted topic (cleanup.policy=compact) "
                                     f"keeps the latest record of each key, so every record needs one")
        b = data[i]
        if b < 0x80:
            value_length = one[b]
            i += 1
        elif data[i + 1] < 0x80:
            value_length = two[(data[i + 1] << 7) | (b & 0x7F)]
            i += 2
        else:
            value_length, i = decode_varint(data, i)
        if value_length > 0:
            i += value_length
        elif value_length < -1:
            raise CorruptRecordError(f"record {index} has value length {value_length}")
        if i >= end:
            raise CorruptRecordError(f"record {index}'s fields run past its length {length}")
        if data[i] == 0:
            i += 1
        else:
            i = _decode_headers(data, i, end)[1]
        if i != end:
            raise CorruptRecordError(f"record {index}'s fields fill {length + i - end} bytes, "
                                     f"its length says {length}")
        index += 1
    if index != count:
        raise InvalidRecordError(f"the batch declares {count} records but holds {index}")


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


def assign_offsets(buf, base_offset: int, partition_leader_epoch: int,
                   headers: list[BatchHeader] | None = None) -> bytes:
    """Stamp baseOffset and partitionLeaderEpoch on every batch of ``buf``; return new bytes.

    The first batch gets ``base_offset``, each next batch the offset after the previous one
    (``next_offset``), so offsets stay contiguous. Both fields lie outside the CRC: no record
    is touched and the CRC stays valid. ``buf`` must be exactly whole batches
    (bytes, bytearray or memoryview); CorruptRecordError otherwise. ``headers``: the batches'
    headers as :func:`validate_batches` returned them for this ``buf`` (the leader's append),
    which spares a second walk of the headers.
    """
    if headers is None:
        found = _whole_batches(buf)
    else:
        found, pos = [], 0
        for header in headers:
            found.append((pos, header))
            pos += header.batch_length + LOG_OVERHEAD_BYTES
    # One copy: the stamped fields packed, the bytes between and after them as views.
    epoch = _INT32.pack(partition_leader_epoch)
    offset = base_offset
    view = memoryview(buf)
    parts: list[bytes | memoryview] = []
    for pos, header in found:
        parts += (_INT64.pack(offset), view[pos + BATCH_LENGTH_OFFSET:pos + PARTITION_LEADER_EPOCH_OFFSET],
                  epoch, view[pos + MAGIC_OFFSET:pos + header.batch_length + LOG_OVERHEAD_BYTES])
        offset += header.last_offset_delta + 1
    return b"".join(parts)


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


# --- records: varints, builder, decoder ---------------------------------------------------------
import zlib as _zlib  # noqa: E402

import cramjam as _cramjam  # noqa: E402
import lz4.frame as _lz4frame  # noqa: E402

# Limits so that bytes from the network cannot make us allocate without bound.
# Uncompressed records of one compressed batch (any codec): a tiny "bomb" stops here instead of
# eating memory; no decompressor ever produces or allocates output beyond this (zstd's own window
# buffer aside, see _zstd_decompress).
DECOMPRESSED_BYTES_MAX: Final = 64 << 20
HEADERS_PER_RECORD_MAX: Final = 4096
# gzip and lz4 decompress in steps of this many bytes, counted against the cap as they come.
_DECOMPRESS_CHUNK_BYTES: Final = 1 << 20
RECORD_BYTES_MIN: Final = 7   # length, attributes, timestamp, offset, key, value, header count

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1

# Encoded zigzag varints of the small non-negative numbers that fill a typical record (lengths,
# offset and timestamp deltas): a list lookup instead of a loop per number.
_SMALL_VARINTS_N: Final = 1 << 14


def _encode_zigzag(z: int) -> bytes:
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL: Final[list[bytes]] = [_encode_zigzag(n << 1) for n in range(_SMALL_VARINTS_N)]
_NULL_LENGTH: Final = _encode_zigzag(1)   # -1: a null key, value or header value
_ZERO: Final = b"\x00"
# The value of each one-byte varint (the byte is below 0x80): zigzag-decoded.
_ONE_BYTE: Final[list[int]] = [(b >> 1) ^ -(b & 1) for b in range(0x80)]
# The value of each two-byte varint, indexed by its 14 payload bits ((b1 << 7) | (b0 & 0x7F)).
_TWO_BYTES: Final[list[int]] = [(z >> 1) ^ -(z & 1) for z in range(1 << 14)]


def encode_varint(n: int) -> bytes:
    """Zigzag varint of a signed 32-bit integer (Kafka's varint)."""
    if 0 <= n < _SMALL_VARINTS_N:
        return _SMALL[n]
    if not -(1 << 31) <= n < (1 << 31):
        raise ValueError(f"{n} does not fit a varint (signed 32-bit)")
    return _encode_zigzag(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def encode_varlong(n: int) -> bytes:
    """Zigzag varint of a signed 64-bit integer (Kafka's varlong)."""
    if 0 <= n < _SMALL_VARINTS_N:
        return _SMALL[n]
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"{n} does not fit a varlong (signed 64-bit)")
    return _encode_zigzag(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def decode_varint(data, i: int, max_bytes: int = 5) -> tuple[int, int]:
    """Read a zigzag varint at ``data[i]``; returns ``(value, next_position)``.

    ``max_bytes`` is 5 for a varint, 10 for a varlong. Raises CorruptRecordError when the
    varint is longer than that or runs past the end of ``data``.
    """
    z = 0
    shift = 0
    end = min(len(data), i + max_bytes)
    while i < end:
        b = data[i]
        i += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), i
        shift += 7
    raise CorruptRecordError(f"malformed varint at record byte {i}: longer than {max_bytes} "
                             f"bytes or cut off")


class BatchBuilder:
    """Builds one RecordBatch v2 from records appended one by one (the producer's batch).

    ``append`` returns False when the record would push the batch past ``batch_size`` bytes
    (estimated before compression); the first record is always accepted, however large, so a
    big record still gets a batch of its own. ``build()`` returns the finished batch, records
    compressed as a whole as Kafka's Java producer writes them: gzip a gzip stream (RFC 1952),
    snappy in snappy-java's (xerial) stream framing with 32 KiB blocks, lz4 the LZ4 frame format
    with 64 KiB independent blocks, zstd one zstd frame (level 3, Kafka's default).
    """

    __slots__ = ("_compression", "_batch_size", "_producer_id", "_producer_epoch",
                 "_base_sequence", "_base_offset", "_partition_leader_epoch", "_timestamp_type",
                 "_parts", "_count", "_size", "_base_ts", "_max_ts")

    def __init__(self, *, compression_type: int = COMPRESSION_NONE, batch_size: int = 16384,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE, base_offset: int = 0,
                 partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                 timestamp_type: int = TIMESTAMP_TYPE_CREATE_TIME) -> None:
        if compression_type not in SUPPORTED_COMPRESSION:
            raise ValueError(f"compression_type {compression_type!r}: Raftka writes none (0), "
                             f"gzip (1), snappy (2), lz4 (3) and zstd (4)")
        if not 0 < batch_size <= BATCH_BYTES_MAX:
            raise ValueError(f"batch_size {batch_size!r} must be in [1, {BATCH_BYTES_MAX}]")
        if timestamp_type not in (TIMESTAMP_TYPE_CREATE_TIME, TIMESTAMP_TYPE_LOG_APPEND_TIME):
            raise ValueError(f"timestamp_type {timestamp_type!r} must be 0 or 1")
        self._compression = compression_type
        self._batch_size = batch_size
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self._timestamp_type = timestamp_type
        self._parts: list[bytes] = []
        self._count = 0
        self._size = BATCH_OVERHEAD_BYTES
        self._base_ts = 0
        self._max_ts = 0

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the batch so far, before compression (an upper estimate when compressed)."""
        return self._size

    def is_full(self) -> bool:
        """True once the batch has reached ``batch_size`` bytes (before compression)."""
        return self._size >= self._batch_size

    def append(self, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers=()) -> bool:
        """Add a record; False (nothing added) when it would exceed ``batch_size``.

        ``key`` and ``value`` are bytes-like or None; ``headers`` is a sequence of
        ``(str, bytes | None)`` pairs. Timestamps are milliseconds since the epoch.
        """
        count = self._count
        if count:
            delta = timestamp_ms - self._base_ts
        else:
            if not 0 <= timestamp_ms <= _INT64_MAX:
                raise ValueError(f"timestamp_ms {timestamp_ms!r} must be in [0, 2**63)")
            self._base_ts = self._max_ts = timestamp_ms
            delta = 0
        small = _SMALL
        if 0 <= delta < _SMALL_VARINTS_N:
            ts = small[delta]
        else:
            if not 0 <= timestamp_ms <= _INT64_MAX:
                raise ValueError(f"timestamp_ms {timestamp_ms!r} must be in [0, 2**63)")
            ts = encode_varlong(delta)
        if key is None:
            key_length = _NULL_LENGTH
            key = b""
        else:
            n = len(key)
            key_length = small[n] if n < _SMALL_VARINTS_N else encode_varint(n)
        if value is None:
            value_length = _NULL_LENGTH
            value = b""
        else:
            n = len(value)
            value_length = small[n] if n < _SMALL_VARINTS_N else encode_varint(n)
        body = b"".join((_ZERO, ts, small[count] if count < _SMALL_VARINTS_N
                         else encode_varint(count), key_length, key, value_length, value,
                         _encode_headers(headers) if headers else _ZERO))
        n = len(body)
        length = small[n] if n < _SMALL_VARINTS_N else encode_varint(n)
        size = self._size + n + len(length)
        if size > self._batch_size and count:
            return False
        if timestamp_ms > self._max_ts:
            self._max_ts = timestamp_ms
        self._size = size
        self._parts += (length, body)
        self._count = count + 1
        return True

    def build(self) -> bytes:
        """The finished batch: header, CRC-32C and (compressed) records."""
        count = self._count
        if not count:
            raise ValueError("a record batch needs at least one record")
        records = b"".join(self._parts)
        if self._compression != COMPRESSION_NONE:
            if len(records) > DECOMPRESSED_BYTES_MAX:
                raise MessageTooLargeError(
                    f"a compressed batch may hold at most {DECOMPRESSED_BYTES_MAX} bytes of "
                    f"records before compression, this one holds {len(records)}")
            records = _COMPRESS[self._compression](records)
        attributes = self._compression | (ATTR_TIMESTAMP_TYPE if self._timestamp_type else 0)
        out = bytearray(BATCH_OVERHEAD_BYTES)
        try:
            _HEADER.pack_into(out, 0, self._base_offset, BATCH_LENGTH_MIN + len(records),
                              self._partition_leader_epoch, MAGIC, 0, attributes, count - 1,
                              self._base_ts, self._max_ts, self._producer_id,
                              self._producer_epoch, self._base_sequence, count)
        except struct.error as exc:
            raise ValueError(f"a batch header field is out of range: {exc} (base_offset "
                             f"{self._base_offset}, producer_id {self._producer_id}, "
                             f"producer_epoch {self._producer_epoch}, base_sequence "
                             f"{self._base_sequence}, partition_leader_epoch "
                             f"{self._partition_leader_epoch}, max timestamp "
                             f"{self._max_ts})") from None
        crc = _crc(records, _crc(memoryview(out)[ATTRIBUTES_OFFSET:]))
        _UINT32.pack_into(out, CRC_OFFSET, crc)
        out += records
        return bytes(out)


def _encode_headers(headers) -> bytes:
    if len(headers) > HEADERS_PER_RECORD_MAX:
        raise ValueError(f"a record may carry at most {HEADERS_PER_RECORD_MAX} headers, "
                         f"got {len(headers)}")
    parts = [encode_varint(len(headers))]
    for name, value in headers:
        encoded = name.encode("utf-8")
        parts.append(encode_varint(len(encoded)))
        parts.append(encoded)
        if value is None:
            parts.append(_NULL_LENGTH)
        else:
            parts.append(encode_varint(len(value)))
            parts.append(bytes(value))
    return b"".join(parts)


def _lz4_compress(data: bytes) -> bytes:
    # Kafka's lz4 framing: 64 KiB independent blocks, no content size, no checksums beyond the
    # batch CRC.
    return _lz4frame.compress(data, block_size=_lz4frame.BLOCKSIZE_MAX64KB, block_linked=False,
                              content_checksum=False, block_checksum=False, store_size=False)


def _lz4_decompress(data, pos: int, decompressed_bytes_max: int) -> bytes:
    # Streamed in chunks of at most _DECOMPRESS_CHUNK_BYTES, each counted against the cap before
    # the next is made: a bomb stops having produced at most the cap (one call asking for
    # everything reallocated its growing output and held up to twice the cap).
    decompressor = _lz4frame.LZ4FrameDecompressor()
    parts = []
    left = decompressed_bytes_max
    pending = data
    idle = 0
    try:
        while not decompressor.eof:
            if left:
                chunk = decompressor.decompress(pending, max_length=min(_DECOMPRESS_CHUNK_BYTES, left))
            elif decompressor.decompress(pending, max_length=1):
                raise CorruptRecordError(f"lz4 records of the batch at position {pos} decompress "
                                         f"to more than {decompressed_bytes_max} bytes")
            else:
                chunk = b""
            pending = b""
            if chunk:
                parts.append(chunk)
                left -= len(chunk)
                idle = 0
            elif decompressor.needs_input or idle > 2:
                raise CorruptRecordError(f"lz4 records of the batch at position {pos} are cut off")
            else:
                idle += 1
    except RuntimeError as exc:
        raise CorruptRecordError(f"lz4 records of the batch at position {pos} do not "
                                 f"decompress: {exc}") from None
    if decompressor.unused_data:
        raise CorruptRecordError(f"{len(decompressor.unused_data)} bytes follow the lz4 frame "
                                 f"of the batch at position {pos}")
    return parts[0] if len(parts) == 1 else b"".join(parts)


# gzip (codec 1): one gzip stream (RFC 1952) of the records section; members written one after
# the other are read as one stream, as Java's GZIPInputStream does. Level 6, Java's default.
def _gzip_compress(data: bytes) -> bytes:
    compressor = _zlib.compressobj(6, _zlib.DEFLATED, 16 + _zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data, pos: int, decompressed_bytes_max: int) -> bytes:
    # Streamed in chunks of at most _DECOMPRESS_CHUNK_BYTES (zlib's max_length), each counted against
    # the cap before the next is made: a bomb stops having produced at most the cap, never more
    # (one call asking for everything would hold its output twice while joining its blocks).
    parts = []
    left = decompressed_bytes_max
    decompressor = _zlib.decompressobj(16 + _zlib.MAX_WBITS)
    pending = data
    try:
        while True:
            if left:
                chunk = decompressor.decompress(pending, min(_DECOMPRESS_CHUNK_BYTES, left))
            elif decompressor.decompress(pending, 1):  # the cap is reached: one byte more is too much
                raise CorruptRecordError(f"gzip records of the batch at position {pos} decompress "
                                         f"to more than {decompressed_bytes_max} bytes")
            else:
                chunk = b""
            if chunk:
                parts.append(chunk)
                left -= len(chunk)
            if decompressor.eof:
                pending = decompressor.unused_data
                if not pending:
                    break
                decompressor = _zlib.decompressobj(16 + _zlib.MAX_WBITS)  # another member
                continue
            tail = decompressor.unconsumed_tail
            if not chunk and len(tail) >= len(pending):
                raise CorruptRecordError(f"gzip records of the batch at position {pos} are cut off")
            pending = tail
    except _zlib.error as exc:
        raise CorruptRecordError(f"gzip records of the batch at position {pos} do not "
                                 f"decompress: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


# snappy (codec 2): Kafka's Java client writes snappy-java's stream framing ("xerial"): the
# 8-byte magic, int32 version and int32 minimum compatible version (1 and 1), then blocks of
# [int32 big-endian length][raw snappy block of at most 32 KiB uncompressed]. librdkafka and
# Kafka also read a plain raw snappy block, told apart by the magic; Raftka reads both and
# writes the framing. A raw snappy block starts with its uncompressed length (a varint): every
# block's is read and summed before anything is allocated, then all are decompressed into one
# buffer of exactly that size.
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES: Final = 32 * 1024
_snappy = _cramjam.snappy


def _snappy_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    with memoryview(data) as view:
        for start in range(0, len(data), _XERIAL_BLOCK_BYTES):
            block = bytes(_snappy.compress_raw(view[start:start + _XERIAL_BLOCK_BYTES]))
            parts.append(_INT32.pack(len(block)))
            parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data, pos: int, decompressed_bytes_max: int) -> bytes:
    view = memoryview(data)
    n = len(view)
    blocks = []
    total = 0
    try:
        if view[:len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
            i = len(_XERIAL_HEADER)
            if n < i:
                raise CorruptRecordError(f"snappy records of the batch at position {pos} are cut "
                                         f"off inside the xerial header")
            while i < n:
                if n - i < 4:
                    raise CorruptRecordError(f"snappy records of the batch at position {pos} are "
                                             f"cut off inside a block length")
                length = _INT32.unpack_from(view, i)[0]
                i += 4
                if not 0 < length <= n - i:
                    raise CorruptRecordError(f"snappy records of the batch at position {pos} "
                                             f"declare a block of {length} bytes, {n - i} are left")
                blocks.append(view[i:i + length])
                i += length
        else:
            blocks.append(view)
        sizes = []
        for block in blocks:
            size = _snappy.decompress_raw_len(block)
            total += size
            if total > decompressed_bytes_max:
                raise CorruptRecordError(f"snappy records of the batch at position {pos} "
                                         f"decompress to more than {decompressed_bytes_max} bytes")
            sizes.append(size)
        out = bytearray(total)
        with memoryview(out) as target:
            at = 0
            for block, size in zip(blocks, sizes):
                if _snappy.decompress_raw_into(block, target[at:at + size]) != size:
                    raise CorruptRecordError(f"snappy records of the batch at position {pos} "
                                             f"hold a block shorter than it declares")
                at += size
    except _cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"snappy records of the batch at position {pos} do not "
                                 f"decompress: {exc}") from None
    finally:
        for block in blocks:
            block.release()
        view.release()
    return bytes(out)


# zstd (codec 4): one zstd frame (RFC 8878; more frames, and skippable ones, are read too).
# Bounding: the frame headers and block headers are walked first (a few struct reads per 128 KiB
# block) to bound the decompressed size: a raw or RLE block regenerates exactly its declared size,
# a compressed block at most min(window size, 128 KiB), and a frame that declares its content size
# (librdkafka, cramjam and aiokafka do; Java's streaming zstd does not) at most that. The frames
# are then decompressed into a buffer of min(bound, cap) bytes, which zstd refuses to overrun:
# the output never exceeds the cap, and a bomb fails once it has filled it. zstd's streaming
# decoder keeps its own window buffer besides (the frame's window size, at most 128 MiB by zstd's
# default limit; pages are touched only as output is produced, so at most the cap of them).
_ZSTD_MAGIC: Final = 0xFD2FB528
_ZSTD_BLOCK_BYTES_MAX: Final = 128 * 1024
_UINT32_LE = struct.Struct("<I")
_zstd = _cramjam.zstd


def _zstd_compress(data: bytes) -> bytes:
    return bytes(_zstd.compress(data, level=3))


def _zstd_bound(view, pos: int, decompressed_bytes_max: int) -> int:
    """An upper bound of the decompressed size of the zstd frames in ``view``."""
    def cut() -> CorruptRecordError:
        return CorruptRecordError(f"zstd records of the batch at position {pos} are cut off")

    n = len(view)
    i = 0
    bound = 0
    while i < n:
        if n - i < 8:
            raise cut()
        magic = _UINT32_LE.unpack_from(view, i)[0]
        if magic & 0xFFFFFFF0 == 0x184D2A50:   # a skippable frame: magic, size, size bytes
            i += 8 + _UINT32_LE.unpack_from(view, i + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"zstd records of the batch at position {pos} do not "
                                     f"decompress: no zstd frame magic at byte {i}")
        descriptor = view[i + 4]
        i += 5
        if descriptor & 0x08:
            raise CorruptRecordError(f"zstd records of the batch at position {pos} do not "
                                     f"decompress: a reserved frame header bit is set")
        single_segment = descriptor & 0x20
        window = 0
        if not single_segment:
            exponent, mantissa = view[i] >> 3, view[i] & 7
            window = (1 << (10 + exponent)) + ((1 << (10 + exponent)) >> 3) * mantissa
            i += 1
        i += (0, 1, 2, 4)[descriptor & 3]                       # dictionary id
        size_bytes = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        content_size = None
        if size_bytes:
            if n - i < size_bytes:
                raise cut()
            content_size = int.from_bytes(view[i:i + size_bytes], "little")
            if size_bytes == 2:
                content_size += 256
            i += size_bytes
            if content_size > decompressed_bytes_max:
                raise CorruptRecordError(f"zstd records of the batch at position {pos} declare "
                                         f"{content_size} bytes, more than "
                                         f"{decompressed_bytes_max}")
        if single_segment:
            window = content_size
        block_max = min(window, _ZSTD_BLOCK_BYTES_MAX)
        frame = 0
        while True:
            if n - i < 3:
                raise cut()
            block = view[i] | view[i + 1] << 8 | view[i + 2] << 16
            kind = (block >> 1) & 3
            size = block >> 3
            if kind == 0:       # raw
                frame += size
                i += 3 + size
            elif kind == 1:     # RLE: one byte repeated size times
                frame += size
                i += 4
            elif kind == 2:     # compressed
                frame += block_max
                i += 3 + size
            else:
                raise CorruptRecordError(f"zstd records of the batch at position {pos} do not "
                                         f"decompress: a reserved block type")
            if block & 1:
                break
        if descriptor & 0x04:
            i += 4                                              # content checksum
        if i > n:
            raise cut()
        bound += frame if content_size is None else min(frame, content_size)
    if i > n:
        raise cut()
    return bound


def _zstd_decompress(data, pos: int, decompressed_bytes_max: int) -> bytes:
    with memoryview(data) as view:
        try:
            bound = _zstd_bound(view, pos, decompressed_bytes_max)
        except IndexError:   # a frame header cut short
            raise CorruptRecordError(f"zstd records of the batch at position {pos} are "
                                     f"cut off") from None
        out = bytearray(min(bound, decompressed_bytes_max))
        try:
            written = _zstd.decompress_into(view, out)
        except _cramjam.DecompressionError as exc:
            if bound > decompressed_bytes_max and "whole buffer" in str(exc):
                raise CorruptRecordError(f"zstd records of the batch at position {pos} "
                                         f"decompress to more than {decompressed_bytes_max} "
                                         f"bytes") from None
            raise CorruptRecordError(f"zstd records of the batch at position {pos} do not "
                                     f"decompress: {exc}") from None
    if written != len(out):
        del out[written:]
    return bytes(out)


_COMPRESS: Final = {COMPRESSION_GZIP: _gzip_compress, COMPRESSION_SNAPPY: _snappy_compress,
                    COMPRESSION_LZ4: _lz4_compress, COMPRESSION_ZSTD: _zstd_compress}
# (records section, batch position for messages, cap) -> the uncompressed records section
_DECOMPRESS: Final = {COMPRESSION_GZIP: _gzip_decompress, COMPRESSION_SNAPPY: _snappy_decompress,
                      COMPRESSION_LZ4: _lz4_decompress, COMPRESSION_ZSTD: _zstd_decompress}


class Record(NamedTuple):
    """One decoded record: absolute offset and timestamp, key, value, headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


_new_record = tuple.__new__


def records_section(buf, pos: int = 0, *, verify_crc: bool = True,
                    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX) -> tuple[BatchHeader, bytes]:
    """The header of the batch at ``pos`` and its records section, decompressed: what
    :func:`decode_batch` decodes. Raises CorruptRecordError as decode_batch does."""
    if verify_crc:
        header = validate_batch(buf, pos)
    else:
        header = read_header(buf, pos)
        if len(buf) - pos < header.batch_length + LOG_OVERHEAD_BYTES:
            raise CorruptRecordError(f"record batch at position {pos} is cut off")
    end = pos + header.batch_length + LOG_OVERHEAD_BYTES
    with memoryview(buf) as view:
        data = bytes(view[pos + RECORDS_OFFSET:end])
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec != COMPRESSION_NONE:
        decompress = _DECOMPRESS.get(codec)
        if decompress is None:
            raise CorruptRecordError(f"record batch at position {pos} uses compression codec "
                                     f"{codec}; Raftka reads none (0), gzip (1), snappy (2), "
                                     f"lz4 (3) and zstd (4)")
        data = decompress(data, pos, decompressed_bytes_max)
    return header, data


def decode_batch(buf, pos: int = 0, *, verify_crc: bool = True,
                 decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX
                 ) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at ``pos``: its header and its records, decompressed.

    Under LogAppendTime every record's timestamp is the batch's maxTimestamp. Raises
    CorruptRecordError for a bad batch or a malformed record inside it (never IndexError).
    """
    header, data = records_section(buf, pos, verify_crc=verify_crc,
                                   decompressed_bytes_max=decompressed_bytes_max)
    if records_ext is not None:
        log_append_time = header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None
        found = records_ext.decode_records(Record, data, header.base_offset,
                                           header.base_timestamp, log_append_time)
        if found is not None and len(found) == header.record_count:
            return header, found
    try:
        records = _decode_records(data, header.base_offset, header.base_timestamp)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"record batch at position {pos} (baseOffset "
                                 f"{header.base_offset}): {exc.message}") from None
    except (IndexError, ValueError) as exc:
        raise CorruptRecordError(f"record batch at position {pos} (baseOffset "
                                 f"{header.base_offset}) holds a malformed record: "
                                 f"{exc}") from None
    if len(records) != header.record_count:
        raise CorruptRecordError(f"record batch at position {pos} declares "
                                 f"{header.record_count} records but holds {len(records)}")
    if header.attributes & ATTR_TIMESTAMP_TYPE:
        stamp = header.max_timestamp
        records = [_new_record(Record, (r[0], stamp, r[2], r[3], r[4])) for r in records]
    return header, records


def _decode_records(data: bytes, base_offset: int, base_ts: int) -> list[Record]:
    """Parse the (uncompressed) records section. Bad bytes raise CorruptRecordError,
    IndexError or ValueError, which the caller turns into CorruptRecordError.

    Hot loop: one- and two-byte varints (nearly all of them) are decoded inline from tables;
    longer ones go through decode_varint.
    """
    out: list[Record] = []
    append = out.append
    one = _ONE_BYTE
    two = _TWO_BYTES
    new = _new_record
    record_cls = Record
    n = len(data)
    i = 0
    while i < n:
        b = data[i]
        if b < 0x80:
            length = one[b]
            i += 1
        elif data[i + 1] < 0x80:
            length = two[(data[i + 1] << 7) | (b & 0x7F)]
            i += 2
        else:
            length, i = decode_varint(data, i)
        end = i + length
        if length < RECORD_BYTES_MIN - 1 or end > n:
            raise CorruptRecordError(f"record at byte {i} declares length {length}, "
                                     f"{n - i} bytes are left")
        i += 1                     # the record's attributes byte, unused
        b = data[i]
        if b < 0x80:
            ts_delta = one[b]
            i += 1
        elif data[i + 1] < 0x80:
            ts_delta = two[(data[i + 1] << 7) | (b & 0x7F)]
            i += 2
        else:
            ts_delta, i = decode_varint(data, i, 10)
        b = data[i]
        if b < 0x80:
            offset_delta = one[b]
            i += 1
        elif data[i + 1] < 0x80:
            offset_delta = two[(data[i + 1] << 7) | (b & 0x7F)]
            i += 2
        else:
            offset_delta, i = decode_varint(data, i)
        b = data[i]
        if b < 0x80:
            key_length = one[b]
            i += 1
        elif data[i + 1] < 0x80:
            key_length = two[(data[i + 1] << 7) | (b & 0x7F)]
            i += 2
        else:
            key_length, i = decode_varint(data, i)
        if key_length >= 0:
            key = data[i:i + key_length]
            i += key_length
        elif key_length == -1:
            key = None
        else:
            raise CorruptRecordError(f"record ending at byte {end} has key length {key_length}")
        b = data[i]
        if b < 0x80:
            value_length = one[b]
            i += 1
        elif data[i + 1] < 0x80:
            value_length = two[(data[i + 1] << 7) | (b & 0x7F)]
            i += 2
        else:
            value_length, i = decode_varint(data, i)
        if value_length >= 0:
            value = data[i:i + value_length]
            i += value_length
        elif value_length == -1:
            value = None
        else:
            raise CorruptRecordError(f"record ending at byte {end} has value length "
                                     f"{value_length}")
        if data[i] == 0:
            headers: list = []
            i += 1
        else:
            headers, i = _decode_headers(data, i, end)
        if i != end:
            raise CorruptRecordError(f"record ending at byte {end} has {end - i} bytes more "
                                     f"or less than its fields")
        append(new(record_cls, (base_offset + offset_delta, base_ts + ts_delta, key, value,
                                headers)))
    return out


def _decode_headers(data: bytes, i: int, end: int) -> tuple[list, int]:
    count, i = decode_varint(data, i)
    if not 0 <= count <= HEADERS_PER_RECORD_MAX:
        raise CorruptRecordError(f"record ending at byte {end} declares {count} headers "
                                 f"(at most {HEADERS_PER_RECORD_MAX})")
    headers = []
    for _ in range(count):
        name_length, i = decode_varint(data, i)
        if name_length < 0 or i + name_length > end:
            raise CorruptRecordError(f"record ending at byte {end} has a header key length "
                                     f"{name_length}")
        name = data[i:i + name_length].decode("utf-8")
        i += name_length
        value_length, i = decode_varint(data, i)
        if value_length >= 0:
            if i + value_length > end:
                raise CorruptRecordError(f"record ending at byte {end} has a header value "
                                         f"running past its end")
            value = data[i:i + value_length]
            i += value_length
        elif value_length == -1:
            value = None
        else:
            raise CorruptRecordError(f"record ending at byte {end} has a header value length "
                                     f"{value_length}")
        headers.append((name, value))
    return headers, i


def iter_records(buf) -> Iterator[Record]:
    """Every record of every whole batch in ``buf`` (a fetch response's records), CRCs checked.

    Control batches (transaction markers) are skipped, as Kafka's consumer does; a trailing
    partial batch is ignored.
    """
    for pos, header in iter_batches(buf):
        if header.attributes & ATTR_CONTROL:
            continue
        yield from decode_batch(buf, pos)[1]
