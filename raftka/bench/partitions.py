"""`raftka perf partitions`: the partitions curve (issue #scale, item 3).

For each N of ``--partitions`` (default 100,1000,10000) a fresh local cluster (3 controllers +
3 brokers) is started, N partitions are created through the admin client (topics of
``--partitions-per-topic`` 10, RF 3, ``--topics-per-request`` topics per CreateTopics) and timed,
and then, on one extra topic (1 partition, RF 3, min.insync.replicas 2):

1. idle CPU of each broker: % of one core (utime + stime of /proc/PID/stat) over
   ``--idle-seconds`` with nothing produced, once every partition has a full ISR; then each
   broker's RSS (VmRSS of /proc/PID/status) and open files (entries of /proc/PID/fd);
2. the acks=all produce rate (``raftka perf produce``'s code, in a child process);
3. end-to-end latency at ``--e2e-rate`` records/s (``raftka perf e2e``'s code, in a child);
4. producing with keys spread over all N partitions: a producer (in a child) sends
   ``--keyed-records`` records, each with a key drawn uniformly from KEYS_PER_PARTITION x N keys
   and sent to the topic the key names (key k to topic k mod topics, Kafka's default
   partitioner within it), as fast as it can, acks=all;
5. kill -9 of one broker; once the controller has fenced it (it left every ISR), it is started
   again and timed until it is ready and until every partition is back to a full ISR (Metadata
   through the admin client);
6. ``--controller-kills`` times (default 3): kill -9 of the active controller, timed until the
   next metadata write commits (a CreateTopics of a 1-partition topic, retried while no
   controller is active: ``raftka perf controller-stability``'s failover); the killed controller
   is started again and waited for until the new active controller reports it caught up, so
   each kill leaves a majority. Median and max over the kills.

A fresh cluster per N, not one grown from point to point: a grown cluster would carry the
previous point's extra topic and records, a broker restarted once already, and a metadata log
that grew in steps, so each point would depend on the ones before it.

Prints a table (figures by N) on stdout, or with ``--json`` a JSON object (the table then goes to
stderr); ``--plot FILE.png`` draws one panel per figure against N (log x axis). Progress on
stderr unless ``--no-progress``. Every wait is bounded by a ``--*-timeout-s``; every process is
stopped by PID at the end, on errors, Ctrl-C and SIGTERM. Nothing here asserts a target.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import random
import resource
import signal
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from raftka.bench import client as perf
from raftka.common.errors import RaftkaError

TOPIC = "perf-partitions"  # the extra topic every figure but the first and the last is taken on
TOPIC_PREFIX = "partitions-"  # the N partitions' topics: partitions-00000, ...
FAILOVER_TOPIC_PREFIX = "controller-failover-"  # the metadata write timed after each controller kill
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
KEYS_PER_PARTITION = 10  # keyed produce: key space = this x N (every partition gets keys)
ISR_POLL_INTERVAL_S = 0.5  # a Metadata of every topic per poll: 10,000 partitions take a while to encode
CHILD_STOP_TIMEOUT_S = 10.0
WARM_UP_THREADS = 32  # keyed produce: threads asking for the topics' metadata before timing
# Open files of a broker beside its segments: sockets, the metadata log, stdio, Python's own.
OPEN_FILES_HEADROOM = 1_024
ADMIN_REQUEST_TIMEOUT_MS = 60_000  # one CreateTopics of 100 topics or one Metadata of every topic


class MeasurementError(Exception):
    """A measurement could not be taken (a child failed, a create was refused): one line."""


def register(perf_parsers: argparse._SubParsersAction) -> None:
    p = perf_parsers.add_parser(
        "partitions", help="the partitions curve: figures on one topic of a cluster holding N partitions")
    p.add_argument("--partitions", default="100,1000,10000", metavar="N,N,...",
                   help="partition counts of the curve, comma-separated (default 100,1000,10000)")
    p.add_argument("--partitions-per-topic", type=int, default=10, help="default 10")
    p.add_argument("--topics-per-request", type=int, default=100, help="topics per CreateTopics (default 100)")
    p.add_argument("--idle-seconds", type=float, default=20.0, help="idle CPU window (default 20)")
    p.add_argument("--records", type=int, default=100_000, help="acks=all produce: records (default 100000)")
    p.add_argument("--record-size", type=int, default=100, help="bytes per value (default 100)")
    p.add_argument("--e2e-rate", type=float, default=10_000, help="records/s (default 10000)")
    p.add_argument("--e2e-duration", type=float, default=10.0, help="seconds of sending (default 10)")
    p.add_argument("--keyed-records", type=int, default=100_000,
                   help="keyed produce over all N partitions: records (default 100000)")
    p.add_argument("--controllers", type=int, default=3, help="default 3")
    p.add_argument("--brokers", type=int, default=3, help="default 3 (at least 3: RF 3 and a broker killed)")
    p.add_argument("--server-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a server config for every process (repeatable)")
    p.add_argument("--create-timeout-s", type=float, default=600.0,
                   help="creating the N partitions until each has a leader (default 600)")
    p.add_argument("--isr-timeout-s", type=float, default=600.0,
                   help="every partition back to a full ISR: before the idle window, after the kill and "
                        "after the restart (default 600)")
    p.add_argument("--restart-timeout-s", type=float, default=300.0,
                   help="the restarted broker ready; a restarted controller caught up (default 300)")
    p.add_argument("--controller-kills", type=int, default=3,
                   help="kill -9 of the active controller, each timed to the next committed metadata "
                        "write (default 3; 0 skips)")
    p.add_argument("--failover-timeout-s", type=float, default=60.0,
                   help="a metadata write committed after a controller kill (default 60)")
    p.add_argument("--measure-timeout-s", type=float, default=900.0,
                   help="each produce, e2e and keyed run (default 900)")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="draw the curve (matplotlib)")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


# -- arguments ------------------------------------------------------------------------------

def partition_counts(text: str) -> list[int]:
    """"100,1000,10000" -> [100, 1000, 10000]; ConfigError on anything else."""
    counts = []
    for item in text.split(","):
        try:
            n = int(item.strip().replace("_", ""))
        except ValueError:
            raise perf._bad("--partitions", f"expected comma-separated counts, got {text!r}") from None
        if n < 1:
            raise perf._bad("--partitions", f"counts must be >= 1, got {n}")
        counts.append(n)
    return counts


def _check(args: argparse.Namespace) -> list[int]:
    counts = partition_counts(args.partitions)
    positive = {"--partitions-per-topic": args.partitions_per_topic, "--topics-per-request": args.topics_per_request,
                "--idle-seconds": args.idle_seconds, "--records": args.records,
                "--e2e-rate": args.e2e_rate, "--e2e-duration": args.e2e_duration,
                "--keyed-records": args.keyed_records, "--controllers": args.controllers,
                "--create-timeout-s": args.create_timeout_s, "--isr-timeout-s": args.isr_timeout_s,
                "--restart-timeout-s": args.restart_timeout_s, "--measure-timeout-s": args.measure_timeout_s,
                "--failover-timeout-s": args.failover_timeout_s}
    for option, value in positive.items():
        if not value > 0:
            raise perf._bad(option, f"must be > 0, got {value}")
    if args.record_size < perf.STAMP.size:
        raise perf._bad("--record-size", f"must be >= {perf.STAMP.size} (e2e stamps the send time in the value)")
    if args.controller_kills < 0:
        raise perf._bad("--controller-kills", f"must be >= 0, got {args.controller_kills}")
    if args.controller_kills and args.controllers < 3:
        raise perf._bad("--controller-kills", f"needs --controllers >= 3 (a majority left after a kill), "
                                              f"got {args.controllers}")
    if args.brokers < REPLICATION_FACTOR:
        raise perf._bad("--brokers", f"needs >= {REPLICATION_FACTOR} (RF {REPLICATION_FACTOR}, one broker killed)")
    if args.plot:
        try:
            import matplotlib  # noqa: F401 - checked now, not after the whole curve
        except ImportError:
            raise perf._bad("--plot", "needs matplotlib (pip install 'raftka[bench]')") from None
        if not Path(args.plot).resolve().parent.is_dir():
            raise perf._bad("--plot", f"no directory for {args.plot}")
    return counts


def open_files_needed(partitions: int, brokers: int) -> int:
    """Open files a broker uses with every segment file open: one log segment per replica it
    holds (RF 3 spread over the brokers, the extra topic included) plus OPEN_FILES_HEADROOM.
    Fewer also works: past ``log.open.files.max`` (by default derived from the limit) segment
    files are opened and closed on demand (storage/file_handles.py)."""
    return -(-(partitions + 1) * REPLICATION_FACTOR // brokers) + OPEN_FILES_HEADROOM


# -- /proc ----------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise MeasurementError(f"no VmRSS in /proc/{pid}/status")


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def open_files_limit(pid: int) -> int | None:
    """The soft "Max open files" of ``pid`` (None when unlimited)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft = line.split()[3]
            return None if soft == "unlimited" else int(soft)
    return None


