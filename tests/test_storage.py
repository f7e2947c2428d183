"""The partition log (storage/): appends, reads, offsets, segments, indexes, recovery, epochs,
retention, truncation, flush policy, bad input and disk errors.

Every test works on a real directory (pytest's tmp_path) and real files; "crashes" are
simulated by reopening without close() and by writing torn or garbage bytes into segment files
as a crash would leave them. The real-process SIGKILL test is in test_storage_crash.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.common.errors import (
    ConfigError,
    CorruptRecordError,
    FencedLeaderEpochError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from raftka.common.records import (
    BatchBuilder,
    decode_batch,
    iter_batches,
    read_header,
)
from raftka.storage import Log, LogManager
from raftka.storage.epoch_cache import LeaderEpochCache
from raftka.storage.loader import CheckpointedOffsets

ROOT = Path(__file__).resolve().parent.parent


def make_batch(count: int = 3, *, ts: int = 1_000, value_size: int = 20, tag: int = 0,
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    builder = BatchBuilder(batch_size=1 << 24, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence)
    for i in range(count):
        builder.append(ts + i, f"k{tag}-{i}".encode(), bytes([tag % 256]) * value_size)
    return builder.build()


def batches_of(data: bytes) -> list:
    """Headers of the whole batches in ``data``; asserts nothing partial trails them."""
    found = list(iter_batches(data))
    end = found[-1][0] + found[-1][1].size if found else 0
    assert end == len(data), "a read returned bytes past the last whole batch"
    return [h for _, h in found]


def open_log(path: Path, checkpoints: CheckpointedOffsets = CheckpointedOffsets(), **config) -> Log:
    """The log ``topic-0`` under ``path``, opened without a LogManager; ``checkpoints``: the
    offsets its log dir's checkpoint files would hold (``checkpointed``)."""
    cfg = {k.replace("_", "."): v for k, v in config.items()}
    return Log.open(path / "topic-0", cfg, topic="topic", partition=0, checkpoints=checkpoints)


def checkpointed(lg: Log) -> CheckpointedOffsets:
    """The offsets a LogManager's checkpoint pass would write for ``lg`` now."""
    return CheckpointedOffsets(lg.log_start_offset, lg.recovery_point, lg.high_watermark)


def read_all(lg: Log, start: int | None = None) -> list:
    """Every batch from ``start`` (default: log start) to the log end, read in small steps."""
    offset = lg.log_start_offset if start is None else start
    out = []
    while offset < lg.log_end_offset:
        data = lg.read(offset, 700).records
        headers = batches_of(data)
        assert headers, f"empty read at {offset} below the log end {lg.log_end_offset}"
        out.extend(headers)
        offset = headers[-1].next_offset
    return out


def assert_contiguous(headers: list, start: int, end: int) -> None:
    expected = start
    for h in headers:
        assert h.base_offset == expected, f"gap or overlap at {h.base_offset}, expected {expected}"
        expected = h.next_offset
    assert expected == end


# --- appends and reads -------------------------------------------------------------------------

def test_appended_batches_read_back_byte_for_byte_with_assigned_offsets(tmp_path):
    lg = open_log(tmp_path)
    sent = [make_batch(n, tag=n) for n in (1, 5, 2)]
    infos = [lg.append_as_leader(b, leader_epoch=4) for b in sent]
    assert [(i.first_offset, i.last_offset, i.record_count) for i in infos] == [(0, 0, 1), (1, 5, 5), (6, 7, 2)]
    assert lg.log_end_offset == 8
    data = lg.read(0, 1 << 20).records
    headers = batches_of(data)
    assert [h.base_offset for h in headers] == [0, 1, 6]
    assert all(h.partition_leader_epoch == 4 for h in headers)
    pos = 0
    for original, h in zip(sent, headers):
        stored = data[pos:pos + h.size]
        assert stored[12:16] == (4).to_bytes(4, "big") and stored[16:] == original[16:]
        _, records = decode_batch(stored)
        assert [r.offset for r in records] == list(range(h.base_offset, h.next_offset))
        pos += h.size


def test_one_append_of_several_batches_gets_contiguous_offsets(tmp_path):
    lg = open_log(tmp_path)
    info = lg.append_as_leader(make_batch(2) + make_batch(3) + make_batch(1), leader_epoch=0)
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (0, 5, 3, 6)
    assert [h.base_offset for h in batches_of(lg.read(0, 1 << 20).records)] == [0, 2, 5]


