"""Batch and streaming writers of the `raftka` data source: DataFrame rows -> records.

Columns, as Spark's Kafka sink: ``value`` (binary or string, required), ``key`` (binary or
string), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int; otherwise
the producer's partitioner picks one) and ``headers`` (array<struct<key: string, value:
binary>>). Other columns are refused, so a misspelt name does not vanish silently.

Each task sends its rows with one idempotent producer (acks=all), then flushes and checks every
acknowledgement: a task returns only when all its rows are acknowledged, and raises otherwise,
so Spark fails (or retries) it. A retried task may write its rows again: like Spark's Kafka
sink, the writer is at-least-once across task retries (the idempotent producer removes
duplicates only within one producer session).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, List, Optional

import pyarrow as pa
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from raftka.client import Producer

from raftka.spark.options import InvalidOptionError, WriteOptions

log = logging.getLogger(__name__)

WRITABLE = ("key", "value", "topic", "partition", "headers")


class WriteFailedError(RuntimeError):
    """Some rows of a task were not acknowledged by the cluster; the task fails."""


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task wrote."""

    records: int


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse a DataFrame the writer cannot send, before any task runs."""
    names = {f.name: f.dataType for f in schema.fields}
    extra = sorted(set(names) - set(WRITABLE))
    if extra:
        raise InvalidOptionError("schema", f"columns {extra} cannot be written; the raftka writer takes "
                                 "value (required), key, topic, partition, headers")
    if "value" not in names:
        raise InvalidOptionError("schema", "a 'value' column (binary or string) is required")
    for col in ("key", "value"):
        if col in names and not isinstance(names[col], (BinaryType, StringType)):
            raise InvalidOptionError("schema", f"column '{col}' must be binary or string, got "
                                               f"{names[col].simpleString()}")
    if "topic" in names and not isinstance(names["topic"], StringType):
        raise InvalidOptionError("schema", f"column 'topic' must be string, got {names['topic'].simpleString()}")
    if "partition" in names and not isinstance(names["partition"], IntegerType):
        raise InvalidOptionError("schema", "column 'partition' must be int, got "
                                           f"{names['partition'].simpleString()}")
    if "headers" in names:
        t = names["headers"]
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType.fields[0].dataType, StringType)
              and isinstance(t.elementType.fields[1].dataType, (BinaryType, StringType)))
        if not ok:
            raise InvalidOptionError("schema", "column 'headers' must be array<struct<key: string, "
                                               f"value: binary>>, got {t.simpleString()}")
    if options.topic is None and "topic" not in names:
        raise InvalidOptionError("topic", "no topic: set the option 'topic' or add a 'topic' column")


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value  # type: ignore[return-value]
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)  # type: ignore[arg-type]


def write_batches(batches: Iterator[pa.RecordBatch], options: WriteOptions) -> WriteResult:
    """Send every row of ``batches``; return once all are acknowledged, else raise
    WriteFailedError naming how many failed and the first error."""
    configs = dict(options.producer_configs)
    configs.setdefault("client_id", "raftka-spark-writer")
    producer = Producer(bootstrap_servers=options.bootstrap_servers, acks="all",
                        enable_idempotence=True, **configs)
    sent = 0
    failures: list[BaseException] = []
    try:
        for batch in batches:
            cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            values = cols["value"]
            keys = cols.get("key")
            topics = cols.get("topic")
            parts = cols.get("partition")
            headers = cols.get("headers")
            for i in range(batch.num_rows):
                topic = options.topic or (topics[i] if topics else None)
                if not topic:
                    raise WriteFailedError(f"row {sent + i}: no topic (null 'topic' column and no "
                                           "'topic' option)")
                key = _bytes(keys[i]) if keys else None
                value = _bytes(values[i])
                if key is None and value is None:
                    raise WriteFailedError(f"row {sent + i}: both key and value are null")
                hdrs = ([(h["key"], _bytes(h["value"])) for h in headers[i]]
                        if headers and headers[i] else None)
                try:
                    future = producer.send(topic, value=value, key=key, headers=hdrs,
                                           partition=parts[i] if parts else None)
                except Exception as error:
                    raise WriteFailedError(f"row {sent + i} could not be sent to {topic}: "
                                           f"{type(error).__name__}: {error}; the task fails") from error
                future.add_errback(failures.append)
            sent += batch.num_rows
        unflushed = producer.flush(timeout=options.flush_timeout_ms / 1000)
    finally:
        left = producer.close(timeout=30)
    errors = failures or [e for _, e in unflushed] or [e for _, e in left]
    if errors:
        raise WriteFailedError(f"{len(failures) or len(errors)} of {sent} records were not acknowledged "
                               f"(first error: {type(errors[0]).__name__}: {errors[0]}); the task fails "
                               "so no row is dropped silently")
    return WriteResult(sent)


class RaftkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("raftka").mode("append").save()``."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(iterator, self.options)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("raftka: wrote %d records", total)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        done = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.warning("raftka: write failed; %d records of finished tasks were acknowledged", done)


class RaftkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("raftka")``: each micro-batch's rows, at least once."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(iterator, self.options)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, WriteResult))
        log.info("raftka: micro-batch %d wrote %d records", batchId, total)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        log.warning("raftka: micro-batch %d failed to write", batchId)