def idle_cpu_percent(pids: dict[int, int], seconds: float, progress: bool) -> dict[int, float]:
    """{node id: % of one core} over ``seconds``."""
    bar = perf.Progress("idle", max(1, round(seconds)), progress, show_rate=False)
    try:
        before = {node: cpu_seconds(pid) for node, pid in pids.items()}
        started = time.monotonic()
        while (left := started + seconds - time.monotonic()) > 0:
            time.sleep(min(1.0, left))
            bar.done = round(time.monotonic() - started)
        wall = time.monotonic() - started
        return {node: (cpu_seconds(pid) - before[node]) / wall * 100 for node, pid in pids.items()}
    finally:
        bar.close()


# -- the cluster's partitions ---------------------------------------------------------------

def topic_sizes(partitions: int, per_topic: int) -> list[tuple[str, int]]:
    """(name, partition count) of the topics that hold ``partitions``; the last may be smaller."""
    sizes = [per_topic] * (partitions // per_topic) + ([partitions % per_topic] if partitions % per_topic else [])
    return [(f"{TOPIC_PREFIX}{i:05d}", n) for i, n in enumerate(sizes)]


def partition_states(admin: Any) -> tuple[int, int, int]:
    """(partitions, with a leader, with a full ISR) over every topic, from one Metadata."""
    total = led = full = 0
    for topic in admin.describe_topics():
        for p in topic["partitions"]:
            total += 1
            if p["leader"] >= 0:
                led += 1
                if set(p["isr"]) >= set(p["replicas"]):
                    full += 1
    return total, led, full


def wait_partitions(bootstrap: str, expected: int, timeout_s: float, what: str, progress: bool,
                    done: Callable[[tuple[int, int, int]], int], option: str) -> None:
    """Poll Metadata of every topic until there are ``expected`` partitions (or more) and
    ``done(states)`` counts every one of them."""
    from raftka.client import AdminClient
    bar = perf.Progress(what, expected, progress, show_rate=False)
    deadline = time.monotonic() + timeout_s
    last: tuple[int, int, int] | None = None
    try:
        with AdminClient(bootstrap_servers=bootstrap, request_timeout_ms=ADMIN_REQUEST_TIMEOUT_MS) as admin:
            while True:
                try:
                    last = partition_states(admin)
                    bar.done = done(last)
                    if last[0] >= expected and bar.done >= last[0]:
                        return
                except Exception as error:  # a broker restarting; retried until the deadline
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"{what}: not reached within {timeout_s:.0f} s ({option}); "
                                           f"last error: {error}") from None
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{what}: not reached within {timeout_s:.0f} s ({option}); last seen "
                                       f"(partitions, with a leader, full ISR): {last}")
                time.sleep(ISR_POLL_INTERVAL_S)
    finally:
        bar.close()


