"""One chaos run, end to end (`raftka chaos run`), and the re-check of a saved one (`chaos check`).

1. Start the proxy server and a ProxiedCluster (3 controllers, 3 brokers) under ``OUT/cluster``.
2. Create the topic, start producers and consumers (chaos/workload.py).
3. After a warm-up, the seeded schedule: a fault from the scenario's nemesis for a random
   ``fault_s``, heal, a quiet spell of ``quiet_s``, again, until the recovery period.
4. Heal everything (network reset, SIGCONT, restart the dead), let the workload run through the
   recovery period, stop it, wait for full ISRs, read every partition from the log start.
5. Check the history; write ``history.jsonl``, ``results.json``, ``timeline.png``.

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

from chaos import report
from chaos.checker import check
from chaos.cluster import Network, ProxiedCluster, ProxyService, wait_healthy
from chaos.history import HistoryWriter, read_history
from chaos.nemesis import Context, Fault, by_name, heal_everything
from chaos.scenarios import Scenario
from chaos.workload import Workload

PROGRESS_EVERY_S = 5.0
HEALTHY_TIMEOUT_S = 90.0
FINAL_READ_TIMEOUT_S = 120.0


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
        toxiproxy_server: bool = False, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one scenario; returns the results (also written to OUT/results.json)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    config = scenario.workload()
    warmup_s, recovery_s = schedule_bounds(duration_s)
    started_wall = time.time()
    results: dict[str, Any] = {"scenario": scenario.name, "seed": seed, "duration_s": duration_s,
                               "expect_valid": scenario.expect_valid, "workload": config.to_json(),
                               "cluster_configs": scenario.configs(), "problems": []}
    history = HistoryWriter(out / "history.jsonl")
    proxies = cluster = workload = admin = progress = None
    error: BaseException | None = None
    try:
        say(f"chaos run: scenario {scenario.name}, {duration_s:.0f} s, seed {seed}, out {out}")
        proxies = ProxyService(out / "cluster", seed=seed, toxiproxy_server=toxiproxy_server)
        cluster = ProxiedCluster.start(out / "cluster", proxies, configs=scenario.configs())
        network = Network(cluster)
        results["proxy_server"] = proxies.kind
        say(f"cluster up: controllers {cluster.controller_ids}, brokers {cluster.broker_ids}, "
            f"{len(cluster.links)} proxied links ({proxies.kind})")
        history.append("harness", "ok", "meta", topic=config.topic, partitions=config.partitions, seed=seed,
                       scenario=scenario.name, duration_s=duration_s, config=config.to_json())
        from client import AdminClient
        admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=5000)
        workload = Workload(cluster.bootstrap_servers, history, config, seed=rng.randrange(2**31))
        workload.setup()
        run_start = history.now()
        workload.start()
        progress = Progress(workload, history, say)
        progress.start()
        ctx = Context(cluster, network, admin, rng, config.topic, say)
        nemesis = by_name(scenario.nemesis) if scenario.nemesis else None
        deadline = run_start + duration_s
        faults_end = deadline - recovery_s
        time.sleep(warmup_s)
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
        results["consumer_groups"] = workload.groups_used
        final = workload.final_read(FINAL_READ_TIMEOUT_S)
        say(f"[{history.now():6.1f}s] final read: {sum(len(r) for r in final['records'].values())} records")
    except BaseException as failure:
        error = failure
        results["problems"].append(f"run aborted: {failure!r}")
        (out / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
    finally:
        if progress is not None:
            progress.stop()
        for closer in (lambda: workload and workload.close(), lambda: admin and admin.close(),
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
            "check_problems": verdict.problems}


def write_results(out: Path, results: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")


def summary(results: dict[str, Any]) -> list[str]:
    """The one-screen summary."""
    from chaos.checker import Anomalies, Verdict
    v = results["verdict"]
    verdict = Verdict(v["valid"], {k: Anomalies(a["count"], a["examples"]) for k, a in v["anomalies"].items()},
                      v["stats"], v.get("problems", []))
    a = results["availability"]
    lines = [f"scenario {results['scenario']}  seed {results['seed']}  duration {results['duration_s']} s  "
             f"elapsed {results.get('elapsed_s', '?')} s"]
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
    for problem in results.get("problems", []):
        lines.append(f"problem: {problem}")
    expected = results.get("expect_valid", True)
    if results["valid"] != expected:
        lines.append(f"UNEXPECTED: this scenario should be {'valid' if expected else 'invalid'} "
                     f"(rerun with --seed {results['seed']})")
    return lines


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"
