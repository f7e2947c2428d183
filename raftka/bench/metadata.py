"""`raftka perf metadata`: the controller quorum's figures (issue #controller-quorum, item 9).

Phase A starts a local quorum of real controller processes (raftka.cluster), registers brokers
over the wire (this process heartbeats for them, as broker processes would), then measures:

1. failover: kill -9 of the active controller -> the next CreateTopics committed (median).
2. create: N topics x P partitions, RF R over the registered brokers (CreateTopics batches).
3. restart: kill -9 every controller, start them again -> the controllers serve a metadata
   log with every topic (read as a broker reads it, with Fetch).

Phase B starts a real cluster (controller processes and broker processes) and measures:

4. leader change -> every broker's image: a committed partition-leader change is timed until
   every broker process answers Metadata with the new leader epoch (a broker answers Metadata
   from its image, so this is the image as clients see it). The partition's replicas sit on two
   brokers this process registers and heartbeats for, so leadership can be moved at will
   (controlled shutdown of the leader, then preferred-leader election when it rejoins the ISR)
   without stopping a real broker; the broker processes only follow the metadata log. Timed
   from the change first showing in the active controller's committed log (commit) and, for
   controlled shutdowns, from the request being sent (commit included).

Prints one line per figure and, with --json, a JSON object (with the load average at start and
end). Nothing here asserts a target.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from typing import Any

from raftka.common import errors
from raftka.common.api import ApiKey


def register(perf: argparse._SubParsersAction) -> None:
    parser = perf.add_parser("metadata", help="controller quorum: failover, topic creation, restart, propagation")
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--changes", type=int, default=20, help="leader changes timed into broker images")
    parser.add_argument("--broker-topics", type=int, default=100,
                        help="topics (x --partitions, RF 2) the real brokers hold during phase B")
    parser.add_argument("--skip-controller-phase", action="store_true", help="only phase B")
    parser.add_argument("--skip-broker-phase", action="store_true", help="only phase A")
    parser.add_argument("--topics-per-request", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def _ok(cluster: Any, api_key: int, body: Any, timeout_s: float = 60.0) -> Any:
    from raftka.cluster.controller_client import controller_request
    deadline = time.monotonic() + timeout_s
    while True:
        code, out = controller_request(cluster.bootstrap_controllers, api_key, body,
                                       timeout_s=max(1.0, deadline - time.monotonic()))
        if code == errors.NONE:
            return out
        if not errors.for_code(code).retriable or time.monotonic() > deadline:
            raise errors.error_for(code, (out or {}).get("error_message"))
        time.sleep(0.02)


class _Committed:
    """The committed metadata image, read from the controllers' metadata log the way a broker
    reads it (raft_meta/metadata/fetcher.py), where the bench asks "what has the quorum
    committed": each call fetches the entries since the previous one, up to the log end."""

    def __init__(self, cluster: Any) -> None:
        from raftka.raft_meta.metadata.loader import MetadataLoader
        from raftka.raft_meta.metadata.state import ControllerStateMachine
        self.bootstrap = cluster.bootstrap_controllers.split(",")
        self.state = ControllerStateMachine(MetadataLoader())

    def image(self, timeout_s: float = 5.0) -> Any:
        """The committed MetadataImage; a RaftkaError when no controller answered."""
        return asyncio.run(asyncio.wait_for(self._catch_up(), timeout_s))

    async def _catch_up(self) -> Any:
        from raftka.raft_meta.metadata.fetcher import MetadataFetcher
        errors_left = len(self.bootstrap)
        while True:
            # A fetcher per call (its connection belongs to this call's event loop), on the
            # state the previous calls built: only new entries are fetched.
            fetcher = MetadataFetcher(self.bootstrap[-errors_left:], self.state, max_wait_ms=0)
            try:
                while await fetcher.fetch_once():  # an answer holds at most metadata.fetch.max.records
                    pass
                return fetcher.image
            except errors.RaftkaError:
                errors_left -= 1  # any controller serves the same committed log: ask the next
                if not errors_left:
                    raise
            finally:
                await fetcher.close()


def _unfenced(committed: _Committed) -> set[int]:
    return {broker_id for broker_id, b in committed.image().brokers.items() if not b.fenced}


