"""`raftka spark demo|sink`: Spark pipelines on Raftka (needs Java 17+).

    raftka spark demo                      # the local cluster in ./.raftka (scripts/quickstart.sh --keep)
    raftka spark demo --bootstrap-server 127.0.0.1:9092 --seconds 30
    raftka spark sink --topic events --output DIR [--rows-out rows.json]   # until Ctrl-C / SIGTERM
    raftka spark sink --bootstrap-server HOST:PORT --command-config client.properties --topic events --output DIR

``demo``: the World Cup stats pipeline (examples/spark/worldcup_stats.py, loaded by path).

Starts a local SparkSession (Java 17+ needed), creates ``worldcup-events`` and
``worldcup-stats`` if missing, and runs the streaming aggregation (goals and cards per match and
team, in windows) to Parquet and to ``worldcup-stats``, while a live feed produces new matches'
events for ``--seconds``. Then it stops the queries and prints what the Parquet output holds.
Run it again with the same ``--output``: the queries go on from their checkpoints.

``sink``: a topic streamed into Parquet exactly once (spark/sink.py), one JSON
line per completed micro-batch on stdout; on Ctrl-C or SIGTERM it stops the query, and with
``--rows-out`` reads its own output back into a JSON file. The chaos harness runs it during
faults (``raftka chaos run --spark``). On a secure cluster it logs in with ``--command-config``
(Kafka's client properties; by default the cluster directory's client.properties, as every
command): each property goes to the query as the ``kafka.``-prefixed option of the same name
(docs/spark.md "Secure clusters") and, as client keywords, to the AdminClient that waits for the
topic. The login stays in the file and in memory: never in argv, a log line or an error.

Both send the JVM's log (Spark's WARN lines, a query stopped mid-batch, its shutdown) to
``--spark-log`` (default OUTPUT/spark.log) instead of the terminal.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import signal
import sys
import threading
import time
from typing import Any, Iterator

from raftka.cli.commands._common import (CLIENT_PROPERTIES, CommandError, add_bootstrap_args, bootstrap_servers,
                                         cluster_dir, command_configs, describe_error, one_line_errors, say)

EVENTS_PARTITIONS = 6
STATS_PARTITIONS = 3
QUERY_STOP_TIMEOUT = "60s"  # spark.sql.streaming.stopTimeout: query.stop() gives up after this
BACKLOG_MAX_S = 600.0  # longest wait for the queries to work through the events already there
DRAIN_MAX_S = 120.0  # after the live feed: longest wait for the last micro-batches
FEED_MATCHES = 24


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("spark", help="Spark pipelines on Raftka (needs Java 17+)",
                                   description="Run the PySpark data source's demo pipeline.")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="spark_command", metavar="ACTION")
    demo = sub.add_parser("demo", help="World Cup stats: worldcup-events -> Parquet and worldcup-stats")
    # No --command-config: examples/spark/worldcup_stats.py's queries take no kafka.* options yet.
    add_bootstrap_args(demo, command_config=False)
    demo.add_argument("--output", default=None, metavar="DIR",
                      help="Parquet files and checkpoints (default: DIR/spark-worldcup of the cluster dir)")
    demo.add_argument("--seconds", type=float, default=20.0, help="how long the live feed runs (20)")
    demo.add_argument("--events-per-second", type=int, default=200, help="live feed rate (200)")
    demo.add_argument("--window", default="5 seconds", help="tumbling window on the record timestamp")
    demo.add_argument("--watermark", default="2 seconds", help="how late an event may be")
    demo.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    _add_spark_log_arg(demo)
    demo.set_defaults(func=one_line_errors(run_demo))

    sink = sub.add_parser("sink", help="stream a topic into Parquet exactly once, one JSON line per micro-batch",
                          description="Stream TOPIC (partition, offset, value) into OUTPUT/parquet with a "
                                      "checkpoint until Ctrl-C or SIGTERM; a failed query is started again "
                                      "from its checkpoint.")
    add_bootstrap_args(sink)  # --command-config: the query's kafka.* options and the AdminClient's login
    sink.add_argument("--topic", required=True, help="the topic to read (from its earliest offset)")
    sink.add_argument("--output", required=True, metavar="DIR", help="Parquet files, checkpoint and Spark's log")
    sink.add_argument("--rows-out", default=None, metavar="FILE",
                      help="at the end, read the Parquet output back into this JSON file "
                           "({partition: [[offset, value], ...]})")
    sink.add_argument("--trigger-ms", type=int, default=1000, help="micro-batch interval (1000)")
    sink.add_argument("--wait-topic-s", type=float, default=0.0,
                      help="wait up to this long for the topic to exist with a leader for every partition "
                           "(Spark starts meanwhile; default 0: it must exist)")
    sink.add_argument("--restarts-max", type=int, default=50,
                      help="failed queries started again before giving up (50)")
    sink.add_argument("--max-seconds", type=float, default=24 * 3600.0,
                      help="stop by itself after this long (86400)")
    sink.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    _add_spark_log_arg(sink)
    sink.set_defaults(func=one_line_errors(run_sink))


def _add_spark_log_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spark-log", default=None, metavar="FILE",
                        help="where the JVM's log goes (default OUTPUT/spark.log; '-': this terminal)")


@contextlib.contextmanager
def _jvm_stderr_to(path: str | None) -> Iterator[None]:
    """Start Spark's JVM inside this block with its stderr (log4j's console, JVM errors, the
    Python workers it starts) going to ``path``; this process's own stderr is kept. The JVM is a
    child process: it inherits file descriptor 2 at its start."""
    if path is None:
        yield
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    sys.stderr.flush()
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(2)
    os.dup2(log_fd, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)


def _spark_log_path(args: argparse.Namespace, output: str) -> str | None:
    if args.spark_log == "-":
        return None
    return os.path.abspath(args.spark_log or os.path.join(output, "spark.log"))


def _start_spark(app_name: str, master: str, log_path: str | None) -> Any:
    from raftka.spark.session import local_session
    with _jvm_stderr_to(log_path):
        return local_session(app_name, master=master,
                             conf={"spark.ui.showConsoleProgress": "false",
                                   "spark.sql.streaming.stopTimeout": QUERY_STOP_TIMEOUT})


def _stop_spark(spark: Any) -> None:
    """``spark.stop()`` without pyspark's shutdown traceback: SparkContext.stop() stops the JVM
    before the Python accumulator server, whose handler may then read the JVM's closed
    connection and print an EOFError traceback from its thread. Nothing is lost then, so that
    one error is not printed; any other is."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        report = server.handle_error

        def handle_error(request: Any, client_address: Any) -> None:
            if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
                report(request, client_address)
        server.handle_error = handle_error
    spark.stop()


