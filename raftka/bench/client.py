"""`raftka perf produce|consume|e2e|failover`: client-side benchmarks (issue #performance).

Shaped like Kafka's kafka-producer-perf-test / kafka-consumer-perf-test / EndToEndLatency, and
driven only through the public client API (``client.Producer``, ``Consumer``, ``AdminClient``).
Without ``--bootstrap-server`` each command starts its own local cluster with raftka.cluster
(3 controllers + 3 brokers, RF 3, min.insync.replicas 2) in a temporary directory and stops it
at the end.

- produce: N records of B bytes, as fast as possible or at ``--throughput`` records/s, from
  ``--producers`` K producer processes; latency = send() to acknowledgement, per record.
- consume: N records from the start of the topic; with no bootstrap server the topic is filled
  first (untimed). Latency = how long each poll() that returned records took.
- e2e: a producer at ``--rate`` records/s for ``--duration`` seconds and a consumer in another
  process; latency = send() to the consumer's poll() returning the record (both processes read
  the same CLOCK_MONOTONIC).
- failover: acks=all load on one partition; ``--kills`` times kill -9 the partition's leader,
  measure the longest time without an acknowledgement around the kill, restart it, wait for the
  ISR to be whole again. At the end read the partition back and check that every acknowledged
  record is there at its acknowledged offset (0 lost) and none is duplicated.

``--command-config FILE`` (Kafka's client properties: security.protocol, sasl.*, ssl.*) logs the
clients of produce, consume and e2e in to a secure cluster given with ``--bootstrap-server``, as
kafka-producer-perf-test's ``--producer.config`` does; the login stays in the file, out of argv
and out of the JSON.

Each prints a progress bar on stderr (when it is a terminal, else a line every few seconds;
``--no-progress`` turns it off), a summary line, and with ``--json`` a JSON object on stdout.
The bar's rate is timed from where the summary's window starts (after the warm-up) and its last
line shows the summary's figure.
Nothing here asserts a target: scripts/bench.sh compares figures with targets and peers.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import signal
import statistics
import string
import struct
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterator

# Per producer: beyond this, every k-th record carries the latency callback. Each costs ~4-5 us
# of the client's GIL, so 5,000 keep the tool's own work near 3% of a 200,000-record run
# (20,000 cost ~9% of the measured rate: medians 316,000 vs 345,000 records/s, acks=1).
LATENCY_SAMPLES_MAX = 5_000
PROGRESS_INTERVAL_S = 0.5  # bar redraw period on a terminal
PROGRESS_LINE_INTERVAL_S = 5.0  # one line this often when stderr is not a terminal
CONSUME_IDLE_TIMEOUT_MS = 10_000  # kafka-consumer-perf-test's --timeout default
WORKER_START_TIMEOUT_S = 120.0  # producer processes: import, connect, warm up
RESULT_TIMEOUT_S = 3600.0  # a worker's result after the start signal
E2E_DRAIN_TIMEOUT_S = 30.0
SYNC_SEND_TIMEOUT_S = 60.0  # produce --sync: one acknowledgement  # after the last send, for the consumer to see every record
FAILOVER_RECOVERY_TIMEOUT_S = 120.0  # per kill: acks resume, broker restarts, ISR whole again
STAMP = struct.Struct(">q")  # e2e: send time (monotonic ns) at the head of the value
SEQ = struct.Struct(">q")  # failover: the record's sequence number at the head of the value
RESUME_QUIET_S = 0.3  # failover: acks arriving this long after a kill are not the in-flight tail
RESUME_RECENT_S = 0.1  # failover: the latest ack at most this old means acks are flowing


# -- registration ---------------------------------------------------------------------------

def register(perf: argparse._SubParsersAction) -> None:
    """Add produce, consume, e2e and failover to ``raftka perf``."""
    p = perf.add_parser("produce", help="producer throughput and latency (like kafka-producer-perf-test)")
    _common(p, config_alias="--producer.config")
    p.add_argument("--topic", default="perf-produce")
    p.add_argument("--num-records", type=int, required=True)
    p.add_argument("--record-size", type=int, default=100, help="bytes per value (default 100)")
    p.add_argument("--acks", choices=["all", "1", "0", "-1"], default="all")
    p.add_argument("--producers", type=int, default=1, help="producer processes (default 1)")
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none")
    p.add_argument("--throughput", type=float, default=-1,
                   help="records/s across all producers; -1 (default) = as fast as possible")
    p.add_argument("--sync", action="store_true",
                   help="wait for each acknowledgement before the next send (round-trip latency)")
    _topic_args(p)
    p.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE",
                   help="producer configs, Kafka's or kafka-python's names (batch.size=65536 linger_ms=10 ...)")
    p.set_defaults(func=run_produce)

    c = perf.add_parser("consume", help="consumer throughput (like kafka-consumer-perf-test)")
    _common(c, config_alias="--consumer.config")
    c.add_argument("--topic", default="perf-consume")
    c.add_argument("--messages", type=int, required=True)
    c.add_argument("--group", default=None, help="group_id (see docs/client.md for group support)")
    c.add_argument("--record-size", type=int, default=100, help="value size when this command fills the topic")
    c.add_argument("--timeout-ms", type=int, default=CONSUME_IDLE_TIMEOUT_MS,
                   help="give up after this long without a record (default 10000)")
    _topic_args(c)
    c.add_argument("--consumer-props", nargs="*", default=[], metavar="KEY=VALUE")
    c.set_defaults(func=run_consume)

    e = perf.add_parser("e2e", help="end-to-end latency, producer to consumer, at a fixed rate")
    _common(e)
    e.add_argument("--topic", default="perf-e2e")
    e.add_argument("--rate", type=float, default=10_000, help="records/s (default 10000)")
    e.add_argument("--duration", type=float, default=10, help="seconds of sending (default 10)")
    e.add_argument("--record-size", type=int, default=100)
    e.add_argument("--acks", choices=["all", "1", "0", "-1"], default="all")
    _topic_args(e, partitions=1)
    e.add_argument("--producer-props", nargs="*", default=["linger_ms=0"], metavar="KEY=VALUE",
                   help="default linger_ms=0, as Kafka's EndToEndLatency")
    e.add_argument("--consumer-props", nargs="*", default=[], metavar="KEY=VALUE")
    e.set_defaults(func=run_e2e)

    f = perf.add_parser("failover", help="kill -9 a partition leader under acks=all load: stall and loss")
    _common(f, cluster_only=True)
    f.add_argument("--topic", default="perf-failover")
    f.add_argument("--kills", type=int, default=10)
    f.add_argument("--throughput", type=float, default=5_000, help="records/s of load (default 5000)")
    f.add_argument("--record-size", type=int, default=100)
    f.add_argument("--settle-s", type=float, default=2.0, help="steady load before each kill (default 2)")
    f.add_argument("--seed", type=int, default=None, help="seed for the load's pauses (printed)")
    f.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE")
    f.set_defaults(func=run_failover)


def _common(p: argparse.ArgumentParser, cluster_only: bool = False, config_alias: str | None = None) -> None:
    if not cluster_only:
        p.add_argument("--bootstrap-server", default=None,
                       help="host:port,...; without it a local 3+3 cluster is started and stopped")
        p.add_argument("--command-config", default=None, metavar="FILE",
                       help="Kafka client properties (security.protocol, sasl.*, ssl.*) for every client "
                            "of the run; needs --bootstrap-server")
        if config_alias:  # the Kafka perf tool's own name for it (--producer.config, --consumer.config)
            p.add_argument(config_alias, dest="command_config", default=None, metavar="FILE",
                           help="Kafka's name for --command-config")
    p.add_argument("--controllers", type=int, default=3, help="own cluster: controllers (default 3)")
    p.add_argument("--brokers", type=int, default=3, help="own cluster: brokers (default 3)")
    p.add_argument("--server-config", action="append", default=[], metavar="KEY=VALUE",
                   help="own cluster: a server config for every process (repeatable)")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _topic_args(p: argparse.ArgumentParser, partitions: int = 1) -> None:
    p.add_argument("--partitions", type=int, default=partitions,
                   help=f"when the topic is created here (default {partitions})")
    p.add_argument("--replication-factor", type=int, default=3, help="when created here (default 3, at most the brokers)")
    p.add_argument("--min-insync-replicas", type=int, default=2, help="when created here (default 2)")


# -- shared pieces --------------------------------------------------------------------------

def parse_props(items: list[str]) -> dict[str, Any]:
    """["batch_size=65536", "linger.ms=0", "compression_type=lz4"] -> typed dict (int, float,
    None, bool or str) keyed by kafka-python's names: Kafka's dotted names, as the Kafka perf
    tools' --producer-props take them, become the same keywords (dots -> underscores)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise _bad("--producer-props/--consumer-props", f"expected KEY=VALUE, got {item!r}")
        value: Any = raw
        if raw.lower() in ("none", "null"):
            value = None
        elif raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for cast in (int, float):
                try:
                    value = cast(raw)
                    break
                except ValueError:
                    pass
        out[key.strip().replace(".", "_")] = value
    return out


