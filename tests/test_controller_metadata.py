"""Controller metadata RPCs against a real 3-controller quorum (raftka.cluster processes).

The test plays the brokers' part over the wire (BrokerRegistration, BrokerHeartbeat,
AlterPartition) with `controller_request`, which follows NOT_CONTROLLER answers like a broker
would. Nothing of ours is mocked. Session timeouts are short so fencing tests stay quick.
"""
from __future__ import annotations

import asyncio
import os
import socket
import statistics
import struct
import threading
import time
import uuid

import pytest

from raftka.common import errors
from raftka.cluster import wait_until
from raftka.cluster.controller_client import controller_request

CONFIGS = {"broker.session.timeout.ms": 1500, "broker.heartbeat.interval.ms": 300}


def rpc(cluster, api_key, body, timeout_s=20.0):
    return controller_request(cluster.bootstrap_controllers, api_key, body, timeout_s=timeout_s)


def ok(cluster, api_key, body, timeout_s=20.0):
    """The answer body, retrying retriable errors (a leader change) until timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        code, out = rpc(cluster, api_key, body, timeout_s=max(1.0, deadline - time.monotonic()))
        if code == errors.NONE:
            return out
        if not errors.for_code(code).retriable or time.monotonic() > deadline:
            raise AssertionError(f"api {api_key} failed: {errors.name_of(code)} {out}")
        time.sleep(0.05)


def registration(cluster, broker_id):
    """A BrokerRegistration body (Kafka's) for a broker of ``cluster`` on a new start."""
    return {"broker_id": broker_id, "cluster_id": cluster.cluster_id, "incarnation_id": uuid.uuid4().hex, "rack": None,
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 19000 + broker_id}]}


def alter_isr(cluster, epochs, topic, index, p, isr, **fields):
    """AlterPartition (Kafka's v3) asked by the leader of ``topic``-``index`` (``p`` as Metadata
    answers it) for ``isr``; ``fields`` override the partition's entry. (code, the partition's answer)."""
    topic_id = next(t for t in metadata(cluster)["topics"] if t["name"] == topic)["topic_id"]
    leader = p["leader_id"]
    partition = {"partition_index": index, "leader_epoch": p["leader_epoch"], "partition_epoch": p["partition_epoch"],
                 "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": epochs[b]} for b in isr], **fields}
    code, out = rpc(cluster, 56, {"broker_id": leader, "broker_epoch": epochs[leader],
                                  "topics": [{"topic_id": topic_id, "partitions": [partition]}]})
    if code != errors.NONE:
        return code, out
    answer = out["topics"][0]["partitions"][0]
    return answer["error_code"], answer


class FakeBrokers:
    """Registers brokers and heartbeats for them from a thread, like broker processes would."""

    def __init__(self, cluster, ids):
        self.cluster = cluster
        self.epochs = {}
        self.beating = set(ids)
        self.stop = threading.Event()
        for broker_id in ids:
            out = ok(cluster, 62, registration(cluster, broker_id))
            self.epochs[broker_id] = out["broker_epoch"]
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self):
        while not self.stop.wait(0.3):
            for broker_id in list(self.beating):
                try:
                    rpc(self.cluster, 63, {"broker_id": broker_id, "broker_epoch": self.epochs[broker_id],
                                           "current_metadata_offset": 1 << 40}, timeout_s=2)
                except Exception:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join(10)


def metadata(cluster, timeout_s=20.0):
    """The committed metadata as the active controller's log has it, read as a broker reads it
    (a MetadataFetcher, raft_meta/metadata/fetcher.py), in a plain shape: {"brokers": [{node_id,
    endpoints, rack, fenced, broker_epoch}], "topics": [{name, topic_id, partitions:
    [{partition_index, leader_id, leader_epoch, replica_nodes, isr_nodes, partition_epoch}]}]}.
    The active controller's log holds every commit it answered for (read your writes)."""
    from raftka.cluster.controller_client import describe_quorum
    from raftka.common.errors import RaftkaError
    from raftka.raft_meta.metadata.fetcher import MetadataFetcher

    def leader():
        for address in cluster.bootstrap_controllers.split(","):
            try:
                return describe_quorum(address)["leader_endpoint"]
            except RaftkaError:
                continue
        return None

    async def read(address):
        fetcher = MetadataFetcher([address], max_wait_ms=0)
        try:
            while await fetcher.fetch_once():
                pass
            return fetcher.image
        finally:
            await fetcher.close()
    image = wait_until(lambda: (address := leader()) and asyncio.run(read(address)), timeout_s,
                       what="the active controller's committed metadata")
    return {"brokers": [{"node_id": b, "endpoints": dict(r.endpoints), "rack": r.rack, "fenced": r.fenced,
                         "broker_epoch": r.broker_epoch} for b, r in sorted(image.brokers.items())],
            "topics": [{"name": name, "topic_id": t.topic_id,
                        "partitions": [{"partition_index": i, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
                                        "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
                                        "partition_epoch": p.partition_epoch} for i, p in enumerate(t.partitions)]}
                       for name, t in sorted(image.topics.items())]}


