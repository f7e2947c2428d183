"""Raftka's PySpark data source (Spark 4), format ``raftka``, with the schema and options of
Spark's Kafka source. Reads stop at the high watermark (committed records only).

    from raftka.spark.session import local_session        # checks Java, registers the format
    spark = local_session()
    df = (spark.read.format("raftka").option("kafka.bootstrap.servers", servers)
          .option("subscribe", "events").load())

Modules: ``source`` (the DataSource), ``reader`` (batch and streaming planning), ``fetch``
(the worker's read of one offset range), ``writer``, ``options``, ``offsets``, ``schema``,
``metadata`` (driver-side cluster questions), ``session`` (local SparkSession, Java check),
``sink`` (a topic into Parquet exactly once: `raftka spark sink`, run by the chaos harness).
docs/spark.md has the details. Only the public client API (``client``) is used.
"""
from __future__ import annotations

from typing import Any

__all__ = ["RaftkaDataSource", "register", "local_session"]


def __getattr__(name: str) -> Any:
    # Lazy: importing spark.options in a worker should not pull in all of pyspark.sql.
    if name == "RaftkaDataSource":
        from raftka.spark.source import RaftkaDataSource
        return RaftkaDataSource
    if name in ("register", "local_session"):
        from raftka.spark import session
        return getattr(session, name)
    raise AttributeError(name)
