"""/metrics as Prometheus reads it, on every node of a default cluster, and JSON logs (#parity).

How: a strict reader of the text exposition format (0.0.4) parses every line each broker and
controller serves: HELP and TYPE once per family and before its samples, a family's lines
together, well-formed names and labels, counters ending in _total, cumulative histogram buckets,
no series twice. The reader is itself checked against bad text first. Then, on a real 3+3
cluster: the process metrics are there and plausible; per-topic bytes count exactly the bytes a
Produce appended and a consumer's Fetch returned, and nothing of what followers replicate;
killing the active controller moves the survivors' leader-change counters; stopping a broker
moves the under-replicated, under-min-ISR and offline counts on brokers and controllers. Last, a
controller and a broker started with ``--log-format json`` write nothing but JSON objects.
"""
from __future__ import annotations

import json
import logging
import math
import re
import sys
import time
import urllib.request

import pytest

from raftka.cluster import Cluster, Process, project_env, python_argv, stop_together, wait_until, write_properties
from raftka.common.metrics import Exposition, MetricsFormatError, add_process_metrics
from test_broker import FAST, batch, create_topic, fetch, http_get, partition_metadata, produce

# -- a strict reader of the text format -------------------------------------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(rf"({NAME})(?:\{{(.*)\}})? (\S+)\Z")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
KINDS = {"counter", "gauge", "histogram", "summary", "untyped"}
UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def parse_labels(text: str) -> tuple[tuple[str, str], ...]:
    labels, at = [], 0
    while at < len(text):
        found = LABEL.match(text, at)
        assert found, f"bad label at {text[at:]!r}"
        labels.append((found.group(1), re.sub(r"\\(.)", lambda m: UNESCAPE[m.group(1)], found.group(2))))
        at = found.end()
        if at < len(text):
            assert text[at] == ",", f"expected ',' in {text!r}"
            at += 1
            assert at < len(text), f"trailing comma in {text!r}"
    names = [name for name, _ in labels]
    assert len(names) == len(set(names)), f"a label twice in {text!r}"
    return tuple(labels)


def parse_exposition(text: str) -> dict[str, dict]:
    """{family: {"kind", "help", "samples": [(name, {labels}, value)]}}; AssertionError on the
    first line Prometheus would reject or that breaks the rules above."""
    assert text.endswith("\n"), "the exposition ends with a newline"
    families: dict[str, dict] = {}
    current: str | None = None
    series: set = set()
    for number, line in enumerate(text[:-1].split("\n"), 1):
        where = f"line {number}: {line!r}"
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, word, name, *rest = line.split(" ", 3)
            assert re.fullmatch(NAME, name), where
            if name != current:
                assert name not in families, f"family {name} comes back after another: {where}"
                families[name] = {"kind": None, "help": None, "samples": []}
                current = name
            family = families[name]
            assert not family["samples"], f"{word} after samples: {where}"
            key = "help" if word == "HELP" else "kind"
            assert family[key] is None, f"{word} twice: {where}"
            family[key] = rest[0] if rest else ""
            if word == "TYPE":
                assert family["kind"] in KINDS, where
            continue
        assert not line.startswith("#"), f"a comment that is neither HELP nor TYPE: {where}"
        found = SAMPLE.match(line)
        assert found, f"not a sample: {where}"
        name, labels_text, value = found.groups()
        assert current is not None, f"a sample before any family: {where}"
        family = families[current]
        assert family["help"] and family["kind"], f"{current} lacks HELP or TYPE before {where}"
        allowed = {current + suffix for suffix in SUFFIXES.get(family["kind"], ())} or {current}
        assert name in allowed, f"{name} is not a sample of {current} ({family['kind']}): {where}"
        labels = parse_labels(labels_text or "")
        assert (name, labels) not in series, f"a series twice: {where}"
        series.add((name, labels))
        number_value = float(value)  # +Inf, -Inf and NaN included, as Go parses them
        family["samples"].append((name, dict(labels), number_value))
    for name, family in families.items():
        assert family["help"] and family["kind"], f"{name} lacks HELP or TYPE"
        if family["kind"] == "counter":
            assert name.endswith("_total"), f"counter {name} does not end in _total"
            assert all(v >= 0 for _, _, v in family["samples"]), name
        if family["kind"] == "histogram":
            check_histogram(name, family["samples"])
    return families


