"""CreatePartitions (Kafka's api 37): the controller's decisions, the PartitionRecord it commits
(replay, retries, snapshots), and a real 1 controller + 3 broker cluster driven by kafka-python's
KafkaAdminClient and Raftka's own AdminClient, with a producer writing to a new partition and a
group consumer reading it after the rebalance the new partition count triggers.

The decisions run on the in-process controller of test_controller_decisions.py (a Raft stand-in
that commits at once, so every committed entry can be looked at and commits can be made to race).
"""
from __future__ import annotations

import asyncio
import uuid

import pytest

from helpers import wait_for_topic
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.broker.controller_channel import KAFKA_VERSIONS
from raftka.common.codec import decoder, encoder
from raftka.common.messages import KAFKA_API
from raftka.raft_meta.controller import quorum_controller
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import EMPTY_IMAGE, PartitionRegistration, image_from_bytes, image_to_bytes
from raftka.raft_meta.metadata.records import (
    FenceBrokerRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord, UnfenceBrokerRecord, decode_entry,
    encode_entry,
)
from test_controller_decisions import controller, ok, three_brokers_and_a_topic


# -- the controller's decisions ------------------------------------------------------------------

async def create_partitions(qc, topics, *, validate_only=False, timeout_ms=30_000):
    """CreatePartitions as the listener hands it to the handler: encoded and decoded at the version
    a broker forwards it at. Returns {topic: (error code, message)}."""
    request = KAFKA_API[ApiKey.CREATE_PARTITIONS][0]
    version = KAFKA_VERSIONS[ApiKey.CREATE_PARTITIONS]
    body = {"topics": [{"name": name, "count": count, "assignments": None if assignments is None
                        else [{"broker_ids": list(r)} for r in assignments]}
                       for name, count, assignments in topics],
            "timeout_ms": timeout_ms, "validate_only": validate_only}
    body = decoder(request, version)(encoder(request, version)(body))
    code, out = await qc.create_partitions(version, body)
    assert code == errors.NONE, out
    response = KAFKA_API[ApiKey.CREATE_PARTITIONS][1]
    decoder(response, version)(encoder(response, version)(out))  # the answer fits Kafka's shape
    return {r["name"]: (r["error_code"], r["error_message"]) for r in out["results"]}


def run(scenario):
    asyncio.run(scenario())


def test_new_partitions_get_the_topics_replication_factor_and_start_led_by_their_first_replica():
    async def scenario():
        qc, raft = controller()
        await three_brokers_and_a_topic(qc, partitions=3)  # replication factor 3
        committed = len(raft.entries)
        assert await create_partitions(qc, [("t", 5, None)]) == {"t": (errors.NONE, None)}
        entry = raft.entries[committed]
        assert len(raft.entries) == committed + 1  # one atomic entry for the topic
        assert [type(r) for r in entry] == [PartitionRecord, PartitionRecord]
        assert [r.partition for r in entry] == [3, 4]
        topic = qc.image.topics["t"]
        assert len(topic.partitions) == 5
        for p in topic.partitions[3:]:
            assert sorted(p.replicas) == [1, 2, 3]
            assert p.isr == p.replicas and p.leader == p.replicas[0]
            assert (p.leader_epoch, p.partition_epoch) == (0, 0)
        assert topic.partitions[3].leader != topic.partitions[4].leader  # leadership rotates
    run(scenario)


def test_a_count_not_above_the_current_one_is_invalid_partitions_with_kafkas_message():
    async def scenario():
        qc, raft = controller()
        await three_brokers_and_a_topic(qc, partitions=3)
        committed = len(raft.entries)
        answers = await create_partitions(qc, [("t", 2, None)])
        assert answers == {"t": (errors.INVALID_PARTITIONS,
                                 "Topic currently has 3 partitions, which is higher than the requested 2.")}
        answers = await create_partitions(qc, [("t", 3, None)])
        assert answers == {"t": (errors.INVALID_PARTITIONS, "Topic already has 3 partitions.")}
        answers = await create_partitions(qc, [("t", quorum_controller.PARTITIONS_MAX + 1, None)])
        assert answers["t"][0] == errors.INVALID_PARTITIONS and "at most" in answers["t"][1]
        answers = await create_partitions(qc, [("nope", 4, None)])
        assert answers["nope"][0] == errors.UNKNOWN_TOPIC_OR_PARTITION
        assert len(raft.entries) == committed
        assert len(qc.image.topics["t"].partitions) == 3
    run(scenario)


