"""One chaos run, end to end (`raftka chaos run`), and the re-check of a saved one (`chaos check`).

1. Start the proxy server and a ProxiedCluster (3 controllers, the scenario's brokers: 3 but
   for ``reassign``) under ``OUT/cluster``.
2. Create the topic, start producers and consumers (chaos/workload.py).
3. After a warm-up, the seeded schedule: a fault from the scenario's nemesis for a random
   ``fault_s``, heal, a quiet spell of ``quiet_s``, again, until the recovery period.
   A scenario's ``background`` nemesis (the Reassigner) runs from the warm-up to the recovery
   period, alongside.
4. Heal everything (network reset, SIGCONT, restart the dead), let the workload run through the
   recovery period, stop it, wait for full ISRs (with a Reassigner: wait for every reassignment
   to finish and record the replicas), read every partition from the log start.
5. Check the history; write ``history.jsonl``, ``results.json``, ``timeline.png``.

With Spark (``spark=True`` or a scenario with ``spark``): once the topic exists, a Spark
streaming query to Parquet starts in its own process (chaos/spark_sink.py) through the client
proxies, with the workload; its micro-batches go to the history as they complete.
After the final read the runner waits until Spark's last micro-batch reached the final high
watermarks, stops it, and appends what its Parquet output holds as one ``sink`` op, which the
checker compares with the final log. The fault schedule (and ``duration_s``) starts once Spark
completed its first micro-batch with rows.

With ``secure=True`` (``--secure``, or a scenario with ``secure``) the cluster is made as
`raftka cluster up --secure` makes one (raftka/cluster/secure.py: SASL_SSL on every listener,
ACLs, the admin super user) and every client of the harness logs in as admin; the login lives in
the cluster's own files (OUT/cluster/client.properties, mode 600), never in ``history.jsonl`` or
``results.json``. The Spark sink, too, logs in from that file (``--command-config``).

Everything random comes from ``seed`` (nemesis choices, timings, the proxies' jitter and
toxicity, the producers' phase), so a failing run can be repeated; the seed is printed with
every verdict. (The cluster's own timing is not seeded: a repeated run takes the same faults at
the same moments, not the same interleaving.)
"""
from __future__ import annotations

import json
import random
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from raftka.chaos import report
from raftka.chaos.checker import check
from raftka.chaos.cluster import Network, ProxiedCluster, ProxyService, wait_healthy
from raftka.chaos.history import HistoryWriter, read_history
from raftka.chaos.nemesis import Context, Fault, Reassigner, by_name, heal_everything
from raftka.chaos.scenarios import Scenario
from raftka.chaos.spark_sink import SinkError, SparkSink
from raftka.chaos.workload import Workload

PROGRESS_EVERY_S = 5.0
HEALTHY_TIMEOUT_S = 90.0
FINAL_READ_TIMEOUT_S = 120.0
SINK_START_TIMEOUT_S = 240.0  # JVM start to the first micro-batch with rows: 30-70 s at load ~12
SINK_CATCH_UP_TIMEOUT_S = 120.0  # after the final read, for Spark's last micro-batch
SINK_STOP_TIMEOUT_S = 180.0  # SIGTERM -> query stopped (stopTimeout 60 s), output read back and written
SINK_LIFETIME_EXTRA_S = 900.0  # the sink stops by itself this long after the run should have ended
# After the faults: reassignments still under way finish once their new replicas caught up
# (seconds on an idle cluster; a restarted broker first has to rejoin).
REASSIGN_SETTLE_TIMEOUT_S = 60.0
REASSIGN_EVENTS_SHOWN = 12
REPLICAS_STABLE_READS = 3  # the same replicas this many times in a row: every broker's metadata agrees


def schedule_bounds(duration_s: float) -> tuple[float, float]:
    """(warm-up, recovery) seconds for a run of ``duration_s``."""
    warmup = min(5.0, max(2.0, duration_s * 0.12))
    recovery = min(10.0, max(5.0, duration_s * 0.2))
    return warmup, recovery


