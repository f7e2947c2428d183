"""The rows the `raftka` source produces: the schema of Spark's own Kafka source.

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int[, headers array<struct<key: string, value: binary>>]

``headers`` is there only with ``includeHeaders=true``. ``timestampType`` is 0 for create time
(set by the producer) and 1 for log append time (set by the broker). The Arrow schema is the one
Spark expects from a Python data source returning Arrow batches (timestamps in microseconds,
UTC).
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField,
                               StructType, TimestampType)


def source_schema(include_headers: bool) -> StructType:
    """The schema as a Spark StructType (every field nullable, as in Spark's Kafka source)."""
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType(
            [StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the batches ``read()`` yields; equal to what Spark derives from
    ``source_schema`` (tests check it against pyspark's own conversion)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)
