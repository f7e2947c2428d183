"""The active controller's pure decisions: replica placement and partition elections."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from raftka.raft_meta.controller import elections, placement
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import BrokerRegistration, MetadataImage, PartitionRegistration, frozen_map
from raftka.raft_meta.metadata.records import RegisterBrokerRecord, TopicRecord, UnfenceBrokerRecord


def brokers(*specs):
    """BrokerRegistrations from (id, rack) pairs."""
    return [BrokerRegistration(b, "i", 1, frozen_map({}), rack, False) for b, rack in specs]


def test_placement_is_round_robin_with_the_least_loaded_broker_leading_first():
    live = brokers((1, None), (2, None), (3, None))
    assert placement.place_replicas(live, {}, 4, 2) == [(1, 2), (2, 3), (3, 1), (1, 2)]
    assert placement.place_replicas(live, {1: 5, 2: 0, 3: 1}, 2, 3) == [(2, 3, 1), (3, 1, 2)]


def test_placement_alternates_racks_so_replicas_of_a_partition_span_racks():
    live = brokers((1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c"))
    rack = {b.broker_id: b.rack for b in live}
    assignment = placement.place_replicas(live, {}, 12, 3)
    for replicas in assignment:
        assert len({rack[b] for b in replicas}) == 3, assignment
    leaders = Counter(replicas[0] for replicas in assignment)
    assert sorted(leaders.values()) == [2] * 6  # leadership balanced


def p(replicas, isr, leader, leader_epoch=0, partition_epoch=0):
    return PartitionRegistration(tuple(replicas), tuple(isr), leader, leader_epoch, partition_epoch)


@pytest.mark.parametrize("partition,live,unclean,expected", [
    (p([1, 2, 3], [1, 2, 3], 1), {1, 2, 3}, False, (1, (1, 2, 3))),  # healthy: nothing to do
    (p([1, 2, 3], [1, 2, 3], 1), {2, 3}, False, (2, (2, 3))),  # leader fenced: next ISR replica leads
    (p([1, 2, 3], [1, 2, 3], 2), {1, 2, 3}, False, (1, (1, 2, 3))),  # preferred leader comes back
    (p([1, 2, 3], [2, 3], 2), {1, 2, 3}, False, (2, (2, 3))),  # ... but only from inside the ISR
    (p([1, 2], [1], 1), {2}, False, (-1, (1,))),  # no live ISR member: offline, ISR keeps its last
    (p([1, 2], [1], 1), {2}, True, (2, (2,))),  # unclean election: any live replica
    (p([1, 2], [1], -1), {1, 2}, False, (1, (1,))),  # offline partition: its ISR member is back
    (p([1, 2, 3], [1, 2, 3], 1), {1}, False, (1, (1,))),  # fenced followers leave the ISR
])
def test_election_targets(partition, live, unclean, expected):
    assert elections.target(partition, live, unclean) == expected


def image_with(partitions_by_topic, live=(1, 2, 3), configs=None):
    image = MetadataImage.EMPTY
    delta = MetadataDelta(image)
    for b in (1, 2, 3):
        delta.replay(RegisterBrokerRecord(b, "i", {}, None), b)
    for b in live:
        delta.replay(UnfenceBrokerRecord(b, b), 10)
    for i, (name, assignment) in enumerate(sorted(partitions_by_topic.items())):
        delta.replay(TopicRecord(name, f"id-{name}", assignment, (configs or {}).get(name, {})), 20 + i)
    return delta.apply()


def test_changes_for_a_fenced_broker_expect_the_current_epochs_and_replay_cleanly():
    image = image_with({"t": ((2, 1, 3), (1, 2, 3), (3, 1)), "u": ((2,),)},
                       configs={"u": {"unclean.leader.election.enable": True}})
    changes = list(elections.changes(image, {1, 3}, False, involving=elections.involves(2)))
    assert [(c.topic, c.partition) for c in changes] == [("t", 0), ("t", 1), ("u", 0)]
    assert changes[0].leader == 1 and changes[0].isr == (1, 3) and changes[0].expected_partition_epoch == 0
    assert changes[1].leader is None and changes[1].isr == (1, 3)  # 2 only leaves the ISR
    assert changes[2].leader == -1 and changes[2].isr is None  # unclean allowed, but no live replica
    delta = MetadataDelta(image)
    assert all("error" not in delta.replay(c, 100) for c in changes)
    after = delta.apply()
    assert not list(elections.changes(after, {1, 3}, False, involving=elections.involves(2)))
    assert after.partition("t", 2) is image.partition("t", 2)  # not involved: untouched


def test_changes_respect_the_limit_and_topic_unclean_overrides():
    image = image_with({"a": ((2,),) * 5, "b": ((2, 1),)}, configs={"a": {"unclean.leader.election.enable": False}})
    assert len(list(elections.changes(image, {1, 3}, True, limit=3))) == 3
    targets = {(c.topic, c.partition): c.leader for c in elections.changes(image, {1, 3}, True)}
    assert targets[("a", 0)] == -1  # the topic says no unclean election
    assert targets[("b", 0)] == 1


def test_random_partitions_always_get_a_well_formed_target():
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for _ in range(2000):
        replicas = rng.sample(range(1, 6), rng.randint(1, 4))
        isr = rng.sample(replicas, rng.randint(1, len(replicas)))
        leader = rng.choice(isr + [-1])
        live = set(rng.sample(range(1, 6), rng.randint(0, 5)))
        unclean = rng.random() < 0.5
        new_leader, new_isr = elections.target(p(replicas, isr, leader), live, unclean)
        assert new_isr and set(new_isr) <= set(replicas), seed
        assert new_leader == -1 or (new_leader in new_isr and new_leader in live), seed
        if any(b in live for b in isr):
            assert new_leader in live, seed  # a live ISR member always leads
