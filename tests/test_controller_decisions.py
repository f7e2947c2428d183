"""QuorumController's decisions in one process, with a Raft stand-in that commits at once.

The real quorum is tested with processes (test_controller_metadata.py); here a stand-in for
RaftClient applies each submitted record to the real ControllerStateMachine + MetadataLoader
right away, so the tests can look at every committed entry and make commits race.
"""
from __future__ import annotations

import asyncio
import uuid

import pytest

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.broker.controller_channel import KAFKA_VERSIONS
from raftka.common.codec import CodecError, decoder, encoder
from raftka.common.messages import KAFKA_API
from raftka.common.meta_properties import CLUSTER_ID
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


# What each handler serves, so a test body goes through the codec first (the handlers rely on the
# decoder for types and ranges, as they do behind the real listener).
API_OF = {"broker_registration": ApiKey.BROKER_REGISTRATION, "broker_heartbeat": ApiKey.BROKER_HEARTBEAT,
          "create_topics": ApiKey.CREATE_TOPICS, "alter_configs": ApiKey.ALTER_CONFIGS,
          "describe_configs": ApiKey.DESCRIBE_CONFIGS, "alter_partition": ApiKey.ALTER_PARTITION,
          "delete_topics": ApiKey.DELETE_TOPICS, "unregister_broker": ApiKey.UNREGISTER_BROKER}


async def ok(handler, body):
    api_key = API_OF[handler.__name__]
    # As the listener hands it over: decoded at the version a broker sends.
    request = KAFKA_API[api_key][0]
    version = KAFKA_VERSIONS.get(api_key, max(request.versions()))
    try:
        body = decoder(request, version)(encoder(request, version)(body))
    except CodecError as error:
        raise errors.InvalidRequestError(error.message) from None
    code, out = await handler(version, body)
    assert code == errors.NONE, (errors.name_of(code), out)
    return out


def registration(broker_id, incarnation=None):
    # controller() formats no log dir: its cluster id is the default one.
    return {"broker_id": broker_id, "cluster_id": CLUSTER_ID, "incarnation_id": incarnation or uuid.uuid4().hex,
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + broker_id}]}


async def three_brokers_and_a_topic(qc, partitions=6):
    epochs = {}
    for b in (1, 2, 3):
        out = await ok(qc.broker_registration, registration(b))
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


def test_alter_and_describe_configs_answer_in_kafkas_shapes():
    async def scenario():
        qc, raft = controller()
        await three_brokers_and_a_topic(qc, partitions=2)
        with pytest.raises(errors.InvalidRequestError):  # the codec refuses it, as the listener does
            await ok(qc.describe_configs, {"resources": [{"resource_type": 2, "resource_name": ["not", "a", "name"]}]})
        out = await ok(qc.alter_configs, {"resources": [{"resource_type": 2, "resource_name": "t",
                                                         "configs": [{"name": "retention.ms", "value": "2000"}]}]})
        assert out["responses"][0]["error_code"] == errors.NONE
        out = await ok(qc.describe_configs, {"resources": [{"resource_type": 2, "resource_name": "t",
                                                            "configuration_keys": None}]})
        configs = {c["name"]: c for c in out["results"][0]["configs"]}
        # Kafka's shape: values as strings, the source (1 a topic override, 5 the default), the type
        assert configs["retention.ms"]["value"] == "2000" and configs["retention.ms"]["config_source"] == 1
        assert configs["retention.ms"]["config_type"] == 5 and configs["segment.bytes"]["config_source"] == 5
        answer = KAFKA_API[ApiKey.DESCRIBE_CONFIGS][1]
        for version in answer.versions():  # what the broker relays encodes at every client version
            assert decoder(answer, version)(encoder(answer, version)(out))["results"][0]["resource_name"] == "t"
        out = await ok(qc.describe_configs, {"resources": [{"resource_type": 2, "resource_name": "t",
                                                            "configuration_keys": ["retention.ms"]},
                                                           {"resource_type": 4, "resource_name": "1"}]})
        assert [c["name"] for c in out["results"][0]["configs"]] == ["retention.ms"]
        assert out["results"][1]["error_code"] == errors.INVALID_REQUEST
    asyncio.run(scenario())


@pytest.mark.parametrize("body", [
    {**registration(1), "broker_id": -1},
    {**registration(1), "incarnation_id": "x"},  # not a uuid: the codec refuses it
    {**registration(1), "incarnation_id": "0" * 32},  # Kafka's "no id"
    {**registration(1), "listeners": []},
    {**registration(1), "listeners": registration(1)["listeners"] * 2},  # one name twice
    {**registration(1), "listeners": [{"name": "PLAINTEXT", "host": "", "port": 9092}]},
    {**registration(1), "rack": 7},
])
def test_a_bad_registration_is_refused_before_anything_is_committed(body):
    async def scenario():
        qc, raft = controller()
        with pytest.raises(errors.InvalidRequestError):  # the listener's check, before the handler
            await ok(qc.broker_registration, body)
        assert raft.entries == []
    asyncio.run(scenario())


def test_topic_configs_go_out_as_kafkas_strings_with_their_source_and_type():
    """The controller keeps typed config values; Kafka's DescribeConfigs and CreateTopics answers
    carry strings ("true", "a,b", "604800000"), where each value came from (1 a topic override,
    5 the default) and its type, and they encode at every DescribeConfigs version a client uses."""
    configs = {c["name"]: c for c in quorum_controller._topic_configs(
        {"retention.ms": 604_800_000, "cleanup.policy": ["delete"], "unclean.leader.election.enable": True})}
    assert configs["retention.ms"]["value"] == "604800000" and configs["retention.ms"]["config_source"] == 1
    assert configs["cleanup.policy"]["value"] == "delete" and configs["cleanup.policy"]["config_type"] == 7
    unclean = configs["unclean.leader.election.enable"]
    assert unclean["value"] == "true" and unclean["config_type"] == 1
    assert configs["segment.bytes"]["config_source"] == 5 and configs["segment.bytes"]["value"] == "1073741824"
    assert quorum_controller._config_text(("a", "b")) == "a,b" and quorum_controller._config_text(None) is None
    answer = KAFKA_API[ApiKey.DESCRIBE_CONFIGS][1]
    body = {"results": [{"resource_type": 2, "resource_name": "t", "error_code": 0, "error_message": None,
                         "configs": list(configs.values())}]}
    for version in answer.versions():
        decoded = decoder(answer, version)(encoder(answer, version)(body))
        assert {c["name"]: c["value"] for c in decoded["results"][0]["configs"]}["retention.ms"] == "604800000"
