"""Availability figures and the timeline plot of a chaos run, computed from its history alone
(so `raftka chaos check DIR` redoes them).

Per fault (from its ``fault`` op to its ``heal`` op):
- ``blocked_s``: the longest stretch, overlapping the fault or the ``RECOVERY_WINDOW_S`` after its
  heal, in which no send was acknowledged (clipped to that window);
- ``recovery_s``: from the heal to the first one-second bin whose acknowledged sends reach half
  the baseline (the median of bins outside every fault and recovery window); 0 when throughput
  never dropped, None when it did not recover before the next fault or the end;
- ``isr_recovery_s``: from the heal until every partition had a leader and a full ISR again (the
  runner's ``healthy`` op), None when not seen before the next fault.

``reassignments``: the Reassigner's ``reassign`` ops as events (time, action, outcome,
partition, replicas), for the summary; ``timeline.png`` marks them too.

``timeline.png``: acknowledged sends per second, and each send's latency (ok as dots, info and
fail marked), fault windows shaded and labelled, in the style of Jepsen's plots.
"""
from __future__ import annotations

import bisect
import statistics
from pathlib import Path
from typing import Any

RECOVERY_WINDOW_S = 10.0
BIN_S = 1.0


def reassignments(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{time, action, type, partition, replicas, seed}] of every ``reassign`` op: ``replicas``
    the target of a start, the original of a cancel, what was seen at a finish."""
    events = []
    for op in ops:
        if op.get("f") != "reassign":
            continue
        replicas = op.get("to") if op.get("action") == "start" else (
            op.get("original") if op.get("action") == "cancel" else op.get("replicas"))
        event = {"time": round(op["time"], 3), "action": op.get("action"), "type": op.get("type"),
                 "partition": op.get("partition"), "replicas": replicas, "seed": op.get("seed")}
        if op.get("action") == "start":
            event["from"] = op.get("from")
        if op.get("error"):
            event["error"] = op["error"]
        events.append(event)
    return events


def fault_windows(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{name, detail, start, end}] from the nemesis's ops: a window starts when the fault was
    invoked (a rolling restart takes its time inside the injection) and ends when its heal
    completed (or, for a fault with nothing to heal, when the injection completed); end None:
    never healed."""
    windows: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    for op in ops:
        if op.get("process") != "nemesis":
            continue
        f, kind = op.get("f"), op.get("type")
        if f == "fault" and kind == "invoke":
            window = {"name": op["name"], "detail": {}, "start": op["time"], "end": None}
            windows.append(window)
            open_[op["name"]] = window
        elif f == "fault" and op["name"] in open_:
            open_[op["name"]]["detail"] = op.get("detail", {})
            if op.get("healable") is False or kind != "ok":
                open_.pop(op["name"])["end"] = op["time"]
        elif f == "heal" and kind in ("ok", "info") and op["name"] in open_:
            open_.pop(op["name"])["end"] = op["time"]
        elif f == "healthy" and kind == "ok" and windows and windows[-1]["name"] == op["name"]:
            windows[-1]["isr_recovery_s"] = op.get("after_heal_s")
    return windows


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def availability(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Throughput, latency and per-fault blocked and recovery times (see the module docstring)."""
    acks = sorted(op["time"] for op in ops if op.get("f") == "send" and op.get("type") == "ok")
    latencies = [op["latency"] for op in ops if op.get("f") == "send" and op.get("type") == "ok" and "latency" in op]
    end_time = max((op["time"] for op in ops), default=0.0)
    workload_end = max((op["time"] for op in ops if op.get("f") == "send"), default=end_time)
    windows = fault_windows(ops)
    bins = [0] * (int(workload_end / BIN_S) + 1)
    for t in acks:
        bins[min(len(bins) - 1, int(t / BIN_S))] += 1
    first_ack = acks[0] if acks else 0.0

    def disturbed(index: int) -> bool:
        lo, hi = index * BIN_S, (index + 1) * BIN_S
        if hi <= first_ack or hi > workload_end:
            return True  # before the workload's first ack, or the cut-off last bin
        return any(lo < (w["end"] if w["end"] is not None else end_time) + RECOVERY_WINDOW_S and hi > w["start"]
                   for w in windows)
    quiet = [n for i, n in enumerate(bins) if not disturbed(i)]
    baseline = statistics.median(quiet) if quiet else (statistics.median(bins) if bins else 0)

    faults = []
    for k, w in enumerate(windows):
        end = w["end"] if w["end"] is not None else end_time
        limit = min(end + RECOVERY_WINDOW_S, windows[k + 1]["start"] if k + 1 < len(windows) else workload_end)
        limit = max(limit, end)
        # longest gap between acks that overlaps [start, limit], clipped to it
        i = bisect.bisect_left(acks, w["start"])
        edges = [w["start"]] + acks[i:bisect.bisect_right(acks, limit)] + [limit]
        blocked = max((b - a for a, b in zip(edges, edges[1:])), default=0.0)
        recovery: float | None = 0.0
        if baseline > 0:
            start_bin = int(end / BIN_S)
            threshold = baseline / 2
            recovery = None
            for index in range(start_bin, min(len(bins), int(limit / BIN_S) + 1)):
                if bins[index] >= threshold:
                    recovery = max(0.0, index * BIN_S - end)
                    break
        acked_in = bisect.bisect_right(acks, end) - bisect.bisect_left(acks, w["start"])
        faults.append({"name": w["name"], "detail": w["detail"], "start_s": round(w["start"], 3),
                       "end_s": round(end, 3), "duration_s": round(end - w["start"], 3),
                       "acked_during": acked_in, "blocked_s": round(blocked, 3),
                       "recovery_s": None if recovery is None else round(recovery, 3),
                       "isr_recovery_s": w.get("isr_recovery_s")})
    return {"acked": len(acks), "baseline_acks_per_s": baseline,
            "latency_p50_s": _percentile(latencies, 0.5), "latency_p99_s": _percentile(latencies, 0.99),
            "latency_max_s": max(latencies) if latencies else None,
            "max_blocked_s": max((f["blocked_s"] for f in faults), default=0.0),
            "max_recovery_s": max((f["recovery_s"] or 0.0 for f in faults), default=0.0),
            "unrecovered_faults": sum(1 for f in faults if f["recovery_s"] is None),
            "max_isr_recovery_s": max((f["isr_recovery_s"] or 0.0 for f in faults), default=0.0),
            "faults": faults}


def timeline(ops: list[dict[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """Draw timeline.png (matplotlib, no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sends = [op for op in ops if op.get("f") == "send" and op.get("type") in ("ok", "info", "fail")]
    ok = [(op["time"], op.get("latency", 0.0)) for op in sends if op["type"] == "ok"]
    info = [(op["time"], op.get("latency", 0.0)) for op in sends if op["type"] == "info"]
    fail = [(op["time"], op.get("latency", 0.0)) for op in sends if op["type"] == "fail"]
    end = max((op["time"] for op in ops), default=1.0)
    bins = [0] * (int(end / BIN_S) + 1)
    for t, _ in ok:
        bins[int(t / BIN_S)] += 1

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(12, 6.5), sharex=True,
                                         gridspec_kw={"height_ratios": [1, 1.3]})
    top.step([i * BIN_S for i in range(len(bins))], [b / BIN_S for b in bins], where="post", color="#1f77b4",
             linewidth=1.2)
    top.set_ylabel("acked sends / s")
    top.set_ylim(bottom=0)
    if ok:
        bottom.scatter([t for t, _ in ok], [max(l, 1e-4) * 1000 for _, l in ok], s=2, color="#1f77b4",
                       alpha=0.35, label=f"ok ({len(ok)})", rasterized=True)
    if info:
        bottom.scatter([t for t, _ in info], [max(l, 1e-4) * 1000 for _, l in info], s=14, marker="x",
                       color="#ff7f0e", label=f"info: unknown ({len(info)})")
    if fail:
        bottom.scatter([t for t, _ in fail], [max(l, 1e-4) * 1000 for _, l in fail], s=14, marker="v",
                       color="#d62728", label=f"fail ({len(fail)})")
    bottom.set_yscale("log")
    bottom.set_ylabel("send latency (ms)")
    bottom.set_xlabel("time since start (s)")
    if ok or info or fail:
        bottom.legend(loc="upper right", fontsize=8)
    colors = ["#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#2ca02c"]
    names = sorted({w["name"] for w in fault_windows(ops)})
    for w in fault_windows(ops):
        color = colors[names.index(w["name"]) % len(colors)]
        stop = w["end"] if w["end"] is not None else end
        for axis in (top, bottom):
            axis.axvspan(w["start"], max(stop, w["start"] + 0.05), color=color, alpha=0.15, linewidth=0)
        top.text(w["start"], 1.0, w["name"], transform=top.get_xaxis_transform(), fontsize=7,
                 va="bottom", ha="left", rotation=20, color=color)
    marks = {"start": ("^", "#2ca02c"), "cancel": ("x", "#d62728"), "finish": ("v", "#17becf")}
    for action, (marker, color) in marks.items():
        times = [e["time"] for e in reassignments(ops) if e["action"] == action and e["type"] == "ok"]
        if times:  # along the top of the throughput plot, clear of the fault labels
            top.scatter(times, [0.03] * len(times), marker=marker, s=18, color=color,
                        transform=top.get_xaxis_transform(), label=f"reassign {action} ({len(times)})")
    if any(e["type"] == "ok" for e in reassignments(ops)):
        top.legend(loc="lower right", fontsize=7)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