def properties_configs(path: str, role: str) -> dict[str, Any]:
    """The client keywords of a Kafka client properties file (``--command-config``) for a
    ``role`` ("producer", "consumer" or "admin": each takes its own keys); ConfigError for a file
    that cannot be read or a key that client cannot take."""
    from raftka.client.properties import client_configs
    from raftka.common.server_config import parse_properties
    if role == "producer":
        from raftka.client.aio.producer import DEFAULTS
    elif role == "consumer":
        from raftka.client.aio.consumer import DEFAULTS
    else:
        from raftka.client.aio.admin import DEFAULTS
    try:
        with open(path, encoding="utf-8") as file:
            properties = parse_properties(file.read())
    except OSError as error:
        raise _bad("--command-config", f"{path}: {error.strerror or error}") from None
    properties.pop("bootstrap.servers", None)  # --bootstrap-server says where
    return client_configs(properties, DEFAULTS)


def security_of(args: argparse.Namespace, role: str) -> dict[str, Any]:
    """``--command-config``'s keywords for ``role``, or none. The file describes the cluster at
    ``--bootstrap-server``: a cluster this command starts itself is PLAINTEXT."""
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    if not getattr(args, "bootstrap_server", None):
        raise _bad("--command-config", "needs --bootstrap-server (the cluster a tool starts itself is PLAINTEXT)")
    return properties_configs(path, role)


def protocol_of(configs: dict[str, Any]) -> dict[str, Any]:
    """What a result records of the login: protocol and mechanism, never the credentials."""
    protocol = configs.get("security_protocol") or "PLAINTEXT"
    return {"security_protocol": protocol,
            "sasl_mechanism": configs.get("sasl_mechanism") if protocol.startswith("SASL") else None}


def payload(size: int, seed: int = 0) -> bytes:
    """A value of ``size`` random upper-case letters (kafka-producer-perf-test's payload)."""
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(size)).encode()


def percentiles(samples_ms: list[float]) -> dict[str, float | None]:
    """avg, p50, p95, p99, p99.9 and max of latency samples in ms (None when there are none)."""
    if not samples_ms:
        return {k: None for k in ("avg", "p50", "p95", "p99", "p99_9", "max")}
    s = sorted(samples_ms)

    def at(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))]
    return {"avg": sum(s) / len(s), "p50": at(0.50), "p95": at(0.95), "p99": at(0.99),
            "p99_9": at(0.999), "max": s[-1], "samples": len(s)}  # type: ignore[dict-item]