def test_each_topic_is_answered_on_its_own_and_a_name_given_twice_is_refused():
    async def scenario():
        qc, _ = controller()
        await three_brokers_and_a_topic(qc, partitions=2)
        await ok(qc.create_topics, {"topics": [{"name": "u", "num_partitions": 1, "replication_factor": 2}]})
        answers = await create_partitions(qc, [("t", 1, None), ("u", 3, None), ("t", 4, None)])
        assert answers["t"] == (errors.INVALID_REQUEST, "Duplicate topic name.")
        assert answers["u"] == (errors.NONE, None)
        assert len(qc.image.topics["t"].partitions) == 2
        assert [len(p.replicas) for p in qc.image.topics["u"].partitions] == [2, 2, 2]
    run(scenario)


@pytest.mark.parametrize("assignments, words", [
    ([[1, 2, 3]], "2 additional partition(s), but 1 assignment(s)"),
    ([[1, 2, 3], [1, 1, 2]], "the broker 1 more than once"),
    ([[1, 2, 3], [1, 2, 9]], "broker 9, but no such broker is registered"),
    ([[1, 2, 3], [1, 2]], "2 replica(s), but the topic's partitions have 3"),
    ([[1, 2, 3], []], "an empty replica list"),
])
def test_a_bad_manual_assignment_is_invalid_replica_assignment_and_commits_nothing(assignments, words):
    async def scenario():
        qc, raft = controller()
        await three_brokers_and_a_topic(qc, partitions=3)
        committed = len(raft.entries)
        code, message = (await create_partitions(qc, [("t", 5, assignments)]))["t"]
        assert code == errors.INVALID_REPLICA_ASSIGNMENT, message
        assert words in message
        assert len(raft.entries) == committed
    run(scenario)


def test_a_manual_assignment_is_used_and_a_fenced_replica_starts_outside_the_isr():
    async def scenario():
        qc, _ = controller()
        epochs = await three_brokers_and_a_topic(qc, partitions=1)
        await qc.commit([FenceBrokerRecord(2, epochs[2])])
        answers = await create_partitions(qc, [("t", 3, [[2, 3, 1], [3, 1, 2]])])
        assert answers == {"t": (errors.NONE, None)}
        p1, p2 = qc.image.topics["t"].partitions[1:]
        assert (p1.replicas, p1.isr, p1.leader) == ((2, 3, 1), (3, 1), 3)  # leader: first unfenced replica
        assert (p2.replicas, p2.isr, p2.leader) == ((3, 1, 2), (3, 1), 3)
        for b in (1, 3):
            await qc.commit([FenceBrokerRecord(b, epochs[b])])
        code, message = (await create_partitions(qc, [("t", 4, [[1, 2, 3]])]))["t"]
        assert code == errors.INVALID_REPLICA_ASSIGNMENT and "fenced" in message
        code, _ = (await create_partitions(qc, [("t", 4, None)]))["t"]
        assert code == errors.INVALID_REPLICATION_FACTOR  # 3 replicas, no unfenced broker to place them on
    run(scenario)


def test_validate_only_decides_and_commits_nothing():
    async def scenario():
        qc, raft = controller()
        await three_brokers_and_a_topic(qc, partitions=3)
        committed = len(raft.entries)
        assert await create_partitions(qc, [("t", 6, None)], validate_only=True) == {"t": (errors.NONE, None)}
        answers = await create_partitions(qc, [("t", 2, None)], validate_only=True)
        assert answers["t"][0] == errors.INVALID_PARTITIONS
        assert len(raft.entries) == committed and len(qc.image.topics["t"].partitions) == 3
    run(scenario)