def test_read_returns_whole_batches_and_the_first_one_even_when_larger_than_max_bytes(tmp_path):
    lg = open_log(tmp_path)
    for _ in range(5):
        lg.append_as_leader(make_batch(4, value_size=100), 0)
    size = read_header(lg.read(0, 1).records).size
    assert len(lg.read(0, 1).records) == size  # larger than max_bytes, still served whole
    assert lg.read(0, 1, min_one_batch=False).records == b""
    assert len(lg.read(0, size * 2 + size // 2).records) == 2 * size
    fetched = lg.read(6, 10_000)  # offset 6 lies inside the batch 4..7
    assert fetched.first_offset == 4 and batches_of(fetched.records)[0].base_offset == 4


def test_reading_at_the_log_end_is_empty_and_outside_the_range_is_offset_out_of_range(tmp_path):
    lg = open_log(tmp_path)
    lg.append_as_leader(make_batch(3), 0)
    assert lg.read(3, 1000).records == b""
    with pytest.raises(OffsetOutOfRangeError) as caught:
        lg.read(4, 1000)
    assert caught.value.code == 1 and "outside" in str(caught.value)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 1000)


def test_max_offset_hides_batches_at_or_past_the_high_watermark(tmp_path):
    lg = open_log(tmp_path)
    for _ in range(4):
        lg.append_as_leader(make_batch(2), 0)  # offsets 0-1, 2-3, 4-5, 6-7
    assert [h.base_offset for h in batches_of(lg.read(0, 1 << 20, max_offset=4).records)] == [0, 2]
    assert [h.base_offset for h in batches_of(lg.read(0, 1 << 20, max_offset=5).records)] == [0, 2]
    assert lg.read(4, 1 << 20, max_offset=4).records == b""


def test_offset_for_timestamp_finds_the_earliest_record_reaching_the_timestamp(tmp_path):
    lg = open_log(tmp_path, segment_bytes=400, index_interval_bytes=0)
    for i in range(20):
        lg.append_as_leader(make_batch(2, ts=10_000 + 100 * i), 0)  # batch i: ts 10000+100i, +1
    assert len(lg.segments) > 3
    assert lg.offset_for_timestamp(0) == (0, 10_000)
    assert lg.offset_for_timestamp(10_001) == (1, 10_001)  # the record, not its batch's start
    assert lg.offset_for_timestamp(10_002) == (2, 10_100)
    assert lg.offset_for_timestamp(11_901) == (39, 11_901)
    assert lg.offset_for_timestamp(11_902) is None


def test_offset_for_timestamp_looks_inside_a_batch_whose_timestamps_are_out_of_order(tmp_path):
    # Kafka's rule: the earliest offset whose timestamp >= the target, even when a later record
    # of the same batch carries a smaller timestamp; compressed batches are decoded the same way.
    for compression in (0, 3):
        lg = Log.open(tmp_path / f"c{compression}-0", {}, topic="c", partition=0)
        lg.append_as_leader(make_batch(2, ts=100), 0)  # offsets 0, 1: ts 100, 101
        builder = BatchBuilder(batch_size=1 << 20, compression_type=compression)
        for ts in (500, 900, 300, 700):  # offsets 2..5
            builder.append(ts, None, b"v")
        lg.append_as_leader(builder.build(), 0)
        assert lg.offset_for_timestamp(400) == (2, 500)
        assert lg.offset_for_timestamp(600) == (3, 900)
        assert lg.offset_for_timestamp(200) == (2, 500)
        assert lg.offset_for_timestamp(901) is None
        lg.close()


def test_offset_for_timestamp_under_log_append_time_answers_the_batch_stamp(tmp_path):
    lg = Log.open(tmp_path / "t-0", {"message.timestamp.type": "LogAppendTime"}, topic="t",
                  partition=0, clock_ms=lambda: 50_000)
    lg.append_as_leader(make_batch(3, ts=5), 0)
    assert lg.offset_for_timestamp(6) == (0, 50_000)
    assert lg.offset_for_timestamp(50_001) is None


def test_log_append_time_stamps_batches_with_the_log_clock(tmp_path):
    lg = Log.open(tmp_path / "t-0", {"message.timestamp.type": "LogAppendTime"}, topic="t",
                  partition=0, clock_ms=lambda: 123_456)
    info = lg.append_as_leader(make_batch(3, ts=5), 0)
    assert info.log_append_time_ms == 123_456 and info.max_timestamp == 123_456
    header, records = decode_batch(lg.read(0, 1 << 20).records)
    assert header.timestamp_type == 1 and {r.timestamp for r in records} == {123_456}


# --- bad input ---------------------------------------------------------------------------------

def test_a_batch_with_a_flipped_bit_is_refused_as_corrupt_and_nothing_is_appended(tmp_path):
    lg = open_log(tmp_path)
    lg.append_as_leader(make_batch(2), 0)
    size_before = lg.size_in_bytes
    good = make_batch(3)
    bad = bytearray(good)
    bad[len(bad) - 5] ^= 0x10
    with pytest.raises(CorruptRecordError) as caught:
        lg.append_as_leader(good + bytes(bad), 0)  # the good first batch must not go in either
    assert caught.value.code == 2 and caught.value.stored_crc != caught.value.computed_crc
    assert (lg.log_end_offset, lg.size_in_bytes) == (2, size_before)


@pytest.mark.parametrize("damage", ["cut", "trailing garbage", "empty", "bad length"])
def test_torn_or_malformed_requests_are_corrupt_and_append_nothing(tmp_path, damage):
    lg = open_log(tmp_path)
    batch = make_batch(3)
    records = {"cut": batch[:-7], "trailing garbage": batch + b"\x00" * 5, "empty": b"",
               "bad length": batch[:8] + (2**31 - 1).to_bytes(4, "big") + batch[12:]}[damage]
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(records, 0)
    assert lg.log_end_offset == 0 and lg.size_in_bytes == 0


def test_a_batch_above_max_message_bytes_is_refused_as_message_too_large(tmp_path):
    lg = open_log(tmp_path, max_message_bytes=500)
    lg.append_as_leader(make_batch(2, value_size=50), 0)
    with pytest.raises(MessageTooLargeError) as caught:
        lg.append_as_leader(make_batch(2, value_size=50) + make_batch(10, value_size=100), 0)
    assert caught.value.code == 10 and "max.message.bytes" in str(caught.value)
    assert lg.log_end_offset == 2


def test_a_stale_leader_epoch_is_fenced(tmp_path):
    lg = open_log(tmp_path)
    lg.append_as_leader(make_batch(1), 5)
    with pytest.raises(FencedLeaderEpochError):
        lg.append_as_leader(make_batch(1), 4)
    assert lg.log_end_offset == 1


@pytest.mark.parametrize("key,value,words", [
    ("segment.bytes", "lots", "segment.bytes"),
    ("segment.bytes", 3, "segment.bytes"),
    ("retention.ms", -2, "retention.ms"),
    ("flush.messages", 0, "flush.messages"),
    ("message.timestamp.type", "Whenever", "message.timestamp.type"),
])
def test_a_bad_config_value_is_refused_naming_the_key(tmp_path, key, value, words):
    with pytest.raises(ConfigError) as caught:
        Log.open(tmp_path / "t-0", {key: value}, topic="t", partition=0)
    assert caught.value.key == key and words in str(caught.value)
    with pytest.raises(ConfigError):
        LogManager([str(tmp_path / "d")], {key: value})


def test_follower_appends_keep_the_leaders_offsets_and_epochs_take_gaps_and_refuse_overlaps(tmp_path):
    leader = open_log(tmp_path / "leader")
    leader.append_as_leader(make_batch(2), 1)
    leader.append_as_leader(make_batch(3), 3)
    follower = open_log(tmp_path / "follower")
    info = follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (0, 4, 5)
    assert follower.leader_epoch_cache.epoch_entries() == [(1, 0), (3, 2)]
    with pytest.raises(CorruptRecordError, match="offsets must increase"):  # offsets 2-4 again
        follower.append_as_follower(leader.read(2, 1 << 20).records)
    assert follower.log_end_offset == 5
    for _ in range(3):
        leader.append_as_leader(make_batch(1), 3)
    # A compacted leader's log skips offsets the cleaner removed: here the batch at 5.
    info = follower.append_as_follower(_batches_from(leader, 6, 7))
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (6, 7, 8)
    assert [h.base_offset for h in read_all(follower)] == [0, 2, 6, 7]
    follower.close()
    reopened = open_log(tmp_path / "follower")
    assert [h.base_offset for h in read_all(reopened)] == [0, 2, 6, 7] and reopened.log_end_offset == 8


def _batches_from(lg, *offsets: int) -> bytes:
    """The batches of ``lg`` that begin at ``offsets``, one after another (gaps between them)."""
    return b"".join(lg.read(offset, 1 << 20).records[:next(h.size for h in read_all(lg) if h.base_offset == offset)]
                    for offset in offsets)


def test_a_follower_fetch_larger_than_a_segment_is_appended_across_several_segments(tmp_path):
    leader = open_log(tmp_path / "leader")
    for _ in range(12):
        leader.append_as_leader(make_batch(3, value_size=40), 2)
    data = leader.read(0, 1 << 20).records
    follower = open_log(tmp_path / "follower", segment_bytes=700)
    assert len(data) > 700
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset, info.batch_count) == (0, 35, 12)
    assert len(follower.segments) > 1 and all(s.size <= 700 for s in follower.segments)
    assert_contiguous(read_all(follower), 0, 36)


