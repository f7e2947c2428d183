"""The checker: reads a history (chaos/history.py) and tests each invariant on its own.

The final read (the whole log of every partition, read after every fault healed) is the truth.
Checks, each with a count and the first examples:

- **lost**: a send acknowledged (ok) whose value is not in the final log.
- **duplicate**: one value at two or more offsets, in the final log or across consumer reads.
- **inconsistent_offsets**: one offset of a partition seen holding two different values, across
  acknowledgements, consumer reads and the final log.
- **reordered**: for one producer and one partition, two acknowledged values whose final offsets
  are in the opposite order of their sends (or whose acknowledged offsets are).
- **uncommitted_read**: a consumer returned a record whose value is not in the final log (it
  read data that was later truncated: past the high watermark, or from a deposed leader).
- **nonmonotonic_commits**: a partition's committed offset went back: successive commits of
  one consumer, or committed offsets read back (OffsetFetch) one after another in real time.
- **phantom**: the final log, or a consumer, returned a value that no producer ever sent
  (corruption; a keyed record's value is rebuilt with its stored key, so a changed key shows
  here too).

With a Spark sink (the ``sink`` op: the rows a Spark streaming query wrote to Parquet during the
run, read back after it caught up with the final log; ``raftka chaos run --spark``), its output
must equal the final log exactly:

- **sink_duplicate**: one (partition, offset) twice in Spark's output, or one value at two
  positions in it.
- **sink_gap**: a record of the final log missing from Spark's output.
- **sink_uncommitted**: a row of Spark's output that the final log does not hold at that
  partition and offset (Spark read a record above the high watermark, or one later truncated).

With reassignments (``reassign`` ops: chaos/nemesis.py's Reassigner moved partitions during the
run; the ``replicas`` op: every partition's replicas once they settled at the end):

- **reassignment**: a partition still being reassigned at the end, or whose replicas are not
  what the last accepted request asked for: the last target started, or the original replicas
  after a cancel. A request without an answer (info) may or may not have happened, so both
  outcomes are accepted after it; a refused one (fail) changes nothing.

On a compacted topic (``cleanup.policy`` with ``compact`` in the meta op's ``topic_configs``;
keyed sends carry ``key`` and ``tombstone``), the log cleaner may remove a record whose key has
a later record, and a tombstone ``delete.retention.ms`` after its first cleaning. A write absent
from the final log (``lost`` for an acknowledged one, ``uncommitted_read`` for one a consumer
read) is then legal only when (``CompactedLog.excuse``):

- no record of its key at a lower offset is still there: the cleaner removes a key's records
  oldest first, so an older one kept means this one did not go by compaction (a deleted value
  back after its tombstone went, too); and
- a record of its key at a higher offset is there (superseded; an unacknowledged write may be
  the one that won), or it is, or a later write of its key is, a tombstone invoked more than
  ``delete.retention.ms`` before the final read (the earliest it could have gone). A tombstone
  whose offset nobody saw (outcome unknown, never read) may be any later write of its key but
  for one its own producer sent before it (an idempotent producer's writes keep their order).

``reordered`` also holds each key to real time: a write acknowledged before another of its key
was invoked must sit at a lower offset. The lost examples say whether the write was its key's
latest acknowledged one (its value must be what the key reads as).

Writes whose outcome is unknown (info) or failed may be present or absent; they are only held
to the duplicate and offset checks. ``valid`` is true when every count is 0, a final read exists,
when the run had a Spark sink (``spark`` in the meta op), its output was collected and it
had caught up with the final log, and, when it had reassignments, the replicas were read at the end.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

EXAMPLES_MAX = 5
SINK_CHECKS = ("sink_duplicate", "sink_gap", "sink_uncommitted")
REASSIGNMENT_CHECKS = ("reassignment",)
CHECKS = ("lost", "duplicate", "inconsistent_offsets", "reordered", "uncommitted_read",
          "nonmonotonic_commits", "phantom") + SINK_CHECKS + REASSIGNMENT_CHECKS


@dataclass
class Anomalies:
    """One check's result: how many, and the first examples."""

    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def add(self, example: dict[str, Any]) -> None:
        self.count += 1
        if len(self.examples) < EXAMPLES_MAX:
            self.examples.append(example)

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "examples": self.examples}


