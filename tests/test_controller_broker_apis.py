"""The broker-controller APIs in Kafka's shapes (BrokerRegistration, BrokerHeartbeat,
AlterPartition, UnregisterBroker), first against the handlers with bodies decoded as the
listener decodes them (test_controller_decisions' in-process controller that commits at once),
then over the wire against a real controller process.

Each test drives one rule of raft_meta/controller/quorum_controller.py and checks the committed
image, so a handler that answered right but committed wrong (or the reverse) fails.
"""
from __future__ import annotations

import asyncio
import uuid

import pytest

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.codec import decoder, encoder
from raftka.common.messages import KAFKA_API
from raftka.broker.controller_channel import KAFKA_VERSIONS, ControllerChannel
from raftka.raft_meta.metadata.records import UnregisterBrokerRecord

from test_controller_decisions import controller, ok, registration, three_brokers_and_a_topic


def as_decoded(api_key, body):
    """``body`` as the controller's listener hands it to a handler (Kafka-decoded, defaults filled)."""
    request = KAFKA_API[api_key][0]
    version = KAFKA_VERSIONS[api_key]
    return decoder(request, version)(encoder(request, version)(body))


def alter_body(qc, epochs, leader, index, isr, *, partition_epoch=None, member_epochs=None):
    p = qc.image.topics["t"].partitions[index]
    members = [{"broker_id": b, "broker_epoch": (member_epochs or epochs)[b]} for b in isr]
    return {"broker_id": leader, "broker_epoch": epochs[leader], "topics": [{
        "topic_id": qc.image.topics["t"].topic_id, "partitions": [{
            "partition_index": index, "leader_epoch": p.leader_epoch, "new_isr_with_epochs": members,
            "partition_epoch": p.partition_epoch if partition_epoch is None else partition_epoch}]}]}


async def alter(qc, body):
    code, out = await qc.alter_partition(KAFKA_VERSIONS[ApiKey.ALTER_PARTITION],
                                         as_decoded(ApiKey.ALTER_PARTITION, body))
    return code, out


def test_alter_partition_commits_a_shrink_and_refuses_a_stale_partition_epoch_and_a_restarted_member():
    async def scenario():
        qc, raft = controller()
        epochs = await three_brokers_and_a_topic(qc, partitions=3)
        p = qc.image.topics["t"].partitions[0]
        leader, *others = p.replicas
        code, out = await alter(qc, alter_body(qc, epochs, leader, 0, [leader, others[0]]))
        answer = out["topics"][0]["partitions"][0]
        assert (code, answer["error_code"]) == (errors.NONE, errors.NONE)
        after = qc.image.topics["t"].partitions[0]
        assert after.isr == (leader, others[0]) and after.partition_epoch == p.partition_epoch + 1
        assert (answer["leader_id"], answer["isr"], answer["partition_epoch"]) == (leader, [leader, others[0]],
                                                                                    after.partition_epoch)
        # The same request again (a retry after a lost answer) holds the old partition epoch.
        entries = len(raft.entries)
        code, out = await alter(qc, alter_body(qc, epochs, leader, 0, [leader, others[0]],
                                               partition_epoch=p.partition_epoch))
        assert out["topics"][0]["partitions"][0]["error_code"] == errors.INVALID_UPDATE_VERSION
        assert len(raft.entries) == entries and qc.image.topics["t"].partitions[0] == after
        # v3: a member named with a broker epoch it no longer has (it restarted) is ineligible.
        stale = {**epochs, others[1]: epochs[others[1]] - 1}
        code, out = await alter(qc, alter_body(qc, epochs, leader, 0, [leader, others[0], others[1]],
                                               member_epochs=stale))
        assert out["topics"][0]["partitions"][0]["error_code"] == errors.INELIGIBLE_REPLICA
        # A broker that does not lead the partition, an unknown topic id, a stale broker epoch.
        code, out = await alter(qc, alter_body(qc, epochs, others[0], 0, [others[0]]))
        assert out["topics"][0]["partitions"][0]["error_code"] == errors.NOT_LEADER_OR_FOLLOWER
        body = alter_body(qc, epochs, leader, 0, [leader])
        body["topics"][0]["topic_id"] = uuid.uuid4().hex
        code, out = await alter(qc, body)
        assert out["topics"][0]["partitions"][0]["error_code"] == errors.UNKNOWN_TOPIC_ID
        code, _ = await alter(qc, {**alter_body(qc, epochs, leader, 0, [leader]), "broker_epoch": epochs[leader] + 99})
        assert code == errors.STALE_BROKER_EPOCH
        assert len(raft.entries) == entries
    asyncio.run(scenario())


