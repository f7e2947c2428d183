"""The benchmark tools: `raftka perf produce|consume|e2e|failover`, the bench report, and (under
``pytest -m perf``) the performance regression guard.

The default-suite tests run each tool with small counts against real processes and check what
the tools promise: the counts add up, latency percentiles are ordered, JSON is complete, the
progress bar's last figure is the summary's, bad arguments give one-line errors, and failover
reports zero loss on a real kill -9. The ``perf``
test compares client throughput with a reference measured in the same run (a fixed pure-Python
workload, so a slower or busier machine moves both) and fails on a large drop against the
committed ratios in tests/perf_baseline.json. The many-partitions guard (default suite, ~30 s)
compares acks=all on a cluster holding 500 partitions with a fresh cluster's, alternated in one
run, against its own committed ratio there.
"""
from __future__ import annotations

import json
import os
import statistics
import struct
import time
import zlib
from pathlib import Path

import pytest

from raftka.bench import client as perf_client
from raftka.bench import report
from raftka.cli import main

BASELINE = Path(__file__).with_name("perf_baseline.json")


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["perf", *argv, "--json", "--no-progress"])
    out = capsys.readouterr().out
    return code, json.loads(out[out.index("{"):])


def ordered(lat: dict) -> bool:
    return lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["p99_9"] <= lat["max"]


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """One controller + 3 brokers (RF 3, min ISR 2) for the tool smoke tests; stopped by PID."""
    return module_cluster_factory("perf-tools", controllers=1, brokers=3,
                                  configs={"default.replication.factor": 3, "min.insync.replicas": 2})


# -- pure pieces ---------------------------------------------------------------------------

def test_props_are_typed_and_malformed_ones_are_refused():
    assert perf_client.parse_props(["batch_size=65536", "linger_ms=0.5", "compression_type=lz4",
                                    "client_id=none", "enable_idempotence=false"]) == {
        "batch_size": 65536, "linger_ms": 0.5, "compression_type": "lz4", "client_id": None,
        "enable_idempotence": False}
    # Kafka's names, as kafka-producer-perf-test --producer-props takes them
    assert perf_client.parse_props(["batch.size=65536", "max.in.flight.requests.per.connection=1"]) == {
        "batch_size": 65536, "max_in_flight_requests_per_connection": 1}
    from raftka.common.errors import ConfigError
    with pytest.raises(ConfigError):
        perf_client.parse_props(["batch_size"])


def test_percentiles_pick_the_ranked_samples():
    lat = perf_client.percentiles([float(i) for i in range(1, 1001)])
    assert (lat["p50"], lat["p95"], lat["p99"], lat["p99_9"], lat["max"]) == (501, 951, 991, 1000, 1000)
    assert lat["avg"] == pytest.approx(500.5)
    assert perf_client.percentiles([])["p50"] is None


def test_stall_is_the_longest_gap_between_acknowledgements_around_the_kill():
    times = [0.0, 0.1, 0.2, 1.9, 2.0, 2.05, 3.5, 3.6]
    # a kill at 0.25: the gap 0.2 -> 1.9 spans it; the later 2.05 -> 3.5 gap is inside the window too
    assert perf_client._stall(times, 0.25, 3.0) == pytest.approx(1.7)
    assert perf_client._stall(times, 0.25, 3.55) == pytest.approx(1.7)
    assert perf_client._stall(times, 2.06, 3.55) == pytest.approx(1.45)
    assert perf_client._stall([1.0], 2.0, 5.0) == pytest.approx(3.0)  # no ack after the kill


def test_acks_right_after_a_kill_are_not_recovery_until_they_keep_coming():
    killed = 100.0
    tail = [(99.99, 0, 0), (100.002, 1, 1)]  # answered just after the kill: in flight already
    assert not perf_client.acks_flowing(tail, killed, now=100.01)
    assert not perf_client.acks_flowing(tail, killed, now=101.0)  # and then nothing: still stalled
    flowing = tail + [(102.95, 2, 2), (102.99, 3, 3)]
    assert perf_client.acks_flowing(flowing, killed, now=103.0)
    assert not perf_client.acks_flowing(flowing, killed, now=103.5)  # silent again


