"""RecordBatch v2 codec (client/protocol/records.py): header functions, builder, decoder.

Batches for the header tests are made by hand from the documented layout (``raw_batch``) so a
mistake in the builder cannot hide a matching mistake in the header code.
"""
from __future__ import annotations

import struct

import crc32c
import pytest

from client.protocol import records as rec
from client.protocol.errors import CorruptRecordError, MessageTooLargeError


def raw_batch(body: bytes = b"\x00" * 7, *, base_offset: int = 0, epoch: int = -1,
              attributes: int = 0, last_offset_delta: int = 0, base_ts: int = 1000,
              max_ts: int = 1000, producer_id: int = -1, producer_epoch: int = -1,
              base_sequence: int = -1, record_count: int = 1, magic: int = 2,
              crc: int | None = None) -> bytes:
    """A batch built straight from the documented layout, records section given as bytes."""
    after_crc = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_ts, max_ts,
                            producer_id, producer_epoch, base_sequence, record_count) + body
    if crc is None:
        crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, epoch, magic, crc) + after_crc


def test_constants_match_the_documented_layout():
    assert rec.BATCH_OVERHEAD_BYTES == 61
    assert rec.LOG_OVERHEAD_BYTES == 12
    assert rec.CRC_OFFSET == 17 and rec.ATTRIBUTES_OFFSET == 21 and rec.RECORD_COUNT_OFFSET == 57
    assert len(raw_batch(b"")) == 61


def test_crc32c_is_castagnoli():
    # The standard check value of CRC-32C for "123456789".
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_read_header_returns_every_field_and_the_derived_properties():
    batch = raw_batch(base_offset=100, epoch=7, attributes=rec.COMPRESSION_LZ4 | 0x08 | 0x10,
                      last_offset_delta=4, base_ts=5, max_ts=9, producer_id=42,
                      producer_epoch=3, base_sequence=10, record_count=5)
    h = rec.read_header(batch)
    assert (h.base_offset, h.partition_leader_epoch, h.magic, h.last_offset_delta,
            h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch,
            h.base_sequence, h.record_count) == (100, 7, 2, 4, 5, 9, 42, 3, 10, 5)
    assert h.size == len(batch)
    assert h.batch_length == len(batch) - 12
    assert h.last_offset == 104 and h.next_offset == 105
    assert h.compression == rec.COMPRESSION_LZ4
    assert h.timestamp_type == 1 and h.is_transactional and not h.is_control
    assert h.last_sequence == 14
    assert h.crc == crc32c.crc32c(batch[21:])


def test_last_sequence_wraps_at_int32_max_and_is_minus_one_without_a_producer():
    h = rec.read_header(raw_batch(base_sequence=2**31 - 2, last_offset_delta=3, record_count=4))
    assert h.last_sequence == 1
    assert rec.read_header(raw_batch()).last_sequence == -1


def test_read_header_refuses_short_buffers_bad_magic_and_impossible_lengths():
    batch = raw_batch()
    with pytest.raises(CorruptRecordError, match="needs 61 bytes"):
        rec.read_header(batch[:60])
    with pytest.raises(CorruptRecordError, match="magic 1"):
        rec.read_header(raw_batch(magic=1))
    bad_length = bytearray(batch)
    struct.pack_into(">i", bad_length, 8, 10)
    with pytest.raises(CorruptRecordError, match="batchLength 10"):
        rec.read_header(bad_length)
    struct.pack_into(">i", bad_length, 8, -5)
    with pytest.raises(CorruptRecordError, match="batchLength -5"):
        rec.read_header(bad_length)
    with pytest.raises(CorruptRecordError, match="recordCount -1"):
        rec.read_header(raw_batch(record_count=-1))


def test_validate_batch_accepts_a_good_batch_at_any_position_and_from_any_buffer_type():
    batch = raw_batch(b"abcdefgh")
    buf = b"xyz" + batch
    for kind in (bytes, bytearray, memoryview):
        assert rec.validate_batch(kind(buf), 3).size == len(batch)


def test_validate_batch_reports_stored_and_computed_crc():
    batch = raw_batch(crc=0x12345678)
    with pytest.raises(CorruptRecordError) as info:
        rec.validate_batch(batch)
    assert info.value.stored_crc == 0x12345678
    assert info.value.computed_crc == crc32c.crc32c(batch[21:])
    assert "0x12345678" in str(info.value)


