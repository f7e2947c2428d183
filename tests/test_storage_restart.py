"""Opening logs after a crash costs reads, not fsyncs (issue #21: a broker restart at 10,000
partitions spent most of its time fsyncing every recovered log).

A "crash" here is a log abandoned without close(): its files stay as a killed process leaves them
(no .clean-shutdown marker, checkpoints as last written).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftka.common.errors import ConfigError, KafkaStorageError
from raftka.storage import Log, LogManager
from raftka.storage.segment import LogSegment
from tests.test_storage import assert_contiguous, checkpointed, make_batch, open_log, read_all


@pytest.fixture
def fsyncs(monkeypatch):
    """Counts os.fsync calls (files and directories) while the test runs."""
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)
    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_an_unclean_open_fsyncs_nothing_and_keeps_the_recovery_point(tmp_path, fsyncs):
    lg = open_log(tmp_path, segment_bytes=1000)
    for i in range(12):
        lg.append_as_leader(make_batch(3, tag=i), 0)
    lg.flush()
    saved = checkpointed(lg)  # as the LogManager's maintenance writes them
    flushed = lg.log_end_offset
    for i in range(4):  # unflushed tail
        lg.append_as_leader(make_batch(3, tag=i), 0)
    leo, expected = lg.log_end_offset, read_all(lg)
    assert lg.recovery_point == flushed < leo

    fsyncs.clear()
    lg = open_log(tmp_path, saved, segment_bytes=1000)  # the first log is abandoned: a crash
    assert fsyncs == []
    assert lg.log_end_offset == leo and read_all(lg) == expected
    # The tail is validated but not durable: the recovery point stays, so another crash
    # (or a machine crash) re-validates it.
    assert lg.recovery_point == flushed

    lg = open_log(tmp_path, saved, segment_bytes=1000)  # a second crash: same log again
    assert lg.log_end_offset == leo and read_all(lg) == expected
    lg.append_as_leader(make_batch(2), 0)
    lg.flush()  # the next flush makes the recovered tail durable and moves the point
    assert lg.recovery_point == lg.log_end_offset == leo + 2
    assert_contiguous(read_all(lg), 0, leo + 2)


def test_segments_below_the_recovery_point_are_not_rescanned(tmp_path, monkeypatch):
    lg = open_log(tmp_path, segment_bytes=1000)
    for i in range(30):
        lg.append_as_leader(make_batch(3, tag=i), 0)
    lg.flush()
    saved = checkpointed(lg)
    lg.append_as_leader(make_batch(3), 0)
    assert len(lg.segments) >= 4
    leo, expected = lg.log_end_offset, read_all(lg)

    recovered: list[int] = []
    real = LogSegment.recover

    def counting(self):
        recovered.append(self.base_offset)
        return real(self)
    monkeypatch.setattr(LogSegment, "recover", counting)
    lg = open_log(tmp_path, saved, segment_bytes=1000)
    assert recovered == [lg.segments[-1].base_offset]  # only the unflushed active segment
    assert lg.log_end_offset == leo and read_all(lg) == expected


def test_the_epoch_truncation_of_an_unclean_open_is_not_fsynced(tmp_path, fsyncs):
    lg = open_log(tmp_path)
    lg.append_as_leader(make_batch(3), 0)
    lg.leader_epoch_cache.assign(1, lg.log_end_offset)  # a new leader that has not appended yet
    assert lg.leader_epoch_cache.epoch_entries() == [(0, 0), (1, 3)]
    lg.flush()  # the file holds both entries

    fsyncs.clear()
    lg = open_log(tmp_path)  # crash
    assert fsyncs == []
    # Kafka's loader drops entries from the log end on, in memory only: the file keeps them until
    # the cache is next written, and another crash before that drops them again at the next open.
    assert lg.leader_epoch_cache.epoch_entries() == [(0, 0)]
    assert lg.leader_epoch_cache.checkpoint.read() == [(0, 0), (1, 3)]
    lg = open_log(tmp_path)  # crash again
    assert lg.leader_epoch_cache.epoch_entries() == [(0, 0)]
    lg.append_as_leader(make_batch(2), 2)
    lg.flush()  # syncs the epochs before the recovery point passes their batches
    assert lg.leader_epoch_cache.checkpoint.read() == [(0, 0), (2, 3)]
    assert fsyncs != []


def _partitions(manager: LogManager) -> list[tuple[str, int]]:
    return [(lg.topic, lg.partition) for lg in manager.logs()]


def test_the_log_manager_opens_a_dir_on_several_threads(tmp_path):
    manager = LogManager([str(tmp_path)], {})
    for p in range(40):
        manager.get_or_create(f"t{p % 4}", p).append_as_leader(make_batch(2, tag=p), 0)
    ends = {(lg.topic, lg.partition): lg.log_end_offset for lg in manager.logs()}
    manager.close()

    for threads in (1, 6):
        manager = LogManager([str(tmp_path)], {}, recovery_threads_per_data_dir=threads)
        try:
            assert _partitions(manager) == sorted(ends, key=lambda k: f"{k[0]}-{k[1]}")  # dir name order
            assert {(lg.topic, lg.partition): lg.log_end_offset for lg in manager.logs()} == ends
        finally:
            manager.close()


def test_one_log_that_cannot_be_opened_fails_the_start_and_leaves_the_dir_usable(tmp_path):
    manager = LogManager([str(tmp_path)], {})
    for p in range(10):
        manager.get_or_create("t", p).append_as_leader(make_batch(2), 0)
    manager.close()
    bad = tmp_path / "t-3" / "00000000000000000000.log"
    bad.unlink()
    bad.mkdir()  # a segment that cannot be opened as a file

    with pytest.raises(KafkaStorageError, match="t-3"):
        LogManager([str(tmp_path)], {}, recovery_threads_per_data_dir=4)
    bad.rmdir()
    manager = LogManager([str(tmp_path)], {}, recovery_threads_per_data_dir=4)  # lock released
    try:
        assert len(manager.logs()) == 10
    finally:
        manager.close()


def test_recovery_threads_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match="num.recovery.threads.per.data.dir"):
        LogManager([str(tmp_path)], {}, recovery_threads_per_data_dir=0)
