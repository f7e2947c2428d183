"""LogManager.run_maintenance costs what changed, not what is hosted (storage/manager.py).

Many logs, a clock moved by hand, and the Log duties and checkpoint writes counted: after one
pass, an idle tick visits no log and writes no file; an append and a high watermark move bring
back one write of the log dir's high-watermark checkpoint, holding the new value; a
flush waits for its flush.ms deadline (also one moved by AlterConfigs); retention scans every
log once per retention_check_interval_ms. A leader change writes the leader-epoch checkpoint
without an fsync; the next flush makes it durable.
"""
from __future__ import annotations

from collections import Counter

import pytest

from raftka.storage import Log, LogManager
from raftka.storage.checkpoint import OffsetCheckpointFile

from test_storage import make_batch

LOGS = 20
HW_INTERVAL_MS = 5000
RETENTION_INTERVAL_MS = 300_000


@pytest.fixture
def counted(monkeypatch):
    """Counts of calls to each Log duty, by duty name, and of checkpoint writes, by file name."""
    calls: Counter = Counter()
    for name in ("maybe_flush", "delete_old_segments", "remove_expired_producers"):
        original = getattr(Log, name)

        def wrapper(self, *args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(Log, name, wrapper)
    write = OffsetCheckpointFile.write

    def counting_write(self, offsets, *, fsync):
        calls[self.path.name] += 1
        return write(self, offsets, fsync=fsync)
    monkeypatch.setattr(OffsetCheckpointFile, "write", counting_write)
    return calls


def _manager(tmp_path, now, config=None):
    manager = LogManager([str(tmp_path)], config or {}, clock_ms=lambda: now[0],
                         hw_checkpoint_interval_ms=HW_INTERVAL_MS,
                         retention_check_interval_ms=RETENTION_INTERVAL_MS)
    logs = [manager.get_or_create("t", i) for i in range(LOGS)]
    return manager, logs


def test_an_idle_tick_visits_no_log_and_a_changed_log_alone_is_checkpointed(tmp_path, counted):
    now = [1_000_000]
    manager, logs = _manager(tmp_path, now)
    now[0] += HW_INTERVAL_MS
    manager.run_maintenance()  # the first pass: every new log
    counted.clear()
    for _ in range(10):
        now[0] += 1000
        manager.run_maintenance()
    assert sum(counted.values()) == 0, f"idle ticks visited logs: {dict(counted)}"

    logs[7].append_as_leader(make_batch(3, ts=now[0]), 0)
    logs[7].update_high_watermark(logs[7].log_end_offset)
    now[0] += HW_INTERVAL_MS
    manager.run_maintenance()
    assert counted == {"replication-offset-checkpoint": 1}
    hws = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").read()
    assert hws[("t", 7)] == 3 and len(hws) == LOGS
    manager.close()


def test_a_flush_waits_for_its_flush_ms_deadline_even_one_moved_by_alter_configs(tmp_path, counted):
    now = [1_000_000]
    manager, logs = _manager(tmp_path, now, {"flush.ms": 500})
    logs[0].append_as_leader(make_batch(2, ts=now[0]), 0)
    now[0] += 100
    assert manager.run_maintenance()["flushed_logs"] == 0
    assert logs[0].unflushed_messages == 2
    now[0] += 400
    assert manager.run_maintenance()["flushed_logs"] == 1
    assert logs[0].recovery_point == logs[0].log_end_offset

    # flush.ms at its default (never): nothing is flushed, and no log is visited for it
    logs[1].update_config({})
    logs[1].append_as_leader(make_batch(2, ts=now[0]), 0)
    counted.clear()
    now[0] += 10_000
    assert manager.run_maintenance()["flushed_logs"] == 0 and counted["maybe_flush"] == 0
    logs[1].update_config({"flush.ms": 50})  # AlterConfigs: its deadline is now past
    now[0] += 1
    assert manager.run_maintenance()["flushed_logs"] == 1
    assert logs[1].unflushed_messages == 0
    manager.close()


def test_retention_scans_every_log_once_per_retention_check_interval(tmp_path, counted):
    now = [1_000_000]
    manager, logs = _manager(tmp_path, now, {"segment.bytes": 600, "retention.ms": 1000})
    for _ in range(10):
        logs[3].append_as_leader(make_batch(2, ts=now[0]), 0)
    logs[3].update_high_watermark(logs[3].log_end_offset)
    segments = len(logs[3].segments)
    assert segments > 1
    now[0] += RETENTION_INTERVAL_MS - 1
    assert manager.run_maintenance()["deleted_segments"] == 0 and counted["delete_old_segments"] == 0
    now[0] += 1
    assert manager.run_maintenance()["deleted_segments"] == segments - 1
    assert counted["delete_old_segments"] == LOGS and counted["remove_expired_producers"] == LOGS
    manager.close()


def test_a_deleted_log_leaves_the_maintenance_sets(tmp_path):
    now = [1_000_000]
    manager, logs = _manager(tmp_path, now, {"flush.ms": 50})
    logs[2].append_as_leader(make_batch(2, ts=now[0]), 0)
    manager.run_maintenance()  # logs[2] waits in the flush heap
    assert manager.delete("t", 2)
    now[0] += HW_INTERVAL_MS
    result = manager.run_maintenance()  # a closed log is neither flushed nor checkpointed
    assert result == {"deleted_segments": 0, "flushed_logs": 0, "errors": 0}
    manager.close()


def test_a_new_leader_epoch_is_kept_in_memory_and_made_durable_by_the_next_flush(tmp_path, monkeypatch):
    from raftka.storage import checkpoint
    writes: list[tuple[str, bool]] = []
    original = checkpoint.write_atomic

    def recording(path, data, *, fsync=True):
        writes.append((path.name, fsync))
        return original(path, data, fsync=fsync)
    monkeypatch.setattr(checkpoint, "write_atomic", recording)
    lg = Log.open(tmp_path / "t-0", {}, topic="t", partition=0)
    writes.clear()
    lg.leader_epoch_cache.assign(3, 0)  # a leader change: nothing written on the way
    lg.append_as_leader(make_batch(2), 3)
    assert writes == []
    lg.flush()  # the recovery point passes the epoch's batches: the entry is fsynced first
    assert ("leader-epoch-checkpoint", True) in writes
    writes.clear()
    lg.flush()
    assert [name for name, _ in writes if name == "leader-epoch-checkpoint"] == []
    lg.close()
    reopened = Log.open(tmp_path / "t-0", {}, topic="t", partition=0)
    assert reopened.leader_epoch_cache.epoch_entries() == [(3, 0)]
    reopened.close()


def test_an_epoch_a_crash_kept_from_the_file_is_found_again_by_recovery(tmp_path):
    """A new epoch's entry waits in memory for the next flush; a kill -9 before it (no close)
    leaves the file without it, and recovery re-assigns it from the batches past the recovery
    point."""
    lg = Log.open(tmp_path / "t-0", {}, topic="t", partition=0)
    lg.append_as_leader(make_batch(2), 3)
    lg.flush()
    lg.append_as_leader(make_batch(3), 4)  # epoch 4 from offset 2: not on disk yet
    assert lg.leader_epoch_cache.checkpoint.read() == [(3, 0)]
    # No close(), as after a kill -9: the bytes are in the page cache, no clean-shutdown file.
    recovered = Log.open(tmp_path / "t-0", {}, topic="t", partition=0)
    assert recovered.log_end_offset == 5
    assert recovered.leader_epoch_cache.epoch_entries() == [(3, 0), (4, 2)]
    assert recovered.leader_epoch_cache.end_offset_for(3) == (3, 2)
    recovered.close()
    lg.close()