class _Heartbeats:
    """Registers brokers ``ids`` from this process and heartbeats for them every 0.5 s."""

    def __init__(self, cluster: Any, ids: list[int]) -> None:
        self.cluster = cluster
        self.epochs: dict[int, int] = {}
        for broker_id in ids:
            # Port 9 (discard) on loopback: nothing listens, so nobody can fetch from these brokers.
            out = _ok(cluster, 62, {"broker_id": broker_id, "cluster_id": cluster.cluster_id,
                                    "incarnation_id": uuid.uuid4().hex,
                                    "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9}]})
            self.epochs[broker_id] = out["broker_epoch"]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        from raftka.cluster.controller_client import controller_request
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


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(args: argparse.Namespace) -> int:
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                               "voters": args.voters, "load_average_start": _load()}
    if not args.skip_controller_phase:
        _controller_phase(args, results)
    if not args.skip_broker_phase:
        results["leader_change_to_broker_images_ms"] = _broker_phase(args)
    results["load_average_end"] = _load()
    _say(args, f"load average (1, 5, 15 min): start {results['load_average_start']}, "
               f"end {results['load_average_end']}")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def _controller_phase(args: argparse.Namespace, results: dict[str, Any]) -> None:
    from raftka.cluster import ControllerCluster, wait_until
    configs = {"broker.session.timeout.ms": 30000, "metadata.log.snapshot.min.records": 20000}
    with tempfile.TemporaryDirectory(prefix="raftka-perf-") as root, \
            ControllerCluster.start(root, voters=args.voters, configs=configs) as cluster:
        cluster.wait_for_leader(timeout_s=30)
        beats = _Heartbeats(cluster, list(range(1, args.brokers + 1)))
        committed = _Committed(cluster)
        try:
            wait_until(lambda: len(_unfenced(committed)) == args.brokers, 30, what="brokers unfenced")
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
            # 3. restart
            for node_id in cluster.nodes:
                cluster.kill(node_id)
            started = time.monotonic()
            for node_id in cluster.nodes:
                cluster.launch(node_id)
            wait_until(lambda: len(committed.image().topics) >= args.topics, 120,
                       interval_s=0.02, what="metadata served after restart")
            restart_s = time.monotonic() - started
            results["restart_s"] = restart_s
            _say(args, f"restart every controller -> metadata log with all {args.topics} topics served: "
                       f"{restart_s:.2f} s")
        finally:
            beats.close()


class _ImageWatch:
    """Polls Metadata for one partition on every broker process (each on its own connection) and
    follows the active controller's committed metadata log (``controller``, long-polling as a
    broker does), in a thread with its own event loop, and keeps, per node, the first time each
    leader epoch was seen ("controller" for the log). A broker answers Metadata from its image."""

    POLL_INTERVAL_S = 0.001

    def __init__(self, addresses: dict[str, str], topic: str, partition: int, controller: str) -> None:
        self.addresses = addresses  # name -> host:port
        self.controller = controller
        self.topic, self.partition = topic, partition
        self.first_seen: dict[str, dict[int, float]] = {name: {} for name in (*addresses, "controller")}
        self.latest: dict[str, tuple[int, int]] = {}  # name -> (leader_id, leader_epoch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> "_ImageWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)

    async def _main(self) -> None:
        await asyncio.gather(self._follow(), *(self._poll(name, address) for name, address in self.addresses.items()))

    async def _follow(self) -> None:
        from raftka.raft_meta.metadata.fetcher import MetadataFetcher

        def seen(delta: Any, image: Any) -> None:
            p = image.partition(self.topic, self.partition)
            if p is not None:
                self.latest["controller"] = (p.leader, p.leader_epoch)
                self.first_seen["controller"].setdefault(p.leader_epoch, time.monotonic())
        fetcher = MetadataFetcher([self.controller], on_metadata_update=seen, max_wait_ms=100)
        task = asyncio.create_task(fetcher.run())
        try:
            while not self._stop.is_set():
                await asyncio.sleep(0.01)
        finally:
            await fetcher.close()
            task.cancel()

    async def _poll(self, name: str, address: str) -> None:
        from raftka.common.transport import Connection
        host, _, port = address.rpartition(":")
        connection = None
        while not self._stop.is_set():
            try:
                if connection is None or connection.closed:
                    connection = await Connection.open(host, int(port), client_id="perf-metadata",
                                                       connect_timeout_ms=2000)
                _, body = await connection.request(ApiKey.METADATA, {"topics": [{"name": self.topic}]},
                                                   timeout_ms=2000)
                now = time.monotonic()
                topic = body["topics"][0] if body["topics"] else None
                parts = topic["partitions"] if topic is not None and topic["error_code"] == errors.NONE else []
                if len(parts) > self.partition:
                    p = parts[self.partition]
                    self.latest[name] = (p["leader_id"], p["leader_epoch"])
                    self.first_seen[name].setdefault(p["leader_epoch"], now)
            except errors.RaftkaError:
                connection = None
                await asyncio.sleep(0.05)
            await asyncio.sleep(self.POLL_INTERVAL_S)
        if connection is not None:
            await connection.close()

    def wait_epoch(self, names: list[str], epoch: int, timeout_s: float = 15.0) -> dict[str, float]:
        """{name: first time it showed ``epoch`` (or a later one)}; TimeoutError if some never did."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            seen = {}
            for name in names:
                times = [t for e, t in self.first_seen[name].items() if e >= epoch]
                if times:
                    seen[name] = min(times)
            if len(seen) == len(names):
                return seen
            time.sleep(0.005)
        raise TimeoutError(f"leader epoch {epoch} not seen by every node within {timeout_s} s: {self.latest}")


def _broker_phase(args: argparse.Namespace) -> dict[str, Any]:
    """Leader changes of a partition hosted by two brokers this process stands in for, timed
    into the images of real broker processes (see the module docstring)."""
    from raftka.cluster import Cluster, wait_until
    configs = {"broker.session.timeout.ms": 30000}
    with tempfile.TemporaryDirectory(prefix="raftka-perf-") as root, \
            Cluster.start(root, controllers=args.voters, brokers=args.brokers, configs=configs) as cluster:
        stand_ins = [max(cluster.broker_ids) + 100, max(cluster.broker_ids) + 101]
        beats = _Heartbeats(cluster, stand_ins)
        committed = _Committed(cluster)
        try:
            live = set(cluster.broker_ids) | set(stand_ins)
            wait_until(lambda: _unfenced(committed) >= live, 30, what="brokers unfenced")
            for i in range(0, args.broker_topics, args.topics_per_request):  # background metadata
                names = [f"bg-{j:05d}" for j in range(i, min(i + args.topics_per_request, args.broker_topics))]
                _ok(cluster, 19, {"topics": [{"name": n, "num_partitions": args.partitions,
                                              "replication_factor": 2} for n in names]})
            # Round-robin placement over the sorted live brokers: with RF 2 and as many partitions
            # as brokers, one partition has exactly the two stand-ins as replicas.
            topic = "leader-moves"
            _ok(cluster, 19, {"topics": [{"name": topic, "num_partitions": len(live), "replication_factor": 2}]})
            described = wait_until(lambda: committed.image().topics.get(topic), 30, what=f"{topic} committed")
            topic_id, parts = described.topic_id, described.partitions
            index = next(i for i, p in enumerate(parts) if set(p.replicas) == set(stand_ins))
            active = cluster.wait_for_leader(timeout_s=30, among=cluster.controller_ids)
            addresses = {f"broker-{b}": cluster.broker_address(b) for b in cluster.broker_ids}
            brokers = list(addresses)
            from_commit: list[float] = []
            from_request: list[float] = []
            with _ImageWatch(addresses, topic, index, "%s:%d" % cluster.controller_address(active)) as watch:
                wait_until(lambda: all(n in watch.latest for n in (*addresses, "controller")), 30,
                           what="first Metadata answers")
                while len(from_commit) < args.changes:
                    p = committed.image().partition(topic, index)
                    preferred, other = p.replicas
                    if p.leader == preferred and len(p.isr) == 2:
                        # controlled shutdown of the leader: leadership moves to the other replica
                        sent = time.monotonic()
                        _ok(cluster, 63, {"broker_id": preferred, "broker_epoch": beats.epochs[preferred],
                                          "current_metadata_offset": 1 << 40, "want_shut_down": True})
                        seen = watch.wait_epoch(brokers + ["controller"], p.leader_epoch + 1)
                        from_request.append((max(seen[b] for b in brokers) - sent) * 1000)
                    elif p.leader == other and preferred not in p.isr:
                        # the preferred replica rejoins the ISR (once its heartbeats unfenced it);
                        # preferred-leader election then gives it leadership back
                        wait_until(lambda: preferred in _unfenced(committed), 10, what="stand-in unfenced")
                        isr = [{"broker_id": b, "broker_epoch": beats.epochs[b]} for b in (other, preferred)]
                        out = _ok(cluster, 56, {"broker_id": other, "broker_epoch": beats.epochs[other], "topics": [{
                            "topic_id": topic_id, "partitions": [{
                                "partition_index": index, "leader_epoch": p.leader_epoch,
                                "partition_epoch": p.partition_epoch, "new_isr_with_epochs": isr}]}]})
                        code = out["topics"][0]["partitions"][0]["error_code"]
                        if code != errors.NONE:
                            raise errors.error_for(code, f"AlterPartition of {topic}-{index} refused")
                        seen = watch.wait_epoch(brokers + ["controller"], p.leader_epoch + 1)
                    else:
                        time.sleep(0.05)  # an election in progress
                        continue
                    from_commit.append((max(seen[b] for b in brokers) - seen["controller"]) * 1000)
        finally:
            beats.close()
    result = {"brokers": args.brokers, "background_partitions": args.broker_topics * args.partitions,
              "from_commit": {"median": statistics.median(from_commit), "max": max(from_commit),
                              "samples": [round(x, 1) for x in from_commit]},
              "from_request": {"median": statistics.median(from_request), "max": max(from_request),
                               "samples": [round(x, 1) for x in from_request]}}
    _say(args, f"leader change -> every broker's image ({args.brokers} broker processes, "
               f"{result['background_partitions']} other partitions): median {result['from_commit']['median']:.1f} ms, "
               f"max {result['from_commit']['max']:.1f} ms over {len(from_commit)} changes (from the active "
               f"controller's image); from the request sent: median {result['from_request']['median']:.1f} ms "
               f"over {len(from_request)} controlled shutdowns")
    return result


def _say(args: argparse.Namespace, line: str) -> None:
    print(line, flush=True)
