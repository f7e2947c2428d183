"""Log compaction (storage/cleaner.py): each rule, a property test against a model, and crashes.

Every test cleans a real log in pytest's tmp_path with a fake clock passed in. The model is the
list of every record appended (offset, key, value). What a clean may remove: a record whose key
has a later record, and a tombstone whose segment was cleaned at least delete.retention.ms ago;
nothing else, nothing at or past the active segment's base. Crashes: each step of a clean is
stopped in turn with a copy of the directory taken at that instant (what a process crash leaves
on disk), which is then opened with the loader; and real processes cleaning a real log are
SIGKILLed at seeded random moments (the seed is printed on failure).
"""
from __future__ import annotations

import dataclasses
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raftka.common.configs import TOPIC_CONFIGS
from raftka.common.errors import ConfigError, KafkaStorageError
from raftka.common.records import (
    COMPRESSION_LZ4,
    BatchBuilder,
    InvalidRecordError,
    decode_batch,
    iter_batches,
    validate_batch,
)
from raftka.storage.checkpoint import OffsetCheckpointFile
from raftka.storage.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    Cleaner,
    CleaningAbortedError,
    OffsetMap,
)
from raftka.storage.loader import CheckpointedOffsets
from raftka.storage.log import Log

T0 = 10_000_000  # the fake clock's start (ms)
RETENTION_MS = 1_000  # delete.retention.ms in these tests


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def open_log(root: Path, clock: Clock, **config) -> Log:
    """``t-0`` under the log dir ``root``, compacted, small segments; ``config`` with underscores."""
    cfg = {"cleanup.policy": "compact", "segment.bytes": 600, "delete.retention.ms": RETENTION_MS}
    cfg.update({k.replace("_", "."): v for k, v in config.items()})
    return Log.open(root / "t-0", cfg, topic="t", partition=0, clock_ms=clock)


def append(lg: Log, *records, ts: int | None = None, codec: int = 0, producer=(-1, -1, -1), epoch: int = 0,
           keyless_as_if_written_before_compaction: bool = True) -> int:
    """Append one batch of (key, value) records (str, or None for a null key / value); its base offset.
    A compacted log refuses keyless records; the cleaner must still keep those written before the
    topic became compacted, so by default they are appended as then."""
    pid, pepoch, seq = producer
    builder = BatchBuilder(compression_type=codec, batch_size=1 << 20, producer_id=pid, producer_epoch=pepoch,
                           base_sequence=seq)
    for key, value in records:
        builder.append(T0 if ts is None else ts, None if key is None else key.encode(),
                       None if value is None else value.encode())
    config = lg.config
    if keyless_as_if_written_before_compaction and any(key is None for key, _ in records):
        lg.update_config(dataclasses.replace(config, cleanup_policy=("delete",)))
    try:
        info = lg.append_as_leader(builder.build(), epoch)
    finally:
        lg.update_config(config)
    lg.update_high_watermark(lg.log_end_offset)
    return info.first_offset


def read_everything(lg: Log) -> list[tuple[int, str | None, str | None]]:
    """(offset, key, value) of every record from the log start to the log end."""
    out = []
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 20).records
        if not data:
            break
        for pos, header in iter_batches(data):
            for r in decode_batch(data, pos)[1]:
                out.append((r.offset, None if r.key is None else r.key.decode(),
                            None if r.value is None else r.value.decode()))
            offset = header.next_offset
    return out


def headers(lg: Log) -> list:
    found = []
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 20).records
        if not data:
            break
        for _, header in iter_batches(data):
            found.append(header)
            offset = header.next_offset
    return found


def latest_by_key(records) -> dict:
    latest = {}
    for offset, key, value in records:
        if key is not None:
            latest[key] = (offset, value)
    return latest


def sealed(lg: Log) -> None:
    """Roll, so everything appended so far is in closed segments, all below the high watermark."""
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)


