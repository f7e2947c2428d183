"""Consumer groups against real processes (1 controller + 3 brokers, __consumer_offsets with
replication 3): partitions shared with exactly one owner, stale generations fenced, pattern
subscriptions growing, members coming and going under load without losing a record, static
members restarting without a rebalance, and lag visible from the admin API, the CLI and /metrics.
"""
from __future__ import annotations

import asyncio
import collections
import random
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import pytest

from raftka.client import (AdminClient, CommitFailedError, Consumer, ConsumerRebalanceListener, NewTopic,
                    OffsetAndMetadata, Producer, TopicPartition)
from raftka.client.aio.cluster import Cluster as ClientCluster
from raftka.client.aio.group import find_coordinator
from raftka.common import errors
from raftka.common.api import ApiKey
from helpers import wait_for_topic
from raftka.cluster import Cluster, project_env, wait_until

pytestmark = pytest.mark.timeout(240)

FAST = {
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 250,
    "replica.lag.time.max.ms": 2000,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.num.partitions": 6,
    "group.initial.rebalance.delay.ms": 100,
    "group.min.session.timeout.ms": 500,
}
GROUP_CONSUMER = dict(auto_offset_reset="earliest", session_timeout_ms=3000, heartbeat_interval_ms=300,
                      request_timeout_ms=10_000)


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 3 brokers (real processes), stopped by PID at the end of the module."""
    return module_cluster_factory("groups", controllers=1, brokers=3, configs=FAST)


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster, request_timeout_ms=15_000)


def new_topic(admin: AdminClient, partitions: int, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 3)])
    wait_for_topic(admin, name, partitions)
    return name


def produce(cluster: Cluster, topic: str, count: int, start: int = 0) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=2) as producer:
        for i in range(start, start + count):
            producer.send(topic, b"%d" % i, key=b"%d" % i)
        assert producer.flush(timeout=30) == []


def group_request(cluster: Cluster, group: str, api_key: int, body: dict) -> dict:
    """One raw request to the group's coordinator (found with FindCoordinator)."""
    async def main() -> dict:
        client = ClientCluster(cluster.bootstrap_servers, request_timeout_ms=10_000)
        try:
            _node, host, port = await find_coordinator(client, group, 10_000)
            code, answer = await client.request_address((host, port), api_key, body)
            assert code == errors.NONE, errors.name_of(code)
            return answer
        finally:
            await client.close()
    return asyncio.run(main())


