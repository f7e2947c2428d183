"""`raftka perf controller-stability`: leader changes of the controller quorum on a busy box,
then controller failover on that same box (issue #hardening, item 6).

It starts a real 3+3 cluster (raftka.cluster) and makes the box busy:

- ``--burners`` processes that only spin, so the load average stays above the cores;
- a producer (acks=all) at ``--rate`` records/s into a 6-partition topic, RF 3;
- a topic created and deleted every ``--churn-s`` seconds, so the metadata log keeps growing
  (and the controllers snapshot it).

For ``--minutes`` no fault is injected. Every ``SAMPLE_INTERVAL_S`` each controller is asked
for its quorum view (DescribeQuorum); a Raft term that grows is an election, a new active
controller a leader change. Then, with the load still on, ``--kills`` times: kill -9 of the
active controller, timed until the next CreateTopics commits (the failover a client sees),
then the killed controller is started again and the quorum waits for it.

Prints the events, one summary line per figure and, with --json, a JSON object. Nothing here
asserts a target; BENCHMARKS.md records what a run measured.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

SAMPLE_INTERVAL_S = 0.5
DESCRIBE_TIMEOUT_S = 2.0
PRODUCE_BATCH_RECORDS = 100


def register(perf: argparse._SubParsersAction) -> None:
    parser = perf.add_parser("controller-stability",
                             help="controller leader changes under load, then failover under the same load")
    parser.add_argument("--minutes", type=float, default=30.0, help="fault-free window watched for leader changes")
    parser.add_argument("--burners", type=int, default=4, help="spinning processes that keep the box busy")
    parser.add_argument("--rate", type=int, default=2000, help="records/s produced with acks=all (0: none)")
    parser.add_argument("--churn-s", type=float, default=5.0, help="create and delete a topic this often (0: never)")
    parser.add_argument("--kills", type=int, default=10, help="failovers timed after the window")
    parser.add_argument("--settle-s", type=float, default=60.0,
                        help="load before the window opens (the 1-minute load average needs about a minute)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


class _Watch:
    """Samples every controller's quorum view; records elections and leader changes."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.events: list[dict[str, Any]] = []
        self.loads: list[float] = []
        self.samples = 0
        self.max_term = 0
        self.leader: int | None = None
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="quorum-watch", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(SAMPLE_INTERVAL_S):
            self.sample()

    def sample(self) -> None:
        terms, leaders = [], []
        for node_id in self.cluster.controller_ids:
            if not self.cluster.alive(node_id):
                continue
            try:
                status = self.cluster.describe_quorum(node_id, timeout_s=DESCRIBE_TIMEOUT_S)
            except Exception:  # a controller too slow to answer is noted by the others' terms
                continue
            terms.append(int(status["leader_epoch"]))  # the Raft term
            if status["active"]:
                leaders.append(node_id)
        at = round(time.monotonic() - self.started, 1)
        with self.lock:
            self.samples += 1
            self.loads.append(os.getloadavg()[0])
            if terms and max(terms) > self.max_term:
                if self.max_term:
                    self.events.append({"at_s": at, "event": "term", "from": self.max_term, "to": max(terms)})
                self.max_term = max(terms)
            if len(leaders) == 1 and leaders[0] != self.leader:
                if self.leader is not None:
                    self.events.append({"at_s": at, "event": "leader", "from": self.leader, "to": leaders[0]})
                self.leader = leaders[0]

    def mark(self) -> int:
        with self.lock:
            return len(self.events)


class _Load:
    """The busy box: spinning processes, a producer and topic churn (each stopped by ``close``)."""

    def __init__(self, cluster: Any, args: argparse.Namespace) -> None:
        from raftka.client import AdminClient, NewTopic
        self.cluster = cluster
        self.args = args
        self.stop = threading.Event()
        self.produced = 0
        self.errors = 0
        # Each spins until its parent is gone, so none outlives an interrupted run.
        spin = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass\n"
        self.burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(args.burners)]
        self.admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers)
        self.admin.create_topics([NewTopic("stability", 6, 3)])
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._churn, daemon=True)]
        for thread in self.threads:
            thread.start()

    def _produce(self) -> None:
        if self.args.rate <= 0:
            return
        from raftka.client import Producer
        producer = Producer(bootstrap_servers=self.cluster.bootstrap_servers, acks="all", linger_ms=5)
        try:
            pause_s = PRODUCE_BATCH_RECORDS / self.args.rate
            while not self.stop.is_set():
                began = time.monotonic()
                futures = [producer.send("stability", b"x" * 100) for _ in range(PRODUCE_BATCH_RECORDS)]
                for future in futures:
                    try:
                        future.get(timeout=30)
                        self.produced += 1
                    except Exception:
                        self.errors += 1
                self.stop.wait(max(0.0, pause_s - (time.monotonic() - began)))
        finally:
            producer.close(timeout=10)

    def _churn(self) -> None:
        from raftka.client import NewTopic
        n = 0
        while self.args.churn_s > 0 and not self.stop.wait(self.args.churn_s):
            n += 1
            try:
                self.admin.create_topics([NewTopic(f"churn-{n}", 3, 3)])
                self.admin.delete_topics([f"churn-{n}"])
            except Exception:
                self.errors += 1

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        self.admin.close()
        for burner in self.burners:
            burner.kill()
            burner.wait(10)