def test_partitions_added_meanwhile_refuse_the_stale_decision_which_is_taken_again():
    async def scenario():
        qc, raft = controller()
        await three_brokers_and_a_topic(qc, partitions=3)
        topic_id = qc.image.topics["t"].topic_id

        def commit_elsewhere(record):  # another request's entry, committed before ours
            raft.index += 1
            raft.state.apply(b"M" + encode_entry([record]), raft.index)

        async def another_request_wins():  # runs inside the next submit, before our entry commits
            commit_elsewhere(PartitionRecord(topic_id, 3, (3, 1, 2), (3, 1, 2), 3))
        raft.before_next_commit = another_request_wins
        assert await create_partitions(qc, [("t", 5, None)]) == {"t": (errors.NONE, None)}
        partitions = qc.image.topics["t"].partitions
        assert len(partitions) == 5 and partitions[3].replicas == (3, 1, 2)  # the winner's partition 3 stays
        assert [r.partition for r in raft.entries[-1]] == [4]  # decided again: only partition 4 was left

        async def slow_winner():
            await asyncio.sleep(0.05)
            commit_elsewhere(PartitionRecord(topic_id, 5, (1, 2, 3), (1, 2, 3), 1))
        raft.before_next_commit = slow_winner
        code, message = (await create_partitions(qc, [("t", 7, None)], timeout_ms=20))["t"]
        assert code == errors.REQUEST_TIMED_OUT, message  # the retry found the request's deadline passed
        assert len(qc.image.topics["t"].partitions) == 6
    run(scenario)


# -- the PartitionRecord: replay, retries, snapshots -------------------------------------------------

TOPIC_ID = uuid.UUID(int=7).hex


def image_with_topic(partitions=2):
    delta = MetadataDelta(EMPTY_IMAGE)
    for b in (1, 2, 3):
        assert "error" not in delta.replay(RegisterBrokerRecord(b, uuid.UUID(int=b).hex, {"PLAINTEXT": f"h:{b}"}), b)
        assert "error" not in delta.replay(UnfenceBrokerRecord(b, b), 4)
    replicas = tuple((1, 2, 3)[i % 3:] + (1, 2, 3)[:i % 3] for i in range(partitions))
    assert "error" not in delta.replay(TopicRecord("t", TOPIC_ID, replicas, {"retention.ms": 1000}), 5)
    return delta.apply()


def test_a_partition_record_crosses_the_log_unchanged():
    record = PartitionRecord(TOPIC_ID, 2, (3, 1, 2), (3, 1), 3)
    assert decode_entry(encode_entry([record])) == [record]


def test_replay_appends_the_partition_and_a_retried_commit_is_a_no_op():
    image = image_with_topic()
    record = PartitionRecord(TOPIC_ID, 2, (3, 1, 2), (3, 1), 3)
    delta = MetadataDelta(image)
    assert delta.replay(record, 10) == {"topic": "t", "partition": 2}
    assert delta.replay(record, 11) == {"topic": "t", "partition": 2}  # the same entry committed again
    after = delta.apply()
    assert after.topics["t"].partitions[2] == PartitionRegistration((3, 1, 2), (3, 1), 3, 0, 0)
    assert after.topics["t"].partitions[:2] == image.topics["t"].partitions
    assert after.topics["t"].configs == image.topics["t"].configs
    changes = delta.local_changes(3)
    assert (("t", 2) in changes.leaders, ("t", 2) in MetadataDelta(image).local_changes(3).leaders) == (True, False)
    assert ("t", 2) in delta.local_changes(1).followers