# --- segments, indexes, recovery -------------------------------------------------------------

def test_segments_roll_at_segment_bytes_and_are_named_by_base_offset(tmp_path):
    lg = open_log(tmp_path, segment_bytes=1000)
    for _ in range(20):
        lg.append_as_leader(make_batch(3), 0)
    segs = lg.segments
    assert len(segs) > 3 and all(s.size <= 1000 for s in segs)
    assert [s.base_offset for s in segs[1:]] == [s.next_offset for s in segs[:-1]]
    names = sorted(p.name for p in (tmp_path / "topic-0").glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in segs]


def test_segments_roll_at_segment_ms_counted_from_the_first_batch_timestamp(tmp_path):
    lg = open_log(tmp_path, segment_ms=1000)
    lg.append_as_leader(make_batch(1, ts=50_000), 0)
    lg.append_as_leader(make_batch(1, ts=50_900), 0)
    assert len(lg.segments) == 1
    lg.append_as_leader(make_batch(1, ts=51_200), 0)
    assert [s.base_offset for s in lg.segments] == [0, 2]


def test_a_full_offset_index_rolls_the_segment(tmp_path):
    lg = open_log(tmp_path, segment_index_bytes=32, index_interval_bytes=0)  # 4 entries
    for _ in range(12):
        lg.append_as_leader(make_batch(1), 0)
    assert len(lg.segments) >= 2 and all(len(s.offset_index) <= 4 for s in lg.segments)
    assert_contiguous(read_all(lg), 0, 12)


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate"])
def test_missing_or_bad_indexes_are_rebuilt_on_open(tmp_path, clean, damage):
    lg = open_log(tmp_path, segment_bytes=3000, index_interval_bytes=0)
    for i in range(40):
        lg.append_as_leader(make_batch(2, ts=1000 * i), 0)
    expected = read_all(lg)
    saved = CheckpointedOffsets()
    if clean:
        lg.close()
    else:
        lg.flush()
        saved = checkpointed(lg)  # as the LogManager's maintenance writes them
    for path in (tmp_path / "topic-0").glob("*index"):
        if damage == "delete":
            path.unlink()
        elif damage == "garbage":
            path.write_bytes(os.urandom(path.stat().st_size + 3))
        else:
            path.write_bytes(path.read_bytes()[:5])
    lg = open_log(tmp_path, saved, segment_bytes=3000, index_interval_bytes=0)
    assert read_all(lg) == expected
    assert lg.offset_for_timestamp(20_000) == (40, 20_000)
    assert all(len(s.offset_index) > 5 for s in lg.segments[:-1])
    assert all((tmp_path / "topic-0" / f"{s.base_offset:020d}.index").exists() for s in lg.segments)


def _active_segment_file(tmp_path: Path) -> Path:
    return sorted((tmp_path / "topic-0").glob("*.log"))[-1]


