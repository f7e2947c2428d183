"""Partition assignors (client/assignors.py), by property: every partition of a subscribed topic
goes to exactly one member subscribed to it; equal subscriptions give a balanced split; the
sticky assignors move only what balance requires; the cooperative one never hands a partition
to a new owner in the round where its old owner still holds it, and the follow-up round
finishes the move.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.client.assignors import (Assignment, CooperativeStickyAssignor, RangePartitionAssignor,
                              RoundRobinPartitionAssignor, StickyAssignor, Subscription, decode_assignment,
                              decode_subscription, encode_assignment, encode_subscription, make_assignors,
                              rebalance_protocol, sticky_assignment)
from raftka.client.structs import TopicPartition

ALL = [RangePartitionAssignor(), RoundRobinPartitionAssignor(), StickyAssignor(), CooperativeStickyAssignor()]


@st.composite
def groups(draw, *, same_topics: bool = False):
    """(partitions_per_topic, {member: Subscription}) with random owned partitions."""
    topics = {f"t{i}": draw(st.integers(1, 12)) for i in range(draw(st.integers(1, 4)))}
    names = sorted(topics)
    members = [f"m{i}" for i in range(draw(st.integers(1, 7)))]
    subs = {}
    for m in members:
        chosen = names if same_topics else draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        subs[m] = Subscription(sorted(chosen), generation_id=draw(st.integers(-1, 5)))
    # owned partitions: a random earlier assignment, possibly stale and overlapping
    everything = [TopicPartition(t, p) for t, n in topics.items() for p in range(n + draw(st.integers(0, 2)))]
    for m in members:
        owned = draw(st.lists(st.sampled_from(everything), unique=True, max_size=len(everything)))
        subs[m] = subs[m]._replace(owned_partitions=owned)
    return topics, subs


def check_complete(topics, subs, result):
    assigned = [tp for a in result.values() for tp in a.partitions]
    assert len(assigned) == len(set(assigned)), "a partition went to two members"
    wanted = {TopicPartition(t, p) for t, n in topics.items() for p in range(n)
              if any(t in s.topics for s in subs.values())}
    for member, a in result.items():
        for tp in a.partitions:
            assert tp.topic in subs[member].topics, f"{member} got {tp} without subscribing to it"
    return wanted, set(assigned)


@pytest.mark.parametrize("assignor", ALL[:3], ids=lambda a: a.name)
@settings(max_examples=150, deadline=None)
@given(group=groups())
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(assignor, group):
    topics, subs = group
    wanted, assigned = check_complete(topics, subs, assignor.assign(topics, subs))
    assert assigned == wanted


@pytest.mark.parametrize("assignor", [RoundRobinPartitionAssignor(), StickyAssignor()], ids=lambda a: a.name)
@settings(max_examples=150, deadline=None)
@given(group=groups(same_topics=True))
def test_equal_subscriptions_give_a_balanced_split(assignor, group):
    topics, subs = group
    sizes = [len(a.partitions) for a in assignor.assign(topics, subs).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(group=groups(same_topics=True))
def test_range_splits_each_topic_within_one_partition(group):
    topics, subs = group
    result = RangePartitionAssignor().assign(topics, subs)
    for topic in topics:
        sizes = [sum(1 for tp in a.partitions if tp.topic == topic) for a in result.values()]
        assert max(sizes) - min(sizes) <= 1


def balanced_start(partitions: int, members: list[str]) -> dict[str, Subscription]:
    subs = {m: Subscription(["t"], generation_id=1) for m in members}
    target = sticky_assignment({"t": partitions}, subs)
    return {m: Subscription(["t"], owned_partitions=target[m], generation_id=1) for m in members}


@settings(max_examples=100, deadline=None)
@given(partitions=st.integers(1, 40), count=st.integers(2, 8), data=st.data())
def test_sticky_moves_only_the_partitions_of_a_member_that_left(partitions, count, data):
    members = [f"m{i}" for i in range(count)]
    start = balanced_start(partitions, members)
    gone = data.draw(st.sampled_from(members))
    rest = {m: s for m, s in start.items() if m != gone}
    after = sticky_assignment({"t": partitions}, rest)
    for m, s in rest.items():  # nobody loses anything; only the leaver's partitions move
        assert set(s.owned_partitions) <= set(after[m])


@settings(max_examples=100, deadline=None)
@given(partitions=st.integers(1, 40), count=st.integers(1, 7))
def test_sticky_moves_at_most_a_fair_share_to_a_new_member(partitions, count):
    members = [f"m{i}" for i in range(count)]
    start = balanced_start(partitions, members)
    start["new"] = Subscription(["t"])
    after = sticky_assignment({"t": partitions}, start)
    moved = sum(len(set(start[m].owned_partitions) - set(after[m])) for m in members)
    assert moved == len(after["new"]) <= -(-partitions // (count + 1))


@settings(max_examples=150, deadline=None)
@given(group=groups(same_topics=True))
def test_cooperative_never_gives_a_partition_its_old_owner_still_holds_and_the_follow_up_finishes(group):
    topics, subs = group
    assignor = CooperativeStickyAssignor()
    first = assignor.assign(topics, subs)
    _wanted, assigned = check_complete(topics, subs, first)
    newest: dict[TopicPartition, tuple[int, str]] = {}
    for m in sorted(subs):
        for tp in subs[m].owned_partitions:
            if tp not in newest or subs[m].generation_id > newest[tp][0]:
                newest[tp] = (subs[m].generation_id, m)
    for m, a in first.items():
        for tp in a.partitions:
            assert newest.get(tp, (0, m))[1] == m, f"{tp} given to {m} while {newest[tp][1]} holds it"
    # Owners revoke what they did not get back and rejoin: the second round completes the move.
    second_subs = {m: s._replace(owned_partitions=first[m].partitions, generation_id=7) for m, s in subs.items()}
    second = assignor.assign(topics, second_subs)
    wanted, assigned = check_complete(topics, second_subs, second)
    assert assigned == wanted
    sizes = [len(a.partitions) for a in second.values()]
    assert max(sizes) - min(sizes) <= 1
    for m in subs:  # nothing kept in round one is taken away in round two
        assert set(first[m].partitions) <= set(second[m].partitions)


def test_members_sort_by_group_instance_id_when_static():
    subs = {"z-member": Subscription(["t"], group_instance_id="a-host"),
            "a-member": Subscription(["t"], group_instance_id="b-host")}
    result = RangePartitionAssignor().assign({"t": 3}, subs)
    assert result["z-member"].partitions == [TopicPartition("t", 0), TopicPartition("t", 1)]


def test_the_consumer_protocol_round_trips_and_refuses_garbage():
    sub = Subscription(["b", "a"], b"data", [TopicPartition("a", 1), TopicPartition("a", 0)], 3)
    back = decode_subscription(encode_subscription(sub), "inst")
    assert back.topics == ["a", "b"] and back.user_data == b"data" and back.generation_id == 3
    assert back.owned_partitions == [TopicPartition("a", 0), TopicPartition("a", 1)]
    assert back.group_instance_id == "inst"
    assignment = Assignment([TopicPartition("x", 2), TopicPartition("y", 0)], None)
    assert decode_assignment(encode_assignment(assignment)) == assignment
    assert decode_assignment(b"") == Assignment([])
    with pytest.raises(ValueError):
        decode_subscription(b"\xc1garbage")
    with pytest.raises(ValueError):
        decode_assignment(b"\x01")


def test_assignor_names_and_the_rebalance_protocol():
    assert [a.name for a in make_assignors(["range", "RoundRobinAssignor", CooperativeStickyAssignor])] == \
        ["range", "roundrobin", "cooperative-sticky"]
    assert rebalance_protocol(make_assignors("cooperative-sticky")) == "cooperative"
    assert rebalance_protocol(make_assignors(["cooperative-sticky", "range"])) == "eager"
    with pytest.raises(ValueError, match="unknown assignor"):
        make_assignors("nope")


def test_sticky_assignment_of_many_partitions_is_quick():
    rng = random.Random(7)
    subs = {f"m{i}": Subscription(["t"], owned_partitions=[TopicPartition("t", p) for p in range(1000)
                                                          if rng.random() < 0.3], generation_id=rng.randrange(3))
            for i in range(20)}
    import time
    started = time.monotonic()
    result = sticky_assignment({"t": 1000}, subs)
    assert time.monotonic() - started < 5.0
    sizes = [len(p) for p in result.values()]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1000
