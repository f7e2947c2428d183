"""`raftka perf metadata`: the controller quorum's figures (issue #controller-quorum, item 9).

Starts a local quorum of real controller processes (raftka.cluster), registers brokers over the
wire (this process heartbeats for them, as broker processes would), then measures:

1. failover: kill -9 of the active controller -> the next CreateTopics committed (median).
2. create: N topics x P partitions, RF R over the registered brokers (CreateTopics batches).
3. restart: kill -9 every controller, start them again -> an active controller answers
   Metadata with every topic.
4. propagation: a committed partition change (AlterPartition) -> seen by a metadata-log
   fetcher long-polling each controller (as a broker following the log would) (median).

Prints one line per figure and, with --json, a JSON object. Nothing here asserts a target.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from typing import Any

from client.protocol import errors


def register(perf: argparse._SubParsersAction) -> None:
    parser = perf.add_parser("metadata", help="controller quorum: failover, topic creation, restart, propagation")
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--changes", type=int, default=20, help="partition changes timed for propagation")
    parser.add_argument("--topics-per-request", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def _ok(cluster: Any, api_key: int, body: Any, timeout_s: float = 60.0) -> Any:
    from raftka.controller_client import controller_request
    deadline = time.monotonic() + timeout_s
    while True:
        code, out = controller_request(cluster.bootstrap_controllers, api_key, body,
                                       timeout_s=max(1.0, deadline - time.monotonic()))
        if code == errors.NONE:
            return out
        if not errors.for_code(code).retriable or time.monotonic() > deadline:
            raise errors.error_for(code, (out or {}).get("error_message"))
        time.sleep(0.02)


class _Heartbeats:
    def __init__(self, cluster: Any, count: int) -> None:
        self.cluster = cluster
        self.epochs: dict[int, int] = {}
        for broker_id in range(1, count + 1):
            out = _ok(cluster, 62, {"broker_id": broker_id, "incarnation_id": uuid.uuid4().hex,
                                    "listeners": {"PLAINTEXT": f"127.0.0.1:{9092 + broker_id}"}})
            self.epochs[broker_id] = out["broker_epoch"]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        from raftka.controller_client import controller_request
        while not self.stop.wait(0.5):
            for broker_id, epoch in self.epochs.items():
                try:
                    controller_request(self.cluster.bootstrap_controllers, 63,
                                       {"broker_id": broker_id, "broker_epoch": epoch,
                                        "current_metadata_offset": 1 << 40}, timeout_s=3)
                except Exception:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def run(args: argparse.Namespace) -> int:
    from raftka.cluster import ControllerCluster, wait_until
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                               "voters": args.voters}
    configs = {"broker.session.timeout.ms": 30000, "metadata.log.snapshot.min.records": 20000}
    with tempfile.TemporaryDirectory(prefix="raftka-perf-") as root, \
            ControllerCluster.start(root, voters=args.voters, configs=configs) as cluster:
        cluster.wait_for_leader(timeout_s=30)
        beats = _Heartbeats(cluster, args.brokers)
        try:
            wait_until(lambda: sum(not b["fenced"] for b in _ok(cluster, 3, {})["brokers"]) == args.brokers,
                       30, what="brokers unfenced")
            # 1. failover
            samples = []
            for round_ in range(args.kills):
                leader = cluster.wait_for_leader(timeout_s=30)
                started = time.monotonic()
                cluster.kill(leader)
                _ok(cluster, 19, {"topics": [{"name": f"failover-{round_}", "num_partitions": 1,
                                              "replication_factor": 1}]})
                samples.append(time.monotonic() - started)
                cluster.restart(leader)
                time.sleep(1.0)
            if samples:
                results["failover_s"] = {"median": statistics.median(samples), "max": max(samples),
                                         "samples": [round(s, 3) for s in samples]}
                _say(args, f"failover (kill -9 active -> next CreateTopics committed): median "
                           f"{statistics.median(samples):.3f} s, max {max(samples):.3f} s over {len(samples)} kills")
            # 2. create
            rf = min(args.replication_factor, args.brokers)
            started = time.monotonic()
            names = [f"perf-{i:05d}" for i in range(args.topics)]
            for i in range(0, len(names), args.topics_per_request):
                out = _ok(cluster, 19, {"topics": [{"name": n, "num_partitions": args.partitions,
                                                    "replication_factor": rf}
                                                   for n in names[i:i + args.topics_per_request]]})
                failed = [t for t in out["topics"] if t["error_code"] != errors.NONE]
                if failed:
                    raise RuntimeError(f"create failed: {failed[:3]}")
            create_s = time.monotonic() - started
            total = args.topics * args.partitions
            results["create"] = {"partitions": total, "seconds": create_s}
            _say(args, f"create {args.topics} topics x {args.partitions} partitions (RF {rf}): "
                       f"{create_s:.2f} s ({total / create_s:.0f} partitions/s)")
            # 4. propagation (before the restart, while brokers still heartbeat)
            results["propagation_ms"] = _propagation(args, cluster, beats)
            # 3. restart
            for node_id in cluster.nodes:
                cluster.kill(node_id)
            started = time.monotonic()
            for node_id in cluster.nodes:
                cluster.launch(node_id)
            wait_until(lambda: len(_ok(cluster, 3, {}, timeout_s=5)["topics"]) >= args.topics, 120,
                       interval_s=0.02, what="metadata served after restart")
            restart_s = time.monotonic() - started
            results["restart_s"] = restart_s
            _say(args, f"restart every controller -> Metadata with all {args.topics} topics: {restart_s:.2f} s")
        finally:
            beats.close()
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def _propagation(args: argparse.Namespace, cluster: Any, beats: _Heartbeats) -> dict[str, Any]:
    """Time from sending an AlterPartition to each controller's long-poll fetcher seeing it."""
    from raft_meta.controller.rpc import call_sync
    seen: dict[int, list[tuple[int, float]]] = {n: [] for n in cluster.nodes}
    stop = threading.Event()
    start_offset = {}
    for node_id in cluster.nodes:
        body = call_sync("%s:%d" % cluster.controller_address(node_id), 1, {"fetch_offset": 1 << 40})
        start_offset[node_id] = body[1]["high_watermark"]

    def follow(node_id: int) -> None:
        address = "%s:%d" % cluster.controller_address(node_id)
        offset = start_offset[node_id]
        while not stop.is_set():
            try:
                code, body = call_sync(address, 1, {"fetch_offset": offset, "max_wait_ms": 500}, timeout_ms=3000)
            except Exception:
                continue
            now = time.monotonic()
            for record_offset, _ in body["records"]:
                seen[node_id].append((record_offset, now))
                offset = record_offset
    threads = [threading.Thread(target=follow, args=(n,), daemon=True) for n in cluster.nodes]
    for thread in threads:
        thread.start()
    samples = []
    topic = "perf-00000"
    try:
        for _ in range(args.changes):
            meta = _ok(cluster, 3, {"topics": [topic]})["topics"][0]["partitions"][0]
            leader = meta["leader_id"]
            isr = meta["isr_nodes"]
            new_isr = [leader] if len(isr) > 1 else list(meta["replica_nodes"])
            sent = time.monotonic()
            _ok(cluster, 56, {"broker_id": leader, "broker_epoch": beats.epochs[leader], "topic": topic,
                              "partition": 0, "leader_epoch": meta["leader_epoch"],
                              "partition_epoch": meta["partition_epoch"], "new_isr": new_isr})
            target = _ok(cluster, 3, {"topics": [topic]})["metadata_offset"]  # the active controller's

            def all_seen() -> bool:
                return all(any(o >= target for o, _ in seen[n]) for n in cluster.nodes)
            deadline = time.monotonic() + 10
            while not all_seen() and time.monotonic() < deadline:
                time.sleep(0.001)
            latest = max(next(t for o, t in seen[n] if o >= target) for n in cluster.nodes if
                         any(o >= target for o, _ in seen[n]))
            samples.append((latest - sent) * 1000)
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
    result = {"median": statistics.median(samples), "max": max(samples), "samples": [round(s, 1) for s in samples]}
    _say(args, f"partition change -> seen by a fetcher on every controller: median {result['median']:.1f} ms, "
               f"max {result['max']:.1f} ms over {len(samples)} changes (from request sent)")
    return result


def _say(args: argparse.Namespace, line: str) -> None:
    print(line, flush=True)
