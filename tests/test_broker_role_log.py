"""What a broker logs when metadata moves its replicas (#scale): one INFO line per metadata change
that moved roles here, with the counts and a bounded sample of partition names, instead of one
INFO line per partition (10,000 of them at a restart flooded the log and cost ~5% of the event
loop). Each partition's own line stays at DEBUG. A single partition's leadership flip and a single
ISR change are still seen at INFO.

A ReplicaManager over real logs (broker 1 of 3) takes MetadataViews by hand; caplog holds what
the broker's loggers wrote.
"""
from __future__ import annotations

import asyncio
import logging
import re

import pytest

from raftka.broker import partition as partition_module
from raftka.broker.metadata import BrokerInfo, MetadataView, PartitionInfo, TopicInfo
from raftka.broker.replica_manager import SUMMARY_NAMES_MAX, ReplicaManager
from raftka.common.ratelog import RateLimitedLog
from raftka.storage import LogManager

TOPICS = 12
PARTITIONS = 12  # per topic: 144 replicas here, a third of them led by broker 1
BROKERS = {b: BrokerInfo(b, 1, {"PLAINTEXT": f"127.0.0.1:{1 + b}"}, None, False) for b in (1, 2, 3)}
LOGGERS = ("raftka.broker.replica_manager", "raftka.broker.partition")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def isr_clock(monkeypatch):
    """The partitions' ISR-line limiter, fresh and on a clock the test moves."""
    clock = Clock()
    monkeypatch.setattr(partition_module, "isr_lines",
                        RateLimitedLog(partition_module.log, interval_s=partition_module.ISR_INFO_INTERVAL_S,
                                       clock=clock))
    return clock


def view(offset: int, leader_of, epoch_of=lambda t, p: 1, isr_of=lambda t, p: (1, 2, 3),
         partition_epoch_of=None) -> MetadataView:
    """Broker 1 of 3 is a replica of every partition of TOPICS topics."""
    topics = {}
    for t in range(TOPICS):
        name = f"t{t:02d}"
        parts = tuple(PartitionInfo((1, 2, 3), isr_of(t, p), leader_of(t, p), epoch_of(t, p),
                                    (partition_epoch_of or epoch_of)(t, p)) for p in range(PARTITIONS))
        topics[name] = TopicInfo(name, f"id-{name}", parts, {})
    return MetadataView(offset, BROKERS, topics, {})


def round_robin(t: int, p: int) -> int:
    return 1 + (t + p) % 3


def lines(caplog, level=logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name in LOGGERS and r.levelno == level]


async def _with_manager(tmp_path, scenario) -> None:
    logs = LogManager([str(tmp_path)], {})
    manager = ReplicaManager(1, {"min.insync.replicas": 1, "replica.lag.time.max.ms": 30_000}, logs, None)
    try:
        scenario(manager)
    finally:
        await manager.close()
        logs.close()


def test_a_bulk_role_change_is_one_info_line_with_counts_and_a_bounded_sample(tmp_path, caplog, isr_clock):
    caplog.set_level(logging.DEBUG, logger="raftka.broker")

    def scenario(manager):
        manager.on_metadata(view(7, round_robin))
        info = lines(caplog)
        assert len(info) == 1, info
        led = TOPICS * PARTITIONS // 3
        assert info[0].startswith(f"metadata offset 7: leader of {led}, follower of {2 * led} partition(s) "
                                  f"of {TOPICS} topic(s): t00-0, ")
        names = re.findall(r"t\d\d-\d+", info[0])
        assert len(names) == SUMMARY_NAMES_MAX and info[0].endswith(f"and {3 * led - SUMMARY_NAMES_MAX} more")
        # Each partition's own line is still there, at DEBUG.
        debug = lines(caplog, logging.DEBUG)
        assert sum(": leader at epoch 1" in m for m in debug) == led
        assert sum(": follower of " in m for m in debug) == 2 * led
    asyncio.run(_with_manager(tmp_path, scenario))


