"""Summarize a directory of chaos runs (scripts/chaos-soak.sh) as a markdown table.

``python -m chaos.soak DIR [--append FILE] [--note TEXT]``: reads every ``DIR/*/results.json``
and prints (or appends to FILE) one row per scenario: runs, runs as expected, anomalies by
check, acknowledged writes, worst blocked time and recovery, seeds of unexpected runs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from raftka.chaos.checker import CHECKS


def load(root: Path) -> list[dict[str, Any]]:
    runs = []
    for path in sorted(root.glob("*/results.json")):
        try:
            runs.append(json.loads(path.read_text(encoding="utf-8")))
        except ValueError:
            runs.append({"scenario": path.parent.name, "seed": None, "valid": False, "broken": str(path)})
    return runs


def table(runs: list[dict[str, Any]], note: str = "") -> str:
    by_scenario: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_scenario[run.get("scenario", "?")].append(run)
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    durations = sorted({r.get("duration_s") for r in runs if r.get("duration_s")})
    lines = [f"### Soak {now}: {len(runs)} runs, {len(by_scenario)} scenarios",
             "",
             f"Machine: the development box ({platform.machine()}, {_cores()} cores, shared with other work), "
             f"Python {platform.python_version()}; run length {', '.join(f'{d:g} s' for d in durations)} each."
             + (f" {note}" if note else ""),
             "",
             "| scenario | runs | as expected | anomalies (safe runs) | acked | worst blocked s | worst full-ISR recovery s | problems | unexpected seeds |",
             "|---|---|---|---|---|---|---|---|---|"]
    totals = defaultdict(int)
    for name in sorted(by_scenario):
        group = by_scenario[name]
        expected = [r for r in group if r.get("valid") == r.get("expect_valid", True) and not r.get("broken")]
        anomalies: dict[str, int] = defaultdict(int)
        for r in group:
            for check in CHECKS:
                anomalies[check] += r.get("verdict", {}).get("anomalies", {}).get(check, {}).get("count", 0)
        found = ", ".join(f"{k} {v}" for k, v in anomalies.items() if v) or "0"
        safe = all(r.get("expect_valid", True) for r in group)
        acked = sum(r.get("verdict", {}).get("stats", {}).get("acked", 0) for r in group)
        blocked = max((r.get("availability", {}).get("max_blocked_s", 0) or 0 for r in group), default=0)
        isr = max((r.get("availability", {}).get("max_isr_recovery_s", 0) or 0 for r in group), default=0)
        problems = sum(len(r.get("problems", [])) for r in group)
        unexpected = [str(r.get("seed")) for r in group if r not in expected]
        lines.append(f"| {name}{'' if safe else ' (unsafe: must be INVALID)'} | {len(group)} | {len(expected)} | "
                     f"{found if safe else 'caught: ' + found} | {acked} | {blocked:.2f} | {isr:.2f} | {problems} | "
                     f"{' '.join(unexpected) or '-'} |")
        totals["runs"] += len(group)
        totals["expected"] += len(expected)
        totals["acked"] += acked
        if safe:
            totals["safe_runs"] += len(group)
            totals["safe_anomalies"] += sum(anomalies.values())
    lines += ["", f"Totals: {totals['runs']} runs, {totals['expected']} as expected; safe configuration: "
                  f"{totals['safe_runs']} runs, {totals['safe_anomalies']} anomalies; {totals['acked']} acknowledged "
                  "writes checked.", ""]
    return "\n".join(lines)


def _cores() -> int:
    import os
    return os.cpu_count() or 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.soak", description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="directory holding one sub-directory per run")
    parser.add_argument("--append", metavar="FILE", help="append the table to this markdown file")
    parser.add_argument("--note", default="", help="a sentence added under the heading")
    args = parser.parse_args(argv)
    runs = load(Path(args.dir))
    if not runs:
        print(f"error: no */results.json under {args.dir}", file=sys.stderr)
        return 1
    text = table(runs, args.note)
    print(text)
    if args.append:
        with open(args.append, "a", encoding="utf-8") as file:
            file.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
