"""MetadataImage is immutable and MetadataDelta says what changed, for brokers reacting to it."""
from __future__ import annotations

import dataclasses

import pytest

from raftka.common import errors
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage, image_from_bytes, image_to_bytes
from raftka.raft_meta.metadata.records import (
    ConfigRecord, FenceBrokerRecord, PartitionChangeRecord, RegisterBrokerRecord, RemoveTopicRecord, TopicRecord,
    UnfenceBrokerRecord,
)


# Topic ids are uuids (32 hex digits), as the controller makes them.
A, A2, B, C = (f"{n:032x}" for n in (0xA, 0xA2, 0xB, 0xC))

def build(*records, image=MetadataImage.EMPTY, offset=None):
    """Replay ``records`` on ``image`` one offset apart; every one must apply."""
    delta = MetadataDelta(image)
    start = image.offset + 1 if offset is None else offset
    for i, record in enumerate(records):
        result = delta.replay(record, start + i)
        assert "error" not in result, (record, result)
    return delta


@pytest.fixture
def base():
    """Brokers 1-3 unfenced; topic a (id A): p0 replicas 1,2,3 (leader 1), p1 replicas 2,3 (leader 2)."""
    records = [RegisterBrokerRecord(b, f"{b:032x}", {"PLAINTEXT": f"127.0.0.1:{9000 + b}"}, None) for b in (1, 2, 3)]
    image = build(*records).apply()
    image = build(*[UnfenceBrokerRecord(b, image.brokers[b].broker_epoch) for b in (1, 2, 3)], image=image).apply()
    return build(TopicRecord("a", A, ((1, 2, 3), (2, 3)), {}), image=image).apply()


def test_an_image_cannot_be_changed_in_place(base):
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.offset = 7
    with pytest.raises(TypeError):
        base.topics["b"] = base.topics["a"]
    with pytest.raises(TypeError):
        base.brokers[1].endpoints["X"] = "h:1"
    assert isinstance(base.topics["a"].partitions, tuple) and isinstance(base.partition("a", 0).isr, tuple)


def test_lookups_by_partition_and_topic_id(base):
    assert base.partition("a", 1).replicas == (2, 3) and base.partition("a", 2) is None
    assert base.partition("nope", 0) is None
    assert base.topic_by_id(A) is base.topics["a"] and base.topic_by_id(B) is None
    assert base.live_broker_ids() == [1, 2, 3]


def test_apply_reuses_what_did_not_change(base):
    with_b = build(TopicRecord("b", B, ((1,),), {}), image=base).apply()
    assert with_b.topics["a"] is base.topics["a"] and with_b.brokers is base.brokers
    changed = build(PartitionChangeRecord("a", A, 1, 0, None, (2,)), image=with_b).apply()
    assert changed.topics["b"] is with_b.topics["b"]
    assert changed.topics["a"].partitions[0] is with_b.topics["a"].partitions[0]
    assert changed.partition("a", 1) == dataclasses.replace(with_b.partition("a", 1), isr=(2,), partition_epoch=1)


def test_a_snapshot_restores_an_equal_image(base):
    image = build(ConfigRecord("topic", "a", {"retention.ms": 5, "x.list": ["p", "q"]}),
                  ConfigRecord("cluster", "", {"unclean.leader.election.enable": True}), image=base).apply()
    restored = image_from_bytes(image_to_bytes(image))
    assert restored == image and restored.topic_by_id(A).name == "a"
    assert restored.topics["a"].configs["x.list"] == ("p", "q")
    with pytest.raises(ValueError, match="undecodable metadata snapshot"):
        image_from_bytes(b"\xc1junk")


