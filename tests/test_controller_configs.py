"""The active controller's AlterConfigs (Kafka's replace) and IncrementalAlterConfigs (SET,
DELETE, APPEND, SUBTRACT) decisions, in one process with the Raft stand-in of
test_controller_decisions.py: each request is encoded and decoded at the version a broker
forwards it at (as the listener hands it over), and every committed entry is inspected."""
from __future__ import annotations

import asyncio

import pytest

from raftka.broker.controller_channel import KAFKA_VERSIONS
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.codec import decoder, encoder
from raftka.common.configs import ConfigDef
from raftka.common.errors import ConfigError, InvalidRequestError
from raftka.common.messages import KAFKA_API
from raftka.common.messages.admin import CONFIG_OP_APPEND, CONFIG_OP_DELETE, CONFIG_OP_SET, CONFIG_OP_SUBTRACT
from raftka.raft_meta.controller.quorum_controller import incremental_changes
from raftka.raft_meta.metadata.records import ConfigRecord

from test_controller_decisions import controller, ok, three_brokers_and_a_topic

SET, DELETE, APPEND, SUBTRACT = CONFIG_OP_SET, CONFIG_OP_DELETE, CONFIG_OP_APPEND, CONFIG_OP_SUBTRACT


async def call(handler, api_key, body):
    """``handler`` on ``body`` as the controller listener hands it over; the answer's results."""
    request = KAFKA_API[api_key][0]
    version = KAFKA_VERSIONS[api_key]
    code, out = await handler(version, decoder(request, version)(encoder(request, version)(body)))
    assert code == errors.NONE
    return {(r["resource_type"], r["resource_name"]): (errors.name_of(r["error_code"]), r["error_message"])
            for r in out["responses"]}


def incremental(qc, resources, validate_only=False):
    return call(qc.incremental_alter_configs, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                {"resources": [{"resource_type": kind, "resource_name": name,
                                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}
                               for kind, name, ops in resources], "validate_only": validate_only})


def replace(qc, resources, validate_only=False):
    return call(qc.alter_configs, ApiKey.ALTER_CONFIGS,
                {"resources": [{"resource_type": kind, "resource_name": name,
                                "configs": [{"name": k, "value": v} for k, v in configs.items()]}
                               for kind, name, configs in resources], "validate_only": validate_only})


async def two_topics(qc):
    await three_brokers_and_a_topic(qc, partitions=1)
    out = await ok(qc.create_topics, {"topics": [{"name": "u", "num_partitions": 1, "replication_factor": 1}]})
    assert out["topics"][0]["error_code"] == errors.NONE


def test_incremental_set_and_delete_touch_only_the_named_keys_in_one_entry_for_all_topics():
    async def scenario():
        qc, raft = controller()
        await two_topics(qc)
        assert await incremental(qc, [(2, "t", [("retention.ms", SET, "1000"), ("segment.ms", SET, "5000")])]) == {
            (2, "t"): ("NONE", None)}
        before = len(raft.entries)
        out = await incremental(qc, [(2, "t", [("retention.ms", DELETE, None), ("flush.ms", SET, "10")]),
                                     (2, "u", [("min.insync.replicas", SET, "1")])])
        assert out == {(2, "t"): ("NONE", None), (2, "u"): ("NONE", None)}
        [entry] = raft.entries[before:]  # both topics in one atomic entry, one record each
        assert entry == [ConfigRecord("topic", "t", {"retention.ms": None, "flush.ms": 10}),
                         ConfigRecord("topic", "u", {"min.insync.replicas": 1})]
        assert dict(qc.image.topics["t"].configs) == {"segment.ms": 5000, "flush.ms": 10}
        # Deleting an override that is not there, or setting the value it has, commits nothing.
        before = len(raft.entries)
        assert await incremental(qc, [(2, "t", [("retention.ms", DELETE, None), ("flush.ms", SET, "10")])]) == {
            (2, "t"): ("NONE", None)}
        assert len(raft.entries) == before
    asyncio.run(scenario())


@pytest.mark.parametrize("ops, error, words", [
    ([("no.such.key", SET, "1")], "INVALID_CONFIG", "no.such.key: unknown configuration key"),
    ([("no.such.key", DELETE, None)], "INVALID_CONFIG", "unknown configuration key"),
    ([("retention.ms", SET, "abc")], "INVALID_CONFIG", "retention.ms: expected an integer, got 'abc'"),
    ([("min.insync.replicas", SET, "0")], "INVALID_CONFIG", "min.insync.replicas: must be >= 1, got 0"),
    ([("retention.ms", APPEND, "1")], "INVALID_CONFIG", "APPEND is only for list configs"),
    ([("cleanup.policy", APPEND, "shred")], "INVALID_CONFIG", "cleanup.policy: "),
    ([("retention.ms", 9, "1")], "INVALID_REQUEST", "unknown config_operation 9"),
    ([("retention.ms", SET, None)], "INVALID_REQUEST", "null value is only allowed with DELETE"),
    ([("retention.ms", SET, "1"), ("retention.ms", DELETE, None)], "INVALID_REQUEST", "more than once"),
])
def test_a_refused_incremental_change_answers_its_error_and_commits_nothing_for_that_topic(ops, error, words):
    async def scenario():
        qc, raft = controller()
        await two_topics(qc)
        before = len(raft.entries)
        out = await incremental(qc, [(2, "t", [("segment.ms", SET, "5000")] + ops),
                                     (2, "u", [("segment.ms", SET, "6000")])])
        code, message = out[(2, "t")]
        assert code == error and words in message
        assert out[(2, "u")] == ("NONE", None)  # the other topic's changes go on
        assert raft.entries[before:] == [[ConfigRecord("topic", "u", {"segment.ms": 6000})]]
        assert "segment.ms" not in qc.image.topics["t"].configs  # all of t's changes or none
    asyncio.run(scenario())