def _fmt_latency(lat: dict[str, Any]) -> str:
    if lat.get("p50") is None:
        return "no latency samples"
    return (f"{lat['avg']:.2f} ms avg latency, {lat['max']:.2f} ms max, p50 {lat['p50']:.2f} ms, "
            f"p95 {lat['p95']:.2f} ms, p99 {lat['p99']:.2f} ms, p99.9 {lat['p99_9']:.2f} ms")


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal, a plain line every few seconds
    otherwise, nothing when disabled. The measuring thread only sets ``done`` (or ``count`` reads
    shared counters); drawing runs on its own thread.

    Its rate has the summary's definition: records counted over the time since the measuring code
    called ``begin()``, right where the summary's timed window starts (after the warm-up: client
    start, metadata, first round trip); until then the bar says "warming up". The bar counts
    records as they are sent, the summary once they are acknowledged, so ``close(records,
    seconds)`` draws the last line from the summary's own figures: the last figure shown is the
    summary's. (The bar used to time from its creation, warm-up included, and showed a third of
    the summary's rate.)"""

    def __init__(self, what: str, total: int, enabled: bool, count: Callable[[], int] | None = None,
                 show_rate: bool = True, counted: str = "", unit: str = "records/s") -> None:
        self.what = what
        self.show_rate = show_rate
        self.counted = counted  # "sent", "read": what the live count is
        self.unit = unit
        self.total = max(1, total)
        self.done = 0
        self._count = count or (lambda: self.done)
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self._stop = threading.Event()
        self._created = time.perf_counter()
        self._started: float | None = None  # set by begin(): the summary's window starts
        self._closed = False
        self._width = 0  # of the last line drawn in place, to blank a longer one
        self._thread: threading.Thread | None = None
        if enabled:
            self._thread = threading.Thread(target=self._draw_loop, name="perf-progress", daemon=True)
            self._thread.start()

    def begin(self) -> None:
        """The timed window starts now (the first timed send or poll)."""
        self._started = time.perf_counter()

    def _line(self, final: tuple[int, float] | None = None) -> str:
        if final is not None:
            n, seconds = final
            since: float | None = seconds
        else:
            n = self._count()
            since = None if self._started is None else time.perf_counter() - self._started
        frac = min(1.0, n / self.total)
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        counted = f" {self.counted}" if self.counted else ""
        if not self.show_rate:
            tail = f" {time.perf_counter() - self._created:.0f} s"
        elif since is None:
            tail = ", warming up"
        else:
            tail = f", {n / max(since, 1e-9):,.1f} {self.unit}"
        return f"{self.what} [{bar}] {frac * 100:5.1f}% {n:,}/{self.total:,}{counted}{tail}"

    def _draw_loop(self) -> None:
        interval = PROGRESS_INTERVAL_S if self.tty else PROGRESS_LINE_INTERVAL_S
        while not self._stop.wait(interval):
            self._draw()

    def _draw(self, final: tuple[int, float] | None = None) -> None:
        try:
            line = self._line(final)
            if self.tty:
                sys.stderr.write("\r" + line.ljust(self._width))
                self._width = len(line)
            else:
                sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def close(self, records: int | None = None, seconds: float | None = None) -> None:
        """Stop drawing; the last line shows ``records`` over ``seconds`` (the summary's figures)
        when given, else the live count. Only the first call draws."""
        if not self.enabled or self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self._draw(None if records is None or seconds is None else (records, seconds))
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


class Throttle:
    """Keeps a sender at ``rate`` records/s (rate <= 0: no limit), like Kafka's
    ThroughputThrottler: sleep when ahead of schedule, never try to catch up by bursting more
    than the schedule allows."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.perf_counter()

    def wait(self, sent: int) -> None:
        if self.rate <= 0:
            return
        due = self.start + sent / self.rate
        delay = due - time.perf_counter()
        if delay > 0.0005:
            time.sleep(delay)


@contextlib.contextmanager
def target_cluster(args: argparse.Namespace, say: Callable[[str], None]) -> Iterator[tuple[str, Any]]:
    """(bootstrap servers, Cluster or None): the given servers, or a local cluster for the run."""
    bootstrap = getattr(args, "bootstrap_server", None)
    if bootstrap:
        yield bootstrap, None
        return
    from raftka.cluster import Cluster
    previous = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (a benchmark's timeout) unwinds like Ctrl-C, so the cluster is stopped by PID.
        previous = signal.signal(signal.SIGTERM, _raise_on_term)
    try:
        configs: dict[str, Any] = {"default.replication.factor": min(3, args.brokers),
                                   "min.insync.replicas": min(2, args.brokers)}
        for kv in args.server_config:
            key, sep, value = kv.partition("=")
            if not sep or not key:
                raise _bad("--server-config", f"expected KEY=VALUE, got {kv!r}")
            configs[key] = value
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="raftka-perf-") as root:
            with Cluster.start(root, controllers=args.controllers, brokers=args.brokers, configs=configs) as cluster:
                say(f"started a local cluster ({args.controllers} controllers + {args.brokers} brokers) "
                    f"in {time.perf_counter() - started:.1f} s: {cluster.bootstrap_servers}")
                yield cluster.bootstrap_servers, cluster
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _bad(option: str, problem: str) -> Exception:
    """A bad command-line value: the CLI prints it as one line and exits 1."""
    from raftka.common.errors import ConfigError
    return ConfigError(option, problem)


def _raise_on_term(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int,
                 min_insync_replicas: int, configs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Create ``topic`` unless it exists (RF capped at the live brokers); wait until every
    partition has a leader. Returns its describe_topics entry. ``configs``: the admin client's
    other keywords (a secure cluster's login)."""
    from raftka.client import AdminClient, NewTopic
    from raftka.common.errors import TopicAlreadyExistsError
    from raftka.cluster import wait_until
    with AdminClient(bootstrap_servers=bootstrap, **(configs or {})) as admin:
        if topic not in admin.list_topics():
            brokers = len(admin.describe_cluster().get("brokers") or []) or replication_factor
            rf = max(1, min(replication_factor, brokers))
            configs = {"min.insync.replicas": str(min(min_insync_replicas, rf))}
            try:
                admin.create_topics([NewTopic(topic, partitions, rf, configs)])
            except TopicAlreadyExistsError:
                pass

        def described() -> dict[str, Any] | None:
            found = [t for t in admin.describe_topics([topic]) if t["topic"] == topic]
            if not found:
                return None
            parts = found[0]["partitions"]
            if parts and all(p["leader"] >= 0 for p in parts):
                return found[0]
            return None
        return wait_until(described, 60, interval_s=0.1, what=f"topic {topic} with leaders")