def poll_until(consumers: list[Consumer], predicate, timeout_s: float, seen: dict | None = None) -> None:
    """Poll every consumer in turn until ``predicate()``; records go to ``seen[client_id]``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            for records in c.poll(timeout_ms=50).values():
                if seen is not None:
                    seen.setdefault(c.config["client_id"], []).extend(records)
        if predicate():
            return
    raise AssertionError(f"not reached within {timeout_s} s: assignments "
                         f"{[sorted(c.assignment()) for c in consumers]}")


def test_three_consumers_share_a_six_partition_topic_with_exactly_one_owner_per_partition(cluster, admin):
    topic = new_topic(admin, 6)
    produce(cluster, topic, 600)
    consumers = [Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="share",
                          client_id=f"share-{i}", **GROUP_CONSUMER) for i in range(3)]
    seen: dict[str, list] = {}
    try:
        poll_until(consumers, lambda: all(len(c.assignment()) == 2 for c in consumers)
                   and sum(len(v) for v in seen.values()) >= 600, 60, seen)
        owners = [c.assignment() for c in consumers]
        assert set.union(*owners) == {TopicPartition(topic, p) for p in range(6)}
        assert sum(len(o) for o in owners) == 6  # disjoint: each partition has exactly one owner
        values = [r.value for records in seen.values() for r in records]
        # partitions moved while the group formed, but each owner committed before giving one
        # up (auto-commit on revoke), so nothing was read twice
        assert sorted(values) == sorted(b"%d" % i for i in range(600))
        info = admin.describe_consumer_groups(["share"])[0]
        assert info.state == "Stable" and info.protocol == "cooperative-sticky" and len(info.members) == 3
        assigned = [tp for m in info.members for tp in m.member_assignment.partitions]
        assert sorted(assigned) == sorted(TopicPartition(topic, p) for p in range(6))
        assert {m.client_id for m in info.members} == {"share-0", "share-1", "share-2"}
    finally:
        for c in consumers:
            c.close()  # auto-commit on close
    committed = admin.list_consumer_group_offsets("share")
    assert sum(o.offset for o in committed.values()) == 600
    assert admin.describe_consumer_groups(["share"])[0].state == "Empty"


def test_a_commit_from_a_stale_generation_or_an_unknown_member_is_refused(cluster, admin):
    topic = new_topic(admin, 2)
    first = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="stale", client_id="stale-1",
                     **GROUP_CONSUMER)
    second = None
    try:
        poll_until([first], lambda: len(first.assignment()) == 2, 30)
        old = first.group_metadata()
        second = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="stale", client_id="stale-2",
                          **GROUP_CONSUMER)
        poll_until([first, second], lambda: len(first.assignment()) == 1 and len(second.assignment()) == 1, 30)
        new = first.group_metadata()
        assert new["generation_id"] > old["generation_id"] and new["member_id"] == old["member_id"]

        def commit(generation: int, member: str) -> int:
            answer = group_request(cluster, "stale", ApiKey.OFFSET_COMMIT, {
                "group_id": "stale", "generation_id_or_member_epoch": generation, "member_id": member,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
            return answer["topics"][0]["partitions"][0]["error_code"]
        assert commit(old["generation_id"], old["member_id"]) == errors.ILLEGAL_GENERATION
        assert commit(new["generation_id"], "not-a-member") == errors.UNKNOWN_MEMBER_ID
        assert commit(-1, "") == errors.UNKNOWN_MEMBER_ID  # tools may not commit for an active group
        assert commit(new["generation_id"], new["member_id"]) == errors.NONE
        assert admin.list_consumer_group_offsets("stale")[TopicPartition(topic, 0)].offset == 1
    finally:
        first.close(autocommit=False)
        if second is not None:
            second.close(autocommit=False)


def test_a_member_cannot_commit_a_partition_a_rebalance_gave_to_another(cluster, admin):
    # The chaos workload found it: offsets read before a cooperative rebalance, committed after
    # it in the new generation, moved the new owner's committed offset back (1650 -> 460).
    topic = new_topic(admin, 2)
    produce(cluster, topic, 40)
    first = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="moved", client_id="moved-1",
                     enable_auto_commit=False, **GROUP_CONSUMER)
    second = None
    try:
        read: dict = {}
        poll_until([first], lambda: len(first.assignment()) == 2 and len(read.get("moved-1", ())) == 40, 30, read)
        second = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="moved", client_id="moved-2",
                          enable_auto_commit=False, **GROUP_CONSUMER)
        poll_until([first, second], lambda: len(first.assignment()) == 1 and len(second.assignment()) == 1, 30)
        (gone,) = second.assignment()
        (kept,) = first.assignment()
        second.commit({gone: OffsetAndMetadata(20)})
        with pytest.raises(CommitFailedError, match="not owned by this member"):
            first.commit({gone: OffsetAndMetadata(3), kept: OffsetAndMetadata(3)})
        assert first.committed(gone) == 20 and first.committed(kept) is None  # all or nothing
        first.commit({kept: OffsetAndMetadata(3)})
        assert first.committed(kept) == 3
    finally:
        first.close(autocommit=False)
        if second is not None:
            second.close(autocommit=False)


def test_a_consumer_that_stops_polling_is_taken_out_and_its_late_commit_fails(cluster, admin):
    topic = new_topic(admin, 2)
    produce(cluster, topic, 20)
    slow = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="slow", client_id="slow",
                    max_poll_interval_ms=1500, enable_auto_commit=False, **GROUP_CONSUMER)
    try:
        poll_until([slow], lambda: len(slow.assignment()) == 2, 30)
        time.sleep(2.5)  # "processing" for longer than max_poll_interval_ms: the member leaves
        with pytest.raises(CommitFailedError):
            slow.commit({TopicPartition(topic, 0): OffsetAndMetadata(5)})
        poll_until([slow], lambda: len(slow.assignment()) == 2 and slow.group_metadata()["generation_id"] > 0, 30)
        slow.commit({TopicPartition(topic, 0): OffsetAndMetadata(5)})  # back in: commits work again
        assert slow.committed(TopicPartition(topic, 0)) == 5
    finally:
        slow.close()


def test_pattern_subscription_picks_up_a_topic_created_later(cluster, admin):
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    first_topic = f"{prefix}-a"
    admin.create_topics([NewTopic(first_topic, 2, 3)])
    produce(cluster, first_topic, 10)
    consumers = [Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id=prefix, client_id=f"{prefix}-{i}",
                          **GROUP_CONSUMER) for i in range(2)]
    for c in consumers:
        c.subscribe(pattern=f"{prefix}-.*")
    seen: dict[str, list] = {}
    try:
        poll_until(consumers, lambda: sum(len(v) for v in seen.values()) == 10, 30, seen)
        later = f"{prefix}-b"
        admin.create_topics([NewTopic(later, 2, 3)])
        produce(cluster, later, 10, start=100)
        poll_until(consumers, lambda: sum(len(v) for v in seen.values()) == 20, 45, seen)
        assert {r.topic for v in seen.values() for r in v} == {first_topic, later}
        everything = sorted(TopicPartition(t, p) for t in (first_topic, later) for p in range(2))
        poll_until(consumers, lambda: sorted(tp for c in consumers for tp in c.assignment()) == everything, 30)
    finally:
        for c in consumers:
            c.close()


def test_consumers_joining_and_leaving_under_load_read_every_record_at_least_once(cluster, admin):
    """A producer writes all along while members join and leave. Each member commits after
    processing each batch; afterwards every acknowledged record was read (no gap), and a record
    was read twice only if it was in a batch whose commit failed or that a member was processing
    when it left (duplicates are bounded by what was not committed)."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    topic = new_topic(admin, 6)
    acked: list[int] = []
    stop_producing = threading.Event()

    def producer_loop() -> None:
        with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=2) as producer:
            i = 0
            futures = []
            while not stop_producing.is_set():
                futures.append((i, producer.send(topic, b"%d" % i, key=b"%d" % i)))
                i += 1
                if i % 50 == 0:
                    time.sleep(0.02)
            producer.flush(timeout=30)
            acked.extend(n for n, f in futures if f.succeeded())

    reads: list[tuple[str, int]] = []
    uncommitted = collections.Counter()  # per member: records in batches whose commit failed
    lock = threading.Lock()

    def member(name: str, stop: threading.Event) -> None:
        consumer = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="load", client_id=name,
                            enable_auto_commit=False, max_poll_records=100, **GROUP_CONSUMER)
        try:
            while not stop.is_set():
                batch = consumer.poll(timeout_ms=100)
                values = [int(r.value) for rs in batch.values() for r in rs]
                if not values:
                    continue
                with lock:
                    reads.extend((name, v) for v in values)
                try:
                    consumer.commit()
                except CommitFailedError:
                    with lock:
                        uncommitted[name] += len(values)
        finally:
            consumer.close(autocommit=False)

    producer_thread = threading.Thread(target=producer_loop, daemon=True)
    producer_thread.start()
    members: dict[str, tuple[threading.Thread, threading.Event]] = {}

    def start(name: str) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=member, args=(name, stop), daemon=True)
        thread.start()
        members[name] = (thread, stop)

    def leave(name: str) -> None:
        thread, stop = members.pop(name)
        stop.set()
        thread.join(30)

    try:
        start("m1")
        for step, action in enumerate(["join", "join", "leave", "join", "leave"]):
            time.sleep(0.8 + rng.random())
            if action == "join":
                start(f"m{step + 2}")
            else:
                leave(rng.choice(sorted(members)))
        time.sleep(1.0)
        stop_producing.set()
        producer_thread.join(60)
        assert acked, f"nothing was acknowledged (seed {seed})"
        wait_until(lambda: set(acked) <= {v for _, v in list(reads)}, 60, what=f"every acked record read (seed {seed})")
    finally:
        stop_producing.set()
        for name in list(members):
            leave(name)
    counts = collections.Counter(v for _, v in reads)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    print(f"seed {seed}: {len(acked)} acked, {len(reads)} read, {duplicates} duplicates, "
          f"{sum(uncommitted.values())} in batches whose commit failed")
    assert duplicates <= sum(uncommitted.values()), f"seed {seed}: {duplicates} duplicates"
    assert not set(counts) - set(range(max(acked) + 1)), f"seed {seed}: read something never sent"