# --- each rule ------------------------------------------------------------------------------
def test_only_the_latest_record_of_each_key_stays_at_its_own_offset(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock)
    for i in range(40):
        append(lg, (f"k{i % 5}", f"v{i}"))
    sealed(lg)
    before = read_everything(lg)
    stats = Cleaner().clean(lg, clock.now)
    after = read_everything(lg)
    assert after == sorted((o, k, v) for k, (o, v) in latest_by_key(before).items())
    assert [o for o, _, _ in after] == [35, 36, 37, 38, 39]  # offsets kept, gaps before them
    assert stats.records_removed == 35 and stats.end_offset == 40
    assert lg.log_end_offset == 40
    lg.close()


def test_the_active_segment_and_what_is_above_the_high_watermark_are_never_cleaned(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock)
    for i in range(20):
        append(lg, ("k", f"v{i}"))
    sealed(lg)
    append(lg, ("k", "in-active-1"))
    append(lg, ("k", "in-active-2"))
    Cleaner().clean(lg, clock.now)
    assert [v for _, _, v in read_everything(lg)] == ["v19", "in-active-1", "in-active-2"]
    # Above the high watermark: the segments past it stay dirty.
    lg2 = open_log(tmp_path / "other", clock)
    for i in range(20):
        append(lg2, ("k", f"v{i}"))
    sealed(lg2)
    lg2.update_high_watermark(5)
    stats = Cleaner().clean(lg2, clock.now)
    assert len(read_everything(lg2)) == 20 and stats.parts == 0
    lg.close()
    lg2.close()


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock, min_compaction_lag_ms=5_000)
    for i in range(20):
        append(lg, ("k", f"v{i}"), ts=clock.now)
    sealed(lg)
    assert Cleaner().clean(lg, clock.now).parts == 0
    assert len(read_everything(lg)) == 20
    clock.now += 5_001
    Cleaner().clean(lg, clock.now)
    assert [v for _, _, v in read_everything(lg)] == ["v19"]
    lg.close()


def test_tombstones_stay_delete_retention_ms_after_their_first_clean_then_go(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock)
    cleaner = Cleaner()
    for i in range(10):
        append(lg, ("gone", f"v{i}"), ("kept", f"w{i}"))
    append(lg, ("gone", None))
    sealed(lg)
    cleaner.clean(lg, clock.now)  # the tombstone's first clean: it removes "gone"'s values
    assert ("gone", None) in [(k, v) for _, k, v in read_everything(lg)]
    assert [v for _, k, v in read_everything(lg) if k == "gone"] == [None]
    append(lg, ("other", "x"))
    sealed(lg)
    clock.now += RETENTION_MS - 1
    cleaner.clean(lg, clock.now)
    assert [v for _, k, v in read_everything(lg) if k == "gone"] == [None], "dropped before delete.retention.ms"
    append(lg, ("other", "y"))
    sealed(lg)
    clock.now += 1
    stats = cleaner.clean(lg, clock.now)
    assert [k for _, k, _ in read_everything(lg)] == ["kept", "other"]
    assert stats.tombstones_removed == 1
    lg.close()


def test_a_compacted_log_refuses_a_record_without_a_key_and_appends_nothing(tmp_path):
    lg = open_log(tmp_path, Clock())
    append(lg, ("k", "v"))
    with pytest.raises(InvalidRecordError, match="record 1 has no key; a compacted topic"):
        append(lg, ("k", "v2"), (None, "keyless"), codec=COMPRESSION_LZ4,  # found inside a compressed batch too
               keyless_as_if_written_before_compaction=False)
    assert lg.log_end_offset == 1
    lg.update_config({"cleanup.policy": "delete"})
    append(lg, (None, "keyless"), keyless_as_if_written_before_compaction=False)
    assert lg.log_end_offset == 2


def test_records_without_a_key_written_before_the_topic_was_compacted_are_kept(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock, cleanup_policy="delete")
    for i in range(10):
        append(lg, (None, f"n{i}"), ("k", f"v{i}"))
    lg.update_config({"cleanup.policy": "compact", "segment.bytes": 600, "delete.retention.ms": RETENTION_MS})
    sealed(lg)
    Cleaner().clean(lg, clock.now)
    assert [v for _, k, v in read_everything(lg) if k is None] == [f"n{i}" for i in range(10)]
    assert [v for _, k, v in read_everything(lg) if k is not None] == ["v9"]
    lg.close()