class Progress:
    """Prints one line every PROGRESS_EVERY_S: elapsed, acks and their rate, unknowns, reads, the
    current fault."""

    def __init__(self, workload: Workload, history: HistoryWriter, say: Callable[[str], None]) -> None:
        self.workload = workload
        self.history = history
        self.say = say
        self.fault = "-"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        last = 0
        while not self._stop.wait(PROGRESS_EVERY_S):
            c = self.workload.counters
            rate = (c.acked - last) / PROGRESS_EVERY_S
            last = c.acked
            self.say(f"[{self.history.now():6.1f}s] acked {c.acked} ({rate:.0f}/s) info {c.unknown} fail {c.failed} "
                     f"read {c.read} | fault: {self.fault}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(PROGRESS_EVERY_S + 1)


def run(scenario: Scenario, *, duration_s: float, seed: int, out: str | Path,
        toxiproxy_server: bool = False, spark: bool | None = None, secure: bool | None = None,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one scenario; returns the results (also written to OUT/results.json). ``spark``: run
    a Spark streaming query during the faults; ``secure``: a SASL_SSL cluster with ACLs (both
    default to the scenario's choice)."""
    use_spark = scenario.spark if spark is None else spark
    use_secure = scenario.secure if secure is None else secure
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    config = scenario.workload()
    warmup_s, recovery_s = schedule_bounds(duration_s)
    started_wall = time.time()
    results: dict[str, Any] = {"scenario": scenario.name, "seed": seed, "duration_s": duration_s,
                               "expect_valid": scenario.expect_valid, "workload": config.to_json(),
                               "cluster_configs": scenario.configs(), "spark": use_spark, "secure": use_secure,
                               "problems": []}
    history = HistoryWriter(out / "history.jsonl")
    proxies = cluster = workload = admin = progress = sink = reassigner = None
    error: BaseException | None = None
    try:
        say(f"chaos run: scenario {scenario.name}, {duration_s:.0f} s, seed {seed}, out {out}"
            + (", secure (SASL_SSL, ACLs)" if use_secure else ""))
        proxies = ProxyService(out / "cluster", seed=seed, toxiproxy_server=toxiproxy_server)
        cluster = ProxiedCluster.start(out / "cluster", proxies, brokers=scenario.brokers, configs=scenario.configs(),
                                       secure=use_secure)
        network = Network(cluster)
        results["proxy_server"] = proxies.kind
        say(f"cluster up: controllers {cluster.controller_ids}, brokers {cluster.broker_ids}, "
            f"{len(cluster.links)} proxied links ({proxies.kind}), client listener {cluster.client_listener}")
        if use_spark:  # its JVM starts while the topic is made; it waits for the topic
            login = cluster.security.client_properties_path if cluster.security is not None else None
            sink = start_sink(out / "spark", cluster.bootstrap_servers, config.topic, duration_s, history, say,
                              command_config=login)
        history.append("harness", "ok", "meta", topic=config.topic, partitions=config.partitions, seed=seed,
                       scenario=scenario.name, duration_s=duration_s, config=config.to_json(), spark=use_spark,
                       secure=use_secure)
        from raftka.client import AdminClient
        admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=5000,
                            **cluster.client_configs)
        workload = Workload(cluster.bootstrap_servers, history, config, seed=rng.randrange(2**31),
                            client_configs=cluster.client_configs)
        workload.setup()
        run_start = history.now()
        workload.start()
        progress = Progress(workload, history, say)
        progress.start()
        if sink is not None:
            sink = wait_sink_reading(sink, history, results, say)
            run_start = history.now()
        ctx = Context(cluster, network, admin, rng, config.topic, say)
        nemesis = by_name(scenario.nemesis) if scenario.nemesis else None
        deadline = run_start + duration_s
        faults_end = deadline - recovery_s
        time.sleep(warmup_s)
        if scenario.background == "reassign":
            reassigner = Reassigner()
            reassigner.start(ctx, history, config.replication_factor, seed=rng.randrange(2**31))
        elif scenario.background is not None:
            raise KeyError(f"unknown background nemesis {scenario.background!r}")
        while nemesis is not None:
            chosen = nemesis.choose(rng)
            name = chosen.name if chosen is nemesis else f"{nemesis.name}:{chosen.name}"
            fault_s = rng.uniform(*scenario.fault_s)
            if history.now() + chosen.inject_s + max(fault_s, 1.0) > faults_end:
                break
            history.append("nemesis", "invoke", "fault", name=name)
            progress.fault = f"{name} (injecting)"
            try:
                fault: Fault | None = chosen.inject(ctx)
            except Exception as failure:  # the fault could not be made; the run goes on
                history.append("nemesis", "info", "fault", name=name, error=repr(failure)[:300])
                say(f"  nemesis {name} failed to inject: {failure!r}")
                fault = None
            if fault is not None:
                history.append("nemesis", "ok", "fault", name=name, detail=fault.detail,
                               healable=fault.heal is not None)
                progress.fault = f"{name} {fault.detail}"
                say(f"  fault {name} {json.dumps(fault.detail)}")
                if fault.heal is not None:
                    time.sleep(max(0.0, min(fault_s, faults_end - history.now())))
                    history.append("nemesis", "invoke", "heal", name=name)
                    try:
                        fault.heal()
                        history.append("nemesis", "ok", "heal", name=name)
                    except Exception as failure:
                        history.append("nemesis", "info", "heal", name=name, error=repr(failure)[:300])
                        say(f"  heal of {name} failed: {failure!r}")
                    say(f"  healed {name}")
            progress.fault = "-"
            quiet_until = history.now() + rng.uniform(*scenario.quiet_s)
            if fault is not None:
                watch_recovery(ctx, history, name, config, min(quiet_until, faults_end), say)
            time.sleep(max(0.0, min(quiet_until, faults_end) - history.now()))
        if reassigner is not None:  # it moves partitions until the recovery period, faults or not
            time.sleep(max(0.0, faults_end - history.now()))
            reassigner.stop()
            say(f"  reassigner stopped: {reassigner.counts}")
        done = heal_everything(ctx)
        if done:
            say(f"  final heal: {', '.join(done)}")
        time.sleep(max(0.0, deadline - history.now()))
        progress.stop()
        say(f"[{history.now():6.1f}s] stopping the workload; waiting for outstanding sends")
        workload.stop(config.delivery_timeout_ms / 1000)
        try:
            wait_healthy(admin, config.topic, config.replication_factor, HEALTHY_TIMEOUT_S)
        except TimeoutError as failure:
            results["problems"].append(f"cluster not fully healed before the final read: {failure}")
            say(f"  warning: {failure}")
        if reassigner is not None:
            results["reassignments"] = settle_reassignments(admin, config.topic, config.replication_factor, history,
                                                            REASSIGN_SETTLE_TIMEOUT_S, say)
        results["consumer_groups"] = workload.groups_used
        final = workload.final_read(FINAL_READ_TIMEOUT_S)
        say(f"[{history.now():6.1f}s] final read: {sum(len(r) for r in final['records'].values())} records")
        if sink is not None:
            collect_sink(sink, final, history, results, say)
    except BaseException as failure:
        error = failure
        results["problems"].append(f"run aborted: {failure!r}")
        (out / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
    finally:
        if progress is not None:
            progress.stop()
        for closer in (lambda: reassigner and reassigner.stop(), lambda: sink and sink.close(),
                       lambda: workload and workload.close(),
                       lambda: admin and admin.close(),
                       lambda: cluster and cluster.close(), lambda: proxies and proxies.close(), history.close):
            try:
                closer()
            except Exception as failure:
                results["problems"].append(f"teardown: {failure!r}")
    results["elapsed_s"] = round(time.time() - started_wall, 1)
    results.update(evaluate(out, scenario.name, seed))
    results["problems"] = results["problems"] + results.pop("check_problems", [])
    write_results(out, results)
    if error is not None and not isinstance(error, Exception):
        raise error  # KeyboardInterrupt and friends, after the files are written
    return results


def start_sink(out: Path, bootstrap_servers: str, topic: str, duration_s: float, history: HistoryWriter,
               say: Callable[[str], None], command_config: Path | None = None) -> SparkSink:
    """Start the Spark sink process (returns at once: its JVM starts while the topic is created
    and the workload starts; it waits for the topic), logging in with ``command_config`` (a
    secure cluster's client.properties) when given.
    Its micro-batches and restarts go to the history as ``sink_progress`` ops."""
    def record(event: dict[str, Any]) -> None:
        if event["event"] in ("batch", "restart"):
            history.append("spark", "ok" if event["event"] == "batch" else "info", "sink_progress",
                           **{k: v for k, v in event.items()})
        if event["event"] == "restart":
            say(f"  spark: query failed, started again from its checkpoint: {event.get('error')}")

    sink = SparkSink(out, bootstrap_servers, topic, max_seconds=duration_s + SINK_LIFETIME_EXTRA_S,
                     wait_topic_s=SINK_START_TIMEOUT_S, command_config=command_config, on_event=record)
    say(f"starting the Spark sink (its log: {sink.log_path})")
    sink.start()
    return sink


def wait_sink_reading(sink: SparkSink, history: HistoryWriter, results: dict[str, Any],
                      say: Callable[[str], None]) -> SparkSink | None:
    """Wait until the sink completed a micro-batch with rows: the first one starts Spark's
    Python workers, which on a loaded box takes longer than a short run's faults, so the fault
    schedule starts after it. None (with a problem and a failed ``sink`` op) if it did not."""
    began = time.monotonic()
    if sink.wait_first_rows(SINK_START_TIMEOUT_S):
        say(f"[{history.now():6.1f}s] spark: first micro-batch done ({time.monotonic() - began:.1f} s after the "
            "workload started); the fault schedule starts now")
        return sink
    failure = SinkError(f"no micro-batch with rows within {SINK_START_TIMEOUT_S:.0f} s" + sink.exit_note())
    results["problems"].append(f"spark: {failure}")
    history.append("spark", "fail", "sink", error=str(failure)[:500])
    say(f"  warning: spark: {failure}; the run goes on without it")
    sink.close()
    return None


def collect_sink(sink: SparkSink, final: dict[str, Any], history: HistoryWriter, results: dict[str, Any],
                 say: Callable[[str], None]) -> None:
    """After the final read: wait until Spark's last micro-batch reached the final high
    watermarks, stop it, append its output as the ``sink`` op (``ok`` with ``records``,
    ``caught_up``; ``fail`` with ``error`` when there is no output to check)."""
    high = {int(p): int(o) for p, o in (final.get("high_watermark") or {}).items()}
    began = time.monotonic()
    caught_up = sink.wait_caught_up(high, SINK_CATCH_UP_TIMEOUT_S)
    waited = round(time.monotonic() - began, 1)
    if not caught_up:
        results["problems"].append(f"spark: the query did not reach the final high watermarks {high} within "
                                   f"{SINK_CATCH_UP_TIMEOUT_S:.0f} s (its last micro-batch ended at {sink.end})")
    try:
        body = sink.stop(SINK_STOP_TIMEOUT_S)
    except SinkError as failure:
        results["problems"].append(f"spark: {failure}")
        history.append("spark", "fail", "sink", error=str(failure)[:500], batches=sink.batches,
                       restarts=sink.restarts)
        say(f"  warning: spark: {failure}")
        return
    rows = sum(len(r) for r in body["records"].values())
    results["spark_sink"] = {"rows": rows, "batches": sink.batches, "restarts": sink.restarts,
                             "caught_up": caught_up, "catch_up_s": waited, "stop_s": body.get("stop_s")}
    history.append("spark", "ok", "sink", records=body["records"], batches=sink.batches, restarts=sink.restarts,
                   caught_up=caught_up, end=sink.end, high_watermark=high)
    say(f"[{history.now():6.1f}s] spark: {rows} rows in {sink.batches} micro-batches, {sink.restarts} query "
        f"restarts; {'caught up' if caught_up else 'NOT caught up'} {waited:.1f} s after the final read; "
        f"stopped and read back in {body.get('stop_s')} s")


def settle_reassignments(admin: Any, topic: str, replication_factor: int, history: HistoryWriter,
                         timeout_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    """After the faults: wait (at most ``timeout_s``) until no reassignment of ``topic`` is under
    way and every partition shows the same replicas REPLICAS_STABLE_READS reads in a row (a
    broker's metadata may trail the controller's), then record them as the ``replicas`` op,
    with those still moving as ``reassigning``; the checker compares them with what was asked."""
    began = time.monotonic()
    deadline = began + timeout_s
    under_way: dict[int, list[int]] = {}
    replicas: dict[int, list[int]] = {}
    same = 0
    while True:
        try:
            listed = admin.list_partition_reassignments()
            under_way = {tp.partition: [b for b in r.replicas if b not in r.removing_replicas]
                         for tp, r in listed.items() if tp.topic == topic}
            described = admin.describe_topics([topic])
            seen = {p["partition"]: list(p["replicas"]) for p in (described[0]["partitions"] if described else [])}
            same = same + 1 if seen == replicas and seen else 1
            replicas = seen
        except Exception as failure:  # a broker still rejoining: ask again
            say(f"  reassignments: {failure!r}")
            same = 0
        settled = not under_way and same >= REPLICAS_STABLE_READS and all(
            len(r) == replication_factor for r in replicas.values())
        if settled or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    waited = round(time.monotonic() - began, 1)
    history.append("final", "ok", "replicas", replicas=replicas, reassigning=under_way, waited_s=waited)
    say(f"[{history.now():6.1f}s] reassignments {'settled' if not under_way else 'NOT settled'} after {waited} s: "
        f"replicas {replicas}" + (f", still moving {under_way}" if under_way else ""))
    return {"replicas": replicas, "reassigning": under_way, "waited_s": waited}


def watch_recovery(ctx: Context, history: HistoryWriter, name: str, config: Any, until: float,
                   say: Callable[[str], None]) -> None:
    """After a heal: poll until every partition has a leader and a full ISR again, and record it
    (``healthy`` op: the ISR recovery time in the report); gives up at ``until`` (run time)."""
    healed_at = history.now()
    while history.now() < until:
        parts = ctx.partitions()
        if len(parts) == config.partitions and all(p["leader"] >= 0 and len(p["isr"]) >= config.replication_factor
                                                   for p in parts):
            history.append("nemesis", "ok", "healthy", name=name, after_heal_s=round(history.now() - healed_at, 3))
            return
        time.sleep(0.2)
    say(f"  {name}: ISR not full again within {until - healed_at:.1f} s of the heal")


def evaluate(out: Path, scenario: str, seed: int | None) -> dict[str, Any]:
    """Check OUT/history.jsonl: verdict, availability, timeline.png."""
    ops = read_history(out / "history.jsonl")
    verdict = check(ops)
    availability = report.availability(ops)
    try:
        report.timeline(ops, out / "timeline.png",
                        title=f"{scenario} seed {seed}: {'valid' if verdict.valid else 'INVALID'}")
    except Exception as failure:  # a plot must not hide a verdict
        availability["timeline_error"] = repr(failure)
    return {"valid": verdict.valid, "verdict": verdict.to_json(), "availability": availability,
            "reassignment_events": report.reassignments(ops), "check_problems": verdict.problems}


def write_results(out: Path, results: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")


def summary(results: dict[str, Any]) -> list[str]:
    """The one-screen summary."""
    from raftka.chaos.checker import Anomalies, Verdict
    v = results["verdict"]
    verdict = Verdict(v["valid"], {k: Anomalies(a["count"], a["examples"]) for k, a in v["anomalies"].items()},
                      v["stats"], v.get("problems", []))
    a = results["availability"]
    lines = [f"scenario {results['scenario']}  seed {results['seed']}  duration {results['duration_s']} s  "
             f"elapsed {results.get('elapsed_s', '?')} s" + ("  secure (SASL_SSL)" if results.get("secure") else "")]
    lines += verdict.summary_lines()
    lat = a.get("latency_p50_s"), a.get("latency_p99_s")
    lines.append(f"availability: baseline {a['baseline_acks_per_s']} acks/s; latency p50 "
                 f"{_ms(lat[0])} p99 {_ms(lat[1])}; longest blocked {a['max_blocked_s']:.2f} s; "
                 f"slowest recovery {a['max_recovery_s']:.2f} s (full ISR {a.get('max_isr_recovery_s', 0):.2f} s); "
                 f"unrecovered {a['unrecovered_faults']}")
    for fault in a["faults"][:12]:
        recovery = "never" if fault["recovery_s"] is None else f"{fault['recovery_s']:.1f} s"
        isr = "-" if fault.get("isr_recovery_s") is None else f"{fault['isr_recovery_s']:.1f} s"
        lines.append(f"  {fault['start_s']:6.1f}-{fault['end_s']:6.1f}s {fault['name']:<30} blocked "
                     f"{fault['blocked_s']:5.2f} s  recovery {recovery:>6}  full ISR {isr:>6}  "
                     f"acked during {fault['acked_during']}")
    if len(a["faults"]) > 12:
        lines.append(f"  ... {len(a['faults']) - 12} more faults in results.json")
    events = results.get("reassignment_events") or []
    for event in events[:REASSIGN_EVENTS_SHOWN]:
        moved = f"{event.get('from')} -> {event['replicas']}" if event["action"] == "start" else f"{event['replicas']}"
        lines.append(f"  {event['time']:6.1f}s reassign {event['action']:<6} {event['type']:<4} partition "
                     f"{event['partition']} {moved}" + (f"  {event['error'][:80]}" if event.get("error") else ""))
    if len(events) > REASSIGN_EVENTS_SHOWN:
        lines.append(f"  ... {len(events) - REASSIGN_EVENTS_SHOWN} more reassignment events in results.json "
                     f"(seed {events[0].get('seed')})")
    for problem in results.get("problems", []):
        lines.append(f"problem: {problem}")
    expected = results.get("expect_valid", True)
    if results["valid"] != expected:
        lines.append(f"UNEXPECTED: this scenario should be {'valid' if expected else 'invalid'} "
                     f"(rerun with --seed {results['seed']})")
    return lines


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"