def test_recovery_needs_an_ack_of_a_record_sent_after_the_kill():
    killed = 100.0
    # the old leader's answers, processed late by a starved client: recent, but not recovery
    late_tail = [(99.9, 5, 5), (100.35, 6, 6), (100.39, 7, 7)]
    assert perf_client.acks_flowing(late_tail, killed, now=100.4)  # fooled without after_seq
    assert not perf_client.acks_flowing(late_tail, killed, now=100.4, after_seq=8)
    recovered = late_tail + [(101.5, 8, 8), (101.55, 9, 9)]
    assert perf_client.acks_flowing(recovered, killed, now=101.6, after_seq=8)


def test_the_report_never_shows_output_paths():
    assert report.public_command("scripts/bench.sh --runs 1 --json-out /x/y.json --out=/a/b.md") == \
        "scripts/bench.sh --runs 1"


def test_throttle_keeps_the_rate():
    throttle = perf_client.Throttle(2000)
    for i in range(200):
        throttle.wait(i + 1)
    elapsed = time.perf_counter() - throttle.start
    assert 0.095 <= elapsed < 0.5  # 200 at 2000/s = 0.1 s; generous upper bound on a busy box


def test_the_progress_rate_starts_with_the_timed_window_and_ends_on_the_summary_figure(monkeypatch):
    # A fake clock: 10 s of warm-up before begin(), then 2 s of sending. The bar used to time from
    # its creation and showed 1,000/12 s while the summary said 1,000/2 s (issue 24).
    now = [100.0]
    monkeypatch.setattr(perf_client.time, "perf_counter", lambda: now[0])
    bar = perf_client.Progress("produce", 2000, False, counted="sent")
    now[0] += 10.0
    assert bar._line().endswith("0/2,000 sent, warming up")
    bar.begin()
    now[0] += 2.0
    bar.done = 1000
    assert bar._line().endswith("1,000/2,000 sent, 500.0 records/s")
    # the last line is drawn from the summary's own records and seconds
    assert bar._line((2000, 2.5)).endswith("100.0% 2,000/2,000 sent, 800.0 records/s")


def _fake_results(all_rate: float, nats_r3: float) -> dict:
    lat = {"avg": 1, "p50": 1.0, "p95": 2, "p99": 5.0, "p99_9": 6, "max": 7, "samples": 10}
    return {
        "raftka.produce.acks_all": [{"records_per_s": all_rate}, {"records_per_s": all_rate * 1.1}],
        "raftka.produce.acks_1": [{"records_per_s": 350_000}],
        "raftka.consume": [{"records_per_s": 450_000}],
        "raftka.e2e": [{"e2e_latency_ms": lat}],
        "nats.r3.publish": [{"records_per_s": nats_r3}],
        "nats.r3.consume": [{"records_per_s": 40_000}],
        "raftka.failover": [{"stall_s": {"median": 1.2, "max": 1.4, "min": 1.0}, "kills": 10, "lost": 0,
                             "acknowledged": 1000, "duplicates": 0, "failed_sends": 0}],
    }


def test_targets_are_judged_on_medians_and_same_run_ratios():
    rows = {r[0]: r[3] for r in report.targets(_fake_results(210_000, 40_000))}
    assert all(rows.values()), rows
    # 5x JetStream R3 missed even though 200,000 records/s is met
    rows = {r[0]: r for r in report.targets(_fake_results(210_000, 50_000))}
    produce = rows["produce, acks=all, RF 3, 1 producer"]
    assert produce[3] is False and "4.41x" in produce[2]  # median of 210,000 and 231,000
    rows = {r[0]: r[3] for r in report.targets({})}
    assert set(rows.values()) == {None}  # nothing measured is never "met"


