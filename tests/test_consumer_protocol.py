"""Kafka's consumer protocol (common/messages/consumer_protocol.py, client/assignors.py): the
subscription and assignment bytes round-trip at every version, match bytes computed by hand from
Kafka's definitions, read and are read by kafka-python's own encoder both ways, tolerate newer
versions as Kafka does, and refuse bad bytes with a typed error naming the field."""
from __future__ import annotations

import pytest
from kafka.coordinator.assignors.range import RangePartitionAssignor as KafkaRange
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as KafkaRoundRobin
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KafkaAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KafkaSubscription

from raftka.client.assignors import (ASSIGNORS, Assignment, Subscription, decode_assignment, decode_subscription,
                                     encode_assignment, encode_subscription)
from raftka.client.structs import TopicPartition
from raftka.common.messages import consumer_protocol as wire
from raftka.common.messages.consumer_protocol import ConsumerProtocolError

FULL = Subscription(["b", "a"], b"\x00data", [TopicPartition("a", 1), TopicPartition("a", 0), TopicPartition("b", 4)],
                    7, None, "rack-1")


def test_a_subscription_round_trips_at_every_version_keeping_the_fields_that_version_has():
    for version in range(4):
        back = decode_subscription(encode_subscription(FULL, version), "instance")
        assert back.topics == ["a", "b"] and back.user_data == b"\x00data"
        assert back.group_instance_id == "instance"  # from the JoinGroup entry, never encoded
        assert back.owned_partitions == ([TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 4)]
                                         if version >= 1 else [])
        assert back.generation_id == (7 if version >= 2 else -1)
        assert back.rack_id == ("rack-1" if version >= 3 else None)


def test_raftka_sends_version_3_of_both():
    assert encode_subscription(FULL)[:2] == b"\x00\x03"
    assert encode_assignment(Assignment([TopicPartition("t", 0)]))[:2] == b"\x00\x03"


def test_an_assignment_round_trips_at_every_version():
    assignment = Assignment([TopicPartition("y", 0), TopicPartition("x", 2), TopicPartition("x", 1)], b"ud")
    for version in range(4):
        back = decode_assignment(encode_assignment(assignment, version))
        assert back == Assignment([TopicPartition("x", 1), TopicPartition("x", 2), TopicPartition("y", 0)], b"ud")
    assert decode_assignment(b"") == Assignment([])  # a failed SyncGroup's empty assignment
    assert decode_subscription(b"") == Subscription([])


def test_version_0_bytes_are_the_ones_computed_by_hand_from_kafkas_definition():
    # int16 version 0 | topics: int32 count 2, (int16 length 1, "a"), (int16 length 1, "b") | user_data: null (-1)
    subscription = bytes.fromhex("0000" "00000002" "0001" "61" "0001" "62" "ffffffff")
    assert encode_subscription(Subscription(["b", "a"]), 0) == subscription
    assert decode_subscription(subscription) == Subscription(["a", "b"])
    # int16 version 0 | assigned_partitions: count 1, topic (length 1, "t"), partitions count 2, 0, 3 |
    # user_data: length 2, "hi"
    assignment = bytes.fromhex("0000" "00000001" "0001" "74" "00000002" "00000000" "00000003" "00000002" "6869")
    assert encode_assignment(Assignment([TopicPartition("t", 3), TopicPartition("t", 0)], b"hi"), 0) == assignment
    assert decode_assignment(assignment) == Assignment([TopicPartition("t", 0), TopicPartition("t", 3)], b"hi")


def test_version_3_adds_owned_partitions_generation_and_rack_after_the_version_0_fields():
    data = encode_subscription(Subscription(["a"], None, [TopicPartition("a", 2)], 9, None, "r"), 3)
    assert data == bytes.fromhex("0003" "00000001" "0001" "61" "ffffffff"
                                 "00000001" "0001" "61" "00000001" "00000002"  # owned_partitions
                                 "00000009"  # generation_id
                                 "0001" "72")  # rack_id


def test_a_newer_version_is_read_with_the_version_3_layout_and_what_follows_is_ignored():
    newer = b"\x00\x07" + encode_subscription(FULL, 3)[2:] + b"\x00\x00\x00\x2a future field"
    back = decode_subscription(newer)
    assert back.topics == ["a", "b"] and back.generation_id == 7 and back.rack_id == "rack-1"
    version, _body = wire.decode_subscription(newer)
    assert version == 7
    newer_assignment = b"\x00\x05" + encode_assignment(Assignment([TopicPartition("t", 1)]))[2:] + b"more"
    assert decode_assignment(newer_assignment) == Assignment([TopicPartition("t", 1)])