def kill_active_controller(cluster: Any, topic: str, timeout_s: float = 60.0) -> tuple[int, float]:
    """kill -9 of the active controller: (its id, seconds until the next metadata write commits,
    a CreateTopics of ``topic`` (1 partition, RF 1) retried while no controller is active)."""
    from raftka.bench.metadata import _ok
    leader = cluster.wait_for_leader(timeout_s=30)
    began = time.monotonic()
    cluster.kill(leader)
    _ok(cluster, 19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}]}, timeout_s)
    return leader, time.monotonic() - began


def restart_controller(cluster: Any, node_id: int, timeout_s: float = 60.0) -> float:
    """Start a killed controller again and wait until the active controller reports it caught up
    with the whole metadata log, so the next kill leaves a majority that can elect; seconds taken."""
    from raftka.cluster import wait_until
    began, restarted_ms = time.monotonic(), int(time.time() * 1000)
    cluster.restart(node_id, timeout_s=timeout_s)

    def caught_up() -> bool:
        leader = cluster.leader_id()
        if leader is None:
            return False
        voter = next(v for v in cluster.describe_quorum(leader, timeout_s=DESCRIBE_TIMEOUT_S)["voters"]
                     if v["node_id"] == node_id)
        return voter["last_caught_up_timestamp"] >= restarted_ms
    wait_until(caught_up, max(1.0, began + timeout_s - time.monotonic()), interval_s=0.1,
               what=f"controller {node_id} caught up with the metadata log after its restart")
    return time.monotonic() - began


def _failover(cluster: Any, kills: int, say: Any) -> list[float]:
    samples = []
    for round_ in range(kills):
        leader, seconds = kill_active_controller(cluster, f"failover-{round_}")
        samples.append(seconds)
        say(f"  kill -9 of controller {leader}: next CreateTopics committed after {samples[-1] * 1000:.0f} ms")
        restart_controller(cluster, leader)
    return samples


def run(args: argparse.Namespace) -> int:
    import signal

    from raftka.common.errors import ConfigError
    if args.minutes <= 0 or args.burners < 0 or args.rate < 0 or args.churn_s < 0 or args.kills < 0 \
            or args.settle_s < 0:
        raise ConfigError("--minutes/--burners/--rate/--churn-s/--kills/--settle-s",
                          "need --minutes > 0 and the others >= 0")
    from raftka.bench.client import _raise_on_term
    previous = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM unwinds like Ctrl-C, so the cluster's processes are stopped by PID on the way out.
        previous = signal.signal(signal.SIGTERM, _raise_on_term)
    try:
        return _run(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    from raftka.cluster import Cluster

    def say(line: str) -> None:
        print(line, flush=True)

    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                               "minutes": args.minutes, "burners": args.burners, "rate": args.rate,
                               "churn_s": args.churn_s, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="raftka-stability-") as root, \
            Cluster.start(root, controllers=3, brokers=3,
                          configs={"default.replication.factor": 3, "min.insync.replicas": 2}) as cluster:
        cluster.wait_for_leader(timeout_s=30)
        watch = _Watch(cluster)
        load = _Load(cluster, args)
        try:
            time.sleep(args.settle_s)  # the load settles; the window starts now
            watch.sample()
            first = watch.mark()
            watch.thread.start()
            say(f"watching {len(cluster.controller_ids)} controllers for {args.minutes:g} min "
                f"({args.burners} burners, {args.rate} records/s acks=all, a topic every {args.churn_s:g} s)")
            end = time.monotonic() + args.minutes * 60
            next_report = time.monotonic() + 60
            while time.monotonic() < end:
                time.sleep(1)
                if time.monotonic() >= next_report:
                    next_report += 60
                    say(f"[{(time.monotonic() - watch.started) / 60:5.1f} min] load {os.getloadavg()[0]:.1f}, "
                        f"elections {sum(e['event'] == 'term' for e in watch.events[first:])}, "
                        f"leader changes {sum(e['event'] == 'leader' for e in watch.events[first:])}, "
                        f"produced {load.produced}, errors {load.errors}")
            watch.stop.set()
            watch.thread.join(10)
            window = watch.events[first:]
            results.update({
                "elections": sum(e["event"] == "term" for e in window),
                "leader_changes": sum(e["event"] == "leader" for e in window),
                "events": window, "samples": watch.samples,
                "load_average_1m": {"median": round(statistics.median(watch.loads), 2),
                                    "min": round(min(watch.loads), 2), "max": round(max(watch.loads), 2)},
                "produced": load.produced, "workload_errors": load.errors,
            })
            for event in window:
                say(f"  {event}")
            if args.kills:
                say(f"failover under the same load: {args.kills} kills of the active controller")
                samples = _failover(cluster, args.kills, say)
                results["failover_ms"] = {"median": round(statistics.median(samples) * 1000),
                                          "min": round(min(samples) * 1000), "max": round(max(samples) * 1000),
                                          "samples": [round(s * 1000) for s in samples]}
                results["load_average_1m_end"] = round(os.getloadavg()[0], 2)
        finally:
            load.close()
    say(f"elections {results['elections']}, leader changes {results['leader_changes']} in {args.minutes:g} min; "
        f"load average (1 min) median {results['load_average_1m']['median']}, "
        f"min {results['load_average_1m']['min']}")
    if "failover_ms" in results:
        f = results["failover_ms"]
        say(f"controller failover: median {f['median']} ms (min {f['min']}, max {f['max']}, {len(f['samples'])} kills)")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0
