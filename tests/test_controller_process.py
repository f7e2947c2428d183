"""The controller process (`raftka server`) and the quorum tooling, with real processes.

Every test starts `python -m raftka server --config ...` processes through raftka.cluster
(ports chosen at run time, readiness by ready line with a timeout) and stops them by PID.
"""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
import uuid

import pytest

from raftka.common import errors
from raftka.cluster import Process, free_ports, project_env, python_argv, wait_until, write_properties
from raftka.cluster.controller_client import describe_quorum


@pytest.fixture(scope="module")
def quorum(tmp_path_factory):
    """One 3-voter quorum shared by the tests that only read from it or talk to it (starting one
    costs seconds); the tests that kill or pause a controller take their own `controller_cluster`.
    Every process is stopped by PID when the module ends."""
    from raftka.cluster import ControllerCluster
    cluster = ControllerCluster.start(tmp_path_factory.mktemp("quorum") / "cluster", voters=3)
    try:
        yield cluster
    finally:
        cluster.close()


def test_three_controllers_elect_one_active_controller_and_agree_on_it(quorum):
    leader = quorum.wait_for_leader(timeout_s=30)
    views = {n: quorum.describe_quorum(n) for n in quorum.nodes}
    wait_until(lambda: all(quorum.describe_quorum(n)["leader_id"] == leader
                           for n in quorum.nodes), 15, what="every controller knows the leader")
    assert [n for n, v in views.items() if v["active"]] == [leader]
    # Every controller announced its RPC endpoint through the log: the leader's view lists them.
    wait_until(lambda: all(v["endpoint"] for v in quorum.describe_quorum(leader)["voters"]),
               15, what="every voter's endpoint committed")


def test_a_non_active_controller_answers_not_controller_and_its_describe_quorum_names_the_active_one(quorum):
    leader = quorum.wait_for_leader(timeout_s=30)
    follower = next(n for n in quorum.nodes if n != leader)
    host, port = quorum.controller_address(leader)
    follower_address = "%s:%d" % quorum.controller_address(follower)
    from raftka.common.transport import call_sync
    # Kafka's answer carries the error in each topic's entry.
    _, answer = call_sync(follower_address, 19, {"topics": [{"name": "t"}]}, timeout_ms=5000)
    topic = answer["topics"][0]
    assert topic["name"] == "t" and topic["error_code"] == errors.NOT_CONTROLLER
    # Kafka's answers name no active controller: the one that refused tells it in DescribeQuorum.
    wait_until(lambda: describe_quorum(follower_address)["leader_endpoint"] == f"{host}:{port}", 15,
               what="the follower's DescribeQuorum names the active controller")


def test_kill_9_of_the_active_controller_elects_another_that_commits(controller_cluster):
    old = controller_cluster.wait_for_leader(timeout_s=30)
    before = controller_cluster.describe_quorum(old)["high_watermark"]
    controller_cluster.kill(old)
    survivors = [n for n in controller_cluster.nodes if n != old]
    new = controller_cluster.wait_for_leader(timeout_s=30, among=survivors)
    assert new != old
    # The restarted controller re-announces its endpoint: a committed record through the new leader.
    controller_cluster.restart(old)
    wait_until(lambda: controller_cluster.describe_quorum(new)["high_watermark"] > before, 20,
               what="a record committed by the new leader")
    status = wait_until(lambda: (s := controller_cluster.describe_quorum(new))["leader_epoch"] > 1 and s, 10,
                        what="a later term")
    assert status["leader_id"] == new


def test_quorum_status_cli_prints_leader_term_and_each_voters_lag(quorum):
    leader = quorum.wait_for_leader(timeout_s=30)
    follower = next(n for n in quorum.nodes if n != leader)
    address = "%s:%d" % quorum.controller_address(follower)
    wait_until(lambda: describe_quorum(address)["leader_endpoint"], 15, what="leader endpoint known")
    run = subprocess.run(python_argv("-m", "raftka", "quorum", "status", "--bootstrap-controller", address,
                                     "--json"), capture_output=True, text=True, env=project_env(), timeout=60)
    assert run.returncode == 0, run.stderr
    status = json.loads(run.stdout)
    assert status["leader_id"] == leader and status["active"]  # the tool asked the active controller
    assert len(status["voters"]) == 3 and all(v["lag"] is not None for v in status["voters"])
    assert all(isinstance(v["log_end_offset"], int) for v in status["voters"])
    assert status["leader_epoch"] >= 1 and status["high_watermark"] > 0
    assert max(v["log_end_offset"] for v in status["voters"]) >= status["high_watermark"]
    text = subprocess.run(python_argv("-m", "raftka", "quorum", "status", "--bootstrap-controller", address),
                          capture_output=True, text=True, env=project_env(), timeout=60)
    assert text.returncode == 0, text.stderr
    assert f"ClusterLeaderId:   {leader}" in text.stdout and "LogEndOffset" in text.stdout