def test_validate_batch_refuses_a_truncated_batch():
    batch = raw_batch(b"0123456789")
    for cut in (0, 11, 12, 60, 61, len(batch) - 1):
        with pytest.raises(CorruptRecordError):
            rec.validate_batch(batch[:cut])


def test_every_single_bit_flip_after_the_crc_field_is_detected():
    batch = raw_batch(b"hello world, a record body")
    for position in range(rec.ATTRIBUTES_OFFSET, len(batch)):
        for bit in range(8):
            broken = bytearray(batch)
            broken[position] ^= 1 << bit
            with pytest.raises(CorruptRecordError):
                rec.validate_batch(broken)


def test_validate_batches_accepts_exact_whole_batches():
    a = raw_batch(last_offset_delta=2, record_count=3)
    b = raw_batch(b"\x01" * 20)
    headers = rec.validate_batches(a + b)
    assert [h.record_count for h in headers] == [3, 1]


def test_validate_batches_refuses_empty_partial_and_trailing_bytes():
    a = raw_batch()
    for bad in (b"", a[:-1], a + a[:30], a + b"\x00"):
        with pytest.raises(CorruptRecordError):
            rec.validate_batches(bad)


def test_validate_batches_refuses_a_batch_larger_than_max_batch_bytes():
    a = raw_batch(b"\x00" * 100)
    assert rec.validate_batches(a, max_batch_bytes=len(a))
    with pytest.raises(MessageTooLargeError):
        rec.validate_batches(a, max_batch_bytes=len(a) - 1)


def test_validate_batches_refuses_unsupported_codecs_and_gapped_offsets():
    with pytest.raises(rec.InvalidRecordError, match="codec 1"):
        rec.validate_batches(raw_batch(attributes=rec.COMPRESSION_GZIP))
    with pytest.raises(rec.InvalidRecordError, match="contiguous"):
        rec.validate_batches(raw_batch(last_offset_delta=5, record_count=2))
    with pytest.raises(rec.InvalidRecordError, match="contiguous"):
        rec.validate_batches(raw_batch(record_count=0))


def test_iter_batches_yields_whole_batches_and_stops_at_a_partial_tail():
    a, b = raw_batch(), raw_batch(b"\x02" * 30, base_offset=1)
    whole = a + b
    assert [pos for pos, _ in rec.iter_batches(whole)] == [0, len(a)]
    for cut in range(len(a), len(whole)):
        assert [pos for pos, _ in rec.iter_batches(whole[:cut])] == [0]
    assert list(rec.iter_batches(b"")) == []
    assert [pos for pos, _ in rec.iter_batches(b"zz" + a, 2)] == [2]


def test_iter_batches_raises_on_an_impossible_header_after_good_batches():
    a = raw_batch()
    garbage = bytearray(a)
    struct.pack_into(">i", garbage, 8, 3)
    seen = []
    with pytest.raises(CorruptRecordError):
        for pos, _ in rec.iter_batches(a + bytes(garbage)):
            seen.append(pos)
    assert seen == [0]


def test_assign_offsets_changes_only_base_offset_and_epoch_and_keeps_the_crc_valid():
    a = raw_batch(b"\x05" * 9, last_offset_delta=2, record_count=3, base_offset=77, epoch=1)
    b = raw_batch(b"\x06" * 4, last_offset_delta=0, record_count=1)
    for kind in (bytes, bytearray, memoryview):
        out = rec.assign_offsets(kind(a + b), 1000, 9)
        assert isinstance(out, bytes) and len(out) == len(a + b)
        h1, h2 = rec.validate_batches(out)
        assert (h1.base_offset, h1.partition_leader_epoch) == (1000, 9)
        assert (h2.base_offset, h2.partition_leader_epoch) == (1003, 9)
        # Nothing else moved: bytes outside the two stamped fields of each batch are equal.
        for pos, batch in ((0, a), (len(a), b)):
            got = out[pos:pos + len(batch)]
            assert got[8:12] == batch[8:12] and got[16:] == batch[16:]


def test_assign_offsets_refuses_partial_batches():
    a = raw_batch()
    with pytest.raises(CorruptRecordError):
        rec.assign_offsets(a + a[:20], 0, 0)


def test_set_log_append_time_stamps_max_timestamp_and_type_and_recomputes_the_crc():
    a = raw_batch(b"\x07" * 5, attributes=rec.COMPRESSION_LZ4, max_ts=5)
    out = rec.set_log_append_time(a + a, 123456)
    for h in rec.validate_batches(out):
        assert h.max_timestamp == 123456 and h.timestamp_type == 1
        assert h.compression == rec.COMPRESSION_LZ4
