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


def register_unfenced_broker(cluster, broker_id: int = 1) -> int:
    """Register ``broker_id`` (a listener nobody connects to) and wait until it is unfenced, so
    topics can be placed on it; its broker epoch."""
    code, out = controller_request(cluster.bootstrap_controllers, 62,
                                   {"broker_id": broker_id, "cluster_id": cluster.cluster_id,
                                    "incarnation_id": uuid.uuid4().hex,
                                    "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1}]})
    assert code == errors.NONE, out
    epoch = out["broker_epoch"]
    wait_until(lambda: controller_request(cluster.bootstrap_controllers, 63,
                                          {"broker_id": broker_id, "broker_epoch": epoch,
                                           "current_metadata_offset": 1 << 40})[1].get("is_fenced") is False,
               20, what=f"broker {broker_id} unfenced")
    return epoch


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
    epoch = register_unfenced_broker(cluster)
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
            await commit(RegisterBrokerRecord(7, "7" * 32, {"PLAINTEXT": "127.0.0.1:1"}, None))
            await commit(UnfenceBrokerRecord(7, 2))
            await commit(TopicRecord("old", "0" * 31 + "1", ((7,),), {}), TopicRecord("kept", "0" * 31 + "2", ((7,), (8, 7)), {}))
            await fetcher.fetch_once()  # offset 0 is behind the window of 2: a snapshot
            assert calls[-1][1].topics.keys() == {"old", "kept"}
            assert set(calls[-1][0].local_changes(7).leaders) == {("old", 0), ("kept", 0)}
            # The broker falls behind: delete one topic, move a leader, create another, and more
            # records than the window holds, so the next answer is a snapshot again.
            await commit(RemoveTopicRecord("old", "0" * 31 + "1"))
            await commit(PartitionChangeRecord("kept", "0" * 31 + "2", 0, 0, -1, None))
            await commit(TopicRecord("new", "0" * 31 + "3", ((8, 7),), {}))
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


def _in_process_controller(recent_records_max):
    """A real ControllerService + RPC listener over a commit-at-once Raft stand-in."""
    from raftka.common.server_config import server_config
    from raftka.raft_meta.controller.quorum_controller import QuorumController
    from raftka.raft_meta.controller.service import ControllerService
    from raftka.raft_meta.metadata.state import ControllerStateMachine
    from raftka.raft_meta.metadata.loader import MetadataLoader

    class CommitAtOnce:
        def __init__(self, state):
            self.state, self.index, self.term, self.is_leader, self.leader_id = state, 1, 3, True, 1

        async def submit(self, record, timeout_ms):
            self.index += 1
            return self.state.apply(record, self.index)

    config = server_config({"process.roles": "controller", "node.id": "1",
                            "controller.quorum.voters": "1@127.0.0.1:9301",
                            "listeners": "CONTROLLER://127.0.0.1:9401", "log.dirs": "unused",
                            "controller.quorum.secret": "s3cret"})
    state = ControllerStateMachine(MetadataLoader(), recent_records_max=recent_records_max)
    raft = CommitAtOnce(state)
    service = ControllerService(config, raft, state)
    QuorumController(service)
    return service, raft


async def _commit_topics(raft, names):
    from raftka.raft_meta.metadata.state import metadata_record
    from raftka.raft_meta.metadata.records import TopicRecord, encode_entry
    for name in names:
        result = await raft.submit(metadata_record(encode_entry([TopicRecord(name, uuid.uuid4().hex, ((1,),), {})])),
                                   1000)
        assert isinstance(result, list), result


def test_a_fetcher_behind_the_log_start_catches_up_through_fetch_snapshot_in_chunks():
    """The controller keeps 3 entries in its window; a fetcher that fell further behind gets the
    snapshot's id in Kafka's Fetch answer, reads the snapshot with FetchSnapshot in chunks of
    max_bytes (several requests), restores it and fetches on from its end offset as record
    batches. A snapshot id the controller no longer serves is SNAPSHOT_NOT_FOUND, and the next
    Fetch names the current one."""
    from raftka.common.api import ApiKey
    from raftka.raft_meta.controller.rpc import RpcServer

    async def scenario():
        service, raft = _in_process_controller(recent_records_max=3)
        server = RpcServer(service.handle)
        await server.start("127.0.0.1", 0)
        sent = []  # (api key, body) of every request the fetcher makes
        fetcher = MetadataFetcher([f"127.0.0.1:{server.port}"], replica_id=9, max_wait_ms=0, max_bytes=300)
        real_request = fetcher._request

        async def spy(address, api_key, body):
            sent.append((api_key, body))
            return await real_request(address, api_key, body)
        fetcher._request = spy
        try:
            await _commit_topics(raft, [f"t{i}" for i in range(20)])  # offsets 2..21: the window holds 19..21
            assert await fetcher.fetch_once() > 0
            chunks = [b for k, b in sent if k == ApiKey.FETCH_SNAPSHOT]
            assert fetcher.snapshots_loaded == 1 and len(chunks) >= 2  # the snapshot is bigger than 300 bytes
            positions = [b["topics"][0]["partitions"][0]["position"] for b in chunks]
            assert positions[0] == 0 and positions == sorted(positions) and len(set(positions)) == len(positions)
            assert chunks[0]["topics"][0]["partitions"][0]["snapshot_id"]["end_offset"] == raft.index + 1
            assert fetcher.image.topics.keys() == service.state.metadata.image.topics.keys()
            assert fetcher.offset == raft.index and service.observers[9].log_end_offset == 1  # an observer, at its fetch offset
            # Fetching on: records come as batches after the snapshot's end offset.
            await _commit_topics(raft, ["after"])
            sent.clear()
            assert await fetcher.fetch_once() == 1 and "after" in fetcher.image.topics
            assert [k for k, _ in sent] == [ApiKey.FETCH]
            assert sent[0][1]["topics"][0]["partitions"][0]["fetch_offset"] == raft.index
            # A snapshot id the controller does not serve (any more) is refused by name.
            code = (await fetcher._request(fetcher.bootstrap[0], ApiKey.FETCH_SNAPSHOT, {
                "replica_id": 9, "max_bytes": 100, "topics": [{"name": "__cluster_metadata", "partitions": [{
                    "partition": 0, "current_leader_epoch": -1, "snapshot_id": {"end_offset": 5, "epoch": 3},
                    "position": 0}]}]}))["topics"][0]["partitions"][0]["error_code"]
            assert code == errors.SNAPSHOT_NOT_FOUND
            # Behind again: the log moved on past the window, so a new snapshot is named and loaded.
            await _commit_topics(raft, [f"u{i}" for i in range(5)])
            fetcher.state.offset = 3  # as if it had lost the records since (it re-reads them)
            await fetcher.fetch_once()
            assert fetcher.snapshots_loaded == 2 and {f"u{i}" for i in range(5)} <= fetcher.image.topics.keys()
        finally:
            await fetcher.close()
            await server.close()
    asyncio.run(scenario())


def test_metadata_fetch_answers_are_kafka_record_batches_one_per_entry():
    """What a Kafka-speaking observer reads: one v2 batch per committed entry, its base offset the
    entry's offset, one record whose value is the entry's bytes; the high watermark is the last
    committed offset + 1, the log start the oldest offset still served as records."""
    from raftka.common.records import iter_batches, iter_records

    async def scenario():
        service, raft = _in_process_controller(recent_records_max=100)
        await _commit_topics(raft, ["a", "b", "c"])
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": "__cluster_metadata", "partitions": [{
                    "partition": 0, "current_leader_epoch": -1, "fetch_offset": 3, "last_fetched_epoch": -1,
                    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
        code, out = await service.fetch_metadata(12, body)
        partition = out["responses"][0]["partitions"][0]
        assert code == errors.NONE and partition["error_code"] == errors.NONE
        assert partition["high_watermark"] == raft.index + 1 == 5 and partition["log_start_offset"] == 1
        assert "snapshot_id" not in partition
        assert [h.base_offset for _, h in iter_batches(partition["records"])] == [3, 4]
        entries = dict(service.state.recent)
        assert [(r.offset, r.value) for r in iter_records(partition["records"])] == [(3, entries[3]), (4, entries[4])]
        # max_bytes keeps the first batch whatever its size, then stops before going over
        body["max_bytes"] = 1
        body["topics"][0]["partitions"][0]["fetch_offset"] = 0
        _, out = await service.fetch_metadata(12, body)
        assert [h.base_offset for _, h in iter_batches(out["responses"][0]["partitions"][0]["records"])] == [2]
        # only __cluster_metadata-0 is served
        body["topics"][0]["topic"] = "orders"
        code, _ = await service.fetch_metadata(12, body)
        assert code == errors.UNKNOWN_TOPIC_OR_PARTITION
    asyncio.run(scenario())