def test_garbage_on_the_rpc_port_closes_only_that_connection(quorum):
    leader = quorum.wait_for_leader(timeout_s=30)
    host, port = quorum.controller_address(leader)
    bad = socket.create_connection((host, port), timeout=10)
    good = socket.create_connection((host, port), timeout=10)
    try:
        bad.sendall(b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1")  # no Kafka request starts 0xc1
        bad.settimeout(10)
        assert bad.recv(1024) == b""  # closed by the server
        huge = socket.create_connection((host, port), timeout=10)
        huge.sendall(b"\xff\xff\xff\xff")  # a length far above socket.request.max.bytes
        huge.settimeout(10)
        assert huge.recv(1024) == b""
        huge.close()
        from raftka.common.transport import decode_kafka_response
        good.sendall(b"\x00\x00\x00\x0e" + b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test")  # ApiVersions v0
        good.settimeout(10)
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = good.recv(65536)
            assert chunk, "the good connection was closed too"
            data += chunk
        correlation_id, body = decode_kafka_response(data[4:], 18, 0)
        assert (correlation_id, body["error_code"]) == (7, 0)
        assert 55 in {entry["api_key"] for entry in body["api_keys"]}
    finally:
        bad.close()
        good.close()
    assert quorum.alive(leader)


def test_a_controller_refuses_to_start_without_a_secret_or_with_a_secret_file_others_can_read(tmp_path):
    raft_port, rpc_port = free_ports(2)
    config = tmp_path / "server.properties"
    base = {"process.roles": "controller", "node.id": 1, "controller.quorum.voters": f"1@127.0.0.1:{raft_port}",
            "listeners": f"CONTROLLER://127.0.0.1:{rpc_port}", "log.dirs": str(tmp_path / "d")}

    def refused(values: dict, needle: str) -> None:
        write_properties(config, values)
        run = subprocess.run(python_argv("-m", "raftka", "server", "--config", str(config)),
                             capture_output=True, text=True, env=project_env(), timeout=60)
        assert run.returncode == 1 and needle in run.stderr and "Traceback" not in run.stderr, run.stderr

    refused(base, "controller.quorum.secret")  # loopback too: the port unpickles
    secret = tmp_path / "secret"
    secret.write_text("correct horse battery staple\n")
    secret.chmod(0o644)
    refused({**base, "controller.quorum.secret.file": str(secret)}, "chmod 600")
    # With the file its owner's only, the same config starts.
    secret.chmod(0o600)
    write_properties(config, {**base, "controller.quorum.secret.file": str(secret)})
    process = Process("secret-ok", python_argv("-m", "raftka", "server", "--config", str(config)), env=project_env())
    try:
        process.wait_for_line(lambda l: " ready " in l, timeout_s=60)
    finally:
        process.stop()


@pytest.mark.parametrize("key,value,needle", [
    ("node.id", "abc", "node.id"),
    ("controller.quorum.voters", "1@nohost", "controller.quorum.voters"),
    ("broker.session.timeout.ms", "-5", "broker.session.timeout.ms"),
    ("no.such.key", "1", "no.such.key"),
])
def test_a_bad_server_config_value_names_the_key(tmp_path, key, value, needle):
    raft_port, rpc_port = free_ports(2)
    values = {"process.roles": "controller", "node.id": 1, "controller.quorum.voters": f"1@127.0.0.1:{raft_port}",
              "listeners": f"CONTROLLER://127.0.0.1:{rpc_port}", "log.dirs": str(tmp_path / "d"),
              "controller.quorum.secret": "s3cret"}
    values[key] = value
    config = tmp_path / "server.properties"
    write_properties(config, values)
    from raftka.common.server_config import load_server_config
    from raftka.common.errors import ConfigError
    with pytest.raises(ConfigError) as caught:
        load_server_config(str(config))
    assert needle in str(caught.value)


def test_any_controller_serves_committed_metadata_records_by_fetch_with_long_poll(quorum):
    leader = quorum.wait_for_leader(timeout_s=30)
    from raftka.raft_meta.metadata.fetcher import fetch_entries
    for node_id in quorum.nodes:
        address = "%s:%d" % quorum.controller_address(node_id)

        def three_announcements():
            partition, entries = asyncio.run(fetch_entries(address))
            kinds = [entry[:1] for _, entry in entries]
            return (partition, entries) if kinds.count(b"C") >= 3 else None
        partition, entries = wait_until(three_announcements, 20,
                                        what=f"controller {node_id} serves the announcements")
        offsets = [o for o, _ in entries]
        assert offsets == sorted(offsets) and partition["high_watermark"] > offsets[-1]
        # Nothing new: a long poll waits about max_wait_ms and returns no records.
        started = time.monotonic()
        _, empty = asyncio.run(fetch_entries(address, partition["high_watermark"], max_wait_ms=300))
        assert empty == [] and time.monotonic() - started >= 0.25
    with pytest.raises(errors.OffsetOutOfRangeError):  # a negative fetch_offset
        asyncio.run(fetch_entries("%s:%d" % quorum.controller_address(leader), -1))


def test_a_paused_active_controller_is_replaced_and_steps_down_when_resumed(controller_cluster):
    old = controller_cluster.wait_for_leader(timeout_s=30)
    controller_cluster.pause(old)  # SIGSTOP: alive but silent, like a long GC pause
    try:
        survivors = [n for n in controller_cluster.nodes if n != old]
        new = controller_cluster.wait_for_leader(timeout_s=30, among=survivors)
    finally:
        controller_cluster.resume(old)
    assert new != old

    def one_active():
        actives = [n for n in controller_cluster.nodes if controller_cluster.describe_quorum(n)["active"]]
        views = {controller_cluster.describe_quorum(n)["leader_id"] for n in controller_cluster.nodes}
        return actives == [new] and views == {new}
    wait_until(one_active, 20, what="the resumed controller follows the new leader")


def test_perf_metadata_command_runs_end_to_end_on_a_small_load(tmp_path):
    run = subprocess.run(python_argv("-m", "raftka", "perf", "metadata", "--kills", "1", "--topics", "5",
                                     "--changes", "2", "--broker-topics", "2", "--json"),
                         capture_output=True, text=True, env=project_env(), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout[run.stdout.index("{"):])
    assert result["create"]["partitions"] == 50 and result["restart_s"] > 0
    assert len(result["failover_s"]["samples"]) == 1
    # leader changes timed into real broker processes' images
    images = result["leader_change_to_broker_images_ms"]
    assert images["brokers"] == 3 and len(images["from_commit"]["samples"]) == 2
    assert len(images["from_request"]["samples"]) == 1 and images["from_request"]["median"] > 0
    assert len(result["load_average_start"]) == 3


def test_quorum_status_lists_metadata_fetchers_as_observers_with_their_lag(quorum):
    leader = quorum.wait_for_leader(timeout_s=30)
    address = "%s:%d" % quorum.controller_address(leader)
    from raftka.common.transport import Connection
    from raftka.raft_meta.metadata.fetcher import KAFKA_VERSIONS, fetch_request

    async def fetch_as_broker_101() -> dict:
        connection = await Connection.open(*quorum.controller_address(leader),
                                           kafka_versions=KAFKA_VERSIONS)
        try:
            return (await connection.request(1, fetch_request(0, replica_id=101), timeout_ms=5000))[1]
        finally:
            await connection.close()
    assert asyncio.run(fetch_as_broker_101())["responses"][0]["partitions"][0]["error_code"] == errors.NONE
    run = subprocess.run(python_argv("-m", "raftka", "quorum", "status", "--bootstrap-controller", address, "--json"),
                         capture_output=True, text=True, env=project_env(), timeout=60)
    status = json.loads(run.stdout)
    observer = next(o for o in status["observers"] if o.get("replica_id") == 101)
    assert observer["log_end_offset"] == 0 and observer["lag"] == status["high_watermark"] > 0
    assert observer["last_fetch_timestamp"] > 0


def test_the_http_listener_serves_health_and_prometheus_metrics(cluster_factory):
    import urllib.request
    http_port, = free_ports(1)
    cluster = cluster_factory(voters=1)
    cluster.stop(1)
    cluster.nodes[1].extra["listeners"] = (f"CONTROLLER://127.0.0.1:{cluster.nodes[1].controller_port},"
                                           f"HTTP://127.0.0.1:{http_port}")
    cluster.restart(1)
    cluster.wait_for_leader(timeout_s=30)
    health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health", timeout=10).read())
    assert health["active"] and health["leader_id"] == 1
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10).read().decode()
    assert 'raftka_controller_active{node="1"} 1' in text
    assert 'raftka_controller_leader_id{node="1"} 1' in text
    assert 'raftka_controller_brokers{node="1",state="fenced"} 0' in text  # no broker registered yet
    assert 'raftka_controller_term{node="1"}' in text and 'raftka_controller_commit_index{node="1"}' in text
    from raftka.cluster.controller_client import controller_request
    code, _ = controller_request(cluster.bootstrap_controllers, 62, {
        "broker_id": 7, "cluster_id": cluster.cluster_id, "incarnation_id": uuid.uuid4().hex,
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9}]})
    assert code == errors.NONE  # a newly registered broker starts fenced
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10).read().decode()
    assert 'raftka_controller_brokers{node="1",state="fenced"} 1' in text
    assert 'raftka_controller_fenced_broker{node="1",broker="7"} 1' in text
    assert 'raftka_controller_requests_total{node="1",api_key="55"}' in text  # our DescribeQuorum calls


