"""Partition reassignment (issue #23, item 3; KIP-455): `raftka reassign` and the admin client.

- The controller's decisions (reassignment.decide / completions, pure): a start adds the new
  replicas and marks the old ones for removal, leader and ISR unchanged; it finishes only once
  every target replica is in the ISR, then the removed ones leave the ISR and a removed leader
  hands over to the first in-sync target replica; a target already in sync (a reorder) finishes
  at once; a new target restarts from the original replicas; null cancels back to them; bad
  targets, unknown partitions and a cancel with nothing under way are refused with Kafka's
  errors; every change replays cleanly on the image it was decided on, and through a snapshot.
- The operator's test of the issue, on 1 controller + 6 brokers: every partition of a topic is
  put on brokers A (via `--execute`), then moved with a `--generate`d plan to brokers B while an
  idempotent acks=all producer writes and a consumer group reads; `--verify` says when it is done;
  brokers A are then stopped and unregistered. Nothing acknowledged is lost, nothing is doubled,
  order holds per partition, A's replicas are deleted, and the producer's longest stall is printed.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from helpers import FAST_CLUSTER_CONFIGS, wait_for_topic
from raftka.common import errors
from raftka.raft_meta.controller.reassignment import completions, decide
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage, image_from_bytes, image_to_bytes
from raftka.raft_meta.metadata.records import PartitionChangeRecord, RegisterBrokerRecord, TopicRecord, UnfenceBrokerRecord

WAIT_S = 60.0
TOPIC_ID = "0" * 31 + "7"


def _image(replicas: tuple[int, ...] = (1, 2, 3), brokers: tuple[int, ...] = (1, 2, 3, 4, 5, 6)) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for b in brokers:
        delta.replay(RegisterBrokerRecord(b, f"{b:032x}", {"PLAINTEXT": f"h:{b}"}), b)
        delta.replay(UnfenceBrokerRecord(b, b), 10 + b)
    delta.replay(TopicRecord("t", TOPIC_ID, (replicas,), {}), 30)
    return delta.apply()


def _apply(image: MetadataImage, change: PartitionChangeRecord | None) -> MetadataImage:
    assert change is not None
    delta = MetadataDelta(image)
    result = delta.replay(change, image.offset + 1)
    assert "error" not in result, result
    return delta.apply()


def _isr(image: MetadataImage, isr: tuple[int, ...]) -> MetadataImage:
    """The leader's AlterPartition: the ISR becomes ``isr``."""
    p = image.partition("t", 0)
    return _apply(image, PartitionChangeRecord("t", TOPIC_ID, 0, p.partition_epoch, isr=isr))


def test_a_move_adds_first_finishes_only_when_every_target_replica_is_in_sync_and_the_leader_hands_over():
    image = _image()
    code, _, change = decide(image, "t", 0, (4, 5, 6))
    assert code == errors.NONE
    image = _apply(image, change)
    p = image.partition("t", 0)
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1, 2, 3), 0)  # nothing moves before the new ones catch up
    assert image_from_bytes(image_to_bytes(image)).partition("t", 0) == p  # a snapshot keeps it under way
    assert decide(image, "t", 0, (4, 5, 6)) == (errors.NONE, None, None)  # asked again: already on its way
    image = _isr(image, (1, 2, 3, 4, 5))
    assert list(completions(image)) == []  # 6 is not in sync yet
    image = _isr(image, (1, 2, 3, 4, 5, 6))
    [finish] = completions(image)
    image = _apply(image, finish)
    p = image.partition("t", 0)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == ((4, 5, 6), (4, 5, 6), (), ())
    assert p.leader == 4 and p.leader_epoch == 1  # the old leader left: the first in-sync target leads
    assert list(completions(image)) == []


def test_a_reorder_finishes_at_once_keeping_its_leader_and_a_new_target_restarts_from_the_original():
    image = _image()
    code, _, change = decide(image, "t", 0, (3, 1, 2))
    image = _apply(image, change)
    p = image.partition("t", 0)
    assert code == errors.NONE and (p.replicas, p.leader, p.reassigning) == ((3, 1, 2), 1, False)
    image = _apply(image, decide(image, "t", 0, (3, 1, 4))[2])  # 4 new, 2 to go
    image = _apply(image, decide(image, "t", 0, (5, 1, 3))[2])  # changed our mind: from (3, 1, 2) again
    p = image.partition("t", 0)
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((5, 1, 3, 2), (5,), (2,))