@functools.cache  # one module object per example: its constants and functions stay the same
def _example(name: str) -> Any:
    """Load ``examples/<name>.py`` (``name`` may hold a folder: "spark/worldcup_stats") of the
    source checkout by path: the examples are not part of the installed package, and nothing in
    the product imports them."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[3] / "examples" / f"{name}.py"  # raftka/cli/commands/
    if not path.is_file():
        raise CommandError(f"{path} not found: the demo runs the examples of a source checkout "
                           "(git clone, then pip install -e .)")
    spec = importlib.util.spec_from_file_location(f"raftka_example_{name.replace('/', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ensure_topics(bootstrap: str) -> None:
    from raftka.client import AdminClient, NewTopic
    demo = _example("spark/worldcup_stats")
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        existing = set(admin.list_topics())
        brokers = len(admin.describe_cluster()["brokers"]) or 1
        wanted = [NewTopic(name, parts, min(3, brokers), {"min.insync.replicas": min(2, brokers)})
                  for name, parts in ((demo.EVENTS_TOPIC, EVENTS_PARTITIONS), (demo.STATS_TOPIC, STATS_PARTITIONS))
                  if name not in existing]
        if not wanted:
            return
        for topic in wanted:
            say(f"==> creating topic {topic.name} ({topic.num_partitions} partitions, RF {topic.replication_factor})")
        admin.create_topics(wanted)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            described = admin.describe_topics([t.name for t in wanted])
            if all(d["partitions"] and all(p["leader"] >= 0 for p in d["partitions"]) for d in described):
                return
            time.sleep(0.2)
        raise CommandError("the new topics have no leaders after 15 s")


class LiveFeed(threading.Thread):
    """Produces new matches' events (the quickstart's shape) at a steady rate."""

    def __init__(self, bootstrap: str, seconds: float, per_second: int) -> None:
        super().__init__(name="worldcup-live-feed", daemon=True)
        self.bootstrap, self.seconds, self.per_second = bootstrap, seconds, per_second
        self.sent = 0
        self.error: BaseException | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        import json
        from raftka.client import Producer
        generate = _example("worldcup_demo").generate
        events_topic = _example("spark/worldcup_stats").EVENTS_TOPIC
        run_id = f"{random.randrange(16**4):04x}"
        total = max(2 * FEED_MATCHES, int(self.seconds * self.per_second))
        events = generate(total, FEED_MATCHES, random.randrange(2**31))
        try:
            with Producer(bootstrap_servers=self.bootstrap, linger_ms=20, client_id="worldcup-live") as producer:
                began = time.monotonic()
                for i, event in enumerate(events):
                    if self.stop_event.is_set():
                        break
                    event["match_id"] = f"LIVE-{run_id}-{event['match_id'][3:]}"
                    producer.send(events_topic, json.dumps(event, separators=(",", ":")).encode(),
                                  key=event["match_id"].encode())
                    self.sent = i + 1
                    ahead = began + (i + 1) / self.per_second - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                producer.flush(timeout=60)
        except BaseException as error:  # reported by the command
            self.error = error


def _batches(query: Any) -> int:
    progress = query.lastProgress
    return progress["batchId"] + 1 if progress else 0


def _caught_up(query: Any) -> bool:
    """The last micro-batch read up to the latest offsets it saw (no backlog)."""
    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return False
    source = progress["sources"][0]
    return source.get("endOffset") is not None and source.get("endOffset") == source.get("latestOffset")


def _wait(queries: list[Any], done: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        for q in queries:
            if q.exception() is not None:
                raise CommandError(f"query {q.name} failed: {str(q.exception()).splitlines()[0]}")
        if time.monotonic() > deadline:
            raise CommandError(f"the queries did not get there within {timeout_s:.0f} s")
        time.sleep(0.5)


def run_demo(args: argparse.Namespace) -> int:
    from raftka.spark.session import JavaNotFoundError, require_java
    try:
        require_java()
    except JavaNotFoundError as error:
        raise CommandError(str(error)) from None
    if args.seconds <= 0 or args.events_per_second <= 0:
        raise CommandError("--seconds and --events-per-second must be positive")
    if not args.bootstrap_server and os.path.exists(os.path.join(cluster_dir(args), CLIENT_PROPERTIES)):
        # a secure local cluster: without its login the clients would fail later, less clearly
        raise CommandError(f"the cluster in {cluster_dir(args)} is secure and the demo cannot log in yet "
                           "(`raftka spark sink` can: --command-config)")
    bootstrap = bootstrap_servers(args)
    output = os.path.abspath(args.output or os.path.join(cluster_dir(args), "spark-worldcup"))
    _ensure_topics(bootstrap)
    from raftka.client import Consumer, TopicPartition
    from raftka.spark.sink import stop_between_batches
    demo = _example("spark/worldcup_stats")
    log_path = _spark_log_path(args, output)
    say(f"==> starting Spark ({args.master}); output and checkpoints in {output}"
        + (f"; Spark's log: {log_path}" if log_path else ""))
    spark = _start_spark("raftka-spark-demo", args.master, log_path)
    feed = LiveFeed(bootstrap, args.seconds, args.events_per_second)
    try:
        queries = demo.start(spark, bootstrap, output, window=args.window, watermark=args.watermark)
        say(f"==> streaming {demo.EVENTS_TOPIC} -> Parquet ({output}/stats) and topic {demo.STATS_TOPIC}")
        try:
            began = time.monotonic()
            _wait(queries, lambda: all(_caught_up(q) for q in queries), BACKLOG_MAX_S)
            say(f"    caught up with the events already in {demo.EVENTS_TOPIC} after "
                f"{time.monotonic() - began:.0f} s")
            say(f"==> live feed: {args.events_per_second} events/s for {args.seconds:g} s "
                f"({FEED_MATCHES} new matches)")
            feed.start()
            _wait(queries, lambda: not feed.is_alive(), args.seconds + 60)
            # Caught up twice: the second batch sees the watermark the first one moved.
            seen = {q.name: _batches(q) for q in queries}
            _wait(queries, lambda: all(_caught_up(q) and _batches(q) >= seen[q.name] + 2 for q in queries),
                  DRAIN_MAX_S)
        finally:
            feed.stop_event.set()
            feed.join(60)
            progress = [(q.name, _batches(q)) for q in queries]
            for q in queries:
                stop_between_batches(q)
        if feed.error is not None:
            raise CommandError(f"the live feed failed: {feed.error}")
        result = demo.summary(spark, output)
    finally:
        _stop_spark(spark)
    with Consumer(bootstrap_servers=bootstrap) as probe:
        parts = [TopicPartition(demo.STATS_TOPIC, p) for p in sorted(probe.partitions_for_topic(demo.STATS_TOPIC) or ())]
        stats_records = sum(probe.end_offsets(parts).values()) if parts else 0
    print(f"live feed: {feed.sent:,} events sent")
    for name, batches in progress:
        print(f"query {name}: {batches} micro-batches")
    print(f"Parquet ({output}/stats): {result['windows']} closed windows, {result['rows']:,} match-team rows, "
          f"{result['goals']:,} goals, {result['cards']:,} cards (windows still open are written later)")
    print(f"topic {demo.STATS_TOPIC}: {stats_records:,} stats records in all (update mode, every change)")
    if result["top_teams"]:
        print("top teams by goals (closed windows):")
        for team, goals, cards in result["top_teams"]:
            print(f"  {team:<16} goals {goals:>6,}  cards {cards:>6,}")
    return 0


def _command_config_path(args: argparse.Namespace) -> str | None:
    """The properties file ``command_configs`` reads: --command-config, else the cluster
    directory's client.properties when it exists and no --bootstrap-server is given."""
    path = getattr(args, "command_config", None)
    if path is None and not getattr(args, "bootstrap_server", None):
        local = os.path.join(cluster_dir(args), CLIENT_PROPERTIES)
        path = local if os.path.exists(local) else None
    return path


