"""The asyncio producer: ``await producer.send(...)`` returns an asyncio future of RecordMetadata.

The application side, as Kafka's Java client splits KafkaProducer from its Sender: the config,
serializers, partitioner, appending records to the accumulator (accumulator.py), ``flush``,
``close`` and the metadata calls. The I/O thread's send loop - draining ready batches into
Produce requests, producer id and sequences (idempotence), retries, order per partition,
``delivery_timeout_ms`` - is the Sender's (sender.py, whose module doc has those rules). The
producer creates one Sender, starts it in ``start`` (on the first send at the latest) and stops
it in ``close``; it hands the sender the accumulator, the Cluster, the config and two callbacks,
and waits on the sender's ``batch_done`` in ``flush``.

Threads: the hand-over API. The producer lives on one event loop (the I/O thread, ``_loop``).
Three members may be used from any other thread, and the blocking Producer (client/producer.py)
uses only these on the caller's thread:

    closing       a bool, set once by ``close()``; read without a lock (a stale False is
                  harmless: ``try_append`` then fails in the accumulator, or the record is
                  failed by close with the rest)
    serialize()   pure: the configured serializers and the header check
    try_append()  appends to the partition's open batch without waiting, or returns None (then
                  the caller hands the record to the I/O thread, which calls ``append_waiting``)

Everything else runs on the I/O thread, the sender included. What ``try_append`` shares with the
I/O thread is guarded so: the accumulator's queues, open batches and ``buffer_used`` by
``accumulator.lock`` (a plain Lock, taken once per record, see accumulator.py); the sender is
woken through ``loop.call_soon_threadsafe``; ``producer_id`` (the sender's, copied here through
its ``on_producer_id`` callback), the partition caches (``_tps``, ``_sticky_tps``) and the
metadata it reads are replaced or updated one dict or attribute operation at a time, each
atomic under the GIL. A stale partition entry only picks a partition the I/O thread's own append
could have picked too; a stale ``producer_id`` only sends a record the waiting way, or appends
it to a batch the sender stamps with the current id when it sends it.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Sequence

from raftka.client.aio.accumulator import (COMPRESSION_CHOICES, COMPRESSION_CODES, RECORD_OVERHEAD_BYTES,
                                           ProducerBatch, RecordAccumulator, record_size_estimate)
from raftka.client.aio.cluster import Cluster
from raftka.client.aio.configs import CLIENT_DEFAULTS, check_config
from raftka.client.aio.metrics import metric_config, sensor_metrics
from raftka.client.aio.sender import Sender
from raftka.client.aio.timeouts import wait_for
from raftka.client.aio.security import SECURITY_DEFAULTS, apply_security
from raftka.client.errors import ConfigError, KafkaClosedError, KafkaTimeoutError, SerializationError
from raftka.client.futures import FutureRecordMetadata
from raftka.client.partitioner import DefaultPartitioner
from raftka.common import errors
from raftka.client.structs import RecordMetadata, TopicPartition

_time = time.time

ACKS = {"all": -1, -1: -1, 0: 0, 1: 1, "0": 0, "1": 1, "-1": -1}
IN_FLIGHT_MAX_IDEMPOTENT = 5
# The GIL: a caller thread appending flat out keeps it, and the I/O thread gets it about once per
# switch interval (5 ms), too seldom to send: measured, 1-57 of 1,353 batches were sent while
# 200,000 records were appended, the rest only in flush(), so appending and sending did not
# overlap. A caller that closes a batch while more than max_in_flight_requests_per_connection
# full batches of that partition wait to be sent sleeps this long, which hands the I/O thread the
# GIL. Only off the I/O loop's thread (never blocks an asyncio application's loop).
SENDER_YIELD_S = 0.0001

DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": "localhost:9092",
    "client_id": None,
    "key_serializer": None,
    "value_serializer": None,
    "acks": "all",
    "compression_type": None,
    "retries": 2_147_483_647,
    "batch_size": 16384,
    "linger_ms": 5,
    "partitioner": None,
    "buffer_memory": 33_554_432,
    "max_block_ms": 60_000,
    "max_request_size": 1_048_576,
    "metadata_max_age_ms": 300_000,
    "retry_backoff_ms": 100,
    "request_timeout_ms": 30_000,
    "delivery_timeout_ms": 120_000,
    "max_in_flight_requests_per_connection": 5,
    "enable_idempotence": True,
    "connection_factory": None,
    **SECURITY_DEFAULTS,
    **CLIENT_DEFAULTS,
}


def producer_config(configs: dict[str, Any]) -> dict[str, Any]:
    """Defaults + ``configs``, checked; ConfigError names a bad or unknown key (the keys every
    client ignores or refuses: client/aio/configs.py)."""
    config = check_config("producer", configs, DEFAULTS)
    if config["acks"] not in ACKS:
        raise ConfigError("acks", f"must be 0, 1 or 'all', got {config['acks']!r}")
    config["acks"] = ACKS[config["acks"]]
    if config["compression_type"] not in tuple(COMPRESSION_CODES):
        raise ConfigError("compression_type",
                          f"must be {COMPRESSION_CHOICES}, got {config['compression_type']!r}")
    for key in ("batch_size", "buffer_memory", "max_request_size", "request_timeout_ms",
                "max_in_flight_requests_per_connection", "delivery_timeout_ms"):
        if not isinstance(config[key], int) or config[key] < 1:
            raise ConfigError(key, f"must be a positive int, got {config[key]!r}")
    for key in ("linger_ms", "max_block_ms", "retry_backoff_ms", "retries"):
        if not isinstance(config[key], (int, float)) or config[key] < 0:
            raise ConfigError(key, f"must be >= 0, got {config[key]!r}")
    if config["enable_idempotence"]:
        if config["acks"] != -1:
            raise ConfigError("acks", "enable_idempotence=True needs acks='all'")
        if config["max_in_flight_requests_per_connection"] > IN_FLIGHT_MAX_IDEMPOTENT:
            raise ConfigError("max_in_flight_requests_per_connection",
                              f"must be <= {IN_FLIGHT_MAX_IDEMPOTENT} with enable_idempotence")
        if config["retries"] == 0:
            raise ConfigError("retries", "enable_idempotence=True needs retries > 0")
    if config["delivery_timeout_ms"] < config["linger_ms"] + config["request_timeout_ms"]:
        raise ConfigError("delivery_timeout_ms", "must be >= linger_ms + request_timeout_ms")
    apply_security(config)
    return config


def _serialize(serializer: Callable[[Any], bytes] | None, data: Any, what: str, topic: str) -> bytes | None:
    if data is None:
        return None
    if serializer is not None:
        try:
            data = serializer(data)
        except Exception as error:
            raise SerializationError(f"{what}_serializer raised {type(error).__name__}: {error}",
                                     topic=topic) from error
    if isinstance(data, str) and serializer is None:
        raise SerializationError(f"{what} is a str; pass bytes or set {what}_serializer", topic=topic)
    if not isinstance(data, (bytes, bytearray, memoryview)) and data is not None:
        raise SerializationError(f"{what} must serialize to bytes, got {type(data).__name__}", topic=topic)
    return bytes(data) if data is not None else None


class Producer:
    """asyncio producer; the blocking ``client.Producer`` wraps it. Arguments as kafka-python's
    KafkaProducer (see ``DEFAULTS``)."""

    def __init__(self, **configs: Any) -> None:
        self.config = producer_config(configs)
        c = self.config
        self.cluster = Cluster(c["bootstrap_servers"], client_id=c["client_id"] or "raftka-producer",
                               request_timeout_ms=c["request_timeout_ms"],
                               retry_backoff_ms=c["retry_backoff_ms"],
                               metadata_max_age_ms=c["metadata_max_age_ms"],
                               connection_factory=c["connection_factory"], metric_config=metric_config(c))
        self.accumulator = RecordAccumulator(batch_size=c["batch_size"], linger_ms=c["linger_ms"],
                                             compression_type=c["compression_type"],
                                             buffer_memory=c["buffer_memory"],
                                             max_request_size=c["max_request_size"])
        self.partitioner = c["partitioner"] or DefaultPartitioner()
        # The sender's producer id, copied here by its callback for try_append's check (any thread).
        self.producer_id = -1
        self._loop: asyncio.AbstractEventLoop | None = None  # the I/O loop, for other threads' wakeups
        self._loop_thread: int | None = None  # its thread's ident (callers elsewhere may yield)
        self._backlog_max = c["max_in_flight_requests_per_connection"]
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        self._idempotent = c["enable_idempotence"]
        # Keyless records under the DefaultPartitioner: the sticky partition per topic, dropped
        # whenever a batch of the topic closes (the partitioner may then move on).
        self._sticky_ok = isinstance(self.partitioner, DefaultPartitioner)
        self._sticky_tps: dict[str, TopicPartition] = {}
        self.closing = False  # set by close(); part of the hand-over API (module doc)
        self._closed = False
        self._sender = Sender(self.accumulator, self.cluster, c, on_batch_closed=self._batch_closed,
                              on_producer_id=self._producer_id_changed)
        self.counters = self._sender.counters  # Raftka's own counts (metrics() has Kafka's figures)
        self._bootstrapped = False

    async def start(self) -> None:
        """Start the metadata and sender tasks and fetch metadata from a bootstrap server, as
        aiokafka's ``start()`` (and kafka-python's constructor) does: NoBrokersAvailable when
        none answers within ``bootstrap_timeout_ms``. ``send`` starts the tasks by itself."""
        self._start()
        if not self._bootstrapped:
            await self.cluster.connect_bootstrap(self.config["bootstrap_timeout_ms"])
            self._bootstrapped = True

    def _start(self) -> None:
        """Start the metadata and sender tasks (once), on the running loop."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self.cluster.start()
            self._sender.start()

    async def stop(self) -> None:
        """aiokafka's name for ``close()``: flush, then stop."""
        await self.close()

    async def __aenter__(self) -> "Producer":
        try:
            await self.start()
        except BaseException:  # __aexit__ does not run when __aenter__ raises: stop the tasks here
            await self.close(0)
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                            timestamp_ms: int | None = None,
                            headers: Sequence[tuple[str, bytes]] | None = None) -> RecordMetadata:
        """aiokafka's ``send_and_wait``: send one record and wait until it is acknowledged."""
        future = await self.send(topic, value, key=key, headers=headers, partition=partition,
                                 timestamp_ms=timestamp_ms)
        return await future

    def bootstrap_connected(self) -> bool:
        """True while connected to a broker (kafka-python's name)."""
        return self.cluster.bootstrap_connected()

    def metrics(self) -> dict[str, dict[str, float]]:
        """kafka-python's shape, Kafka's names: ``{"producer-metrics": {name: value}}`` with what
        this producer measured (client/aio/metrics.py; on its event loop's thread)."""
        s = self._sender.sensors
        out = self.cluster.metrics()
        out.update(sensor_metrics("record-send", s.record_send, "total", "rate"))
        out.update(sensor_metrics("record-retry", s.record_retry, "total", "rate"))
        out.update(sensor_metrics("record-error", s.record_error, "total", "rate"))
        out.update(sensor_metrics("batch-size", s.batch_size, "avg", "max"))
        out.update(sensor_metrics("records-per-request", s.records_per_request, "avg"))
        out.update(sensor_metrics("request-latency", s.request_latency, "avg", "max"))
        out.update(sensor_metrics("record-queue-time", s.record_queue_time, "avg", "max"))
        out["buffer-total-bytes"] = float(self.accumulator.buffer_memory)
        out["buffer-available-bytes"] = float(self.accumulator.buffer_memory - self.accumulator.buffer_used)
        out["requests-in-flight"] = float(self._sender.requests_in_flight)
        return {"producer-metrics": out}

    # -- the public API --
    async def send(self, topic: str, value: Any = None, key: Any = None,
                   headers: Sequence[tuple[str, bytes]] | None = None, partition: int | None = None,
                   timestamp_ms: int | None = None) -> "asyncio.Future[RecordMetadata]":
        """Queue one record; returns a future of its RecordMetadata. Waits up to
        ``max_block_ms`` for metadata that has the topic (and ``partition``, when given) and for
        room in ``buffer_memory``."""
        if self.closing or self._closed:
            raise KafkaClosedError("the producer is closed")
        if value is None and key is None:
            raise ValueError("send needs a value or a key (a None value with a key is a tombstone)")
        key_bytes, value_bytes, header_list = self.serialize(topic, key, value, headers)
        return await self.append_serialized(topic, key_bytes, value_bytes, header_list, partition,
                                            timestamp_ms)

    def serialize(self, topic: str, key: Any, value: Any, headers: Sequence[tuple[str, bytes]] | None
                  ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """Key and value through their serializers, headers checked; SerializationError."""
        c = self.config
        key_bytes = _serialize(c["key_serializer"], key, "key", topic)
        value_bytes = _serialize(c["value_serializer"], value, "value", topic)
        header_list = []
        for k, v in headers or []:
            if not isinstance(k, str) or not (v is None or isinstance(v, (bytes, bytearray, memoryview))):
                raise SerializationError(f"headers must be (str, bytes) pairs, got ({k!r}, {v!r})", topic=topic)
            header_list.append((k, bytes(v) if v is not None else None))
        return key_bytes, value_bytes, header_list

    async def append_serialized(self, topic: str, key_bytes: bytes | None, value_bytes: bytes | None,
                                header_list: list[tuple[str, bytes | None]], partition: int | None,
                                timestamp_ms: int | None) -> "asyncio.Future[RecordMetadata]":
        """``send`` after serialization: an asyncio future of the record's RecordMetadata."""
        record = await self.append_waiting(topic, key_bytes, value_bytes, header_list, partition,
                                           timestamp_ms)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        record._add(lambda r: _to_asyncio(r, future))  # runs on this loop: batches complete here
        return future

    async def append_waiting(self, topic: str, key_bytes: bytes | None, value_bytes: bytes | None,
                             header_list: list[tuple[str, bytes | None]], partition: int | None,
                             timestamp_ms: int | None) -> FutureRecordMetadata:
        """Append a serialized record, waiting up to ``max_block_ms`` for metadata, a producer id
        and room in ``buffer_memory``; the record's future (completed with its batch)."""
        if self.closing or self._closed:
            raise KafkaClosedError("the producer is closed")
        self._start()
        c = self.config
        deadline = time.monotonic() + c["max_block_ms"] / 1000
        # An explicit partition the metadata lacks may be new (CreatePartitions): wait for it as
        # Kafka's producer does. A negative one never appears: _partition refuses it at once.
        wanted = partition if partition is not None and partition >= 0 else None
        await self.cluster.partitions_for(topic, c["max_block_ms"], wanted)
        if c["enable_idempotence"]:
            await self._sender.ensure_producer_id(max(0.0, deadline - time.monotonic()) * 1000)
        record = self.try_append(topic, key_bytes, value_bytes, header_list, partition, timestamp_ms)
        if record is not None:
            return record
        # Waiting for memory: reserve (queued behind other waiters), then append.
        tp = self._partition(topic, key_bytes, partition)
        size = record_size_estimate(key_bytes, value_bytes, header_list)
        await self.accumulator.reserve(size, max(0.0, deadline - time.monotonic()) * 1000)
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        try:
            batch, index, closed = self.accumulator.append(tp, ts, key_bytes, value_bytes, header_list, size)
        except BaseException:
            self.accumulator.release(size)
            raise
        return self._appended(batch, index, closed, ts, key_bytes, value_bytes, header_list)

    def try_append(self, topic: str, key_bytes: bytes | None, value_bytes: bytes | None,
                   header_list: list[tuple[str, bytes | None]] | None, partition: int | None,
                   timestamp_ms: int | None) -> FutureRecordMetadata | None:
        """Append without waiting, from any thread (the hand-over API, see the module doc): the
        record's future, or None when something
        must be waited for (metadata, a producer id, buffer room; then use ``append_waiting``).
        Raises at once for a negative partition or a record too large. The hot path of every send:
        kept to a few calls per record."""
        if self.closing or self._loop is None:
            return None
        if self.producer_id < 0 and self._idempotent:
            return None
        if partition is None and key_bytes is None and self._sticky_ok:
            tp = self._sticky_tps.get(topic)  # the sticky partition, until its batch closes
            if tp is None:
                if self.cluster.metadata.partitions_for(topic) is None:
                    return None
                tp = self._sticky_tps[topic] = self._partition(topic, None, None)
        else:
            tp = self._tps.get((topic, partition)) if partition is not None else None
            if tp is None:
                parts = self.cluster.metadata.partitions_for(topic)
                if parts is None or (partition is not None and partition >= 0 and partition not in parts):
                    return None  # append_waiting waits for metadata that has it
                tp = self._partition(topic, key_bytes, partition)
        key_size = len(key_bytes) if key_bytes is not None else -1
        value_size = len(value_bytes) if value_bytes is not None else -1
        if header_list:
            size = record_size_estimate(key_bytes, value_bytes, header_list)
            header_size = sum(len(k) + (len(v) if v else 0) for k, v in header_list)
        else:  # record_size_estimate, inline
            size = (RECORD_OVERHEAD_BYTES + (key_size if key_size > 0 else 0)
                    + (value_size if value_size > 0 else 0))
            header_size = 0
        if size > self.accumulator.max_request_size:  # Kafka's ensureValidRecordSize, before any batch
            raise errors.MessageTooLargeError(f"the record is about {size} bytes, over max_request_size="
                                              f"{self.accumulator.max_request_size}")
        ts = timestamp_ms if timestamp_ms is not None else int(_time() * 1000)
        appended = self.accumulator.try_append(tp, ts, key_bytes, value_bytes, header_list, size)
        if appended is None:
            return None
        batch, index, closed = appended
        if closed is not None or index == 0:
            if closed is not None:
                self._batch_closed(closed)
            self._wake()  # a full batch or a new linger timer
            if closed is not None:
                self._yield_to_sender(tp)
        return FutureRecordMetadata(batch.result, index, ts, key_size, value_size, header_size)

    def _partition(self, topic: str, key_bytes: bytes | None, partition: int | None) -> TopicPartition:
        """The TopicPartition of a record (the partitioner's choice when ``partition`` is None);
        the topic's metadata must be known."""
        all_partitions = self.cluster.metadata.partitions_for(topic) or []
        if partition is None:
            available = self.cluster.metadata.available_partitions(topic)
            if isinstance(self.partitioner, DefaultPartitioner):
                partition = self.partitioner(topic, key_bytes, all_partitions, available)
            else:  # kafka-python's partitioner signature: (key_bytes, all_partitions, available)
                partition = self.partitioner(key_bytes, all_partitions, available)
        elif (topic, partition) in self._tps:
            return self._tps[(topic, partition)]
        if partition not in all_partitions:
            raise errors.UnknownTopicOrPartitionError(
                f"partition {partition} does not exist (the topic has {len(all_partitions)})",
                topic=topic, partition=partition)
        tp = self._tps.get((topic, partition))
        if tp is None:
            tp = self._tps[(topic, partition)] = TopicPartition(topic, partition)
        return tp

    def _yield_to_sender(self, tp: TopicPartition) -> None:
        """On a caller's thread that just closed a batch of ``tp``: let the I/O thread run when
        it has fallen behind (see SENDER_YIELD_S)."""
        if (len(self.accumulator.queues.get(tp) or ()) > self._backlog_max + 1  # + the open batch
                and threading.get_ident() != self._loop_thread):
            time.sleep(SENDER_YIELD_S)

    def _appended(self, batch: ProducerBatch, index: int, closed: ProducerBatch | None, ts: int,
                  key_bytes: bytes | None, value_bytes: bytes | None,
                  header_list: list[tuple[str, bytes | None]] | None) -> FutureRecordMetadata:
        if closed is not None or index == 0:
            if closed is not None:
                self._batch_closed(closed)
            self._wake()  # a full batch or a new linger timer
        return FutureRecordMetadata(
            batch.result, index, ts, len(key_bytes) if key_bytes is not None else -1,
            len(value_bytes) if value_bytes is not None else -1,
            sum(len(k) + (len(v) if v else 0) for k, v in header_list) if header_list else 0)

    def _wake(self) -> None:
        """Wake the sender, from any thread."""
        loop = self._loop
        try:
            if loop is None or loop is asyncio.get_running_loop():
                self._sender.wakeup()
                return
        except RuntimeError:  # no running loop: another thread
            pass
        sender = self._sender
        if sender.wake_pending:  # a pass is yet to start: it sees this append (sender.py)
            return
        sender.wake_pending = True
        try:
            loop.call_soon_threadsafe(sender.wakeup)
        except RuntimeError:  # the loop is closed: the producer is gone
            pass

    async def flush(self, timeout_ms: float | None = None) -> list[tuple[TopicPartition, BaseException]]:
        """Send everything queued now (no linger) and wait until each record is acknowledged or
        failed. Returns the (partition, error) of each failed batch since the previous flush
        (empty: all acknowledged); KafkaTimeoutError after ``timeout_ms``."""
        with self.accumulator.lock:
            waiting = sorted(self.accumulator.incomplete, key=_creation_order)
        sender = self._sender
        sender.flushing += 1
        sender.wakeup()
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        try:
            # Batches complete on this loop; the sender sets batch_done each time one does.
            # Looked at in creation order, from the first not yet done: they mostly complete in
            # that order, so each is looked at about once (a full list per completion was
            # O(n^2): ~15% of the I/O thread's CPU in a 200,000-record run that flushed 1,350
            # batches).
            first = 0
            while True:
                while first < len(waiting) and waiting[first].done:
                    first += 1
                if first == len(waiting):
                    break
                sender.batch_done.clear()
                remaining = None if deadline is None else deadline - time.monotonic()
                try:
                    if remaining is not None and remaining <= 0:
                        raise asyncio.TimeoutError
                    await wait_for(sender.batch_done.wait(), remaining)
                except asyncio.TimeoutError:
                    raise KafkaTimeoutError(f"flush: {sum(b.count for b in waiting if not b.done)} records not "
                                            f"acknowledged within {timeout_ms} ms") from None
        finally:
            sender.flushing -= 1
        return sender.take_failures()

    async def close(self, timeout_ms: float | None = None) -> list[tuple[TopicPartition, BaseException]]:
        """Flush (up to ``timeout_ms``), then stop. What could not be sent in time fails with
        KafkaClosedError. Returns the failures as ``flush`` does."""
        if self._closed:
            return []
        self.closing = True
        self._sender.closing = True
        try:
            failures = await self.flush(timeout_ms)
        except KafkaTimeoutError:
            failures = []
        self._closed = True
        failures += await self._sender.close()  # fails what is left, stops the sender's tasks
        await self.cluster.close()
        return failures

    async def partitions_for(self, topic: str) -> set[int]:
        """The partitions of ``topic`` (waits up to max_block_ms for metadata)."""
        self._start()
        return set(await self.cluster.partitions_for(topic, self.config["max_block_ms"]))

    # -- callbacks from the sender (on the I/O thread; _batch_closed from try_append too) --
    def _producer_id_changed(self, producer_id: int) -> None:
        self.producer_id = producer_id

    def _batch_closed(self, batch: ProducerBatch) -> None:
        parts = self.cluster.metadata.partitions_for(batch.tp.topic) or [batch.tp.partition]
        notify = getattr(self.partitioner, "on_batch_closed", None)
        if notify is not None:
            notify(batch.tp.topic, batch.tp.partition, parts,
                   self.cluster.metadata.available_partitions(batch.tp.topic))
        self._sticky_tps.pop(batch.tp.topic, None)  # after the partitioner moved on


def _creation_order(batch: ProducerBatch) -> int:
    return batch.order


def _to_asyncio(record: FutureRecordMetadata, future: "asyncio.Future[RecordMetadata]") -> None:
    if future.done():
        return
    if record.failed():
        future.set_exception(record.exception)  # type: ignore[arg-type]
    else:
        future.set_result(record.value)  # type: ignore[arg-type]