def test_a_new_target_drops_an_added_replica_that_already_joined_the_isr():
    image = _apply(_image(), decide(_image(), "t", 0, (1, 2, 4))[2])
    image = _isr(image, (1, 2, 4))  # 4 caught up, 3 not yet removed (1, 2, 3 -> 1, 2, 4 under way)
    image = _apply(image, PartitionChangeRecord("t", TOPIC_ID, 0, image.partition("t", 0).partition_epoch,
                                                isr=(1, 2, 4)))
    code, _, change = decide(image, "t", 0, (3, 1, 2))  # back to the original: 4 goes, though in the ISR
    assert code == errors.NONE
    image = _apply(image, change)
    p = image.partition("t", 0)  # 3 never left: a follower out of the ISR, which catches up as any
    assert (p.replicas, p.isr, p.reassigning, p.leader) == ((3, 1, 2), (1, 2), False, 1)
    image = _apply(image, decide(image, "t", 0, (1, 2, 4))[2])
    image = _isr(image, (1, 2, 4))
    code, _, change = decide(image, "t", 0, (5, 1, 6))  # 4, added and in sync, is dropped for 5 and 6
    image = _apply(image, change)
    p = image.partition("t", 0)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == ((5, 1, 6, 2, 3), (1, 2), (5, 6), (2, 3))


def test_a_cancel_goes_back_to_the_original_replicas_and_bad_requests_get_kafkas_errors():
    image = _image()
    assert decide(image, "t", 0, None)[0] == errors.NO_REASSIGNMENT_IN_PROGRESS
    image = _apply(image, decide(image, "t", 0, (4, 5, 6))[2])
    image = _isr(image, (1, 2, 3, 4))
    image = _apply(image, decide(image, "t", 0, None)[2])
    p = image.partition("t", 0)
    assert (p.replicas, p.isr, p.leader, p.reassigning) == ((1, 2, 3), (1, 2, 3), 1, False)
    for target, code in (((4, 4, 5), errors.INVALID_REPLICA_ASSIGNMENT), ((), errors.INVALID_REPLICA_ASSIGNMENT),
                         ((4, 9), errors.INVALID_REPLICA_ASSIGNMENT)):
        assert decide(image, "t", 0, target)[0] == code, target
    assert decide(image, "t", 5, (4, 5, 6))[0] == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert decide(image, "nope", 0, (4, 5, 6))[0] == errors.UNKNOWN_TOPIC_OR_PARTITION


# -- the operator's test ---------------------------------------------------------------------------

