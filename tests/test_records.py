"""RecordBatch v2 codec (common/records.py): header functions, builder, decoder.

Batches for the header tests are made by hand from the documented layout (``raw_batch``) so a
mistake in the builder cannot hide a matching mistake in the header code.
"""
from __future__ import annotations

import struct

import crc32c
import pytest

from raftka.common import records as rec
from raftka.common.errors import CorruptRecordError, MessageTooLargeError


def raw_batch(body: bytes = b"\x00" * 7, *, base_offset: int = 0, epoch: int = -1,
              attributes: int = 0, last_offset_delta: int = 0, base_ts: int = 1000,
              max_ts: int = 1000, producer_id: int = -1, producer_epoch: int = -1,
              base_sequence: int = -1, record_count: int = 1, magic: int = 2,
              crc: int | None = None) -> bytes:
    """A batch built straight from the documented layout, records section given as bytes (not
    records: tests of the header and framing pass ``check_records=False`` to validate_batches)."""
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
    headers = rec.validate_batches(a + b, check_records=False)
    assert [h.record_count for h in headers] == [3, 1]


def test_validate_batches_refuses_empty_partial_and_trailing_bytes():
    a = raw_batch()
    for bad in (b"", a[:-1], a + a[:30], a + b"\x00"):
        with pytest.raises(CorruptRecordError):
            rec.validate_batches(bad)


def test_validate_batches_refuses_a_batch_larger_than_max_batch_bytes():
    a = raw_batch(b"\x00" * 100)
    assert rec.validate_batches(a, check_records=False, max_batch_bytes=len(a))
    with pytest.raises(MessageTooLargeError):
        rec.validate_batches(a, check_records=False, max_batch_bytes=len(a) - 1)


def test_validate_batches_refuses_unsupported_codecs_and_gapped_offsets():
    with pytest.raises(rec.InvalidRecordError, match="codec 5"):
        rec.validate_batches(raw_batch(attributes=5))  # Kafka defines codecs 0-4 only
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
        h1, h2 = rec.validate_batches(out, check_records=False)
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
    for h in rec.validate_batches(out, check_records=False):
        assert h.max_timestamp == 123456 and h.timestamp_type == 1
        assert h.compression == rec.COMPRESSION_LZ4


# --- builder and decoder ----------------------------------------------------------------------

def build(records, **kwargs) -> bytes:
    builder = rec.BatchBuilder(**kwargs)
    for ts, key, value, headers in records:
        assert builder.append(ts, key, value, headers)
    return builder.build()


def test_a_known_batch_has_exactly_the_documented_bytes():
    # Two records at base offset 0, timestamps 1000 and 1001, no producer, no compression.
    # Worked out by hand from the layout in the module docstring; the CRC-32C is pinned.
    expected = bytes.fromhex(
        "0000000000000000"  # baseOffset 0
        "00000048"          # batchLength 72 = 49 header bytes after this field + 23 of records
        "ffffffff"          # partitionLeaderEpoch -1
        "02"                # magic 2
        "1bc2279b"          # crc (CRC-32C of the bytes from attributes on)
        "0000"              # attributes: no codec, CreateTime
        "00000001"          # lastOffsetDelta 1
        "00000000000003e8"  # baseTimestamp 1000
        "00000000000003e9"  # maxTimestamp 1001
        "ffffffffffffffff"  # producerId -1
        "ffff"              # producerEpoch -1
        "ffffffff"          # baseSequence -1
        "00000002"          # recordCount 2
        # record 0: length 7 (zigzag 0x0e), attributes 0, timestampDelta 0, offsetDelta 0,
        # key null (-1 -> 0x01), value length 1 (0x02) "v", 0 headers
        "0e" "00" "00" "00" "01" "02" "76" "00"
        # record 1: length 14, attributes 0, timestampDelta 1 (0x02), offsetDelta 1 (0x02),
        # key length 1 "k", value null, 2 headers: "h" = "x", "n" = null
        "1c" "00" "02" "02" "02" "6b" "01" "04" "02" "68" "02" "78" "02" "6e" "01"
    )
    got = build([(1000, None, b"v", ()), (1001, b"k", None, [("h", b"x"), ("n", None)])])
    assert got == expected
    assert crc32c.crc32c(expected[21:]) == 0x1BC2279B
    header, records = rec.decode_batch(expected)
    assert records == [rec.Record(0, 1000, None, b"v", []),
                       rec.Record(1, 1001, b"k", None, [("h", b"x"), ("n", None)])]