def test_a_static_member_that_restarts_within_its_session_timeout_causes_no_rebalance(cluster, admin):
    topic = new_topic(admin, 4)
    config = dict(GROUP_CONSUMER, session_timeout_ms=8000)
    a = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="static", group_instance_id="host-a",
                 client_id="static-a", **config)
    b = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="static", group_instance_id="host-b",
                 client_id="static-b", **config)
    restarted = None
    try:
        poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 30)
        before_a, before_b = a.assignment(), b.assignment()
        generation = b.group_metadata()["generation_id"]
        rebalances = admin.describe_consumer_groups(["static"])[0].generation_id
        a.close()  # a static member does not leave the group on close
        restarted = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="static",
                             group_instance_id="host-a", client_id="static-a2", **config)
        poll_until([restarted, b], lambda: restarted.assignment() == before_a, 20)
        for _ in range(10):  # b keeps its partitions and its generation: nobody rebalanced
            b.poll(timeout_ms=50)
        assert b.assignment() == before_b and b.group_metadata()["generation_id"] == generation
        assert restarted.group_metadata()["generation_id"] == generation
        assert admin.describe_consumer_groups(["static"])[0].generation_id == rebalances
    finally:
        for c in (a, b, restarted):
            if c is not None:
                c.close()


def test_lag_shows_in_the_admin_api_the_cli_and_metrics_and_offsets_reset_only_when_inactive(cluster, admin):
    topic = new_topic(admin, 2)
    produce(cluster, topic, 100)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    ends = admin.list_offsets({tp: "latest" for tp in tps})
    assert sum(ends.values()) == 100
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="lagged", enable_auto_commit=False,
                  **GROUP_CONSUMER) as c:
        c.assign(tps)  # manual assignment with a group: commits without joining
        c.commit({tps[0]: OffsetAndMetadata(10, "first ten"), tps[1]: 20})
        assert c.committed(tps[0], metadata=True) == OffsetAndMetadata(10, "first ten", -1)
    with Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="lagged", enable_auto_commit=False,
                  **GROUP_CONSUMER) as c:
        c.assign(tps)
        assert c.position(tps[0]) == 10 and c.position(tps[1]) == 20  # from the committed offsets
    assert ("lagged", "consumer") in admin.list_consumer_groups() or ("lagged", "") in admin.list_consumer_groups()
    rows = {(r["topic"], r["partition"]): r for r in admin.describe_consumer_group_lag("lagged")}
    assert rows[(topic, 0)]["lag"] == ends[tps[0]] - 10 and rows[(topic, 1)]["lag"] == ends[tps[1]] - 20

    cli = [sys.executable, "-m", "raftka", "groups"]
    boot = ["--bootstrap-server", cluster.bootstrap_servers]
    out = subprocess.run(cli + ["describe", "lagged"] + boot, capture_output=True, text=True, env=project_env(),
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines() if line.startswith("lagged")]
    assert sorted((row[1], int(row[2]), int(row[3]), int(row[4]), int(row[5])) for row in lines) == \
        [(topic, 0, 10, ends[tps[0]], ends[tps[0]] - 10), (topic, 1, 20, ends[tps[1]], ends[tps[1]] - 20)]
    listed = subprocess.run(cli + ["list"] + boot, capture_output=True, text=True, env=project_env(), timeout=60)
    assert "lagged" in listed.stdout.split()

    def metric_lag() -> dict:
        found = {}
        for broker in cluster.broker_ids:
            text = urllib.request.urlopen(f"http://{cluster.http_address(broker)}/metrics", timeout=5).read().decode()
            for line in text.splitlines():
                if line.startswith("raftka_group_lag{") and 'group="lagged"' in line:
                    found[line.split('partition="')[1].split('"')[0]] = int(line.rsplit(" ", 1)[1])
        return found
    assert wait_until(lambda: metric_lag() == {"0": ends[tps[0]] - 10, "1": ends[tps[1]] - 20}, 20,
                      what="group lag in /metrics")

    dry = subprocess.run(cli + ["reset-offsets", "--group", "lagged", "--topic", topic, "--to-earliest"] + boot,
                         capture_output=True, text=True, env=project_env(), timeout=60)
    assert dry.returncode == 0 and "dry run" in dry.stdout
    assert admin.list_consumer_group_offsets("lagged")[tps[0]].offset == 10  # unchanged
    done = subprocess.run(cli + ["reset-offsets", "--group", "lagged", "--topic", f"{topic}:1", "--to-offset", "7",
                                 "--execute"] + boot, capture_output=True, text=True, env=project_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    offsets = admin.list_consumer_group_offsets("lagged")
    assert offsets[tps[0]].offset == 10 and offsets[tps[1]].offset == 7

    with Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id="lagged", **GROUP_CONSUMER) as active:
        poll_until([active], lambda: len(active.assignment()) == 2, 30)
        refused = subprocess.run(cli + ["reset-offsets", "--group", "lagged", "--all-topics", "--to-latest",
                                        "--execute"] + boot, capture_output=True, text=True, env=project_env(),
                                 timeout=60)
        assert refused.returncode == 1 and "inactive" in refused.stderr and "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        with pytest.raises(errors.for_code(errors.NON_EMPTY_GROUP)):
            admin.alter_consumer_group_offsets("lagged", {tps[0]: 0})
        described = subprocess.run(cli + ["describe", "lagged", "--members"] + boot, capture_output=True, text=True,
                                   env=project_env(), timeout=60)
        assert described.returncode == 0 and described.stdout.count("lagged") == 1
    assert admin.delete_consumer_groups(["lagged"]) == [("lagged", None)]
    assert admin.list_consumer_group_offsets("lagged") == {}


