"""Consumer groups across kill -9 (real processes).

1. A group member (its own process) is killed with kill -9 mid-stream: after its session
   timeout the others take over its partitions from its last committed offsets. Every record
   is read at least once (no gap), and the records read twice are at most those the killed
   member had read but not committed.
2. The coordinator broker is killed: the committed offsets are read back from the new leader of
   the group's __consumer_offsets partition, the member carries on in the same generation, and
   its next commits succeed; when the broker returns and leads again, it serves them too.
"""
from __future__ import annotations

import asyncio
import collections
import json
import random
import time
from pathlib import Path

import pytest

from raftka.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from raftka.client.aio.cluster import Cluster as ClientCluster
from raftka.client.aio.group import find_coordinator
from raftka.cluster import Cluster, Process, project_env, python_argv, wait_until

pytestmark = pytest.mark.timeout(240)

FAST = {
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 250,
    "replica.lag.time.max.ms": 2000,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.num.partitions": 6,
    "group.initial.rebalance.delay.ms": 300,
    "group.min.session.timeout.ms": 500,
}
SESSION_MS = 3000
PROC = "tests/procs/group_consumer.py"


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap, linger_ms=2, delivery_timeout_ms=60_000,
                  request_timeout_ms=5000) as producer:
        for i in range(start, start + count):
            producer.send(topic, b"%d" % i, key=b"%d" % i)
        assert producer.flush(timeout=60) == []


def events(process: Process) -> list[dict]:
    return [json.loads(line) for line in process.lines if line.startswith("{")]


