"""OffsetDelete (api key 47, KIP-496) on the group coordinator, and its admin and CLI sides.

The unit tests drive OffsetDelete bodies into broker/group/coordinator.py over the in-memory
``__consumer_offsets`` of tests/test_groups_coordinator.py and check what Kafka's coordinator
answers: the group-level errors, GROUP_SUBSCRIBED_TO_TOPIC for a topic a member subscribes to
(read from its ConsumerProtocolSubscription), tombstones a reloading coordinator honours, and a
commit still waiting for the ISR that must not come back after a later tombstone. The cluster
test (1 controller + 1 broker, real processes) deletes offsets with kafka-python's
``KafkaAdminClient.delete_group_offsets``, Raftka's ``AdminClient.delete_consumer_group_offsets``
and ``raftka groups delete-offsets``.
"""
from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import pytest

from helpers import wait_for_topic
from raftka.broker.group.group import GroupState
from raftka.broker.group.records import OFFSET_KEY, build_batch, partition_for
from raftka.client import Consumer, NewTopic, Producer, TopicPartition
from raftka.cluster import project_env, wait_until
from raftka.common import errors
from raftka.common.messages.consumer_protocol import CONSUMER_PROTOCOL_SUBSCRIPTION, encode_versioned
from test_groups_coordinator import FakeStore, coordinator, join_body, loaded, run

pytestmark = pytest.mark.timeout(180)


def subscription(*topics: str) -> bytes:
    """A member's JoinGroup metadata: Kafka's ConsumerProtocolSubscription v1."""
    return encode_versioned(CONSUMER_PROTOCOL_SUBSCRIPTION, 1, {"topics": list(topics), "user_data": None,
                                                                "owned_partitions": []})