@pytest.mark.parametrize("data, words, field", [
    (b"\x00", "the version takes 2", ""),
    (b"\xff\xfe" + b"\x00" * 8, "unsupported version -2", ""),
    (bytes.fromhex("0000" "00000002" "0001" "61"), "2 entries declared, 3 bytes left", "topics"),
    (bytes.fromhex("0000" "7fffffff"), "at most 100000", "topics"),  # refused before anything is allocated
    (bytes.fromhex("0000" "00000001" "0005" "61"), "truncated", "topics[0]"),
    (bytes.fromhex("0000" "00000001" "0002" "ff61" "ffffffff"), "UTF-8", "topics[0]"),
    (bytes.fromhex("0000" "00000000" "ffffffff" "00"), "1 bytes after the body", ""),  # a known version is exact
    (bytes.fromhex("0003" "00000000" "ffffffff" "00000001" "0009" "61000000"), "truncated",
     "owned_partitions[0].topic"),
])
def test_bad_subscription_bytes_raise_a_typed_error_that_names_the_field(data, words, field):
    with pytest.raises(ConsumerProtocolError) as caught:
        decode_subscription(data)
    assert isinstance(caught.value, ValueError)  # callers that skip an unreadable member catch ValueError
    assert "ConsumerProtocolSubscription" in str(caught.value) and words in str(caught.value)
    assert caught.value.field == field


def test_bad_assignment_bytes_raise_a_typed_error():
    with pytest.raises(ConsumerProtocolError, match="ConsumerProtocolAssignment v1: assigned_partitions"):
        decode_assignment(bytes.fromhex("0001" "00000001" "0001"))


def _kafka_subscription(version: int) -> KafkaSubscription:
    tp = KafkaSubscription.TopicPartition
    return KafkaSubscription(version=version, topics=["a", "b"], user_data=b"u",
                             owned_partitions=[tp(topic="a", partitions=[0, 1]), tp(topic="b", partitions=[4])],
                             generation_id=7, rack_id="rack-1")


@pytest.mark.parametrize("version", range(4))
def test_kafka_pythons_subscription_bytes_decode_here(version):
    data = _kafka_subscription(version).encode()
    back = decode_subscription(data)
    assert back.topics == ["a", "b"] and back.user_data == b"u"
    assert back.owned_partitions == ([TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 4)]
                                     if version >= 1 else [])
    assert back.generation_id == (7 if version >= 2 else -1)
    assert back.rack_id == ("rack-1" if version >= 3 else None)
    # ... and they are exactly what Raftka writes at that version
    assert encode_subscription(Subscription(["a", "b"], b"u", back.owned_partitions, back.generation_id, None,
                                            back.rack_id), version) == data


@pytest.mark.parametrize("version", range(4))
def test_raftkas_subscription_bytes_decode_in_kafka_python(version):
    theirs = KafkaSubscription.decode(encode_subscription(FULL, version))
    assert theirs.version == version and list(theirs.topics) == ["a", "b"] and theirs.user_data == b"\x00data"
    if version >= 1:
        assert [(tp.topic, list(tp.partitions)) for tp in theirs.owned_partitions] == [("a", [0, 1]), ("b", [4])]
    if version >= 2:
        assert theirs.generation_id == 7
    if version >= 3:
        assert theirs.rack_id == "rack-1"


@pytest.mark.parametrize("version", range(4))
def test_assignments_cross_kafka_python_both_ways(version):
    tp = KafkaAssignment.TopicPartition
    theirs = KafkaAssignment(version=version, assigned_partitions=[tp(topic="t", partitions=[0, 2])], user_data=None)
    assert decode_assignment(theirs.encode()) == Assignment([TopicPartition("t", 0), TopicPartition("t", 2)])
    ours = encode_assignment(Assignment([TopicPartition("t", 2), TopicPartition("u", 1)], b"x"), version)
    assert ours == KafkaAssignment(version=version, assigned_partitions=[tp(topic="t", partitions=[2]),
                                                                         tp(topic="u", partitions=[1])],
                                   user_data=b"x").encode()
    decoded = KafkaAssignment.decode(ours)
    assert sorted(decoded.partitions()) == [("t", 2), ("u", 1)] and decoded.user_data == b"x"


def test_kafka_pythons_eager_assignors_share_raftkas_names_and_subscriptions():
    for theirs in (KafkaRange, KafkaRoundRobin):
        assert theirs.name in ASSIGNORS  # the JoinGroup protocol names match, so a mixed group agrees on one
        data = theirs.metadata({"b", "a"}).encode()
        assert sorted(decode_subscription(data).topics) == ["a", "b"]