def create_partitions(bootstrap: str, topics: list[tuple[str, int]], per_request: int, timeout_s: float,
                      progress: bool) -> dict[str, float]:
    """Create ``topics`` in CreateTopics of ``per_request`` topics; time the answers
    (``create_s``) and until every partition has a leader in Metadata (``leaders_s``)."""
    from raftka.client import AdminClient, NewTopic
    total = sum(n for _, n in topics)
    configs = {"min.insync.replicas": str(MIN_INSYNC_REPLICAS)}
    bar = perf.Progress("create", total, progress, unit="partitions/s")
    bar.begin()
    started = time.monotonic()
    try:
        with AdminClient(bootstrap_servers=bootstrap, request_timeout_ms=ADMIN_REQUEST_TIMEOUT_MS) as admin:
            for i in range(0, len(topics), per_request):
                batch = topics[i:i + per_request]
                answers = admin.create_topics([NewTopic(name, n, REPLICATION_FACTOR, configs) for name, n in batch],
                                              raise_errors=False)
                failed = [(name, error) for name, error in answers.items() if error is not None]
                if failed:
                    raise MeasurementError(f"creating {failed[0][0]}: {failed[0][1]}")
                bar.done += sum(n for _, n in batch)
                if time.monotonic() - started > timeout_s:
                    raise TimeoutError(f"creating {total:,} partitions: not done within {timeout_s:.0f} s "
                                       f"(--create-timeout-s); {bar.done:,} created")
    finally:
        bar.close()
    create_s = time.monotonic() - started
    wait_partitions(bootstrap, total, max(0.0, started + timeout_s - time.monotonic()), "leaders", progress,
                    lambda states: states[1], "--create-timeout-s")
    return {"create_s": create_s, "leaders_s": time.monotonic() - started}


