"""ElectLeaders (issue #23, item 3): `raftka leader-election` and AdminClient.perform_leader_election.

- The controller's decision (leader_election.decide, pure): preferred moves leadership to the
  first replica only when it is live and in the ISR (else PREFERRED_LEADER_NOT_AVAILABLE, or
  ELECTION_NOT_NEEDED when it leads); unclean only for a partition without a leader, the first
  live ISR member first, else any live replica with an ISR of itself, else
  ELIGIBLE_LEADERS_NOT_AVAILABLE; unknown partitions are named; "every partition" leaves out
  those that needed nothing; the changes replay cleanly on the image they were decided on.
- A cluster (1 controller + 3 brokers) with auto.leader.rebalance.enable=false: a restarted
  preferred leader rejoins the ISR but does not lead again by itself; `raftka leader-election
  --election-type PREFERRED` (all partitions, one partition, a JSON file) moves leadership back
  under an acks=all producer that loses nothing, and says when no election was needed.
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
from raftka.raft_meta.controller.leader_election import PREFERRED, UNCLEAN, decide
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage
from raftka.raft_meta.metadata.records import (PartitionChangeRecord, RegisterBrokerRecord, TopicRecord,
                                               UnfenceBrokerRecord)

WAIT_S = 30.0


def _image(assignment: tuple, live: tuple = (1, 2, 3), changes: tuple = ()) -> MetadataImage:
    """Brokers 1-3 registered (``live`` unfenced), topic "t" with ``assignment``, then ``changes``
    ((partition, leader, isr) as PartitionChangeRecords)."""
    delta = MetadataDelta(MetadataImage.EMPTY)
    for b in (1, 2, 3):
        delta.replay(RegisterBrokerRecord(b, f"{b:032x}", {"PLAINTEXT": f"h:{b}"}), b)
    for b in live:
        delta.replay(UnfenceBrokerRecord(b, b), 10)
    delta.replay(TopicRecord("t", "0" * 31 + "1", assignment, {}), 20)
    image = delta.apply()
    for i, (partition, leader, isr) in enumerate(changes):
        delta = MetadataDelta(image)
        current = image.partition("t", partition)
        assert "error" not in delta.replay(PartitionChangeRecord("t", image.topics["t"].topic_id, partition,
                                                                 current.partition_epoch, leader, isr), 30 + i)
        image = delta.apply()
    return image


def _codes(results: list) -> dict[int, int]:
    return {partition: code for _, partition, code, _ in results}


def test_preferred_moves_leadership_back_only_to_a_live_in_sync_first_replica():
    image = _image(((1, 2, 3), (2, 3, 1), (3, 1, 2)), live=(1, 2),
                   changes=((0, 2, None), (1, 2, (2, 1)), (2, 1, (1, 2))))  # p0 led by 2; 3 fenced, out of ISRs
    results, records = decide(image, PREFERRED, [{"topic": "t", "partition_id": [0, 1, 2, 7]}])
    assert _codes(results) == {0: errors.NONE, 1: errors.ELECTION_NOT_NEEDED,
                               2: errors.PREFERRED_LEADER_NOT_AVAILABLE, 7: errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert [(r.partition, r.leader, r.isr) for r in records] == [(0, 1, None)]
    delta = MetadataDelta(image)
    assert "error" not in delta.replay(records[0], 100)
    after = delta.apply()
    assert after.partition("t", 0).leader == 1 and after.partition("t", 0).leader_epoch > image.partition("t", 0).leader_epoch
    results, records = decide(after, PREFERRED, None)  # every partition: only what still needs one
    assert _codes(results) == {2: errors.PREFERRED_LEADER_NOT_AVAILABLE} and not records


def test_unclean_elects_only_for_a_leaderless_partition_and_prefers_the_isr():
    image = _image(((1, 2, 3), (2, 3), (3,)), live=(2,),
                   changes=((0, -1, (1,)), (1, -1, (2, 3)), (2, -1, (3,))))
    results, records = decide(image, UNCLEAN, [{"topic": "t", "partition_id": [0, 1, 2]}])
    assert _codes(results) == {0: errors.NONE, 1: errors.NONE, 2: errors.ELIGIBLE_LEADERS_NOT_AVAILABLE}
    by_partition = {r.partition: (r.leader, r.isr) for r in records}
    assert by_partition[0] == (2, (2,))  # outside the ISR: 1 is gone, 2 is live
    assert by_partition[1] == (2, (2,))  # the live ISR member, the fenced 3 out of the ISR
    healthy = _image(((1, 2, 3),))
    results, records = decide(healthy, UNCLEAN, None)
    assert results == [] and records == []


# -- a cluster ----------------------------------------------------------------------------------

def _raftka(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftka", *argv], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 3 brokers; leadership stays where failovers leave it."""
    return module_cluster_factory("leader-election", controllers=1, brokers=3,
                                  configs={**FAST_CLUSTER_CONFIGS, "auto.leader.rebalance.enable": "false"})


