"""The history of a chaos run: one JSON object per line (history.jsonl), in the order observed.

Every operation has ``index`` (0, 1, ...), ``time`` (seconds since the run started, monotonic
clock), ``process`` (who did it: ``p3`` a producer, ``c1`` a consumer, ``nemesis``, ``final``),
``type`` and ``f``:

| type | meaning |
|---|---|
| invoke | the operation started |
| ok | it completed and took effect |
| fail | it completed and certainly did not take effect |
| info | the outcome is unknown (timeout, connection lost after sending) |

| f | fields |
|---|---|
| meta | ``topic``, ``partitions``, ``seed``, ``scenario``, ``config``: once, first |
| send | ``value`` and ``partition``; ok adds ``offset``; fail/info add ``error`` |
| poll | ok only: ``records`` = [[partition, offset, value], ...] a consumer returned |
| commit | ``group``, ``offsets`` {partition: offset}; ok = the coordinator accepted it |
| committed | ok only: ``group``, ``offsets`` {partition: offset} read back (OffsetFetch), ``invoked_at`` |
| fault / heal | nemesis: ``name``, ``detail`` (targets), ``healable``; heal ends the fault of the same ``name`` |
| healthy | nemesis, ok: every partition led with a full ISR again, ``after_heal_s`` after the heal |
| reassign | process ``reassigner`` (chaos/nemesis.py), with ``seed``: ``action`` start (``partition``,
|       | ``from``, ``to``), cancel (``partition``, ``original``), finish (``partition``, ``replicas``);
|       | ok = accepted (finish: seen done), fail = refused (``error``), info = unknown (``error``)
| replicas | process ``final``, ok: ``replicas`` {partition: [broker, ...]} once the reassignments
|       | settled, ``reassigning`` {partition: target} of those still under way, ``waited_s``
| final | ok only: ``log_start`` {partition: offset}, ``records`` {partition: [[offset, value], ...]}: the
|       | whole log after the faults healed, read from the log start |
| sink_progress | process ``spark``: ok = a Spark micro-batch completed (``batch``, ``rows``, ``end``
|       | {partition: next offset}); info = the query failed and was started again (``error``) |
| sink | process ``spark``: ok = what Spark's output held at the end, ``records`` {partition:
|       | [[offset, value], ...]}, ``batches``, ``restarts``, ``caught_up``; fail = none (``error``) |

JSON turns partition keys into strings; the reader turns them back into ints.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

TYPES = ("invoke", "ok", "fail", "info")


class HistoryWriter:
    """Appends operations to a history file, thread-safe; ``time`` is taken here unless given."""

    def __init__(self, path: str | Path, *, start: float | None = None) -> None:
        self.path = Path(path)
        self.start = time.monotonic() if start is None else start
        self._file: IO[str] = open(self.path, "w", encoding="utf-8")
        self._lock = threading.Lock()
        self._index = 0

    def now(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.start

    def append(self, process: str, type: str, f: str, **fields: Any) -> dict[str, Any]:
        assert type in TYPES, type
        with self._lock:
            op = {"index": self._index, "time": round(fields.pop("time", self.now()), 6),
                  "process": process, "type": type, "f": f, **fields}
            self._index += 1
            self._file.write(json.dumps(op, separators=(",", ":")) + "\n")
        return op

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> "HistoryWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _int_keys(mapping: Any) -> Any:
    if isinstance(mapping, dict):
        return {int(k): v for k, v in mapping.items()}
    return mapping


def normalize(op: dict[str, Any]) -> dict[str, Any]:
    """Partition keys back to ints (JSON made them strings)."""
    for key in ("offsets", "log_start", "records", "replicas", "reassigning"):
        if key in op and isinstance(op[key], dict):
            op[key] = _int_keys(op[key])
    return op


def read_history(path: str | Path) -> list[dict[str, Any]]:
    """Every operation of a history file; a torn last line (a killed run) is skipped."""
    ops = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            line = line.strip()
            if not line:
                continue
            try:
                ops.append(normalize(json.loads(line)))
            except ValueError:
                if file.read(1):  # not the last line: the file is damaged, say where
                    raise ValueError(f"{path}:{number}: not a JSON line") from None
    return ops


def write_history(path: str | Path, ops: Iterable[dict[str, Any]]) -> None:
    """Write ops as a history file (tests build histories by hand with this)."""
    with open(path, "w", encoding="utf-8") as file:
        for op in ops:
            file.write(json.dumps(op, separators=(",", ":")) + "\n")


def iter_type(ops: Iterable[dict[str, Any]], f: str, type: str | None = None) -> Iterator[dict[str, Any]]:
    return (op for op in ops if op.get("f") == f and (type is None or op.get("type") == type))