@pytest.mark.parametrize("tail", ["half a batch", "garbage", "zeros", "a batch with a bad crc"])
def test_a_torn_or_garbage_tail_is_cut_at_recovery_and_never_served(tmp_path, tail):
    lg = open_log(tmp_path, segment_bytes=2000)
    for _ in range(10):
        lg.append_as_leader(make_batch(3), 0)
    leo, expected = lg.log_end_offset, read_all(lg)
    nxt = bytearray(make_batch(3))
    nxt[0:8] = leo.to_bytes(8, "big")
    if tail == "a batch with a bad crc":
        nxt[-1] ^= 1
    junk = {"half a batch": bytes(nxt[:len(nxt) // 2]), "garbage": os.urandom(300),
            "zeros": b"\x00" * 4096, "a batch with a bad crc": bytes(nxt)}[tail]
    segment = _active_segment_file(tmp_path)
    with open(segment, "ab") as f:  # the log is abandoned without close(): a crash
        f.write(junk)
    lg = open_log(tmp_path, segment_bytes=2000)
    assert lg.log_end_offset == leo
    assert read_all(lg) == expected
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(leo + 1, 1 << 20)
    assert segment.stat().st_size == lg.segments[-1].size
    lg.append_as_leader(make_batch(2), 0)
    assert_contiguous(read_all(lg), 0, leo + 2)


def test_corruption_in_the_middle_of_an_unflushed_segment_drops_everything_after_it(tmp_path):
    lg = open_log(tmp_path, segment_bytes=1000)
    for _ in range(16):
        lg.append_as_leader(make_batch(3), 0)
    segs = lg.segments
    assert len(segs) >= 3
    victim = segs[1]
    with open(victim.log_path, "r+b") as f:  # flip a byte inside the second batch's records
        f.seek(read_header(victim.pread(0, 61)).size + 70)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    lg = open_log(tmp_path, segment_bytes=1000)
    assert lg.log_end_offset == victim.base_offset + 3
    assert len(lg.segments) == 2
    assert_contiguous(read_all(lg), 0, lg.log_end_offset)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.lists(st.integers(1, 6), min_size=1, max_size=40),
       segment_bytes=st.integers(300, 3000), interval=st.sampled_from([0, 100, 4096]),
       cut=st.integers(0, 10_000), reopen_clean=st.booleans())
def test_property_appends_read_back_contiguously_across_rolls_truncation_and_reopen(
        tmp_path_factory, counts, segment_bytes, interval, cut, reopen_clean):
    path = tmp_path_factory.mktemp("prop")
    lg = open_log(path, segment_bytes=segment_bytes, index_interval_bytes=interval)
    sizes = {}
    for i, n in enumerate(counts):
        info = lg.append_as_leader(make_batch(n, tag=i, ts=i * 10), leader_epoch=i // 7)
        sizes[info.first_offset] = n
    total = sum(counts)
    assert lg.log_end_offset == total
    headers = read_all(lg)
    assert_contiguous(headers, 0, total)
    for offset in range(0, total, 3):  # every offset is found in the batch that holds it
        first = batches_of(lg.read(offset, 1).records)[0]
        assert first.base_offset <= offset <= first.last_offset
    target = cut % (total + 1)
    lg.truncate_to(target)
    end = lg.log_end_offset
    assert end <= target and (end == target or end in sizes)  # whole batches only
    assert all(e[1] < end for e in lg.leader_epoch_cache.epoch_entries())
    if reopen_clean:
        lg.close()
    lg = open_log(path, segment_bytes=segment_bytes, index_interval_bytes=interval)
    assert lg.log_end_offset == end
    assert_contiguous(read_all(lg), 0, end)
    lg.append_as_leader(make_batch(2), leader_epoch=100)
    assert_contiguous(read_all(lg), 0, end + 2)
    lg.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.lists(st.integers(1, 5), min_size=1, max_size=25), data=st.data())
def test_property_reads_are_whole_batches_within_max_bytes_and_below_max_offset(
        tmp_path_factory, counts, data):
    lg = open_log(tmp_path_factory.mktemp("read"), segment_bytes=data.draw(st.integers(600, 2000)),
                  index_interval_bytes=data.draw(st.sampled_from([0, 150, 4096])))
    for i, n in enumerate(counts):
        lg.append_as_leader(make_batch(n, tag=i, value_size=data.draw(st.integers(0, 60))), 0)
    end = lg.log_end_offset
    for _ in range(10):
        offset = data.draw(st.integers(0, end))
        max_bytes = data.draw(st.integers(0, 1500))
        max_offset = data.draw(st.one_of(st.none(), st.integers(0, end + 2)))
        one = data.draw(st.booleans())
        fetched = lg.read(offset, max_bytes, max_offset=max_offset, min_one_batch=one)
        headers = batches_of(fetched.records)
        limit = end if max_offset is None else min(max_offset, end)
        if not headers:
            continue
        assert headers[0].base_offset <= offset <= headers[0].last_offset
        assert fetched.first_offset == headers[0].base_offset
        assert all(h.last_offset < limit for h in headers)
        assert len(fetched.records) <= max_bytes or (len(headers) == 1 and one)
        assert_contiguous(headers, headers[0].base_offset, headers[-1].next_offset)
        # Nothing was left out that fitted: the next batch would break a limit.
        nxt = headers[-1].next_offset
        if nxt < limit:
            following = batches_of(lg.read(nxt, 1).records)[0]
            assert len(fetched.records) + following.size > max_bytes or following.last_offset >= limit


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.lists(st.integers(1, 5), min_size=1, max_size=30), data=st.data())
def test_property_reads_from_the_tail_cache_equal_reads_from_the_segments(
        tmp_path_factory, monkeypatch, counts, data):
    # The same reads, served by the log that just appended (from its tail cache where they
    # fall in it) and by the same log reopened (from the segment files): byte for byte equal.
    # A small cache, so batches leave it; appends as leader and as follower (several batches at
    # once), with a truncation in between.
    import raftka.storage.log
    monkeypatch.setattr(raftka.storage.log, "TAIL_CACHE_BYTES_MAX", data.draw(st.sampled_from([1, 600, 3000])))
    path = tmp_path_factory.mktemp("tail")
    lg = open_log(path, segment_bytes=data.draw(st.integers(600, 2000)))
    follower_batches: list[bytes] = []
    for i, n in enumerate(counts):
        batch = make_batch(n, tag=i, value_size=data.draw(st.integers(0, 60)))
        if data.draw(st.booleans()):
            lg.append_as_leader(batch, 0)
            continue
        # As a follower: a run of batches with their offsets already assigned.
        from raftka.common.records import assign_offsets
        follower_batches = [assign_offsets(batch, lg.log_end_offset, 0)]
        follower_batches.append(assign_offsets(make_batch(1, tag=i), lg.log_end_offset + n, 0))
        lg.append_as_follower(b"".join(follower_batches))
        if data.draw(st.integers(0, 9)) == 0:
            lg.truncate_to(data.draw(st.integers(lg.log_start_offset, lg.log_end_offset)))
    end = lg.log_end_offset
    reads = [(data.draw(st.integers(0, end)), data.draw(st.integers(0, 2500)),
              data.draw(st.one_of(st.none(), st.integers(0, end + 2))), data.draw(st.booleans()))
             for _ in range(12)]
    reads += [(max(0, end - k), 1 << 20, None, True) for k in (1, 3, 8)]  # the tail itself
    cached = [lg.read(offset, max_bytes, max_offset=max_offset, min_one_batch=one)
              for offset, max_bytes, max_offset, one in reads]
    lg.close()
    again = open_log(path, segment_bytes=600)
    for (offset, max_bytes, max_offset, one), got in zip(reads, cached):
        want = again.read(offset, max_bytes, max_offset=max_offset, min_one_batch=one)
        assert (bytes(got.records), got.first_offset) == (bytes(want.records), want.first_offset), \
            f"read({offset}, {max_bytes}, max_offset={max_offset}, min_one_batch={one})"
    again.close()


