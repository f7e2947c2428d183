"""Chaos with Spark: a Spark streaming query (`raftka spark sink`, topic -> Parquet with a
checkpoint, in its own process, through the client proxies) runs while partition leaders are
isolated or killed -9 (scenario `spark`). Its output must equal the committed log exactly.
The default suite runs it for 15 s (one fault: seed 5 kills a leader), `-m soak` for 30 s (seed
5: a kill, then an isolation); the fault schedule starts once Spark read its first rows.

- The real run: VALID, every sink check 0, Spark's output holding every record of the final log
  (and nothing else), Spark's micro-batches completing while faults were on.
- The checker catches each fault of Spark's output: the real history with the sink op mangled
  (a record dropped, a row duplicated, a row no final log holds, a value moved to another
  offset, the sink missing) comes out INVALID with the right check and count, and
  `raftka chaos check` says so from the history file alone.

Skipped (with the reason) without Java 17+. Every failure message carries the seed.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftka.chaos import scenarios
from raftka.chaos.checker import SINK_CHECKS, check
from raftka.chaos.history import read_history, write_history
from raftka.chaos.runner import run, summary
from raftka.cluster import project_env

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SEED = 5
SMOKE_DURATION_S = 15
SOAK_DURATION_S = 30


def _java_missing_reason() -> str | None:
    from raftka.spark.session import JavaNotFoundError, require_java
    try:
        require_java()
    except JavaNotFoundError as error:
        return f"chaos with Spark needs Java 17+: {error}"
    return None


def _explain(results: dict) -> str:
    return "\n".join(summary(results)) + f"\n(raftka chaos run --scenario spark --duration " \
                                        f"{results['duration_s']:g} --seed {results['seed']})"


@pytest.fixture(scope="module", params=[
    pytest.param(SMOKE_DURATION_S, id=f"{SMOKE_DURATION_S}s"),
    pytest.param(SOAK_DURATION_S, id=f"{SOAK_DURATION_S}s", marks=pytest.mark.soak)])
def spark_run(request, tmp_path_factory):
    reason = _java_missing_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("chaos-spark")
    results = run(scenarios.get("spark"), duration_s=request.param, seed=SEED, out=out,
                  say=lambda line: print(line, flush=True))
    return out, results, read_history(out / "history.jsonl")


def _final_and_sink(ops: list[dict]) -> tuple[dict, dict]:
    final = next(op for op in ops if op["f"] == "final" and op["type"] == "ok")
    sink = next(op for op in ops if op["f"] == "sink" and op["type"] == "ok")
    return final, sink


def test_sparks_output_equals_the_committed_log_through_leader_isolations_or_kills(spark_run):
    out, results, ops = spark_run
    assert results["valid"], _explain(results)
    assert not results["problems"], _explain(results)
    anomalies = results["verdict"]["anomalies"]
    assert all(anomalies[name]["count"] == 0 for name in SINK_CHECKS), _explain(results)
    faults = results["availability"]["faults"]
    assert faults and all(f["name"].startswith("isolate-or-kill-leader:") for f in faults), _explain(results)

    final, sink = _final_and_sink(ops)
    final_rows = {(p, o, v) for p, records in final["records"].items() for o, v in records}
    sink_rows = [(p, o, v) for p, records in sink["records"].items() for o, v in records]
    assert len(final_rows) > 1000, _explain(results)
    assert sorted(sink_rows) == sorted(final_rows), _explain(results)  # each once, nothing else
    assert sink["caught_up"] is True and results["verdict"]["stats"]["sink_records"] == len(final_rows)

    # Spark really read during the faults: micro-batches completed between a fault and its heal.
    windows = [(f["start_s"], f["end_s"]) for f in faults]
    batches = [op["time"] for op in ops if op["f"] == "sink_progress" and op.get("event") == "batch"]
    assert any(start <= t <= end for t in batches for start, end in windows), _explain(results)
    assert (out / "spark" / "spark.log").is_file() and (out / "spark" / "parquet" / "_spark_metadata").is_dir()


def _with_sink(ops: list[dict], mangle) -> list[dict]:
    """The history with its sink op's records mangled (a copy of that op only: the history is big)."""
    _, sink = _final_and_sink(ops)
    records = {p: [list(r) for r in rows] for p, rows in sink["records"].items()}
    mangle(records)
    return [{**op, "records": records} if op is sink else op for op in ops]


def _recheck(ops: list[dict], mangle) -> dict:
    verdict = check(_with_sink(ops, mangle))
    assert not verdict.valid
    return {name: a.count for name, a in verdict.anomalies.items()}


def _only(counts: dict, **expected: int) -> None:
    assert {k: v for k, v in counts.items() if v} == expected, counts


def test_the_checker_catches_each_fault_of_sparks_output(spark_run, tmp_path):
    _out, results, ops = spark_run
    if not results["valid"]:
        pytest.skip("the real run is not valid: see the test above")
    final, _ = _final_and_sink(ops)
    partition = max(final["records"], key=lambda p: len(final["records"][p]))
    offset, value = final["records"][partition][len(final["records"][partition]) // 2]

    def drop(records):  # a record of the final log missing
        records[partition].remove([offset, value])
    _only(_recheck(ops, drop), sink_gap=1)

    def duplicate(records):  # one row twice (a batch written twice)
        records[partition].append([offset, value])
    _only(_recheck(ops, duplicate), sink_duplicate=1)

    def uncommitted(records):  # a row past the final log's end (read above the high watermark)
        end = final["records"][partition][-1][0] + 1
        records[partition].append([end, "p9-0"])
    _only(_recheck(ops, uncommitted), sink_uncommitted=1)

    def truncated(records):  # at a real offset, a value the final log does not hold there
        records[partition] = [[o, "p9-1" if o == offset else v] for o, v in records[partition]]
    _only(_recheck(ops, truncated), sink_gap=1, sink_uncommitted=1)

    def moved(records):  # a value at a second offset too
        records[partition].append([final["records"][partition][-1][0] + 1, value])
    _only(_recheck(ops, moved), sink_duplicate=1, sink_uncommitted=1)

    # The sink missing from a run that had one: INVALID with a problem, from the history alone,
    # also through `raftka chaos check`.
    without = [op for op in ops if op["f"] != "sink"]
    verdict = check(without)
    assert not verdict.valid and any("Spark sink" in p for p in verdict.problems), verdict.problems
    write_history(tmp_path / "history.jsonl", _with_sink(ops, drop))
    process = subprocess.run([sys.executable, "-m", "raftka", "chaos", "check", str(tmp_path)], capture_output=True,
                             text=True, env=project_env(), timeout=120)
    assert process.returncode == 1, process.stdout + process.stderr
    assert "[BAD] sink_gap: 1" in process.stdout and "spark sink:" in process.stdout, process.stdout