def sink_options(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, Any]]:
    """The login of ``raftka spark sink``: (the query's ``kafka.*`` options, the AdminClient's
    keywords), both from the same Kafka client properties (``--command-config`` or the cluster
    directory's client.properties). A property's name is the option's name after ``kafka.``, so
    the raw properties go to Spark as they are, checked here as the query will check them on
    its driver: a property it cannot take is a CommandError now, not a failed query after the
    JVM start. Both values may hold the password: neither is ever printed."""
    admin = command_configs(args, "admin")  # reads and checks the file; CommandError naming it
    path = _command_config_path(args)
    if path is None:
        return {}, admin
    from raftka.common.server_config import parse_properties
    from raftka.spark.options import InvalidOptionError, ReadOptions
    with open(path, encoding="utf-8") as file:  # read a moment ago by command_configs
        properties = parse_properties(file.read())
    properties.pop("bootstrap.servers", None)  # --bootstrap-server / --dir say where
    options = {f"kafka.{name}": value for name, value in properties.items()}
    try:
        # The address and the topic are placeholders: only the kafka.* options are checked.
        ReadOptions.parse({**options, "kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"},
                          streaming=True)
    except InvalidOptionError as error:  # its message never holds a password (spark/options.py)
        raise CommandError(f"--command-config {path}: {error}") from None
    return options, admin