def test_one_partitions_leadership_flip_is_named_at_info(tmp_path, caplog, isr_clock):
    caplog.set_level(logging.DEBUG, logger="raftka.broker")

    def scenario(manager):
        manager.on_metadata(view(7, round_robin))
        caplog.clear()
        # t00-1 was led by broker 2; now broker 1 leads it at the next epoch. Only t00 changed.
        manager.on_metadata(view(8, lambda t, p: 1 if (t, p) == (0, 1) else round_robin(t, p),
                                 epoch_of=lambda t, p: 2 if (t, p) == (0, 1) else 1))
        assert lines(caplog) == ["metadata offset 8: leader of 1 partition(s) of 1 topic(s): t00-1"]
        assert manager.partitions["t00", 1].is_leader
    asyncio.run(_with_manager(tmp_path, scenario))


def test_isr_changes_are_info_one_by_one_while_few_and_summarized_in_a_storm(tmp_path, caplog, isr_clock):
    caplog.set_level(logging.DEBUG, logger="raftka.broker")
    led = [(t, p) for t in range(TOPICS) for p in range(PARTITIONS) if round_robin(t, p) == 1]
    isr = {tp: (1, 2, 3) for tp in led}
    partition_epoch = {tp: 1 for tp in led}

    def change(offset: int, tps, new_isr) -> MetadataView:
        for tp in tps:
            isr[tp] = new_isr
            partition_epoch[tp] += 1
        return view(offset, round_robin, isr_of=lambda t, p: isr.get((t, p), (1, 2, 3)),
                    partition_epoch_of=lambda t, p: partition_epoch.get((t, p), 1))

    def scenario(manager):
        manager.on_metadata(change(7, [], None))
        caplog.clear()
        # One shrink of a partition this broker leads: its own INFO line, no summary.
        manager.on_metadata(change(8, [(0, 0)], (1, 2)))
        assert lines(caplog) == ["t00-0: ISR [1, 2, 3] -> [1, 2] (partition epoch 2)"]
        # Broker 3 fenced: every other partition led here loses it, in one metadata change. One
        # partition's line (the limiter lets the first through), then the summary; the rest DEBUG.
        isr_clock.now += 10
        caplog.clear()
        storm = led[1:]
        manager.on_metadata(change(9, storm, (1, 2)))
        info = lines(caplog)
        assert len(info) == 2, info
        assert re.fullmatch(r"t\d\d-\d+: ISR \[1, 2, 3\] -> \[1, 2\] \(partition epoch 2\)", info[0]), info[0]
        assert info[1].startswith(f"metadata offset 9: new ISR of {len(storm)} partition(s) of {TOPICS} topic(s): ")
        assert sum(": ISR [1, 2, 3] -> [1, 2]" in m for m in lines(caplog, logging.DEBUG)) == len(storm) - 1
        # The next shrink line, once the interval has passed, counts the ones left out.
        isr_clock.now += 1.5
        caplog.clear()
        manager.on_metadata(change(10, [(0, 0)], (1,)))
        assert lines(caplog) == [f"t00-0: ISR [1, 2] -> [1] (partition epoch 3) ({len(storm) - 1} more like this "
                                 f"in the last 2 s)"]
    asyncio.run(_with_manager(tmp_path, scenario))


def test_a_deleted_topic_is_one_line_for_its_stopped_replicas(tmp_path, caplog, isr_clock):
    caplog.set_level(logging.DEBUG, logger="raftka.broker")

    def scenario(manager):
        first = view(7, round_robin)
        manager.on_metadata(first)
        caplog.clear()
        topics = {name: topic for name, topic in first.topics.items() if name != "t03"}
        manager.on_metadata(MetadataView(8, BROKERS, topics, {}))
        assert lines(caplog) == [f"metadata offset 8: stopped {PARTITIONS} partition(s) of 1 topic(s): t03-0, t03-1, "
                                 f"t03-2, t03-3, t03-4, t03-5, t03-6, t03-7, t03-8, t03-9 ... and "
                                 f"{PARTITIONS - SUMMARY_NAMES_MAX} more"]
        assert sum(": stopped and deleted" in m for m in lines(caplog, logging.DEBUG)) == PARTITIONS
    asyncio.run(_with_manager(tmp_path, scenario))
