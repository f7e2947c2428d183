"""QuorumController's decisions in one process, with a Raft stand-in that commits at once.

The real quorum is tested with processes (test_controller_metadata.py); here a stand-in for
RaftClient applies each submitted record to the real ControllerStateMachine + MetadataLoader
right away, so the tests can look at every committed entry and make commits race.
"""
from __future__ import annotations

import asyncio

import pytest

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.msgpack_bodies import CONTROLLER_REQUESTS
from raftka.raft_meta.controller import quorum_controller
from raftka.common.server_config import server_config
from raftka.raft_meta.controller.quorum_controller import QuorumController
from raftka.raft_meta.controller.service import ControllerService
from raftka.raft_meta.metadata.state import ControllerStateMachine, metadata_record
from raftka.raft_meta.metadata.loader import MetadataLoader
from raftka.raft_meta.metadata.records import (
    FenceBrokerRecord, PartitionChangeRecord, UnfenceBrokerRecord, decode_entry, encode_entry,
)


class CommitAtOnce:
    """Stands in for RaftClient: the active controller, committing every record immediately."""

    def __init__(self, state: ControllerStateMachine) -> None:
        self.state = state
        self.index = 1
        self.term = 1
        self.is_leader = True
        self.leader_id = 1
        self.entries: list[list] = []  # decoded metadata entries, in commit order
        self.before_next_commit = None  # async hook run once before the next commit

    async def submit(self, record: bytes, timeout_ms: int):
        if self.before_next_commit is not None:
            hook, self.before_next_commit = self.before_next_commit, None
            await hook()
        self.index += 1
        if record[:1] == b"M":
            self.entries.append(decode_entry(record[1:]))
        return self.state.apply(record, self.index)


def controller():
    config = server_config({"process.roles": "controller", "node.id": "1",
                            "controller.quorum.voters": "1@127.0.0.1:9301",
                            "listeners": "CONTROLLER://127.0.0.1:9401", "log.dirs": "unused",
                                "controller.quorum.secret": "s3cret"})
    state = ControllerStateMachine(MetadataLoader())
    raft = CommitAtOnce(state)
    service = ControllerService(config, raft, state)  # type: ignore[arg-type]
    return QuorumController(service), raft


# What each handler serves, so a test body passes the listener's declaration check first (the
# handlers rely on it for types and ranges, as they do behind the real listener).
API_OF = {"broker_registration": ApiKey.BROKER_REGISTRATION, "broker_heartbeat": ApiKey.BROKER_HEARTBEAT,
          "create_topics": ApiKey.CREATE_TOPICS, "alter_configs": ApiKey.ALTER_CONFIGS,
          "describe_configs": ApiKey.DESCRIBE_CONFIGS, "alter_partition": ApiKey.ALTER_PARTITION,
          "delete_topics": ApiKey.DELETE_TOPICS, "metadata": ApiKey.METADATA}


async def ok(handler, body):
    body = CONTROLLER_REQUESTS.check(API_OF[handler.__name__], 0, body)
    code, out = await handler(0, body)
    assert code == errors.NONE, (errors.name_of(code), out)
    return out


async def three_brokers_and_a_topic(qc, partitions=6):
    epochs = {}
    for b in (1, 2, 3):
        out = await ok(qc.broker_registration, {"broker_id": b, "incarnation_id": f"i{b}",
                                                "listeners": {"PLAINTEXT": f"127.0.0.1:{9000 + b}"}})
        epochs[b] = out["broker_epoch"]
        out = await ok(qc.broker_heartbeat, {"broker_id": b, "broker_epoch": epochs[b],
                                             "current_metadata_offset": 1 << 40})
        assert out["is_fenced"] is False
    out = await ok(qc.create_topics, {"topics": [{"name": "t", "num_partitions": partitions,
                                                  "replication_factor": 3}]})
    assert out["topics"][0]["error_code"] == errors.NONE
    return epochs


def test_a_controlled_shutdown_is_one_entry_with_the_fence_and_every_leader_move():
    async def scenario():
        qc, raft = controller()
        epochs = await three_brokers_and_a_topic(qc)
        led_by_3 = [i for i, p in enumerate(qc.image.topics["t"].partitions) if p.leader == 3]
        assert len(led_by_3) == 2
        out = await ok(qc.broker_heartbeat, {"broker_id": 3, "broker_epoch": epochs[3],
                                             "current_metadata_offset": 1 << 40, "want_shut_down": True})
        assert out["should_shut_down"] and out["is_fenced"]
        entry = raft.entries[-1]
        assert isinstance(entry[0], FenceBrokerRecord) and entry[0].broker_id == 3
        assert all(isinstance(r, PartitionChangeRecord) for r in entry[1:]) and len(entry) == 1 + 6
        for p in qc.image.topics["t"].partitions:
            assert p.leader != 3 and 3 not in p.isr
        for i in led_by_3:
            assert qc.image.topics["t"].partitions[i].leader_epoch == 1
        # Coming back: unfenced; the preferred leader returns only once it is in the ISR again.
        out = await ok(qc.broker_heartbeat, {"broker_id": 3, "broker_epoch": epochs[3],
                                             "current_metadata_offset": 1 << 40})
        assert out["is_fenced"] is False and isinstance(raft.entries[-1][0], UnfenceBrokerRecord)
        assert all(p.leader != 3 for p in qc.image.topics["t"].partitions)
    asyncio.run(scenario())