def _say_to(args: argparse.Namespace) -> Callable[[str], None]:
    # With --json stdout is the JSON object only; human lines go to stderr then.
    stream = sys.stderr if args.json else sys.stdout

    def say(line: str) -> None:
        print(line, file=stream, flush=True)
    return say


def _emit(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True), flush=True)


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


# -- produce --------------------------------------------------------------------------------

def producer_configs(acks: str, compression: str, props: dict[str, Any]) -> dict[str, Any]:
    """Client configs for the perf producer: idempotence only with acks=all (it needs it)."""
    configs: dict[str, Any] = {"acks": "all" if acks in ("all", "-1") else int(acks),
                               "compression_type": None if compression == "none" else compression}
    if configs["acks"] != "all":
        configs["enable_idempotence"] = False
    configs.update(props)
    return configs


def produce_records(bootstrap: str, topic: str, num_records: int, record_size: int, configs: dict[str, Any],
                    throughput: float, counter: Callable[[int], None] | None = None,
                    start_gate: Callable[[], None] | None = None, sync: bool = False) -> dict[str, Any]:
    """Send ``num_records`` values of ``record_size`` bytes with one Producer; returns counts,
    the timed window and latency samples (ms). ``counter(n)`` is told the records sent so far
    every 1,000; ``start_gate()`` is called after the warm-up, right before timing starts.
    ``sync``: one record at a time, each waited for (``send().get()``)."""
    from raftka.client import Producer
    value = payload(record_size)
    sample_every = max(1, num_records // LATENCY_SAMPLES_MAX)
    latencies: list[float] = []
    clock = time.perf_counter
    with Producer(bootstrap_servers=bootstrap, **configs) as producer:
        producer.send(topic, value).get(timeout=60)  # metadata, producer id, connections
        if start_gate is not None:
            start_gate()
        throttle = Throttle(throughput)
        started = clock()
        if sync:
            for i in range(num_records):
                t0 = clock()
                producer.send(topic, value).get(timeout=SYNC_SEND_TIMEOUT_S)
                latencies.append((clock() - t0) * 1000)
                if counter is not None and i % 100 == 99:
                    counter(i + 1)
            num_records_async = 0
        else:
            num_records_async = num_records
        send = producer.send
        # Only every k-th record carries the latency callback (bounded, so the measurement
        # costs little beside the client's own per-record work; failures are counted from
        # flush()'s answer, not with an errback per record).
        if throughput > 0:
            for i in range(num_records_async):
                future = send(topic, value)
                if i % sample_every == 0:
                    future.add_callback(_record_latency, latencies, clock())
                throttle.wait(i + 1)
                if counter is not None and i % 1000 == 999:
                    counter(i + 1)
        else:
            # Unthrottled: in strides of k, the first send sampled and the rest bare, with no
            # per-record check in the loop.
            next_count = 1000
            for start in range(0, num_records_async, sample_every):
                send(topic, value).add_callback(_record_latency, latencies, clock())
                for _ in range(min(sample_every, num_records_async - start) - 1):
                    send(topic, value)
                sent = min(start + sample_every, num_records_async)
                if counter is not None and sent >= next_count:
                    counter(sent)
                    next_count = sent - sent % 1000 + 1000
        failures = producer.flush(timeout=max(60.0, num_records / 1000))
        elapsed = clock() - started
    if counter is not None:
        counter(num_records)
    return {"records": num_records, "seconds": elapsed, "latencies_ms": latencies, "started": started,
            "failed_batches": len(failures), "first_error": repr(failures[0][1]) if failures else None,
            "sample_every": sample_every}


def _record_latency(samples: list[float], sent_at: float, _metadata: Any) -> None:
    samples.append((time.perf_counter() - sent_at) * 1000)


def _produce_worker(bootstrap: str, topic: str, num_records: int, record_size: int, configs: dict[str, Any],
                    throughput: float, sent: Any, ready: Any, go: Any, results: Any, index: int) -> None:
    """One producer process of ``--producers K`` (spawned: no state shared with the parent)."""
    def counter(n: int) -> None:
        sent.value = n

    def gate() -> None:
        ready.release()
        go.wait(WORKER_START_TIMEOUT_S)
    try:
        out = produce_records(bootstrap, topic, num_records, record_size, configs, throughput, counter, gate)
        out["wall_end"] = time.time()
        out["wall_start"] = out["wall_end"] - out["seconds"]
        results.put((index, out))
    except BaseException as error:  # noqa: BLE001 - reported by the parent
        results.put((index, {"error": f"{type(error).__name__}: {error}"}))
        ready.release()


def run_produce(args: argparse.Namespace) -> int:
    say = _say_to(args)
    if args.num_records < 1 or args.record_size < 0 or args.producers < 1:
        raise _bad("--num-records/--producers/--record-size", "need --num-records >= 1, --producers >= 1, --record-size >= 0")
    configs = producer_configs(args.acks, args.compression, parse_props(args.producer_props))
    login = security_of(args, "producer")  # kept out of the result: it holds a password
    with target_cluster(args, say) as (bootstrap, _cluster):
        ensure_topic(bootstrap, args.topic, args.partitions, args.replication_factor, args.min_insync_replicas,
                     security_of(args, "admin"))
        result = produce(bootstrap, args.topic, args.num_records, args.record_size, {**login, **configs},
                         args.throughput, args.producers, progress=not args.no_progress, sync=args.sync)
    result.update({"command": "produce", "date": _now(), "topic": args.topic, "acks": args.acks, "sync": args.sync,
                   "compression": args.compression, "producers": args.producers,
                   "record_size": args.record_size, "configs": {k: v for k, v in configs.items()},
                   **protocol_of(login)})
    say(f"{result['records']:,} records sent, {result['records_per_s']:,.1f} records/s "
        f"({result['mb_per_s']:.2f} MB/s), {_fmt_latency(result['latency_ms'])}"
        + (f"; {result['failed_batches']} batches FAILED, first: {result['first_error']}"
           if result["failed_batches"] else ""))
    _emit(args, result)
    return 1 if result["failed_batches"] else 0


def produce(bootstrap: str, topic: str, num_records: int, record_size: int, configs: dict[str, Any],
            throughput: float = -1, producers: int = 1, progress: bool = False, sync: bool = False
            ) -> dict[str, Any]:
    """The produce figure: one producer in this process, or ``producers`` processes started
    together; records/s over the common window (first start to last end)."""
    if sync and producers != 1:
        raise _bad("--sync", "takes one producer")
    if producers == 1:
        bar = Progress("produce", num_records, progress, counted="sent")
        try:
            def counter(n: int) -> None:
                bar.done = n
            out = produce_records(bootstrap, topic, num_records, record_size, configs, throughput, counter,
                                  start_gate=bar.begin, sync=sync)
            bar.close(out["records"], out["seconds"])
        finally:
            bar.close()
        outs = [out]
        seconds = out["seconds"]
    else:
        outs, seconds = _produce_processes(bootstrap, topic, num_records, record_size, configs, throughput,
                                           producers, progress)
    latencies = [x for out in outs for x in out["latencies_ms"]]
    records = sum(out["records"] for out in outs)
    failed = sum(out["failed_batches"] for out in outs)
    first_error = next((out["first_error"] for out in outs if out["first_error"]), None)
    return {"records": records, "seconds": seconds, "records_per_s": records / seconds,
            "mb_per_s": records * record_size / seconds / 1e6, "latency_ms": percentiles(latencies),
            "failed_batches": failed, "first_error": first_error,
            "latency_sample_every": max(out["sample_every"] for out in outs)}


def _produce_processes(bootstrap: str, topic: str, num_records: int, record_size: int,
                       configs: dict[str, Any], throughput: float, producers: int,
                       progress: bool) -> tuple[list[dict[str, Any]], float]:
    ctx = multiprocessing.get_context("spawn")  # the parent has threads: no fork
    shares = [num_records // producers + (1 if i < num_records % producers else 0) for i in range(producers)]
    counters = [ctx.Value("q", 0, lock=False) for _ in range(producers)]
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    results = ctx.Queue()
    rate = throughput / producers if throughput > 0 else -1
    procs = [ctx.Process(target=_produce_worker, name=f"perf-producer-{i}", daemon=True,
                         args=(bootstrap, topic, shares[i], record_size, configs, rate, counters[i],
                               ready, go, results, i)) for i in range(producers)]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=WORKER_START_TIMEOUT_S):
                raise TimeoutError(f"producer processes not ready within {WORKER_START_TIMEOUT_S} s")
        bar = Progress(f"produce x{producers}", num_records, progress,
                       count=lambda: sum(c.value for c in counters), counted="sent")
        bar.begin()
        go.set()
        outs: dict[int, dict[str, Any]] = {}
        try:
            deadline = time.monotonic() + RESULT_TIMEOUT_S
            while len(outs) < producers:
                index, out = results.get(timeout=max(1.0, deadline - time.monotonic()))
                if "error" in out:
                    raise RuntimeError(f"producer {index} failed: {out['error']}")
                outs[index] = out
            ordered = [outs[i] for i in range(producers)]
            window = max(o["wall_end"] for o in ordered) - min(o["wall_start"] for o in ordered)
            seconds = max(window, max(o["seconds"] for o in ordered))
            bar.close(sum(o["records"] for o in ordered), seconds)
        finally:
            bar.close()
        for proc in procs:
            proc.join(30)
    finally:
        for proc in procs:  # by PID, only ours
            if proc.is_alive():
                proc.kill()
                proc.join(10)
    return ordered, seconds


# -- consume --------------------------------------------------------------------------------

def consume_records(bootstrap: str, topic: str, messages: int, configs: dict[str, Any], group: str | None,
                    idle_timeout_ms: int, counter: Callable[[int], None] | None = None,
                    on_start: Callable[[], None] | None = None) -> dict[str, Any]:
    """Read ``messages`` records of ``topic`` from its beginning with one Consumer; returns
    counts, bytes, the timed window (first poll to the last record) and poll latencies (ms).
    ``on_start()`` is called right before the first timed poll."""
    import warnings
    from raftka.client import Consumer, TopicPartition
    settings = {"auto_offset_reset": "earliest", **configs}
    if group:
        settings["group_id"] = group
    clock = time.perf_counter
    polls: list[float] = []
    count = 0
    nbytes = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # group_id without groups warns (docs/client.md)
        consumer = Consumer(bootstrap_servers=bootstrap, **settings)
    with consumer:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            from raftka.common.errors import UnknownTopicOrPartitionError
            raise UnknownTopicOrPartitionError("the topic does not exist", topic=topic)
        if group:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, p) for p in sorted(parts)])
        if on_start is not None:
            on_start()
        started = clock()
        last_record = clock()
        while count < messages:
            t0 = clock()
            batch = consumer.poll(timeout_ms=min(1000, idle_timeout_ms))
            t1 = clock()
            if batch:
                polls.append((t1 - t0) * 1000)
                for records in batch.values():
                    count += len(records)
                    nbytes += sum(r.serialized_value_size for r in records)
                last_record = t1
                if counter is not None:
                    counter(count)
            elif (t1 - last_record) * 1000 >= idle_timeout_ms:
                break
        elapsed = last_record - started
    return {"records": count, "bytes": nbytes, "seconds": elapsed, "poll_latencies_ms": polls,
            "timed_out": count < messages}