# --- truncation and leader epochs ----------------------------------------------------------------

def test_truncate_to_drops_the_tail_across_segments_and_trims_epochs_and_high_watermark(tmp_path):
    lg = open_log(tmp_path, segment_bytes=800)
    for epoch in range(1, 6):
        for _ in range(4):
            lg.append_as_leader(make_batch(2), epoch)  # epoch e starts at 8(e-1)
    lg.update_high_watermark(30)
    assert len(lg.segments) >= 4
    lg.truncate_to(17)  # inside batch 16-17: that whole batch goes
    assert lg.log_end_offset == 16
    assert lg.high_watermark == 16
    assert lg.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 8)]
    assert_contiguous(read_all(lg), 0, 16)
    lg.append_as_leader(make_batch(1), 9)
    lg2 = open_log(tmp_path, segment_bytes=800)  # unclean reopen agrees
    assert lg2.log_end_offset == 17
    assert lg2.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 8), (9, 16)]


def test_truncate_fully_and_start_at_empties_the_log_at_a_new_offset(tmp_path):
    lg = open_log(tmp_path)
    lg.append_as_leader(make_batch(5), 2)
    lg.truncate_fully_and_start_at(1000)
    assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark) == (1000, 1000, 1000)
    assert lg.leader_epoch_cache.epoch_entries() == []
    lg.append_as_leader(make_batch(2), 3)
    lg = open_log(tmp_path)
    assert (lg.log_start_offset, lg.log_end_offset) == (1000, 1002)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)


def test_end_offset_for_epoch_follows_kafkas_semantics(tmp_path):
    leo = [100]
    cache = LeaderEpochCache(tmp_path, lambda: leo[0])
    assert cache.end_offset_for(0) == (-1, -1)
    for epoch, start in [(2, 10), (4, 30), (7, 60)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(7) == (7, 100)   # latest: the log end offset
    assert cache.end_offset_for(5) == (4, 60)    # largest epoch <= 5 is 4; it ends where 7 starts
    assert cache.end_offset_for(4) == (4, 60)
    assert cache.end_offset_for(2) == (2, 30)
    assert cache.end_offset_for(1) == (1, 10)    # older than all: the first start offset
    assert cache.end_offset_for(8) == (-1, -1)   # newer than the latest
    assert cache.end_offset_for(-1) == (-1, -1)
    cache.assign(7, 80)                          # same epoch again: first start kept
    cache.assign(3, 90)                          # older epoch: ignored
    assert cache.epoch_entries() == [(2, 10), (4, 30), (7, 60)]
    cache.assign(8, 60)                          # epoch 7 held no records: replaced
    assert cache.epoch_entries() == [(2, 10), (4, 30), (8, 60)]
    cache.truncate_from_start(35)
    assert cache.epoch_entries() == [(4, 35), (8, 60)]
    cache.truncate_from_end(60)
    assert cache.epoch_entries() == [(4, 35)]
    assert LeaderEpochCache(tmp_path, lambda: 0, [tuple(e) for e in cache.checkpoint.read()]).epoch_entries() == [(4, 35)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 200)), max_size=15),
       st.integers(-1, 25))
