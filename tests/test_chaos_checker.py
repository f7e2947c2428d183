"""The checker finds each anomaly in a hand-made history, and only that one; a clean history
is valid. Each test builds the smallest history showing one anomaly."""
from __future__ import annotations

import pytest

from raftka.chaos.checker import CHECKS, check
from raftka.chaos.history import HistoryWriter, read_history, write_history


class Builder:
    """Builds a history: sends (invoke + outcome), polls, commits, a final read."""

    def __init__(self) -> None:
        self.ops: list[dict] = []
        self.t = 0.0

    def op(self, process: str, type: str, f: str, **fields) -> dict:
        self.t += 0.01
        op = {"index": len(self.ops), "time": round(self.t, 3), "process": process, "type": type, "f": f, **fields}
        self.ops.append(op)
        return op

    def send(self, process: str, value: str, partition: int, offset: int | None, outcome: str = "ok") -> None:
        self.op(process, "invoke", "send", value=value, partition=partition)
        if outcome == "ok":
            self.op(process, "ok", "send", value=value, partition=partition, offset=offset)
        elif outcome in ("fail", "info"):
            self.op(process, outcome, "send", value=value, partition=partition, error="RequestTimedOut")

    def poll(self, process: str, *records: tuple[int, int, str]) -> None:
        self.op(process, "ok", "poll", records=[list(r) for r in records])

    def final(self, **partitions: list[str]) -> None:
        records = {int(p[1:]): [[o, v] for o, v in enumerate(values)] for p, values in partitions.items()}
        self.op("final", "ok", "final", log_start={p: 0 for p in records}, records=records)


def clean() -> Builder:
    b = Builder()
    b.send("p0", "a", 0, 0)
    b.send("p0", "b", 0, 1)
    b.send("p1", "c", 1, 0)
    b.send("p1", "d", 1, 1, outcome="info")  # unknown outcome, happened to be written
    b.send("p1", "e", 1, None, outcome="info")  # unknown outcome, not written
    b.poll("c0", (0, 0, "a"), (0, 1, "b"), (1, 0, "c"))
    b.poll("c0", (0, 0, "a"))  # re-reading the same record is fine
    b.final(p0=["a", "b"], p1=["c", "d"])
    return b


def only(verdict, name: str) -> None:
    counts = {k: v.count for k, v in verdict.anomalies.items()}
    assert not verdict.valid
    assert counts[name] > 0, counts
    assert all(c == 0 for k, c in counts.items() if k != name), counts
    assert verdict.anomalies[name].examples


def test_a_clean_history_is_valid():
    verdict = check(clean().ops)
    assert verdict.valid, verdict.summary_lines()
    assert verdict.stats["acked"] == 3 and verdict.stats["unknown"] == 2 and verdict.stats["final_records"] == 4


def test_an_acknowledged_write_missing_from_the_final_log_is_lost():
    b = clean()
    b.ops.pop()  # redo the final read without "b"
    b.final(p0=["a"], p1=["c", "d"])
    b.ops = [op for op in b.ops if not (op["f"] == "poll" and any(r[2] == "b" for r in op["records"]))]
    verdict = check(b.ops)
    only(verdict, "lost")
    assert verdict.anomalies["lost"].examples[0]["value"] == "b"


def test_one_value_at_two_offsets_is_a_duplicate():
    b = clean()
    b.ops.pop()
    b.final(p0=["a", "b", "b"], p1=["c", "d"])
    verdict = check(b.ops)
    only(verdict, "duplicate")
    assert verdict.anomalies["duplicate"].examples[0]["final_offsets"] == [(0, 1), (0, 2)]


def test_two_values_at_one_offset_are_inconsistent():
    b = clean()
    b.poll("c1", (1, 1, "c"))  # c is at offset 0; a reader saw it at 1 too -> also a duplicate read
    verdict = check(b.ops)
    assert verdict.anomalies["inconsistent_offsets"].count == 1
    example = verdict.anomalies["inconsistent_offsets"].examples[0]
    assert example["partition"] == 1 and example["offset"] == 1 and set(example["values"]) == {"c", "d"}
    # the ack offset disagreeing with the final log alone:
    b = clean()
    for op in b.ops:
        if op["f"] == "send" and op["type"] == "ok" and op["value"] == "c":
            op["offset"] = 1  # acknowledged at offset 1, but "d" is there
    verdict = check(b.ops)
    assert verdict.anomalies["inconsistent_offsets"].count == 1


