"""One high-watermark, recovery-point and log-start-offset checkpoint per log dir (Kafka's
layout), owned by the LogManager (storage/manager.py); only the leader-epoch checkpoint stays in
the partition directory, and it exists from the log's creation (issue #21: at 10,000 partitions a
high-watermark pass wrote up to 10,000 small files, and a replica's first write created files on
the produce path).

Each test builds logs through a LogManager in a temp dir and reads the files back from disk. A
"crash" releases the manager's log-dir locks and abandons its logs unclosed, as a killed process
leaves them.
"""
from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path

import pytest

from raftka.common.errors import KafkaStorageError
from raftka.storage import LogManager, checkpoint
from raftka.storage.checkpoint import (
    CHECKPOINT_ENTRIES_MAX,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    OFFSET_CHECKPOINTS,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    CheckpointFile,
    OffsetCheckpointFile,
)
from raftka.storage.log import Log

from test_storage import make_batch, read_all


def _read(d: Path, name: str) -> dict[tuple[str, int], int]:
    found = OffsetCheckpointFile(d / name).read()
    assert found is not None, f"{d / name} is missing"
    return found


def _crash(manager: LogManager) -> None:
    """Leave the manager as a killed process would: locks released, logs not closed."""
    for fd in manager._lock_fds:
        os.close(fd)
    manager._lock_fds.clear()


@pytest.fixture
def writes(monkeypatch):
    """Counts of dir-level checkpoint writes, by file name."""
    counted: Counter = Counter()
    original = OffsetCheckpointFile.write

    def counting(self, offsets, *, fsync):
        counted[self.path.name] += 1
        return original(self, offsets, fsync=fsync)
    monkeypatch.setattr(OffsetCheckpointFile, "write", counting)
    return counted


# --- the file format ---------------------------------------------------------------------------

def test_an_offset_checkpoint_round_trips_in_kafkas_layout(tmp_path):
    cp = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    assert cp.read() is None  # missing
    offsets = {("orders", 0): 1500, ("a.b_c-D", 12): 0}
    cp.write(offsets, fsync=True)
    assert (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n2\norders 0 1500\na.b_c-D 12 0\n"
    assert cp.read() == offsets
    cp.write({}, fsync=False)
    assert cp.read() == {}
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("text, problem", [
    ("1\n0\n", "unknown version"),
    ("0\n", "missing header"),
    ("0\n2\nt 0 5\n", "expected 2 entries"),
    ("0\n1\nt 0\n", "not 'topic partition offset'"),
    ("0\n1\nt 0 5 6\n", "not 'topic partition offset'"),
    ("0\n1\nmy topic 0 5\n", "not 'topic partition offset'"),  # a space: not a legal topic name
    ("0\n1\na/b 0 5\n", "not 'topic partition offset'"),
    ("0\n1\nt -1 5\n", "not 'topic partition offset'"),
    ("0\n1\nt 0 -5\n", "not 'topic partition offset'"),
    ("0\n1\nt 0 x\n", "not 'topic partition offset'"),
    ("0\n2\nt 0 5\nt 0 6\n", "listed twice"),
    (f"0\n{CHECKPOINT_ENTRIES_MAX + 1}\n", "expected"),
    ("0\n1\nt\xe9 0 5\n", "not a text checkpoint"),
])
def test_a_bad_offset_checkpoint_is_a_checkpoint_error(tmp_path, text, problem):
    path = tmp_path / HIGH_WATERMARK_CHECKPOINT
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CheckpointError, match=problem):
        OffsetCheckpointFile(path).read()


# --- one file of each kind per log dir ---------------------------------------------------------