def check_histogram(name: str, samples: list) -> None:
    by_series: dict[tuple, dict] = {}
    for sample, labels, value in samples:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        entry = by_series.setdefault(key, {"buckets": [], "count": None})
        if sample.endswith("_bucket"):
            entry["buckets"].append((float(labels["le"]), value))
        elif sample.endswith("_count"):
            entry["count"] = value
    for key, entry in by_series.items():
        bounds = [b for b, _ in entry["buckets"]]
        counts = [c for _, c in entry["buckets"]]
        assert bounds == sorted(bounds) and bounds[-1] == math.inf, f"{name}{key}: buckets {bounds}"
        assert counts == sorted(counts), f"{name}{key}: buckets not cumulative {counts}"
        assert counts[-1] == entry["count"], f"{name}{key}: +Inf bucket != _count"


def value(families: dict, name: str, **labels: str) -> float | None:
    """The one sample of family ``name`` with these labels (among others), or None."""
    family = families.get(name)
    found = [v for _, got, v in (family["samples"] if family else ())
             if all(got.get(k) == str(want) for k, want in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


# -- the reader and the writer, without processes ---------------------------------------------

GOOD = ('# HELP a_total A counter.\n# TYPE a_total counter\na_total{node="1",t="x\\"y\\\\z\\n"} 3\n'
        '# HELP h A histogram.\n# TYPE h histogram\nh_bucket{le="1.0"} 1\nh_bucket{le="+Inf"} 2\n'
        'h_sum 1.5\nh_count 2\n')


@pytest.mark.parametrize("bad, why", [
    (GOOD.replace("# HELP a_total A counter.\n", ""), "lacks HELP"),
    (GOOD.replace("# TYPE h histogram\n", ""), "lacks HELP or TYPE"),
    (GOOD.replace("a_total", "a"), "_total"),
    (GOOD.replace('t="x', 't=x'), "bad label"),
    (GOOD.replace('node="1"', '1node="1"'), "bad label"),
    (GOOD + "a_total 4\n", "comes back|is not a sample"),
    (GOOD.replace('h_bucket{le="+Inf"} 2', 'h_bucket{le="+Inf"} 0'), "cumulative"),
    (GOOD.replace("h_count 2", "h_count 3"), "_count"),
    (GOOD + GOOD.split("\n", 3)[2] + "\n", "comes back|is not a sample|twice"),
    (GOOD.rstrip("\n"), "ends with a newline"),
])
def test_the_reader_refuses_text_prometheus_would_not_take(bad, why):
    assert parse_exposition(GOOD)["a_total"]["samples"] == [("a_total", {"node": "1", "t": 'x"y\\z\n'}, 3.0)]
    with pytest.raises(AssertionError, match=why):
        parse_exposition(bad)


def test_the_shared_writer_escapes_labels_and_refuses_ill_formed_families():
    out = Exposition({"node": 3})
    out.counter("raftka_x_total", "Help with a \\ and a\nnewline.", 2, topic='we"ird\\na\nme')
    out.family("raftka_h_seconds", "histogram", "Latency.").histogram([0.5, 1.0], [1, 0, 2], 7.25, 3, api="Produce")
    add_process_metrics(out)
    families = parse_exposition(out.render())
    assert value(families, "raftka_x_total", node=3, topic='we"ird\\na\nme') == 2
    assert families["raftka_x_total"]["help"] == "Help with a \\\\ and a\\nnewline."
    assert value(families, "raftka_h_seconds", le="+Inf", api="Produce") == 3
    assert families["process_open_fds"]["samples"][0][1] == {}  # process_* without the node label
    for bad in (lambda: out.counter("raftka_requests", "No _total.", 1),
                lambda: out.gauge("raftka_x_total", "Declared twice.", 1),
                lambda: out.gauge("raftka-dash", "Bad name.", 1),
                lambda: out.gauge("raftka_g", "", 1),
                lambda: out.gauge("raftka_g2", "Bad label.", 1, **{"0x": "y"}),
                lambda: out.gauge("raftka_g3", "Repeats node.", 1, node=4),
                lambda: out.family("raftka_g4", "gauge", "No buckets.").sample(1, "_bucket")):
        with pytest.raises(MetricsFormatError):
            bad()


def test_a_json_log_line_is_one_object_with_the_exception_text():
    from raftka.cli.commands.server import JsonFormatter
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("raftka.broker.server", logging.ERROR, __file__, 1, "two\nlines %s", ("x",),
                                   sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["level"] == "ERROR" and parsed["logger"] == "raftka.broker.server"
    assert parsed["message"] == "two\nlines x"
    assert "ValueError: boom" in parsed["exception"] and parsed["ts"].endswith("Z")


# -- a default cluster ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """3 controllers + 3 brokers as `raftka cluster up` makes them (controllers with an HTTP
    port), quick fencing and ISR changes; stopped by PID at the end of the module."""
    return module_cluster_factory("metrics", controllers=3, brokers=3, configs=FAST)


def scrape(cluster: Cluster, node_id: int) -> dict[str, dict]:
    status, text = http_get(cluster.http_address(node_id), "/metrics")
    assert status == 200
    return parse_exposition(text)


def total(cluster: Cluster, nodes, name: str, **labels: str) -> float:
    return sum(value(scrape(cluster, n), name, **labels) or 0 for n in nodes if cluster.alive(n))


BROKER_FAMILIES = {"raftka_broker_offline_partitions", "raftka_broker_under_min_isr_partitions",
                   "raftka_broker_at_min_isr_partitions", "raftka_broker_under_replicated_partitions",
                   "raftka_broker_topic_bytes_in_total", "raftka_broker_topic_bytes_out_total",
                   "raftka_broker_request_latency_seconds", "raftka_partition_high_watermark"}
CONTROLLER_FAMILIES = {"raftka_controller_active", "raftka_controller_leader_changes_total",
                       "raftka_controller_offline_partitions", "raftka_controller_brokers",
                       "raftka_controller_metadata_offset", "raftka_controller_partitions"}
PROCESS_FAMILIES = {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                    "process_max_fds", "process_start_time_seconds"}


def test_every_node_of_a_default_cluster_serves_well_formed_metrics_with_process_figures(cluster):
    state = json.loads((cluster.root / "cluster.json").read_text())
    for node_id in cluster.controller_ids:  # cluster.json lists each controller's HTTP port
        assert cluster.nodes[node_id].http_port is not None
        assert state["nodes"][str(node_id)]["http_port"] == cluster.nodes[node_id].http_port
    create_topic(cluster, "scraped", partitions=2, rf=3)
    for node_id in cluster.nodes:
        with urllib.request.urlopen(f"http://{cluster.http_address(node_id)}/metrics", timeout=5) as answer:
            assert answer.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            families = parse_exposition(answer.read().decode())
        wanted = BROKER_FAMILIES if node_id in cluster.broker_ids else CONTROLLER_FAMILIES
        assert wanted | PROCESS_FAMILIES <= set(families), (node_id, wanted - set(families))
        assert all(labels.get("node") == str(node_id) for name, f in families.items()
                   if not name.startswith("process_") for _, labels, _ in f["samples"])
        pid = cluster.process(node_id).pid
        with open(f"/proc/{pid}/stat") as stat:
            assert stat.read().startswith(f"{pid} ")
        assert 0 < value(families, "process_open_fds") < value(families, "process_max_fds")
        assert value(families, "process_resident_memory_bytes") > 10 * 1024 * 1024  # a Python server
        assert value(families, "process_cpu_seconds_total") > 0
        assert time.time() - 3600 < value(families, "process_start_time_seconds") <= time.time()
    for controller in cluster.controller_ids:  # the topic as every controller's image has it
        wait_until(lambda: value(scrape(cluster, controller), "raftka_controller_partitions") >= 2, 15,
                   what=f"controller {controller} sees the topic")
    assert [value(scrape(cluster, c), "raftka_controller_active") for c in cluster.controller_ids].count(1) == 1
    for node_id in cluster.nodes:  # without --log-format the logs stay plain text
        lines = cluster.process(node_id).lines
        assert any(re.match(r"\d{4}-\d\d-\d\d \S+ INFO raftka\.", line) for line in lines), lines[:5]
        assert not any(line.startswith("{") for line in lines)


def test_per_topic_bytes_count_produce_and_consumer_fetch_but_not_replication(cluster):
    create_topic(cluster, "bytes-a", rf=3)
    create_topic(cluster, "bytes-b", rf=3)
    leader = partition_metadata(cluster.broker_address(cluster.broker_ids[0]), "bytes-a")["leader_id"]
    address = cluster.broker_address(leader)
    assert value(scrape(cluster, leader), "raftka_broker_topic_bytes_in_total", topic="bytes-a") is None
    records = batch([b"x" * 1000, b"y" * 500])
    assert produce(address, "bytes-a", records)["error_code"] == 0  # acks=all: every follower has it
    families = scrape(cluster, leader)
    assert value(families, "raftka_broker_topic_bytes_in_total", topic="bytes-a") == len(records)
    assert value(families, "raftka_broker_topic_bytes_in_total", topic="bytes-b") is None
    # Two followers fetched the batch from the leader: replication bytes, not the topic's bytes out.
    assert value(families, "raftka_broker_replication_bytes_out_total") >= 2 * len(records)
    assert total(cluster, cluster.broker_ids, "raftka_broker_topic_bytes_out_total", topic="bytes-a") == 0
    out_before = value(families, "raftka_broker_bytes_out_total")
    answer = fetch(address, "bytes-a", 0)
    assert len(answer["records"]) == len(records)
    families = scrape(cluster, leader)
    assert value(families, "raftka_broker_topic_bytes_out_total", topic="bytes-a") == len(records)
    assert value(families, "raftka_broker_bytes_out_total") == out_before + len(records)
    assert produce(address, "bytes-a", records)["error_code"] == 0
    assert value(scrape(cluster, leader), "raftka_broker_topic_bytes_in_total", topic="bytes-a") == 2 * len(records)


def test_killing_the_active_controller_counts_a_leader_change_on_the_survivors(cluster):
    old = cluster.wait_for_leader(timeout_s=30)
    survivors = [c for c in cluster.controller_ids if c != old]
    before = {c: value(scrape(cluster, c), "raftka_controller_leader_changes_total") for c in survivors}
    assert all(seen >= 1 for seen in before.values()), before  # each has seen the first leader
    cluster.kill(old)
    try:
        new = cluster.wait_for_leader(timeout_s=30, among=survivors)
        for c in survivors:
            wait_until(lambda: value(scrape(cluster, c), "raftka_controller_leader_changes_total") > before[c], 15,
                       what=f"controller {c} counts the new leader")
        wait_until(lambda: value(scrape(cluster, new), "raftka_controller_active") == 1, 15,
                   what="the new active controller says so")
        assert all(value(scrape(cluster, c), "raftka_controller_leader_id") == new for c in survivors)
    finally:
        cluster.restart(old)
    assert value(scrape(cluster, old), "raftka_controller_active") == 0


def test_stopping_a_broker_moves_the_under_replicated_under_min_isr_and_offline_counts(cluster):
    # One replica: offline once its broker is gone (and not under min ISR before: min ISR 1).
    create_topic(cluster, "solo", rf=1, configs={"min.insync.replicas": "1"})
    create_topic(cluster, "pairs", partitions=3, rf=2, configs={"min.insync.replicas": "2"})
    create_topic(cluster, "trio", partitions=3, rf=3)
    victim = partition_metadata(cluster.broker_address(cluster.broker_ids[0]), "solo")["leader_id"]
    survivors = [b for b in cluster.broker_ids if b != victim]
    brokers, controllers = cluster.broker_ids, cluster.controller_ids
    wait_until(lambda: total(cluster, brokers, "raftka_broker_under_replicated_partitions") == 0, 20,
               what="every ISR full")
    assert total(cluster, brokers, "raftka_broker_under_min_isr_partitions") == 0
    assert all(value(scrape(cluster, b), "raftka_broker_offline_partitions") == 0 for b in brokers)
    assert all(value(scrape(cluster, c), "raftka_controller_offline_partitions") == 0 for c in controllers)
    cluster.kill(victim)
    try:
        # trio's three partitions (and the other rf=3 topics) keep two of three replicas; every
        # pairs partition that had the victim keeps one, under min.insync.replicas=2 (two of
        # three partitions hold any given broker); solo has no replica left.
        wait_until(lambda: total(cluster, survivors, "raftka_broker_under_replicated_partitions") >= 3 + 2, 30,
                   what="under-replicated partitions counted")
        wait_until(lambda: total(cluster, survivors, "raftka_broker_under_min_isr_partitions") >= 2, 20,
                   what="under-min-ISR partitions counted")
        assert total(cluster, survivors, "raftka_broker_at_min_isr_partitions") >= 3
        for b in survivors:  # every broker's image says the same
            wait_until(lambda: value(scrape(cluster, b), "raftka_broker_offline_partitions") == 1, 20,
                       what=f"broker {b} counts solo offline")
        for c in controllers:
            wait_until(lambda: value(scrape(cluster, c), "raftka_controller_offline_partitions") == 1, 20,
                       what=f"controller {c} counts solo offline")
            assert value(scrape(cluster, c), "raftka_controller_brokers", state="fenced") == 1
    finally:
        cluster.restart(victim)
    for c in controllers:
        wait_until(lambda: value(scrape(cluster, c), "raftka_controller_offline_partitions") == 0, 30,
                   what=f"controller {c} sees solo back")


# -- JSON logs --------------------------------------------------------------------------------

STATUS_LINE = re.compile(r"raftka (controller|broker) \d+ (ready|stopping)\b")


def test_a_controller_and_a_broker_started_with_log_format_json_write_one_object_per_line(tmp_path):
    layout = Cluster(tmp_path / "json", controllers=1, brokers=1, configs=FAST | {"default.replication.factor": 1,
                                                                                 "min.insync.replicas": 1})
    processes: list[Process] = []
    try:
        for node_id in [*layout.controller_ids, *layout.broker_ids]:
            spec = layout.nodes[node_id]
            layout.write_secret()
            write_properties(spec.config_path, layout.config_values(node_id))
            layout.format_storage(node_id)
            process = Process(spec.name, python_argv("-m", "raftka", "server", "--config", str(spec.config_path),
                                                     "--log-format", "json"), env=project_env())
            processes.append(process)
            layout.processes[node_id] = process  # what the helpers ask (alive, addresses)
            process.wait_for_line(lambda l: STATUS_LINE.match(l) is not None and " ready " in l, 60)
        create_topic(layout, "logged", rf=1)  # the broker logs becoming the partition's leader
    finally:
        stop_together(processes)
    loggers = set()
    for process in processes:
        assert process.returncode == 0, process.output()
        lines = process.lines
        assert any(STATUS_LINE.match(line) for line in lines)  # stdout's ready line, for the cluster kit
        for line in lines:
            if STATUS_LINE.match(line):
                continue
            parsed = json.loads(line)  # anything else on stdout or stderr is a log line, as JSON
            assert isinstance(parsed, dict) and {"ts", "level", "logger", "message"} <= set(parsed), line
            assert parsed["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), line
            loggers.add(parsed["logger"])
    assert any(name.startswith("raftka.broker") for name in loggers), loggers
    assert any(name.startswith("raftka.raft_meta") for name in loggers), loggers