def wait_unfenced(cluster, count, timeout_s=20):
    wait_until(lambda: sum(not b["fenced"] for b in metadata(cluster)["brokers"]) == count, timeout_s,
               what=f"{count} unfenced brokers")


@pytest.fixture
def cluster(cluster_factory):
    return cluster_factory(voters=3, configs=CONFIGS)


@pytest.fixture
def brokers(cluster):
    cluster.wait_for_leader(timeout_s=30)
    fake = FakeBrokers(cluster, [1, 2, 3])
    wait_unfenced(cluster, 3)
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def shared_quorum(tmp_path_factory):
    """One quorum with three fake brokers, shared by the tests that only add topics of names of
    their own (a quorum per test cost a third of this module's time); the tests that fence,
    stop or kill take their own ``cluster``. Stopped by PID when the module ends."""
    from raftka.cluster import ControllerCluster
    cluster = ControllerCluster.start(tmp_path_factory.mktemp("metadata") / "cluster", voters=3, configs=CONFIGS)
    fake = None
    try:
        cluster.wait_for_leader(timeout_s=30)
        fake = FakeBrokers(cluster, [1, 2, 3])
        yield cluster, fake
    finally:
        if fake is not None:
            fake.close()
        cluster.close()


@pytest.fixture
def shared(shared_quorum):
    """(cluster, brokers) of the shared quorum, its three brokers unfenced (a heartbeat late on a
    loaded box fences one for a moment)."""
    wait_unfenced(shared_quorum[0], 3)
    return shared_quorum


def test_create_topics_places_replicas_round_robin_with_balanced_leaders(shared):
    cluster, _ = shared
    out = ok(cluster, 19, {"topics": [{"name": "orders", "num_partitions": 6, "replication_factor": 3}]})
    assert out["topics"][0]["error_code"] == errors.NONE, out
    topic = next(t for t in metadata(cluster)["topics"] if t["name"] == "orders")
    leaders = [p["leader_id"] for p in topic["partitions"]]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    for p in topic["partitions"]:
        assert sorted(p["replica_nodes"]) == [1, 2, 3] and p["isr_nodes"] == p["replica_nodes"]
        assert p["leader_id"] == p["replica_nodes"][0]  # the preferred leader leads


@pytest.mark.parametrize("topic,code,needle", [
    ({"name": "bad name!", "num_partitions": 1, "replication_factor": 1}, errors.INVALID_TOPIC_EXCEPTION, "bad name!"),
    ({"name": "..", "num_partitions": 1, "replication_factor": 1}, errors.INVALID_TOPIC_EXCEPTION, ".."),
    ({"name": "x" * 250, "num_partitions": 1, "replication_factor": 1}, errors.INVALID_TOPIC_EXCEPTION, "249"),
    ({"name": "zero", "num_partitions": 0, "replication_factor": 1}, errors.INVALID_PARTITIONS, "num_partitions"),
    ({"name": "wide", "num_partitions": 1, "replication_factor": 4}, errors.INVALID_REPLICATION_FACTOR, "3 unfenced"),
    ({"name": "cfg", "num_partitions": 1, "replication_factor": 1,
      "configs": [{"name": "retention.mss", "value": "1"}]}, errors.INVALID_CONFIG, "retention.mss"),
    ({"name": "cfg2", "num_partitions": 1, "replication_factor": 1,
      "configs": [{"name": "retention.ms", "value": "soon"}]}, errors.INVALID_CONFIG, "retention.ms"),
    ({"name": "placed", "num_partitions": -1, "replication_factor": -1,
      "assignments": [{"partition_index": 0, "broker_ids": [1]}]}, errors.INVALID_REQUEST, "assignments"),
])
def test_create_topics_refuses_bad_input_with_a_typed_error_naming_the_problem(shared, topic, code, needle):
    cluster, _ = shared
    fine = f"fine-{uuid.uuid4().hex[:8]}"  # each case's own: the quorum is shared
    out = ok(cluster, 19, {"topics": [topic, {"name": fine, "num_partitions": 1, "replication_factor": 1}]})
    bad, good = out["topics"]
    assert bad["error_code"] == code, bad
    assert needle in bad["error_message"]
    assert good["error_code"] == errors.NONE  # one bad topic does not sink the request
    names = [t["name"] for t in metadata(cluster)["topics"]]
    assert fine in names and topic["name"] not in names