def test_a_producers_acknowledged_order_reversed_in_the_log_is_reordering():
    b = Builder()
    b.send("p0", "a", 0, 0)
    b.send("p0", "b", 0, 1)
    b.send("p1", "x", 0, 2)
    b.final(p0=["b", "a", "x"])  # a was sent (and acknowledged) first but sits after b
    verdict = check(b.ops)
    assert verdict.anomalies["reordered"].count == 1
    example = verdict.anomalies["reordered"].examples[0]
    assert example["sent_first"] == "a" and example["sent_later"] == "b" and example["process"] == "p0"


def test_another_producers_interleaving_is_not_reordering():
    b = Builder()
    b.send("p0", "a", 0, 1)
    b.send("p1", "x", 0, 0)  # p1 sent later but landed earlier: different producers, fine
    b.final(p0=["x", "a"])
    assert check(b.ops).valid


def test_a_consumer_that_saw_a_record_absent_from_the_final_log_read_uncommitted_data():
    b = clean()
    b.poll("c1", (0, 2, "z"))  # never acknowledged, never in the final log
    b.send("p2", "z", 0, None, outcome="info")
    verdict = check(b.ops)
    only(verdict, "uncommitted_read")
    assert verdict.anomalies["uncommitted_read"].examples[0]["value"] == "z"


def test_committed_offsets_going_back_are_non_monotonic():
    b = clean()
    b.op("c0", "ok", "commit", group="g", offsets={0: 2})
    b.op("c0", "ok", "commit", group="g", offsets={0: 1})  # the same consumer commits lower
    verdict = check(b.ops)
    only(verdict, "nonmonotonic_commits")

    b = clean()
    b.op("c0", "ok", "committed", group="g", offsets={0: 2}, invoked_at=b.t)
    start = b.t + 0.005
    b.op("c1", "ok", "committed", group="g", offsets={0: 1}, invoked_at=start)  # read back lower, later
    verdict = check(b.ops)
    only(verdict, "nonmonotonic_commits")

    b = clean()  # overlapping reads may be ordered either way
    b.op("c0", "ok", "committed", group="g", offsets={0: 2}, invoked_at=0.0)
    b.op("c1", "ok", "committed", group="g", offsets={0: 1}, invoked_at=0.0)
    assert check(b.ops).valid


def test_a_value_nobody_sent_is_a_phantom():
    b = clean()
    b.ops.pop()
    b.final(p0=["a", "b"], p1=["c", "d", "garbage"])
    only(check(b.ops), "phantom")


def test_without_a_final_read_the_history_is_not_valid():
    b = clean()
    b.ops.pop()
    verdict = check(b.ops)
    assert not verdict.valid and verdict.problems
    assert all(a.count == 0 for a in verdict.anomalies.values())


def test_failed_and_unknown_writes_may_be_absent():
    b = Builder()
    b.send("p0", "a", 0, 0)
    b.send("p0", "f", 0, None, outcome="fail")
    b.send("p0", "i", 0, None, outcome="info")
    b.send("p0", "never-answered", 0, None, outcome="none")
    b.final(p0=["a"])
    verdict = check(b.ops)
    assert verdict.valid and verdict.stats["unknown"] == 2 and verdict.stats["failed"] == 1


def test_counts_and_examples_are_bounded(tmp_path):
    b = Builder()
    for i in range(50):
        b.send("p0", f"v{i}", 0, i)
    b.final(p0=[])
    verdict = check(b.ops)
    assert verdict.anomalies["lost"].count == 50 and len(verdict.anomalies["lost"].examples) == 5
    assert "lost: 50" in "\n".join(verdict.summary_lines())


def test_histories_round_trip_through_files(tmp_path):
    path = tmp_path / "history.jsonl"
    write_history(path, clean().ops)
    ops = read_history(path)
    assert check(ops).valid
    assert isinstance(next(iter(ops[-1]["records"])), int)  # partition keys back to ints
    with HistoryWriter(tmp_path / "w.jsonl") as writer:
        writer.append("p0", "invoke", "send", value="a", partition=0)
        writer.append("p0", "ok", "send", value="a", partition=0, offset=0)
        writer.append("final", "ok", "final", log_start={0: 0}, records={0: [[0, "a"]]})
    with open(tmp_path / "w.jsonl", "a") as file:
        file.write('{"index": 3, "torn')  # a run killed mid-line
    ops = read_history(tmp_path / "w.jsonl")
    assert [op["index"] for op in ops] == [0, 1, 2] and check(ops).valid


@pytest.mark.parametrize("name", CHECKS)
def test_every_check_is_reported_even_when_zero(name):
    verdict = check(clean().ops)
    assert verdict.to_json()["anomalies"][name] == {"count": 0, "examples": []}