def test_resources_that_are_not_existing_topics_or_appear_twice_are_refused_each_on_its_own():
    async def scenario():
        qc, raft = controller()
        await two_topics(qc)
        before = len(raft.entries)
        out = await incremental(qc, [(8, "x", [("min.insync.replicas", SET, "2")]),  # BROKER_LOGGER
                                     (2, "missing", [("retention.ms", SET, "1")]),
                                     (2, "t", [("retention.ms", SET, "1")])])
        assert out[(8, "x")][0] == "INVALID_REQUEST" and "only topics" in out[(8, "x")][1]
        assert out[(2, "missing")][0] == "UNKNOWN_TOPIC_OR_PARTITION"
        assert out[(2, "t")] == ("NONE", None)
        request = {"resources": [{"resource_type": 2, "resource_name": "u",
                                  "configs": [{"name": "retention.ms", "config_operation": SET, "value": "2"}]}] * 2,
                   "validate_only": False}
        _, twice = await qc.incremental_alter_configs(1, request)
        assert [r["error_code"] for r in twice["responses"]] == [errors.INVALID_REQUEST] * 2
        assert raft.entries[before:] == [[ConfigRecord("topic", "t", {"retention.ms": 1})]]
    asyncio.run(scenario())


def test_validate_only_checks_everything_and_commits_nothing():
    async def scenario():
        qc, raft = controller()
        await two_topics(qc)
        before = len(raft.entries)
        out = await incremental(qc, [(2, "t", [("retention.ms", SET, "1")]),
                                     (2, "u", [("retention.ms", SET, "x")])], validate_only=True)
        assert out[(2, "t")] == ("NONE", None) and out[(2, "u")][0] == "INVALID_CONFIG"
        out = await replace(qc, [(2, "t", {"retention.ms": "1"})], validate_only=True)
        assert out[(2, "t")] == ("NONE", None)
        assert len(raft.entries) == before and "retention.ms" not in qc.image.topics["t"].configs
    asyncio.run(scenario())


def test_alter_configs_replaces_the_whole_set_of_overrides_as_kafka_does():
    async def scenario():
        qc, raft = controller()
        await two_topics(qc)
        await incremental(qc, [(2, "t", [("retention.ms", SET, "1000"), ("segment.ms", SET, "5000")])])
        before = len(raft.entries)
        out = await replace(qc, [(2, "t", {"segment.ms": "5000", "flush.ms": "7", "max.message.bytes": None})])
        assert out == {(2, "t"): ("NONE", None)}
        # retention.ms was left out: back to its default; segment.ms is unchanged, so not written
        assert raft.entries[before:] == [[ConfigRecord("topic", "t", {"retention.ms": None, "flush.ms": 7})]]
        assert dict(qc.image.topics["t"].configs) == {"segment.ms": 5000, "flush.ms": 7}
        out = await replace(qc, [(2, "t", {"flush.ms": "-5"}), (2, "u", {"nope": "1"})])
        assert out[(2, "t")][0] == "INVALID_CONFIG" and "flush.ms" in out[(2, "t")][1]
        assert out[(2, "u")] == ("INVALID_CONFIG", "nope: unknown configuration key")
        assert dict(qc.image.topics["t"].configs) == {"segment.ms": 5000, "flush.ms": 7}
        await replace(qc, [(2, "t", {})])  # nothing named: every override goes
        assert dict(qc.image.topics["t"].configs) == {}
    asyncio.run(scenario())


# A list-type key (Raftka's topic configs have none yet), for APPEND and SUBTRACT.
LISTS = ConfigDef().define(
    "cleanup.policy", "list", ["delete"], "doc",
    lambda v: next((f"items must be delete or compact, got {i!r}" for i in v if i not in ("delete", "compact")), None))


def test_append_adds_missing_items_and_subtract_removes_them_starting_from_the_default():
    assert incremental_changes(LISTS, {}, [{"name": "cleanup.policy", "config_operation": APPEND,
                                            "value": "compact,delete,compact"}]) == {
        "cleanup.policy": ["delete", "compact"]}
    assert incremental_changes(LISTS, {"cleanup.policy": ["delete", "compact"]},
                               [{"name": "cleanup.policy", "config_operation": SUBTRACT, "value": "delete"}]) == {
        "cleanup.policy": ["compact"]}
    assert incremental_changes(LISTS, {}, [{"name": "cleanup.policy", "config_operation": SUBTRACT,
                                            "value": "delete"}]) == {"cleanup.policy": []}
    with pytest.raises(ConfigError, match="cleanup.policy: items must be delete or compact, got 'bogus'"):
        incremental_changes(LISTS, {}, [{"name": "cleanup.policy", "config_operation": APPEND, "value": "bogus"}])
    with pytest.raises(InvalidRequestError):
        incremental_changes(LISTS, {}, [{"name": "cleanup.policy", "config_operation": APPEND, "value": None}])
