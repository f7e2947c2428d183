"""The broker's cleaner threads (storage/log_cleaner.py) inside a real LogManager: they find a
compacted log that is due and clean it, leave the others alone, take truncation and deletion
notices, stop promptly, and keep to log.cleaner.io.max.bytes.per.second. What one cleaning
keeps is tests/test_storage_cleaner.py's."""
from __future__ import annotations

import threading
import time

import pytest

from raftka.cluster import wait_until
from raftka.common.errors import ConfigError
from raftka.storage import LogCleanerConfig, LogManager
from raftka.storage.cleaner import CleanerCheckpoint
from raftka.storage.log_cleaner import Throttler
from test_storage_cleaner import append, latest_by_key, read_everything, sealed

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 600, "min.cleanable.dirty.ratio": 0.01}


def manager(tmp_path, **cleaner) -> LogManager:
    config = LogCleanerConfig(**{"backoff_ms": 50, **cleaner})
    return LogManager([str(tmp_path / "logs")], cleaner_config=config)


def fill(lg, rounds: int = 30, keys: int = 5) -> dict:
    for r in range(rounds):
        append(lg, *[(f"k{k}", f"v{r}") for k in range(keys)])
    sealed(lg)
    return latest_by_key(read_everything(lg))


def test_the_threads_clean_a_compacted_log_that_is_due_and_leave_a_delete_log_alone(tmp_path):
    logs = manager(tmp_path)
    try:
        compacted = logs.get_or_create("changelog", 0, COMPACTED)
        plain = logs.get_or_create("events", 0, {"segment.bytes": 600})
        latest = fill(compacted)
        fill(plain)
        written = len(read_everything(plain))
        wait_until(lambda: len(read_everything(compacted)) < written // 2, 20, what="the changelog compacted")
        # The swaps come before the checkpoint and the count: wait for the cleaning to finish.
        wait_until(lambda: logs.cleaner is not None and logs.cleaner.cleanings >= 1, 20, what="the cleaning done")
        assert latest_by_key(read_everything(compacted)) == latest  # the latest value of every key
        assert len(read_everything(plain)) == written
        assert logs.cleaner is not None and logs.cleaner.cleanings >= 1 and logs.cleaner.failures == 0
        checkpoint = CleanerCheckpoint(tmp_path / "logs")
        assert checkpoint.get("changelog", 0) == compacted.segments[-1].base_offset
        # A truncation lowers the first dirty offset with it (Log.on_truncate).
        compacted.truncate_to(10)
        assert CleanerCheckpoint(tmp_path / "logs").get("changelog", 0) <= compacted.log_end_offset
        # A deletion drops the entry.
        logs.delete("changelog", 0)
        assert CleanerCheckpoint(tmp_path / "logs").get("changelog", 0) is None
    finally:
        started = time.monotonic()
        logs.close()
        assert time.monotonic() - started < 5  # the threads stop at once, not after a backoff
    assert not [t for t in threading.enumerate() if t.name.startswith("log-cleaner")]


def test_log_cleaner_enable_false_runs_no_thread(tmp_path):
    logs = manager(tmp_path, enable=False)
    try:
        lg = logs.get_or_create("changelog", 0, COMPACTED)
        fill(lg, rounds=10)
        time.sleep(0.3)
        assert logs.cleaner is None and len(read_everything(lg)) == 50
    finally:
        logs.close()


@pytest.mark.parametrize("field, value, words", [
    ("threads", 0, "log.cleaner.threads"),
    ("io_buffer_load_factor", 1.5, "log.cleaner.io.buffer.load.factor"),
    ("dedupe_buffer_size", 30, "log.cleaner.dedupe.buffer.size"),  # 2 threads: 15 bytes each, no entry fits
])
def test_a_bad_cleaner_setting_is_refused_with_its_name(field, value, words):
    with pytest.raises(ConfigError, match=words):
        LogCleanerConfig(**{"threads": 2, field: value}).check()


class RecordingStop(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        return False


def test_the_throttler_keeps_the_average_rate_and_sleeps_interruptibly():
    now = [100.0]
    stop = RecordingStop()
    throttle = Throttler(1000.0, stop, clock=lambda: now[0])
    throttle(500)  # 0.5 s of budget used at once: sleep 0.5 s
    assert stop.waits == [pytest.approx(0.5)]
    now[0] += 2.0  # idle for 2 s: the next 500 bytes are 1 s of budget, due at 101 < 102
    throttle(500)
    assert len(stop.waits) == 1
    throttle(2500)  # 3.5 s of bytes since 100: due at 103.5, now 102
    assert stop.waits[-1] == pytest.approx(1.5)
    unlimited = Throttler(1.7976931348623157e308, stop)
    unlimited(10**12)
    assert len(stop.waits) == 2