# -- measurements in child processes --------------------------------------------------------

def _child_main(target: Callable[..., dict[str, Any]], kwargs: dict[str, Any], results: Any) -> None:
    # Its own process group, so that stopping it also stops what it started (e2e's consumer);
    # Ctrl-C reaches the parent, which stops it.
    os.setsid()
    try:
        results.put({"result": target(**kwargs)})
    except BaseException as error:  # noqa: BLE001 - reported by the parent
        results.put({"error": f"{type(error).__name__}: {error}"})


def in_child(what: str, target: Callable[..., dict[str, Any]], kwargs: dict[str, Any],
             timeout_s: float) -> dict[str, Any]:
    """``target(**kwargs)`` in a spawned process (the measuring client gets a process of its
    own, as with ``raftka perf``); its result, or a one-line error."""
    ctx = multiprocessing.get_context("spawn")  # the parent has threads: no fork
    results = ctx.Queue()
    proc = ctx.Process(target=_child_main, args=(target, kwargs, results), name=f"perf-partitions-{what}")
    try:
        proc.start()
        try:
            out = results.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"{what}: no result within {timeout_s:.0f} s (--measure-timeout-s)") from None
        if "error" in out:
            raise MeasurementError(f"{what} failed: {out['error']}")
        proc.join(CHILD_STOP_TIMEOUT_S)
        return out["result"]
    finally:
        if proc.pid is not None and proc.is_alive():  # still ours
            try:  # its process group: the child and what it started
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # stopped before its setsid(): no group of its own yet
            proc.kill()  # by PID, for that case
            proc.join(CHILD_STOP_TIMEOUT_S)
        results.close()