# -- a Spark sink's output (the `sink` op of `raftka chaos run --spark`) --

def with_sink(b: Builder, **partitions: list[tuple[int, str]]) -> Builder:
    records = {int(p[1:]): [list(r) for r in rows] for p, rows in partitions.items()}
    b.op("spark", "ok", "sink", records=records, batches=3, restarts=0, caught_up=True)
    return b


def test_a_sink_holding_exactly_the_final_log_is_valid_and_shown():
    verdict = check(with_sink(clean(), p0=[(0, "a"), (1, "b")], p1=[(0, "c"), (1, "d")]).ops)
    assert verdict.valid, verdict.summary_lines()
    assert verdict.stats["sink_records"] == 4
    text = "\n".join(verdict.summary_lines())
    assert "sink_gap: 0" in text and "spark sink: 4 rows in 3 micro-batches" in text
    assert "sink_gap" not in "\n".join(check(clean().ops).summary_lines())  # no sink, no sink lines


def test_sink_gap_duplicate_and_uncommitted_rows_are_each_caught():
    only(check(with_sink(clean(), p0=[(0, "a")], p1=[(0, "c"), (1, "d")]).ops), "sink_gap")
    only(check(with_sink(clean(), p0=[(0, "a"), (1, "b"), (1, "b")], p1=[(0, "c"), (1, "d")]).ops),
         "sink_duplicate")
    # "e" (outcome unknown, not in the final log): Spark read it above the high watermark
    verdict = check(with_sink(clean(), p0=[(0, "a"), (1, "b")], p1=[(0, "c"), (1, "d"), (2, "e")]).ops)
    only(verdict, "sink_uncommitted")
    assert verdict.anomalies["sink_uncommitted"].examples[0] == {"partition": 1, "offset": 2, "value": "e",
                                                                 "final_log": None}


def test_a_run_with_spark_but_no_sink_output_or_a_sink_that_lagged_is_not_valid():
    b = clean()
    b.ops[0:0] = [{"index": -1, "time": 0.0, "process": "harness", "type": "ok", "f": "meta", "spark": True}]
    verdict = check(b.ops)
    assert not verdict.valid and "Spark sink" in verdict.problems[0]
    b = with_sink(clean(), p0=[(0, "a")], p1=[(0, "c"), (1, "d")])
    b.ops[-1]["caught_up"] = False
    verdict = check(b.ops)
    assert not verdict.valid and any("not caught up" in p for p in verdict.problems)


def test_a_value_a_consumer_read_but_nobody_sent_is_a_phantom():
    b = clean()
    b.poll("c1", (1, 2, "garbage"))
    verdict = check(b.ops)
    only(verdict, "phantom")
    assert verdict.anomalies["phantom"].examples[0]["read_by"] == "c1"


# -- a compacted topic (scenario `compact`): what the log cleaner may remove --

def compacted(retention_ms: int = 1000) -> Builder:
    b = Builder()
    b.op("harness", "ok", "meta", topic="t", partitions=1, config={
        "keys": 2, "topic_configs": {"cleanup.policy": "compact", "delete.retention.ms": retention_ms}})
    return b


def put(b: Builder, process: str, key: str, n: int, offset: int | None, outcome: str = "ok",
        tombstone: bool = False) -> str:
    """A keyed send to partition 0, as the workload writes it: value "<key>/<producer>-<n>"."""
    value = f"{key}/{process}-{n}"
    b.op(process, "invoke", "send", value=value, partition=0, key=key, tombstone=tombstone)
    if outcome == "ok":
        b.op(process, "ok", "send", value=value, partition=0, offset=offset)
    elif outcome in ("fail", "info"):
        b.op(process, outcome, "send", value=value, partition=0, error="RequestTimedOut")
    return value


def final_log(b: Builder, *records: tuple[int, str]) -> None:
    """The final read of partition 0: (offset, value) pairs, gaps allowed."""
    b.op("final", "ok", "final", log_start={0: 0}, records={0: [list(r) for r in records]})


