"""Idempotent-producer state in the partition log (storage/producer_state.py).

A retried batch gets its original offsets and is not appended twice; gaps and stale epochs are
refused; the state survives reopen (snapshots or a header replay), follows follower appends (so
a new leader deduplicates), and is rebuilt by truncation.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.common.errors import OutOfOrderSequenceNumberError, RaftkaError
from raftka.common.records import BatchBuilder, iter_batches
from raftka.storage import Log


def pbatch(pid: int, epoch: int, seq: int, count: int = 2, ts: int = 1_000) -> bytes:
    builder = BatchBuilder(batch_size=1 << 20, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(count):
        builder.append(ts + i, None, b"v%d" % (seq + i))
    return builder.build()


def open_log(path, **config) -> Log:
    return Log.open(path / "t-0", {k.replace("_", "."): v for k, v in config.items()}, topic="t", partition=0)


def sequences_in_log(lg: Log) -> list[tuple[int, int, int]]:
    data = lg.read(0, 1 << 30).records
    return [(h.producer_id, h.base_sequence, h.base_offset) for _, h in iter_batches(data)]


def test_a_retried_batch_gets_its_original_offsets_and_is_not_appended_again(tmp_path):
    lg = open_log(tmp_path)
    first = lg.append_as_leader(pbatch(7, 0, 0), 0)
    second = lg.append_as_leader(pbatch(7, 0, 2), 0)
    size = lg.size_in_bytes
    retry = lg.append_as_leader(pbatch(7, 0, 0), 0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    retry = lg.append_as_leader(pbatch(7, 0, 2), 0)
    assert retry.duplicate and retry.first_offset == second.first_offset
    assert lg.size_in_bytes == size and lg.log_end_offset == 4


def test_a_sequence_gap_a_stale_epoch_and_a_nonzero_first_sequence_are_refused(tmp_path):
    lg = open_log(tmp_path)
    lg.append_as_leader(pbatch(7, 3, 0), 0)
    with pytest.raises(OutOfOrderSequenceNumberError) as gap:
        lg.append_as_leader(pbatch(7, 3, 5), 0)
    assert "expected sequence 2, got 5" in str(gap.value)
    with pytest.raises(RaftkaError) as stale:
        lg.append_as_leader(pbatch(7, 2, 2), 0)
    assert stale.value.name == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(7, 4, 9), 0)  # a new epoch starts at 0
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(8, 0, 4), 0)  # an unknown producer starts at 0
    assert lg.log_end_offset == 2
    lg.append_as_leader(pbatch(7, 4, 0), 0)  # bumped epoch from 0 is fine
    assert lg.log_end_offset == 4


def test_only_the_last_five_batches_are_remembered_for_retries(tmp_path):
    lg = open_log(tmp_path)
    for i in range(7):
        lg.append_as_leader(pbatch(1, 0, 2 * i), 0)
    assert lg.append_as_leader(pbatch(1, 0, 4), 0).duplicate  # 5th from last
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(1, 0, 2), 0)              # 6th from last: forgotten


@pytest.mark.parametrize("how", ["clean close", "crash", "crash without snapshots", "corrupt snapshot"])
def test_dedup_state_survives_a_restart(tmp_path, how):
    lg = open_log(tmp_path, segment_bytes=400)
    infos = [lg.append_as_leader(pbatch(5, 1, 2 * i), 0) for i in range(12)]
    assert len(lg.segments) > 2
    if how == "clean close":
        lg.close()
    snapshots = sorted((tmp_path / "t-0").glob("*.snapshot"))
    assert snapshots
    if how == "crash without snapshots":
        for path in snapshots:
            path.unlink()
    if how == "corrupt snapshot":
        data = bytearray(snapshots[-1].read_bytes())
        data[-3] ^= 0xFF
        snapshots[-1].write_bytes(bytes(data))
    lg = open_log(tmp_path, segment_bytes=400)
    retry = lg.append_as_leader(pbatch(5, 1, 22), 0)
    assert retry.duplicate and retry.first_offset == infos[-1].first_offset
    assert lg.append_as_leader(pbatch(5, 1, 24), 0).first_offset == 24


def test_a_follower_that_becomes_leader_deduplicates_retries(tmp_path):
    leader = open_log(tmp_path / "a")
    follower = open_log(tmp_path / "b")
    info = leader.append_as_leader(pbatch(9, 0, 0), 1)
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    retry = follower.append_as_leader(pbatch(9, 0, 0), 2)  # the producer retries to the new leader
    assert retry.duplicate and retry.first_offset == info.first_offset
    assert follower.log_end_offset == 2


def test_truncation_rebuilds_the_state_so_a_truncated_batch_can_be_written_again(tmp_path):
    lg = open_log(tmp_path)
    lg.append_as_leader(pbatch(3, 0, 0), 0)
    lg.append_as_leader(pbatch(3, 0, 2), 0)
    lg.truncate_to(2)
    info = lg.append_as_leader(pbatch(3, 0, 2), 0)
    assert not info.duplicate and info.first_offset == 2
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(pbatch(3, 0, 6), 0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_property_random_retries_leave_every_sequence_exactly_once_and_in_order(tmp_path_factory, seed):
    rng = random.Random(seed)
    lg = open_log(tmp_path_factory.mktemp("p"), segment_bytes=rng.choice([300, 2000, 10**6]))
    sent: dict[int, list[tuple[int, int]]] = {1: [], 2: []}  # pid -> [(seq, first_offset)]
    next_seq = {1: 0, 2: 0}
    for _ in range(60):
        pid = rng.choice([1, 2])
        if sent[pid] and rng.random() < 0.4:  # retry one of the last five
            seq, offset = rng.choice(sent[pid][-5:])
            info = lg.append_as_leader(pbatch(pid, 0, seq), 0)
            assert info.duplicate and info.first_offset == offset, f"seed {seed}"
        else:
            info = lg.append_as_leader(pbatch(pid, 0, next_seq[pid]), 0)
            assert not info.duplicate, f"seed {seed}"
            sent[pid].append((next_seq[pid], info.first_offset))
            next_seq[pid] += 2
        if rng.random() < 0.05:  # crash and reopen
            lg = open_log(lg.dir.parent, segment_bytes=lg.config.segment_bytes)
    in_log = sequences_in_log(lg)
    for pid in (1, 2):
        seqs = [s for p, s, _ in in_log if p == pid]
        assert seqs == list(range(0, next_seq[pid], 2)), f"seed {seed}"


def test_producers_expire_by_the_log_clock_not_by_their_batch_timestamps(tmp_path):
    now = [5_000_000_000]
    lg = Log.open(tmp_path / "t-0", {}, topic="t", partition=0, clock_ms=lambda: now[0])
    lg.append_as_leader(pbatch(1, 0, 0, ts=10), 0)  # a producer stamping ancient timestamps
    assert lg.remove_expired_producers(now[0] + 1000) == 0
    assert lg.append_as_leader(pbatch(1, 0, 0, ts=10), 0).duplicate
    assert lg.remove_expired_producers(now[0] + 86_400_001) == 1
    with pytest.raises(OutOfOrderSequenceNumberError):  # forgotten: must restart at 0
        lg.append_as_leader(pbatch(1, 0, 2), 0)