def test_property_end_offset_for_matches_a_brute_force_model(assigns, requested):
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        cache = LeaderEpochCache(Path(d), lambda: 500)
        model: list[tuple[int, int]] = []
        for epoch, start in sorted(assigns, key=lambda a: (a[1], a[0])):
            cache.assign(epoch, start)
            if model and epoch <= model[-1][0]:
                continue
            model = [e for e in model if e[1] < start] + [(epoch, start)]
        assert cache.epoch_entries() == model
        if not model or requested < 0 or requested > model[-1][0]:
            expected = (-1, -1)
        elif requested == model[-1][0]:
            expected = (requested, 500)
        else:
            floor = [e for e in model if e[0] <= requested]
            higher = [e for e in model if e[0] > requested][0]
            expected = (floor[-1][0] if floor else requested, higher[1])
        assert cache.end_offset_for(requested) == expected


def test_a_lost_leader_epoch_checkpoint_is_rebuilt_from_batch_headers(tmp_path):
    lg = open_log(tmp_path)
    for epoch in (1, 1, 3, 6):
        lg.append_as_leader(make_batch(2), epoch)
    lg.close()
    (tmp_path / "topic-0" / "leader-epoch-checkpoint").write_text("nonsense")
    lg = open_log(tmp_path)
    assert lg.leader_epoch_cache.epoch_entries() == [(1, 0), (3, 4), (6, 6)]


# --- high watermark, flush, retention ------------------------------------------------------------

def test_high_watermark_is_checkpointed_and_recovered_clamped_to_the_log_end(tmp_path):
    lg = open_log(tmp_path)
    lg.append_as_leader(make_batch(10), 0)
    assert lg.update_high_watermark(7) == 7
    assert lg.update_high_watermark(50) == 10
    lg.update_high_watermark(8)
    saved = checkpointed(lg)
    lg.truncate_to(0)  # no close: the checkpoint still says 8
    lg = open_log(tmp_path, saved)
    assert lg.log_end_offset == 0 and lg.high_watermark == 0
    lg.append_as_leader(make_batch(10), 0)
    lg.update_high_watermark(6)
    assert open_log(tmp_path, checkpointed(lg)).high_watermark == 6


def test_flush_messages_fsyncs_and_moves_the_recovery_point(tmp_path):
    lg = open_log(tmp_path, flush_messages=5)
    lg.append_as_leader(make_batch(3), 0)
    assert lg.recovery_point == 0 and lg.unflushed_messages == 3
    lg.append_as_leader(make_batch(3), 0)
    assert lg.recovery_point == 6 and lg.unflushed_messages == 0


def test_flush_ms_flushes_from_maintenance_once_the_time_has_passed(tmp_path):
    now = [10_000]
    lg = Log.open(tmp_path / "t-0", {"flush.ms": 1000}, topic="t", partition=0, clock_ms=lambda: now[0])
    lg.append_as_leader(make_batch(3), 0)
    assert not lg.maybe_flush(10_500)
    assert lg.maybe_flush(11_000) and lg.recovery_point == 3
    assert not lg.maybe_flush(20_000)  # nothing new to flush


def test_retention_bytes_deletes_whole_old_segments_below_the_high_watermark(tmp_path):
    lg = open_log(tmp_path, segment_bytes=1000, retention_bytes=2500, retention_ms=-1)
    for _ in range(30):
        lg.append_as_leader(make_batch(3), 0)
    total = lg.size_in_bytes
    assert lg.delete_old_segments(0) == 0  # high watermark 0: nothing is deletable
    lg.update_high_watermark(lg.log_end_offset)
    deleted = lg.delete_old_segments(0)
    assert deleted > 0 and lg.size_in_bytes < total
    assert lg.size_in_bytes - lg.segments[0].size < 2500
    assert lg.log_start_offset == lg.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)
    assert_contiguous(read_all(lg), lg.log_start_offset, 90)
    start = lg.log_start_offset
    lg = open_log(tmp_path, segment_bytes=1000)  # unclean reopen keeps the new start
    assert lg.log_start_offset == start


def test_retention_ms_deletes_segments_whose_newest_record_is_too_old(tmp_path):
    lg = open_log(tmp_path, segment_bytes=300, retention_ms=10_000)
    for i in range(12):
        lg.append_as_leader(make_batch(2, ts=1_000 * i), 2)
    lg.update_high_watermark(lg.log_end_offset)
    segs = lg.segments
    assert len(segs) >= 5
    cutoff_ts = segs[2].max_timestamp
    deleted = lg.delete_old_segments(cutoff_ts + 10_001)
    assert deleted == 3 and lg.log_start_offset == segs[3].base_offset
    assert lg.leader_epoch_cache.epoch_entries() == [(2, segs[3].base_offset)]
    assert lg.delete_old_segments(10**12) == len(segs) - 4  # the active segment always stays
    assert len(lg.segments) == 1


def test_delete_records_moves_the_log_start_inside_a_segment_and_deletes_the_segments_below(tmp_path):
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000, "retention.ms": -1})
    lg = manager.get_or_create("topic", 0)
    for _ in range(30):
        lg.append_as_leader(make_batch(3), 0)
    with pytest.raises(OffsetOutOfRangeError, match="past the high watermark"):
        lg.delete_records_before(1)  # the high watermark is 0: nothing is deletable yet
    lg.update_high_watermark(60)
    target = 47  # inside a batch, inside a segment past the first
    segments_before = len(lg.segments)
    assert lg.delete_records_before(target) == target == lg.log_start_offset
    assert len(lg.segments) < segments_before and lg.segments[0].base_offset <= target
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(target - 1, 100)
    assert lg.read(target, 100).records  # the batch holding it is still served, as Kafka does
    assert lg.delete_records_before(10) == target  # an older offset changes nothing
    with pytest.raises(OffsetOutOfRangeError):
        lg.delete_records_before(61)
    manager.close()
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000})  # the checkpoint keeps the start
    assert manager.get("topic", 0).log_start_offset == target
    manager.close()