def run_consume(args: argparse.Namespace) -> int:
    say = _say_to(args)
    if args.messages < 1:
        raise _bad("--messages", "must be >= 1")
    configs = parse_props(args.consumer_props)
    login = security_of(args, "consumer")
    with target_cluster(args, say) as (bootstrap, cluster):
        if cluster is not None:  # our own cluster starts empty: fill the topic first (untimed)
            ensure_topic(bootstrap, args.topic, args.partitions, args.replication_factor, args.min_insync_replicas)
            say(f"filling {args.topic} with {args.messages:,} records of {args.record_size} bytes (untimed)")
            produce_records(bootstrap, args.topic, args.messages, args.record_size,
                            producer_configs("all", "none", {"batch_size": 65536}), -1)
        result = consume(bootstrap, args.topic, args.messages, {**login, **configs}, args.group, args.timeout_ms,
                         progress=not args.no_progress)
    result.update({"command": "consume", "date": _now(), "topic": args.topic, "group": args.group,
                   "configs": configs, **protocol_of(login)})
    say(f"{result['records']:,} records consumed, {result['records_per_s']:,.1f} records/s "
        f"({result['mb_per_s']:.2f} MB/s); poll(): {_fmt_latency(result['poll_latency_ms'])}")
    _emit(args, result)
    if result["timed_out"]:
        print(f"error: only {result['records']:,} of {args.messages:,} records within the "
              f"{args.timeout_ms} ms idle timeout", file=sys.stderr)
        return 1
    return 0


