"""``python -m raftka.bench``: run the peer benchmark and write BENCHMARKS.md's generated section.

See raftka/bench/__init__.py. ``--help`` lists the knobs; ``scripts/bench.sh`` is the entry
point that also installs the peers.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NoReturn

from raftka.bench import peers, report

MEASURE_TIMEOUT_S = 600.0  # one child measurement
FAILOVER_TIMEOUT_S = 1800.0
MANY_PARTITIONS_CREATE_TIMEOUT_S = 600.0  # the second cluster's partitions, each with a full ISR
MANY_PARTITIONS_PER_TOPIC = 10  # as `raftka perf partitions` creates them
SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_SSL")  # --security-protocol's values; "both" is the two
DIRECTORIES = {"PLAINTEXT": "raftka", "SASL_SSL": "raftka-sasl-ssl"}  # each cluster's, under the run's


def protocols(option: str) -> list[str]:
    """--security-protocol -> the clusters to measure, in the order each figure is taken."""
    return list(SECURITY_PROTOCOLS) if option == "both" else [option]


class TimeLimit(Exception):
    """The run's --time-limit-s is spent: the remaining figures are skipped."""


class Bench:
    """Runs each figure ``runs`` times; collects results and what was skipped or failed."""

    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.deadline = time.monotonic() + args.time_limit_s
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.problems: list[str] = []
        self.loads: dict[str, list[float]] = {}
        self.pidfile = Path(args.pidfile) if args.pidfile else None

    # -- bookkeeping --
    def note_pid(self, pid: int) -> None:
        """Remember a PID for scripts/bench.sh, which kills leftovers if this process dies."""
        if self.pidfile is not None:
            with open(self.pidfile, "a", encoding="utf-8") as f:
                f.write(f"{pid}\n")

    def note_processes(self, processes: list[Any]) -> None:
        for process in processes:
            self.note_pid(process.pid)

    def say(self, line: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {line}", flush=True)

    def load(self, phase: str) -> None:
        self.loads.setdefault(phase, []).append(round(os.getloadavg()[0], 2))

    def child(self, name: str, argv: list[str], timeout_s: float = MEASURE_TIMEOUT_S) -> dict[str, Any] | None:
        """Run one measurement process; its JSON stdout, or None (recorded as a problem)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeLimit(name)
        from raftka.cluster import project_env
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=project_env(), start_new_session=True)
        self.note_pid(proc.pid)
        try:
            out, err = proc.communicate(timeout=min(timeout_s, left))
        except subprocess.TimeoutExpired:
            # SIGTERM first: the perf tools stop the clusters they started on SIGTERM.
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            self.problems.append(f"{name}: timed out after {min(timeout_s, left):.0f} s")
            self.say(f"{name}: TIMED OUT")
            return None
        try:
            start = out.index("{")
            result = json.loads(out[start:])
        except ValueError:
            last = (err.strip().splitlines() or ["no output"])[-1]
            self.problems.append(f"{name}: exit {proc.returncode}: {last}")
            self.say(f"{name}: FAILED (exit {proc.returncode}): {last}")
            return None
        if proc.returncode != 0:
            last = (err.strip().splitlines() or [""])[-1]
            self.problems.append(f"{name}: exit {proc.returncode} {last}".strip())
        return result

    def record(self, figure: str, result: dict[str, Any] | None, show: Callable[[dict[str, Any]], str],
               run: int | None = None) -> None:
        """Keep a figure's result; ``run`` (its run number) pairs the two sides of a security run."""
        if result is None:
            return
        if run is not None:
            result["run"] = run
        self.results.setdefault(figure, []).append(result)
        self.say(f"{figure}: {show(result)}")


def _rate(r: dict[str, Any]) -> str:
    return f"{r['records_per_s']:,.0f} records/s"


def _lat(r: dict[str, Any], key: str = "latency_ms") -> str:
    lat = r[key]
    return f"p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms"


class RaftkaSystem:
    """Raftka: 3 controllers + 3 brokers, RF 3, min.insync.replicas 2; figures via `raftka perf`.
    With ``--many-partitions N`` a second such cluster holds N partitions (topics of 10), and the
    acks=all produce and e2e figures are also taken on one fresh topic of it, each right after the
    same figure on the fresh cluster, so the two see the same stretch of the box's load.

    ``--security-protocol``: the cluster's listeners. SASL_SSL starts a secure cluster (every
    listener SASL_SSL, SCRAM-SHA-512 logins, ACLs; raftka/cluster/secure.py) whose clients, Raftka's
    and librdkafka's, log in as its admin super user through its client.properties (the password
    stays in that file: never in argv, a log line or the JSON). With ``both`` a PLAINTEXT and a
    secure cluster run side by side and every figure is taken on one, then at once on the other
    (PLAINTEXT, SASL_SSL, PLAINTEXT, ...), so their ratio is taken over the same stretch of the
    shared box's load. The secure side skips the many-partitions cluster and the failover."""

    name = "raftka"

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.protocols = protocols(bench.args.security_protocol)
        self.clusters: dict[str, Any] = {}  # security protocol -> its cluster
        self.many: Any = None  # the cluster holding --many-partitions partitions (PLAINTEXT)
        self.started: list[Any] = []  # every cluster made, ready or not: close() stops them all

    @property
    def cluster(self) -> Any:
        """The PLAINTEXT cluster (None when only SASL_SSL is measured)."""
        return self.clusters.get("PLAINTEXT")

    def _launch(self, directory: str, secure: bool = False) -> Any:
        from raftka.cluster import Cluster
        configs = {"default.replication.factor": 3, "min.insync.replicas": 2}
        cluster = Cluster(self.bench.root / directory, controllers=3, brokers=3, configs=configs, secure=secure)
        self.started.append(cluster)
        for node_id in cluster.controller_ids:
            self.bench.note_processes([cluster.launch(node_id)])
        for node_id in cluster.controller_ids:
            cluster.wait_ready(node_id)
        for node_id in cluster.broker_ids:
            self.bench.note_processes([cluster.launch(node_id)])
        for node_id in cluster.broker_ids:
            cluster.wait_ready(node_id)
        return cluster

    def start(self) -> None:
        for protocol in self.protocols:
            self.bench.say(f"starting Raftka ({protocol}): 3 controllers + 3 brokers, RF 3, min.insync.replicas 2")
            self.clusters[protocol] = self._launch(DIRECTORIES[protocol], secure=protocol == "SASL_SSL")
        a = self.bench.args
        if self.cluster is None and (a.many_partitions or a.failover_kills > 0):
            self.bench.say("the many-partitions and failover figures are taken on PLAINTEXT only: skipped")
        if a.many_partitions and self.cluster is not None:
            try:
                self._start_many(self.bench.args.many_partitions)
            except Exception as error:  # noqa: BLE001 - reported; the fresh cluster's figures go on
                self.bench.problems.append(f"raftka with many partitions did not start: {type(error).__name__}: "
                                           f"{error}")
                self.bench.say(self.bench.problems[-1])
                if self.many is not None:
                    self.many.close()
                    self.many = None

    def _start_many(self, n: int) -> None:
        from raftka.bench import partitions
        self.bench.say(f"starting a second Raftka cluster holding {n:,} partitions")
        self.many = self._launch("raftka-many")
        sizes = partitions.topic_sizes(n, MANY_PARTITIONS_PER_TOPIC)
        created = partitions.create_partitions(self.many.bootstrap_servers, sizes, 100,
                                               MANY_PARTITIONS_CREATE_TIMEOUT_S, progress=False)
        partitions.wait_partitions(self.many.bootstrap_servers, n, MANY_PARTITIONS_CREATE_TIMEOUT_S,
                                   "full ISR", False, lambda states: states[2], "--many-partitions")
        self.bench.say(f"{n:,} partitions ({MANY_PARTITIONS_PER_TOPIC} per topic) created in "
                       f"{created['create_s']:.1f} s, every leader in {created['leaders_s']:.1f} s")

    def _target(self, cluster: Any) -> list[str]:
        """The perf tools' options that point at ``cluster`` (and log in to a secure one)."""
        login = (["--command-config", str(cluster.security.client_properties_path)]
                 if cluster.security is not None else [])
        return ["--bootstrap-server", cluster.bootstrap_servers, *login]

    def run_once(self, run: int) -> None:
        """Run ``run`` of every figure; each figure on every cluster of ``self.protocols`` in turn
        (and on the many-partitions cluster right after the PLAINTEXT one) before the next."""
        bench, a = self.bench, self.bench.args
        perf = [sys.executable, "-m", "raftka", "perf"]
        out = ["--json", "--no-progress"]
        props = ["--producer-props", *a.producer_props] if a.producer_props else []
        rdkafka = [sys.executable, "-m", "raftka.bench.peers"]
        sides = [(protocol, self.clusters[protocol]) for protocol in self.protocols]
        many = (["--bootstrap-server", self.many.bootstrap_servers, *out] if self.many is not None else [])

        def each(step: Callable[[str, str, list[str], str], None]) -> None:
            for protocol, cluster in sides:
                # Topic names carry the protocol only on the secure side: a PLAINTEXT run's are as before.
                suffix = "" if protocol == "PLAINTEXT" else f"-{protocol.lower().replace('_', '-')}"
                tag = "" if len(sides) == 1 and protocol == "PLAINTEXT" else f" {protocol}"
                step(protocol, f"{run}{suffix}", self._target(cluster), tag)

        def produce_all(protocol: str, run_id: str, target: list[str], tag: str) -> None:
            bench.record(report.figure_name(protocol, "raftka.produce.acks_all"), bench.child(
                f"raftka produce acks=all{tag} #{run}",
                perf + ["produce", *target, *out, "--topic", f"bench-all-{run_id}", "--num-records", str(a.records),
                        "--record-size", str(a.record_size), "--acks", "all", *props]), _rate, run)
            if self.many is not None and protocol == "PLAINTEXT":
                bench.record("raftka.many.produce.acks_all", bench.child(
                    f"raftka produce acks=all, {a.many_partitions:,} partitions #{run}",
                    perf + ["produce", *many, "--topic", f"bench-many-{run}", "--num-records", str(a.records),
                            "--record-size", str(a.record_size), "--acks", "all", *props]), _rate, run)

        def produce_one(protocol: str, run_id: str, target: list[str], tag: str) -> None:
            bench.record(report.figure_name(protocol, "raftka.produce.acks_1"), bench.child(
                f"raftka produce acks=1{tag} #{run}",
                perf + ["produce", *target, *out, "--topic", f"bench-one-{run_id}", "--num-records", str(a.records),
                        "--record-size", str(a.record_size), "--acks", "1", *props]), _rate, run)

        def consume(protocol: str, run_id: str, target: list[str], tag: str) -> None:
            bench.record(report.figure_name(protocol, "raftka.consume"), bench.child(
                f"raftka consume{tag} #{run}",
                perf + ["consume", *target, *out, "--topic", f"bench-all-{run_id}", "--messages", str(a.records),
                        *(["--consumer-props", *a.consumer_props] if a.consumer_props else [])]), _rate, run)

        # The same cluster through librdkafka: what the brokers take when the client is C.
        def librdkafka(protocol: str, run_id: str, target: list[str], tag: str) -> None:
            rd_topic = f"bench-librdkafka-{run_id}"
            bench.record(report.figure_name(protocol, "librdkafka.produce.acks_all"), bench.child(
                f"librdkafka produce acks=all{tag} #{run}",
                rdkafka + ["librdkafka-produce", *target, "--stream", rd_topic, "--records", str(a.records),
                           "--record-size", str(a.record_size)]), _rate, run)
            bench.record(report.figure_name(protocol, "librdkafka.consume"), bench.child(
                f"librdkafka consume{tag} #{run}",
                rdkafka + ["librdkafka-consume", *target, "--stream", rd_topic, "--records", str(a.records)]),
                _rate, run)

        def e2e(protocol: str, run_id: str, target: list[str], tag: str) -> None:
            bench.record(report.figure_name(protocol, "raftka.e2e"), bench.child(
                f"raftka e2e{tag} #{run}",
                perf + ["e2e", *target, *out, "--topic", f"bench-e2e-{run_id}", "--rate", str(a.e2e_rate),
                        "--duration", str(a.e2e_duration), "--record-size", str(a.record_size)]),
                lambda r: _lat(r, "e2e_latency_ms") + f" at {r['rate_achieved']:,.0f}/s", run)
            if self.many is not None and protocol == "PLAINTEXT":
                bench.record("raftka.many.e2e", bench.child(
                    f"raftka e2e, {a.many_partitions:,} partitions #{run}",
                    perf + ["e2e", *many, "--topic", f"bench-many-e2e-{run}", "--rate", str(a.e2e_rate),
                            "--duration", str(a.e2e_duration), "--record-size", str(a.record_size)]),
                    lambda r: _lat(r, "e2e_latency_ms") + f" at {r['rate_achieved']:,.0f}/s")

        def sequential(protocol: str, run_id: str, target: list[str], tag: str) -> None:
            bench.record(report.figure_name(protocol, "raftka.sequential"), bench.child(
                f"raftka sequential{tag} #{run}",
                perf + ["produce", *target, *out, "--topic", f"bench-seq-{run_id}", "--num-records",
                        str(a.sequential_samples), "--record-size", str(a.record_size), "--acks", "all",
                        "--sync", "--producer-props", "linger_ms=0"]), _lat, run)

        for step in (produce_all, produce_one, consume, librdkafka, e2e, sequential):
            each(step)

    def close(self) -> None:
        for cluster in self.started:
            cluster.close()
        self.started, self.clusters, self.many = [], {}, None

    def failover(self) -> None:
        """Its own PLAINTEXT cluster (it kills brokers), after the other systems are stopped."""
        bench, a = self.bench, self.bench.args
        if a.failover_kills <= 0 or "PLAINTEXT" not in self.protocols:
            return
        bench.load("failover")
        extra = [x for kv in a.failover_server_config for x in ("--server-config", kv)]
        bench.record("raftka.failover", bench.child(
            "raftka failover",
            [sys.executable, "-m", "raftka", "perf", "failover", "--json", "--no-progress", "--kills",
             str(a.failover_kills), "--record-size", str(a.record_size), *extra], FAILOVER_TIMEOUT_S),
            lambda r: f"stall median {r['stall_s']['median']:.2f} s, lost {r['lost']}")
        bench.load("failover")


class NatsSystem:
    """NATS JetStream: 3 nats-server in one cluster; R3 and R1 streams, fresh per run."""

    name = "nats"

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.nats: peers.NatsCluster | None = None

    def start(self) -> None:
        import asyncio
        self.bench.say("starting NATS JetStream: 3 nats-server processes in one cluster")
        self.nats = nats = peers.NatsCluster(self.bench.root / "nats")
        for i in range(nats.nodes):
            nats.launch(i)
        self.bench.note_processes(list(nats.processes.values()))
        for i in range(nats.nodes):
            nats.processes[i].wait_for_line(lambda l: "Server is ready" in l, peers.READY_TIMEOUT_S)
        asyncio.run(peers._wait_jetstream(nats.urls))

    def run_once(self, run: int) -> None:
        bench, a = self.bench, self.bench.args
        assert self.nats is not None
        urls = ",".join(self.nats.urls)
        cmd = [sys.executable, "-m", "raftka.bench.peers"]
        size = ["--record-size", str(a.record_size)]
        for replicas in (3, 1):
            stream = f"BENCH_R{replicas}_{run}"
            bench.record(f"nats.r{replicas}.publish", bench.child(
                f"nats R{replicas} publish #{run}",
                cmd + ["nats-publish", "--urls", urls, "--stream", stream, "--replicas", str(replicas),
                       "--records", str(a.records), *size]), _rate)
            bench.record(f"nats.r{replicas}.consume", bench.child(
                f"nats R{replicas} consume #{run}",
                cmd + ["nats-consume", "--urls", urls, "--stream", stream, "--records", str(a.records)]), _rate)
            bench.record(f"nats.r{replicas}.sequential", bench.child(
                f"nats R{replicas} sequential #{run}",
                cmd + ["nats-sequential", "--urls", urls, "--stream", f"SEQ_R{replicas}_{run}",
                       "--replicas", str(replicas), "--samples", str(a.sequential_samples), *size]), _lat)

    def failover(self) -> None:
        import asyncio
        bench, a = self.bench, self.bench.args
        if a.nats_failover_kills <= 0 or self.nats is None or time.monotonic() >= bench.deadline:
            return
        bench.say(f"NATS R3 failover: {a.nats_failover_kills} kills of the stream leader")
        bench.load("failover")
        try:
            out = asyncio.run(peers.nats_failover(self.nats, a.nats_failover_kills, 5000, a.record_size, 2.0))
            bench.note_processes(list(self.nats.processes.values()))
            bench.record("nats.r3.failover", out, lambda r: f"stall median {r['stall_s']['median']:.2f} s")
        except Exception as error:  # noqa: BLE001 - reported, the rest goes on
            bench.problems.append(f"nats failover: {type(error).__name__}: {error}")

    def close(self) -> None:
        if self.nats is not None:
            self.nats.close()
            self.nats = None


class RedisSystem:
    """Redis Streams: one redis-server without persistence."""

    name = "redis"

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.server: peers.RedisServer | None = None

    def start(self) -> None:
        self.bench.say("starting Redis: one redis-server, no persistence")
        self.server = peers.RedisServer(self.bench.root / "redis")
        self.server.start()
        self.bench.note_processes([self.server.process])

    def run_once(self, run: int) -> None:
        bench, a = self.bench, self.bench.args
        assert self.server is not None
        cmd = [sys.executable, "-m", "raftka.bench.peers"]
        port = ["--port", str(self.server.port)]
        key = f"bench-{run}"
        bench.record("redis.xadd", bench.child(
            f"redis XADD #{run}", cmd + ["redis-xadd", *port, "--stream", key, "--records", str(a.records),
                                         "--record-size", str(a.record_size)]), _rate)
        bench.record("redis.xread", bench.child(
            f"redis XREAD #{run}", cmd + ["redis-xread", *port, "--stream", key, "--records", str(a.records)]),
            _rate)
        bench.record("redis.sequential", bench.child(
            f"redis sequential #{run}", cmd + ["redis-sequential", *port, "--stream", f"seq-{run}",
                                               "--samples", str(a.sequential_samples),
                                               "--record-size", str(a.record_size)]), _lat)

    def failover(self) -> None:
        pass  # one node: nothing to fail over to

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def measure(bench: Bench, systems: list[Any]) -> None:
    """Start every system, then run i of each figure for every system before run i+1, so that
    each run of every system sees the same stretch of the shared machine's load; failovers last
    (they kill processes), each with the other systems stopped."""
    up = []
    try:
        for system in systems:
            try:
                system.start()
                up.append(system)
            except Exception as error:  # noqa: BLE001 - report it, measure the others
                bench.problems.append(f"{system.name} did not start: {type(error).__name__}: {error}")
                bench.say(bench.problems[-1])
                system.close()
        for run in range(bench.args.runs):
            bench.load("runs")
            for system in up:
                try:
                    system.run_once(run)
                except TimeLimit:
                    raise
                except Exception as error:  # noqa: BLE001
                    bench.problems.append(f"{system.name} run {run}: {type(error).__name__}: {error}")
                    bench.say(bench.problems[-1])
        bench.load("runs")
        for system in up:
            if system.name != "nats":
                system.close()
        for system in up:
            system.failover()
    finally:
        for system in systems:
            system.close()


def environment() -> dict[str, Any]:
    """Machine, versions and date for the report."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    root = Path(__file__).resolve().parent.parent.parent
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        rev = "unknown"
    from raftka import __version__
    from raftka.common.event_loop import event_loop_name
    loop = event_loop_name()
    loop_version = peers.package_version("uvloop") if loop == "uvloop" else platform.python_version()
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu, "cores": os.cpu_count(),
            "mem_gb": mem_gb, "kernel": platform.release(), "python": platform.python_version(),
            "raftka": f"{__version__} (git {rev}; event loop {loop} {loop_version})", "nats_server": peers.version_of("nats-server"),
            "redis_server": peers.version_of("redis-server"), "nats_py": peers.package_version("nats-py"),
            "redis_py": peers.package_version("redis"), "hiredis": peers.package_version("hiredis"),
            "confluent_kafka": peers.package_version("confluent-kafka"), "openssl": ssl.OPENSSL_VERSION}


class _Parser(argparse.ArgumentParser):
    """A bad option is one line on stderr and exit 2 (no usage dump: bench.sh's log stays readable)."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def _count(text: str) -> int:
    """A partition count >= 0 ("1_000" allowed); 0 skips the figure."""
    try:
        n = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a partition count, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog="python -m raftka.bench", description=__doc__)
    p.add_argument("--runs", type=int, default=3, help="times each figure is measured (default 3)")
    p.add_argument("--records", type=int, default=200_000, help="records per throughput run (default 200000)")
    p.add_argument("--record-size", type=int, default=100)
    p.add_argument("--e2e-rate", type=float, default=10_000)
    p.add_argument("--e2e-duration", type=float, default=10)
    p.add_argument("--sequential-samples", type=int, default=2000,
                   help="one-at-a-time acknowledged writes for the round-trip latency (default 2000)")
    p.add_argument("--many-partitions", type=_count, default=1000, metavar="N",
                   help="also take acks=all produce and e2e on a second cluster holding N partitions "
                        "(default 1000; 0: skip)")
    p.add_argument("--failover-kills", type=int, default=10, help="Raftka leader kills (0: skip)")
    p.add_argument("--failover-server-config", action="append", default=[], metavar="KEY=VALUE",
                   help="server configs for the failover cluster (default: the servers' defaults)")
    p.add_argument("--nats-failover-kills", type=int, default=3, help="NATS R3 stream-leader kills (0: skip)")
    p.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE",
                   help="extra Raftka producer configs for the throughput runs")
    p.add_argument("--consumer-props", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--skip", default="", help="comma-separated: raftka,nats,redis")
    p.add_argument("--security-protocol", choices=[*SECURITY_PROTOCOLS, "both"], default="PLAINTEXT",
                   help="Raftka's listeners (default PLAINTEXT). SASL_SSL: a secure cluster (TLS, "
                        "SCRAM-SHA-512, ACLs). both: the two side by side, each figure on one then the "
                        "other; writes only the security section of --out (not the peer section)")
    p.add_argument("--time-limit-s", type=float, default=2400, help="whole run (default 2400)")
    p.add_argument("--out", default=None, help="BENCHMARKS.md to update (default: print only)")
    p.add_argument("--json-out", default=None, help="also write every raw result here")
    p.add_argument("--pidfile", default=None, help="append every started PID here (for bench.sh)")
    p.add_argument("--command-line", default="scripts/bench.sh", help="the command shown in the report")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def on_term(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)  # unwinds through every finally: processes get stopped
    signal.signal(signal.SIGTERM, on_term)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    missing = [b for b, name in (("nats-server", "nats"), ("redis-server", "redis"))
               if name not in skip and not shutil.which(b)]
    if missing:
        print(f"error: {', '.join(missing)} not on PATH (scripts/bench.sh installs them)", file=sys.stderr)
        return 1
    env = environment()
    env["load_start"] = [round(x, 2) for x in os.getloadavg()]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="raftka-bench-") as tmp:
        bench = Bench(args, Path(tmp))
        bench.say(f"{env['date']}: {env['cpu']}, {env['cores']} cores; load {env['load_start']}")
        systems = [cls(bench) for cls in (RaftkaSystem, NatsSystem, RedisSystem) if cls.name not in skip]
        try:
            measure(bench, systems)
        except TimeLimit as limit:
            bench.problems.append(f"time limit ({args.time_limit_s:.0f} s) reached at {limit}; "
                                  "later figures skipped")
            bench.say(bench.problems[-1])
    env["load_end"] = [round(x, 2) for x in os.getloadavg()]
    env["duration_s"] = round(time.monotonic() - started)
    env["loads"] = bench.loads
    env["command"] = args.command_line
    env["runs"] = args.runs
    env["records"] = args.records
    env["record_size"] = args.record_size
    env["e2e_rate"] = args.e2e_rate
    env["e2e_duration"] = args.e2e_duration
    env["many_partitions"] = args.many_partitions
    env["failover_server_config"] = args.failover_server_config
    env["producer_props"] = args.producer_props
    env["consumer_props"] = args.consumer_props
    env["security_protocol"] = args.security_protocol
    raw = {"environment": env, "results": bench.results, "problems": bench.problems}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(raw, indent=2, default=str), encoding="utf-8")
    section, begin, end = report.section_of(raw)
    if args.out:
        report.write_section(Path(args.out), section, begin, end)
        bench.say(f"wrote the {'security' if begin == report.SECURITY_BEGIN else 'benchmark'} section of {args.out}")
    else:
        print(section)
    print(report.summary_lines(raw), flush=True)
    return 1 if bench.problems else 0


if __name__ == "__main__":
    sys.exit(main())