def test_a_malformed_request_body_gets_invalid_request_and_the_controller_keeps_serving(shared):
    cluster, _ = shared
    # A CreateTopics v7 frame whose body is cut short: Kafka's answer to bytes that do not decode
    # is closing that connection (common/server.py); nothing else is affected.
    body = b"\x02\x06orders"  # one topic, its name, then nothing of the rest
    header = struct.pack(">hhih", 19, 7, 1, 4) + b"test" + b"\x00"
    with socket.create_connection(cluster.controller_address(next(iter(cluster.nodes))), timeout=5) as raw:
        raw.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        assert raw.recv(4) == b""  # closed, no answer
    assert ok(cluster, 19, {"topics": [{"name": "after", "num_partitions": 1, "replication_factor": 1}]})


def test_a_broker_without_heartbeats_is_fenced_and_loses_leadership_unclean_election_off(cluster, brokers):
    ok(cluster, 19, {"topics": [{"name": "t3", "num_partitions": 3, "replication_factor": 3},
                                {"name": "solo", "num_partitions": 3, "replication_factor": 1}]})
    brokers.beating.discard(2)
    wait_until(lambda: next(b for b in metadata(cluster)["brokers"] if b["node_id"] == 2)["fenced"], 20,
               what="broker 2 fenced")
    topics = {t["name"]: t for t in metadata(cluster)["topics"]}
    for p in topics["t3"]["partitions"]:
        assert p["leader_id"] != 2 and 2 not in p["isr_nodes"]
    solo_on_2 = [p for p in topics["solo"]["partitions"] if p["replica_nodes"] == [2]]
    assert solo_on_2, "placement put one single-replica partition on broker 2"
    for p in solo_on_2:  # no other ISR member: offline, the ISR keeps its last member
        assert p["leader_id"] == -1 and p["isr_nodes"] == [2]


def test_alter_partition_refuses_a_stale_partition_epoch_and_accepts_the_current_one(shared):
    cluster, brokers = shared
    ok(cluster, 19, {"topics": [{"name": "isr", "num_partitions": 1, "replication_factor": 3}]})
    p = next(t for t in metadata(cluster)["topics"] if t["name"] == "isr")["partitions"][0]
    leader = p["leader_id"]
    shrunk = [b for b in p["isr_nodes"] if b != leader][:1] + [leader]
    code, out = alter_isr(cluster, brokers.epochs, "isr", 0, p, shrunk)
    assert code == errors.NONE, errors.name_of(code)
    assert out["partition_epoch"] == p["partition_epoch"] + 1 and sorted(out["isr"]) == sorted(shrunk)
    assert out["leader_id"] == leader and out["leader_epoch"] == p["leader_epoch"]
    code, _ = alter_isr(cluster, brokers.epochs, "isr", 0, p, shrunk)  # again: its partition epoch is now stale
    assert code == errors.INVALID_UPDATE_VERSION
    after = next(t for t in metadata(cluster)["topics"] if t["name"] == "isr")["partitions"][0]
    assert after["partition_epoch"] == p["partition_epoch"] + 1  # refused, not applied twice
    code, _ = alter_isr(cluster, brokers.epochs, "isr", 0, p, shrunk, partition_epoch=p["partition_epoch"] + 1,
                        leader_epoch=p["leader_epoch"] - 1)
    assert code == errors.FENCED_LEADER_EPOCH