def test_the_generated_section_is_replaced_and_the_rest_of_the_file_kept(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## Partition log\n\nhand-written figures\n", encoding="utf-8")
    raw = {"environment": {"records": 1000, "record_size": 100, "command": "scripts/bench.sh", "runs": 1,
                           "duration_s": 1, "date": "today", "cpu": "cpu", "cores": 2, "mem_gb": 1,
                           "kernel": "k", "python": "3.11", "load_start": [1.0], "load_end": [2.0],
                           "loads": {"raftka": [1.0, 1.5]}, "raftka": "0", "nats_server": "n",
                           "nats_py": "x", "redis_server": "r", "redis_py": "y", "hiredis": "z",
                           "e2e_rate": 10000, "e2e_duration": 10},
           "results": _fake_results(100_000, 40_000), "problems": ["one thing failed"]}
    report.write_section(path, report.render(raw))
    first = path.read_text(encoding="utf-8")
    assert "hand-written figures" in first and "**missed**" in first and "one thing failed" in first
    raw["results"] = _fake_results(300_000, 40_000)
    raw["results"]["nats.r3.failover"] = [{"kills": 3, "stall_s": {"median": 5.1, "min": 4.9, "max": 7.0},
                                           "checked": 900, "acknowledged": 9000, "wrong": 0, "unreadable": 1}]
    raw["problems"] = []
    report.write_section(path, report.render(raw))
    second = path.read_text(encoding="utf-8")
    assert second.count(report.BEGIN) == 1 and "one thing failed" not in second
    assert second.startswith("# Benchmarks\n\n## Partition log\n\nhand-written figures\n")
    assert "300,000" in second and "0 wrong and 1 unreadable" in second


def test_the_many_partitions_figures_sit_beside_the_fresh_ones_with_their_ratios():
    lat = lambda p50: {"e2e_latency_ms": {"p50": p50, "p99": 9.0}}  # noqa: E731
    res = {"raftka.produce.acks_all": [{"records_per_s": 100_000}, {"records_per_s": 120_000}],
           "raftka.many.produce.acks_all": [{"records_per_s": 88_000}, {"records_per_s": 99_000}],
           "raftka.e2e": [lat(2.0)], "raftka.many.e2e": [lat(3.0)]}
    lines = "\n".join(report.many_partitions({"many_partitions": 1000, "e2e_rate": 10_000}, res))
    assert "cluster holding 1,000 partitions" in lines
    # medians 110,000 and 93,500: 0.85x; e2e p50 3.00 / 2.00 ms: 1.50x
    assert "| produce, acks=all (records/s) | 110,000 (100,000-120,000) | 93,500 (88,000-99,000) | 0.85x |" in lines
    assert "| 2.00 ms | 3.00 ms | 1.50x |" in lines
    assert report.many_partitions({"many_partitions": 0}, res) == []  # --many-partitions 0: no section


@pytest.mark.parametrize("value, problem", [("-1", "must be >= 0, got -1"), ("lots", "expected a partition count")])
def test_a_bad_many_partitions_count_is_one_line_and_exit_2(capsys, value, problem):
    from raftka.bench.__main__ import parse_args
    assert parse_args(["--many-partitions", "1_000"]).many_partitions == 1000
    with pytest.raises(SystemExit) as exited:
        parse_args(["--many-partitions", value])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert err.startswith("error: argument --many-partitions: ") and problem in err


def _security_raw(results: dict) -> dict:
    env = {"records": 1000, "record_size": 100, "command": "scripts/bench.sh --security-protocol both --out /x/B.md",
           "runs": 2, "duration_s": 1, "date": "today", "cpu": "cpu", "cores": 2, "mem_gb": 1, "kernel": "k",
           "python": "3.11", "openssl": "OpenSSL 3", "raftka": "0", "confluent_kafka": "2", "load_start": [3.5],
           "load_end": [4.0], "loads": {"runs": [3.5, 4.5]}, "e2e_rate": 10000, "e2e_duration": 10,
           "nats_server": "n", "nats_py": "x", "redis_server": "r", "redis_py": "y", "hiredis": "z",
           "security_protocol": "both"}
    return {"environment": env, "results": results, "problems": []}


def _rates(*pairs: tuple[int, float]) -> list[dict]:
    return [{"run": run, "records_per_s": rate} for run, rate in pairs]


def test_security_protocol_defaults_to_plaintext_and_both_alternates_plaintext_first(capsys):
    from raftka.bench.__main__ import parse_args, protocols
    assert parse_args([]).security_protocol == "PLAINTEXT"
    assert protocols(parse_args(["--security-protocol", "both"]).security_protocol) == ["PLAINTEXT", "SASL_SSL"]
    assert protocols(parse_args(["--security-protocol", "SASL_SSL"]).security_protocol) == ["SASL_SSL"]
    with pytest.raises(SystemExit) as exited:
        parse_args(["--security-protocol", "SSL"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "--security-protocol" in err
    # The secure side's figures are held apart from the PLAINTEXT ones, whose names stay as they were.
    assert report.figure_name("PLAINTEXT", "raftka.e2e") == "raftka.e2e"
    assert report.figure_name("SASL_SSL", "raftka.e2e") == "sasl_ssl.raftka.e2e"
    with pytest.raises(ValueError):
        report.figure_name("SSL", "raftka.e2e")


def test_the_security_table_gives_both_medians_their_ratio_and_the_runs_own_ratios():
    def lat(run: int, p50: float) -> dict:
        return {"run": run, "e2e_latency_ms": {"p50": p50, "p99": p50 * 3}, "rate_achieved": 9990.0}
    res = {"raftka.produce.acks_all": _rates((0, 100_000), (1, 120_000), (2, 110_000)),
           "sasl_ssl.raftka.produce.acks_all": _rates((0, 60_000), (1, 90_000), (2, 66_000)),
           "raftka.e2e": [lat(0, 4.0), lat(1, 5.0)],
           # run 0 of the secure side failed: its run 1 pairs with PLAINTEXT's run 1 only
           "sasl_ssl.raftka.e2e": [lat(1, 6.0)]}
    rows = {row[0]: row[1:] for row in report.security_rows(res)}
    # medians 110,000 and 66,000: 0.60x; the runs' own ratios 0.60, 0.75, 0.60: median 0.60, all slower
    assert rows["produce, acks=all (records/s)"] == ("110,000 (100,000-120,000)", "66,000 (60,000-90,000)",
                                                     "0.60x", "0.60x (0.60-0.75)", "3 of 3")
    # e2e p50 medians 4.50 and 6.00 ms: 1.33x; one pair (run 1: 6.0 / 5.0) gives no per-run range;
    # a latency is slower when higher
    assert rows["end-to-end, p50"] == ("4.50 ms (4.00-5.00)", "6.00 ms", "1.33x", "-", "1 of 1")
    assert rows["consume from the start (records/s)"] == ("not measured", "not measured", "-", "-", "-")
    section = report.render_security(_security_raw(res))
    assert section.startswith(report.SECURITY_BEGIN) and section.endswith(report.SECURITY_END)
    assert "### Security: PLAINTEXT and SASL_SSL side by side" in section
    assert "Command: `scripts/bench.sh --security-protocol both` (2 runs" in section  # no output path
    assert "at start 3.5, at end 4.0; at each step: runs 3.5-4.5" in section and "Machine: cpu, 2 cores" in section
    assert "| end-to-end at 10,000 records/s for 10 s, p50 | 4.50 ms (4.00-5.00) | 6.00 ms | 1.33x | - | 1 of 1 |" \
        in section


def test_the_security_section_sits_before_the_peer_section_and_each_run_rewrites_only_its_own(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## #security: hand-written\n\nkept\n", encoding="utf-8")
    peer = _security_raw(_fake_results(100_000, 40_000))
    peer["environment"]["security_protocol"] = "PLAINTEXT"
    report.write_section(path, report.render(peer))
    secure = _security_raw({"raftka.consume": _rates((0, 400_000)), "sasl_ssl.raftka.consume": _rates((0, 300_000))})
    report.write_section(path, report.render_security(secure), report.SECURITY_BEGIN, report.SECURITY_END)
    text = path.read_text(encoding="utf-8")
    assert text.index("kept") < text.index(report.SECURITY_BEGIN) < text.index(report.BEGIN)
    assert "| 400,000 | 300,000 | 0.75x | - | 1 of 1 |" in text
    # A full (PLAINTEXT) run replaces the peer section and leaves the security one as it was.
    peer["results"] = _fake_results(300_000, 40_000)
    report.write_section(path, report.render(peer))
    again = path.read_text(encoding="utf-8")
    assert "315,000 (300,000-330,000)" in again and "| 400,000 | 300,000 | 0.75x |" in again
    # A second security run replaces its section in place.
    secure["results"]["sasl_ssl.raftka.consume"] = _rates((0, 200_000))
    report.write_section(path, report.render_security(secure), report.SECURITY_BEGIN, report.SECURITY_END)
    last = path.read_text(encoding="utf-8")
    assert last.count(report.SECURITY_BEGIN) == 1 and last.count(report.BEGIN) == 1
    assert "| 400,000 | 200,000 | 0.50x |" in last and "0.75x" not in last
    assert last.index(report.SECURITY_END) < last.index(report.BEGIN)


def test_a_runs_json_rewrites_the_section_that_run_measured_without_measuring_again(tmp_path, capsys):
    results = tmp_path / "security.json"
    results.write_text(json.dumps(_security_raw({"raftka.consume": _rates((0, 400_000)),
                                                 "sasl_ssl.raftka.consume": _rates((0, 100_000))})), encoding="utf-8")
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n", encoding="utf-8")
    assert report.main([str(results), "--out", str(path)]) == 0
    text = path.read_text(encoding="utf-8")
    assert "| 400,000 | 100,000 | 0.25x | - | 1 of 1 |" in text and report.BEGIN not in text
    peer = _security_raw(_fake_results(100_000, 40_000))
    peer["environment"]["security_protocol"] = "PLAINTEXT"
    results.write_text(json.dumps(peer), encoding="utf-8")
    assert report.main([str(results)]) == 0  # no --out: printed
    assert capsys.readouterr().out.startswith(report.BEGIN)


def test_with_sasl_ssl_alone_the_peer_section_shows_the_secure_figures_and_says_so():
    raw = _security_raw({"sasl_ssl.raftka.produce.acks_1": _rates((0, 123_456)), "nats.r3.publish": _rates((0, 1))})
    raw["environment"]["security_protocol"] = "SASL_SSL"
    assert report.primary_results(raw)["raftka.produce.acks_1"][0]["records_per_s"] == 123_456
    section = report.render(raw)
    assert "123,456" in section and "over SASL_SSL" in section


def test_a_client_properties_file_logs_in_raftka_and_librdkafka_clients_and_results_hold_no_password(tmp_path,
                                                                                                    capsys):
    from raftka.bench import peers
    from raftka.common.errors import ConfigError
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                    'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                    'username="admin" password="s3cret";\nssl.truststore.location=/ca.pem\n', encoding="utf-8")
    login = perf_client.properties_configs(str(path), "producer")
    assert login == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin",
                     "sasl_plain_password": "s3cret", "ssl_cafile": "/ca.pem"}
    assert "s3cret" not in json.dumps(perf_client.protocol_of(login))
    assert perf_client.protocol_of({}) == {"security_protocol": "PLAINTEXT", "sasl_mechanism": None}
    from raftka.common.server_config import parse_properties
    assert peers.librdkafka_security(parse_properties(path.read_text(encoding="utf-8"))) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
        "sasl.password": "s3cret", "ssl.ca.location": "/ca.pem"}
    with pytest.raises(ConfigError):
        peers.librdkafka_security({"ssl.truststore.type": "JKS"})
    # The file describes the cluster at --bootstrap-server: without one, one line and exit 1.
    assert main(["perf", "produce", "--num-records", "1", "--command-config", str(path), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--command-config" in err[0]


# -- the tools against real processes ------------------------------------------------------

def test_perf_produce_counts_every_record_and_orders_its_latencies(cluster, capsys):
    code, out = run_json(capsys, "produce", "--bootstrap-server", cluster.bootstrap_servers,
                         "--topic", "smoke-produce", "--num-records", "3000", "--record-size", "100",
                         "--acks", "all", "--compression", "lz4")
    assert code == 0
    assert out["records"] == 3000 and out["failed_batches"] == 0 and out["records_per_s"] > 0
    assert out["mb_per_s"] == pytest.approx(out["records_per_s"] * 100 / 1e6)
    assert out["latency_ms"]["samples"] == 3000 and ordered(out["latency_ms"])


def _last_progress_rate(err: str, what: str) -> float:
    lines = [line for line in err.splitlines() if line.startswith(f"{what} [")]
    assert lines, err
    return float(lines[-1].rsplit(", ", 1)[1].split()[0].replace(",", ""))


def _summary_rate(err: str, counted: str) -> float:
    line = next(line for line in err.splitlines() if f"records {counted}, " in line)
    return float(line.split(f"records {counted}, ", 1)[1].split()[0].replace(",", ""))


@pytest.mark.parametrize("producers", [1, 2])
def test_perf_produce_progress_ends_on_the_summary_figure(cluster, capsys, producers):
    # Progress on (stderr is not a terminal here: plain lines); --json moves the summary to stderr.
    code = main(["perf", "produce", "--bootstrap-server", cluster.bootstrap_servers, "--topic",
                 f"smoke-progress-{producers}", "--num-records", "4000", "--record-size", "100",
                 "--producers", str(producers), "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out[captured.out.index("{"):])
    assert code == 0 and out["records"] == 4000
    what = "produce" if producers == 1 else f"produce x{producers}"
    shown = _last_progress_rate(captured.err, what)
    assert shown == pytest.approx(out["records_per_s"], rel=1e-3)
    assert shown == pytest.approx(_summary_rate(captured.err, "sent"), rel=1e-3)


def test_perf_consume_progress_ends_on_the_summary_figure(cluster, capsys):
    run_json(capsys, "produce", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "smoke-progress-c",
             "--num-records", "3000")
    code = main(["perf", "consume", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "smoke-progress-c",
                 "--messages", "3001", "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out[captured.out.index("{"):])
    assert code == 0 and out["records"] == 3001
    shown = _last_progress_rate(captured.err, "consume")
    assert shown == pytest.approx(out["records_per_s"], rel=1e-3)
    assert shown == pytest.approx(_summary_rate(captured.err, "consumed"), rel=1e-3)


def test_perf_produce_with_two_producer_processes_and_acks_1(cluster, capsys):
    code, out = run_json(capsys, "produce", "--bootstrap-server", cluster.bootstrap_servers,
                         "--topic", "smoke-two", "--num-records", "2001", "--acks", "1",
                         "--producers", "2", "--partitions", "2", "--throughput", "4000")
    assert code == 0 and out["records"] == 2001 and out["failed_batches"] == 0
    assert out["records_per_s"] <= 4000 * 1.2  # the throttle holds across processes


def test_perf_consume_reads_what_was_produced(cluster, capsys):
    run_json(capsys, "produce", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "smoke-consume",
             "--num-records", "2000", "--partitions", "2")
    code, out = run_json(capsys, "consume", "--bootstrap-server", cluster.bootstrap_servers,
                         "--topic", "smoke-consume", "--messages", "2001")  # + the warm-up record
    assert code == 0 and out["records"] == 2001 and not out["timed_out"]
    assert out["poll_latency_ms"]["p50"] is not None and ordered(out["poll_latency_ms"])
    # asking for more than there is: a one-line error and exit 1 after the idle timeout
    code = main(["perf", "consume", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "smoke-consume",
                 "--messages", "5000", "--timeout-ms", "1500", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 1 and "only 2,001 of 5,000 records" in captured.err


def test_perf_consume_of_a_missing_topic_is_a_one_line_error(cluster, capsys):
    code = main(["perf", "consume", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "no-such-topic",
                 "--messages", "10", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err


def test_perf_e2e_receives_every_record_with_its_latency(cluster, capsys):
    code, out = run_json(capsys, "e2e", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "smoke-e2e",
                         "--rate", "1000", "--duration", "1.5")
    assert code == 0 and out["sent"] == 1500 and out["received"] == 1500
    assert 0 < out["e2e_latency_ms"]["p50"] and ordered(out["e2e_latency_ms"]) and ordered(out["ack_latency_ms"])
    assert out["rate_achieved"] == pytest.approx(1000, rel=0.25)


def test_perf_produce_sync_waits_for_each_acknowledgement(cluster, capsys):
    code, out = run_json(capsys, "produce", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "smoke-sync",
                         "--num-records", "100", "--sync", "--producer-props", "linger_ms=0")
    assert code == 0 and out["records"] == 100 and out["latency_ms"]["samples"] == 100
    # one at a time: the whole run takes at least the sum of the round trips
    assert out["seconds"] * 1000 >= out["latency_ms"]["avg"] * 100 * 0.99


def test_bad_arguments_are_one_line_errors(capsys):
    assert main(["perf", "produce", "--num-records", "0", "--no-progress"]) == 1
    assert main(["perf", "e2e", "--bootstrap-server", "127.0.0.1:1", "--record-size", "4"]) == 1
    assert main(["perf", "failover", "--brokers", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)


def test_perf_controller_stability_watches_the_quorum_then_times_a_failover(capsys):
    # A smoke of the tool behind BENCHMARKS.md's controller-stability figures: a short window,
    # no spinning processes, one kill of the active controller.
    code = main(["perf", "controller-stability", "--minutes", "0.1", "--burners", "0", "--rate", "500",
                 "--churn-s", "1", "--kills", "1", "--settle-s", "1", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    results = json.loads(out[out.index("{"):])
    assert results["samples"] >= 8  # every 0.5 s over 6 s
    assert results["produced"] > 0 and results["workload_errors"] == 0
    assert results["elections"] == sum(e["event"] == "term" for e in results["events"])
    assert len(results["failover_ms"]["samples"]) == 1 and 0 < results["failover_ms"]["median"] < 30_000
    assert main(["perf", "controller-stability", "--minutes", "0"]) == 1
    assert capsys.readouterr().err.strip().startswith("error: ")


@pytest.mark.slow
def test_perf_failover_kills_the_leader_and_loses_nothing(capsys):
    code, out = run_json(capsys, "failover", "--kills", "1", "--controllers", "1", "--throughput", "1000",
                         "--settle-s", "0.5", "--seed", "7",
                         "--server-config", "broker.session.timeout.ms=2000",
                         "--server-config", "broker.heartbeat.interval.ms=250")
    assert code == 0, out
    assert out["kills"] == 1 and out["lost"] == 0 and out["duplicates"] == 0
    assert out["acknowledged"] > 500 and out["read"] >= out["acknowledged"]
    # the producer really went without acknowledgements for a while: the kill hit the leader
    assert out["stall_s"]["median"] > 0.2, out["stalls_s"]


# -- the regression guard (pytest -m perf) -------------------------------------------------

def reference_rate(seconds: float = 0.5) -> float:
    """Iterations/s of a fixed pure-Python workload shaped like client work (pack a small header,
    checksum, append to a buffer): it moves with the machine's speed and load, not with Raftka."""
    value = b"x" * 100
    pack = struct.Struct(">qiI").pack
    count = 0
    end = time.perf_counter() + seconds
    buf = bytearray()
    while time.perf_counter() < end:
        for i in range(1000):
            buf += pack(i, len(value), zlib.crc32(value)) + value
        buf.clear()
        count += 1000
    return count / seconds


@pytest.mark.perf
@pytest.mark.timeout(600)
def test_client_throughput_holds_against_a_same_run_reference(tmp_path, capsys):
    """Produce (acks=all, acks=1) and consume rates divided by the reference rate measured next
    to them, against the committed ratios; fails on a drop below half. Set
    RAFTKA_PERF_UPDATE_BASELINE=1 to rewrite tests/perf_baseline.json from this run."""
    from raftka.cluster import Cluster
    records = 50_000
    ratios: dict[str, list[float]] = {"produce_acks_all": [], "produce_acks_1": [], "consume": []}
    with Cluster.start(tmp_path / "c", controllers=3, brokers=3,
                       configs={"default.replication.factor": 3, "min.insync.replicas": 2}) as c:
        for run in range(3):
            for key, argv in (("produce_acks_all", ["produce", "--topic", f"g-all-{run}", "--acks", "all",
                                                    "--num-records", str(records)]),
                              ("produce_acks_1", ["produce", "--topic", f"g-one-{run}", "--acks", "1",
                                                  "--num-records", str(records)]),
                              ("consume", ["consume", "--topic", f"g-all-{run}", "--messages", str(records)])):
                before = reference_rate()
                code, out = run_json(capsys, *argv, "--bootstrap-server", c.bootstrap_servers)
                after = reference_rate()
                assert code == 0, out
                ratios[key].append(out["records_per_s"] / ((before + after) / 2))
    measured = {k: statistics.median(v) for k, v in ratios.items()}
    print(f"\nratios to the reference (records/s per reference iteration/s): "
          + ", ".join(f"{k} {v:.4f}" for k, v in measured.items()))
    if os.environ.get("RAFTKA_PERF_UPDATE_BASELINE"):
        baseline = json.loads(BASELINE.read_text())  # the other guards' keys are kept
        baseline.update({"ratios": measured, "date": time.strftime("%Y-%m-%d"),
                         "note": "raftka perf produce/consume rate / reference_rate() in "
                                 "tests/test_perf_tools.py; medians of 3"})
        BASELINE.write_text(json.dumps(baseline, indent=2) + "\n")
        return
    baseline = json.loads(BASELINE.read_text())["ratios"]
    for key, value in measured.items():
        assert value >= baseline[key] * 0.5, (
            f"{key}: ratio {value:.4f} is below half the committed {baseline[key]:.4f} "
            f"(all ratios: {measured})")


# -- the many-partitions guard -------------------------------------------------------------
# Per-partition costs (a fetch naming every partition, a tick visiting each) slow one busy topic
# down when the cluster holds many idle ones. Two clusters side by side, one holding
# MANY_PARTITIONS partitions: acks=all on one fresh topic of each, the runs alternated so both
# see the same stretch of the box's load; the figure is the median of the per-pair ratios.

MANY_PARTITIONS = 500  # ~30 s for the whole test on the shared 2-core box
MANY_PARTITIONS_RECORDS = 30_000
MANY_PARTITIONS_PAIRS = 4
GUARD_CONFIGS = {"default.replication.factor": 3, "min.insync.replicas": 2}


def many_partitions_ratio(root: Path, server_configs: dict | None = None, partitions: int = MANY_PARTITIONS,
                          pairs: int = MANY_PARTITIONS_PAIRS) -> dict:
    """acks=all records/s on one topic of a cluster holding ``partitions`` partitions / the same
    on a fresh cluster, median over ``pairs`` alternated pairs of runs; with the rates."""
    from raftka.bench import partitions as curve
    from raftka.cluster import Cluster
    configs = {**GUARD_CONFIGS, **(server_configs or {})}
    acks_all = perf_client.producer_configs("all", "none", {})
    rates: dict[str, list[float]] = {"fresh": [], "many": []}
    with Cluster.start(root / "fresh", controllers=1, brokers=3, configs=configs) as fresh, \
            Cluster.start(root / "many", controllers=1, brokers=3, configs=configs) as many:
        curve.create_partitions(many.bootstrap_servers, curve.topic_sizes(partitions, 10), 100, 120, False)
        curve.wait_partitions(many.bootstrap_servers, partitions, 120, "full ISR", False, lambda s: s[2],
                              "the guard's 120 s")
        clusters = {"fresh": fresh, "many": many}
        for run in range(pairs):
            # which one goes first alternates, so a load drift within a pair favours neither
            for name in (("fresh", "many") if run % 2 == 0 else ("many", "fresh")):
                bootstrap = clusters[name].bootstrap_servers
                perf_client.ensure_topic(bootstrap, f"guard-{run}", 1, 3, 2)
                out = perf_client.produce(bootstrap, f"guard-{run}", MANY_PARTITIONS_RECORDS, 100, acks_all)
                assert out["failed_batches"] == 0, out
                rates[name].append(out["records_per_s"])
    ratios = [m / f for m, f in zip(rates["many"], rates["fresh"])]
    return {"ratio": statistics.median(ratios), "ratios": ratios, "rates": rates}


@pytest.mark.timeout(180)
def test_one_topic_of_a_cluster_holding_many_partitions_keeps_its_acks_all_rate(tmp_path):
    """Fails when acks=all on a cluster holding MANY_PARTITIONS partitions falls below half the
    committed ratio to a fresh cluster's (tests/perf_baseline.json, "many_partitions"). With the
    followers' fetch sessions turned off (max.incremental.fetch.session.cache.slots=0, each fetch
    naming every partition again) it measured 0.30, against 0.94 with them, in the same minutes.
    RAFTKA_PERF_UPDATE_BASELINE=1 writes this run's ratio there."""
    measured = many_partitions_ratio(tmp_path)
    print(f"\n{MANY_PARTITIONS} partitions / fresh, acks=all: ratio {measured['ratio']:.3f} "
          f"(pairs {[round(r, 3) for r in measured['ratios']]}; records/s {measured['rates']})")
    baseline = json.loads(BASELINE.read_text())
    if os.environ.get("RAFTKA_PERF_UPDATE_BASELINE"):
        baseline["many_partitions"] = {
            "acks_all_ratio": measured["ratio"], "partitions": MANY_PARTITIONS, "date": time.strftime("%Y-%m-%d"),
            "note": "acks=all records/s on one topic of a 1+3 cluster holding this many partitions / the same "
                    "on a fresh 1+3 cluster, alternated in one run; median of the pairs"}
        BASELINE.write_text(json.dumps(baseline, indent=2) + "\n")
        return
    committed = baseline["many_partitions"]["acks_all_ratio"]
    assert measured["ratio"] >= committed * 0.5, (
        f"acks=all with {MANY_PARTITIONS} partitions in the cluster is {measured['ratio']:.3f}x a fresh cluster's, "
        f"below half the committed {committed:.3f}x: a per-partition cost is back (pairs {measured['ratios']})")
