"""`raftka cluster up|down|status|kill|pause|resume|restart`, each call its own process, as a user
runs them: the cluster must outlive the command that started it, and later commands attach to
it through DIR/cluster.json. Also the error paths (one line, non-zero exit, no traceback).

One cluster (3 controllers, 2 brokers, short broker session so a killed broker can re-register
quickly) serves the tests in order; ports come from a free block found at run time.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from raftka.cluster import (Cluster, NoClusterError, free_port_block, local_bootstrap_servers, pid_is_ours,
                            project_env, python_argv, wait_until)

pytestmark = pytest.mark.timeout(180)

FAST = ["--config", "broker.session.timeout.ms=2000", "--config", "broker.heartbeat.interval.ms=300"]
PORTS = 3 + 2 * 3 + 2 + 2  # 3 controllers (raft, rpc), 2 brokers (plaintext, http)


def raftka(*args: str, cwd: Path | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(python_argv("-m", "raftka", *args), capture_output=True, text=True, env=project_env(),
                          cwd=cwd, timeout=timeout_s)


def ok(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Traceback" not in run.stderr, run.stderr
    return run.stdout


def one_line_error(run: subprocess.CompletedProcess, *words: str, code: int = 1) -> str:
    """The command failed with ``code`` and printed one ``error:`` line naming ``words``."""
    assert run.returncode == code, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Traceback" not in run.stderr + run.stdout, run.stderr
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, run.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def status(root: Path) -> dict:
    return json.loads(ok(raftka("cluster", "status", "--dir", str(root), "--json")))


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """(dir, base port, first `up` result): a cluster started by `raftka cluster up`; torn down by
    `raftka cluster down`, then by PID through the API if anything is left."""
    root = tmp_path_factory.mktemp("cli-cluster") / ".raftka"
    base = free_port_block(PORTS)
    first = raftka("cluster", "up", "--dir", str(root), "--controllers", "3", "--brokers", "2",
                   "--base-port", str(base), *FAST)
    try:
        yield root, base, first
    finally:
        raftka("cluster", "down", "--dir", str(root))
        try:
            leftover = Cluster.open(root)
            leftover.started = list(leftover.processes.values())
            leftover.close()
        except NoClusterError:
            pass


def test_up_starts_a_cluster_that_outlives_the_command_and_prints_where_it_is(started):
    root, base, first = started
    out = ok(first)
    state = json.loads((root / "cluster.json").read_text())
    assert f"bootstrap servers: 127.0.0.1:{base},127.0.0.1:{base + 1}" in out, "brokers take the first ports"
    assert f"cluster {state['cluster_id']} ready" in out
    assert "stop it with: raftka cluster down" in out
    assert "active controller" in first.stderr and "registered and unfenced" in first.stderr, "progress lines"
    assert "note: PLAINTEXT listeners" in first.stderr, "says the cluster has no authentication"
    for node in state["nodes"].values():  # the command exited; its nodes run on, each its own session
        pid = node["pid"]
        assert pid_is_ours(pid, node["marker"])
        assert os.getsid(pid) == pid, "a node leads its own session (Ctrl-C in the shell does not reach it)"
        meta = (root / node["data_dir"] / "data" / "meta.properties").read_text()
        assert f"cluster.id={state['cluster_id']}" in meta and f"node.id={node['node_id']}" in meta
        assert (root / node["data_dir"] / "server.properties").exists()
        assert "ready" in (root / node["data_dir"] / "server.log").read_text()


def test_status_shows_every_node_with_its_role_pid_ports_and_leader_or_fenced_state(started):
    root, base, _ = started
    seen = status(root)
    nodes = {n["node_id"]: n for n in seen["nodes"]}
    assert sorted(nodes) == [1, 2, 3, 4, 5]
    assert all(n["alive"] and n["pid"] and not n["paused"] for n in nodes.values())
    assert sorted(n["quorum_role"] for n in nodes.values() if "controller" in n["roles"]) == [
        "follower", "follower", "leader"]
    assert [nodes[b]["fenced"] for b in (4, 5)] == [False, False]
    assert nodes[4]["plaintext_port"] == base and nodes[5]["plaintext_port"] == base + 1
    text = ok(raftka("cluster", "status", "--dir", str(root)))
    assert "5 of 5 running" in text
    assert any(line.split()[:2] == ["1", "controller-1"] for line in text.splitlines())
    assert "leader" in text and "unfenced" in text


def test_up_again_is_a_no_op_and_a_different_shape_is_refused(started):
    root, _, _ = started
    pids = {n["node_id"]: n["pid"] for n in status(root)["nodes"]}
    again = ok(raftka("cluster", "up", "--dir", str(root)))
    assert "(already existed)" in again
    assert {n["node_id"]: n["pid"] for n in status(root)["nodes"]} == pids, "nothing restarted"
    one_line_error(raftka("cluster", "up", "--dir", str(root), "--brokers", "4"), "already holds a cluster",
                   "3 controllers + 2 brokers")


def test_the_cluster_api_attaches_to_a_cluster_the_cli_started(started):
    root, base, _ = started
    cluster = Cluster.open(root)
    assert cluster.bootstrap_servers == f"127.0.0.1:{base},127.0.0.1:{base + 1}"
    assert local_bootstrap_servers(root) == cluster.bootstrap_servers
    assert cluster.leader_id() in (1, 2, 3)
    assert all(cluster.alive(n) for n in cluster.nodes)


def test_kill_then_status_then_restart_a_broker(started):
    root, _, _ = started
    pid = status(root)["nodes"][3]["pid"]
    out = ok(raftka("cluster", "kill", "--dir", str(root), "broker-4"))
    assert f"killed broker-4 (pid {pid}, SIGKILL)" in out
    assert not pid_is_ours(pid, str(root / "broker-4" / "server.properties"))
    node = status(root)["nodes"][3]
    assert node["alive"] is False and node["pid"] is None
    one_line_error(raftka("cluster", "kill", "--dir", str(root), "4"), "broker-4 is not running")
    out = ok(raftka("cluster", "restart", "--dir", str(root), "4"))
    assert "restarted broker-4" in out
    node = wait_until(lambda: (n := status(root)["nodes"][3])["fenced"] is False and n, 30, interval_s=0.5,
                      what="broker-4 unfenced again")
    assert node["alive"] and node["pid"] != pid


def test_pause_stops_the_active_controller_answering_and_resume_brings_it_back(started):
    root, _, _ = started
    leader = next(n["node_id"] for n in status(root)["nodes"] if n.get("quorum_role") == "leader")
    out = ok(raftka("cluster", "pause", "--dir", str(root), "leader"))
    assert f"paused controller-{leader}" in out
    try:
        def new_leader():
            nodes = status(root)["nodes"]
            assert nodes[leader - 1]["paused"] is True
            return next((n["node_id"] for n in nodes if n.get("quorum_role") == "leader"), None)
        assert wait_until(new_leader, 30, interval_s=0.5, what="another active controller") != leader
    finally:
        out = ok(raftka("cluster", "resume", "--dir", str(root), str(leader)))
    assert f"resumed controller-{leader}" in out
    node = status(root)["nodes"][leader - 1]
    assert node["alive"] and not node["paused"]


def test_up_restarts_only_the_nodes_that_are_not_running(started):
    root, _, _ = started
    before = {n["node_id"]: n["pid"] for n in status(root)["nodes"]}
    ok(raftka("cluster", "kill", "--dir", str(root), "controller-2"))
    out = raftka("cluster", "up", "--dir", str(root))
    ok(out)
    assert "controller-2 ready" in out.stderr and "already running: controller-1, controller-3" in out.stderr
    after = {n["node_id"]: n["pid"] for n in status(root)["nodes"]}
    assert after[2] != before[2] and all(after[n] == before[n] for n in (1, 3, 4, 5))


def test_a_recorded_pid_that_now_belongs_to_another_process_is_not_ours(started, tmp_path):
    root, _, _ = started
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        fake = tmp_path / ".raftka"
        fake.mkdir()
        state = json.loads((root / "cluster.json").read_text())
        for node in state["nodes"].values():
            node["pid"] = stranger.pid  # as if the PID had been reused after a reboot
            node["marker"] = str(fake / node["data_dir"] / "server.properties")
        (fake / "cluster.json").write_text(json.dumps(state))
        seen = status(fake)
        assert all(not n["alive"] and n["pid"] is None for n in seen["nodes"])
        one_line_error(raftka("cluster", "kill", "--dir", str(fake), "1"), "controller-1 is not running")
        ok(raftka("cluster", "down", "--dir", str(fake)))
        assert stranger.poll() is None, "down never signals a process that is not ours"
    finally:
        stranger.kill()
        stranger.wait()


def test_node_names_that_do_not_exist_and_bad_flags_are_one_line_errors(started):
    root, _, _ = started
    one_line_error(raftka("cluster", "kill", "--dir", str(root), "42"), "no node '42'", "controller-1")
    one_line_error(raftka("cluster", "pause", "--dir", str(root), "broker-1"), "node 1 is controller-1")
    bad = raftka("cluster", "up", "--dir", str(root), "--controllers", "2")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "Traceback" not in bad.stderr
    bad = raftka("cluster", "status", "--dir", str(root), "--bogus")
    assert bad.returncode == 2 and "unrecognized arguments: --bogus" in bad.stderr and "Traceback" not in bad.stderr


def test_down_stops_everything_brokers_first_and_is_safe_to_repeat_then_delete(started):
    root, _, _ = started
    pids = [(n["pid"], str(root / n["name"] / "server.properties")) for n in status(root)["nodes"]]
    out = ok(raftka("cluster", "down", "--dir", str(root)))
    assert out.startswith("stopped: ") and "broker-4" in out and "controller-1" in out
    assert not any(pid_is_ours(pid, marker) for pid, marker in pids)
    assert "stopping" in (root / "broker-4" / "server.log").read_text(), "SIGTERM: a clean shutdown"
    assert "nothing was running" in ok(raftka("cluster", "down", "--dir", str(root)))
    assert all(not n["alive"] for n in status(root)["nodes"])
    one_line_error(raftka("topics", "list", "--dir", str(root)), "no cluster running")
    out = ok(raftka("cluster", "down", "--dir", str(root), "--delete"))
    assert "deleted" in out and not root.exists()
    one_line_error(raftka("cluster", "status", "--dir", str(root)), "no cluster in")
    assert "nothing to stop" in ok(raftka("cluster", "down", "--dir", str(root)))


def test_a_port_in_use_is_a_one_line_error_and_nothing_is_left_running(tmp_path):
    base = free_port_block(8)
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", base))
        squatter.listen()
        run = raftka("cluster", "up", "--dir", str(tmp_path / "c"), "--controllers", "1", "--brokers", "1",
                     "--base-port", str(base))
    one_line_error(run, f"port {base} is in use", "broker-2")
    assert not (tmp_path / "c" / "cluster.json").exists(), "ports are checked before anything starts"
    assert not subprocess.run(["pgrep", "-f", str(tmp_path / "c")], capture_output=True).stdout


def test_a_node_that_cannot_start_is_reported_with_its_log(tmp_path):
    base = free_port_block(4)
    run = raftka("cluster", "up", "--dir", str(tmp_path / "c"), "--controllers", "1", "--brokers", "1",
                 "--base-port", str(base), "--config", "num.partitions=0", "--timeout-ms", "30000")
    line = one_line_error(run, "exited", "before it was ready", "server.log")
    assert "last output" not in line, "the log tail stays in the log file, not on the error line"
    assert "num.partitions" in (tmp_path / "c" / "controller-1" / "server.log").read_text()


def test_the_local_cluster_in_the_working_directory_is_the_default(tmp_path):
    """No --dir: ./.raftka (or $RAFTKA_DIR)."""
    run = raftka("cluster", "status", cwd=tmp_path)
    one_line_error(run, f"no cluster in {tmp_path / '.raftka'}")
    env = {**project_env(), "RAFTKA_DIR": str(tmp_path / "elsewhere")}
    run = subprocess.run(python_argv("-m", "raftka", "cluster", "status"), capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=60)
    one_line_error(run, "elsewhere")


def test_sigterm_to_a_paused_node_still_stops_it(tmp_path):
    """down sends SIGCONT before SIGTERM: a paused node would otherwise ignore it until SIGKILL."""
    cluster = Cluster.start(tmp_path, controllers=1, brokers=0)
    try:
        process = cluster.process(1)
        cluster.pause(1)
        began = time.monotonic()
        assert cluster.down() == [1]
        assert time.monotonic() - began < 8, "stopped by SIGTERM, not by the SIGKILL fallback"
        assert process.returncode == 0
    finally:
        cluster.close()