def test_configs_can_be_described_and_altered(shared):
    cluster, _ = shared
    ok(cluster, 19, {"topics": [{"name": "c", "num_partitions": 1, "replication_factor": 1,
                                 "configs": [{"name": "retention.ms", "value": "1000"}]}]})
    out = ok(cluster, 33, {"resources": [{"resource_type": 2, "resource_name": "c", "configs": [
        {"name": "retention.ms", "value": "2000"}, {"name": "cleanup.policy", "value": "shred"}]}]})
    assert out["responses"][0]["error_code"] == errors.INVALID_CONFIG  # no such policy: nothing applied
    out = ok(cluster, 33, {"resources": [{"resource_type": 2, "resource_name": "c",
                                          "configs": [{"name": "retention.ms", "value": "2000"}]}],
                           "validate_only": True})
    assert out["responses"][0]["error_code"] == errors.NONE
    described = ok(cluster, 32, {"resources": [{"resource_type": 2, "resource_name": "c", "configuration_keys": None}]})
    values = {c["name"]: c["value"] for c in described["results"][0]["configs"]}
    assert values["retention.ms"] == "1000"  # validate_only changed nothing
    out = ok(cluster, 33, {"resources": [{"resource_type": 2, "resource_name": "c",
                                          "configs": [{"name": "retention.ms", "value": "2000"}]}]})
    assert out["responses"][0]["error_code"] == errors.NONE
    described = ok(cluster, 32, {"resources": [{"resource_type": 2, "resource_name": "c", "configuration_keys": None}]})
    values = {c["name"]: c["value"] for c in described["results"][0]["configs"]}
    assert values["retention.ms"] == "2000" and values["segment.bytes"] == "1073741824"


def test_producer_id_blocks_are_distinct_across_brokers_and_a_controller_failover(cluster, brokers):
    blocks = [ok(cluster, 67, {"broker_id": b, "broker_epoch": brokers.epochs[b]}) for b in (1, 2, 1)]
    cluster.kill(cluster.wait_for_leader(timeout_s=30))
    blocks += [ok(cluster, 67, {"broker_id": b, "broker_epoch": brokers.epochs[b]}, timeout_s=30) for b in (2, 3)]
    assert all(block["producer_id_len"] == 1000 for block in blocks)
    starts = sorted(block["producer_id_start"] for block in blocks)
    assert all(later - earlier >= 1000 for earlier, later in zip(starts, starts[1:])), starts  # no overlap
    code, _ = rpc(cluster, 67, {"broker_id": 1, "broker_epoch": brokers.epochs[1] + 1})
    assert code == errors.STALE_BROKER_EPOCH


def test_controlled_shutdown_moves_leadership_away_first(cluster, brokers):
    ok(cluster, 19, {"topics": [{"name": "cs", "num_partitions": 3, "replication_factor": 3}]})
    led = [p for p in next(t for t in metadata(cluster)["topics"] if t["name"] == "cs")["partitions"]
           if p["leader_id"] == 3]
    assert led
    brokers.beating.discard(3)
    out = ok(cluster, 63, {"broker_id": 3, "broker_epoch": brokers.epochs[3], "current_metadata_offset": 1 << 40,
                           "want_shut_down": True})
    assert out["should_shut_down"] and out["is_fenced"]
    for p in next(t for t in metadata(cluster)["topics"] if t["name"] == "cs")["partitions"]:
        assert p["leader_id"] != 3 and 3 not in p["isr_nodes"]