def test_each_log_dir_holds_one_file_of_each_kind_and_partition_dirs_only_their_epochs(tmp_path, writes):
    dirs = [tmp_path / "a", tmp_path / "b"]
    now = [1_000_000]
    manager = LogManager([str(d) for d in dirs], {"segment.bytes": 1000, "retention.ms": -1},
                         clock_ms=lambda: now[0], hw_checkpoint_interval_ms=5000,
                         recovery_point_checkpoint_interval_ms=60_000)
    logs = [manager.get_or_create("t", p) for p in range(4)]
    for i, lg in enumerate(logs):
        for _ in range(10 + i):
            lg.append_as_leader(make_batch(3), 0)
        lg.update_high_watermark(lg.log_end_offset - 1)
    logs[1].delete_records_before(7)
    now[0] += 5000
    manager.run_maintenance()
    assert writes[HIGH_WATERMARK_CHECKPOINT] == 2  # one per dir
    for d in dirs:
        hosted = {(lg.topic, lg.partition): lg for lg in logs if lg.dir.parent == d}
        assert len(hosted) == 2
        assert _read(d, HIGH_WATERMARK_CHECKPOINT) == {k: lg.high_watermark for k, lg in hosted.items()}
    writes.clear()
    now[0] += 5000
    manager.run_maintenance()
    assert writes == {}, "nothing moved: nothing written"
    logs[2].update_high_watermark(logs[2].log_end_offset)
    now[0] += 5000
    manager.run_maintenance()
    assert writes == {HIGH_WATERMARK_CHECKPOINT: 1}  # the one dir whose entry changed
    expected = {(lg.topic, lg.partition): (lg.log_start_offset, lg.high_watermark, lg.log_end_offset)
                for lg in logs}
    manager.close()

    for d in dirs:
        assert sorted(p.name for p in d.iterdir() if p.is_file()) == sorted([*OFFSET_CHECKPOINTS, ".lock"])
        for partition_dir in (p for p in d.iterdir() if p.is_dir()):
            assert not set(OFFSET_CHECKPOINTS) & {p.name for p in partition_dir.iterdir()}
        # A clean close flushed every log: the recovery points are the log ends.
        assert set(_read(d, RECOVERY_POINT_CHECKPOINT).items()) <= {(k, v[2]) for k, v in expected.items()}
    manager = LogManager([str(d) for d in dirs], {})
    assert {(lg.topic, lg.partition): (lg.log_start_offset, lg.high_watermark, lg.log_end_offset)
            for lg in manager.logs()} == expected
    assert manager.get("t", 1).log_start_offset == 7
    manager.close()


def test_delete_records_is_on_disk_before_it_returns_and_nothing_moves_when_it_cannot_be(tmp_path, monkeypatch):
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000, "retention.ms": -1},
                         recovery_point_checkpoint_interval_ms=3_600_000)
    lg = manager.get_or_create("t", 0)
    for _ in range(30):
        lg.append_as_leader(make_batch(3), 0)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.delete_records_before(47) == 47
    assert _read(tmp_path, LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 47}  # no maintenance pass ran

    def failing(path, data, *, fsync=True):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(checkpoint, "write_atomic", failing)
    segments = len(lg.segments)
    with pytest.raises(KafkaStorageError, match="No space left"):
        lg.delete_records_before(70)
    assert lg.log_start_offset == 47 and len(lg.segments) == segments
    monkeypatch.undo()
    _crash(manager)
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000})
    assert manager.get("t", 0).log_start_offset == 47
    manager.close()