def test_a_compacted_log_keeping_each_keys_latest_write_is_valid():
    b = compacted()
    a0, a1, b2 = put(b, "p0", "a", 0, 0), put(b, "p0", "a", 1, 1), put(b, "p0", "b", 2, 2)
    a3 = put(b, "p1", "a", 0, 3)
    tomb = put(b, "p0", "b", 3, 4, tombstone=True)  # too recent to go: must be there
    won = put(b, "p0", "a", 4, None, outcome="info")  # unacknowledged, but written: it wins
    b.poll("c0", (0, 0, a0), (0, 1, a1), (0, 2, b2))  # read before the cleaner removed them
    final_log(b, (3, a3), (4, tomb), (5, won))  # a3 kept beside a newer value: not cleaned yet
    verdict = check(b.ops)
    assert verdict.valid, verdict.summary_lines()
    s = verdict.stats
    assert (s["compacted_away"], s["superseded"], s["expired"], s["keys"], s["keys_in_final"]) == (3, 3, 0, 2, 2)
    assert "compaction: 2 keys, 1 tombstones acknowledged; 3 acknowledged writes" in "\n".join(
        verdict.summary_lines())


def test_a_keys_latest_acknowledged_value_missing_is_lost():
    b = compacted()
    a0, a1 = put(b, "p0", "a", 0, 0), put(b, "p0", "a", 1, 1)
    other = put(b, "p0", "b", 2, 2)
    final_log(b, (0, a0), (2, other))  # a1 gone but the older a0 kept: not compaction
    verdict = check(b.ops)
    only(verdict, "lost")
    example = verdict.anomalies["lost"].examples[0]
    assert example["value"] == a1 and example["latest_acked_of_key"] is True
    assert example["why"] == "an older record of its key is kept"
    b.ops.pop()
    final_log(b, (2, other))  # nothing of key a at all, and no tombstone: both values lost
    verdict = check(b.ops)
    only(verdict, "lost")
    assert verdict.anomalies["lost"].count == 2
    assert {e["why"] for e in verdict.anomalies["lost"].examples} == {"nothing of its key after it"}
    # a consumer that read a1 before it went read something compaction does not explain
    b.poll("c0", (0, 1, a1))
    assert check(b.ops).anomalies["uncommitted_read"].count == 1


def test_an_older_value_missing_under_a_newer_one_is_valid():
    b = compacted()
    put(b, "p0", "a", 0, 0)
    newer = put(b, "p1", "a", 0, 1)
    b.poll("c0", (0, 0, "a/p0-0"))
    final_log(b, (1, newer))
    verdict = check(b.ops)
    assert verdict.valid and verdict.stats["superseded"] == 1, verdict.summary_lines()


def test_an_expired_tombstones_key_may_be_absent_and_a_fresh_ones_may_not():
    def history(retention_ms: int, kept: tuple = ()) -> Builder:
        b = compacted(retention_ms)
        put(b, "p0", "a", 0, 0)
        put(b, "p0", "a", 1, 1, tombstone=True)
        b.t += 2.0  # the end comes 2 s after the tombstone
        final_log(b, *kept, (2, put(b, "p0", "b", 2, 2)))
        return b
    verdict = check(history(1000).ops)  # delete.retention.ms 1 s: the tombstone may go, and the key
    assert verdict.valid and verdict.stats["expired"] == 2, verdict.summary_lines()
    verdict = check(history(5000).ops)  # 5 s: the tombstone must still be there
    only(verdict, "lost")
    assert verdict.anomalies["lost"].count == 2
    # the tombstone gone but the value it deleted still there: a deleted value came back
    verdict = check(history(1000, kept=((0, "a/p0-0"),)).ops)
    only(verdict, "lost")
    assert verdict.anomalies["lost"].examples[0]["value"] == "a/p0-1"


def test_a_tombstone_of_unknown_outcome_may_have_removed_the_writes_it_could_follow():
    b = compacted()
    b.op("p1", "invoke", "send", value="a/p1-0", partition=0, key="a", tombstone=True)  # never answered
    put(b, "p0", "a", 0, 0)  # another producer's write: the tombstone may have landed after it
    b.t += 2.0
    final_log(b)
    assert check(b.ops).valid
    b = compacted()
    b.op("p0", "invoke", "send", value="a/p0-0", partition=0, key="a", tombstone=True)
    put(b, "p0", "a", 1, 0)  # the same idempotent producer's later write comes after it
    b.t += 2.0
    final_log(b)
    only(check(b.ops), "lost")


def test_a_write_invoked_after_another_of_its_key_was_acknowledged_sits_at_a_higher_offset():
    b = compacted()
    first = put(b, "p0", "a", 0, 5)
    later = put(b, "p1", "a", 0, 3)  # invoked after p0's ack, yet at a lower offset
    final_log(b, (3, later), (5, first))
    verdict = check(b.ops)
    only(verdict, "reordered")
    example = verdict.anomalies["reordered"].examples[0]
    assert example["acked_first"] == first and example["invoked_later"] == later
