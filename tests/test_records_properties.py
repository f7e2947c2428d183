"""Property tests of the RecordBatch v2 codec: round trips, corruption detection, fuzzed records.

Hypothesis prints the falsifying example (and how to reproduce it) when one of these fails.
"""
from __future__ import annotations

import struct

import crc32c
from hypothesis import strategies as st

from raftka.common import records as rec
from raftka.common.errors import CorruptRecordError
from helpers import smoke_and_soak

optional_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=3)
timestamps = st.integers(min_value=0, max_value=2**62)
record_lists = st.lists(st.tuples(timestamps, optional_bytes, optional_bytes, headers),
                        min_size=1, max_size=25)
codecs = st.sampled_from([rec.COMPRESSION_NONE, rec.COMPRESSION_GZIP, rec.COMPRESSION_SNAPPY,
                          rec.COMPRESSION_LZ4, rec.COMPRESSION_ZSTD])
compressed_codecs = st.sampled_from([rec.COMPRESSION_GZIP, rec.COMPRESSION_SNAPPY, rec.COMPRESSION_LZ4,
                                     rec.COMPRESSION_ZSTD])

# Examples per property: the default suite runs a third, `-m soak` all (helpers.smoke_and_soak).
EXAMPLES = 150
SMOKE_EXAMPLES = 50


def build(records, **kwargs) -> bytes:
    builder = rec.BatchBuilder(batch_size=1 << 20, **kwargs)
    for ts, key, value, hdrs in records:
        assert builder.append(ts, key, value, hdrs)
    return builder.build()


@smoke_and_soak(SMOKE_EXAMPLES, EXAMPLES,
                records=record_lists, codec=codecs, base_offset=st.integers(0, 2**62),
                producer_id=st.integers(-1, 2**62), producer_epoch=st.integers(-1, 2**15 - 1),
                base_sequence=st.integers(-1, 2**31 - 1), epoch=st.integers(-1, 2**31 - 1))
def test_encode_then_decode_is_the_identity(records, codec, base_offset, producer_id,
                                            producer_epoch, base_sequence, epoch):
    batch = build(records, compression_type=codec, base_offset=base_offset,
                  producer_id=producer_id, producer_epoch=producer_epoch,
                  base_sequence=base_sequence, partition_leader_epoch=epoch)
    header, decoded = rec.decode_batch(batch)
    assert decoded == [rec.Record(base_offset + i, ts, key, value, list(hdrs))
                       for i, (ts, key, value, hdrs) in enumerate(records)]
    assert header.size == len(batch)
    assert header.record_count == len(records) and header.last_offset_delta == len(records) - 1
    assert header.base_timestamp == records[0][0]
    assert header.max_timestamp == max(r[0] for r in records)
    assert (header.compression, header.producer_id, header.producer_epoch, header.base_sequence,
            header.partition_leader_epoch) == (codec, producer_id, producer_epoch,
                                               base_sequence, epoch)
    assert rec.validate_batches(batch) == [header]


@smoke_and_soak(SMOKE_EXAMPLES, EXAMPLES, records=record_lists, codec=codecs, data=st.data())
def test_a_flipped_bit_anywhere_after_the_crc_field_is_detected(records, codec, data):
    batch = build(records, compression_type=codec)
    position = data.draw(st.integers(rec.ATTRIBUTES_OFFSET, len(batch) - 1), label="position")
    bit = data.draw(st.integers(0, 7), label="bit")
    broken = bytearray(batch)
    broken[position] ^= 1 << bit
    try:
        rec.validate_batch(broken)
    except CorruptRecordError:
        return
    raise AssertionError(f"flip of bit {bit} at byte {position} went unnoticed")


@smoke_and_soak(SMOKE_EXAMPLES, EXAMPLES, records=record_lists, data=st.data())
def test_a_truncated_batch_is_refused_and_iter_batches_stops_before_it(records, data):
    batch = build(records)
    cut = data.draw(st.integers(0, len(batch) - 1), label="cut")
    try:
        rec.validate_batch(batch[:cut])
    except CorruptRecordError:
        pass
    else:
        raise AssertionError(f"batch cut to {cut} of {len(batch)} bytes was accepted")
    assert [pos for pos, _ in rec.iter_batches(batch + batch[:cut])] == [0]
    assert [r.value for r in rec.iter_records(batch + batch[:cut])] == [r[2] for r in records]


@smoke_and_soak(SMOKE_EXAMPLES, EXAMPLES,
                batches=st.lists(record_lists, min_size=1, max_size=4), base_offset=st.integers(0, 2**40),
                epoch=st.integers(0, 2**31 - 1))