@pytest.mark.parametrize("record, code", [
    (PartitionRecord(TOPIC_ID, 1, (2, 3, 1), (2, 3, 1), 2), errors.NONE),  # partition 1 exactly as it is
    (PartitionRecord(TOPIC_ID, 1, (1, 2, 3), (1, 2, 3), 1), errors.INVALID_UPDATE_VERSION),  # exists, differs
    (PartitionRecord(TOPIC_ID, 3, (1, 2, 3), (1, 2, 3), 1), errors.INVALID_REQUEST),  # leaves a gap
    (PartitionRecord(uuid.UUID(int=8).hex, 2, (1, 2, 3), (1, 2, 3), 1), errors.UNKNOWN_TOPIC_ID),
    (PartitionRecord(TOPIC_ID, 2, (1, 1, 3), (1, 3), 1), errors.INVALID_REPLICA_ASSIGNMENT),
    (PartitionRecord(TOPIC_ID, 2, (1, 2, 3), (1, 4), 1), errors.INVALID_REQUEST),  # ISR member not a replica
    (PartitionRecord(TOPIC_ID, 2, (1, 2, 3), (2, 3), 1), errors.INVALID_REQUEST),  # leader outside the ISR
    (PartitionRecord(TOPIC_ID, 2, (1, 2, 3), (), 1), errors.INVALID_REQUEST),
])
def test_replay_refuses_a_partition_record_that_does_not_extend_the_topic(record, code):
    image = image_with_topic()
    delta = MetadataDelta(image)
    result = delta.replay(record, 10)
    assert result.get("error", errors.NONE) == code, result
    assert delta.apply().topics["t"].partitions == image.topics["t"].partitions


def test_an_entry_of_partitions_is_replayed_whole_or_not_at_all():
    from raftka.raft_meta.metadata.loader import MetadataLoader
    loader = MetadataLoader(image_with_topic())
    good, bad = (PartitionRecord(TOPIC_ID, 2, (1, 2, 3), (1, 2, 3), 1),
                 PartitionRecord(TOPIC_ID, 4, (1, 2, 3), (1, 2, 3), 1))
    assert loader.apply(encode_entry([good, bad]), 20)["error"] == errors.INVALID_REQUEST
    assert len(loader.image.topics["t"].partitions) == 2
    third = PartitionRecord(TOPIC_ID, 3, (2, 3, 1), (2, 3), 2)
    assert loader.apply(encode_entry([good, third]), 21) == [{"topic": "t", "partition": 2},
                                                              {"topic": "t", "partition": 3}]
    assert len(loader.image.topics["t"].partitions) == 4


def test_a_snapshot_holds_the_added_partitions():
    image = image_with_topic()
    delta = MetadataDelta(image)
    for index, leader in ((2, 3), (3, 1)):
        assert "error" not in delta.replay(PartitionRecord(TOPIC_ID, index, (leader, 2), (leader,), leader), 30)
    after = delta.apply()
    restored = image_from_bytes(image_to_bytes(after))
    assert restored == after
    assert len(restored.topics["t"].partitions) == 4 and restored.topics["t"].partitions[3].isr == (1,)


# -- a real cluster: 1 controller + 3 brokers --------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 3 brokers, stopped by PID at the end of the module."""
    return module_cluster_factory("create-partitions", controllers=1, brokers=3)