def keyed_produce(bootstrap: str, topics: list[tuple[str, int]], records: int, record_size: int,
                  configs: dict[str, Any], progress: bool = False, seed: int = 0) -> dict[str, Any]:
    """Send ``records`` keyed records over every partition of ``topics`` as fast as possible:
    key k drawn uniformly from KEYS_PER_PARTITION x partitions keys, sent to topic k mod topics
    (Kafka's default partitioner picks the partition from the key). Rate over the timed window
    (first send to flush), latency = send() to acknowledgement on sampled records."""
    from raftka.client import Producer
    from raftka.client.partitioner import partition_for_key
    partitions = sum(n for _, n in topics)
    key_space = KEYS_PER_PARTITION * partitions
    rng = random.Random(seed)
    plan = [(topics[k % len(topics)][0], b"%d" % k)
            for k in (rng.randrange(key_space) for _ in range(records))]
    sizes = dict(topics)
    reached = len({(topic, partition_for_key(key, sizes[topic])) for topic, key in set(plan)})
    value = perf.payload(record_size)
    sample_every = max(1, records // perf.LATENCY_SAMPLES_MAX)
    latencies: list[float] = []
    clock = time.perf_counter
    with Producer(bootstrap_servers=bootstrap, **configs) as producer:
        # Metadata of every topic before timing. Asked from many threads at once, so the
        # client's refreshes coalesce: one after another would be a Metadata of all the topics
        # known so far per topic (quadratic in the topics).
        warm_up = time.monotonic()
        with ThreadPoolExecutor(WARM_UP_THREADS) as pool:
            list(pool.map(producer.partitions_for, [name for name, _ in topics]))
        warm_up_s = time.monotonic() - warm_up
        bar = perf.Progress("keyed produce", records, progress, counted="sent")
        try:
            send = producer.send
            bar.begin()
            started = clock()
            for i, (topic, key) in enumerate(plan):
                future = send(topic, value, key=key)
                if i % sample_every == 0:
                    future.add_callback(perf._record_latency, latencies, clock())
                if i % 1000 == 999:
                    bar.done = i + 1
            failures = producer.flush(timeout=max(60.0, records / 1000))
            seconds = clock() - started
            bar.close(records, seconds)  # the last line shows the summary's figure
        finally:
            bar.close()
    return {"records": records, "seconds": seconds, "records_per_s": records / seconds,
            "latency_ms": perf.percentiles(latencies), "failed_batches": len(failures),
            "first_error": repr(failures[0][1]) if failures else None, "key_space": key_space,
            "partitions_keyed": reached, "partitions": partitions, "metadata_warm_up_s": warm_up_s}


# -- one point of the curve -----------------------------------------------------------------

def _broker_figures(pids: dict[int, int]) -> dict[str, dict[str, Any]]:
    return {"rss_bytes": {str(b): rss_bytes(pid) for b, pid in pids.items()},
            "open_files": {str(b): open_files(pid) for b, pid in pids.items()},
            "open_files_limit": {str(b): open_files_limit(pid) for b, pid in pids.items()}}


def kill_and_restart(cluster: Any, bootstrap: str, broker: int, partitions: int,
                     args: argparse.Namespace) -> dict[str, Any]:
    """kill -9 ``broker``; once it left every ISR (fenced), start it again: seconds until it is
    ready and until every partition is back to a full ISR, both from the restart."""
    from raftka.client import AdminClient
    from raftka.cluster import wait_until
    progress = not args.no_progress
    cluster.kill(broker)
    killed = time.monotonic()
    with AdminClient(bootstrap_servers=bootstrap, request_timeout_ms=ADMIN_REQUEST_TIMEOUT_MS) as admin:
        def fenced() -> bool:
            return all(broker not in p["isr"] for t in admin.describe_topics() for p in t["partitions"])
        wait_until(fenced, args.isr_timeout_s, interval_s=ISR_POLL_INTERVAL_S,
                   what=f"broker {broker} out of every ISR after kill -9 (--isr-timeout-s)")
    fenced_s = time.monotonic() - killed
    restarted = time.monotonic()
    cluster.restart(broker, timeout_s=args.restart_timeout_s)
    ready_s = time.monotonic() - restarted
    wait_partitions(bootstrap, partitions, args.isr_timeout_s, "full ISR after the restart", progress,
                    lambda states: states[2], "--isr-timeout-s")
    return {"broker": broker, "fenced_s": fenced_s, "ready_s": ready_s,
            "full_isr_s": time.monotonic() - restarted}


def controller_failovers(cluster: Any, args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    """``--controller-kills`` kills of the active controller, each timed until the next metadata
    write commits; the killed one is restarted and caught up before the next kill."""
    from raftka.bench.stability import kill_active_controller, restart_controller
    samples, killed, rejoin = [], [], []
    for i in range(args.controller_kills):
        controller, seconds = kill_active_controller(cluster, f"{FAILOVER_TOPIC_PREFIX}{i}", args.failover_timeout_s)
        samples.append(seconds)
        killed.append(controller)
        rejoin.append(restart_controller(cluster, controller, args.restart_timeout_s))
        say(f"kill -9 of controller {controller}: next metadata write committed after {seconds * 1000:.0f} ms; "
            f"restarted and caught up in {rejoin[-1]:.1f} s")
    return {"kills": len(samples), "controllers": killed, "samples_s": samples,
            "median_s": statistics.median(samples), "max_s": max(samples), "rejoin_s": rejoin}


def measure_point(args: argparse.Namespace, partitions: int, say: Callable[[str], None]) -> dict[str, Any]:
    progress = not args.no_progress
    topics = topic_sizes(partitions, args.partitions_per_topic)
    all_configs = perf.producer_configs("all", "none", {})
    args.bootstrap_server = None  # target_cluster: always a cluster of our own (a broker is killed)
    with perf.target_cluster(args, say) as (bootstrap, cluster):
        point: dict[str, Any] = {"partitions": partitions, "topics": len(topics)}
        point.update(create_partitions(bootstrap, topics, args.topics_per_request, args.create_timeout_s, progress))
        say(f"{partitions:,} partitions in {len(topics):,} topics: CreateTopics answered in {point['create_s']:.2f} s, "
            f"every leader in {point['leaders_s']:.2f} s")
        perf.ensure_topic(bootstrap, TOPIC, 1, REPLICATION_FACTOR, MIN_INSYNC_REPLICAS)
        total = partitions + 1
        wait_partitions(bootstrap, total, args.isr_timeout_s, "full ISR", progress, lambda states: states[2],
                        "--isr-timeout-s")
        pids = {b: cluster.process(b).pid for b in cluster.broker_ids}
        cpu = idle_cpu_percent(pids, args.idle_seconds, progress)
        point["idle_cpu_percent"] = {str(b): pct for b, pct in cpu.items()}
        point.update(_broker_figures(pids))
        say(f"idle CPU per broker: {_per_broker(point['idle_cpu_percent'], '{:.1f}%')}; RSS "
            f"{_per_broker(point['rss_bytes'], '{:.0f} MB', 1 / 1e6)}; open files {_per_broker(point['open_files'])}")
        point["produce"] = in_child("produce", perf.produce, {
            "bootstrap": bootstrap, "topic": TOPIC, "num_records": args.records, "record_size": args.record_size,
            "configs": all_configs, "progress": progress}, args.measure_timeout_s)
        say(f"acks=all produce: {point['produce']['records_per_s']:,.0f} records/s")
        point["e2e"] = in_child("e2e", perf.e2e, {
            "bootstrap": bootstrap, "topic": TOPIC, "rate": args.e2e_rate, "duration_s": args.e2e_duration,
            "record_size": args.record_size, "producer_cfg": {**all_configs, "linger_ms": 0},
            "consumer_cfg": {}, "progress": progress}, args.measure_timeout_s)
        e2e = point["e2e"]["e2e_latency_ms"]
        say(f"e2e at {point['e2e']['rate_achieved']:,.0f}/s: p50 {e2e['p50'] or float('nan'):.2f} ms, "
            f"p99 {e2e['p99'] or float('nan'):.2f} ms")
        point["keyed"] = in_child("keyed produce", keyed_produce, {
            "bootstrap": bootstrap, "topics": topics, "records": args.keyed_records,
            "record_size": args.record_size, "configs": all_configs, "progress": progress},
            args.measure_timeout_s)
        say(f"keyed produce over {point['keyed']['partitions_keyed']:,} partitions: "
            f"{point['keyed']['records_per_s']:,.0f} records/s")
        point["restart"] = kill_and_restart(cluster, bootstrap, cluster.broker_ids[0], total, args)
        say(f"kill -9 of broker {point['restart']['broker']}, restart: ready in {point['restart']['ready_s']:.1f} s, "
            f"every partition with a full ISR in {point['restart']['full_isr_s']:.1f} s")
        point["controller_failover"] = controller_failovers(cluster, args, say) if args.controller_kills else None
        failed = [f"{what}: {point[what]['failed_batches']} batches failed ({point[what]['first_error']})"
                  for what in ("produce", "keyed") if point[what]["failed_batches"]]
        if point["e2e"]["received"] != point["e2e"]["sent"]:
            failed.append(f"e2e: {point['e2e']['received']:,} of {point['e2e']['sent']:,} received")
        point["problems"] = failed
    return point


# -- output ---------------------------------------------------------------------------------

def _per_broker(values: dict[str, Any], fmt: str = "{:,}", scale: float | None = None) -> str:
    """"a / b / c" in broker id order."""
    ordered = [v for _, v in sorted(values.items(), key=lambda kv: int(kv[0]))]
    return " / ".join(fmt.format(v if scale is None else v * scale) for v in ordered)


ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("create (s): answered / leaders", lambda p: f"{p['create_s']:.2f} / {p['leaders_s']:.2f}"),
    ("idle CPU per broker (% of a core)", lambda p: _per_broker(p["idle_cpu_percent"], "{:.1f}")),
    ("acks=all produce (records/s)", lambda p: f"{p['produce']['records_per_s']:,.0f}"),
    ("e2e p50 / p99 (ms)", lambda p: f"{p['e2e']['e2e_latency_ms']['p50']:.1f} / {p['e2e']['e2e_latency_ms']['p99']:.1f}"
     if p["e2e"]["e2e_latency_ms"]["p50"] is not None else "-"),
    ("e2e rate reached (records/s)", lambda p: f"{p['e2e']['rate_achieved']:,.0f}"),
    ("keyed over all partitions (records/s)", lambda p: f"{p['keyed']['records_per_s']:,.0f}"),
    ("restart -> ready / full ISR (s)", lambda p: f"{p['restart']['ready_s']:.1f} / {p['restart']['full_isr_s']:.1f}"),
    ("controller failover median / max (ms)", lambda p: f"{p['controller_failover']['median_s'] * 1000:.0f} / "
     f"{p['controller_failover']['max_s'] * 1000:.0f}" if p.get("controller_failover") else "-"),
    ("RSS per broker (MB)", lambda p: _per_broker(p["rss_bytes"], "{:.0f}", 1 / 1e6)),
    ("open files per broker", lambda p: _per_broker(p["open_files"])),
]


def table(points: list[dict[str, Any]]) -> str:
    """A Markdown table: one row per figure, one column per N."""
    head = ["figure"] + [f"{p['partitions']:,} partitions" for p in points]
    rows = [head, ["---"] * len(head)] + [[name] + [show(p) for p in points] for name, show in ROWS]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def plot(points: list[dict[str, Any]], path: str) -> None:
    """One panel per figure against N (log x axis)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = [p["partitions"] for p in points]
    brokers = sorted(points[0]["idle_cpu_percent"], key=int)

    def per_broker(key: str, scale: float = 1.0) -> dict[str, list[float]]:
        return {f"broker {b}": [p[key][b] * scale for p in points] for b in brokers}
    panels: list[tuple[str, dict[str, list[float]]]] = [
        ("create (s)", {"CreateTopics answered": [p["create_s"] for p in points],
                        "every leader": [p["leaders_s"] for p in points]}),
        ("idle CPU per broker (% of a core)", per_broker("idle_cpu_percent")),
        ("acks=all produce (records/s)", {"1 topic": [p["produce"]["records_per_s"] for p in points]}),
        ("e2e latency (ms)", {"p50": [p["e2e"]["e2e_latency_ms"]["p50"] for p in points],
                              "p99": [p["e2e"]["e2e_latency_ms"]["p99"] for p in points]}),
        ("keyed over all partitions (records/s)", {"keyed": [p["keyed"]["records_per_s"] for p in points]}),
        ("kill -9, restart (s)", {"ready": [p["restart"]["ready_s"] for p in points],
                                  "full ISR": [p["restart"]["full_isr_s"] for p in points]}),
        ("controller failover (ms)", {
            what: [p["controller_failover"][key] * 1000 if p.get("controller_failover") else None for p in points]
            for what, key in (("median", "median_s"), ("max", "max_s"))}),
        ("RSS per broker (MB)", per_broker("rss_bytes", 1 / 1e6)),
        ("open files per broker", per_broker("open_files")),
    ]
    fig, axes = plt.subplots(3, 3, figsize=(16, 12))
    for ax, (title, lines) in zip(axes.flat, panels):
        for label, ys in lines.items():
            ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("partitions in the cluster")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize=8)
    fig.suptitle("raftka perf partitions: one topic (RF 3, min ISR 2) of a 3+3 cluster holding N partitions")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- the command ----------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    say = perf._say_to(args)
    counts = _check(args)
    from raftka.cluster import ClusterError
    from raftka.cluster.process import raise_open_files_limit
    limit_before = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = open_files_needed(max(counts), args.brokers)
    try:
        limit = raise_open_files_limit(needed)
        bounded = ""
    except ClusterError:  # the hard limit stays below it: the brokers' segment file cache copes
        limit = raise_open_files_limit()
        bounded = "; segment files past the brokers' log.open.files.max are opened on demand"
    say(f"open files limit of the process that starts the nodes: soft {limit_before[0]:,} -> {limit[0]:,} "
        f"(hard {limit_before[1]:,} -> {limit[1]:,}; {needed:,} with every segment file open at "
        f"{max(counts):,} partitions{bounded})")
    result: dict[str, Any] = {
        "command": "partitions", "date": perf._now(), "controllers": args.controllers, "brokers": args.brokers,
        "partitions_per_topic": args.partitions_per_topic, "replication_factor": REPLICATION_FACTOR,
        "min_insync_replicas": MIN_INSYNC_REPLICAS, "record_size": args.record_size, "records": args.records,
        "e2e_rate": args.e2e_rate, "e2e_duration_s": args.e2e_duration, "keyed_records": args.keyed_records,
        "idle_seconds": args.idle_seconds, "controller_kills": args.controller_kills,
        "server_config": args.server_config,
        "open_files_limit": {"soft_before": limit_before[0], "soft": limit[0], "hard_before": limit_before[1],
                             "hard": limit[1], "needed": needed},
        "load_average_start": [round(x, 2) for x in os.getloadavg()], "points": []}
    previous = signal.signal(signal.SIGTERM, perf._raise_on_term)  # unwinds: clusters and children stopped
    error: str | None = None
    try:
        for n in counts:
            say(f"== {n:,} partitions")
            result["points"].append(measure_point(args, n, say))
    except (MeasurementError, TimeoutError, RuntimeError, RaftkaError) as failure:  # ClusterError: a RuntimeError
        error = str(failure).strip().splitlines()[0] if str(failure).strip() else type(failure).__name__
        result["error"] = error
    finally:
        signal.signal(signal.SIGTERM, previous)
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    problems = [f"{p['partitions']:,} partitions: {x}" for p in result["points"] for x in p["problems"]]
    if result["points"]:
        print(table(result["points"]), file=sys.stderr if args.json else sys.stdout, flush=True)
        if args.plot:
            plot(result["points"], args.plot)
            say(f"plot: {args.plot}")
    perf._emit(args, result)
    for line in problems:
        print(f"problem: {line}", file=sys.stderr)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 1 if problems else 0
