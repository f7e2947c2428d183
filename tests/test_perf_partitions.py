"""`raftka perf partitions` (issue #scale, item 3): the partitions curve.

A smoke run with a tiny N against real processes checks that every figure is in the JSON with a
sane value (rates > 0, the full ISR reached after the restart, CPU within two cores, the /proc
figures of each broker), the table and the plot; bad arguments are one-line errors.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftka.bench import partitions
from raftka.cli import main


def test_topics_hold_exactly_the_partitions_asked_for():
    assert partitions.topic_sizes(20, 10) == [("partitions-00000", 10), ("partitions-00001", 10)]
    assert [n for _, n in partitions.topic_sizes(25, 10)] == [10, 10, 5]
    assert partitions.partition_counts("100, 1_000,10000") == [100, 1000, 10000]


def test_cpu_rss_and_open_files_of_this_process_are_read_from_proc():
    import os
    pid = os.getpid()
    before = partitions.cpu_seconds(pid)
    sum(i * i for i in range(300_000))  # burn a little CPU
    assert partitions.cpu_seconds(pid) > before
    assert partitions.rss_bytes(pid) > 10_000_000  # a Python with pytest loaded
    with open(__file__) as f:
        opened = partitions.open_files(pid)
        assert opened >= 4  # stdin/out/err + this file
    assert partitions.open_files(pid) == opened - 1
    limit = partitions.open_files_limit(pid)
    assert limit is None or limit > 0


def test_a_node_starts_with_the_open_files_soft_limit_raised_to_the_hard_limit(tmp_path):
    # In a child Python, so this process keeps its limit: lower the soft limit, start a "node"
    # (the log sink) that prints the limit it inherited.
    import resource
    import subprocess
    import sys
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"hard open-files limit {hard}: nothing to raise to")
    log = tmp_path / "node.log"
    script = (
        "import resource, sys\n"
        "from raftka.cluster.process import LOG, Process\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "probe = 'import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])'\n"
        "node = Process('probe', [sys.executable, '-c', probe], sink=LOG, log_path=sys.argv[1])\n"
        "assert node.wait_exit(30)\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")
    from raftka.cluster import project_env
    run = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, text=True, timeout=60,
                         env=project_env())
    assert run.returncode == 0, run.stderr
    starter = int(run.stdout.split()[-1])
    assert starter > 256 and int(log.read_text().split()[-1]) == starter


def test_bad_arguments_are_one_line_errors(capsys):
    assert main(["perf", "partitions", "--partitions", "100,x"]) == 1
    assert main(["perf", "partitions", "--partitions", "0"]) == 1
    assert main(["perf", "partitions", "--brokers", "2"]) == 1
    assert main(["perf", "partitions", "--idle-seconds", "0"]) == 1
    assert main(["perf", "partitions", "--record-size", "4"]) == 1
    assert main(["perf", "partitions", "--controller-kills", "-1"]) == 1
    assert main(["perf", "partitions", "--controller-kills", "1", "--controllers", "1"]) == 1
    assert main(["perf", "partitions", "--failover-timeout-s", "0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 8 and all(line.startswith("error: ") for line in err), err
    assert "--partitions" in err[0] and "--brokers" in err[2]
    assert "--controller-kills" in err[5] and "--controllers >= 3" in err[6] and "--failover-timeout-s" in err[7]


def test_open_files_needed_counts_a_segment_per_replica_a_broker_holds():
    # 30,000 partitions, RF 3, 3 brokers: 30,001 replicas each (the extra topic) + the headroom
    assert partitions.open_files_needed(30_000, 3) == 30_001 + partitions.OPEN_FILES_HEADROOM
    assert partitions.open_files_needed(10_000, 6) == 5_001 + partitions.OPEN_FILES_HEADROOM


def _can_raise_hard_limits() -> bool:
    """CAP_SYS_RESOURCE (bit 24) in this process's effective capabilities."""
    for line in open("/proc/self/status"):
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)
    return False


