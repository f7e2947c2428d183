"""AlterPartition in batches (#scale): a broker sends every pending ISR change in one request,
at most one in flight (AlterPartitionManager), and the controller commits one request's changes
as one entry, with an error code per partition."""
from __future__ import annotations

import asyncio

from raftka.broker.controller_channel import AlterPartitionManager
from raftka.common import errors
from raftka.common.errors import RaftkaError
from raftka.raft_meta.metadata.records import PartitionChangeRecord, encode_entry
from raftka.raft_meta.metadata.state import metadata_record

from tests.test_controller_decisions import controller, ok, three_brokers_and_a_topic


def _shrink_body(qc, epochs, broker_id, indexes):
    """broker_id's AlterPartition dropping one follower from each partition of ``indexes``."""
    topic = qc.image.topics["t"]
    partitions = []
    for i in indexes:
        p = topic.partitions[i]
        dropped = next(r for r in p.isr if r != broker_id)
        isr = [b for b in p.isr if b != dropped]
        partitions.append({"partition_index": i, "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                           "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": epochs[b]} for b in isr]})
    return {"broker_id": broker_id, "broker_epoch": epochs[broker_id],
            "topics": [{"topic_id": topic.topic_id, "partitions": partitions}]}


def test_one_alter_partition_request_is_one_commit_with_an_answer_per_partition():
    async def scenario():
        qc, raft = controller()
        epochs = await three_brokers_and_a_topic(qc, partitions=30)
        led = [i for i, p in enumerate(qc.image.topics["t"].partitions) if p.leader == 1]
        assert len(led) >= 5
        body = _shrink_body(qc, epochs, 1, led)
        stale = body["topics"][0]["partitions"][0]
        stale["partition_epoch"] += 7  # refused alone: INVALID_UPDATE_VERSION
        before = len(raft.entries)
        out = await ok(qc.alter_partition, body)
        assert len(raft.entries) == before + 1  # one commit for the whole request
        entry = raft.entries[-1]
        assert all(isinstance(r, PartitionChangeRecord) for r in entry)
        assert sorted(r.partition for r in entry) == sorted(led[1:])
        answers = {a["partition_index"]: a for a in out["topics"][0]["partitions"]}
        assert answers[led[0]]["error_code"] == errors.INVALID_UPDATE_VERSION
        for i in led[1:]:
            p = qc.image.topics["t"].partitions[i]
            assert answers[i]["error_code"] == errors.NONE and len(p.isr) == 2
            assert (answers[i]["isr"], answers[i]["partition_epoch"]) == (list(p.isr), p.partition_epoch)
    asyncio.run(scenario())


def test_a_batch_refused_at_replay_is_decided_again_without_the_partition_that_moved():
    async def scenario():
        qc, raft = controller()
        epochs = await three_brokers_and_a_topic(qc, partitions=9)
        led = [i for i, p in enumerate(qc.image.topics["t"].partitions) if p.leader == 1]
        body = _shrink_body(qc, epochs, 1, led)
        moved = qc.image.topics["t"].partitions[led[0]]

        async def another_change_sneaks_in():  # commits between the decision and its commit
            await raft.submit(metadata_record(encode_entry([PartitionChangeRecord(
                "t", qc.image.topics["t"].topic_id, led[0], moved.partition_epoch, None, moved.isr)])), 5000)
        raft.before_next_commit = another_change_sneaks_in
        out = await ok(qc.alter_partition, body)
        answers = {a["partition_index"]: a["error_code"] for a in out["topics"][0]["partitions"]}
        assert answers == {led[0]: errors.INVALID_UPDATE_VERSION, **{i: errors.NONE for i in led[1:]}}
        assert sorted(r.partition for r in raft.entries[-1]) == sorted(led[1:])
    asyncio.run(scenario())


def test_pending_isr_changes_go_out_as_one_request_and_one_in_flight():
    async def scenario():
        sent: list[dict] = []
        release = asyncio.Event()

        async def send(body):
            sent.append(body)
            await release.wait()
            answers = [{"partition_index": p["partition_index"], "leader_id": 1, "leader_epoch": p["leader_epoch"],
                        "isr": [m["broker_id"] for m in p["new_isr_with_epochs"]],
                        "partition_epoch": p["partition_epoch"] + 1,
                        "error_code": errors.FENCED_LEADER_EPOCH if p["partition_index"] == 3 else errors.NONE}
                       for t in body["topics"] for p in t["partitions"]]
            return errors.NONE, {"topics": [{"topic_id": "a", "partitions": answers}]}

        manager = AlterPartitionManager(send, lambda: {"broker_id": 1, "broker_epoch": 5})

        def item(i):
            return {"partition_index": i, "leader_epoch": 2, "partition_epoch": 4,
                    "new_isr_with_epochs": [{"broker_id": 1, "broker_epoch": 5}]}
        first = [manager.submit("a", item(i)) for i in range(100)]
        await asyncio.sleep(0.01)
        assert len(sent) == 1 and len(sent[0]["topics"][0]["partitions"]) == 100
        assert (sent[0]["broker_id"], sent[0]["broker_epoch"]) == (1, 5)
        later = [manager.submit("a", item(i)) for i in range(100, 110)]
        assert manager.submit("a", item(100)).exception().code == errors.INVALID_REQUEST  # one per partition
        await asyncio.sleep(0.01)
        assert len(sent) == 1  # the next round waits for the answer in flight
        release.set()
        done = await asyncio.gather(*first, *later, return_exceptions=True)
        assert len(sent) == 2 and len(sent[1]["topics"][0]["partitions"]) == 10
        assert isinstance(done[3], RaftkaError) and done[3].code == errors.FENCED_LEADER_EPOCH
        assert all(d["partition_epoch"] == 5 for i, d in enumerate(done) if i != 3)
        assert manager.requests_sent == 2
    asyncio.run(scenario())


def test_a_refused_request_fails_every_change_in_it_and_the_next_one_goes_out():
    async def scenario():
        answers = iter([(errors.STALE_BROKER_EPOCH, {"error_message": "stale"}),
                        (errors.NONE, {"topics": []})])

        async def send(body):
            return next(answers)
        manager = AlterPartitionManager(send, lambda: {"broker_id": 1, "broker_epoch": 5})
        item = {"partition_index": 0, "leader_epoch": 2, "partition_epoch": 4, "new_isr_with_epochs": []}
        results = await asyncio.gather(manager.submit("a", dict(item)), manager.submit("b", dict(item)),
                                       return_exceptions=True)
        assert [r.code for r in results] == [errors.STALE_BROKER_EPOCH] * 2
        left_out = await asyncio.gather(manager.submit("a", item), return_exceptions=True)
        assert left_out[0].code == errors.UNKNOWN_SERVER_ERROR  # the answer did not name it
    asyncio.run(scenario())