def test_an_idle_rpc_connection_is_closed_after_connections_max_idle_ms_and_sigterm_exits_cleanly(cluster_factory):
    cluster = cluster_factory(voters=1, configs={"connections.max.idle.ms": 300})
    host, port = cluster.controller_address(1)
    idle = socket.create_connection((host, port), timeout=10)
    try:
        idle.settimeout(10)
        started = time.monotonic()
        assert idle.recv(16) == b""  # closed by the controller, not by our 10 s timeout
        assert time.monotonic() - started < 8
    finally:
        idle.close()
    assert cluster.stop(1) == 0  # SIGTERM: listener and Raft node closed, exit code 0
    assert "stopping" in cluster.process(1).output()


def test_the_local_quorum_launcher_starts_a_quorum_and_stops_it_on_sigterm(tmp_path):
    launcher = Process("launcher", python_argv("-m", "raftka", "quorum", "run", "--voters", "3", "--dir",
                                             str(tmp_path)),
                       env=project_env())
    try:
        launcher.wait_for_line(lambda l: l.startswith("bootstrap controllers"), timeout_s=60)
        bootstrap = launcher.wait_for_line(lambda l: l.startswith("bootstrap controllers"), 1).split(": ")[1]
        status = describe_quorum(bootstrap.split(",")[0])
        assert status["leader_id"] in (1, 2, 3)
        pids = [int(p) for p in subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True,
                                               text=True).stdout.split()]
        assert len(pids) >= 4  # the launcher and its three controllers
    finally:
        assert launcher.stop() == 0
    wait_until(lambda: not subprocess.run(["pgrep", "-f", f"{tmp_path}/controller-"], capture_output=True).stdout,
               20, what="every controller stopped with the launcher")


def test_max_connections_has_kafkas_name_and_the_old_name_is_read_as_a_deprecated_alias(caplog):
    from raftka.common.errors import ConfigError
    from raftka.common.server_config import server_config
    base = {"process.roles": "controller", "node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9301",
            "listeners": "CONTROLLER://127.0.0.1:9401", "log.dirs": "data",
            "controller.quorum.secret": "s3cret"}
    assert server_config(base)["max.connections"] == 1000
    assert server_config({**base, "max.connections": "7"})["max.connections"] == 7
    old = server_config({**base, "connections.max": "9"})
    assert old["max.connections"] == 9 and old["connections.max"] == 9
    assert "deprecated" in caplog.text and "max.connections" in caplog.text
    with pytest.raises(ConfigError, match="give only max.connections"):
        server_config({**base, "connections.max": "9", "max.connections": "7"})