@dataclass
class Verdict:
    """Result of ``check``: ``valid``, per-check anomalies, and counts of what was checked."""

    valid: bool
    anomalies: dict[str, Anomalies]
    stats: dict[str, Any]
    problems: list[str] = field(default_factory=list)  # why the history could not be checked fully

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "anomalies": {k: v.to_json() for k, v in self.anomalies.items()},
                "stats": self.stats, "problems": self.problems}

    def summary_lines(self) -> list[str]:
        lines = [f"verdict: {'VALID' if self.valid else 'INVALID'}"]
        s = self.stats
        lines.append(f"  sends: {s.get('sends', 0)} invoked, {s.get('acked', 0)} ok, {s.get('failed', 0)} fail, "
                     f"{s.get('unknown', 0)} info; final log: {s.get('final_records', 0)} records; "
                     f"consumer reads: {s.get('reads', 0)}; commits: {s.get('commits', 0)}")
        with_sink = "sink_records" in s
        if with_sink:
            lines.append(f"  spark sink: {s['sink_records']} rows in {s.get('sink_batches', 0)} micro-batches, "
                         f"{s.get('sink_restarts', 0)} query restarts")
        if "compacted_away" in s:
            lines.append(f"  compaction: {s['keys']} keys, {s['tombstones_acked']} tombstones acknowledged; "
                         f"{s['compacted_away']} acknowledged writes gone from the final log legally "
                         f"({s['superseded']} superseded, {s['expired']} by an expired tombstone); "
                         f"{s['keys_in_final']} keys in the final log")
        if "reassign_started" in s:
            lines.append(f"  reassignments: {s['reassign_started']} started, {s.get('reassign_cancelled', 0)} "
                         f"cancelled, {s.get('reassign_finished', 0)} seen finished, {s.get('reassign_refused', 0)} "
                         f"refused, {s.get('reassign_unknown', 0)} of unknown outcome (no answer, or another error)")
        for name in CHECKS:
            if name in SINK_CHECKS and not with_sink or name in REASSIGNMENT_CHECKS and "reassign_started" not in s:
                continue
            result = self.anomalies.get(name, Anomalies())
            mark = "ok " if result.count == 0 else "BAD"
            lines.append(f"  [{mark}] {name}: {result.count}")
            for example in result.examples[:2]:
                lines.append(f"        e.g. {example}")
        lines.extend(f"  problem: {p}" for p in self.problems)
        return lines


