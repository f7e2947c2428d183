"""The worker side of a read: fetch exactly the offsets ``[start, end)`` of one partition and
yield them as Arrow record batches in the Kafka source's schema.

Runs inside Spark's Python workers on a pickled ``RangePartition``: it opens its own client
Consumer (assigned to the one partition, ``auto_offset_reset='none'`` so that a missing offset is
an error and never a silent jump), reads, and closes it.

``end`` is at most the high watermark seen when the range was planned, so every offset in the
range was committed and stays readable, unless retention deleted it meanwhile. Data loss is a
range start below the log start offset (OFFSET_OUT_OF_RANGE) or a jump in offsets while the log
start offset has passed them: with ``failOnDataLoss=true`` the task fails with DataLossError,
otherwise the lost offsets are skipped and logged.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import pyarrow as pa

from raftka.client import Consumer, TopicPartition
from raftka.client.errors import OffsetOutOfRangeError

from raftka.spark.options import MAX_PARTITION_FETCH_BYTES, MAX_POLL_RECORDS
from raftka.spark.schema import arrow_schema

log = logging.getLogger(__name__)

POLL_WAIT_MS = 500  # one poll's wait; the range's own deadline is poll_timeout_ms without progress


class DataLossError(RuntimeError):
    """Offsets a query was to read are gone (retention, a deleted topic) and failOnDataLoss=true."""


class ReadTimeoutError(TimeoutError):
    """A range made no progress for kafkaConsumer.pollTimeoutMs."""


@dataclass(frozen=True)
class ReadSettings:
    """What a worker needs besides the range (pickled with every partition)."""

    bootstrap_servers: str
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int
    consumer_configs: dict[str, Any] = field(default_factory=dict, repr=False)  # may hold the SASL password


def data_loss_message(what: str) -> str:
    return (f"{what}. Records were deleted (retention) or the topic was deleted before the query "
            "read them. If that is acceptable, set the option failOnDataLoss=false to skip them "
            "(a warning is logged); otherwise restart the query from an earlier checkpoint or "
            "with new startingOffsets.")


def report_data_loss(fail: bool, what: str) -> None:
    """Raise DataLossError (``fail``) or log a warning."""
    if fail:
        raise DataLossError(data_loss_message(what))
    log.warning("raftka: data loss, skipping (failOnDataLoss=false): %s", what)


def read_range(topic: str, partition: int, start: int, end: int, settings: ReadSettings
               ) -> Iterator[pa.RecordBatch]:
    """Arrow batches holding every record of ``topic``-``partition`` at offsets in [start, end),
    in offset order."""
    if end <= start:
        return
    tp = TopicPartition(topic, partition)
    schema = arrow_schema(settings.include_headers)
    configs = dict(settings.consumer_configs)
    configs.setdefault("client_id", "raftka-spark-reader")
    configs.setdefault("max_partition_fetch_bytes", MAX_PARTITION_FETCH_BYTES)
    consumer = Consumer(bootstrap_servers=settings.bootstrap_servers, auto_offset_reset="none",
                        enable_auto_commit=False, max_poll_records=MAX_POLL_RECORDS, **configs)
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        position = start
        progress_at = time.monotonic()
        while position < end:
            try:
                polled = consumer.poll(timeout_ms=POLL_WAIT_MS, max_records=MAX_POLL_RECORDS)
            except OffsetOutOfRangeError:
                log_start = consumer.beginning_offsets([tp])[tp]
                if log_start <= position:
                    raise  # not retention: let the error say what it is
                report_data_loss(settings.fail_on_data_loss,
                                 f"{topic}-{partition}: offsets [{position}, {min(log_start, end)}) are no "
                                 f"longer in the log (log start offset {log_start}); the query was to "
                                 f"read [{start}, {end})")
                position = min(log_start, end)
                if position < end:
                    consumer.seek(tp, position)
                progress_at = time.monotonic()
                continue
            records = polled.get(tp, [])
            if records:
                first = records[0].offset
                if first > position:
                    # A jump: lost to retention if the log start offset has passed it.
                    log_start = consumer.beginning_offsets([tp])[tp]
                    if log_start > position:
                        report_data_loss(settings.fail_on_data_loss,
                                         f"{topic}-{partition}: offsets [{position}, {min(first, end)}) "
                                         f"are no longer in the log (log start offset {log_start})")
                if records[-1].offset >= end:
                    records = [r for r in records if r.offset < end]
                if records:
                    yield _to_batch(records, topic, partition, schema, settings.include_headers)
                    position = records[-1].offset + 1
                else:
                    position = end
                progress_at = time.monotonic()
                continue
            # No record: offsets without records (control batches) still move the position.
            now_at = consumer.position(tp)
            if now_at > position:
                position = min(now_at, end)
                progress_at = time.monotonic()
            elif (time.monotonic() - progress_at) * 1000 > settings.poll_timeout_ms:
                raise ReadTimeoutError(
                    f"{topic}-{partition}: no record at offset {position} within "
                    f"kafkaConsumer.pollTimeoutMs={settings.poll_timeout_ms} ms while reading "
                    f"[{start}, {end}) (is the partition's leader available?)")
    finally:
        consumer.close()


def _to_batch(records: list[Any], topic: str, partition: int, schema: pa.Schema,
              include_headers: bool) -> pa.RecordBatch:
    n = len(records)
    columns = [
        pa.array([r.key for r in records], type=pa.binary()),
        pa.array([r.value for r in records], type=pa.binary()),
        pa.array([topic] * n, type=pa.string()),
        pa.array([partition] * n, type=pa.int32()),
        pa.array([r.offset for r in records], type=pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], type=schema.field("timestamp").type),
        pa.array([r.timestamp_type for r in records], type=pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records],
                                type=schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