def test_a_filtered_batch_is_re_encoded_with_its_header_fields_and_codec(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock, segment_bytes=100_000)
    pid = 42
    append(lg, ("a", "1"), ("b", "2"), ("c", "3"), ts=T0 + 7, codec=COMPRESSION_LZ4, producer=(pid, 3, 0), epoch=5)
    append(lg, ("a", "new"), producer=(pid, 3, 3), epoch=5)  # supersedes "a" only
    sealed(lg)
    before = headers(lg)[0]
    Cleaner().clean(lg, clock.now)
    after = headers(lg)[0]
    assert after.record_count == 2 and after.compression == COMPRESSION_LZ4
    same = ("base_offset", "last_offset_delta", "partition_leader_epoch", "producer_id", "producer_epoch",
            "base_sequence", "base_timestamp", "max_timestamp", "attributes")
    assert {f: getattr(after, f) for f in same} == {f: getattr(before, f) for f in same}
    assert after.crc != before.crc and after.batch_length < before.batch_length
    assert read_everything(lg) == [(1, "b", "2"), (2, "c", "3"), (3, "a", "new")]
    lg.close()


def test_an_unchanged_batch_is_copied_byte_for_byte(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock, segment_bytes=100_000)
    append(lg, ("a", "1"), ("b", "2"))
    append(lg, ("c", "3"))
    sealed(lg)
    before = lg.read(0, 1 << 20).records
    Cleaner().clean(lg, clock.now)
    assert lg.read(0, 1 << 20).records == before
    lg.close()


def test_the_emptied_last_batch_of_an_active_producer_stays_as_an_empty_batch(tmp_path):
    """Kafka's RETAIN_EMPTY: the batch holding a tracked producer's last data offset keeps its
    header (sequence, epoch) even when every record in it is superseded; other emptied batches go."""
    clock = Clock()
    lg = open_log(tmp_path, clock, segment_bytes=100_000)
    append(lg, ("k", "1"), producer=(7, 0, 0))      # emptied, not its producer's last: dropped
    append(lg, ("k", "2"), producer=(7, 0, 1))      # producer 7's last batch: kept empty
    append(lg, ("k", "3"))                           # supersedes both
    sealed(lg)
    stats = Cleaner().clean(lg, clock.now)
    found = headers(lg)
    assert [(h.base_offset, h.record_count, h.producer_id, h.base_sequence) for h in found] == [
        (1, 0, 7, 1), (2, 1, -1, -1)]
    assert stats.empty_batches_kept == 1
    validate_batch(lg.read(1, 1 << 20).records)  # a valid batch (CRC) a consumer decodes to nothing
    assert read_everything(lg) == [(2, "k", "3")]
    lg.close()
    reopened = open_log(tmp_path, clock)
    assert reopened.producer_state.entry(7).last_sequence == 1  # the producer's state survives a reload
    reopened.close()


def test_a_dirty_section_larger_than_the_offset_map_is_cleaned_in_parts(tmp_path):
    clock = Clock()
    small, big = open_log(tmp_path / "small", clock), open_log(tmp_path / "big", clock)
    rng = random.Random(3)
    for i in range(120):
        key, value = f"k{rng.randrange(30)}", f"v{i}"
        append(small, (key, value))
        append(big, (key, value))
    sealed(small)
    sealed(big)
    stats = Cleaner(dedupe_buffer_bytes=10 * 24, load_factor=1.0).clean(small, clock.now)
    assert OffsetMap.for_buffer(10 * 24, 1.0).capacity == 10
    Cleaner().clean(big, clock.now)
    assert stats.parts > 1
    assert read_everything(small) == read_everything(big)
    small.close()
    big.close()


def test_an_offset_map_that_cannot_hold_one_batch_is_a_config_error(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock)
    append(lg, *[(f"k{i}", "v") for i in range(5)])
    sealed(lg)
    with pytest.raises(ConfigError, match="log.cleaner.dedupe.buffer.size"):
        Cleaner(dedupe_buffer_bytes=4 * 24, load_factor=1.0).clean(lg, clock.now)
    assert len(read_everything(lg)) == 5
    lg.close()