# --- disk errors -------------------------------------------------------------------------------

def test_a_failing_write_is_a_storage_error_and_leaves_no_partial_batch(tmp_path, monkeypatch):
    import raftka.storage.segment as segment_module
    lg = open_log(tmp_path)
    lg.append_as_leader(make_batch(3), 0)
    size = lg.size_in_bytes
    real_pwrite = os.pwrite

    def half_then_enospc(fd, data, pos):
        if len(data) > 20:
            real_pwrite(fd, bytes(data[:len(data) // 2]), pos)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(segment_module.os, "pwrite", half_then_enospc)
    with pytest.raises(KafkaStorageError) as caught:
        lg.append_as_leader(make_batch(5), 0)
    assert "No space left" in str(caught.value) and caught.value.code == 56
    monkeypatch.undo()
    assert (lg.log_end_offset, lg.size_in_bytes) == (3, size)
    assert _active_segment_file(tmp_path).stat().st_size == size
    lg.append_as_leader(make_batch(1), 0)  # the log is still usable
    assert_contiguous(read_all(lg), 0, 4)


def test_a_failing_fsync_takes_the_log_offline_and_a_reopen_recovers_it(tmp_path, monkeypatch):
    import raftka.storage.segment as segment_module
    lg = open_log(tmp_path)
    lg.append_as_leader(make_batch(3), 0)

    def eio(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(segment_module.os, "fsync", eio)
    with pytest.raises(KafkaStorageError, match="Input/output error"):
        lg.flush()
    monkeypatch.undo()
    with pytest.raises(KafkaStorageError, match="offline"):
        lg.append_as_leader(make_batch(1), 0)
    with pytest.raises(KafkaStorageError, match="offline"):
        lg.read(0, 100)
    lg = open_log(tmp_path)
    assert lg.log_end_offset == 3
    assert_contiguous(read_all(lg), 0, 3)


def test_a_file_size_limit_in_a_real_process_gives_a_storage_error_and_an_intact_log(tmp_path):
    """A child process runs with RLIMIT_FSIZE so its writes fail with EFBIG the way a full disk
    fails them; it appends until refused, then the parent reopens the log."""
    script = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
        from raftka.common.errors import KafkaStorageError
        from raftka.common.records import BatchBuilder
        from raftka.storage import Log
        lg = Log.open({str(tmp_path / 'topic-0')!r}, {{}}, topic='topic', partition=0)
        b = BatchBuilder(batch_size=1 << 20)
        for i in range(30):
            b.append(i, None, b'v' * 100)
        batch = b.build()
        for i in range(1000):
            try:
                info = lg.append_as_leader(batch, 0)
            except KafkaStorageError as e:
                print('REFUSED', lg.log_end_offset, e)
                break
        sys.stdout.flush()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("REFUSED"), out.stdout + out.stderr
    _, leo, message = out.stdout.split(" ", 2)
    assert "KAFKA_STORAGE_ERROR" in message and "nothing was appended" in message
    lg = open_log(tmp_path)
    assert lg.log_end_offset == int(leo) > 0
    assert_contiguous(read_all(lg), 0, int(leo))
    assert _active_segment_file(tmp_path).stat().st_size <= 20_000


# --- the log manager ---------------------------------------------------------------------------

def test_log_manager_spreads_partitions_reloads_them_and_deletes_directories(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs, {"segment.bytes": 5000})
    logs = [manager.get_or_create("orders", p) for p in range(4)]
    assert {lg.dir.parent.name for lg in logs} == {"a", "b"}
    for lg in logs:
        lg.append_as_leader(make_batch(2), 0)
    assert manager.get_or_create("orders", 1) is logs[1]
    assert manager.get("orders", 9) is None
    with pytest.raises(KafkaStorageError):
        LogManager(dirs, {})  # the dirs are locked by the first manager
    manager.close()
    manager = LogManager(dirs, {"segment.bytes": 5000})
    assert sorted((lg.topic, lg.partition, lg.log_end_offset) for lg in manager.logs()) == \
        [("orders", p, 2) for p in range(4)]
    gone = manager.get("orders", 2).dir
    assert manager.delete("orders", 2) and not gone.exists()
    assert manager.get("orders", 2) is None
    manager.close()


def test_log_manager_places_new_partitions_in_the_emptiest_dir_after_deletes_and_reloads(tmp_path):
    # The per-dir counts are kept incrementally (placement must not scan every open log): they
    # have to stay right across deletes and across a reload of an unbalanced layout.
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs, {})
    placed = {p: manager.get_or_create("t", p).dir.parent.name for p in range(6)}
    assert sorted(placed.values()) == ["a", "a", "a", "b", "b", "b"]
    for p in [p for p, d in placed.items() if d == "a"]:
        manager.delete("t", p)
    assert [manager.get_or_create("u", p).dir.parent.name for p in range(3)] == ["a", "a", "a"]
    for p in range(3):
        manager.delete("u", p)
    manager.close()
    manager = LogManager(dirs, {})  # reload: a holds 0 partitions, b holds 3
    # ties go to the first dir listed
    assert [manager.get_or_create("v", p).dir.parent.name for p in range(4)] == ["a", "a", "a", "a"]
    assert manager.get_or_create("w", 0).dir.parent.name == "b"
    manager.close()


def test_log_manager_maintenance_applies_retention_flush_and_checkpoints(tmp_path):
    now = [1_000_000]
    manager = LogManager([str(tmp_path)], {"segment.bytes": 600, "retention.ms": 1000,
                                           "flush.ms": 50}, clock_ms=lambda: now[0],
                         hw_checkpoint_interval_ms=0, retention_check_interval_ms=0)
    lg = manager.get_or_create("t", 0)
    for i in range(10):
        lg.append_as_leader(make_batch(2, ts=now[0]), 0)
    lg.update_high_watermark(lg.log_end_offset)
    now[0] += 5000
    result = manager.run_maintenance(now[0])
    assert result["deleted_segments"] > 0 and result["flushed_logs"] == 1
    assert lg.recovery_point == lg.log_end_offset
    assert (tmp_path / "replication-offset-checkpoint").read_text().split() == ["0", "1", "t", "0", "20"]
    manager.close()


def test_log_manager_leaves_the_controllers_metadata_log_directory_alone(tmp_path):
    raft_dir = tmp_path / "__cluster_metadata-0"  # combined mode: the Raft journal's directory
    raft_dir.mkdir()
    (raft_dir / "raft.journal").write_bytes(b"journal")
    manager = LogManager([str(tmp_path)], {})
    assert manager.logs() == []
    assert sorted(p.name for p in raft_dir.iterdir()) == ["raft.journal"]  # no segment files added
    from raftka.common.errors import InvalidTopicError
    with pytest.raises(InvalidTopicError, match="metadata log"):
        manager.get_or_create("__cluster_metadata", 0)
    manager.close()


def test_log_manager_refuses_topic_names_that_are_not_legal(tmp_path):
    from raftka.common.errors import InvalidTopicError
    manager = LogManager([str(tmp_path)], {})
    for name in ("../etc", "a/b", "", ".."):
        with pytest.raises(InvalidTopicError):
            manager.get_or_create(name, 0)
    manager.close()


def test_raftka_perf_storage_runs_and_reports_every_figure_as_json(tmp_path):
    import json
    out = subprocess.run([sys.executable, "-m", "raftka", "perf", "storage", "--quick", "--json",
                          "--mb", "4", "--runs", "1", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    for key in ("16kib", "1mib"):
        assert figures[key]["append_records_s"] > 0 and figures[key]["raw_write_mb_s"] > 0
        assert figures[key]["ratio_to_raw"] > 0 and figures[key]["read_mb_s"] > 0
    assert figures["encode_records_s"] > 0 and figures["decode_records_s"] > 0
    assert list(tmp_path.iterdir()) == []  # the benchmark cleans up after itself


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_property_random_operations_agree_with_a_model_of_the_log(tmp_path_factory, seed):
    """Seeded random appends, truncations, rolls, retention, clean and unclean reopens and torn
    tails, checked after every step against a list of (base, last, epoch, tag) batches: the
    log's batches, log start/end offsets and leader-epoch entries must match the model."""
    import random
    rng = random.Random(seed)
    path = tmp_path_factory.mktemp("model")
    config = {"segment_bytes": rng.choice([400, 900, 5000]), "index_interval_bytes": rng.choice([0, 200]),
              "retention_bytes": rng.choice([-1, 1500]), "retention_ms": -1}
    lg = open_log(path, **config)
    model: list[tuple[int, int, int, int]] = []
    epoch = 0
    for step in range(50):
        op = rng.choices(["append", "truncate", "roll", "retention", "reopen", "crash", "torn"],
                         [10, 2, 1, 2, 1, 1, 1])[0]
        if op == "append":
            epoch += rng.random() < 0.2
            n = rng.randint(1, 4)
            info = lg.append_as_leader(make_batch(n, tag=step), epoch)
            model.append((info.first_offset, info.last_offset, epoch, step))
        elif op == "truncate" and model:
            target = rng.randint(lg.log_start_offset, lg.log_end_offset)
            lg.truncate_to(target)
            model = [b for b in model if b[1] < target]
        elif op == "roll":
            lg.roll()
        elif op == "retention":
            lg.update_high_watermark(rng.randint(lg.log_start_offset, lg.log_end_offset))
            lg.delete_old_segments(0)
            assert lg.log_start_offset <= lg.high_watermark, f"seed {seed}"
            model = [b for b in model if b[0] >= lg.log_start_offset]
        elif op == "reopen":
            lg.close()
            lg = open_log(path, **config)
        elif op in ("crash", "torn"):
            if op == "torn":
                with open(_active_segment_file(path), "ab") as f:
                    f.write(os.urandom(rng.randint(1, 200)))
            lg = open_log(path, **config)
        end = model[-1][1] + 1 if model else lg.log_end_offset
        assert lg.log_end_offset == end, f"seed {seed} step {step} {op}"
        if model:
            assert lg.log_start_offset == model[0][0], f"seed {seed} step {step} {op}"
        got = read_all(lg)
        assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in got] == \
            [b[:3] for b in model], f"seed {seed} step {step} {op}"
        expected_epochs: list[tuple[int, int]] = []
        for base, _, e, _ in model:
            if not expected_epochs or expected_epochs[-1][0] != e:
                expected_epochs.append((e, base))
        if model:
            assert lg.leader_epoch_cache.epoch_entries() == expected_epochs, f"seed {seed} step {step} {op}"
    lg.close()


def test_log_config_defaults_are_the_topic_config_defaults():
    """LogConfig() and TOPIC_CONFIGS must agree on every default: re-typing one would fail here."""
    import dataclasses
    from raftka.common.configs import TOPIC_CONFIGS
    from raftka.storage.config import LogConfig
    defaults = LogConfig()
    for f in dataclasses.fields(LogConfig):
        assert getattr(defaults, f.name) == TOPIC_CONFIGS.keys[f.name.replace("_", ".")].default, f.name
    assert LogConfig.from_mapping({}) == defaults