def test_a_registration_retried_with_its_incarnation_keeps_its_epoch_and_another_live_one_is_refused():
    async def scenario():
        qc, raft = controller()
        first = registration(1)
        epoch = (await ok(qc.broker_registration, first))["broker_epoch"]
        assert (await ok(qc.broker_registration, first))["broker_epoch"] == epoch
        assert qc.image.brokers[1].endpoints == {"PLAINTEXT": "127.0.0.1:9001"}
        await ok(qc.broker_heartbeat, {"broker_id": 1, "broker_epoch": epoch, "current_metadata_offset": 1 << 40})
        code, _ = await qc.broker_registration(4, as_decoded(ApiKey.BROKER_REGISTRATION, registration(1)))
        assert code == errors.DUPLICATE_BROKER_REGISTRATION and qc.image.brokers[1].broker_epoch == epoch
    asyncio.run(scenario())


def test_unregister_broker_removes_the_registration_and_its_leaderships_in_one_entry():
    async def scenario():
        qc, raft = controller()
        epochs = await three_brokers_and_a_topic(qc, partitions=6)
        led_by_2 = [i for i, p in enumerate(qc.image.topics["t"].partitions) if p.leader == 2]
        assert led_by_2
        await ok(qc.unregister_broker, {"broker_id": 2})
        entry = raft.entries[-1]
        assert isinstance(entry[0], UnregisterBrokerRecord) and (entry[0].broker_id, entry[0].broker_epoch) == (2, epochs[2])
        assert 2 not in qc.image.brokers
        assert all(p.leader != 2 and 2 not in p.isr for p in qc.image.topics["t"].partitions)
        code, _ = await qc.unregister_broker(0, as_decoded(ApiKey.UNREGISTER_BROKER, {"broker_id": 2}))
        assert code == errors.BROKER_ID_NOT_REGISTERED
        # Its heartbeats are refused, so a broker still running registers again (a new epoch).
        code, _ = await qc.broker_heartbeat(1, as_decoded(ApiKey.BROKER_HEARTBEAT, {
            "broker_id": 2, "broker_epoch": epochs[2], "current_metadata_offset": 1 << 40}))
        assert code == errors.BROKER_ID_NOT_REGISTERED
        again = (await ok(qc.broker_registration, registration(2)))["broker_epoch"]
        assert again > epochs[2] and qc.image.brokers[2].fenced
    asyncio.run(scenario())


def test_an_unregistration_replays_as_a_removed_broker_undone_by_a_rollback_and_found_by_between():
    from raftka.raft_meta.metadata.delta import MetadataDelta
    from raftka.raft_meta.metadata.image import MetadataImage
    from raftka.raft_meta.metadata.records import RegisterBrokerRecord
    delta = MetadataDelta(MetadataImage.EMPTY)
    for b in (1, 2):
        assert "error" not in delta.replay(RegisterBrokerRecord(b, f"{b:032x}", {"PLAINTEXT": f"h:{b}"}, None), b)
    base = delta.apply()
    delta = MetadataDelta(base)
    assert delta.replay(UnregisterBrokerRecord(1, base.brokers[1].broker_epoch + 1), 3)["error"] == \
        errors.STALE_BROKER_EPOCH
    savepoint = delta.savepoint()
    assert delta.replay(UnregisterBrokerRecord(1, base.brokers[1].broker_epoch), 3) == {}
    assert delta.broker(1) is None and delta.unregistered_brokers == {1} and 1 not in delta.changed_brokers
    assert delta.replay(UnregisterBrokerRecord(1, base.brokers[1].broker_epoch), 4) == {}  # a retry: no-op
    after = delta.apply()
    assert sorted(after.brokers) == [2] and after.brokers[2] is base.brokers[2]
    assert MetadataDelta.between(base, after).unregistered_brokers == {1}
    assert MetadataDelta.between(base, after).apply() == after
    delta.rollback(savepoint)
    assert sorted(delta.apply().brokers) == [1, 2]


# -- over the wire, against real controller processes ---------------------------------------------


@pytest.fixture
def quorum(cluster_factory):
    cluster = cluster_factory(voters=3, configs={"broker.session.timeout.ms": 3000})
    cluster.wait_for_leader(timeout_s=30)
    return cluster