def test_a_truncation_below_the_recovery_point_on_disk_is_written_at_once(tmp_path, writes):
    """A stale, higher recovery point would let the next open trust records appended after the
    truncation without re-validating them."""
    now = [1_000_000]
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000}, clock_ms=lambda: now[0],
                         recovery_point_checkpoint_interval_ms=60_000)
    lg = manager.get_or_create("t", 0)
    for _ in range(20):
        lg.append_as_leader(make_batch(3), 0)
    lg.flush()
    now[0] += 60_000
    manager.run_maintenance()
    assert _read(tmp_path, RECOVERY_POINT_CHECKPOINT) == {("t", 0): 60}
    for _ in range(5):
        lg.append_as_leader(make_batch(3), 0)
    writes.clear()
    lg.truncate_to(66)  # above the recovery point on disk: nothing to write
    assert writes == {}
    lg.truncate_to(30)
    assert writes == {RECOVERY_POINT_CHECKPOINT: 1}
    assert _read(tmp_path, RECOVERY_POINT_CHECKPOINT) == {("t", 0): 30}
    # Below the log start: the log starts over there, and both offsets go to disk at once.
    lg.update_high_watermark(30)
    lg.delete_records_before(21)
    lg.truncate_to(9)
    assert lg.log_start_offset == lg.log_end_offset == 9
    assert _read(tmp_path, LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 9}
    assert _read(tmp_path, RECOVERY_POINT_CHECKPOINT) == {("t", 0): 9}
    manager.close()


def test_an_unclean_restart_takes_the_offsets_on_disk_and_writes_nothing(tmp_path, writes):
    now = [1_000_000]
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000}, clock_ms=lambda: now[0],
                         hw_checkpoint_interval_ms=0, recovery_point_checkpoint_interval_ms=0)
    lg = manager.get_or_create("t", 0)
    for i in range(12):
        lg.append_as_leader(make_batch(3, tag=i), 0)
    lg.flush()
    lg.update_high_watermark(30)
    manager.run_maintenance()
    flushed = lg.recovery_point
    for i in range(4):  # past the recovery point and the checkpointed high watermark
        lg.append_as_leader(make_batch(3, tag=i), 0)
    lg.update_high_watermark(lg.log_end_offset)
    expected = read_all(lg)
    _crash(manager)
    on_disk = (tmp_path / RECOVERY_POINT_CHECKPOINT).stat().st_mtime_ns
    writes.clear()

    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000})
    lg = manager.get("t", 0)
    assert read_all(lg) == expected
    assert (lg.recovery_point, lg.high_watermark) == (flushed, 30)
    assert writes == {} and (tmp_path / RECOVERY_POINT_CHECKPOINT).stat().st_mtime_ns == on_disk
    manager.close()


def test_a_bad_dir_checkpoint_opens_the_logs_without_it_and_is_rewritten(tmp_path, caplog):
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000})
    lg = manager.get_or_create("t", 0)
    for _ in range(10):
        lg.append_as_leader(make_batch(3), 0)
    lg.update_high_watermark(20)
    manager.close()
    (tmp_path / HIGH_WATERMARK_CHECKPOINT).write_text("0\n1\nt 0 twenty\n")
    with caplog.at_level(logging.WARNING, logger="raftka.storage.manager"):
        manager = LogManager([str(tmp_path)], {"segment.bytes": 1000})
    assert "opening its logs without it" in caplog.text
    assert manager.get("t", 0).high_watermark == 0  # the safe fallback: a lower bound
    assert _read(tmp_path, HIGH_WATERMARK_CHECKPOINT) == {("t", 0): 0}
    manager.close()


# --- deleted partitions ------------------------------------------------------------------------

def test_a_deleted_partition_drops_out_of_the_dir_files(tmp_path):
    now = [1_000_000]
    manager = LogManager([str(tmp_path)], {}, clock_ms=lambda: now[0], hw_checkpoint_interval_ms=0,
                         recovery_point_checkpoint_interval_ms=0)
    for p in range(3):
        lg = manager.get_or_create("t", p)
        lg.append_as_leader(make_batch(3), 0)
        lg.update_high_watermark(3)
    manager.run_maintenance()
    assert set(_read(tmp_path, HIGH_WATERMARK_CHECKPOINT)) == {("t", 0), ("t", 1), ("t", 2)}
    assert manager.delete("t", 1)
    manager.run_maintenance()
    for name in OFFSET_CHECKPOINTS:
        assert set(_read(tmp_path, name)) == {("t", 0), ("t", 2)}, name
    manager.close()