def test_a_fence_decided_on_a_stale_image_is_refused_at_replay_then_decided_again():
    async def scenario():
        qc, raft = controller()
        epochs = await three_brokers_and_a_topic(qc, partitions=3)
        p0 = qc.image.topics["t"].partitions[0]

        async def alter_partition_sneaks_in():  # commits between the decision and its commit
            await raft.submit(metadata_record(encode_entry([PartitionChangeRecord(
                "t", qc.image.topics["t"].topic_id, 0, p0.partition_epoch, None, p0.isr)])), 5000)
        raft.before_next_commit = alter_partition_sneaks_in
        before = len(raft.entries)
        await qc.fence(2, epochs[2])
        fences = [e for e in raft.entries[before:] if isinstance(e[0], FenceBrokerRecord)]
        assert len(fences) == 2  # the first was refused (stale partition epoch), the second applied
        assert qc.image.brokers[2].fenced
        assert all(2 not in p.isr and p.leader != 2 for p in qc.image.topics["t"].partitions)
    asyncio.run(scenario())


def test_a_fence_touching_more_partitions_than_one_entry_holds_finishes_in_further_entries(monkeypatch):
    monkeypatch.setattr(quorum_controller, "PARTITION_CHANGES_PER_ENTRY_MAX", 4)

    async def scenario():
        qc, raft = controller()
        epochs = await three_brokers_and_a_topic(qc, partitions=10)
        before = len(raft.entries)
        await qc.fence(1, epochs[1])
        entries = raft.entries[before:]
        assert [len(e) for e in entries] == [5, 4, 2]  # fence + 4, then 4, then the last 2
        assert all(1 not in p.isr and p.leader != 1 for p in qc.image.topics["t"].partitions)
    asyncio.run(scenario())


def test_metadata_and_describe_configs_answer_in_the_documented_shapes():
    async def scenario():
        qc, raft = controller()
        await three_brokers_and_a_topic(qc, partitions=2)
        out = await ok(qc.metadata, {"topics": ["t", "missing"]})
        assert [b["node_id"] for b in out["brokers"]] == [1, 2, 3]
        assert set(out["brokers"][0]) == {"node_id", "endpoints", "rack", "fenced", "broker_epoch"}
        t, missing = out["topics"]
        assert set(t["partitions"][0]) == {"partition_index", "leader_id", "leader_epoch", "replica_nodes",
                                           "isr_nodes", "partition_epoch"}
        assert isinstance(t["partitions"][0]["replica_nodes"], list)
        assert missing["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
        assert out["metadata_offset"] == raft.state.offset
        with pytest.raises(errors.InvalidRequestError):  # the listener's check refuses it
            await ok(qc.metadata, {"topics": [["not", "a", "name"]]})
        out = await ok(qc.alter_configs, {"resources": [{"resource_type": "topic", "resource_name": "t",
                                                         "configs": {"retention.ms": "2000"}}]})
        assert out["responses"][0]["error_code"] == errors.NONE
        out = await ok(qc.describe_configs, {"resources": [{"resource_type": "topic", "resource_name": "t"}]})
        configs = {c["name"]: c for c in out["results"][0]["configs"]}
        assert configs["retention.ms"]["value"] == 2000 and not configs["retention.ms"]["is_default"]
        assert configs["segment.bytes"]["is_default"]
    asyncio.run(scenario())


@pytest.mark.parametrize("body", [
    {"broker_id": -1, "incarnation_id": "x", "listeners": {}},
    {"broker_id": 1, "incarnation_id": "x", "listeners": {"PLAINTEXT": 9092}},
    {"broker_id": 1, "incarnation_id": "x", "listeners": {}, "rack": 7},
])
def test_a_bad_registration_is_refused_before_anything_is_committed(body):
    async def scenario():
        qc, raft = controller()
        with pytest.raises(errors.InvalidRequestError):  # the listener's check, before the handler
            await ok(qc.broker_registration, body)
        assert raft.entries == []
    asyncio.run(scenario())