def check(ops: Iterable[dict[str, Any]]) -> Verdict:
    """Run every check over a history (a list of ops as chaos/history.py describes)."""
    ops = list(ops)
    anomalies = {name: Anomalies() for name in CHECKS}
    problems: list[str] = []

    invoked: dict[str, dict[str, Any]] = {}  # value -> its invoke
    acked: list[dict[str, Any]] = []  # ok sends
    outcome: dict[str, str] = {}
    reads: list[tuple[str, float, int, int, str]] = []  # (process, time, partition, offset, value)
    commits: list[dict[str, Any]] = []
    fetched: list[dict[str, Any]] = []
    final: dict[str, Any] | None = None
    sink: dict[str, Any] | None = None
    sink_failures: list[dict[str, Any]] = []
    expect_sink = False
    moves: list[dict[str, Any]] = []
    settled: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    for op in ops:
        f, kind = op.get("f"), op.get("type")
        if f == "reassign":
            moves.append(op)
        elif f == "replicas" and kind == "ok":
            settled = op
        elif f == "meta":
            meta = op
            expect_sink = bool(op.get("spark"))
        elif f == "sink":
            if kind == "ok":
                sink = op
            else:
                sink_failures.append(op)
        elif f == "send":
            if kind == "invoke":
                invoked[op["value"]] = op
            else:
                outcome[op["value"]] = kind
                if kind == "ok":
                    acked.append(op)
        elif f == "poll" and kind == "ok":
            for partition, offset, value in op.get("records", []):
                reads.append((op["process"], op["time"], int(partition), int(offset), value))
        elif f == "commit":
            commits.append(op)
        elif f == "committed" and kind == "ok":
            fetched.append(op)
        elif f == "final" and kind == "ok":
            final = op

    # The final log: value -> positions, (partition, offset) -> value.
    final_positions: dict[str, list[tuple[int, int]]] = defaultdict(list)
    final_at: dict[tuple[int, int], str] = {}
    final_records = 0
    if final is None:
        problems.append("no final read in the history: lost writes cannot be told apart")
    else:
        for partition, records in final.get("records", {}).items():
            for offset, value in records:
                final_positions[value].append((int(partition), int(offset)))
                final_at[int(partition), int(offset)] = value
                final_records += 1

    retention_ms = compacted_retention_ms(meta)
    compacted = None
    if final is not None and retention_ms is not None:
        compacted = CompactedLog(retention_ms, final["time"], invoked, outcome, acked, reads, final_positions)

    # lost
    excused: dict[str, int] = defaultdict(int)
    if final is not None:
        for op in acked:
            if op["value"] in final_positions:
                continue
            example = {"value": op["value"], "partition": op.get("partition"), "offset": op.get("offset"),
                       "acked_at": op["time"], "process": op["process"]}
            if compacted is not None:
                why = compacted.excuse(op["value"], op.get("offset"))
                if why in ("superseded", "expired"):
                    excused[why] += 1
                    continue
                example.update(compacted.describe(op["value"]), why=why)
            anomalies["lost"].add(example)

    # duplicate: a value at more than one offset, in the final log or across reads
    read_positions: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for _process, _t, partition, offset, value in reads:
        read_positions[value].add((partition, offset))
    for value in sorted(set(final_positions) | set(read_positions), key=str):
        in_final = sorted(set(final_positions.get(value, ())))
        in_reads = sorted(read_positions.get(value, ()))
        if len(in_final) > 1 or len(in_reads) > 1:
            anomalies["duplicate"].add({"value": value, "final_offsets": in_final, "read_offsets": in_reads})

    # inconsistent offsets: two values at one (partition, offset)
    seen_at: dict[tuple[int, int], dict[str, str]] = defaultdict(dict)  # position -> value -> first source
    for op in acked:
        if op.get("offset") is not None and op.get("offset", -1) >= 0:
            seen_at[int(op["partition"]), int(op["offset"])].setdefault(op["value"], f"ack by {op['process']}")
    for process, _t, partition, offset, value in reads:
        seen_at[partition, offset].setdefault(value, f"read by {process}")
    for position, value in final_at.items():
        seen_at[position].setdefault(value, "final log")
    for (partition, offset), values in sorted(seen_at.items()):
        if len(values) > 1:
            anomalies["inconsistent_offsets"].add({"partition": partition, "offset": offset, "values": values})

    # reordered: per producer and partition, acknowledged sends in send order
    by_producer: dict[tuple[str, int], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for op in acked:
        invoke = invoked.get(op["value"])
        order = invoke["index"] if invoke is not None else op["index"]
        by_producer[op["process"], int(op["partition"])].append((order, op))
    for (process, partition), sends in sorted(by_producer.items()):
        sends.sort(key=lambda pair: pair[0])
        previous: tuple[int, int, str] | None = None  # (final offset, ack offset, value)
        for _order, op in sends:
            positions = [o for p, o in final_positions.get(op["value"], ()) if p == partition]
            final_offset = min(positions) if positions else None
            ack_offset = op.get("offset", -1)
            if previous is not None:
                prev_final, prev_ack, prev_value = previous
                if ((final_offset is not None and prev_final is not None and final_offset <= prev_final) or
                        (ack_offset >= 0 and prev_ack >= 0 and ack_offset <= prev_ack)):
                    anomalies["reordered"].add({"process": process, "partition": partition,
                                                "sent_first": prev_value, "at": [prev_final, prev_ack],
                                                "sent_later": op["value"], "later_at": [final_offset, ack_offset]})
            if final_offset is not None or ack_offset >= 0:
                previous = (final_offset if final_offset is not None else -1, ack_offset, op["value"])
    if compacted is not None:
        for example in compacted.real_time_order():
            anomalies["reordered"].add(example)

    # uncommitted read: a consumer saw a value the final log does not hold (and compaction did
    # not remove); a value nobody sent is a phantom read
    if final is not None:
        for process, t, partition, offset, value in reads:
            if value not in invoked:
                anomalies["phantom"].add({"value": value, "read_by": process, "partition": partition,
                                          "offset": offset, "read_at": t})
            elif value not in final_positions and (
                    compacted is None or compacted.excuse(value, offset) not in ("superseded", "expired")):
                anomalies["uncommitted_read"].add({"process": process, "partition": partition, "offset": offset,
                                                   "value": value, "read_at": t})

    # non-monotonic committed offsets
    last_commit: dict[tuple[str, str, int], tuple[int, float]] = {}
    for op in sorted((c for c in commits if c.get("type") == "ok"), key=lambda c: c["time"]):
        for partition, offset in op.get("offsets", {}).items():
            key = (op["process"], op.get("group", ""), int(partition))
            before = last_commit.get(key)
            if before is not None and offset < before[0]:
                anomalies["nonmonotonic_commits"].add({"process": op["process"], "group": op.get("group"),
                                                       "partition": int(partition), "committed": before[0],
                                                       "then": offset, "at": op["time"]})
            last_commit[key] = (offset, op["time"])
    # Two reads that did not overlap in time must not go back (``invoked_at``: when the read
    # started; without it the read is taken as instantaneous).
    spans = []
    for op in fetched:
        started = op.get("invoked_at", op["time"])
        spans.append((started, op["time"], op))
    spans.sort(key=lambda s: s[1])
    highest: dict[tuple[str, int], tuple[int, float]] = {}  # (group, partition) -> (offset, completed)
    for started, completed, op in spans:
        for partition, offset in op.get("offsets", {}).items():
            if offset is None or offset < 0:
                continue
            key = (op.get("group", ""), int(partition))
            before = highest.get(key)
            if before is not None and offset < before[0] and before[1] < started:
                anomalies["nonmonotonic_commits"].add({"process": op["process"], "group": op.get("group"),
                                                       "partition": int(partition), "read_before": before[0],
                                                       "read_now": offset, "at": completed})
            if before is None or offset >= before[0]:
                highest[key] = (offset, completed)

    # phantom: in the final log but never sent
    if final is not None:
        for value, positions in final_positions.items():
            if value not in invoked:
                anomalies["phantom"].add({"value": value, "positions": sorted(positions)})

    if sink is not None:
        check_sink(sink, final, final_at, anomalies, problems)
    elif expect_sink or sink_failures:
        why = "; ".join(str(op.get("error", "?")) for op in sink_failures) or "no sink op in the history"
        problems.append(f"the run had a Spark sink but its output could not be checked: {why}")

    if moves:
        check_reassignments(moves, settled, anomalies, problems)

    stats = {"sends": len(invoked), "acked": len(acked),
             "failed": sum(1 for k in outcome.values() if k == "fail"),
             "unknown": sum(1 for k in outcome.values() if k == "info") + sum(1 for v in invoked if v not in outcome),
             "final_records": final_records, "reads": len(reads),
             "commits": sum(1 for c in commits if c.get("type") == "ok"), "committed_reads": len(fetched)}
    sink_ok = True
    if sink is not None:
        stats["sink_records"] = sum(len(rows) for rows in sink.get("records", {}).values())
        stats["sink_batches"] = sink.get("batches", 0)
        stats["sink_restarts"] = sink.get("restarts", 0)
        sink_ok = sink.get("caught_up", True) is not False
    elif expect_sink or sink_failures:
        sink_ok = False
    if compacted is not None:
        stats.update(compacted.stats(), compacted_away=sum(excused.values()), superseded=excused["superseded"],
                     expired=excused["expired"])
    if moves:
        for action, key in (("start", "reassign_started"), ("cancel", "reassign_cancelled"),
                            ("finish", "reassign_finished")):
            stats[key] = sum(1 for op in moves if op.get("action") == action and op.get("type") == "ok")
        stats["reassign_refused"] = sum(1 for op in moves if op.get("type") == "fail")
        stats["reassign_unknown"] = sum(1 for op in moves if op.get("type") == "info")
    valid = (final is not None and sink_ok and (settled is not None or not moves)
             and all(a.count == 0 for a in anomalies.values()))
    return Verdict(valid, anomalies, stats, problems)


def compacted_retention_ms(meta: dict[str, Any] | None) -> int | None:
    """delete.retention.ms of the run's topic when it is compacted (from the meta op's workload
    config), else None."""
    topic_configs = ((meta or {}).get("config") or {}).get("topic_configs") or {}
    if "compact" not in str(topic_configs.get("cleanup.policy", "")).split(","):
        return None
    return int(topic_configs.get("delete.retention.ms", 86_400_000))  # Kafka's default: a day


class CompactedLog:
    """What the log cleaner may have removed from the final log of a compacted topic: keys come
    from the send invokes; a write's offset from its acknowledgement, else the final log, else
    a consumer read. ``end``: the final read's time (run seconds)."""

    def __init__(self, retention_ms: int, end: float, invoked: dict[str, dict[str, Any]], outcome: dict[str, str],
                 acked: list[dict[str, Any]], reads: list[tuple[str, float, int, int, str]],
                 final_positions: dict[str, list[tuple[int, int]]]) -> None:
        self.invoked = invoked
        self.acked = {op["value"]: op for op in acked}
        self.offset_of: dict[str, int] = {}
        for op in acked:
            if op.get("offset") is not None and op["offset"] >= 0:
                self.offset_of[op["value"]] = int(op["offset"])
        for value, positions in final_positions.items():
            if positions:
                self.offset_of.setdefault(value, min(o for _, o in positions))
        self.seen_offset = dict(self.offset_of)  # for tombstones: where a consumer saw them counts too
        for _process, _t, _partition, offset, value in reads:
            self.seen_offset.setdefault(value, offset)
        self.present: dict[str, list[int]] = defaultdict(list)  # key -> offsets in the final log
        for value, positions in final_positions.items():
            key = self.key(value)
            if key is not None:
                self.present[key].extend(o for _, o in positions)
        for offsets in self.present.values():
            offsets.sort()
        # Tombstones that may have gone: invoked more than delete.retention.ms before the end.
        horizon = end - retention_ms / 1000
        self.expired: set[str] = set()
        self.expired_at: dict[str, int] = {}  # key -> highest offset of such a tombstone
        self.expired_unseen: dict[str, list[dict[str, Any]]] = defaultdict(list)  # their invokes, offset unknown
        for value, op in invoked.items():
            if not op.get("tombstone") or op["time"] > horizon or outcome.get(value) == "fail":
                continue
            self.expired.add(value)
            offset = self.seen_offset.get(value)
            if offset is None:
                self.expired_unseen[op["key"]].append(op)
            else:
                self.expired_at[op["key"]] = max(offset, self.expired_at.get(op["key"], -1))
        self.latest_acked: dict[str, str] = {}  # key -> its acknowledged write at the highest offset
        for value, offset in sorted(self.offset_of.items(), key=lambda item: item[1]):
            if value in self.acked and self.key(value) is not None:
                self.latest_acked[self.key(value)] = value

    def key(self, value: str) -> str | None:
        op = self.invoked.get(value)
        return op.get("key") if op is not None else None

    def excuse(self, value: str, offset: int | None) -> str | None:
        """Why a write absent from the final log may be: "superseded" or "expired"; else why not
        ("an older record of its key is kept", "nothing of its key after it")."""
        key = self.key(value)
        if key is None:
            return "unkeyed"
        at = -1 if offset is None or offset < 0 else offset
        present = self.present.get(key, [])
        if present and at >= 0 and present[0] < at:
            return "an older record of its key is kept"
        if present and present[-1] > at:
            return "superseded"
        if value in self.expired or self.expired_at.get(key, -1) > at:
            return "expired"
        writer = self.invoked[value]
        if any(t["process"] != writer["process"] or t["index"] > writer["index"] for t in self.expired_unseen[key]):
            return "expired"
        return "nothing of its key after it"

    def describe(self, value: str) -> dict[str, Any]:
        key = self.key(value)
        return {"key": key, "tombstone": bool(self.invoked[value].get("tombstone")),
                "latest_acked_of_key": self.latest_acked.get(key) == value,
                "key_in_final_at": self.present.get(key, [])[-5:]}

    def real_time_order(self) -> list[dict[str, Any]]:
        """Per key: a write acknowledged before another was invoked sits at a lower offset
        (offsets from acknowledgements and the final log)."""
        by_key: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for value, offset in self.offset_of.items():
            key = self.key(value)
            if key is not None:
                by_key[key].append((offset, value))
        found = []
        for key, writes in sorted(by_key.items()):
            earliest: tuple[float, str, int] | None = None  # the earliest ack among higher offsets
            for offset, value in sorted(writes, reverse=True):
                if earliest is not None and self.invoked[value]["time"] > earliest[0]:
                    found.append({"key": key, "acked_first": earliest[1], "acked_at": earliest[0],
                                  "at_offset": earliest[2], "invoked_later": value,
                                  "invoked_at": self.invoked[value]["time"], "at_lower_offset": offset})
                ack = self.acked.get(value)
                if ack is not None and (earliest is None or ack["time"] < earliest[0]):
                    earliest = (ack["time"], value, offset)
        return found

    def stats(self) -> dict[str, Any]:
        keys = {op.get("key") for op in self.invoked.values() if op.get("key") is not None}
        return {"keys": len(keys), "keys_in_final": len(self.present),
                "tombstones_acked": sum(1 for v in self.acked if self.invoked.get(v, {}).get("tombstone"))}


def check_sink(sink: dict[str, Any], final: dict[str, Any] | None, final_at: dict[tuple[int, int], str],
               anomalies: dict[str, Anomalies], problems: list[str]) -> None:
    """Spark's output (``sink["records"]`` {partition: [[offset, value], ...]}) against the final
    log: sink_duplicate, sink_gap, sink_uncommitted."""
    if final is None:
        return  # nothing to compare with; the missing final read is reported already
    if sink.get("caught_up") is False:
        problems.append(f"the Spark sink had not caught up with the final log when it was stopped "
                        f"(its last micro-batch ended at {sink.get('end')}, high watermarks "
                        f"{sink.get('high_watermark')}): its gaps may only be lag")
    rows_at: dict[tuple[int, int], list[str]] = defaultdict(list)
    positions_of: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for partition, rows in sink.get("records", {}).items():
        for offset, value in rows:
            rows_at[int(partition), int(offset)].append(value)
            positions_of[value].add((int(partition), int(offset)))
    for (partition, offset), values in sorted(rows_at.items()):
        if len(values) > 1:
            anomalies["sink_duplicate"].add({"partition": partition, "offset": offset, "values": values})
    for value, positions in sorted(positions_of.items(), key=lambda item: str(item[0])):
        if len(positions) > 1:
            anomalies["sink_duplicate"].add({"value": value, "positions": sorted(positions)})
    for (partition, offset), value in sorted(final_at.items()):
        if value not in rows_at.get((partition, offset), ()):
            anomalies["sink_gap"].add({"partition": partition, "offset": offset, "value": value})
    for (partition, offset), values in sorted(rows_at.items()):
        for value in sorted(set(values), key=str):
            if final_at.get((partition, offset)) != value:
                anomalies["sink_uncommitted"].add({"partition": partition, "offset": offset, "value": value,
                                                   "final_log": final_at.get((partition, offset))})


def reassignment_expectations(moves: Iterable[dict[str, Any]]) -> dict[int, set[tuple[int, ...]]]:
    """{partition: the replica lists it may end with} after these ``reassign`` ops, in order."""
    accepted: dict[int, set[tuple[int, ...]]] = {}
    for op in moves:
        action, kind = op.get("action"), op.get("type")
        if action not in ("start", "cancel") or kind == "fail":
            continue
        partition = int(op["partition"])
        outcome = tuple(op["to"] if action == "start" else op["original"])
        if kind == "ok":
            accepted[partition] = {outcome}
        else:  # unanswered: it may have happened or not
            before = accepted.get(partition)
            if before is None:  # the first move of this partition started from its own replicas
                before = {tuple(op["from"] if action == "start" else op["original"])}
            accepted[partition] = before | {outcome}
    return accepted


def check_reassignments(moves: list[dict[str, Any]], settled: dict[str, Any] | None,
                        anomalies: dict[str, Anomalies], problems: list[str]) -> None:
    """The ``reassignment`` check: each moved partition ended on the replicas last asked for."""
    if settled is None:
        problems.append("the run moved partitions but the replicas were not read at the end (no replicas op)")
        return
    final = {int(p): list(r) for p, r in (settled.get("replicas") or {}).items()}
    still = {int(p): t for p, t in (settled.get("reassigning") or {}).items()}
    for partition, accepted in sorted(reassignment_expectations(moves).items()):
        replicas = final.get(partition)
        wanted = sorted([list(r) for r in accepted])
        if partition in still:
            anomalies["reassignment"].add({"partition": partition, "still_reassigning_to": still[partition],
                                           "replicas": replicas, "expected": wanted,
                                           "after_s": settled.get("waited_s")})
        elif replicas is None or tuple(replicas) not in accepted:
            anomalies["reassignment"].add({"partition": partition, "replicas": replicas, "expected": wanted})
