"""The active controller refuses a BrokerRegistration of another cluster (INCONSISTENT_CLUSTER_ID,
as Kafka's), and DescribeQuorum puts the high watermark and every log end offset on one scale
(exclusive, Kafka's): a caught-up broker's lag is 0.

In-process tests use test_controller_decisions' controller (a Raft stand-in that commits at once);
the last test runs a real controller and broker."""
from __future__ import annotations

import asyncio
import json
import subprocess
import uuid

from raftka.client import AdminClient
from raftka.cluster import Cluster, project_env, python_argv, wait_until
from raftka.cluster.controller_client import controller_request, quorum_view
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.meta_properties import CLUSTER_ID
from raftka.common.server_config import server_config
from raftka.raft_meta.controller.quorum_controller import QuorumController
from raftka.raft_meta.controller.service import ControllerService
from raftka.raft_meta.metadata.loader import MetadataLoader
from raftka.raft_meta.metadata.state import ControllerStateMachine
from raftka.raft_meta.raft import RaftStatus, VoterStatus

from test_controller_broker_apis import as_decoded
from test_controller_decisions import CommitAtOnce, ok, registration


class LeaderWithStatus(CommitAtOnce):
    """The stand-in, leading a one-voter quorum whose log ends at its last commit."""

    def status(self) -> RaftStatus:
        return RaftStatus(node_id=1, role="leader", term=self.term, leader_id=1, leader_address="127.0.0.1:9301",
                          commit_index=self.index, last_applied_index=self.index, log_length=self.index,
                          has_quorum=True, voters=(VoterStatus(1, "127.0.0.1:9301", None, self.index, None),))


def controller_in(log_dir: str) -> tuple[QuorumController, LeaderWithStatus]:
    config = server_config({"process.roles": "controller", "node.id": "1",
                            "controller.quorum.voters": "1@127.0.0.1:9301",
                            "listeners": "CONTROLLER://127.0.0.1:9401", "log.dirs": log_dir,
                            "controller.quorum.secret": "s3cret"})
    state = ControllerStateMachine(MetadataLoader())
    raft = LeaderWithStatus(state)
    return QuorumController(ControllerService(config, raft, state)), raft  # type: ignore[arg-type]


def test_a_registration_naming_another_cluster_is_refused_and_registers_nothing(tmp_path):
    (tmp_path / "meta.properties").write_text("version=1\ncluster.id=Xk3pQ9vWRZe4mV1bL0aTgA\nnode.id=1\n")
    qc, raft = controller_in(str(tmp_path))
    assert qc.cluster_id == "Xk3pQ9vWRZe4mV1bL0aTgA"

    async def scenario():
        for wrong in (CLUSTER_ID, ""):  # an unformatted broker's id, and none at all
            body = as_decoded(ApiKey.BROKER_REGISTRATION, {**registration(1), "cluster_id": wrong})
            code, out = await qc.broker_registration(4, body)
            assert code == errors.INCONSISTENT_CLUSTER_ID == 104
            assert repr(wrong) in out["error_message"] and "'Xk3pQ9vWRZe4mV1bL0aTgA'" in out["error_message"]
        assert 1 not in qc.image.brokers and raft.entries == []  # nothing was committed
        out = await ok(qc.broker_registration, {**registration(1), "cluster_id": "Xk3pQ9vWRZe4mV1bL0aTgA"})
        assert out["broker_epoch"] > 0 and 1 in qc.image.brokers
    asyncio.run(scenario())


def test_describe_quorum_offsets_are_exclusive_and_a_caught_up_broker_lags_zero(tmp_path):
    qc, raft = controller_in(str(tmp_path / "unformatted"))
    service = qc.service

    async def describe() -> dict:
        code, answer = await service.describe_quorum(2, {"topics": [{"topic_name": "__cluster_metadata",
                                                                     "partitions": [{"partition_index": 0}]}]})
        assert code == errors.NONE
        return quorum_view(answer)

    async def scenario():
        epoch = (await ok(qc.broker_registration, registration(4)))["broker_epoch"]
        await ok(qc.broker_registration, registration(5))
        # Broker 4 heartbeats having applied everything (the first one unfences it: a new record,
        # which the second reports applied); broker 5 fetches from offset 1 (behind).
        for _ in range(2):
            await ok(qc.broker_heartbeat, {"broker_id": 4, "broker_epoch": epoch,
                                           "current_metadata_offset": service.state.offset})
        service.observe(5, 1)
        view = await describe()
        assert view["high_watermark"] == service.state.offset + 1 == raft.index + 1
        observers = {o["replica_id"]: o for o in view["observers"]}
        assert observers[4]["log_end_offset"] == view["high_watermark"] and observers[4]["lag"] == 0
        assert observers[4]["last_fetch_timestamp"] > 0 and observers[4]["last_caught_up_timestamp"] > 0
        assert observers[5]["lag"] == view["high_watermark"] - 1 > 0
        assert observers[5]["last_caught_up_timestamp"] == -1  # never had everything
        leader, = view["voters"]
        assert leader["log_end_offset"] == raft.index + 1 and leader["lag"] == 0
        assert leader["last_fetch_timestamp"] == -1 and leader["last_caught_up_timestamp"] > 0  # as Kafka's leader
        # A new record: broker 4 is one behind until it fetches at the new high watermark.
        await ok(qc.broker_registration, registration(6))
        view = await describe()
        assert {o["replica_id"]: o["lag"] for o in view["observers"]}[4] == 1
        service.observe(4, view["high_watermark"])
        assert {o["replica_id"]: o["lag"] for o in (await describe())["observers"]}[4] == 0
    asyncio.run(scenario())


def test_a_real_broker_sends_its_cluster_id_and_shows_lag_zero_once_caught_up(tmp_path):
    with Cluster.start(tmp_path, controllers=1, brokers=1) as cluster:
        broker_id = cluster.broker_ids[0]  # it registered: its meta.properties names the cluster
        code, out = controller_request(cluster.bootstrap_controllers, ApiKey.BROKER_REGISTRATION, {
            "broker_id": 99, "cluster_id": "another-cluster", "incarnation_id": uuid.uuid4().hex,
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9}]}, timeout_s=20)
        assert code == errors.INCONSISTENT_CLUSTER_ID, out  # Kafka's answer carries no message
        log = (cluster.root / "controller-1" / "server.log").read_text()
        assert f"broker 99 belongs to cluster 'another-cluster', but this controller's cluster is " \
               f"'{cluster.cluster_id}'" in log

        def status() -> dict:
            run = subprocess.run(python_argv("-m", "raftka", "quorum", "status", "--bootstrap-controller",
                                             cluster.bootstrap_controllers, "--json"),
                                 capture_output=True, text=True, env=project_env(), timeout=60)
            assert run.returncode == 0, run.stderr
            return json.loads(run.stdout)

        def caught_up() -> bool:
            observers = {o["replica_id"]: o for o in status()["observers"]}
            return broker_id in observers and observers[broker_id]["lag"] == 0
        wait_until(caught_up, 30, what="the broker listed as an observer with lag 0")
        final = status()
        observer = next(o for o in final["observers"] if o["replica_id"] == broker_id)
        assert observer["log_end_offset"] == final["high_watermark"] and observer["last_caught_up_timestamp"] > 0
        admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=10_000)
        try:  # the refused registration left no broker 99 behind
            assert [b["node_id"] for b in admin.describe_cluster()["brokers"]] == [broker_id]
        finally:
            admin.close()