def run_sink(args: argparse.Namespace) -> int:
    if args.trigger_ms <= 0 or args.max_seconds <= 0 or args.restarts_max < 0 or args.wait_topic_s < 0:
        raise CommandError("--trigger-ms and --max-seconds must be positive, --restarts-max and --wait-topic-s "
                           "not negative")
    options, admin_configs = sink_options(args)  # before the JVM: a bad file costs no Spark start
    from raftka.spark.session import JavaNotFoundError, require_java
    try:
        require_java()
    except JavaNotFoundError as error:
        raise CommandError(str(error)) from None
    bootstrap = bootstrap_servers(args)
    output = os.path.abspath(args.output)
    os.makedirs(output, exist_ok=True)
    from raftka.spark import sink as parquet_sink

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event, separators=(",", ":")), flush=True)

    stop = threading.Event()
    signalled: list[float] = []  # when the stop signal came: the stop's phases are timed from it

    def on_signal(*_: Any) -> None:
        signalled.append(time.monotonic())
        stop.set()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal)
    timer = threading.Timer(args.max_seconds, stop.set)
    timer.daemon = True
    timer.start()
    spark = _start_spark("raftka-spark-sink", args.master, _spark_log_path(args, output))
    try:
        _wait_for_topic(bootstrap, args.topic, args.wait_topic_s, stop, admin_configs)
        summary = parquet_sink.run(spark, bootstrap, args.topic, output, stop, emit, trigger_ms=args.trigger_ms,
                                   restarts_max=args.restarts_max, options=options)
        since = signalled[0] if signalled else time.monotonic()
        event: dict[str, Any] = {"event": "stopped", **summary,
                                 "query_stop_s": round(time.monotonic() - since, 2)}
        if args.rows_out:
            records = parquet_sink.read_back(spark, output)
            parquet_sink.write_rows(args.rows_out, args.topic, records, summary)
            event.update(rows=sum(len(r) for r in records.values()), rows_out=os.path.abspath(args.rows_out),
                         read_back_s=round(time.monotonic() - since, 2))
        emit(event)
    except RuntimeError as error:  # the query kept failing; the reason is its first line
        raise CommandError(str(error)) from None
    finally:
        timer.cancel()
        _stop_spark(spark)
    return 0


def _wait_for_topic(bootstrap: str, topic: str, timeout_s: float, stop: threading.Event,
                    client_configs: dict[str, Any] | None = None) -> None:
    """Until ``topic`` exists and every partition has a leader (at most ``timeout_s``; 0: one look),
    asking as the AdminClient ``client_configs`` log in. CommandError if it does not."""
    from raftka.client import AdminClient
    from raftka.client.errors import RaftkaError
    deadline = time.monotonic() + timeout_s
    last = "it does not exist"
    configs = {**(client_configs or {}), "bootstrap_servers": bootstrap, "request_timeout_ms": 5000}
    with AdminClient(**configs) as admin:
        while True:
            try:
                described = admin.describe_topics([topic])
                parts = described[0]["partitions"] if described else []
                if parts and all(p["leader"] >= 0 for p in parts):
                    return
                last = "a partition has no leader" if parts else "it does not exist"
            except RaftkaError as error:  # the cluster may be starting: try again until the deadline
                last = describe_error(error)
            if time.monotonic() >= deadline or stop.wait(0.5):
                raise CommandError(f"topic {topic!r} is not ready ({last})"
                                   + (f" after {timeout_s:g} s" if timeout_s else ""))