def consume(bootstrap: str, topic: str, messages: int, configs: dict[str, Any], group: str | None = None,
            idle_timeout_ms: int = CONSUME_IDLE_TIMEOUT_MS, progress: bool = False) -> dict[str, Any]:
    """The consume figure with a progress bar; records/s and MB/s over the timed window."""
    bar = Progress("consume", messages, progress, counted="read")
    try:
        def counter(n: int) -> None:
            bar.done = n
        out = consume_records(bootstrap, topic, messages, configs, group, idle_timeout_ms, counter, bar.begin)
        seconds = max(out["seconds"], 1e-9)
        bar.close(out["records"], seconds)
    finally:
        bar.close()
    return {"records": out["records"], "seconds": seconds, "records_per_s": out["records"] / seconds,
            "mb_per_s": out["bytes"] / seconds / 1e6, "poll_latency_ms": percentiles(out["poll_latencies_ms"]),
            "timed_out": out["timed_out"]}


# -- end-to-end -----------------------------------------------------------------------------

def _e2e_consumer(bootstrap: str, topic: str, partitions: list[int], expected: int, configs: dict[str, Any],
                  ready: Any, results: Any, give_up_after_s: float) -> None:
    """The e2e consumer process: from the end of the topic, read ``expected`` records and
    return send->receive latencies (ms), read from the stamp at the head of each value."""
    try:
        from raftka.client import Consumer, TopicPartition
        latencies: list[float] = []
        unpack = STAMP.unpack_from
        now_ns = time.monotonic_ns
        with Consumer(bootstrap_servers=bootstrap, **{"auto_offset_reset": "latest", "fetch_max_wait_ms": 100,
                                                       **configs}) as consumer:
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            consumer.seek_to_end()
            for tp in tps:
                consumer.position(tp)  # resolve the end offset now, before the producer starts
            ready.release()
            deadline = time.monotonic() + give_up_after_s
            while len(latencies) < expected and time.monotonic() < deadline:
                batch = consumer.poll(timeout_ms=100)
                now = now_ns()
                for records in batch.values():
                    for r in records:
                        sent_ns = unpack(r.value)[0]
                        if sent_ns:  # 0: the producer's warm-up record
                            latencies.append((now - sent_ns) / 1e6)
        results.put({"latencies_ms": latencies})
    except BaseException as error:  # noqa: BLE001 - reported by the parent
        results.put({"error": f"{type(error).__name__}: {error}"})
        ready.release()


def run_e2e(args: argparse.Namespace) -> int:
    say = _say_to(args)
    if args.rate <= 0 or args.duration <= 0 or args.record_size < STAMP.size:
        raise _bad("--rate/--duration/--record-size", f"need --rate > 0, --duration > 0, --record-size >= {STAMP.size}")
    configs = producer_configs(args.acks, "none", parse_props(args.producer_props))
    login = security_of(args, "producer")
    with target_cluster(args, say) as (bootstrap, _cluster):
        ensure_topic(bootstrap, args.topic, args.partitions, args.replication_factor, args.min_insync_replicas,
                     security_of(args, "admin"))
        result = e2e(bootstrap, args.topic, args.rate, args.duration, args.record_size, {**login, **configs},
                     {**security_of(args, "consumer"), **parse_props(args.consumer_props)}, args.partitions,
                     progress=not args.no_progress)
    result.update({"command": "e2e", "date": _now(), "topic": args.topic, "acks": args.acks,
                   "record_size": args.record_size, "configs": configs, **protocol_of(login)})
    say(f"end-to-end at {result['rate_achieved']:,.0f} records/s (asked {args.rate:,.0f}) for "
        f"{result['seconds']:.1f} s: {result['received']:,} of {result['sent']:,} received; "
        f"{_fmt_latency(result['e2e_latency_ms'])}; producer acks: p50 "
        f"{result['ack_latency_ms']['p50'] or float('nan'):.2f} ms, p99 {result['ack_latency_ms']['p99'] or float('nan'):.2f} ms")
    _emit(args, result)
    return 0 if result["received"] == result["sent"] else 1