def test_a_partition_recreated_before_the_next_pass_never_sees_the_old_offsets(tmp_path):
    manager = LogManager([str(tmp_path)], {"retention.ms": -1})
    lg = manager.get_or_create("t", 0)
    for _ in range(10):
        lg.append_as_leader(make_batch(3), 0)
    lg.update_high_watermark(30)
    lg.delete_records_before(25)
    manager.checkpoint_high_watermarks()
    assert _read(tmp_path, LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 25}
    manager.delete("t", 0)
    lg = manager.get_or_create("t", 0)  # the old entries are written away first
    assert ("t", 0) not in _read(tmp_path, LOG_START_OFFSET_CHECKPOINT)
    assert ("t", 0) not in _read(tmp_path, HIGH_WATERMARK_CHECKPOINT)
    lg.append_as_leader(make_batch(3), 0)
    _crash(manager)
    manager = LogManager([str(tmp_path)], {})
    lg = manager.get("t", 0)
    assert (lg.log_start_offset, lg.high_watermark, lg.log_end_offset) == (0, 0, 3)
    manager.close()


# --- migration from per-partition files --------------------------------------------------------

def _old_raftka_partition(d: Path, topic: str, partition: int, batches: int) -> Path:
    """A partition directory as an older Raftka left it after a crash: segments, and its own
    three offset checkpoints (recovery point 6, log start 4, high watermark 9)."""
    lg = Log.open(d / f"{topic}-{partition}", {"segment.bytes": 1000}, topic=topic, partition=partition)
    for _ in range(batches):
        lg.append_as_leader(make_batch(3), 0)
    for name, value in ((RECOVERY_POINT_CHECKPOINT, 6), (LOG_START_OFFSET_CHECKPOINT, 4),
                        (HIGH_WATERMARK_CHECKPOINT, 9)):
        CheckpointFile(lg.dir / name, 1).write([(value,)])
    return lg.dir


def test_partition_files_of_an_older_raftka_are_read_once_then_deleted(tmp_path, writes):
    old = _old_raftka_partition(tmp_path, "t", 0, 10)
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000})
    lg = manager.get("t", 0)
    assert (lg.log_start_offset, lg.recovery_point, lg.high_watermark) == (4, 6, 9)
    assert writes == {name: 1 for name in OFFSET_CHECKPOINTS}  # at start, covering the partition
    for name, value in ((RECOVERY_POINT_CHECKPOINT, 6), (LOG_START_OFFSET_CHECKPOINT, 4),
                        (HIGH_WATERMARK_CHECKPOINT, 9)):
        assert _read(tmp_path, name) == {("t", 0): value}
        assert not (old / name).exists()
    _crash(manager)
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000})  # from the dir files now
    lg = manager.get("t", 0)
    assert (lg.log_start_offset, lg.recovery_point, lg.high_watermark) == (4, 6, 9)
    manager.close()


def test_the_dir_file_wins_over_a_leftover_partition_file_and_a_bad_one_reads_as_zero(tmp_path, caplog):
    manager = LogManager([str(tmp_path)], {"segment.bytes": 1000})
    lg = manager.get_or_create("t", 0)
    for _ in range(10):
        lg.append_as_leader(make_batch(3), 0)
    lg.update_high_watermark(12)
    manager.close()
    # A crash between the dir file's write and the partition file's deletion leaves both.
    leftover = tmp_path / "t-0" / HIGH_WATERMARK_CHECKPOINT
    CheckpointFile(leftover, 1).write([(3,)])
    bad = _old_raftka_partition(tmp_path, "u", 0, 5) / RECOVERY_POINT_CHECKPOINT
    bad.write_text("garbage")
    with caplog.at_level(logging.WARNING, logger="raftka.storage.log"):
        manager = LogManager([str(tmp_path)], {"segment.bytes": 1000})
    assert manager.get("t", 0).high_watermark == 12 and not leftover.exists()
    assert "using 0" in caplog.text and manager.get("u", 0).recovery_point == 0
    assert not bad.exists()
    manager.close()
