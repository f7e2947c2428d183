"""Availability figures and the timeline come from the history alone: a hand-made history with
a known stall gives that stall as blocked time and the known recovery; the plot is drawn."""
from __future__ import annotations

from raftka.chaos.report import availability, fault_windows, timeline


def history_with_a_stall() -> list[dict]:
    """100 acks/s for 30 s, none from 10.0 to 13.0 s; fault 9-12 s (healed at 12), ISR full 1.5 s
    after the heal; a rolling restart (nothing to heal) from 20 to 24 s."""
    ops: list[dict] = []

    def add(**op):
        op.setdefault("index", len(ops))
        ops.append(op)
    add(time=9.0, process="nemesis", type="invoke", f="fault", name="kill-broker")
    add(time=9.1, process="nemesis", type="ok", f="fault", name="kill-broker", detail={"broker": 4}, healable=True)
    add(time=12.0, process="nemesis", type="invoke", f="heal", name="kill-broker")
    add(time=12.0, process="nemesis", type="ok", f="heal", name="kill-broker")
    add(time=13.5, process="nemesis", type="ok", f="healthy", name="kill-broker", after_heal_s=1.5)
    add(time=20.0, process="nemesis", type="invoke", f="fault", name="rolling-restart")
    add(time=24.0, process="nemesis", type="ok", f="fault", name="rolling-restart", detail={}, healable=False)
    for i in range(3000):
        t = i / 100
        if 10.0 <= t < 13.0:
            continue
        add(time=t, process="p0", type="invoke", f="send", value=f"p0-{i}", partition=0)
        add(time=t + 0.005, process="p0", type="ok", f="send", value=f"p0-{i}", partition=0, offset=i,
            latency=0.005 if t < 13.0 or t > 13.1 else 3.0)
    ops.sort(key=lambda op: op["time"])
    return ops


def test_blocked_time_and_recoveries_are_measured_from_the_history():
    ops = history_with_a_stall()
    windows = fault_windows(ops)
    assert [(w["name"], w["start"], w["end"]) for w in windows] == [("kill-broker", 9.0, 12.0),
                                                                   ("rolling-restart", 20.0, 24.0)]
    a = availability(ops)
    kill, roll = a["faults"]
    assert abs(kill["blocked_s"] - 3.0) < 0.05  # acks stop at 10.0 and resume at 13.0
    assert kill["recovery_s"] == 1.0  # the bin 12-13 s is empty, 13-14 s is full again
    assert kill["isr_recovery_s"] == 1.5
    assert roll["blocked_s"] < 0.05 and roll["recovery_s"] == 0.0
    assert a["baseline_acks_per_s"] == 100
    assert a["max_blocked_s"] == kill["blocked_s"]


def test_a_fault_never_healed_is_reported_to_the_end():
    ops = history_with_a_stall()
    ops = [op for op in ops if not (op["f"] == "heal")]
    a = availability(ops)
    assert a["faults"][0]["end_s"] >= 29.0


def test_the_timeline_is_drawn(tmp_path):
    path = timeline(history_with_a_stall(), tmp_path / "timeline.png", title="hand-made")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