def e2e(bootstrap: str, topic: str, rate: float, duration_s: float, record_size: int,
        producer_cfg: dict[str, Any], consumer_cfg: dict[str, Any], partitions: int = 1,
        progress: bool = False) -> dict[str, Any]:
    """End-to-end latency: this process sends at ``rate`` for ``duration_s``, a spawned consumer
    process receives; each value starts with the send time (CLOCK_MONOTONIC, shared by both)."""
    from raftka.client import Producer
    total = int(rate * duration_s)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Semaphore(0)
    results = ctx.Queue()
    proc = ctx.Process(target=_e2e_consumer, name="perf-e2e-consumer", daemon=True,
                       args=(bootstrap, topic, list(range(partitions)), total, consumer_cfg, ready, results,
                             duration_s + E2E_DRAIN_TIMEOUT_S + WORKER_START_TIMEOUT_S))
    try:
        padding = payload(record_size - STAMP.size)
        acks: list[float] = []
        ack_sample_every = max(1, total // LATENCY_SAMPLES_MAX)
        with Producer(bootstrap_servers=bootstrap, **producer_cfg) as producer:
            # Warm-up (metadata, producer id, connections). Its stamp is 0: the consumer, which
            # starts from the end of the partition, skips it should it still see it.
            producer.send(topic, STAMP.pack(0) + padding).get(timeout=60)
            proc.start()
            if not ready.acquire(timeout=WORKER_START_TIMEOUT_S):
                raise TimeoutError(f"the e2e consumer was not ready within {WORKER_START_TIMEOUT_S} s")
            bar = Progress("e2e", total, progress, counted="sent")
            throttle = Throttle(rate)
            bar.begin()
            started = time.perf_counter()
            try:
                for i in range(total):
                    t = time.monotonic_ns()
                    future = producer.send(topic, STAMP.pack(t) + padding)
                    if i % ack_sample_every == 0:  # as produce: the callbacks cost the client CPU
                        future.add_callback(_record_ack, acks, t)
                    bar.done = i + 1
                    throttle.wait(i + 1)
                producer.flush(timeout=E2E_DRAIN_TIMEOUT_S)
                seconds = time.perf_counter() - started
                bar.close(total, seconds)
            finally:
                bar.close()
        out = results.get(timeout=E2E_DRAIN_TIMEOUT_S + 10)
        if "error" in out:
            raise RuntimeError(f"e2e consumer failed: {out['error']}")
        proc.join(10)
    finally:
        if proc.pid is not None and proc.is_alive():
            proc.kill()
            proc.join(10)
    return {"sent": total, "received": len(out["latencies_ms"]), "seconds": seconds, "rate": rate,
            "rate_achieved": total / seconds, "e2e_latency_ms": percentiles(out["latencies_ms"]),
            "ack_latency_ms": percentiles(acks), "ack_latency_sample_every": ack_sample_every}


def _record_ack(samples: list[float], sent_ns: int, _metadata: Any) -> None:
    samples.append((time.monotonic_ns() - sent_ns) / 1e6)


# -- failover -------------------------------------------------------------------------------

class _AckLog:
    """Every acknowledgement (time, sequence, offset) and every failure of the failover load."""

    def __init__(self) -> None:
        self.acks: list[tuple[float, int, int]] = []
        self.failed: list[tuple[int, str]] = []
        self.lock = threading.Lock()

    def ok(self, seq: int, metadata: Any) -> None:
        self.acks.append((time.monotonic(), seq, metadata.offset))

    def error(self, seq: int, error: BaseException) -> None:
        with self.lock:
            self.failed.append((seq, f"{type(error).__name__}: {error}"))


def _leader_of(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, list[int], list[int]]:
    from raftka.client import AdminClient
    with AdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000) as admin:
        for t in admin.describe_topics([topic]):
            for p in t["partitions"]:
                if p["partition"] == partition:
                    return p["leader"], p["replicas"], p["isr"]
    raise RuntimeError(f"{topic}-{partition} not described")


def run_failover(args: argparse.Namespace) -> int:
    say = _say_to(args)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    if args.kills < 1 or args.throughput <= 0 or args.record_size < SEQ.size:
        raise _bad("--kills/--throughput/--record-size", f"need --kills >= 1, --throughput > 0, --record-size >= {SEQ.size}")
    if args.brokers < 3:
        raise _bad("--brokers", "failover needs >= 3 (RF 3, min.insync.replicas 2)")
    say(f"failover seed {seed}")
    configs = producer_configs("all", "none", parse_props(args.producer_props))
    args.bootstrap_server = None
    with target_cluster(args, say) as (bootstrap, cluster):
        ensure_topic(bootstrap, args.topic, 1, 3, 2)
        result = failover(cluster, bootstrap, args.topic, args.kills, args.throughput, args.record_size,
                          configs, args.settle_s, random.Random(seed), say, progress=not args.no_progress)
    result.update({"command": "failover", "date": _now(), "seed": seed, "topic": args.topic,
                   "throughput": args.throughput, "server_config": args.server_config})
    stalls = result["stalls_s"]
    say(f"kill -9 of the partition leader x{len(stalls)}: longest time without an acknowledgement "
        f"median {result['stall_s']['median']:.3f} s, max {result['stall_s']['max']:.3f} s; "
        f"{result['acknowledged']:,} acknowledged, {result['lost']} lost, {result['duplicates']} duplicated, "
        f"{result['failed_sends']} sends failed (seed {seed})")
    _emit(args, result)
    return 0 if result["lost"] == 0 and result["duplicates"] == 0 else 1