def test_local_changes_name_what_a_broker_leads_follows_and_deletes(base):
    delta = build(PartitionChangeRecord("a", A, 0, 0, 2, (2, 3)),  # 1 leaves the ISR, 2 leads
                  TopicRecord("b", B, ((3, 1),), {}), image=base)
    one, two, three = delta.local_changes(1), delta.local_changes(2), delta.local_changes(3)
    assert set(one.followers) == {("a", 0), ("b", 0)} and not one.leaders and not one.deletes
    assert set(two.leaders) == {("a", 0)} and not two.followers
    topic, partition = two.leaders[("a", 0)]
    assert topic.topic_id == A and partition.leader == 2 and partition.leader_epoch == 1
    assert set(three.leaders) == {("b", 0)} and set(three.followers) == {("a", 0)}
    assert ("a", 1) not in three.followers  # unchanged partitions are not local changes
    assert not delta.local_changes(9)


def test_a_deleted_topic_is_deleted_on_its_replicas_and_a_recreated_one_is_new(base):
    delta = build(RemoveTopicRecord("a", A), image=base)
    assert set(delta.deleted_topics) == {"a"} and not delta.changed_topics
    assert delta.local_changes(1).deletes == {("a", 0)}
    assert delta.local_changes(3).deletes == {("a", 0), ("a", 1)}
    assert MetadataDelta(base).replay(TopicRecord("a", A2, ((3,),), {}), 99)["error"] == errors.TOPIC_ALREADY_EXISTS
    delta.replay(TopicRecord("a", A2, ((3,),), {}), 50)
    changes = delta.local_changes(3)
    assert changes.deletes == {("a", 0), ("a", 1)} and set(changes.leaders) == {("a", 0)}
    assert delta.deleted_topics["a"].topic_id == A and delta.changed_topics["a"].topic_id == A2
    after = delta.apply()
    assert after.topic_by_id(A) is None and after.topic_by_id(A2).name == "a"


def test_between_two_images_gives_the_same_changes_as_the_replay(base):
    replayed = build(FenceBrokerRecord(1, base.brokers[1].broker_epoch),
                     PartitionChangeRecord("a", A, 0, 0, 2, (2, 3)), RemoveTopicRecord("a", A),
                     TopicRecord("c", C, ((1, 2),), {}), image=base)
    after = replayed.apply()
    between = MetadataDelta.between(base, after)
    assert between.apply() == after
    assert dict(between.changed_topics) == dict(replayed.changed_topics)
    assert dict(between.deleted_topics) == dict(replayed.deleted_topics)
    assert dict(between.changed_brokers) == dict(replayed.changed_brokers) and between.changed_brokers[1].fenced
    for broker_id in (1, 2, 3):
        assert between.local_changes(broker_id) == replayed.local_changes(broker_id)


def test_a_refused_record_leaves_the_delta_as_it_was(base):
    delta = MetadataDelta(base)
    assert "error" not in delta.replay(PartitionChangeRecord("a", A, 1, 0, 3, (3,)), 20)
    for record, code in [
        (PartitionChangeRecord("a", A, 1, 0, 2, None), errors.INVALID_UPDATE_VERSION),  # epoch moved on
        (PartitionChangeRecord("a", "WRONG", 1, 1, 2, None), errors.UNKNOWN_TOPIC_OR_PARTITION),
        (PartitionChangeRecord("a", A, 1, 1, 2, (3,)), errors.INVALID_REQUEST),  # leader outside the ISR
        (PartitionChangeRecord("a", A, 1, 1, None, (1,)), errors.INVALID_REQUEST),  # 1 is not a replica
        (UnfenceBrokerRecord(2, 12345), errors.STALE_BROKER_EPOCH),
        (FenceBrokerRecord(7, 1), errors.BROKER_ID_NOT_REGISTERED),
        (ConfigRecord("topic", "nope", {"a": 1}), errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("not a record", errors.INVALID_REQUEST),
    ]:
        before = delta.apply()
        result = delta.replay(record, 21)  # type: ignore[arg-type]
        assert result["error"] == code and result["message"], (record, result)
        assert delta.apply() == before and delta.offset == 20
    p = delta.apply().partition("a", 1)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (3, (3,), 1, 1)