def test_small_segments_are_merged_when_the_result_fits_segment_bytes(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock, segment_bytes=2_000)
    for i in range(200):
        append(lg, (f"k{i % 4}", f"v{i}"))
        if i % 10 == 9:
            lg.roll()
    sealed(lg)
    assert len(lg.segments) == 21
    Cleaner().clean(lg, clock.now)
    assert len(lg.segments) < 21
    assert all(seg.size <= 2_000 for seg in lg.segments)
    assert [v for _, _, v in read_everything(lg)] == ["v196", "v197", "v198", "v199"]
    lg.close()


def test_the_first_dirty_offset_is_checkpointed_per_log_dir_and_a_second_clean_has_nothing_to_do(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock)
    for i in range(30):
        append(lg, ("k", f"v{i}"))
    sealed(lg)
    cleaner = Cleaner()
    cleaner.clean(lg, clock.now)
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {("t", 0): 30}
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().splitlines()[:3] == ["0", "1", "t 0 30"]
    assert cleaner.clean(lg, clock.now).parts == 0
    assert Cleaner().first_dirty_offset(lg) == 30  # another cleaner reads it from the file
    cleaner.truncate_checkpoint(lg, 12)
    assert cleaner.first_dirty_offset(lg) == 12
    lg.close()


def test_filthiest_follows_min_cleanable_dirty_ratio_and_max_compaction_lag(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path / "a", clock, min_cleanable_dirty_ratio=0.9)
    for i in range(10):
        append(lg, ("k", f"v{i}"), ts=T0)
    sealed(lg)
    cleaner = Cleaner()
    cleaner.clean(lg, clock.now)
    append(lg, ("k", "x"), ts=T0)
    sealed(lg)
    found = cleaner.to_clean(lg, clock.now)
    assert found is not None and found.dirty_ratio < 0.9
    assert cleaner.filthiest([lg], clock.now) is None
    lg.update_config({"cleanup.policy": "compact", "segment.bytes": 600, "min.cleanable.dirty.ratio": 0.9,
                      "max.compaction.lag.ms": 1000})
    clock.now = T0 + 1001
    chosen = cleaner.filthiest([lg], clock.now)
    assert chosen is not None and chosen.must_clean and chosen.log is lg
    lg.update_config({"cleanup.policy": "delete"})
    assert cleaner.filthiest([lg], clock.now) is None  # not compacted
    lg.close()


def test_retention_applies_only_when_cleanup_policy_includes_delete(tmp_path):
    for policy, deleted in (("compact", 0), ("compact,delete", 3), ("delete", 3)):
        clock = Clock()
        lg = open_log(tmp_path / policy, clock, cleanup_policy=policy, retention_ms=1000)
        for _ in range(3):
            append(lg, ("k", "v"), ts=T0)
            lg.roll()
        lg.update_high_watermark(lg.log_end_offset)
        assert lg.delete_old_segments(T0 + 5000) == deleted, policy
        lg.close()


def test_cleanup_policy_and_the_compaction_configs_have_kafkas_names_and_defaults():
    values = TOPIC_CONFIGS.parse({"cleanup.policy": "compact,delete"})
    assert values["cleanup.policy"] == ["compact", "delete"]
    assert TOPIC_CONFIGS.parse({})["cleanup.policy"] == ("delete",)
    assert (values["min.cleanable.dirty.ratio"], values["min.compaction.lag.ms"], values["max.compaction.lag.ms"],
            values["delete.retention.ms"]) == (0.5, 0, 2**63 - 1, 86_400_000)
    for bad, words in (("bogus", "items must be among delete, compact"), ("", "at least one")):
        with pytest.raises(ConfigError, match=words):
            TOPIC_CONFIGS.parse({"cleanup.policy": bad})
    with pytest.raises(ConfigError, match="min.cleanable.dirty.ratio"):
        TOPIC_CONFIGS.parse({"min.cleanable.dirty.ratio": "1.5"})