def _raftka(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftka", *argv], capture_output=True, text=True, timeout=90)


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 6 brokers: brokers A (2-4) and B (5-7)."""
    return module_cluster_factory("reassign", controllers=1, brokers=6, configs=FAST_CLUSTER_CONFIGS)


def test_every_partition_moves_to_new_brokers_under_load_and_the_old_ones_retire(cluster, tmp_path):
    from raftka.client import AdminClient, Consumer, NewTopic, Producer
    from raftka.cluster import wait_until
    old, new = cluster.broker_ids[:3], cluster.broker_ids[3:]
    servers = ",".join(cluster.broker_address(b) for b in new)  # the clients never need the old ones
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("moving", 3, 3)])
        wait_for_topic(admin, "moving", 3)
    onto_old = tmp_path / "onto-old.json"
    onto_old.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moving", "partition": p, "replicas": [old[(p + i) % 3] for i in range(3)]} for p in range(3)]}))
    run = _raftka("reassign", "--bootstrap-server", cluster.bootstrap_servers, "--execute",
                  "--reassignment-json-file", str(onto_old))
    assert run.returncode == 0 and "Successfully started partition reassignments for moving-0,moving-1,moving-2" \
        in run.stdout, run.stdout + run.stderr
    wait_until(lambda: _raftka("reassign", "--bootstrap-server", cluster.bootstrap_servers, "--verify",
                               "--reassignment-json-file", str(onto_old)).returncode == 0, WAIT_S,
               what="every partition on brokers A")

    acked: dict[int, list[int]] = {0: [], 1: [], 2: []}
    gaps: list[float] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", enable_idempotence=True,
                          linger_ms=5) as producer:
                i, last = 0, time.monotonic()
                while not stop.is_set():
                    metadata = producer.send("moving", str(i).encode(), partition=i % 3).get(timeout=60)
                    acked[metadata.partition].append(i)
                    now = time.monotonic()
                    gaps.append(now - last)
                    last, i = now, i + 1
        except BaseException as error:  # reported by the test's thread
            failures.append(error)
    writer = threading.Thread(target=produce)
    writer.start()
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
    consumer = Consumer("moving", bootstrap_servers=cluster.bootstrap_servers, group_id="movers",
                        auto_offset_reset="earliest")
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # the group is up and reading before the move
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    seen[r.partition].append(int(r.value))
        topics = tmp_path / "topics.json"
        topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "moving"}]}))
        generated = _raftka("reassign", "--bootstrap-server", cluster.bootstrap_servers, "--generate",
                            "--topics-to-move-json-file", str(topics), "--broker-list", ",".join(map(str, new)))
        assert generated.returncode == 0, generated.stderr
        proposed = json.loads(generated.stdout.split("Proposed partition reassignment configuration")[1])
        assert all(set(p["replicas"]) == set(new) for p in proposed["partitions"]), proposed
        plan = tmp_path / "onto-new.json"
        plan.write_text(json.dumps(proposed))
        moved_at = time.monotonic()
        run = _raftka("reassign", "--bootstrap-server", cluster.bootstrap_servers, "--execute",
                      "--reassignment-json-file", str(plan))
        assert run.returncode == 0 and "rollback" in run.stdout, run.stdout + run.stderr

        def done() -> bool:
            for records in consumer.poll(timeout_ms=100).values():
                for r in records:
                    seen[r.partition].append(int(r.value))
            return _raftka("reassign", "--bootstrap-server", cluster.bootstrap_servers, "--verify",
                           "--reassignment-json-file", str(plan)).returncode == 0
        wait_until(done, WAIT_S, interval_s=0.5, what="every partition on brokers B")
        took = time.monotonic() - moved_at
        listed = _raftka("reassign", "--bootstrap-server", cluster.bootstrap_servers, "--list")
        assert "No partition reassignments found." in listed.stdout
        def leftovers() -> list:
            return [d for b in old for d in (cluster.nodes[b].data_dir / "data").glob("moving-*")]
        wait_until(lambda: not leftovers(), WAIT_S, what="brokers A deleting their replicas")
        for broker in old:  # retire A: stopped, then taken out of the cluster for good
            cluster.stop(broker)
            gone = _raftka("quorum", "unregister-broker", "--bootstrap-controller", cluster.bootstrap_controllers,
                           "--broker-id", str(broker))
            assert gone.returncode == 0, gone.stderr
        time.sleep(1.0)  # writes go on without A
        stop.set()
        writer.join(90)
        assert not failures, f"the producer failed: {failures[0]!r}"
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and any(len(seen[p]) < len(acked[p]) for p in acked):
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    seen[r.partition].append(int(r.value))
    finally:
        stop.set()
        writer.join(90)
        consumer.close()
    for p in acked:
        assert acked[p], f"nothing acknowledged on partition {p}"
        missing = set(acked[p]) - set(seen[p])
        assert not missing, f"partition {p}: {len(missing)} acknowledged records lost"
        assert len(seen[p]) == len(set(seen[p])), f"partition {p}: a record was read twice"
        assert seen[p] == sorted(seen[p]), f"partition {p}: order broken"
    print(f"moved 3 partitions x 3 replicas in {took:.1f} s under load; {sum(map(len, acked.values()))} records "
          f"acknowledged; the producer's longest stall {max(gaps) * 1000:.0f} ms")