class Recorder(ConsumerRebalanceListener):
    """Records listener calls, and commits from inside one (a blocking call on the app thread)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, set]] = []
        self.consumer: Consumer | None = None
        self.thread: int | None = None

    def on_partitions_revoked(self, revoked):
        self.calls.append(("revoked", set(revoked)))
        self.thread = threading.get_ident()
        if self.consumer is not None and revoked:
            self.consumer.commit()

    def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", set(assigned)))


def test_rebalance_listeners_run_on_the_polling_thread_and_only_moved_partitions_are_revoked(cluster, admin):
    topic = new_topic(admin, 4)
    first_listener, second_listener = Recorder(), Recorder()
    first = Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="listen", client_id="listen-1",
                     **GROUP_CONSUMER)
    first_listener.consumer = first
    first.subscribe([topic], listener=first_listener)
    second = None
    try:
        poll_until([first], lambda: len(first.assignment()) == 4, 30)
        assert first_listener.calls == [("assigned", {TopicPartition(topic, p) for p in range(4)})]
        second = Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="listen", client_id="listen-2",
                          **GROUP_CONSUMER)
        second.subscribe([topic], listener=second_listener)
        poll_until([first, second], lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2, 30)
        revoked = [c for c in first_listener.calls if c[0] == "revoked"]
        assert len(revoked) == 1 and revoked[0][1] == second.assignment()  # cooperative: only what moved
        assert first_listener.thread == threading.get_ident()
        assert second_listener.calls[-1] == ("assigned", second.assignment())
    finally:
        first.close()
        if second is not None:
            second.close()


def test_an_eager_assignor_revokes_everything_before_a_rebalance_and_nothing_is_read_twice(cluster, admin):
    topic = new_topic(admin, 4)
    produce(cluster, topic, 400)
    listeners = [Recorder(), Recorder()]
    consumers = [Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="eager", client_id=f"eager-{i}",
                          partition_assignment_strategy="range", max_poll_records=20, **GROUP_CONSUMER)
                 for i in range(2)]
    seen: dict[str, list] = {}
    try:
        consumers[0].subscribe([topic], listener=listeners[0])
        poll_until(consumers[:1], lambda: sum(len(v) for v in seen.values()) >= 100, 30, seen)
        consumers[1].subscribe([topic], listener=listeners[1])
        poll_until(consumers, lambda: all(len(c.assignment()) == 2 for c in consumers)
                   and sum(len(v) for v in seen.values()) >= 400, 30, seen)
        everything = {TopicPartition(topic, p) for p in range(4)}
        assert listeners[0].calls[:2] == [("assigned", everything), ("revoked", everything)]  # all of it
        assert listeners[0].calls[2] == ("assigned", consumers[0].assignment())
        assert consumers[0].assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}  # range
        values = sorted(r.value for records in seen.values() for r in records)
        assert values == sorted(b"%d" % i for i in range(400))  # committed on revoke: no duplicates
        assert admin.describe_consumer_groups(["eager"])[0].protocol == "range"
    finally:
        for c in consumers:
            c.close()


def test_the_cli_answers_a_missing_group_with_one_line_and_exit_1(cluster):
    out = subprocess.run([sys.executable, "-m", "raftka", "groups", "describe", "no-such-group", "--bootstrap-server",
                          cluster.bootstrap_servers], capture_output=True, text=True, env=project_env(), timeout=60)
    assert out.returncode == 1 and out.stderr.strip().splitlines() == ["error: consumer group 'no-such-group' does "
                                                                       "not exist"]


def test_a_listener_may_commit_but_not_poll_or_close(cluster, admin):
    topic = new_topic(admin, 2)
    produce(cluster, topic, 10)
    problems: list[str] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            for call in (lambda: consumer.poll(timeout_ms=10), consumer.close):
                try:
                    call()
                except Exception as error:  # IllegalStateError expected
                    problems.append(type(error).__name__)
            consumer.commit()  # allowed: a plain blocking call from the listener

    consumer = Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="careful", **GROUP_CONSUMER)
    consumer.subscribe([topic], listener=Listener())
    seen: dict[str, list] = {}
    try:
        poll_until([consumer], lambda: sum(len(v) for v in seen.values()) == 10, 30, seen)  # still usable
        assert problems == ["IllegalStateError", "IllegalStateError"]
    finally:
        consumer.close()


def test_a_kafka_framed_held_heartbeat_answers_the_moment_a_rebalance_starts_and_one_without_the_tag_at_once(
        cluster):
    """Heartbeat v4 on Kafka's wire, straight to the coordinator: with Raftka's tagged max_wait_ms
    (10 s) it is held while the group is Stable and answers REBALANCE_IN_PROGRESS as soon as a
    second member joins; without the tag (what Kafka's clients send) it answers at once."""
    from raftka.client.aio.protocol import KAFKA_VERSIONS
    from raftka.common.transport import Connection
    group, wait_ms = f"hb-{uuid.uuid4().hex[:8]}", 10_000

    def join(member_id: str) -> dict:
        return {"group_id": group, "session_timeout_ms": 30_000, "rebalance_timeout_ms": 5_000,
                "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}], "reason": None}

    def heartbeat(generation: int, member_id: str, **tag) -> dict:
        return {"group_id": group, "generation_id": generation, "member_id": member_id,
                "group_instance_id": None, **tag}

    async def main() -> None:
        client = ClientCluster(cluster.bootstrap_servers, request_timeout_ms=10_000)
        try:  # __consumer_offsets may still be being created when this test runs first
            _node, host, port = await find_coordinator(client, group, 30_000)
        finally:
            await client.close()
        # One connection per member and one for the held heartbeat: answers come in request order.
        lanes = [await Connection.open(host, port, kafka_versions=KAFKA_VERSIONS) for _ in range(3)]
        a, b, held_lane = lanes
        try:
            _, first = await a.request(ApiKey.JOIN_GROUP, join(""))
            assert first["error_code"] == errors.MEMBER_ID_REQUIRED
            member = first["member_id"]
            _, joined = await a.request(ApiKey.JOIN_GROUP, join(member))
            generation = joined["generation_id"]
            _, synced = await a.request(ApiKey.SYNC_GROUP, {
                "group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None,
                "protocol_type": "consumer", "protocol_name": "range",
                "assignments": [{"member_id": member, "assignment": b""}]})
            assert joined["error_code"] == synced["error_code"] == errors.NONE

            started = time.monotonic()
            _, at_once = await a.request(ApiKey.HEARTBEAT, heartbeat(generation, member))
            assert at_once["error_code"] == errors.NONE and time.monotonic() - started < 2.0

            held = asyncio.ensure_future(held_lane.request(
                ApiKey.HEARTBEAT, heartbeat(generation, member, max_wait_ms=wait_ms), timeout_ms=2 * wait_ms))
            await asyncio.sleep(0.5)
            assert not held.done()  # Stable: the coordinator holds it
            _, second = await b.request(ApiKey.JOIN_GROUP, join(""))
            rebalance_started = time.monotonic()
            second_join = asyncio.ensure_future(b.request(ApiKey.JOIN_GROUP, join(second["member_id"])))
            _, answer = await asyncio.wait_for(held, wait_ms / 1000)
            took = time.monotonic() - rebalance_started
            assert answer["error_code"] == errors.REBALANCE_IN_PROGRESS
            assert took < 2.0, f"the held heartbeat answered {took:.2f} s after the rebalance started"
            await a.request(ApiKey.LEAVE_GROUP, {"group_id": group, "members": [
                {"member_id": member, "group_instance_id": None, "reason": "test done"}]})
            _, rejoined = await asyncio.wait_for(second_join, 10)
            await b.request(ApiKey.LEAVE_GROUP, {"group_id": group, "members": [
                {"member_id": rejoined["member_id"], "group_instance_id": None, "reason": "test done"}]})
        finally:
            for lane in lanes:
                await lane.close()
    asyncio.run(main())
