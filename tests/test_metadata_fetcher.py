"""A broker-side MetadataFetcher follows a real controller quorum's committed log, across the
loss of the controller it was fetching from, and hands each batch's delta to its loop."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

from raftka.common import errors
from raftka.raft_meta.metadata.fetcher import MetadataFetcher
from raftka.cluster import wait_until
from raftka.cluster.controller_client import controller_request


def create(cluster, name):
    deadline = time.monotonic() + 30
    while True:
        code, out = controller_request(cluster.bootstrap_controllers, 19,
                                       {"topics": [{"name": name, "num_partitions": 2, "replication_factor": 1}]})
        if code == errors.NONE and out["topics"][0]["error_code"] == errors.NONE:
            return
        assert time.monotonic() < deadline, (code, out)
        time.sleep(0.05)


def test_a_fetcher_follows_the_log_and_survives_the_loss_of_its_controller(controller_cluster):
    cluster = controller_cluster
    cluster.wait_for_leader(timeout_s=30)
    code, out = controller_request(cluster.bootstrap_controllers, 62,
                                   {"broker_id": 1, "incarnation_id": uuid.uuid4().hex,
                                    "listeners": {"PLAINTEXT": "127.0.0.1:1"}})
    assert code == errors.NONE, out
    epoch = out["broker_epoch"]
    wait_until(lambda: controller_request(cluster.bootstrap_controllers, 63,
                                          {"broker_id": 1, "broker_epoch": epoch,
                                           "current_metadata_offset": 1 << 40})[1].get("is_fenced") is False,
               20, what="broker 1 unfenced")
    create(cluster, "first")
    updates = []
    deltas = []  # (delta, image, thread) per callback
    first_controller = next(iter(cluster.nodes))
    addresses = ["%s:%d" % cluster.controller_address(n) for n in cluster.nodes]  # first one first

    async def scenario():
        loop_thread = threading.current_thread()
        fetcher = MetadataFetcher(addresses, replica_id=1, on_update=updates.append, max_wait_ms=200,
                                  on_metadata_update=lambda d, i: deltas.append((d, i, threading.current_thread())))
        task = asyncio.create_task(fetcher.run())
        try:
            await wait_async(lambda: "first" in fetcher.image.topics, 20)
            await asyncio.to_thread(cluster.kill, first_controller)
            await asyncio.to_thread(create, cluster, "second")
            await wait_async(lambda: "second" in fetcher.image.topics, 30)
            assert fetcher.errors_seen >= 1  # it did lose its controller and moved on
        finally:
            await fetcher.close()
            await asyncio.wait_for(task, 10)
        return fetcher, loop_thread
    fetcher, loop_thread = asyncio.run(scenario())
    assert updates == sorted(updates) and updates[-1] == fetcher.state.offset
    image = fetcher.image
    assert image.brokers[1].fenced is False and image.brokers[1].broker_epoch == epoch
    assert all(thread is loop_thread for _, _, thread in deltas)  # callbacks ran on the loop
    assert deltas[-1][1] is image
    # Chained deltas tell broker 1 exactly which partitions it must lead.
    created = [d for d, _, _ in deltas if "second" in d.changed_topics]
    assert len(created) == 1
    assert set(created[0].local_changes(1).leaders) == {("second", 0), ("second", 1)}
    offsets = [i.offset for _, i, _ in deltas]
    assert offsets == sorted(offsets)


async def wait_async(predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def test_after_a_snapshot_the_fetcher_hands_over_the_delta_from_its_old_image_to_the_restored_one():
    """A controller whose in-memory window moved past the fetcher's offset answers with a
    snapshot; the callback's delta must still say what changed for this broker (in process:
    a real ControllerService + RPC listener over a commit-at-once Raft stand-in)."""
    from raftka.common.server_config import server_config
    from raftka.raft_meta.controller.quorum_controller import QuorumController
    from raftka.raft_meta.controller.rpc import RpcServer
    from raftka.raft_meta.controller.service import ControllerService
    from raftka.raft_meta.metadata.state import ControllerStateMachine, metadata_record
    from raftka.raft_meta.metadata.loader import MetadataLoader
    from raftka.raft_meta.metadata.records import (
        PartitionChangeRecord, RegisterBrokerRecord, RemoveTopicRecord, TopicRecord, UnfenceBrokerRecord,
        encode_entry,
    )

    class CommitAtOnce:
        def __init__(self, state):
            self.state, self.index, self.term, self.is_leader, self.leader_id = state, 1, 1, True, 1

        async def submit(self, record, timeout_ms):
            self.index += 1
            return self.state.apply(record, self.index)

    async def scenario():
        config = server_config({"process.roles": "controller", "node.id": "1",
                                "controller.quorum.voters": "1@127.0.0.1:9301",
                                "listeners": "CONTROLLER://127.0.0.1:9401", "log.dirs": "unused",
                                "controller.quorum.secret": "s3cret"})
        state = ControllerStateMachine(MetadataLoader(), recent_records_max=2)
        raft = CommitAtOnce(state)
        service = ControllerService(config, raft, state)
        QuorumController(service)
        server = RpcServer(service.handle)
        await server.start("127.0.0.1", 0)
        calls = []
        fetcher = MetadataFetcher([f"127.0.0.1:{server.port}"], replica_id=7, max_wait_ms=0,
                                  on_metadata_update=lambda d, i: calls.append((d, i)))
        restores = []
        real_restore = fetcher.state.restore
        fetcher.state.restore = lambda snapshot: (restores.append(1), real_restore(snapshot))

        async def commit(*records):
            result = await raft.submit(metadata_record(encode_entry(list(records))), 1000)
            assert isinstance(result, list), result
        try:
            await commit(RegisterBrokerRecord(7, "i", {"PLAINTEXT": "127.0.0.1:1"}, None))
            await commit(UnfenceBrokerRecord(7, 2))
            await commit(TopicRecord("old", "OLD", ((7,),), {}), TopicRecord("kept", "KEPT", ((7,), (8, 7)), {}))
            await fetcher.fetch_once()  # offset 0 is behind the window of 2: a snapshot
            assert calls[-1][1].topics.keys() == {"old", "kept"}
            assert set(calls[-1][0].local_changes(7).leaders) == {("old", 0), ("kept", 0)}
            # The broker falls behind: delete one topic, move a leader, create another, and more
            # records than the window holds, so the next answer is a snapshot again.
            await commit(RemoveTopicRecord("old", "OLD"))
            await commit(PartitionChangeRecord("kept", "KEPT", 0, 0, -1, None))
            await commit(TopicRecord("new", "NEW", ((8, 7),), {}))
            await fetcher.fetch_once()
            assert len(restores) == 2  # both answers were snapshots
            delta, image = calls[-1]
            assert image == state.metadata.image and delta.image is calls[-2][1]
            changes = delta.local_changes(7)
            assert changes.deletes == {("old", 0)}
            assert set(changes.followers) == {("kept", 0), ("new", 0)} and not changes.leaders
        finally:
            await server.close()
    asyncio.run(scenario())