def test_a_member_killed_with_kill_9_hands_its_partitions_over_after_its_session_timeout_with_no_gap(tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    total = 4000
    with Cluster.start(tmp_path / "c", controllers=1, brokers=3, configs=FAST) as cluster:
        with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topics([NewTopic("work", 6, 3)])
        produce(cluster.bootstrap_servers, "work", 0, total)
        root = str(Path(__file__).resolve().parent.parent)
        members = {}
        try:
            for name in ("a", "b", "c"):
                members[name] = Process(name, python_argv(f"{root}/{PROC}", cluster.bootstrap_servers, "workers", "work",
                                                          name, str(SESSION_MS), "300", "60"), env=project_env())
            wait_until(lambda: all(any("committed" in e for e in events(p)) for p in members.values()), 60,
                       what=f"every member committed once (seed {seed})")
            time.sleep(rng.random())
            victim = rng.choice(sorted(members))
            owned = {tuple(tp)[1] for tp in [e for e in events(members[victim]) if "assigned" in e][-1]["assigned"]}
            survivors = [p for n, p in members.items() if n != victim]
            before = _read_from(survivors, owned)
            members[victim].kill()
            killed_at = time.monotonic()
            wait_until(lambda: _read_from(survivors, owned) > before, SESSION_MS / 1000 + 30,
                       what=f"takeover of partitions {sorted(owned)} (seed {seed})")
            takeover_s = time.monotonic() - killed_at
            wait_until(lambda: len(_values(members.values())) >= total, 90, what=f"every record read (seed {seed})")
        finally:
            for p in members.values():
                p.stop()
        reads = [v for p in members.values() for e in events(p) if "records" in e for (_p, _o, v) in e["records"]]
        counts = collections.Counter(int(v) for v in reads)
        assert set(counts) == set(range(total)), f"seed {seed}: gap or stray values"
        duplicates = sum(n - 1 for n in counts.values())
        # What the victim read after its last acknowledged commit may be read again, nothing more.
        victim_events = events(members[victim])
        last_commit = max((i for i, e in enumerate(victim_events) if "committed" in e), default=-1)
        uncommitted = sum(len(e["records"]) for e in victim_events[last_commit + 1:] if "records" in e)
        failed = sum(1 for p in members.values() for e in events(p) if "commit_failed" in e)
        print(f"seed {seed}: victim {victim}, takeover {takeover_s:.2f} s, {duplicates} duplicates, "
              f"{uncommitted} uncommitted at the kill, {failed} failed commits")
        assert duplicates <= uncommitted, f"seed {seed}"
        assert takeover_s >= SESSION_MS / 1000 * 0.5, f"seed {seed}: taken over before the session could expire"


def _read_from(processes: list[Process], partitions: set[int]) -> int:
    return sum(1 for p in processes for e in events(p) if "records" in e for r in e["records"] if r[0] in partitions)


def _values(processes) -> set[int]:
    return {int(v) for p in processes for e in events(p) if "records" in e for (_p, _o, v) in e["records"]}


def coordinator_of(bootstrap: str, group: str) -> int:
    async def main() -> int:
        client = ClientCluster(bootstrap, request_timeout_ms=10_000)
        try:
            return (await find_coordinator(client, group, 10_000))[0]
        finally:
            await client.close()
    return asyncio.run(main())


def test_committed_offsets_survive_a_coordinator_kill_9_and_commits_continue(tmp_path):
    with Cluster.start(tmp_path / "c", controllers=1, brokers=3, configs=FAST) as cluster:
        boot = cluster.bootstrap_servers
        with AdminClient(bootstrap_servers=boot, request_timeout_ms=20_000) as admin:
            admin.create_topics([NewTopic("ledger", 3, 3)])
            produce(boot, "ledger", 0, 300)
            consumer = Consumer("ledger", bootstrap_servers=boot, group_id="books", auto_offset_reset="earliest",
                                session_timeout_ms=6000, heartbeat_interval_ms=300, request_timeout_ms=5000,
                                enable_auto_commit=False)
            try:
                got: list[bytes] = []
                deadline = time.monotonic() + 60
                while len(got) < 300 and time.monotonic() < deadline:
                    got += [r.value for rs in consumer.poll(timeout_ms=200).values() for r in rs]
                assert len(got) == 300
                consumer.commit()
                before = admin.list_consumer_group_offsets("books")
                assert sum(o.offset for o in before.values()) == 300
                generation = consumer.group_metadata()["generation_id"]
                coordinator = coordinator_of(boot, "books")
                cluster.kill(coordinator)
                killed_at = time.monotonic()
                after = wait_until(lambda: admin.list_consumer_group_offsets("books"), 30,
                                   what="offsets from the new coordinator")
                assert after == before
                moved_s = time.monotonic() - killed_at
                assert coordinator_of(boot, "books") != coordinator
                produce(boot, "ledger", 300, 300)
                more: list[bytes] = []
                deadline = time.monotonic() + 60
                while len(more) < 300 and time.monotonic() < deadline:
                    more += [r.value for rs in consumer.poll(timeout_ms=200).values() for r in rs]
                assert sorted(int(v) for v in more) == list(range(300, 600))
                consumer.commit()  # commits go to the new coordinator
                final = admin.list_consumer_group_offsets("books")
                assert sum(o.offset for o in final.values()) == 600
                # the group was loaded from the log: the member kept its generation, no rebalance
                assert consumer.group_metadata()["generation_id"] == generation
                assert consumer.committed(TopicPartition("ledger", 0)) == final[TopicPartition("ledger", 0)].offset
                print(f"coordinator {coordinator} killed; offsets readable again after {moved_s:.2f} s")
                # It comes back, catches up, and leadership returns to it (preferred leader): it
                # loads the group again, from a log that now holds the commits made meanwhile.
                cluster.restart(coordinator)
                wait_until(lambda: coordinator_of(boot, "books") == coordinator, 60,
                           what="the preferred leader coordinates again")
                assert wait_until(lambda: admin.list_consumer_group_offsets("books"), 30) == final
                produce(boot, "ledger", 600, 30)
                back: list[bytes] = []
                deadline = time.monotonic() + 60
                while len(back) < 30 and time.monotonic() < deadline:
                    back += [r.value for rs in consumer.poll(timeout_ms=200).values() for r in rs]
                consumer.commit()
                assert sum(o.offset for o in admin.list_consumer_group_offsets("books").values()) == 630
            finally:
                consumer.close()