def test_varints_match_the_zigzag_encoding():
    cases = {0: "00", -1: "01", 1: "02", -64: "7f", 63: "7e", 64: "8001", 300: "d804",
             -(2**31): "ffffffff0f", 2**31 - 1: "feffffff0f"}
    for n, hexed in cases.items():
        assert rec.encode_varint(n).hex() == hexed
        assert rec.decode_varint(bytes.fromhex(hexed), 0) == (n, len(hexed) // 2)
    assert rec.encode_varlong(-(2**63)).hex() == "ff" * 9 + "01"
    assert rec.decode_varint(rec.encode_varlong(2**63 - 1), 0, 10) == (2**63 - 1, 10)
    with pytest.raises(CorruptRecordError):
        rec.decode_varint(b"\x80\x80\x80\x80\x80\x01", 0)       # six bytes for a varint
    with pytest.raises(CorruptRecordError):
        rec.decode_varint(b"\x80", 0)                           # cut off
    with pytest.raises(ValueError):
        rec.encode_varint(2**31)


def test_builder_size_in_bytes_is_exact_without_compression_and_batch_size_is_honoured():
    builder = rec.BatchBuilder(batch_size=1000)
    assert builder.size_in_bytes == 61 and builder.record_count == 0
    added = 0
    while builder.append(1, b"key", b"v" * 100):
        added += 1
        assert builder.size_in_bytes <= 1000
    assert added == builder.record_count == 8
    assert not builder.is_full() or builder.size_in_bytes >= 1000
    batch = builder.build()
    assert len(batch) == builder.size_in_bytes
    assert rec.read_header(batch).record_count == 8


def test_the_first_record_is_accepted_even_when_larger_than_batch_size():
    builder = rec.BatchBuilder(batch_size=100)
    assert builder.append(1, None, b"x" * 500)
    assert builder.is_full()
    assert not builder.append(1, None, b"y")
    assert len(rec.decode_batch(builder.build())[1]) == 1


def test_builder_refuses_bad_arguments():
    with pytest.raises(ValueError):
        rec.BatchBuilder(compression_type=5)
    with pytest.raises(ValueError):
        rec.BatchBuilder(batch_size=0)
    with pytest.raises(ValueError):
        rec.BatchBuilder().append(-5, None, b"x")
    with pytest.raises(ValueError):
        rec.BatchBuilder().build()


def test_builder_writes_producer_fields_and_lz4_in_the_lz4_frame_format():
    import lz4.frame
    batch = build([(10, b"a", b"b" * 1000, ())] * 3, compression_type=rec.COMPRESSION_LZ4,
                  producer_id=7, producer_epoch=2, base_sequence=40, base_offset=5,
                  partition_leader_epoch=3)
    header = rec.validate_batch(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.base_offset,
            header.partition_leader_epoch, header.compression) == (7, 2, 40, 5, 3, 3)
    assert batch[61:65] == b"\x04\x22\x4d\x18"      # LZ4 frame magic number
    assert len(batch) < 1000                         # it really is compressed
    plain = lz4.frame.decompress(batch[61:])
    assert plain[:2] == rec.encode_varint(len(plain) // 3 - 2)  # each record: 2-byte length
    assert [r.offset for r in rec.decode_batch(batch)[1]] == [5, 6, 7]


def test_log_append_time_gives_every_record_the_batch_max_timestamp():
    batch = build([(10, None, b"a", ()), (30, None, b"b", ()), (20, None, b"c", ())])
    assert [r.timestamp for r in rec.decode_batch(batch)[1]] == [10, 30, 20]
    stamped = rec.set_log_append_time(batch, 99)
    header, records = rec.decode_batch(stamped)
    assert header.timestamp_type == 1 and [r.timestamp for r in records] == [99, 99, 99]
    built = build([(10, None, b"a", ())], timestamp_type=1)
    assert rec.read_header(built).timestamp_type == 1


def test_decode_batch_can_skip_the_crc_check():
    batch = bytearray(build([(1, None, b"a", ())]))
    batch[17] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        rec.decode_batch(batch)
    assert rec.decode_batch(batch, verify_crc=False)[1][0].value == b"a"


def test_iter_records_reads_every_whole_batch_skips_control_batches_and_a_partial_tail():
    a = build([(1, None, b"a", ()), (2, None, b"b", ())], base_offset=0)
    control = bytearray(build([(3, None, b"marker", ())], base_offset=2))
    struct.pack_into(">h", control, 21, rec.ATTR_CONTROL | rec.ATTR_TRANSACTIONAL)
    struct.pack_into(">I", control, 17, crc32c.crc32c(bytes(control[21:])))
    b = build([(4, b"k", b"c", ())], base_offset=3, compression_type=rec.COMPRESSION_LZ4)
    buf = a + bytes(control) + b + b[:20]
    assert [(r.offset, r.value) for r in rec.iter_records(buf)] == [(0, b"a"), (1, b"b"), (3, b"c")]


def with_records_section(batch: bytes, section: bytes, record_count: int | None = None) -> bytes:
    """``batch`` with its records replaced by ``section``; length and CRC made right again."""
    out = bytearray(batch[:61]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)
    if record_count is not None:
        struct.pack_into(">i", out, 57, record_count)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def test_malformed_records_inside_a_valid_batch_raise_corrupt_record_error():
    batch = build([(1, b"key", b"value", [("h", b"v")]), (2, None, b"second", ())])
    section = batch[61:]
    cases = {
        "cut off": section[:-3],
        "trailing byte": section + b"\x00",
        "record length too large": b"\x7e" + section[1:],
        "negative key length": section[:4] + rec.encode_varint(-5) + section[5:],
        "endless varint": b"\xff" * 12,
        "bad utf-8 header key": section.replace(b"\x02h", b"\x02\xff"),
    }
    for what, bad in cases.items():
        with pytest.raises(CorruptRecordError):
            rec.decode_batch(with_records_section(batch, bad))
        print("refused:", what)
    with pytest.raises(CorruptRecordError, match="declares 3 records but holds 2"):
        rec.decode_batch(with_records_section(batch, section, record_count=3))


def test_lz4_garbage_and_an_lz4_bomb_raise_corrupt_record_error():
    import lz4.frame
    batch = build([(1, None, b"a", ())], compression_type=rec.COMPRESSION_LZ4)
    with pytest.raises(CorruptRecordError, match="do not decompress"):
        rec.decode_batch(with_records_section(batch, b"not lz4 at all"))
    with pytest.raises(CorruptRecordError, match="cut off"):
        rec.decode_batch(with_records_section(batch, batch[61:-4]))
    bomb = lz4.frame.compress(b"\x00" * (4 << 20))
    assert len(bomb) < 20_000
    with pytest.raises(CorruptRecordError, match="more than 1048576 bytes"):
        rec.decode_batch(with_records_section(batch, bomb), decompressed_bytes_max=1 << 20)
    assert rec.DECOMPRESSED_BYTES_MAX <= 256 << 20


def test_decode_batch_refuses_codecs_raftka_does_not_read():
    batch = bytearray(build([(1, None, b"a", ())]))
    struct.pack_into(">h", batch, 21, 6)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(CorruptRecordError, match="codec 6"):
        rec.decode_batch(batch)


def test_out_of_range_header_fields_raise_value_error_on_build():
    builder = rec.BatchBuilder(producer_epoch=2**15)
    builder.append(1, None, b"x")
    with pytest.raises(ValueError, match="out of range"):
        builder.build()


# -- the leader's record walk ------------------------------------------------------------------

def _resealed(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def _three(compression_type: int = 0) -> bytes:
    builder = rec.BatchBuilder(batch_size=1 << 20, compression_type=compression_type)
    for value in (b"one", b"two", b"three"):
        builder.append(1000, None, value)
    return builder.build()


def test_a_valid_crc_over_a_garbage_record_length_is_corrupt_message():
    """The poison pill seen from outside: CRC right, first record's length varint garbage."""
    poison = bytearray(_three())
    poison[rec.RECORDS_OFFSET] = 0x7F  # zigzag -64: a negative record length
    poison = _resealed(poison)
    rec.validate_batch(poison)  # the header and CRC alone pass: that is how it got stored before
    with pytest.raises(CorruptRecordError, match="record 0 declares length -64"):
        rec.validate_batches(poison)
    rec.validate_batches(poison, check_records=False)  # the follower's and the reader's check


def test_records_out_of_place_or_miscounted_are_invalid_record():
    batch = bytearray(_three())
    first_len = rec.decode_varint(batch, rec.RECORDS_OFFSET)
    offset_delta_at = first_len[1] + 1 + 1  # after length, attributes, 1-byte timestamp delta
    batch[offset_delta_at] = 2 * 5  # record 0 says offset delta 5
    with pytest.raises(rec.InvalidRecordError, match="record 0 has offset delta 5"):
        rec.validate_batches(_resealed(batch))
    short = bytearray(_three())
    struct.pack_into(">i", short, rec.RECORD_COUNT_OFFSET, 4)  # declares 4, holds 3
    struct.pack_into(">i", short, rec.LAST_OFFSET_DELTA_OFFSET, 3)  # lastOffsetDelta 3 to match
    with pytest.raises(rec.InvalidRecordError, match="declares 4 records but holds 3"):
        rec.validate_batches(_resealed(short))


def test_a_compressed_batch_is_walked_after_decompression():
    import lz4.frame
    batch = bytearray(_three(rec.COMPRESSION_LZ4))
    inner = bytearray(lz4.frame.decompress(bytes(batch[rec.RECORDS_OFFSET:])))
    inner[0] = 0x7F
    packed = lz4.frame.compress(bytes(inner), block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                content_checksum=False, store_size=False)
    damaged = bytearray(batch[:rec.RECORDS_OFFSET]) + packed
    struct.pack_into(">i", damaged, 8, len(damaged) - 12)  # batchLength
    with pytest.raises(CorruptRecordError, match="declares length -64"):
        rec.validate_batches(_resealed(damaged))
    rec.validate_batches(_three(rec.COMPRESSION_LZ4))  # the undamaged one passes


# -- compression codecs: gzip, snappy, lz4, zstd ---------------------------------------------------

COMPRESSED = [pytest.param(rec.COMPRESSION_GZIP, id="gzip"), pytest.param(rec.COMPRESSION_SNAPPY, id="snappy"),
              pytest.param(rec.COMPRESSION_LZ4, id="lz4"), pytest.param(rec.COMPRESSION_ZSTD, id="zstd")]
# How each codec's records section starts (what Kafka's Java producer writes).
SECTION_MAGIC = {rec.COMPRESSION_GZIP: b"\x1f\x8b\x08", rec.COMPRESSION_SNAPPY: b"\x82SNAPPY\x00\x00\x00\x00\x01",
                 rec.COMPRESSION_LZ4: b"\x04\x22\x4d\x18", rec.COMPRESSION_ZSTD: b"\x28\xb5\x2f\xfd"}


def _many(count: int = 148, size: int = 100) -> list:
    return [(1000 + i, b"key-%d" % (i % 7), (b"value %d " % i * 20)[:size], [("h", b"v%d" % i)] if i % 3 else ())
            for i in range(count)]


def _plain_section(records) -> bytes:
    return build(records, batch_size=1 << 24)[rec.RECORDS_OFFSET:]


@pytest.mark.parametrize("codec", COMPRESSED)
def test_each_codec_round_trips_through_the_walk_and_the_decoder(codec):
    records = _many()
    batch = build(records, batch_size=1 << 24, compression_type=codec, base_offset=50)
    header = rec.validate_batches(batch)[0]
    assert header.compression == codec
    assert batch[rec.RECORDS_OFFSET:].startswith(SECTION_MAGIC[codec])
    assert len(batch) < len(build(records, batch_size=1 << 24)) // 2  # it really is compressed
    decoded = rec.decode_batch(batch)[1]
    assert decoded == [rec.Record(50 + i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(records)]
    assert all(type(r.value) is bytes and type(r.key) is bytes for r in decoded)
    assert [r.value for r in rec.iter_records(batch + batch[:30])] == [v for _, _, v, _ in records]


def test_gzip_is_an_rfc_1952_stream_and_zstd_one_frame_of_the_records_section():
    import gzip
    import cramjam
    records = _many(20)
    plain = _plain_section(records)
    assert gzip.decompress(build(records, compression_type=rec.COMPRESSION_GZIP)[rec.RECORDS_OFFSET:]) == plain
    assert bytes(cramjam.zstd.decompress(build(records, compression_type=rec.COMPRESSION_ZSTD)[rec.RECORDS_OFFSET:])) == plain


def _xerial_blocks(section: bytes) -> list[bytes]:
    assert section[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    blocks, i = [], 16
    while i < len(section):
        (length,) = struct.unpack_from(">i", section, i)
        blocks.append(section[i + 4:i + 4 + length])
        i += 4 + length
    assert i == len(section)
    return blocks


def test_snappy_is_written_in_xerial_framing_with_32_kib_blocks_and_read_raw_too():
    import cramjam
    records = _many(1000)  # ~100 KB of records: four blocks
    batch = build(records, batch_size=1 << 24, compression_type=rec.COMPRESSION_SNAPPY)
    blocks = _xerial_blocks(batch[rec.RECORDS_OFFSET:])
    sizes = [cramjam.snappy.decompress_raw_len(b) for b in blocks]
    assert len(blocks) == 4 and all(s == 32 * 1024 for s in sizes[:-1]) and 0 < sizes[-1] <= 32 * 1024
    plain = _plain_section(records)
    assert b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks) == plain
    # Raw snappy (no framing), as librdkafka can send and Kafka reads: the same records.
    raw = with_records_section(batch, bytes(cramjam.snappy.compress_raw(plain)))
    assert rec.validate_batches(raw)[0].compression == rec.COMPRESSION_SNAPPY
    assert rec.decode_batch(raw)[1] == rec.decode_batch(batch)[1]
    # Xerial framing written by another encoder, blocks of any size: read block by block.
    odd = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(
        struct.pack(">i", len(c)) + c for c in
        (bytes(cramjam.snappy.compress_raw(plain[i:i + 5000])) for i in range(0, len(plain), 5000)))
    assert rec.decode_batch(with_records_section(batch, odd))[1] == rec.decode_batch(batch)[1]


def _gzip_members(*parts: bytes) -> bytes:
    import gzip
    return b"".join(gzip.compress(p) for p in parts)


def test_gzip_reads_concatenated_members_as_one_stream():
    records = _many(30)
    plain = _plain_section(records)
    batch = build(records, compression_type=rec.COMPRESSION_GZIP)
    two = with_records_section(batch, _gzip_members(plain[:1000], plain[1000:]))
    assert rec.decode_batch(two)[1] == rec.decode_batch(batch)[1]
    rec.validate_batches(two)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_cut_off_or_garbage_compressed_records_are_corrupt(codec):
    batch = build(_many(40), compression_type=codec)
    section = batch[rec.RECORDS_OFFSET:]
    cases = {"garbage": b"definitely not compressed data at all",
             "cut off": section[:-7], "cut in half": section[:len(section) // 2],
             "magic only": SECTION_MAGIC[codec], "trailing garbage": section + b"\x01\x02\x03\x04\x05\x06\x07\x08",
             "damaged middle": section[:40] + bytes(b ^ 0x5A for b in section[40:60]) + section[60:]}
    for what, bad in cases.items():
        damaged = with_records_section(batch, bad)
        with pytest.raises(CorruptRecordError, match=r"at position 0"):
            rec.decode_batch(damaged)
        with pytest.raises((CorruptRecordError, rec.InvalidRecordError), match=r"at position 0"):
            rec.validate_batches(damaged)
        print("refused:", what)
    # Position named: a bad batch after a good one.
    good = build(_many(3))
    with pytest.raises(CorruptRecordError, match=f"at position {len(good)}"):
        rec.validate_batches(good + with_records_section(batch, section[:-7]))


# Bombs: a few KB (gzip ~100 KB and lz4 ~300 KB: deflate tops out near 1:1000, lz4 near 1:255) that
# would decompress far past the cap. Each must fail with CorruptRecordError naming the batch, quickly, without Python ever holding
# much more than the cap (tracemalloc sees bytearray, bytes and zlib's buffers).

def _zstd_rle_bomb(total: int) -> bytes:
    """A hand-made zstd frame: no content size, 128 KiB window, RLE blocks of 128 KiB zeros."""
    block = 128 * 1024
    count = total // block
    out = bytearray(struct.pack("<I", 0xFD2FB528)) + bytes([0x00, 0x38])  # no FCS; window 2**17
    for n in range(count):
        header = (1 if n == count - 1 else 0) | (1 << 1) | (block << 3)
        out += header.to_bytes(3, "little") + b"\x00"
    return bytes(out)


def _zstd_declared_bomb() -> bytes:
    """A zstd frame declaring 4 GiB of content (single segment, 8-byte content size)."""
    return struct.pack("<I", 0xFD2FB528) + bytes([0xE0]) + struct.pack("<Q", 4 << 30) + b"\x01\x00\x00"


def _snappy_raw_bomb() -> bytes:
    return b"\xff\xff\xff\xff\x0f" + b"\x00" * 64  # a raw block declaring 4 GiB - 1


def _snappy_xerial_bomb() -> bytes:
    # 200 blocks, each a valid-looking raw block header declaring 1 MiB: 200 MiB in ~2 KB.
    block = rec.encode_varint(0) and bytes([0x80, 0x80, 0x40]) + b"\x00"
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + (struct.pack(">i", len(block)) + block) * 200


def _gzip_bomb() -> bytes:
    import zlib
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\x00" * (1 << 20)
    return b"".join(compressor.compress(zeros) for _ in range(100)) + compressor.flush()  # 100 MiB


def _lz4_bomb() -> bytes:
    import lz4.frame
    compressor = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB)
    zeros = b"\x00" * (4 << 20)  # lz4 tops out near 1:255: 72 MiB in ~300 KB
    return compressor.begin() + b"".join(compressor.compress(zeros) for _ in range(18)) + compressor.flush()


BOMBS = [pytest.param(rec.COMPRESSION_GZIP, _gzip_bomb, id="gzip-100MiB"),
         pytest.param(rec.COMPRESSION_SNAPPY, _snappy_raw_bomb, id="snappy-raw-4GiB"),
         pytest.param(rec.COMPRESSION_SNAPPY, _snappy_xerial_bomb, id="snappy-xerial-200MiB"),
         pytest.param(rec.COMPRESSION_LZ4, _lz4_bomb, id="lz4-72MiB"),
         pytest.param(rec.COMPRESSION_ZSTD, lambda: _zstd_rle_bomb(1 << 30), id="zstd-1GiB-undeclared"),
         pytest.param(rec.COMPRESSION_ZSTD, _zstd_declared_bomb, id="zstd-4GiB-declared")]


@pytest.mark.parametrize("codec, make", BOMBS)
def test_a_bomb_is_refused_at_the_cap_without_holding_more_than_it(codec, make):
    import time
    import tracemalloc
    bomb = make()
    assert len(bomb) < {rec.COMPRESSION_GZIP: 120_000, rec.COMPRESSION_LZ4: 320_000}.get(codec, 40_000)
    good = build(_many(3))
    batch = good + with_records_section(build(_many(3), compression_type=codec), bomb)
    tracemalloc.start()
    try:
        started = time.perf_counter()
        for attempt in (lambda: rec.validate_batches(batch), lambda: rec.decode_batch(batch, len(good))):
            with pytest.raises(CorruptRecordError, match=f"at position {len(good)}.*more than "
                                                         f"{rec.DECOMPRESSED_BYTES_MAX}"):
                attempt()
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < rec.DECOMPRESSED_BYTES_MAX + (4 << 20), f"peak {peak} bytes"
    assert elapsed < 5, f"{elapsed:.2f} s"
    with pytest.raises(CorruptRecordError, match="more than 1048576"):
        rec.decode_batch(batch, len(good), decompressed_bytes_max=1 << 20)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_a_batch_exactly_at_the_cap_decompresses_and_one_byte_more_does_not(codec):
    plain = _plain_section([(1, None, b"x" * 2000, ())] * 5)
    batch = build([(1, None, b"x" * 2000, ())] * 5, compression_type=codec, batch_size=1 << 20)
    assert len(rec.decode_batch(batch, decompressed_bytes_max=len(plain))[1]) == 5
    with pytest.raises(CorruptRecordError, match=f"more than {len(plain) - 1}"):
        rec.decode_batch(batch, decompressed_bytes_max=len(plain) - 1)


def test_a_zstd_frame_without_content_size_and_with_checksum_and_skippable_frames_reads():
    import cramjam
    records = _many(200)
    plain = _plain_section(records)
    batch = build(records, batch_size=1 << 24, compression_type=rec.COMPRESSION_ZSTD)
    streamed = cramjam.zstd.Compressor(level=3)  # a streaming frame, as Java's zstd-jni writes it
    streamed.compress(plain)
    frame = bytes(streamed.finish())
    assert not frame[4] & 0xC0  # no content size declared
    skippable = struct.pack("<II", 0x184D2A5E, 3) + b"abc"
    for section in (frame, skippable + frame, frame + skippable):
        assert rec.decode_batch(with_records_section(batch, section))[1] == rec.decode_batch(batch)[1]
    # A walked-and-damaged record inside a well-formed frame is still refused by the walk.
    inner = bytearray(plain)
    inner[0] = 0x7F
    with pytest.raises(CorruptRecordError, match="declares length -64"):
        rec.validate_batches(with_records_section(batch, bytes(cramjam.zstd.compress(bytes(inner)))))


# -- batches other clients' producers build -------------------------------------------------------

CLIENT_RECORDS = [(1_700_000_000_000 + i, b"k%d" % (i % 4), b"value-%d " % i * 12, [("trace", b"t-%d" % i)])
                  for i in range(60)]


@pytest.mark.parametrize("codec", COMPRESSED)
def test_batches_built_by_aiokafkas_producer_read_correctly(codec):
    default_records = pytest.importorskip("aiokafka.record.default_records")
    for builder_class in (default_records._DefaultRecordBatchBuilderPy, default_records.DefaultRecordBatchBuilder):
        builder = builder_class(magic=2, compression_type=codec, is_transactional=0, producer_id=9,
                                producer_epoch=1, base_sequence=0, batch_size=1 << 20)
        for i, (ts, key, value, headers) in enumerate(CLIENT_RECORDS):
            assert builder.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
        batch = bytes(builder.build())
        header = rec.validate_batches(batch)[0]
        assert header.compression == codec and header.record_count == len(CLIENT_RECORDS)
        decoded = rec.decode_batch(batch)[1]
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == \
            [(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(CLIENT_RECORDS)]


@pytest.mark.parametrize("codec", COMPRESSED)
def test_our_batches_read_correctly_by_aiokafkas_and_kafka_pythons_readers(codec):
    default_records = pytest.importorskip("aiokafka.record.default_records")
    batch = build(CLIENT_RECORDS, compression_type=codec, base_offset=100, batch_size=1 << 20)
    readers = [default_records._DefaultRecordBatchPy, default_records.DefaultRecordBatch]
    if codec in (rec.COMPRESSION_GZIP, rec.COMPRESSION_LZ4):  # kafka-python reads snappy and zstd only
        kafka_records = pytest.importorskip("kafka.record.default_records")  # with packages not installed
        readers.append(kafka_records.DefaultRecordBatch)
    for reader in readers:
        parsed = reader(bytearray(batch))
        assert parsed.validate_crc() and parsed.compression_type == codec
        got = [(r.offset, r.timestamp, r.key, r.value, [(k, bytes(v)) for k, v in r.headers]) for r in parsed]
        assert got == [(100 + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(CLIENT_RECORDS)], reader