def failover(cluster: Any, bootstrap: str, topic: str, kills: int, throughput: float, record_size: int,
             configs: dict[str, Any], settle_s: float, rng: random.Random, say: Callable[[str], None],
             progress: bool = False) -> dict[str, Any]:
    """Run the acks=all load on ``topic``-0, kill its leader ``kills`` times (restarting it each
    time), then verify every acknowledged record. See the module docstring."""
    from raftka.client import Producer
    from raftka.cluster import wait_until
    log = _AckLog()
    stop = threading.Event()
    sent = [0]
    padding = payload(record_size - SEQ.size)
    producer = Producer(bootstrap_servers=bootstrap, **configs)
    producer_error: list[BaseException] = []

    def load() -> None:
        throttle = Throttle(throughput)
        seq = 0
        try:
            while not stop.is_set():
                future = producer.send(topic, SEQ.pack(seq) + padding, partition=0)
                future.add_callback(log.ok, seq).add_errback(log.error, seq)
                seq += 1
                sent[0] = seq
                throttle.wait(seq)
        except BaseException as error:  # noqa: BLE001 - reported below
            producer_error.append(error)

    rounds: list[dict[str, Any]] = []
    loader = threading.Thread(target=load, name="perf-failover-load", daemon=True)
    bar = Progress("failover kills", kills, progress, show_rate=False)
    try:
        producer.send(topic, SEQ.pack(-1) + padding, partition=0).get(timeout=60)
        loader.start()
        for round_ in range(kills):
            # a little jitter so kills do not line up with the client's or broker's timers
            time.sleep(settle_s + rng.uniform(0, 0.5))
            if producer_error:
                raise RuntimeError(f"the load stopped: {producer_error[0]}")
            leader, _replicas, _isr = _leader_of(bootstrap, topic)
            killed_at = time.monotonic()
            first_after = sent[0]  # records from this sequence on are sent after the kill
            cluster.kill(leader)
            wait_until(lambda: acks_flowing(log.acks, killed_at, after_seq=first_after), FAILOVER_RECOVERY_TIMEOUT_S,
                       interval_s=0.01, what="acknowledgements flowing again after the kill")
            time.sleep(1.0)  # let the stall end fully before the restart can add noise
            resumed_at = time.monotonic()
            cluster.restart(leader, timeout_s=FAILOVER_RECOVERY_TIMEOUT_S)
            wait_until(lambda: len(_leader_of(bootstrap, topic)[2]) == 3, FAILOVER_RECOVERY_TIMEOUT_S,
                       interval_s=0.2, what="the ISR whole again after the restart")
            rounds.append({"leader": leader, "killed_at": killed_at, "resumed_at": resumed_at})
            bar.done = round_ + 1
        time.sleep(0.5)
    finally:
        stop.set()
        loader.join(30)
        bar.close()
        try:
            producer.flush(timeout=FAILOVER_RECOVERY_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - counted as unacknowledged below
            say(f"flush after the load: {error}")
        producer.close(timeout=30)
    acks = sorted(log.acks)
    times = [a[0] for a in acks]
    for r in rounds:
        r["stall_s"] = _stall(times, r["killed_at"], r["resumed_at"])
    stalls = [r["stall_s"] for r in rounds]
    verify = _verify(bootstrap, topic, acks)
    return {"kills": len(rounds), "stalls_s": [round(s, 4) for s in stalls],
            "stall_s": {"median": statistics.median(stalls), "max": max(stalls), "min": min(stalls)},
            "leaders_killed": [r["leader"] for r in rounds], "sent": sent[0], "acknowledged": len(acks),
            "failed_sends": len(log.failed), "first_failure": log.failed[0][1] if log.failed else None,
            **verify}


def acks_flowing(acks: list[tuple[float, ...]], killed_at: float, now: float | None = None,
                 after_seq: int | None = None) -> bool:
    """True once acknowledgements are arriving again after a kill: the latest is recent and the
    kill is RESUME_QUIET_S old. Requests already answered when the leader died can still be
    acknowledged a few ms after the kill; that tail must not count as recovery.

    ``after_seq``: also require an acknowledgement of a record with at least this sequence (the
    first one sent after the kill), which only the new leader can have given. On a loaded box the
    client processes the old leader's last answers hundreds of ms late, which alone passed for
    recovery: the next kill then landed inside the same stall and counted it twice."""
    now = time.monotonic() if now is None else now
    if not (now - killed_at >= RESUME_QUIET_S and bool(acks) and acks[-1][0] > killed_at
            and now - acks[-1][0] <= RESUME_RECENT_S):
        return False
    if after_seq is None:
        return True
    for ack in reversed(acks):  # newest first; only those after the kill matter
        if ack[0] <= killed_at:
            return False
        if ack[1] >= after_seq:
            return True
    return False


def _stall(times: list[float], killed_at: float, until: float) -> float:
    """The longest gap between consecutive acknowledgements among those that overlap
    [killed_at, until]: the longest time the producer heard nothing because of this kill."""
    import bisect
    lo = max(0, bisect.bisect_left(times, killed_at) - 1)
    hi = bisect.bisect_right(times, until)
    window = times[lo:hi + 1]
    if len(window) < 2:
        return until - killed_at
    return max(b - a for a, b in zip(window, window[1:]))


def _verify(bootstrap: str, topic: str, acks: list[tuple[float, int, int]]) -> dict[str, Any]:
    """Read the partition back: every acknowledged (sequence, offset) must be there, once."""
    from raftka.client import Consumer, TopicPartition
    tp = TopicPartition(topic, 0)
    by_offset: dict[int, int] = {}
    seen: dict[int, int] = {}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        deadline = time.monotonic() + FAILOVER_RECOVERY_TIMEOUT_S
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000, max_records=10_000).values():
                for r in records:
                    seq = SEQ.unpack_from(r.value)[0]
                    by_offset[r.offset] = seq
                    seen[seq] = seen.get(seq, 0) + 1
    lost = [(seq, offset) for _t, seq, offset in acks if by_offset.get(offset) != seq]
    duplicates = sum(1 for n in seen.values() if n > 1)
    return {"read": len(by_offset), "log_end_offset": end, "lost": len(lost),
            "lost_examples": lost[:5], "duplicates": duplicates}
