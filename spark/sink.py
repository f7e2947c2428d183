"""A topic streamed into Parquet, exactly once, with each micro-batch reported as it completes.

    raftka spark sink --topic events --output DIR                 # until Ctrl-C or SIGTERM
    raftka spark sink --topic events --output DIR --rows-out rows.json

The query reads ``partition``, ``offset`` and ``value`` (as a string) of every record of the
topic from the earliest offset (format ``raftka``: committed records only) and appends them to
Parquet in ``OUTPUT/parquet`` with its checkpoint in ``OUTPUT/checkpoint``: stopped and started
again with the same output, it goes on where it was, with no gap and no duplicate.

``run`` prints (through ``emit``) one JSON object per event: ``started``, ``batch`` (batch id,
input rows, end offsets ``{partition: next offset}``), ``restart`` (the query failed and was
started again from its checkpoint: the at-least-once source plus the checkpoint keep the output
exactly once), ``stopped``. The chaos harness (``raftka chaos run --spark``) runs this command
in its own process during faults and compares the rows it reads back with the committed log.

``read_back`` reads the output with ``spark.read.parquet``, which honours the file sink's
``_spark_metadata`` log: files of batches that were aborted (a stop or a crash mid-batch) are
not part of the output, while reading the directory's files directly would count them.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable

OUTPUT_SCHEMA = "partition INT, offset BIGINT, value STRING"
POLL_S = 0.5  # how often the query's progress is looked at
IDLE_WAIT_S = 10.0  # at stop: longest wait for the running micro-batch to finish first
QUERY_NAME = "raftka_parquet_sink"


def parquet_dir(output: str) -> str:
    return os.path.join(output, "parquet")


def checkpoint_dir(output: str) -> str:
    return os.path.join(output, "checkpoint")


def start_query(spark: Any, bootstrap_servers: str, topic: str, output: str, *, trigger_ms: int = 1000,
                options: dict[str, str] | None = None) -> Any:
    """Start the streaming query topic -> Parquet (from its checkpoint when there is one)."""
    from pyspark.sql import functions as F
    reader = (spark.readStream.format("raftka")
              .option("kafka.bootstrap.servers", bootstrap_servers)
              .option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    rows = reader.load().select("partition", "offset", F.col("value").cast("string").alias("value"))
    return (rows.writeStream.format("parquet").outputMode("append")
            .option("path", parquet_dir(output))
            .option("checkpointLocation", checkpoint_dir(output))
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .queryName(QUERY_NAME).start())


def end_offsets(progress: Any) -> dict[int, int] | None:
    """``{partition: next offset}`` a progress report says its batch read up to (one topic)."""
    sources = progress.get("sources") or []
    if not sources:
        return None
    end = sources[0].get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    if not end:
        return None
    return {int(p): int(o) for parts in end.values() for p, o in parts.items()}


def _first_line(error: Any) -> str:
    text = str(error).strip()
    return (text.splitlines() or ["?"])[0][:300]


def stop_between_batches(query: Any, idle_wait_s: float = IDLE_WAIT_S) -> None:
    """Stop ``query``, preferably while no micro-batch runs: stopping one mid-batch interrupts
    its tasks, which Spark reports as an ERROR with a stack trace (harmless: the batch is
    aborted and redone from the checkpoint). Bounded by ``idle_wait_s``."""
    deadline = time.monotonic() + idle_wait_s
    try:
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.05)
    except Exception:  # the status is only a hint; stop() below is what matters
        pass
    query.stop()


def run(spark: Any, bootstrap_servers: str, topic: str, output: str, stop: threading.Event,
        emit: Callable[[dict[str, Any]], None], *, trigger_ms: int = 1000, restarts_max: int = 50,
        restart_backoff_s: float = 2.0, options: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the query until ``stop`` is set; a query that fails is started again from its
    checkpoint (at most ``restarts_max`` times, then RuntimeError). Returns the batches, restarts
    and last end offsets."""
    began = time.monotonic()
    query = start_query(spark, bootstrap_servers, topic, output, trigger_ms=trigger_ms, options=options)
    emit({"event": "started", "after_s": round(time.monotonic() - began, 2)})
    restarts = 0
    batches: set[int] = set()
    last_batch = -1
    last_end: dict[int, int] = {}
    seen_at = ""  # the newest progress report handled (ISO 8601 UTC timestamps sort as text)
    try:
        while not stop.is_set():
            for progress in query.recentProgress:  # the last reports, oldest first
                stamp = str(progress.get("timestamp") or "")
                if stamp <= seen_at:
                    continue
                seen_at = stamp
                batch = progress.get("batchId", -1)
                end = end_offsets(progress) or last_end
                # A restarted run may report its last batch again, and an idle trigger reports
                # progress without a new batch: only new batches or new end offsets count.
                if batch < last_batch or (batch, end) == (last_batch, last_end):
                    continue
                last_batch, last_end = batch, end
                batches.add(batch)
                emit({"event": "batch", "batch": batch, "rows": progress.get("numInputRows", 0), "end": end})
            if not query.isActive:
                error = query.exception()
                if stop.is_set():
                    break
                if restarts >= restarts_max:
                    raise RuntimeError(f"the query failed {restarts + 1} times; last: {_first_line(error)}")
                restarts += 1
                emit({"event": "restart", "restarts": restarts, "error": _first_line(error)})
                stop.wait(restart_backoff_s)
                if stop.is_set():
                    break
                query = start_query(spark, bootstrap_servers, topic, output, trigger_ms=trigger_ms,
                                    options=options)
                continue
            stop.wait(POLL_S)
    finally:
        if query.isActive:
            stop_between_batches(query)
    return {"batches": len(batches), "restarts": restarts, "last_batch": last_batch, "end": last_end}


def read_back(spark: Any, output: str) -> dict[int, list[list[Any]]]:
    """Every row of the output as ``{partition: [[offset, value], ...]}`` in offset order,
    duplicates kept (so a checker can see them)."""
    path = parquet_dir(output)
    if not os.path.isdir(path):
        return {}
    rows = spark.read.schema(OUTPUT_SCHEMA).parquet(path).collect()
    out: dict[int, list[list[Any]]] = {}
    for row in rows:
        out.setdefault(int(row.partition), []).append([int(row.offset), row.value])
    for records in out.values():
        records.sort(key=lambda r: r[0])
    return out


def write_rows(path: str, topic: str, records: dict[int, list[list[Any]]], summary: dict[str, Any]) -> None:
    """``records`` and the run's summary as one JSON file, written atomically."""
    body = {"topic": topic, "rows": sum(len(r) for r in records.values()),
            "records": {str(p): r for p, r in sorted(records.items())}, **summary}
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as file:
        json.dump(body, file, separators=(",", ":"))
    os.replace(tmp, path)