def commit_body(offsets: dict[tuple[str, int], int], group: str = "g") -> dict:
    """An OffsetCommit from a tool (generation -1, no member): allowed on a group without members."""
    topics: dict[str, list[dict]] = {}
    for (topic, index), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": index, "committed_offset": offset})
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def delete_body(*tps: tuple[str, int], group: str = "g") -> dict:
    topics: dict[str, list[dict]] = {}
    for topic, index in tps:
        topics.setdefault(topic, []).append({"partition_index": index})
    return {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def partition_codes(answer: dict) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition_index"]): p["error_code"] for t in answer["topics"] for p in t["partitions"]}


async def stable_member(c, *topics: str, protocol_type: str = "consumer") -> dict:
    """One member subscribed to ``topics`` joins group g; the group is Stable once it synced."""
    body = {**join_body(protocols=(("range", subscription(*topics)),)), "protocol_type": protocol_type}
    first = await c.join_group(body)
    assert first["error_code"] == errors.MEMBER_ID_REQUIRED
    joined = await c.join_group({**body, "member_id": first["member_id"]})
    assert joined["error_code"] == errors.NONE, joined
    await c.sync_group({"group_id": "g", "generation_id": joined["generation_id"], "member_id": joined["member_id"],
                        "assignments": [{"member_id": joined["member_id"], "assignment": b""}]})
    assert c.groups["g"].is_(GroupState.STABLE)
    return joined


def test_an_empty_group_loses_the_named_offsets_and_a_reloading_coordinator_does_not_bring_them_back():
    async def main():
        store = FakeStore()
        c = await loaded(coordinator(store))
        await c.offset_commit(commit_body({("t", 0): 5, ("t", 1): 6, ("u", 0): 7}))
        answer = await c.offset_delete(delete_body(("t", 0), ("u", 0), ("u", 9)))
        assert answer["error_code"] == errors.NONE
        # u-9 had no committed offset: nothing to delete, answered NONE as Kafka's coordinator does
        assert partition_codes(answer) == {("t", 0): 0, ("u", 0): 0, ("u", 9): 0}
        assert set(c.offsets.committed("g")) == {("t", 1)}
        log = store.logs[partition_for("g", 4)]
        assert [value for _key, value, _ts in log[-2:]] == [None, None]  # the tombstones, after the commit
        assert all(int.from_bytes(key[:2], "big") == OFFSET_KEY for key, _v, _ts in log[-2:])
        again = await loaded(coordinator(store))
        assert set(again.offsets.committed("g")) == {("t", 1)}
        assert again.groups["g"].is_(GroupState.EMPTY)  # the group itself stays (only DeleteGroups removes it)
    run(main())


def test_group_level_errors_come_before_any_partition():
    async def main():
        c = coordinator()
        assert (await c.offset_delete(delete_body(("t", 0))))["error_code"] == errors.NOT_COORDINATOR
        c.elect(partition_for("g", 4), 0)
        loading = await c.offset_delete(delete_body(("t", 0)))
        assert loading == {"error_code": errors.COORDINATOR_LOAD_IN_PROGRESS, "throttle_time_ms": 0, "topics": []}
        await c.partitions[partition_for("g", 4)].task
        assert (await c.offset_delete(delete_body(("t", 0))))["error_code"] == errors.GROUP_ID_NOT_FOUND
        assert (await c.offset_delete(delete_body(("t", 0), group="")))["error_code"] == errors.INVALID_GROUP_ID
        with pytest.raises(errors.InvalidRequestError, match="at most 10000"):
            await c.offset_delete(delete_body(*[("t", i) for i in range(10_001)]))
    run(main())


def test_a_consumer_group_with_members_keeps_the_offsets_of_topics_it_subscribes_to():
    async def main():
        c = await loaded(coordinator())
        await c.offset_commit(commit_body({("t", 0): 5, ("old", 0): 3, ("old", 1): 4}))
        await stable_member(c, "t")
        answer = await c.offset_delete(delete_body(("t", 0), ("old", 0)))
        assert answer["error_code"] == errors.NONE
        assert partition_codes(answer) == {("t", 0): errors.GROUP_SUBSCRIBED_TO_TOPIC, ("old", 0): errors.NONE}
        assert set(c.offsets.committed("g")) == {("t", 0), ("old", 1)}
    run(main())


def test_a_member_whose_subscription_cannot_be_read_protects_every_topic():
    async def main():
        c = await loaded(coordinator())
        await c.offset_commit(commit_body({("old", 0): 3}))
        joined = await stable_member(c, "t")
        member = c.groups["g"].members[joined["member_id"]]
        member.protocols = [(name, b"\x00\x07garbage") for name, _ in member.protocols]
        answer = await c.offset_delete(delete_body(("old", 0)))
        assert partition_codes(answer) == {("old", 0): errors.GROUP_SUBSCRIBED_TO_TOPIC}
        assert ("old", 0) in c.offsets.committed("g")
    run(main())


def test_a_group_with_members_that_is_not_a_consumer_group_keeps_every_offset():
    async def main():
        c = await loaded(coordinator())
        await c.offset_commit(commit_body({("old", 0): 3}))
        await stable_member(c, "t", protocol_type="connect")
        answer = await c.offset_delete(delete_body(("old", 0)))
        assert answer == {"error_code": errors.NON_EMPTY_GROUP, "throttle_time_ms": 0, "topics": []}
        assert ("old", 0) in c.offsets.committed("g")
    run(main())


def test_a_failed_write_answers_the_coordinator_error_and_keeps_the_offsets():
    async def main():
        store = FakeStore()
        c = await loaded(coordinator(store))
        await c.offset_commit(commit_body({("t", 0): 5}))
        store.fail_with = errors.NOT_ENOUGH_REPLICAS
        answer = await c.offset_delete(delete_body(("t", 0)))
        assert partition_codes(answer) == {("t", 0): errors.COORDINATOR_NOT_AVAILABLE}
        assert c.offsets.committed("g")[("t", 0)].offset == 5
    run(main())


class GatedStore(FakeStore):
    """Appends take their log offsets at once and finish when the test opens their gate, as an
    append waits for the ISR after the leader wrote it."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[asyncio.Event] = []
        self.open = True

    async def append(self, partition: int, entries, timeout_ms: int) -> int:
        log = self.logs.setdefault(partition, [])
        base = len(log)
        log.extend((k, v, 1000) for k, v in entries)
        if not self.open:
            gate = asyncio.Event()
            self.gates.append(gate)
            await gate.wait()
        return base


def test_a_commit_written_before_a_tombstone_does_not_come_back_when_it_finishes_later():
    async def main():
        store = GatedStore()
        c = await loaded(coordinator(store))
        await c.offset_commit(commit_body({("t", 0): 1, ("t", 1): 1}))
        store.open = False
        commit = asyncio.ensure_future(c.offset_commit(commit_body({("t", 0): 5})))
        await asyncio.sleep(0)
        delete = asyncio.ensure_future(c.offset_delete(delete_body(("t", 0))))
        await asyncio.sleep(0)
        commit_gate, delete_gate = store.gates
        delete_gate.set()  # the tombstone's wait ends first ...
        assert partition_codes(await delete) == {("t", 0): errors.NONE}
        commit_gate.set()  # ... then the commit before it in the log
        await commit
        assert ("t", 0) not in c.offsets.committed("g")  # as the log says: its last record is the tombstone
        store.open = True
        assert ("t", 0) not in (await loaded(coordinator(store))).offsets.committed("g")
        # A commit after the tombstone counts again.
        await c.offset_commit(commit_body({("t", 0): 8}))
        assert c.offsets.committed("g")[("t", 0)].offset == 8
    run(main())


class BatchCheckingStore(FakeStore):
    """Builds each write's record batch, as the broker's store does (build_batch refuses one past
    BATCH_BYTES_MAX), and counts the writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def append(self, partition: int, entries, timeout_ms: int) -> int:
        build_batch(entries)
        self.writes += 1
        return await super().append(partition, entries, timeout_ms)


def test_tombstones_too_many_for_one_batch_are_written_in_several():
    async def main():
        store = FakeStore()
        c = await loaded(coordinator(store))
        topic = "t" * 249  # Kafka's longest topic name: 5,000 tombstones take ~1.3 MB
        wanted = [(topic, i) for i in range(5000)]
        await c.offset_commit(commit_body({tp: 1 for tp in wanted}))
        checking = BatchCheckingStore()
        checking.logs = store.logs
        c.store = c.offsets.store = checking
        answer = await c.offset_delete(delete_body(*wanted))
        assert set(partition_codes(answer).values()) == {errors.NONE}
        assert checking.writes >= 2 and not c.offsets.committed("g")
    run(main())


# -- on a real cluster ---------------------------------------------------------------------------

FAST = {
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 250,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 1,
    "group.initial.rebalance.delay.ms": 100,
    "group.min.session.timeout.ms": 500,
}


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + 1 broker (real processes), stopped by PID at the end of the module."""
    return module_cluster_factory("offset-delete", controllers=1, brokers=1, configs=FAST)


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster, request_timeout_ms=15_000)


def test_offsets_are_deleted_over_the_wire_by_kafka_python_raftkas_admin_and_the_cli(cluster, admin):
    kafka_admin_module = pytest.importorskip("kafka.admin")
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError

    live, idle = f"live-{uuid.uuid4().hex[:6]}", f"idle-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(live, 2, 1), NewTopic(idle, 2, 1)])
    wait_for_topic(admin, live, 2)
    wait_for_topic(admin, idle, 2)
    group = f"g-{uuid.uuid4().hex[:6]}"
    admin.alter_consumer_group_offsets(group, {TopicPartition(t, p): 3 for t in (live, idle) for p in (0, 1)})

    # Raftka's admin, on a group without members.
    results = admin.delete_consumer_group_offsets(group, [TopicPartition(idle, 0)])
    assert results == {TopicPartition(idle, 0): None}
    assert set(admin.list_consumer_group_offsets(group)) == {TopicPartition(live, 0), TopicPartition(live, 1),
                                                             TopicPartition(idle, 1)}
    with pytest.raises(errors.GroupIdNotFoundError):
        admin.delete_consumer_group_offsets("no-such-group", [TopicPartition(idle, 0)])

    with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        producer.send(live, b"x", partition=0).get(30)
    consumer = Consumer(live, bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                        auto_offset_reset="earliest", session_timeout_ms=3000, heartbeat_interval_ms=300)
    kafka_admin = kafka_admin_module.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers,
                                                      request_timeout_ms=15_000)
    try:
        wait_until(lambda: consumer.poll(timeout_ms=100) is not None and bool(consumer.assignment()), 30,
                   what="the consumer to join and get its partitions")
        # kafka-python, on a group with a member subscribed to `live` only.
        out = kafka_admin.delete_group_offsets(group, [KafkaTopicPartition(live, 1), KafkaTopicPartition(idle, 1)])
        assert out == {KafkaTopicPartition(live, 1): GroupSubscribedToTopicError,
                       KafkaTopicPartition(idle, 1): NoError}
        with pytest.raises(GroupIdNotFoundError):
            kafka_admin.delete_group_offsets("no-such-group", [KafkaTopicPartition(idle, 0)])
        # Raftka's admin names the same refusal with a typed error.
        refused = admin.delete_consumer_group_offsets(group, [TopicPartition(live, 0)])
        assert isinstance(refused[TopicPartition(live, 0)], errors.GroupSubscribedToTopicError)
        # The CLI (kafka-consumer-groups --delete-offsets): a refused partition makes exit code 1.
        cli = [sys.executable, "-m", "raftka", "groups", "delete-offsets", "--group", group,
               "--bootstrap-server", cluster.bootstrap_servers]
        out_cli = subprocess.run(cli + ["--topic", f"{live}:1"], capture_output=True, text=True,
                                 env=project_env(), timeout=60)
        assert out_cli.returncode == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in out_cli.stdout, out_cli
    finally:
        kafka_admin.close()
        consumer.close()
    assert set(admin.list_consumer_group_offsets(group)) >= {TopicPartition(live, 0), TopicPartition(live, 1)}
    assert TopicPartition(idle, 1) not in admin.list_consumer_group_offsets(group)
    # Once the member left, the CLI deletes every partition of the topic.
    wait_until(lambda: admin.describe_consumer_groups([group])[0].state == "Empty", 30, what="the group to empty")
    done = subprocess.run(cli + ["--topic", live], capture_output=True, text=True, env=project_env(), timeout=60)
    assert done.returncode == 0 and done.stdout.count("Successful") == 2, done
    assert admin.list_consumer_group_offsets(group) == {}