def test_the_hard_open_files_limit_is_raised_when_more_is_needed_or_refused_in_one_line():
    # In a child Python, so this process keeps its limits: lower both, then ask for more.
    script = ("import resource\n"
              "from raftka.cluster.process import raise_open_files_limit\n"
              "resource.setrlimit(resource.RLIMIT_NOFILE, (512, 1024))\n"
              "try:\n"
              "    print(*raise_open_files_limit(int(sys.argv[1])))\n"
              "except Exception as e:\n"
              "    print(type(e).__name__, str(e).count(chr(10)), e)\n")
    nr_open = int(open("/proc/sys/fs/nr_open").read())
    from raftka.cluster import project_env

    def raise_to(needed: int) -> str:
        run = subprocess.run([sys.executable, "-c", "import sys\n" + script, str(needed)], capture_output=True,
                             text=True, timeout=60, env=project_env())
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()
    if _can_raise_hard_limits():
        assert raise_to(4096) == "4096 4096"
    else:  # e.g. root in a container without CAP_SYS_RESOURCE
        assert raise_to(4096) == ("ClusterError 0 open files: 4,096 needed per node, the limit stays at 1,024 "
                                  "(hard 1,024): raising the hard limit needs CAP_SYS_RESOURCE (root outside a "
                                  "container); raise it (ulimit -Hn / -n, or fs.nr_open) before starting")
    assert raise_to(800) == "1024 1024"  # within the hard limit: the soft limit is raised to it
    name, newlines, message = raise_to(nr_open + 1).split(" ", 2)
    assert (name, newlines) == ("ClusterError", "0") and f"{nr_open + 1:,} needed" in message
    assert f"fs.nr_open is {nr_open:,}" in message


@pytest.mark.timeout(180)
def test_the_curve_at_a_tiny_n_has_every_figure(tmp_path, capsys):
    plot = tmp_path / "curve.png"
    code = main(["perf", "partitions", "--partitions", "20", "--idle-seconds", "2", "--records", "2000",
                 "--keyed-records", "3000", "--e2e-rate", "1000", "--e2e-duration", "1", "--controller-kills", "2",
                 "--json",
                 "--no-progress", "--plot", str(plot)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert "error" not in out and out["open_files_limit"]["soft"] >= out["open_files_limit"]["soft_before"]
    [point] = out["points"]
    assert point["partitions"] == 20 and point["topics"] == 2 and point["problems"] == []
    assert 0 < point["create_s"] <= point["leaders_s"]
    brokers = set(point["idle_cpu_percent"])
    assert len(brokers) == 3
    for figure in ("idle_cpu_percent", "rss_bytes", "open_files", "open_files_limit"):
        assert set(point[figure]) == brokers, figure
    assert all(0 <= pct <= 200 for pct in point["idle_cpu_percent"].values())
    assert all(10_000_000 < rss < 4_000_000_000 for rss in point["rss_bytes"].values())
    # at least stdio, the listeners and one segment file per replica it holds (20 x 3 / 3 + 1)
    assert all(20 < n < 10_000 for n in point["open_files"].values())
    assert point["produce"]["records"] == 2000 and point["produce"]["records_per_s"] > 0
    assert point["produce"]["failed_batches"] == 0
    e2e = point["e2e"]
    assert e2e["received"] == e2e["sent"] == 1000 and 0 < e2e["e2e_latency_ms"]["p50"] <= e2e["e2e_latency_ms"]["p99"]
    keyed = point["keyed"]
    assert keyed["records_per_s"] > 0 and keyed["failed_batches"] == 0
    assert keyed["partitions_keyed"] == keyed["partitions"] == 20  # the keys reached every partition
    restart = point["restart"]
    assert restart["broker"] in {int(b) for b in brokers}
    assert 0 < restart["fenced_s"] and 0 < restart["ready_s"] <= restart["full_isr_s"] < 180
    failover = point["controller_failover"]
    assert failover["kills"] == len(failover["samples_s"]) == len(failover["rejoin_s"]) == 2
    assert set(failover["controllers"]) <= {1, 2, 3}  # controllers are nodes 1-3
    assert 0 < failover["median_s"] <= failover["max_s"] == max(failover["samples_s"]) < 60
    # the table (on stderr with --json) has a column for N and a row per figure
    assert "| 20 partitions |" in captured.err and "keyed over all partitions" in captured.err
    assert "| controller failover median / max (ms) |" in captured.err
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _children(pid: int) -> dict[int, str]:
    """{pid: command line} of the processes whose parent is ``pid``."""
    from pathlib import Path
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.mark.timeout(120)
def test_sigterm_stops_every_node_and_the_measuring_child():
    import signal
    import subprocess
    from raftka.cluster import pid_is_ours, project_env, python_argv, wait_until
    proc = subprocess.Popen(python_argv("-m", "raftka", "perf", "partitions", "--partitions", "20",
                                        "--idle-seconds", "1", "--records", "50000000", "--no-progress"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=project_env())
    try:
        for line in proc.stdout:
            if line.startswith("idle CPU"):  # next: the produce run, in a child process
                break
        started = wait_until(lambda: (c := _children(proc.pid)) and any("multiprocessing" in cmd and "spawn_main"
                                                                       in cmd for cmd in c.values()) and c,
                             60, what="the produce child")
        nodes = [pid for pid, cmd in started.items() if " server --config " in cmd]
        assert len(nodes) == 6, started
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
        # the resource tracker of multiprocessing ends once its parent is gone, a moment later
        wait_until(lambda: not [pid for pid, cmd in started.items() if pid_is_ours(pid, cmd)], 15,
                   what="every process it started gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