def test_a_cleaned_log_with_gaps_reopens_whole_after_a_clean_close_and_after_a_crash(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock)
    for i in range(60):
        append(lg, (f"k{i % 3}", f"v{i}"))
        if i % 7 == 6:
            lg.roll()
    append(lg, ("tail", "t"))
    lg.update_high_watermark(lg.log_end_offset - 1)
    Cleaner().clean(lg, clock.now)
    expected = read_everything(lg)
    bases = [seg.base_offset for seg in lg.segments]
    lg.close()
    reopened = open_log(tmp_path, clock)
    assert read_everything(reopened) == expected and [s.base_offset for s in reopened.segments] == bases
    for seg in reopened.segments:  # a crash: no clean close, every segment recovered
        seg.file.close()
    crashed = Log.open(tmp_path / "t-0", {"cleanup.policy": "compact"}, topic="t", partition=0, clock_ms=clock)
    assert read_everything(crashed) == expected and crashed.log_end_offset == 61
    crashed.close()


def test_a_cleaning_whose_segments_change_meanwhile_is_aborted_and_leaves_the_log_as_it_was(tmp_path):
    clock = Clock()
    lg = open_log(tmp_path, clock, cleanup_policy="compact,delete")
    for i in range(30):
        append(lg, ("k", f"v{i}"))
    sealed(lg)

    def retention_runs(step: str) -> None:
        if step.startswith("fsync") and lg.segments[0].base_offset == 0:
            lg.delete_records_before(lg.segments[1].base_offset)  # a segment the cleaning read goes

    with pytest.raises(CleaningAbortedError):
        Cleaner().clean(lg, clock.now, fault=retention_runs)
    assert not list((tmp_path / "t-0").glob("*.cleaned")) and not list((tmp_path / "t-0").glob("*.swap"))
    assert len(read_everything(lg)) == 30 - lg.log_start_offset
    lg.close()