def test_added_partitions_take_writes_and_a_group_reads_them_after_its_rebalance(cluster, module_admin_factory):
    """kafka-python's KafkaAdminClient and Raftka's AdminClient each add partitions; a producer
    writes to the newest one; a group consumer subscribed before the change (metadata refreshed
    every 500 ms) is rebalanced onto all five partitions and reads that record."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import NewPartitions as KafkaNewPartitions
    from raftka.client import Consumer, NewPartitions, NewTopic, Producer, TopicPartition
    from raftka.client.errors import InvalidPartitionsError
    from raftka.cluster import wait_until

    admin = module_admin_factory(cluster)
    admin.create_topics([NewTopic("grow", 2, 2)])
    wait_for_topic(admin, "grow", 2)
    consumer = Consumer("grow", bootstrap_servers=cluster.bootstrap_servers, group_id="growers",
                        auto_offset_reset="earliest", metadata_max_age_ms=500)
    kafka_admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=20_000)
    try:
        wait_until(lambda: consumer.poll(200) is not None and len(consumer.assignment()) == 2, 30,
                   what="the group's first assignment")
        kafka_admin.create_partitions({"grow": KafkaNewPartitions(3)})
        with pytest.raises(kafka.errors.InvalidPartitionsError):
            kafka_admin.create_partitions({"grow": 2})
        admin.create_partitions({"grow": NewPartitions(5)})
        with pytest.raises(InvalidPartitionsError, match="currently has 5 partitions, which is higher than the "
                                                         "requested 4"):
            admin.create_partitions({"grow": NewPartitions(4)})
        partitions = wait_for_topic(admin, "grow", 5)
        assert [len(p["replicas"]) for p in partitions] == [2] * 5  # the topic's replication factor

        with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
            assert producer.send("grow", b"on-4", partition=4).get(30).partition == 4

        read: list = []

        def rebalanced_and_read() -> bool:
            for records in consumer.poll(500).values():
                read.extend(r for r in records if r.partition == 4)
            return bool(read) and len(consumer.assignment()) == 5
        wait_until(rebalanced_and_read, 60, what="the group rebalanced onto 5 partitions and read partition 4")
        assert consumer.assignment() == {TopicPartition("grow", i) for i in range(5)}
        assert [r.value for r in read] == [b"on-4"]
    finally:
        kafka_admin.close()
        consumer.close()


def test_raftka_topics_alter_partitions_grows_a_topic_and_refuses_to_shrink_it(cluster, module_admin_factory):
    from raftka.client import NewTopic
    from test_cli_tools import ok as ran_ok, one_line_error, raftka

    admin = module_admin_factory(cluster)
    admin.create_topics([NewTopic("cli-grow", 3, 3)])
    wait_for_topic(admin, "cli-grow", 3)
    servers = ("--bootstrap-server", cluster.bootstrap_servers)
    out = ran_ok(raftka("topics", "alter", "cli-grow", "--partitions", "6", *servers))
    assert out.strip() == "Topic cli-grow now has 6 partitions."
    assert len(wait_for_topic(admin, "cli-grow", 6)) == 6
    one_line_error(raftka("topics", "alter", "--topic", "cli-grow", "--partitions", "4", *servers),
                   "Topic currently has 6 partitions, which is higher than the requested 4.", "INVALID_PARTITIONS")
    one_line_error(raftka("topics", "alter", "nope", "--partitions", "4", *servers), "UNKNOWN_TOPIC_OR_PARTITION")


def test_a_v0_request_to_any_broker_is_forwarded_and_answered_at_v0_with_the_assignment_it_gave(
        cluster, module_admin_factory):
    from raftka.client import NewTopic
    from test_broker import kafka_request

    admin = module_admin_factory(cluster)
    admin.create_topics([NewTopic("manual", 1, 2)])
    wait_for_topic(admin, "manual", 1)
    first, second, third = cluster.broker_ids[:3]
    address = cluster.broker_address(third)

    def add(version: int, count: int, assignments: list) -> list:
        return kafka_request(address, ApiKey.CREATE_PARTITIONS, version, {
            "topics": [{"name": "manual", "count": count,
                        "assignments": [{"broker_ids": replicas} for replicas in assignments]}],
            "timeout_ms": 10_000, "validate_only": False})["results"]

    refused = add(1, 3, [[third, second], [second, 99]])
    assert refused[0]["error_code"] == errors.INVALID_REPLICA_ASSIGNMENT and "99" in refused[0]["error_message"]
    assert add(0, 3, [[third, second], [second, first]]) == [
        {"name": "manual", "error_code": errors.NONE, "error_message": None}]
    partitions = wait_for_topic(admin, "manual", 3)
    assert [(p["replicas"], p["leader"]) for p in partitions[1:]] == [([third, second], third),
                                                                      ([second, first], second)]
