"""One log line per cause per interval, with the count of the lines not written."""
from __future__ import annotations

import logging

from raftka.common.ratelog import RateLimitedLog


def test_one_line_per_cause_per_interval_with_the_count_of_the_rest(caplog):
    now = [0.0]
    rated = RateLimitedLog(logging.getLogger("test.ratelog"), interval_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.ratelog"):
        assert rated.warning("bad-frame", "closed %s", "a")
        for _ in range(999):
            assert not rated.warning("bad-frame", "closed %s", "b")
        assert rated.warning("other", "refused %s", "c")  # another cause has its own interval
        now[0] = 61.0
        assert rated.warning("bad-frame", "closed %s", "d")
    assert [r.getMessage() for r in caplog.records] == [
        "closed a", "refused c", "closed d (999 more like this in the last 61 s)"]


def test_the_table_of_causes_is_bounded():
    rated = RateLimitedLog(logging.getLogger("test.ratelog"), causes_max=8, clock=lambda: 0.0)
    for i in range(1000):
        rated.warning(f"cause-{i}", "x")
    assert len(rated._causes) == 8