def test_deleted_topics_disappear_and_unknown_ones_are_named(shared):
    cluster, _ = shared
    ok(cluster, 19, {"topics": [{"name": "gone", "num_partitions": 1, "replication_factor": 1}]})
    out = ok(cluster, 20, {"topics": [{"name": "gone"}, {"name": "never"}]})
    codes = {r["name"]: r["error_code"] for r in out["responses"]}
    assert codes == {"gone": errors.NONE, "never": errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert "gone" not in [t["name"] for t in metadata(cluster)["topics"]]
    ok(cluster, 19, {"topics": [{"name": "gone", "num_partitions": 2, "replication_factor": 1}]})  # name reusable


def test_metadata_survives_a_full_restart_from_snapshots(cluster_factory):
    cluster = cluster_factory(voters=3, configs={**CONFIGS, "metadata.log.snapshot.min.records": 10})
    cluster.wait_for_leader(timeout_s=30)
    fake = FakeBrokers(cluster, [1])
    try:
        wait_unfenced(cluster, 1)
        for i in range(30):
            ok(cluster, 19, {"topics": [{"name": f"s{i}", "num_partitions": 1, "replication_factor": 1}]})
        before = metadata(cluster)["topics"]
        wait_until(lambda: all((cluster.nodes[n].data_dir / "data" / "__cluster_metadata-0" / "raft.snapshot").exists()
                               for n in cluster.nodes), 20, what="snapshots on every controller")
    finally:
        fake.close()
    for node_id in cluster.nodes:
        cluster.kill(node_id)
    for node_id in cluster.nodes:
        cluster.launch(node_id)
    for node_id in cluster.nodes:
        cluster.wait_ready(node_id)
    cluster.wait_for_leader(timeout_s=30)
    assert metadata(cluster)["topics"] == before
    # The log before the snapshot was compacted: a fetcher from the start loads the snapshot
    # (Fetch names it, FetchSnapshot reads it) and has every topic.
    from raftka.raft_meta.metadata.fetcher import MetadataFetcher

    async def fetch_from_the_start() -> MetadataFetcher:
        fetcher = MetadataFetcher(["%s:%d" % cluster.controller_address(1)], max_wait_ms=0)
        try:
            await fetcher.fetch_once()
        finally:
            await fetcher.close()
        return fetcher
    fetcher = asyncio.run(fetch_from_the_start())
    assert fetcher.snapshots_loaded == 1 and {f"s{i}" for i in range(30)} <= fetcher.image.topics.keys()


def test_a_bytes_bound_snapshots_after_few_records_and_a_restarted_broker_catches_up_from_a_snapshot(
        cluster_factory):
    # metadata.log.max.record.bytes.between.snapshots: with an entry bound no test reaches, a
    # 300-byte bound makes every controller snapshot after a few CreateTopics entries (about 54
    # bytes each). Each snapshot moves the fetch window past the one before it, so a broker
    # restarting (its fetcher starts from offset 0) loads a snapshot instead of replaying the
    # history, then follows records.
    bound = 300
    cluster = cluster_factory(voters=3, configs={**CONFIGS, "metadata.log.snapshot.min.records": 1_000_000,
                                                 "metadata.log.max.record.bytes.between.snapshots": bound})
    cluster.wait_for_leader(timeout_s=30)
    fake = FakeBrokers(cluster, [1])
    try:
        wait_unfenced(cluster, 1)
        for i in range(30):
            ok(cluster, 19, {"topics": [{"name": f"b{i}", "num_partitions": 4, "replication_factor": 1}]})

        def asked(node_id):
            return cluster.nodes[node_id].log_path.read_text(errors="replace").count("asking for a metadata snapshot")
        wait_until(lambda: all(asked(n) >= 2 and (cluster.nodes[n].data_dir / "data" / "__cluster_metadata-0"
                                                  / "raft.snapshot").exists() for n in cluster.nodes),
                   20, what="two snapshots asked for by the bytes bound on every controller")
        from raftka.raft_meta.metadata.fetcher import MetadataFetcher, fetch_entries
        address = "%s:%d" % cluster.controller_address(1)
        partition, entries = asyncio.run(fetch_entries(address, 1))
        assert entries == [] and partition["snapshot_id"]["end_offset"] > 0, "offset 0 is behind the window"
        assert partition["log_start_offset"] > 1

        async def restarted_broker() -> MetadataFetcher:
            fetcher = MetadataFetcher([address], replica_id=1, max_wait_ms=100)
            try:
                while await fetcher.fetch_once():
                    pass
                await asyncio.to_thread(ok, cluster, 19, {"topics": [{"name": "after", "num_partitions": 1,
                                                                      "replication_factor": 1}]})
                deadline = time.monotonic() + 20
                while "after" not in fetcher.image.topics and time.monotonic() < deadline:
                    await fetcher.fetch_once()
            finally:
                await fetcher.close()
            return fetcher
        fetcher = asyncio.run(restarted_broker())
    finally:
        fake.close()
    assert fetcher.snapshots_loaded == 1, "one snapshot, then records"
    assert {f"b{i}" for i in range(30)} | {"after"} <= fetcher.image.topics.keys()


def test_kill_9_of_the_active_controller_then_the_next_metadata_change_commits(cluster, brokers):
    old = cluster.wait_for_leader(timeout_s=30)
    ok(cluster, 19, {"topics": [{"name": "before", "num_partitions": 1, "replication_factor": 3}]})
    cluster.kill(old)
    out = ok(cluster, 19, {"topics": [{"name": "after", "num_partitions": 2, "replication_factor": 3}]}, timeout_s=30)
    assert out["topics"][0]["error_code"] == errors.NONE
    new = cluster.wait_for_leader(timeout_s=30)
    assert new != old
    names = [t["name"] for t in metadata(cluster)["topics"]]
    assert "before" in names and "after" in names


def test_killing_every_controller_and_restarting_keeps_the_metadata(cluster, brokers):
    ok(cluster, 19, {"topics": [{"name": f"keep{i}", "num_partitions": 2, "replication_factor": 3}
                                for i in range(5)]})
    before = metadata(cluster)
    brokers.close()
    for node_id in cluster.nodes:
        cluster.kill(node_id)
    for node_id in cluster.nodes:
        cluster.launch(node_id)
    for node_id in cluster.nodes:
        cluster.wait_ready(node_id)
    cluster.wait_for_leader(timeout_s=30)
    after = metadata(cluster)
    assert after["topics"] == before["topics"]
    assert [(b["node_id"], b["broker_epoch"]) for b in after["brokers"]] == \
           [(b["node_id"], b["broker_epoch"]) for b in before["brokers"]]
    # And every voter has it, not only the leader: each serves the same committed log.
    from raftka.raft_meta.metadata.fetcher import fetch_entries

    def logs_identical():
        logs = []
        for node_id in cluster.nodes:
            partition, entries = asyncio.run(fetch_entries("%s:%d" % cluster.controller_address(node_id)))
            assert partition["snapshot_id"]["end_offset"] < 0
            logs.append(entries)
        return len(logs[0]) > 0 and all(log == logs[0] for log in logs)
    wait_until(logs_identical, 20, what="identical committed logs on every voter")


@pytest.mark.perf
def test_failover_to_next_committed_metadata_change_median_over_kills(cluster, brokers):
    """kill -9 the active controller; time until the next CreateTopics commits (via any
    controller, following NOT_CONTROLLER). Prints samples and the median."""
    kills = int(os.environ.get("RAFTKA_FAILOVER_KILLS", "10"))
    samples = []
    for round_ in range(kills):
        leader = cluster.wait_for_leader(timeout_s=30)
        ok(cluster, 19, {"topics": [{"name": f"warm{round_}", "num_partitions": 1, "replication_factor": 1}]})
        started = time.monotonic()
        cluster.kill(leader)
        out = ok(cluster, 19, {"topics": [{"name": f"after{round_}", "num_partitions": 1, "replication_factor": 1}]},
                 timeout_s=60)
        samples.append(time.monotonic() - started)
        assert out["topics"][0]["error_code"] == errors.NONE, out
        cluster.restart(leader)
        time.sleep(1.0)  # let the restarted voter rejoin before the next kill
    print(f"\ncontroller failover samples (s): {[round(s, 3) for s in samples]}")
    print(f"controller failover median: {statistics.median(samples):.3f} s over {kills} kills")


def test_a_returning_broker_brings_offline_partitions_back_and_regains_preferred_leadership(cluster, brokers):
    ok(cluster, 19, {"topics": [{"name": "pref", "num_partitions": 3, "replication_factor": 3},
                                {"name": "alone", "num_partitions": 3, "replication_factor": 1}]})
    brokers.beating.discard(2)
    wait_until(lambda: next(b for b in metadata(cluster)["brokers"] if b["node_id"] == 2)["fenced"], 20,
               what="broker 2 fenced")
    brokers.beating.add(2)  # broker 2 comes back with the same epoch and heartbeats again
    wait_until(lambda: not next(b for b in metadata(cluster)["brokers"] if b["node_id"] == 2)["fenced"], 20,
               what="broker 2 unfenced")
    topics = {t["name"]: t for t in metadata(cluster)["topics"]}
    for p in topics["alone"]["partitions"]:
        assert p["leader_id"] == p["replica_nodes"][0] != -1  # back online, led by its only replica
    # The current leader of a partition whose preferred replica is 2 adds 2 back to the ISR ...
    index, p = next((i, p) for i, p in enumerate(topics["pref"]["partitions"]) if p["replica_nodes"][0] == 2)
    assert p["leader_id"] != 2
    assert alter_isr(cluster, brokers.epochs, "pref", index, p, p["isr_nodes"] + [2])[0] == errors.NONE
    # ... and the controller moves leadership back to the preferred replica, with a new leader epoch.
    wait_until(lambda: next(t for t in metadata(cluster)["topics"] if t["name"] == "pref")
               ["partitions"][index]["leader_id"] == 2, 20, what="preferred leader 2 leads again")
    after = next(t for t in metadata(cluster)["topics"] if t["name"] == "pref")["partitions"][index]
    assert after["leader_epoch"] > p["leader_epoch"]


def test_a_new_active_controller_gives_brokers_one_session_timeout_of_grace(cluster_factory):
    """Heartbeats go only to the active controller, so a newly elected one has seen none from
    brokers 1 and 2, which stop heartbeating as the old controller dies. It must not fence them
    at its first pass (every 200 ms): it gives every broker one session timeout of grace, and
    fences them only once that has passed without a heartbeat. Broker 3 heartbeats throughout."""
    session_ms = 5000
    cluster = cluster_factory(voters=3, configs={"broker.session.timeout.ms": session_ms,
                                                 "broker.heartbeat.interval.ms": 300})
    active = cluster.wait_for_leader(timeout_s=30)
    fake = FakeBrokers(cluster, [1, 2, 3])
    try:
        wait_unfenced(cluster, 3)
        fake.beating = {3}
        cluster.kill(active)
        others = [n for n in cluster.nodes if n != active]
        cluster.wait_for_leader(timeout_s=30, among=others)
        seen_active = time.monotonic()
        checks = 0
        while time.monotonic() < seen_active + session_ms / 1000 / 2:  # well inside the grace
            fenced = {b["node_id"] for b in metadata(cluster)["brokers"] if b["fenced"]}
            assert not fenced, f"brokers {fenced} fenced during the new controller's grace period"
            checks += 1
            time.sleep(0.1)
        assert checks >= 3
        # The grace is one session timeout, not forever: the silent brokers are fenced after it.
        wait_until(lambda: {b["node_id"] for b in metadata(cluster)["brokers"] if b["fenced"]} == {1, 2},
                   session_ms / 1000 + 20, what="brokers 1 and 2 fenced after the grace")
        assert not next(b for b in metadata(cluster)["brokers"] if b["node_id"] == 3)["fenced"]
    finally:
        fake.close()


def test_unclean_leader_election_when_enabled_elects_a_live_replica_outside_the_isr(cluster_factory):
    cluster = cluster_factory(voters=1, configs={**CONFIGS, "unclean.leader.election.enable": "true"})
    cluster.wait_for_leader(timeout_s=30)
    fake = FakeBrokers(cluster, [1, 2])
    try:
        wait_unfenced(cluster, 2)
        ok(cluster, 19, {"topics": [{"name": "u", "num_partitions": 1, "replication_factor": 2}]})
        p = next(t for t in metadata(cluster)["topics"] if t["name"] == "u")["partitions"][0]
        leader = p["leader_id"]
        other = next(b for b in p["replica_nodes"] if b != leader)
        assert alter_isr(cluster, fake.epochs, "u", 0, p, [leader])[0] == errors.NONE
        fake.beating.discard(leader)
        wait_until(lambda: next(t for t in metadata(cluster)["topics"] if t["name"] == "u")
                   ["partitions"][0]["leader_id"] == other, 20, what="unclean election of the other replica")
    finally:
        fake.close()


@pytest.mark.slow
def test_five_voters_survive_two_kills_and_refuse_to_decide_without_a_majority(cluster_factory):
    cluster = cluster_factory(voters=5, configs=CONFIGS)
    leader = cluster.wait_for_leader(timeout_s=30)
    fake = FakeBrokers(cluster, [1])
    try:
        wait_unfenced(cluster, 1)
        victims = [leader] + [n for n in cluster.nodes if n != leader][:1]
        for node_id in victims:
            cluster.kill(node_id)
        ok(cluster, 19, {"topics": [{"name": "two-down", "num_partitions": 1, "replication_factor": 1}]}, timeout_s=30)
        third = next(n for n in cluster.nodes if n not in victims and cluster.alive(n))
        cluster.kill(third)  # 2 of 5 left: no majority, so no decision may commit
        code, out = rpc(cluster, 19, {"topics": [{"name": "no-quorum", "num_partitions": 1,
                                                  "replication_factor": 1}]}, timeout_s=8)
        if code == errors.NONE:
            assert out["topics"][0]["error_code"] != errors.NONE, out
        else:  # NOT_CONTROLLER, REQUEST_TIMED_OUT, or NETWORK_EXCEPTION from a dead controller
            assert errors.for_code(code).retriable, (errors.name_of(code), out)
        cluster.restart(third)
        names = [t["name"] for t in metadata(cluster, timeout_s=30)["topics"]]
        assert "two-down" in names
    finally:
        fake.close()
