"""``RaftkaDataSource``: the PySpark data source registered as format ``raftka``.

    spark.dataSource.register(RaftkaDataSource)       # or spark.session.register(spark)
    df = (spark.read.format("raftka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

See docs/spark.md for the options, which are those of Spark's Kafka source.
"""
from __future__ import annotations

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    DataSourceStreamWriter, DataSourceWriter)
from pyspark.sql.types import StructType

from raftka.spark.options import InvalidOptionError, ReadOptions, WriteOptions
from raftka.spark.reader import RaftkaBatchReader, RaftkaStreamReader
from raftka.spark.schema import source_schema
from raftka.spark.writer import RaftkaBatchWriter, RaftkaStreamWriter, check_write_schema

FORMAT = "raftka"


def _include_headers(options: object) -> bool:
    raw = str(getattr(options, "get")("includeHeaders", "false")).strip().lower()  # type: ignore[misc]
    return raw == "true"


class RaftkaDataSource(DataSource):
    """Read committed records of Raftka topics (batch and streaming) and write rows to topics."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return source_schema(_include_headers(self.options))

    def _check_schema(self, schema: StructType) -> None:
        expected = self.schema()
        if schema.fieldNames() != expected.fieldNames():
            raise InvalidOptionError("schema", "the raftka source has a fixed schema (that of Spark's "
                                     f"Kafka source): {expected.simpleString()}; do not set one")

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        return RaftkaBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        return RaftkaStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidOptionError("mode", "a topic cannot be overwritten; use mode('append')")
        options = WriteOptions.parse(self.options)
        check_write_schema(schema, options)
        return RaftkaBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = WriteOptions.parse(self.options, streaming=True)
        check_write_schema(schema, options)
        return RaftkaStreamWriter(options)