def test_a_broker_channel_registers_heartbeats_and_is_unregistered_in_kafkas_protocol_via_a_follower(quorum):
    """The broker's ControllerChannel, bootstrapped with a follower only, is refused NOT_CONTROLLER
    (a Kafka answer, which names no endpoint), finds the leader through DescribeQuorum, then
    registers, is unfenced by a caught-up heartbeat and is unregistered (UnregisterBroker 64)."""
    leader = quorum.wait_for_leader(timeout_s=30)
    follower = next(n for n in list(quorum.nodes) if n != leader)
    leader_address = "%s:%d" % quorum.controller_address(leader)

    async def scenario():
        channel = ControllerChannel(["%s:%d" % quorum.controller_address(follower)], timeout_ms=20_000)
        try:
            incarnation = uuid.uuid4().hex
            body = {"broker_id": 7, "cluster_id": quorum.cluster_id, "incarnation_id": incarnation,
                    "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9, "security_protocol": 0}],
                    "rack": "r1"}
            code, out = await channel.request(ApiKey.BROKER_REGISTRATION, body)
            assert code == errors.NONE and out["broker_epoch"] > 0, (code, out)
            assert channel.active == leader_address  # followed the DescribeQuorum answer's nodes
            epoch = out["broker_epoch"]
            code, again = await channel.request(ApiKey.BROKER_REGISTRATION, body)  # a retry: same epoch
            assert (code, again["broker_epoch"]) == (errors.NONE, epoch)
            beat = {"broker_id": 7, "broker_epoch": epoch, "current_metadata_offset": 1 << 40}
            code, out = await channel.request(ApiKey.BROKER_HEARTBEAT, beat)
            assert code == errors.NONE and out["is_caught_up"] and not out["is_fenced"], out
            code, out = await channel.request(ApiKey.BROKER_HEARTBEAT, {**beat, "broker_epoch": epoch + 1})
            assert code == errors.STALE_BROKER_EPOCH
            code, out = await channel.request(ApiKey.ALLOCATE_PRODUCER_IDS, {"broker_id": 7, "broker_epoch": epoch})
            assert code == errors.NONE and out["producer_id_len"] > 0 and out["producer_id_start"] >= 0
            code, out = await channel.request(ApiKey.UNREGISTER_BROKER, {"broker_id": 7})
            assert code == errors.NONE, out
            code, _ = await channel.request(ApiKey.BROKER_HEARTBEAT, beat)
            assert code == errors.BROKER_ID_NOT_REGISTERED
            code, _ = await channel.request(ApiKey.UNREGISTER_BROKER, {"broker_id": 7})
            assert code == errors.BROKER_ID_NOT_REGISTERED
        finally:
            await channel.close()
    asyncio.run(scenario())


def test_describe_quorum_v2_names_the_leader_its_listeners_and_each_voters_log_end_offset(quorum):
    from raftka.cluster.controller_client import describe_quorum
    leader = quorum.wait_for_leader(timeout_s=30)
    follower = next(n for n in list(quorum.nodes) if n != leader)
    view = describe_quorum("%s:%d" % quorum.controller_address(leader))
    assert view["active"] and view["leader_id"] == leader and view["leader_epoch"] >= 1
    assert view["leader_endpoint"] == "%s:%d" % quorum.controller_address(leader)
    assert sorted(v["node_id"] for v in view["voters"]) == sorted(list(quorum.nodes))
    assert all(isinstance(v["log_end_offset"], int) and v["raft_address"] for v in view["voters"])
    # One scale: the leader's log end (exclusive) is at or past the high watermark (pysyncobj's own
    # entries carry no record). Followers' fetch times are their last AppendEntries answers;
    # the leader reports no fetch and is caught up now, as Kafka's.
    by_id = {v["node_id"]: v for v in view["voters"]}
    assert by_id[leader]["log_end_offset"] >= view["high_watermark"] > 0 and by_id[leader]["lag"] == 0
    assert by_id[leader]["last_fetch_timestamp"] == -1 and by_id[leader]["last_caught_up_timestamp"] > 0
    assert all(by_id[n]["last_fetch_timestamp"] > 0 for n in by_id if n != leader), view["voters"]
    other = describe_quorum("%s:%d" % quorum.controller_address(follower))
    assert not other["active"] and other["leader_id"] == leader and other["leader_endpoint"] == view["leader_endpoint"]


def test_the_cli_unregisters_a_broker_and_names_one_that_is_not_registered_in_one_line(quorum):
    import subprocess
    from raftka.cluster import project_env, python_argv
    from raftka.cluster.controller_client import controller_request
    code, out = controller_request(quorum.bootstrap_controllers, ApiKey.BROKER_REGISTRATION, {
        "broker_id": 8, "cluster_id": quorum.cluster_id, "incarnation_id": uuid.uuid4().hex,
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9}]}, timeout_s=20)
    assert code == errors.NONE, out

    def unregister():
        return subprocess.run(python_argv("-m", "raftka", "quorum", "unregister-broker", "--bootstrap-controller",
                                          quorum.bootstrap_controllers, "--broker-id", "8"),
                              capture_output=True, text=True, env=project_env(), timeout=60)
    run = unregister()
    assert run.returncode == 0 and "unregistered broker 8" in run.stdout, run.stderr
    run = unregister()
    assert run.returncode == 1 and run.stderr.count("\n") == 1 and "not registered" in run.stderr, run.stderr