def _leaders(admin: Any, topic: str) -> dict[int, int]:
    return {p["partition"]: p["leader"] for p in wait_for_topic(admin, topic)}


def test_leadership_stays_moved_until_a_preferred_election_moves_it_back_under_load(cluster, tmp_path):
    from raftka.client import AdminClient, NewTopic, Producer
    from raftka.cluster import wait_until
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("elect", 3, 3)])
        preferred = {p["partition"]: p["replicas"][0] for p in wait_for_topic(admin, "elect", 3)}
        victim = preferred[0]
        acked: list[int] = []
        stop = threading.Event()

        def produce() -> None:
            with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
                i = 0
                while not stop.is_set():
                    producer.send("elect", str(i).encode(), partition=i % 3).get(timeout=30)
                    acked.append(i)
                    i += 1
        writer = threading.Thread(target=produce)
        writer.start()
        try:
            cluster.restart(victim)
            wait_until(lambda: all(len(p["isr"]) == 3 for p in wait_for_topic(admin, "elect", 3)), WAIT_S,
                       what="the restarted broker back in every ISR")
            time.sleep(1.0)  # a few periodic passes of the controller: none may move leadership back
            moved = [p for p, leader in _leaders(admin, "elect").items() if leader != preferred[p]]
            assert 0 in moved, "auto.leader.rebalance.enable=false: the preferred leader must not lead by itself"
            single = _raftka("leader-election", "--bootstrap-server", cluster.bootstrap_servers,
                             "--election-type", "preferred", "--topic", "elect", "--partition", "0")
            assert single.returncode == 0 and "elect-0" in single.stdout, single.stdout + single.stderr
            plan = tmp_path / "partitions.json"
            plan.write_text(json.dumps({"partitions": [{"topic": "elect", "partition": p} for p in range(3)]}))
            from_file = _raftka("leader-election", "--bootstrap-server", cluster.bootstrap_servers,
                                "--election-type", "PREFERRED", "--path-to-json-file", str(plan))
            assert from_file.returncode == 0, from_file.stdout + from_file.stderr
            assert "Valid replica already elected for partitions" in from_file.stdout and "elect-0" in from_file.stdout
            wait_until(lambda: _leaders(admin, "elect") == preferred, WAIT_S, what="every preferred replica leading")
            again = _raftka("leader-election", "--bootstrap-server", cluster.bootstrap_servers,
                            "--election-type", "PREFERRED", "--all-topic-partitions")
            assert again.returncode == 0 and "No partition needed an election" in again.stdout, again.stdout
        finally:
            stop.set()
            writer.join(60)
    assert len(acked) > 0
    from raftka.client import Consumer
    with Consumer("elect", bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                  consumer_timeout_ms=5000) as consumer:
        seen = {int(r.value) for r in consumer}
    assert set(acked) <= seen, f"{len(set(acked) - seen)} acknowledged records lost"


def test_the_cli_refuses_a_bad_plan_with_a_message_and_unclean_on_a_healthy_partition_is_not_needed(cluster, tmp_path):
    from raftka.client import AdminClient, NewTopic
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("elect-cli", 2, 3)])
        wait_for_topic(admin, "elect-cli", 2)
    bad = tmp_path / "bad.json"
    bad.write_text('{"partitions": [{"topic": "elect"}]}')
    run = _raftka("leader-election", "--bootstrap-server", cluster.bootstrap_servers, "--election-type", "PREFERRED",
                  "--path-to-json-file", str(bad))
    assert run.returncode != 0 and "partition" in run.stderr and "Traceback" not in run.stderr
    run = _raftka("leader-election", "--bootstrap-server", cluster.bootstrap_servers, "--election-type", "UNCLEAN",
                  "--topic", "elect-cli", "--partition", "1")
    assert run.returncode == 0 and "Valid replica already elected for partitions elect-cli-1" in run.stdout, run.stdout
    run = _raftka("leader-election", "--bootstrap-server", cluster.bootstrap_servers, "--election-type", "PREFERRED",
                  "--topic", "nope", "--partition", "0")
    assert run.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in run.stdout
