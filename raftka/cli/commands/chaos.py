"""`raftka chaos ...`: the chaos harness (chaos/, docs/chaos.md).

- `raftka chaos proxy [--listen 127.0.0.1:8474] [--seed N]`: a TCP proxy server with Toxiproxy's
  HTTP API (drive it with any Toxiproxy client).
- `raftka chaos run --scenario NAME --duration S --seed N [--out DIR] [--toxiproxy-server] [--spark]
  [--secure]` (`--list` lists the scenarios): a proxied cluster, a workload, seeded faults, a
  checked history. Exit 0 only if the history is valid. `--spark` (on in scenario `spark`) also
  runs a Spark streaming query to Parquet during the faults, whose output must equal the
  committed log. `--secure` makes the cluster as `raftka cluster up --secure` does (SASL_SSL
  everywhere, ACLs) and the harness's clients, the Spark sink's included, log in as its admin.
- `raftka chaos check DIR`: check a saved run again (history.jsonl -> results.json, timeline.png).
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("chaos", help="chaos harness: Toxiproxy-compatible proxy, fault runs, checker")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="chaos_command", metavar="ACTION")

    proxy = sub.add_parser("proxy", help="run a TCP proxy server with Toxiproxy's HTTP API")
    proxy.add_argument("--listen", default="127.0.0.1:8474", metavar="HOST:PORT",
                       help="the HTTP API address (default 127.0.0.1:8474, Toxiproxy's)")
    proxy.add_argument("--seed", type=int, default=None,
                       help="seed for jitter, toxicity and slicer sizes (default: random)")
    proxy.set_defaults(func=run_proxy)

    run = sub.add_parser("run", help="run a fault scenario against a local proxied cluster and check it")
    run.add_argument("--scenario", default="mix", help="scenario name (see --list; default mix)")
    run.add_argument("--duration", type=float, default=60.0, metavar="S", help="seconds of workload (default 60)")
    run.add_argument("--seed", type=int, default=None, help="seed of every random choice (default: random, printed)")
    run.add_argument("--out", default=None, metavar="DIR",
                     help="output directory (default chaos-runs/<scenario>-<seed>)")
    run.add_argument("--toxiproxy-server", action="store_true",
                     help="use a real toxiproxy-server from PATH instead of `raftka chaos proxy`")
    run.add_argument("--spark", action="store_true",
                     help="also run a Spark streaming query to Parquet during the faults and check its output "
                          "against the committed log (needs Java 17+; on in scenario spark)")
    run.add_argument("--secure", action="store_true",
                     help="a secure cluster, as `raftka cluster up --secure` makes it: SASL_SSL on every listener, "
                          "ACLs; the workload, the nemeses and the Spark sink log in as its admin user")
    run.add_argument("--list", action="store_true", help="list the scenarios and exit")
    run.add_argument("--json", action="store_true", help="print results.json instead of the summary")
    run.set_defaults(func=run_run)

    checker = sub.add_parser("check", help="check a saved run's history.jsonl again")
    checker.add_argument("dir", help="a run's output directory (holds history.jsonl)")
    checker.add_argument("--json", action="store_true", help="print results.json instead of the summary")
    checker.set_defaults(func=run_check)


def run_proxy(args: argparse.Namespace) -> int:
    from raftka.chaos.proxy_server import ApiError, main
    try:
        return main(args.listen, args.seed)
    except ApiError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1


def run_run(args: argparse.Namespace) -> int:
    from raftka.chaos import scenarios
    if args.list:
        for s in scenarios.SCENARIOS.values():
            tags = ("smoke " if s.smoke else "soak  ") + ("" if s.expect_valid else "(expected INVALID) ") \
                + ("(Spark) " if s.spark else "") + ("(secure) " if s.secure else "")
            print(f"{s.name:<24} {tags}{s.description}")
        return 0
    try:
        scenario = scenarios.get(args.scenario)
    except KeyError as error:
        print(f"error: {error.args[0]}", file=sys.stderr)
        return 2
    if args.duration <= 0 or args.duration > 24 * 3600:
        print("error: --duration must be in (0, 86400] seconds", file=sys.stderr)
        return 2
    use_spark = args.spark or scenario.spark
    use_secure = args.secure or scenario.secure
    if use_spark:
        from raftka.spark.session import JavaNotFoundError, require_java
        try:
            require_java()
        except JavaNotFoundError as error:
            print(f"error: --spark: {error}", file=sys.stderr)
            return 2
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % 2**31
    out = args.out or f"chaos-runs/{scenario.name}-{seed}"
    from raftka.chaos.runner import run, summary
    results = run(scenario, duration_s=args.duration, seed=seed, out=out, toxiproxy_server=args.toxiproxy_server,
                  spark=use_spark, secure=use_secure, say=lambda line: print(line, flush=True))
    _show(results, args.json, out)
    return 0 if results["valid"] else 1


def run_check(args: argparse.Namespace) -> int:
    from pathlib import Path
    from raftka.chaos.runner import evaluate, summary, write_results
    out = Path(args.dir)
    if not (out / "history.jsonl").is_file():
        print(f"error: no history.jsonl in {out}", file=sys.stderr)
        return 1
    previous = {}
    if (out / "results.json").is_file():
        try:
            previous = json.loads((out / "results.json").read_text(encoding="utf-8"))
        except ValueError:
            previous = {}
    from raftka.chaos.history import read_history
    meta = next((op for op in read_history(out / "history.jsonl") if op.get("f") == "meta"), {})
    results = {**previous, "scenario": previous.get("scenario", meta.get("scenario", "?")),
               "seed": previous.get("seed", meta.get("seed")), "duration_s": previous.get("duration_s", meta.get("duration_s"))}
    results["problems"] = [p for p in previous.get("problems", []) if not p.startswith("no final read")]
    checked = evaluate(out, results["scenario"], results["seed"])
    results.update(checked)
    results["problems"] = results["problems"] + results.pop("check_problems", [])
    write_results(out, results)
    _show(results, args.json, str(out))
    return 0 if results["valid"] else 1


def _show(results: dict, as_json: bool, out: str) -> None:
    from raftka.chaos.runner import summary
    if as_json:
        print(json.dumps(results, indent=2, default=str))
        return
    print("\n".join(summary(results)))
    print(f"files: {out}/history.jsonl, {out}/results.json, {out}/timeline.png")
