"""The replication throttle of a reassignment (issue #23, item 3; broker/quota.py).

- The token bucket, on a clock the test moves: no rate (or Kafka's Long.MAX_VALUE) never holds
  back; a rate starts with a full bucket, a read past it is a debt waited out; a rate change keeps
  what the bucket holds; rate 0 holds back for good; over a long run of reads the bytes stay
  within rate x time + the bucket + one read.
- The topic configs: Kafka's format ("*" alone, or partitionId:brokerId items) and what a broker
  takes from them.
- The follower, a real ReplicaFetcher against a real leader's Fetch handler: over its quota, a
  throttled out-of-ISR partition is forgotten from the fetch session (not only left unnamed: the
  leader would keep answering its news) while the others keep flowing; once the bucket refills
  it is named again at its log end; a throttled partition in the ISR is never held back.
- The leader, through ReplicaManager.fetch: over its quota a throttled out-of-ISR follower gets
  no records for that partition (the others in the same answer do), the in-sync one does, and the
  partition held back is read at the next incremental fetch that does not name it.
- `raftka reassign --throttle`: the current replicas of a partition that gains one are its leader
  replicas, the gained ones its follower replicas, and both rates go to every broker of those
  partitions (a reorder or a removal copies nothing); the flags go with their actions only.
- A real 1+3 cluster: a 2.5 MB partition moved with `raftka reassign --execute --throttle 200000`
  takes at least what the bucket allows (size - bucket - one read, at 200,000 B/s), while a
  replicated topic keeps its full ISR and acks=all answers quickly; `--verify` then says it is
  done and clears the four configs everywhere.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from raftka.broker.metadata import PartitionInfo
from raftka.broker.partition import Partition
from raftka.broker.quota import (ALL_REPLICAS, BURST_S, LEADER_REPLICAS, ReplicationQuota, is_listed,
                                 listed_partitions)
from raftka.broker.replica_manager import ReplicaManager
from raftka.common.api import ApiKey
from raftka.common.configs import LONG_MAX, TOPIC_CONFIGS
from raftka.common.errors import ConfigError
from raftka.storage.log import Log

from helpers import FAST_CLUSTER_CONFIGS, wait_for_topic
from test_broker_replica_fetch_wire import FOLLOWER, LEADER, TOPIC, Leader, _follower, _info
from test_fetch_sessions import _answered, _batch, _body, _close, _named
from test_metrics_parity import total as metric_total


class Seconds:
    """A monotonic clock in seconds that the test moves by hand (the quotas' clock)."""
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- the token bucket ----------------------------------------------------------------------------

def test_no_rate_never_holds_back_and_kafkas_long_max_is_no_rate():
    clock = Seconds()
    quota = ReplicationQuota(clock)
    quota.record(10**12)
    assert not quota.is_exceeded() and quota.delay_s() == 0
    quota.set_rate(LONG_MAX)
    assert quota.rate is None and not quota.is_exceeded()


def test_a_rate_starts_full_a_read_past_the_bucket_is_a_debt_waited_out():
    clock = Seconds()
    quota = ReplicationQuota(clock)
    quota.set_rate(1000)
    assert quota.capacity == 1000 * BURST_S and not quota.is_exceeded()
    quota.record(600)
    assert not quota.is_exceeded()  # 400 left
    quota.record(2400)  # one read may go past what is left: 2,000 owed
    assert quota.is_exceeded() and quota.delay_s() == pytest.approx(1.0)  # at most DELAY_S_MAX
    clock.now += 1.5
    assert quota.is_exceeded() and quota.delay_s() == pytest.approx(0.501)
    clock.now += 0.6
    assert not quota.is_exceeded()
    clock.now += 60
    quota.is_exceeded()
    assert quota.tokens == quota.capacity  # idle time fills the bucket, never beyond it
    assert quota.bytes_total == 3000


def test_a_rate_change_keeps_what_the_bucket_holds_and_rate_zero_holds_back_for_good():
    clock = Seconds()
    quota = ReplicationQuota(clock)
    quota.set_rate(1000)
    quota.record(900)
    quota.set_rate(10_000)
    assert quota.tokens == pytest.approx(100)  # a higher rate gives no new burst
    quota.set_rate(50)
    assert quota.tokens == pytest.approx(50)  # a lower one caps the bucket
    quota.set_rate(0)
    clock.now += 1000
    assert quota.is_exceeded() and quota.delay_s() > 0
    quota.set_rate(None)
    assert not quota.is_exceeded()


def test_over_a_long_run_the_bytes_stay_within_rate_times_time_plus_the_bucket_and_one_read():
    # A fetcher that reads a chunk whenever the quota allows and looks again every 10 ms.
    clock = Seconds()
    quota = ReplicationQuota(clock)
    rate, chunk, span_s = 200_000, 65_536, 60.0
    quota.set_rate(rate)
    start, read = clock.now, 0
    while clock.now - start < span_s:
        if not quota.is_exceeded():
            quota.record(chunk)
            read += chunk
        clock.now += 0.01
    assert rate * span_s - chunk <= read <= rate * span_s + quota.capacity + chunk


# -- the topic configs ---------------------------------------------------------------------------

def test_the_throttled_replicas_configs_take_kafkas_format_only():
    for key in (LEADER_REPLICAS, "follower.replication.throttled.replicas"):
        assert TOPIC_CONFIGS.parse({key: "0:1, 1:2,10:3"}, fill_defaults=False)[key] == ["0:1", "1:2", "10:3"]
        assert TOPIC_CONFIGS.parse({key: "*"}, fill_defaults=False)[key] == ["*"]
        assert TOPIC_CONFIGS.parse({})[key] == ()  # Kafka's default: none
        for bad in ("*,0:1", "0-1", "a:1", "0:", ":1", "0:1:2"):
            with pytest.raises(ConfigError, match=r"must be the literal '\*' or a list of replicas"):
                TOPIC_CONFIGS.parse({key: bad})


def test_a_broker_takes_the_partitions_listed_with_its_own_id():
    assert listed_partitions(["0:1", "1:2", "3:1"], 1) == frozenset({0, 3})
    assert listed_partitions("0:1,1:2", 2) == frozenset({1})
    assert listed_partitions(["*"], 7) == ALL_REPLICAS and is_listed(ALL_REPLICAS, 99)
    assert listed_partitions(None, 1) == frozenset() and not is_listed(frozenset(), 0)


# -- the follower: left out of the fetch session while over quota ---------------------------------

def _follow_two(manager: ReplicaManager, tmp_path, isr: tuple[int, ...]) -> list[Partition]:
    out = []
    for index in range(2):
        p = Partition(TOPIC, index, manager.broker_id, Log.open(tmp_path / f"f-{index}", topic=TOPIC, partition=index))
        p.apply_metadata(_info(LEADER, 1, isr=isr))
        manager.partitions[(TOPIC, index)] = p
        out.append(p)
    return out


def _lead_two(leader: Leader, isr: tuple[int, ...]) -> list[Partition]:
    out = []
    for index in range(2):
        p = Partition(TOPIC, index, LEADER, leader.broker.logs.get_or_create(TOPIC, index, {}))
        p.apply_metadata(_info(LEADER, 1, isr=isr))
        leader.broker.replicas.partitions[(TOPIC, index)] = p
        out.append(p)
    return out


def test_a_follower_over_quota_forgets_its_throttled_partition_from_the_session_and_names_it_again_later(tmp_path):
    from raftka.broker.replica_fetcher import ReplicaFetcher

    async def main():
        leader = Leader(tmp_path)
        led = _lead_two(leader, isr=(LEADER,))  # the follower catches up: out of the ISR
        address = await leader.start()
        follower = _follower(tmp_path, FOLLOWER, address)
        followed = _follow_two(follower, tmp_path, isr=(LEADER,))
        clock = Seconds()
        quota = follower.follower_quota = ReplicationQuota(clock)
        quota.set_rate(50)  # a 50-byte bucket: one batch empties it
        quota.mark((TOPIC, 0), True)
        fetcher = ReplicaFetcher(follower, LEADER)
        for index in range(2):
            led[index].append_as_leader(_batch(3), 1)
            fetcher.add((TOPIC, index))
        try:
            assert await fetcher.fetch_once()  # full: both come (the bucket was full), t-0 is counted
            assert [p.log.log_end_offset for p in followed] == [3, 3] and quota.is_exceeded()
            for p in led:
                p.append_as_leader(_batch(2), 1)
            assert await fetcher.fetch_once()  # over quota: t-0 forgotten, t-1 flows
            assert [p.log.log_end_offset for p in followed] == [3, 5]
            [session] = leader.broker.replicas.fetch_sessions.sessions.values()
            assert (TOPIC, 0) not in session.partitions and (TOPIC, 1) in session.partitions
            for p in led:
                p.append_as_leader(_batch(1), 1)
            assert await fetcher.fetch_once()  # still over: t-0's records stay at the leader
            assert [p.log.log_end_offset for p in followed] == [3, 6]
            clock.now += 60  # the bucket refills
            assert await fetcher.fetch_once()  # named again at its log end, as a partition added
            assert [p.log.log_end_offset for p in followed] == [6, 6]
            assert (TOPIC, 0) in session.partitions and quota.held_back_total == 2
            # In the ISR a throttled partition is never held back (its bytes still count).
            followed[0].apply_metadata(PartitionInfo(replicas=(LEADER, FOLLOWER), isr=(LEADER, FOLLOWER), leader=LEADER,
                                                     leader_epoch=1, partition_epoch=2))
            quota.record(10_000)
            led[0].append_as_leader(_batch(1), 1)
            assert await fetcher.fetch_once()
            assert followed[0].log.log_end_offset == 7 and quota.held_back_total == 2
        finally:
            await fetcher.close()
            await leader.close()
            for p in followed:
                p.log.close()
        bodies = [b for api, _, b in leader.requests if api == ApiKey.FETCH]
        session_id = bodies[1]["session_id"]
        assert [(b["session_id"], b["session_epoch"]) for b in bodies] == [
            (0, 0), (session_id, 1), (session_id, 2), (session_id, 3), (session_id, 4)]
        assert [_named(b) for b in bodies[:4]] == [[0, 1], [1], [1], [0, 1]] and 0 in _named(bodies[4])
        assert [b["forgotten_topics_data"] for b in bodies[1:3]] == [[{"topic": TOPIC, "partitions": [0]}], []]
    asyncio.run(main())


# -- the leader: no records for a throttled out-of-ISR follower over quota ----------------------------

def test_a_leader_over_quota_answers_a_throttled_out_of_isr_follower_no_records_and_reads_it_again_unnamed(tmp_path):
    async def main():
        manager = ReplicaManager(1, {"fetch.max.bytes": 1 << 20, "max.incremental.fetch.session.cache.slots": 10},
                                 logs=None, alter_partition=None)
        clock = Seconds()
        quota = manager.leader_quota = ReplicationQuota(clock)
        quota.set_rate(50)  # a 50-byte bucket: one batch empties it
        for index in range(3):
            log = Log.open(tmp_path / f"t-{index}", topic="t", partition=index)
            p = Partition("t", index, 1, log, min_insync_replicas=1)
            p.apply_metadata(PartitionInfo(replicas=(1, 2, 3), isr=(1, 3), leader=1, leader_epoch=1,
                                           partition_epoch=1))
            p.append_as_leader(_batch(4), 1)
            manager.partitions[("t", index)] = p
            if index < 2:
                quota.mark(("t", index), True)
        # Broker 2 (out of the ISR) asks for all three: t-0 empties the bucket, t-1 is held back
        # in the same answer, t-2 (not throttled) comes.
        out = await manager.fetch(_body(2, 0, 0, {0: 0, 1: 0, 2: 0}))
        answered = _answered(out)
        assert [bool(answered[i]["records"]) for i in range(3)] == [True, False, True]
        session_id = out["session_id"]
        # Broker 3 is in the ISR: never held back, though its bytes count.
        assert _answered(await manager.fetch(_body(3, 0, -1, {1: 0})))[1]["records"]
        # The follower names t-0 and t-2 at their log ends, not t-1 (its entry did not change).
        out = await manager.fetch(_body(2, session_id, 1, {0: 4, 2: 4}))
        assert not any(a["records"] for a in _answered(out).values())
        clock.now += 60
        out = await manager.fetch(_body(2, session_id, 2))  # names nothing: t-1 is read all the same
        assert list(_answered(out)) == [1] and _answered(out)[1]["records"]
        assert quota.held_back_total == 2
        manager.fetch_sessions.close()
        _close(manager)
    asyncio.run(main())


# -- raftka reassign --throttle ---------------------------------------------------------------------

def test_throttle_lists_the_current_replicas_as_leaders_and_the_gained_ones_as_followers():
    from raftka.cli.commands.reassign import throttles
    from raftka.client import TopicPartition as TP
    current = {TP("a", 0): [1, 2], TP("a", 1): [2, 3], TP("a", 2): [1, 2], TP("b", 0): [3]}
    plan = {TP("a", 0): [1, 4], TP("a", 1): [3, 2], TP("a", 2): [1], TP("b", 0): [4, 5], TP("gone", 0): [1]}
    topics, brokers = throttles(current, plan)  # a reorder, a removal and an unknown partition copy nothing
    assert topics == {"a": {LEADER_REPLICAS: "0:1,0:2", "follower.replication.throttled.replicas": "0:4"},
                      "b": {LEADER_REPLICAS: "0:3", "follower.replication.throttled.replicas": "0:4,0:5"}}
    assert brokers == [1, 2, 3, 4, 5]


def test_throttle_goes_with_execute_and_preserve_throttles_with_verify(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}')
    for flags, message in ((["--verify", "--throttle", "1000"], "--throttle is used with --execute only"),
                           (["--execute", "--throttle", "-5"], "--throttle: expected bytes per second (>= 0)"),
                           (["--execute", "--preserve-throttles"], "--preserve-throttles is used with --verify only")):
        run = _raftka("reassign", "--bootstrap-server", "127.0.0.1:1", "--reassignment-json-file", str(plan), *flags)
        assert run.returncode == 1 and message in run.stderr, (flags, run.stderr)


# -- a real cluster --------------------------------------------------------------------------------

RATE = 200_000  # bytes per second, as the test asks
FETCH_MAX_BYTES = 65_536  # replica.fetch.max.bytes: the most one throttled read can go past the bucket
RECORD_BYTES = 10_000
RECORDS = 250  # 2.5 MB
WAIT_S = 60.0
CONFIGS = {**FAST_CLUSTER_CONFIGS, "replica.fetch.max.bytes": FETCH_MAX_BYTES}


def _raftka(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftka", *argv], capture_output=True, text=True, timeout=90)


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 3 brokers, stopped by PID at the end of the module."""
    return module_cluster_factory("throttle", controllers=1, brokers=3, configs=CONFIGS)


def test_a_throttled_move_takes_what_the_rate_allows_while_other_topics_keep_replicating(cluster, tmp_path):
    from raftka.client import AdminClient, ConfigResource, NewTopic, Producer
    servers = cluster.bootstrap_servers
    with AdminClient(bootstrap_servers=servers) as admin:
        admin.create_topics([NewTopic("slow", 1, 1), NewTopic("busy", 3, 3)])
        [slow] = wait_for_topic(admin, "slow", 1)
        wait_for_topic(admin, "busy", 3)
        source = slow["replicas"][0]
        target = next(b for b in cluster.broker_ids if b != source)
        with Producer(bootstrap_servers=servers, acks=1, enable_idempotence=False) as producer:
            for _ in range(RECORDS):
                producer.send("slow", os.urandom(RECORD_BYTES))
            producer.flush()
        size = RECORDS * RECORD_BYTES
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "slow", "partition": 0,
                                                                  "replicas": [target]}]}))
        started = time.monotonic()
        run = _raftka("reassign", "--bootstrap-server", servers, "--execute", "--reassignment-json-file", str(plan),
                      "--throttle", str(RATE))
        assert run.returncode == 0, run.stderr
        assert ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                "throttle is removed.\nThe inter-broker throttle limit was set to 200000 B/s\n"
                "Successfully started partition reassignments for slow-0\n") in run.stdout
        topic = admin.describe_configs(["slow"])["slow"]
        assert (topic["leader.replication.throttled.replicas"].value,
                topic["follower.replication.throttled.replicas"].value) == (f"0:{source}", f"0:{target}")
        for broker in (source, target):
            configs = admin.describe_configs([ConfigResource("broker", str(broker))])[str(broker)]
            assert configs["leader.replication.throttled.rate"].value == str(RATE)
            assert configs["follower.replication.throttled.rate"].value == str(RATE)

        # Meanwhile an unthrottled, replicated topic: acks=all answers quickly and its ISR stays
        # full (a follower held back with the throttled partition would leave it in 2 s).
        stalls, isr_short = [], 0
        with Producer(bootstrap_servers=servers, acks="all") as producer:
            for i in range(20):
                sent = time.monotonic()
                producer.send("busy", b"v%d" % i, partition=i % 3).get(timeout=10)
                stalls.append(time.monotonic() - sent)
                isr_short += sum(len(p["isr"]) < 3 for p in admin.describe_topics(["busy"])[0]["partitions"])
                time.sleep(0.25)
        assert admin.list_partition_reassignments(), "the move ended before the unthrottled topic was checked"
        assert max(stalls) < 2.0 and isr_short == 0, (stalls, isr_short)
        early = _raftka("reassign", "--bootstrap-server", servers, "--verify", "--reassignment-json-file", str(plan))
        assert early.returncode == 1 and "is still in progress" in early.stdout and "Clearing" not in early.stdout

        deadline = started + WAIT_S
        while admin.list_partition_reassignments() and time.monotonic() < deadline:
            time.sleep(0.2)
        took = time.monotonic() - started
        assert not admin.list_partition_reassignments(), f"not moved in {WAIT_S} s"
        # broker/quota.py: the bytes stay below rate x time + the bucket + one read.
        least = (size - RATE * BURST_S - FETCH_MAX_BYTES) / RATE
        print(f"\n{size:,} bytes moved at --throttle {RATE:,} in {took:.1f} s (at least {least:.1f} s allowed; "
              f"unthrottled acks=all meanwhile: longest {max(stalls) * 1000:.0f} ms)")
        assert took >= least, took
        assert took < 3 * size / RATE, "the throttle stalled the move"
        # /metrics: the source counted what it sent of the throttled replica, the target what it
        # fetched, and both held the partition back at times.
        assert metric_total(cluster, [source], "raftka_broker_leader_replication_throttled_bytes_total") >= 0.9 * size
        assert metric_total(cluster, [target], "raftka_broker_follower_replication_throttled_bytes_total") >= 0.9 * size
        assert metric_total(cluster, [source, target], "raftka_broker_leader_replication_held_back_total") \
            + metric_total(cluster, [source, target], "raftka_broker_follower_replication_held_back_total") > 0

        done = _raftka("reassign", "--bootstrap-server", servers, "--verify", "--reassignment-json-file", str(plan))
        assert done.returncode == 0, done.stdout + done.stderr
        brokers = ",".join(map(str, sorted(cluster.broker_ids)))
        assert (f"Reassignment of partition slow-0 is completed.\n\nClearing broker-level throttles on brokers "
                f"{brokers}\nClearing topic-level throttles on topic slow\n") in done.stdout
        topic = admin.describe_configs(["slow"])["slow"]
        assert topic["leader.replication.throttled.replicas"].source == "DEFAULT_CONFIG"
        assert topic["follower.replication.throttled.replicas"].value == ""
        for broker in cluster.broker_ids:
            configs = admin.describe_configs([ConfigResource("broker", str(broker))])[str(broker)]
            assert configs["leader.replication.throttled.rate"].source == "DEFAULT_CONFIG"
            assert configs["follower.replication.throttled.rate"].source == "DEFAULT_CONFIG"