def test_assign_offsets_keeps_crcs_valid_and_offsets_contiguous(batches, base_offset, epoch):
    buf = b"".join(build(records, base_offset=0) for records in batches)
    out = rec.assign_offsets(buf, base_offset, epoch)
    headers = rec.validate_batches(out)
    expected = base_offset
    for header in headers:
        assert header.base_offset == expected and header.partition_leader_epoch == epoch
        expected = header.next_offset
    assert [r.offset for r in rec.iter_records(out)] == list(
        range(base_offset, base_offset + sum(len(b) for b in batches)))
    # The leader passes the headers it validated: the same bytes without a second walk.
    assert rec.assign_offsets(buf, base_offset, epoch, rec.validate_batches(buf)) == out
    # Every byte outside baseOffset (0-7) and partitionLeaderEpoch (12-15) is unchanged.
    mask = bytearray(buf)
    for pos, _ in rec.iter_batches(out):
        mask[pos:pos + 8] = out[pos:pos + 8]
        mask[pos + 12:pos + 16] = out[pos + 12:pos + 16]
    assert bytes(mask) == out


@smoke_and_soak(2 * SMOKE_EXAMPLES, 2 * EXAMPLES, records=record_lists, data=st.data())
def test_fuzzed_records_inside_a_valid_batch_decode_or_raise_corrupt_record_error(records, data):
    # Mutate the records section, then make length and CRC right again, so the damage reaches
    # the record parser: it must either decode or raise CorruptRecordError, nothing else.
    batch = build(records)
    section = bytearray(batch[61:])
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        kind = data.draw(st.sampled_from(["set", "cut", "insert"]), label="kind")
        at = data.draw(st.integers(0, max(len(section) - 1, 0)), label="at")
        if kind == "set" and section:
            section[at] = data.draw(st.integers(0, 255), label="byte")
        elif kind == "cut":
            del section[at:at + data.draw(st.integers(1, 8), label="length")]
        else:
            section[at:at] = data.draw(st.binary(min_size=1, max_size=8), label="bytes")
    out = bytearray(batch[:61]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    try:
        rec.decode_batch(bytes(out))
    except CorruptRecordError:
        pass


# -- the leader's record walk (validate_batches with check_records) ---------------------------

def reseal(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed: what a buggy or hostile producer can send."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


@smoke_and_soak(SMOKE_EXAMPLES, EXAMPLES, records=record_lists, data=st.data())
def test_a_resealed_damaged_batch_is_refused_by_the_walk_or_decodes_whole(records, data):
    """Accepted by the leader => every consumer can decode it, all recordCount records: the
    invariant that keeps a valid-CRC poison pill out of the log."""
    batch = bytearray(build(records))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(rec.RECORDS_OFFSET, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    damaged = reseal(batch)
    try:
        headers = rec.validate_batches(damaged)
    except (CorruptRecordError, rec.InvalidRecordError):
        return
    header, decoded = rec.decode_batch(damaged)
    assert len(decoded) == header.record_count == headers[0].record_count
    assert [r.offset - header.base_offset for r in decoded] == list(range(header.record_count))


@smoke_and_soak(130, 400, records=record_lists, codec=compressed_codecs, data=st.data())
def test_a_resealed_damaged_compressed_batch_is_refused_or_decodes_whole(records, codec, data):
    """The same invariant for compressed batches: damage to the compressed bytes (set, cut or
    inserted bytes, CRC made right again) is refused by the leader's walk with CorruptRecordError or
    InvalidRecordError naming the batch, never another exception, or the batch decodes whole."""
    batch = build(records, compression_type=codec)
    section = bytearray(batch[rec.RECORDS_OFFSET:])
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        kind = data.draw(st.sampled_from(["set", "cut", "insert"]), label="kind")
        at = data.draw(st.integers(0, max(len(section) - 1, 0)), label="at")
        if kind == "set" and section:
            section[at] = data.draw(st.integers(0, 255), label="byte")
        elif kind == "cut":
            del section[at:at + data.draw(st.integers(1, 8), label="length")]
        else:
            section[at:at] = data.draw(st.binary(min_size=1, max_size=8), label="bytes")
    out = bytearray(batch[:rec.RECORDS_OFFSET]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)
    damaged = reseal(out)
    try:
        headers = rec.validate_batches(damaged)
    except (CorruptRecordError, rec.InvalidRecordError) as exc:
        assert "at position 0" in str(exc), exc
        try:
            rec.decode_batch(damaged)
        except CorruptRecordError:
            pass
        return
    header, decoded = rec.decode_batch(damaged)
    assert len(decoded) == header.record_count == headers[0].record_count