# --- the property test -----------------------------------------------------------------------
class Model:
    """Every record appended, and when each tombstone's first clean happened."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[str | None, str | None]] = {}
        self.first_cleaned_ms: dict[int, int] = {}

    def check(self, lg: Log, now: int, untouched_from: int) -> None:
        found = read_everything(lg)
        offsets = [o for o, _, _ in found]
        assert offsets == sorted(set(offsets)), "offsets must strictly increase"
        present = {o: (k, v) for o, k, v in found}
        for offset, record in present.items():
            assert self.records[offset] == record, f"offset {offset} holds {record}, appended {self.records[offset]}"
        later_of_key: dict[str, int] = {}
        for offset in sorted(self.records, reverse=True):
            key, value = self.records[offset]
            superseded = key is not None and key in later_of_key
            if offset not in present:
                assert offset < untouched_from, f"offset {offset} at or past the active segment's base went"
                assert key is not None, f"keyless record at {offset} went"
                if not superseded:
                    assert value is None, f"the latest value of {key} (offset {offset}) went"
                    cleaned = self.first_cleaned_ms.get(offset)
                    assert cleaned is not None and now >= cleaned + RETENTION_MS, \
                        f"tombstone at {offset} went before delete.retention.ms"
            if key is not None:
                later_of_key.setdefault(key, offset)


operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "e", None]),
                                                    st.sampled_from(["x", "yy", None])), min_size=1, max_size=4)),
    st.tuples(st.just("roll"), st.none()),
    st.tuples(st.just("tick"), st.integers(0, 2 * RETENTION_MS)),
    st.tuples(st.just("clean"), st.sampled_from([3, 6, 1000])),
), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
@example(ops=[("append", [("a", "x")]), ("append", [("a", None)]), ("roll", None), ("clean", 1000),
              ("append", [("b", "x")]), ("roll", None), ("tick", RETENTION_MS - 1), ("clean", 1000),
              ("append", [("b", "y")]), ("roll", None), ("tick", 1), ("clean", 1000)])
def test_cleaning_at_random_times_matches_the_model(tmp_path_factory, ops):
    root = tmp_path_factory.mktemp("prop")
    clock = Clock()
    lg = open_log(root, clock, segment_bytes=400)
    model = Model()
    for op, arg in ops:
        if op == "append":
            base = append(lg, *arg, ts=clock.now)
            for i, record in enumerate(arg):
                model.records[base + i] = record
        elif op == "roll":
            lg.roll()
        elif op == "tick":
            clock.now += arg
        else:
            cleaner = Cleaner(dedupe_buffer_bytes=arg * 24, load_factor=1.0)
            active_base = lg.segments[-1].base_offset
            try:
                cleaner.clean(lg, clock.now)
            except ConfigError:  # a batch with more keys than the map holds: the parts before it stay
                pass
            end = cleaner.first_dirty_offset(lg)
            for offset, (key, value) in model.records.items():
                if key is not None and value is None and offset < end:
                    model.first_cleaned_ms.setdefault(offset, clock.now)
            model.check(lg, clock.now, active_base)
    model.check(lg, clock.now, lg.segments[-1].base_offset)
    lg.close()
    reopened = open_log(root, clock, segment_bytes=400)
    model.check(reopened, clock.now, reopened.segments[-1].base_offset)
    reopened.close()


# --- crashes ----------------------------------------------------------------------------------
def build_dirty_log(root: Path, clock: Clock, seed: int, count: int = 160) -> Log:
    """A compacted log of many small segments with repeated keys, tombstones, keyless records and
    an idempotent producer, some of it cleaned long ago (so tombstones may go), the rest dirty."""
    rng = random.Random(seed)
    lg = open_log(root, clock, segment_bytes=700)
    seq = 0
    for i in range(count):
        key = rng.choice(["a", "b", "c", "d", "e", "f", None])
        value = None if key and rng.random() < 0.15 else f"v{i}"
        if rng.random() < 0.3:
            append(lg, (key, value), ts=clock.now, producer=(9, 0, seq))
            seq += 1
        else:
            append(lg, (key, value), ts=clock.now, codec=COMPRESSION_LZ4 if rng.random() < 0.3 else 0)
        if i == count // 2:
            sealed(lg)
            Cleaner().clean(lg, clock.now)
            clock.now += 2 * RETENTION_MS
    sealed(lg)
    append(lg, ("a", "active"), ts=clock.now)
    return lg


def check_between(found, before, after, what: str) -> None:
    """A crashed clean leaves every record a finished clean keeps, and only records that were
    there before it; offsets strictly increase."""
    offsets = [o for o, _, _ in found]
    assert offsets == sorted(set(offsets)), what
    assert set(after) <= set(found) <= set(before), what


def clean_steps(root: Path, seed: int, count: int) -> list[str]:
    clock = Clock()
    lg = build_dirty_log(root, clock, seed, count)
    steps: list[str] = []
    Cleaner(dedupe_buffer_bytes=25 * 24, load_factor=1.0).clean(lg, clock.now, fault=steps.append)
    lg.close()
    return steps


def reopen(root: Path, clock: Clock) -> Log:
    """Open the log under ``root`` as a broker would after a crash: the whole log was below the
    high watermark (the log dir's checkpoint; a LogManager would pass it)."""
    return Log.open(root / "t-0", {"cleanup.policy": "compact", "segment.bytes": 700,
                                   "delete.retention.ms": RETENTION_MS},
                    topic="t", partition=0, clock_ms=clock,
                    checkpoints=CheckpointedOffsets(0, 0, 2**62))


class Crash(Exception):
    pass


def test_a_clean_stopped_at_any_step_reopens_as_a_readable_log_with_nothing_lost(tmp_path):
    """For every step k of a clean (each file written, renamed, deleted, fsynced, and the
    checkpoint): copy the log dir as it is at that instant, stop the clean, open the copy with
    the loader, check it lies between the log before and after a finished clean, then clean it
    to the end and check it equals the finished clean."""
    seed, count = 5, 90
    steps = clean_steps(tmp_path / "count", seed, count)
    assert len(steps) > 20 and any(".swap" in s for s in steps) and any("delete" in s for s in steps)
    reference_clock = Clock()
    reference = build_dirty_log(tmp_path / "reference", reference_clock, seed, count)
    before = read_everything(reference)
    Cleaner(dedupe_buffer_bytes=25 * 24, load_factor=1.0).clean(reference, reference_clock.now)
    after = read_everything(reference)
    reference.close()
    assert len(after) < len(before)
    for k in range(len(steps)):
        root = tmp_path / f"k{k}"
        clock = Clock()
        lg = build_dirty_log(root, clock, seed, count)
        copy = tmp_path / f"k{k}-crashed"
        seen = []

        def stop(step: str) -> None:
            seen.append(step)
            if len(seen) == k + 1:
                shutil.copytree(root, copy)  # what a process crash leaves: every file as it is now
                raise Crash(step)

        with pytest.raises((Crash, KafkaStorageError)):
            Cleaner(dedupe_buffer_bytes=25 * 24, load_factor=1.0).clean(lg, clock.now, fault=stop)
        for seg in lg.segments:
            seg.file.close()
        shutil.rmtree(root)
        (copy / "t-0" / ".clean-shutdown").unlink(missing_ok=True)
        crashed = reopen(copy, clock)
        what = f"stopped before step {k}: {seen[-1]}"
        assert not list((copy / "t-0").glob("*.cleaned")) and not list((copy / "t-0").glob("*.swap")), what
        check_between(read_everything(crashed), before, after, what)
        Cleaner(dedupe_buffer_bytes=25 * 24, load_factor=1.0).clean(crashed, clock.now)
        assert read_everything(crashed) == after, what
        crashed.close()
        shutil.rmtree(copy)


CLEANER_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from raftka.storage.cleaner import Cleaner
    from raftka.storage.loader import CheckpointedOffsets
    from raftka.storage.log import Log
    root, now = Path(sys.argv[1]), int(sys.argv[2])
    lg = Log.open(root / "t-0", {"cleanup.policy": "compact", "segment.bytes": 700, "delete.retention.ms": 1000},
                  topic="t", partition=0, clock_ms=lambda: now, checkpoints=CheckpointedOffsets(0, 0, 2**62))
    print("ready", flush=True)
    def step(name):  # wait for the parent's go-ahead at each step, so it can kill anywhere
        print("step", name, flush=True)
        sys.stdin.readline()
    Cleaner(dedupe_buffer_bytes=40 * 24, load_factor=1.0).clean(lg, now, fault=step)
    print("done", flush=True)
    lg.close()
""")
KILL_SEEDS = int(os.environ.get("RAFTKA_CLEANER_KILL_SEEDS", "8"))
CHILD_TIMEOUT_S = 20.0


@pytest.mark.parametrize("seed", range(KILL_SEEDS))
def test_a_cleaning_process_killed_at_a_random_moment_leaves_a_log_that_reopens_whole(tmp_path, seed):
    """A child cleans a real log, waiting for the parent's go-ahead at each step; the parent
    SIGKILLs it a seeded pause after a seeded number of steps (so within a step's work too),
    reopens the log and checks it against the log before and after a finished clean."""
    rng = random.Random(seed)
    clock = Clock()
    reference = build_dirty_log(tmp_path / "reference", clock, seed)
    before = read_everything(reference)
    Cleaner(dedupe_buffer_bytes=40 * 24, load_factor=1.0).clean(reference, clock.now)
    after = read_everything(reference)
    reference.close()
    root = tmp_path / "victim"
    victim = build_dirty_log(root, Clock(), seed)
    victim.close()
    kill_after = rng.randint(0, 150)
    proc = subprocess.Popen([sys.executable, "-c", CLEANER_CHILD, str(root), str(clock.now)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    steps = 0
    # The child answers each go-ahead with one line, so plain readline() cannot miss one; the
    # watchdog kills a child that hangs (readline then returns "" and the asserts below fail).
    watchdog = threading.Timer(CHILD_TIMEOUT_S, proc.kill)
    watchdog.start()
    try:
        while steps <= kill_after:
            line = proc.stdout.readline()
            if not line or line.startswith("done"):
                break
            if line.startswith("step"):
                steps += 1
                proc.stdin.write("go\n")  # the last go-ahead lets it run into the step before the kill
                proc.stdin.flush()
        time.sleep(rng.uniform(0, 0.003))
    finally:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=10)
        watchdog.cancel()
    assert "Traceback" not in err and "Error" not in err, f"seed {seed}: {err}"
    assert steps, f"seed {seed}: the child cleaned nothing"
    crashed = reopen(root, clock)
    check_between(read_everything(crashed), before, after, f"seed {seed}, killed after {steps} steps")
    Cleaner(dedupe_buffer_bytes=40 * 24, load_factor=1.0).clean(crashed, clock.now)
    assert read_everything(crashed) == after, f"seed {seed}"
    crashed.close()
