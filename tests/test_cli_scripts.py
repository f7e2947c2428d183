"""scripts/bootstrap-quorum.sh and scripts/quickstart.sh, run as a user runs them (bash, from a
clean working directory), each stopped again by the script itself. Ports: a free block found
at run time (--base-port), so nothing collides with other clusters on the machine.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from raftka.cluster import free_port_block, pid_is_ours, project_env, python_argv

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(300)


def script(name: str, *args: str, cwd: Path, stdin: str | None = None, timeout_s: float = 240
           ) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *args], cwd=cwd, capture_output=True, text=True,
                          env=project_env(), input=stdin, timeout=timeout_s)


def raftka(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(python_argv("-m", "raftka", *args), cwd=cwd, capture_output=True, text=True,
                          env=project_env(), input=stdin, timeout=90)


def ok(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Traceback" not in run.stderr, run.stderr
    return run.stdout


def cluster_ports(controllers: int, brokers: int) -> int:
    """How many consecutive ports `raftka cluster up --base-port P` takes (not --combined): per
    broker its PLAINTEXT listener and HTTP port, per controller its Raft, CONTROLLER and HTTP
    (/metrics) ports (raftka/cluster/clusters.py Cluster's layout)."""
    return 2 * brokers + 3 * controllers


def running_pids(state_path: Path) -> list[int]:
    state = json.loads(state_path.read_text())
    return [n["pid"] for n in state["nodes"].values() if n.get("pid") and pid_is_ours(n["pid"], n["marker"])]


def test_bootstrap_quorum_from_a_clean_directory_then_stop(tmp_path):
    base = free_port_block(cluster_ports(controllers=3, brokers=2))
    out = ok(script("bootstrap-quorum.sh", "--controllers", "3", "--brokers", "2", "--base-port", str(base),
                    cwd=tmp_path))
    state_path = tmp_path / ".raftka" / "cluster.json"
    state = json.loads(state_path.read_text())
    assert re.search(rf"cluster {re.escape(state['cluster_id'])} ready in [\d.]+ s: 3 controllers \+ 2 brokers", out)
    assert f"bootstrap servers: 127.0.0.1:{base},127.0.0.1:{base + 1}" in out
    assert "stop it with: scripts/bootstrap-quorum.sh --stop --dir .raftka" in out
    assert sorted(p.name for p in (tmp_path / ".raftka").iterdir() if p.is_dir()) == [
        "broker-4", "broker-5", "controller-1", "controller-2", "controller-3"]
    for node in ("controller-1", "broker-4"):
        config = (tmp_path / ".raftka" / node / "server.properties").read_text()
        assert "controller.quorum.voters=1@127.0.0.1:" in config
        meta = (tmp_path / ".raftka" / node / "data" / "meta.properties").read_text()
        assert f"cluster.id={state['cluster_id']}" in meta
    pids = running_pids(state_path)
    assert len(pids) == 5
    # the reservation covers every port the cluster took
    taken = [port for node in state["nodes"].values() for key, port in node.items()
             if key.endswith("port") and isinstance(port, int)]
    assert sorted(taken) == list(range(base, base + cluster_ports(controllers=3, brokers=2))), state["nodes"]

    # The console tools find it in ./.raftka by themselves.
    ok(raftka("topics", "create", "hello", "--partitions", "2", cwd=tmp_path))
    ok(raftka("produce", "hello", cwd=tmp_path, stdin="hi\nthere\n"))
    assert sorted(ok(raftka("consume", "hello", "--from-beginning", "--max-messages", "2", cwd=tmp_path)).split()) == [
        "hi", "there"]

    again = ok(script("bootstrap-quorum.sh", cwd=tmp_path))  # idempotent: reuses what runs
    assert "(already existed)" in again and sorted(running_pids(state_path)) == sorted(pids)

    stopped = ok(script("bootstrap-quorum.sh", "--stop", cwd=tmp_path))
    assert stopped.startswith("stopped: ") and not running_pids(state_path)
    assert not any(os.path.exists(f"/proc/{pid}") and pid_is_ours(pid, str(tmp_path)) for pid in pids)
    assert "nothing was running" in ok(script("bootstrap-quorum.sh", "--stop", cwd=tmp_path))
    ok(script("bootstrap-quorum.sh", "--stop", "--delete", cwd=tmp_path))
    assert not (tmp_path / ".raftka").exists()


def test_bootstrap_quorum_refuses_unknown_flags(tmp_path):
    run = script("bootstrap-quorum.sh", "--brokerz", "2", cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.strip() == "error: unknown option --brokerz (see --help)"
    assert not (tmp_path / ".raftka").exists()


def test_quickstart_runs_the_world_cup_demo_and_stops_the_cluster(tmp_path):
    base = free_port_block(cluster_ports(controllers=3, brokers=3))
    # 2 s of the Spark demo's live feed (10 by default): its queries still catch up, take the
    # feed and close windows; the JVM's start and first micro-batch are most of the step anyway.
    run = script("quickstart.sh", "--dir", str(tmp_path / "qs"), "--events", "3000", "--matches", "120",
                 "--base-port", str(base), "--spark-seconds", "2", cwd=tmp_path)
    out = ok(run)
    assert "$ raftka cluster up" in out and "$ raftka topics create worldcup-events" in out
    assert "PartitionCount: 6\tReplicationFactor: 3\tConfigs: min.insync.replicas=2" in out
    assert "acknowledged 3,000" in out and "failed 0" in out
    assert "3 consumers in one consumer group" in out
    assert "per-match order: preserved for all 120 matches" in out
    assert "events produced 3,000, consumed 3,000, matches 120" in out
    offsets = re.findall(r"^\s+(\d)\s+(\d+)\s+(\d+)\s+([\d,]+)$", out, re.M)
    assert [int(p) for p, *_ in offsets] == list(range(6))
    assert sum(int(end) - int(start) for _, start, end, _ in offsets) == 3000
    if os.environ.get("RAFTKA_HAVE_JAVA"):  # the Spark step runs on the committed events
        assert "$ raftka spark demo --dir" in out and "--seconds 2 " in out, out
        assert re.search(r"Parquet \(.*\): \d+ closed windows", out), out
    assert re.search(r"quickstart done in \d+ s", out)
    assert "$ raftka cluster down" in out and not running_pids(tmp_path / "qs" / "cluster.json")


def test_quickstart_keep_leaves_the_cluster_running_for_the_console_tools(tmp_path):
    run = script("quickstart.sh", "--keep", "--dir", str(tmp_path / "qs"), "--events", "600", "--matches", "20",
                 "--no-spark", cwd=tmp_path)
    out = ok(run)
    assert "The cluster keeps running (--keep)" in out and "$ raftka cluster down" not in out
    try:
        assert len(running_pids(tmp_path / "qs" / "cluster.json")) == 6
        got = ok(raftka("consume", "worldcup-events", "--dir", str(tmp_path / "qs"), "--from-beginning",
                        "--max-messages", "600", "--print-key", cwd=tmp_path))
        assert len(got.splitlines()) == 600 and all(line.startswith("WC-") for line in got.splitlines())
    finally:
        ok(raftka("cluster", "down", "--dir", str(tmp_path / "qs"), cwd=tmp_path))
