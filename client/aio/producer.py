"""The asyncio producer: ``await producer.send(...)`` returns an asyncio future of RecordMetadata.

One sender task drains ready batches (see accumulator.py) into one Produce request per leader,
at most ``max_in_flight_requests_per_connection`` per broker. With ``enable_idempotence`` (the
default) the producer gets a producer id (InitProducerId) and stamps each batch with a
per-partition sequence on first send; a retried batch keeps it, so the leader drops a duplicate
and answers with the original offset.

Producer-id reset: when a sequenced batch fails for good, its partition's sequence has a gap the
leader would refuse forever, so once nothing is in flight the producer takes a new producer id
and restarts every sequence at 0. A queued batch already sent under the old id whose outcome is
unknown (no answer, or an error that can follow the append) is failed then rather than re-sent
under the new id, where the leader's dedup (per producer id) could not recognise it and would
write it twice (Kafka's rule). Batches the leader refused before appending are re-sent.

Order per partition under retries: when a batch of a partition fails retriably it goes back to
the head of that partition's queue (creation order), and the partition is *muted* - nothing
more of it is sent - until every request in flight for it has answered. Later batches that were
already in flight come back (with OUT_OF_ORDER_SEQUENCE_NUMBER from the leader under
idempotence, or an error of their own) and are requeued behind it, so the partition resumes in
order. A batch is retried while ``retries`` and ``delivery_timeout_ms`` allow.

Threads: the hand-over API. The producer lives on one event loop (the I/O thread, ``_loop``).
Three members may be used from any other thread, and the blocking Producer (client/producer.py)
uses only these on the caller's thread:

    closing       a bool, set once by ``close()``; read without a lock (a stale False is
                  harmless: ``try_append`` then fails in the accumulator, or the record is
                  failed by close with the rest)
    serialize()   pure: the configured serializers and the header check
    try_append()  appends to the partition's open batch without waiting, or returns None (then
                  the caller hands the record to the I/O thread, which calls ``append_waiting``)

Everything else runs on the I/O thread. What ``try_append`` shares with the I/O thread is guarded
so: the accumulator's queues, open batches and ``buffer_used`` by ``accumulator.lock`` (a plain
Lock, taken once per record, see accumulator.py); the sender is woken through
``loop.call_soon_threadsafe``; the partition caches (``_tps``, ``_sticky_tps``) and the
metadata it reads are replaced or updated one dict operation at a time, each atomic under the
GIL, and a stale entry only picks a partition the I/O thread's own append could have picked too.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from typing import Any, Callable, Sequence

from raftka.client.aio.accumulator import (RECORD_OVERHEAD_BYTES, ProducerBatch, RecordAccumulator,
                                    record_size_estimate)
from raftka.client.aio.cluster import API_INIT_PRODUCER_ID, API_PRODUCE, Cluster
from raftka.client.aio.timeouts import cancel_and_wait, wait_for
from raftka.client.errors import ConfigError, KafkaClosedError, KafkaTimeoutError, SerializationError
from raftka.client.futures import FutureRecordMetadata
from raftka.client.partitioner import DefaultPartitioner
from raftka.common import errors
from raftka.common.errors import RaftkaError
from raftka.client.structs import RecordMetadata, TopicPartition

log = logging.getLogger(__name__)
_time = time.time

ACKS = {"all": -1, -1: -1, 0: 0, 1: 1, "0": 0, "1": 1, "-1": -1}
IN_FLIGHT_MAX_IDEMPOTENT = 5
CLOSE_TASKS_TIMEOUT_S = 2.0  # how long close() waits for its cancelled tasks to finish
# The GIL: a caller thread appending flat out keeps it, and the I/O thread gets it about once per
# switch interval (5 ms), too seldom to send: measured, 1-57 of 1,353 batches were sent while
# 200,000 records were appended, the rest only in flush(), so appending and sending did not
# overlap. A caller that closes a batch while more than max_in_flight_requests_per_connection
# full batches of that partition wait to be sent sleeps this long, which hands the I/O thread the
# GIL. Only off the I/O loop's thread (never blocks an asyncio application's loop).
SENDER_YIELD_S = 0.0001

# Partition errors a leader answers before appending anything: a batch refused with one of these
# was not written by that attempt. Any other failure (no answer, a timeout, REQUEST_TIMED_OUT or
# NOT_ENOUGH_REPLICAS_AFTER_APPEND after the append, a storage error) leaves the outcome unknown.
REFUSED_BEFORE_APPEND = frozenset({
    errors.NOT_LEADER_OR_FOLLOWER, errors.UNKNOWN_TOPIC_OR_PARTITION, errors.LEADER_NOT_AVAILABLE,
    errors.FENCED_LEADER_EPOCH, errors.UNKNOWN_LEADER_EPOCH, errors.NOT_ENOUGH_REPLICAS,
    errors.OUT_OF_ORDER_SEQUENCE_NUMBER, errors.MESSAGE_TOO_LARGE, errors.RECORD_LIST_TOO_LARGE,
    errors.CORRUPT_MESSAGE, errors.INVALID_RECORD, errors.INVALID_TIMESTAMP,
    errors.INVALID_REQUIRED_ACKS, errors.INVALID_PRODUCER_EPOCH, errors.UNKNOWN_PRODUCER_ID,
    errors.INVALID_PRODUCER_ID_MAPPING,
})

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
}


def producer_config(configs: dict[str, Any]) -> dict[str, Any]:
    """Defaults + ``configs``, checked; ConfigError names a bad or unknown key."""
    unknown = set(configs) - set(DEFAULTS)
    if unknown:
        raise ConfigError(sorted(unknown)[0], "unknown producer config")
    config = {**DEFAULTS, **configs}
    if config["acks"] not in ACKS:
        raise ConfigError("acks", f"must be 0, 1 or 'all', got {config['acks']!r}")
    config["acks"] = ACKS[config["acks"]]
    if config["compression_type"] not in (None, "none", "lz4"):
        raise ConfigError("compression_type", f"must be None or 'lz4', got {config['compression_type']!r}")
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
                               connection_factory=c["connection_factory"])
        self.accumulator = RecordAccumulator(batch_size=c["batch_size"], linger_ms=c["linger_ms"],
                                             compression_type=c["compression_type"],
                                             buffer_memory=c["buffer_memory"],
                                             max_request_size=c["max_request_size"])
        self.partitioner = c["partitioner"] or DefaultPartitioner()
        self.producer_id = -1
        self.producer_epoch = -1
        self._pid_task: asyncio.Task[None] | None = None
        self._next_sequence: dict[TopicPartition, int] = {}
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self._node_in_flight: dict[int, int] = {}
        self._node_waiting: dict[int, int] = {}  # Produce tasks per broker connecting, not yet submitted
        self._acks = c["acks"]
        self._muted: set[TopicPartition] = set()  # a batch was requeued; wait for in-flight to end
        self._reset_pid = False
        self._maybe_written: set[int] = set()  # ProducerBatch.order of batches with an unknown outcome
        self._wakeup = asyncio.Event()
        self._batch_done = asyncio.Event()  # set when a batch is acknowledged or failed (flush)
        self._loop: asyncio.AbstractEventLoop | None = None  # the I/O loop, for other threads' wakeups
        self._loop_thread: int | None = None  # its thread's ident (callers elsewhere may yield)
        self._backlog_max = c["max_in_flight_requests_per_connection"]
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        self._idempotent = c["enable_idempotence"]
        # Keyless records under the DefaultPartitioner: the sticky partition per topic, dropped
        # whenever a batch of the topic closes (the partitioner may then move on).
        self._sticky_ok = isinstance(self.partitioner, DefaultPartitioner)
        self._sticky_tps: dict[str, TopicPartition] = {}
        self._flushing = 0
        self.closing = False  # set by close(); part of the hand-over API (module doc)
        self._closed = False
        self._sender: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.failures: list[tuple[TopicPartition, BaseException]] = []  # since the last flush
        self.metrics = {"produce_requests": 0, "batches_sent": 0, "batch_retries": 0,
                        "producer_id_resets": 0}

    async def start(self) -> None:
        """Start the metadata and sender tasks (called by ``send`` when needed)."""
        if self._sender is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self.cluster.start()
            self._sender = asyncio.get_running_loop().create_task(self._run_sender())

    # -- the public API --
    async def send(self, topic: str, value: Any = None, key: Any = None,
                   headers: Sequence[tuple[str, bytes]] | None = None, partition: int | None = None,
                   timestamp_ms: int | None = None) -> "asyncio.Future[RecordMetadata]":
        """Queue one record; returns a future of its RecordMetadata. Waits up to
        ``max_block_ms`` for the topic's metadata and for room in ``buffer_memory``."""
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
        await self.start()
        c = self.config
        deadline = time.monotonic() + c["max_block_ms"] / 1000
        await self.cluster.partitions_for(topic, c["max_block_ms"])
        if c["enable_idempotence"]:
            await self._ensure_producer_id(max(0.0, deadline - time.monotonic()) * 1000)
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
        Raises at once for a bad partition or a record too large. The hot path of every send:
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
                if self.cluster.metadata.partitions_for(topic) is None:
                    return None
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
                self._wakeup.set()
                return
        except RuntimeError:  # no running loop: another thread
            pass
        try:
            loop.call_soon_threadsafe(self._wakeup.set)
        except RuntimeError:  # the loop is closed: the producer is gone
            pass

    async def flush(self, timeout_ms: float | None = None) -> list[tuple[TopicPartition, BaseException]]:
        """Send everything queued now (no linger) and wait until each record is acknowledged or
        failed. Returns the (partition, error) of each failed batch since the previous flush
        (empty: all acknowledged); KafkaTimeoutError after ``timeout_ms``."""
        with self.accumulator.lock:
            waiting = sorted(self.accumulator.incomplete, key=_creation_order)
        self._flushing += 1
        self._wakeup.set()
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        try:
            # Batches complete on this loop; _batch_done is set each time one does. Looked at
            # in creation order, from the first not yet done: they mostly complete in that order,
            # so each is looked at about once (a full list per completion was O(n^2): ~15% of
            # the I/O thread's CPU in a 200,000-record run that flushed 1,350 batches).
            first = 0
            while True:
                while first < len(waiting) and waiting[first].done:
                    first += 1
                if first == len(waiting):
                    break
                self._batch_done.clear()
                remaining = None if deadline is None else deadline - time.monotonic()
                try:
                    if remaining is not None and remaining <= 0:
                        raise asyncio.TimeoutError
                    await wait_for(self._batch_done.wait(), remaining)
                except asyncio.TimeoutError:
                    raise KafkaTimeoutError(f"flush: {sum(b.count for b in waiting if not b.done)} records not "
                                            f"acknowledged within {timeout_ms} ms") from None
        finally:
            self._flushing -= 1
        failures, self.failures = self.failures, []
        return failures

    async def close(self, timeout_ms: float | None = None) -> list[tuple[TopicPartition, BaseException]]:
        """Flush (up to ``timeout_ms``), then stop. What could not be sent in time fails with
        KafkaClosedError. Returns the failures as ``flush`` does."""
        if self._closed:
            return []
        self.closing = True
        try:
            failures = await self.flush(timeout_ms)
        except KafkaTimeoutError:
            failures = []
        self._closed = True
        with self.accumulator.lock:
            self.accumulator.closed = True  # an append racing with close fails rather than hangs
            left = list(self.accumulator.incomplete)
        for batch in left:
            error = KafkaClosedError("the producer was closed before this record was acknowledged",
                                     topic=batch.tp.topic, partition=batch.tp.partition)
            self._fail(batch, error)
        failures += self.failures
        self.failures = []
        await cancel_and_wait([self._sender, self._pid_task, *self._tasks], CLOSE_TASKS_TIMEOUT_S)
        await self.cluster.close()
        return failures

    async def partitions_for(self, topic: str) -> set[int]:
        """The partitions of ``topic`` (waits up to max_block_ms for metadata)."""
        await self.start()
        return set(await self.cluster.partitions_for(topic, self.config["max_block_ms"]))

    # -- producer id --
    async def _ensure_producer_id(self, timeout_ms: float) -> None:
        if self.producer_id >= 0:
            return
        if self._pid_task is None or self._pid_task.done():
            self._pid_task = asyncio.get_running_loop().create_task(self._init_producer_id())
        try:
            await wait_for(asyncio.shield(self._pid_task), max(timeout_ms, 1) / 1000)
        except asyncio.TimeoutError:
            raise KafkaTimeoutError(f"no producer id (InitProducerId) within {int(timeout_ms)} ms") from None

    async def _init_producer_id(self) -> None:
        # Retries until it has an id or the producer is closed (callers bound their own wait);
        # the closed check is the second guard behind cancellation (see client/aio/timeouts.py).
        while not self._closed:
            try:
                code, body = await self.cluster.request_any(API_INIT_PRODUCER_ID,
                                                            {"transactional_id": None,
                                                             "transaction_timeout_ms": 60_000})
            except RaftkaError as error:
                if not error.retriable:
                    raise
                code, body = error.code, {}
            if code == errors.NONE:
                self.producer_id, self.producer_epoch = body["producer_id"], body["producer_epoch"]
                return
            spec = errors.SPECS.get(code)
            if spec is None or not spec.retriable:
                raise errors.error_for(code, (body or {}).get("error_message"))
            await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)
        raise KafkaClosedError("the producer was closed before it got a producer id")

    # -- the sender --
    def _batch_closed(self, batch: ProducerBatch) -> None:
        parts = self.cluster.metadata.partitions_for(batch.tp.topic) or [batch.tp.partition]
        notify = getattr(self.partitioner, "on_batch_closed", None)
        if notify is not None:
            notify(batch.tp.topic, batch.tp.partition, parts,
                   self.cluster.metadata.available_partitions(batch.tp.topic))
        self._sticky_tps.pop(batch.tp.topic, None)  # after the partitioner moved on

    async def _run_sender(self) -> None:
        # Not `while True`: ends on _closed too (set before close() cancels it), a second guard
        # should a cancellation ever be lost (Python 3.11's asyncio.wait_for lost them; the
        # client waits with client/aio/timeouts.py instead).
        while not self._closed:
            try:
                wake_at = await self._send_ready()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not silently stop every future delivery
                log.exception("producer sender step failed")
                wake_at = time.monotonic() + self.config["retry_backoff_ms"] / 1000
            timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
            if timeout is None or timeout > 0:
                try:
                    await wait_for(self._wakeup.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
            else:
                await asyncio.sleep(0)  # let answers and sends run between passes
            self._wakeup.clear()

    async def _send_ready(self) -> float | None:
        """Expire, drain and send what is ready; returns when to look again (None: on wakeup)."""
        c = self.config
        now = time.monotonic()
        wake_at: float | None = None

        def later(t: float | None) -> None:
            nonlocal wake_at
            if t is not None:
                wake_at = t if wake_at is None else min(wake_at, t)

        self._expire(now)
        if self._reset_pid:
            if any(self._in_flight.values()):
                return None  # wait for in-flight answers; their completion wakes us
            await self._reset_producer_id()
            if self._reset_pid:  # no new producer id yet: send nothing under the old sequences
                return now + c["retry_backoff_ms"] / 1000
        urgent = bool(self._flushing or self.closing)
        by_node: dict[int, list[ProducerBatch]] = {}
        size_by_node: dict[int, int] = {}
        with self.accumulator.lock:  # appends from other threads wait while batches are picked
            for tp in list(self.accumulator.queues):
                if tp in self._muted:
                    if self._in_flight.get(tp):
                        continue
                    self._muted.discard(tp)
                batch, due = self.accumulator.first_ready(tp, now, urgent=urgent)
                if batch is None:
                    later(due)
                    continue
                leader = self.cluster.metadata.leader_for(tp)
                if leader is None:
                    self.cluster.request_update()
                    later(now + c["retry_backoff_ms"] / 1000)
                    continue
                in_flight = self._node_in_flight.get(leader, 0)
                if in_flight >= c["max_in_flight_requests_per_connection"]:
                    continue
                if self._node_waiting.get(leader) and self._acks != 0:
                    continue  # its connecting task submits first, then wakes us
                if c["max_in_flight_requests_per_connection"] == 1 and self._in_flight.get(tp):
                    continue
                size = len(batch.buffer) if batch.buffer is not None else self.accumulator.batch_size
                if by_node.get(leader) and size_by_node[leader] + size > c["max_request_size"]:
                    continue
                batch = self.accumulator.pop(tp)
                self._prepare(batch)
                by_node.setdefault(leader, []).append(batch)
                size_by_node[leader] = size_by_node.get(leader, 0) + len(batch.buffer or b"")
                if not self.accumulator.queues[tp]:
                    self._batch_closed(batch)
                else:
                    later(now)  # more of this partition may go in the next request
        for node, batches in by_node.items():
            self._node_in_flight[node] = self._node_in_flight.get(node, 0) + 1
            self.metrics["produce_requests"] += 1
            self.metrics["batches_sent"] += len(batches)
            for batch in batches:
                batch.in_flight = True
                batch.attempts += 1
                self._in_flight.setdefault(batch.tp, []).append(batch)
            body = self._produce_body(batches)
            if not self._send_produce(node, batches, body):
                # No open connection (or acks=0, or no submit): a task connects and submits.
                # Until it has submitted, no other batch for this broker leaves the
                # accumulator (see the pick above), so none can overtake it on the wire
                # (their sequences would reach the broker out of order).
                self._node_waiting[node] = self._node_waiting.get(node, 0) + 1
                task = asyncio.get_running_loop().create_task(self._produce(node, batches, body))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        with self.accumulator.lock:
            for dq in self.accumulator.queues.values():  # heads are the oldest: see _expire
                if dq:
                    later(dq[0].created + c["delivery_timeout_ms"] / 1000)
        return wake_at

    def _prepare(self, batch: ProducerBatch) -> None:
        """Stamp the producer id and a sequence on a batch's first send (idempotence)."""
        if not self.config["enable_idempotence"] or batch.base_sequence is not None:
            return
        seq = self._next_sequence.get(batch.tp, 0)
        batch.stamp_producer(self.producer_id, self.producer_epoch, seq)
        self._next_sequence[batch.tp] = (seq + batch.record_count) % (1 << 31)

    def _expire(self, now: float) -> None:
        limit = self.config["delivery_timeout_ms"] / 1000
        # A partition's queue is in creation order (a requeued batch goes back to its place), so
        # only heads need looking at.
        expired: list[ProducerBatch] = []
        with self.accumulator.lock:
            for dq in self.accumulator.queues.values():
                while dq and now - dq[0].created >= limit:
                    expired.append(dq.popleft())
        for batch in expired:
            tp = batch.tp
            cause = f" (last error: {batch.last_error})" if batch.last_error else ""
            self._fail(batch, KafkaTimeoutError(
                f"{batch.record_count} records not acknowledged within delivery_timeout_ms="
                f"{self.config['delivery_timeout_ms']}{cause}", topic=tp.topic, partition=tp.partition))

    async def _reset_producer_id(self) -> None:
        """After a sequenced batch failed for good, the partition's sequence has a gap the leader
        would refuse forever: take a new producer id and restart every sequence at 0."""
        self._reset_pid = False
        self.metrics["producer_id_resets"] += 1
        old_producer_id = self.producer_id
        self.producer_id = -1
        self._next_sequence.clear()
        for batch in list(self.accumulator.batches()):
            if batch.base_sequence is not None and batch.order in self._maybe_written:
                with self.accumulator.lock:
                    self.accumulator.queues[batch.tp].remove(batch)
                cause = batch.last_error
                code = getattr(cause, "code", errors.REQUEST_TIMED_OUT)
                self._fail(batch, errors.error_for(
                    code, f"sent under producer id {old_producer_id} and may or may not have been "
                    f"written (last error: {cause}); not re-sent under a new producer id, which "
                    f"could write it twice", topic=batch.tp.topic, partition=batch.tp.partition))
                continue
            batch.base_sequence = None
        self._reset_pid = False  # the failures above belong to this reset
        self._maybe_written.clear()
        try:
            await self._ensure_producer_id(self.config["request_timeout_ms"])
        except RaftkaError:
            self._reset_pid = True

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if batch.done:
            return
        batch.fail(error)
        self._maybe_written.discard(batch.order)
        self.accumulator.finished(batch)
        self._batch_done.set()
        self.failures.append((batch.tp, error))
        if self.config["enable_idempotence"] and batch.base_sequence is not None:
            self._reset_pid = True
        self._wakeup.set()

    def _acknowledged(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int,
                      log_start_offset: int) -> None:
        batch.complete(base_offset, log_append_time_ms, log_start_offset)
        self._maybe_written.discard(batch.order)
        self.accumulator.finished(batch)
        self._batch_done.set()

    def _retry_or_fail(self, batch: ProducerBatch, error: RaftkaError) -> None:
        c = self.config
        now = time.monotonic()
        batch.last_error = error
        expired = now - batch.created >= c["delivery_timeout_ms"] / 1000
        if batch.attempts > c["retries"] or expired or self._closed:
            self._fail(batch, error if not expired else KafkaTimeoutError(
                f"not acknowledged within delivery_timeout_ms={c['delivery_timeout_ms']} "
                f"(last error: {error})", topic=batch.tp.topic, partition=batch.tp.partition))
            return
        self.metrics["batch_retries"] += 1
        self.accumulator.requeue(batch, now + c["retry_backoff_ms"] / 1000)
        self._muted.add(batch.tp)

    def _produce_body(self, batches: list[ProducerBatch]) -> dict[str, Any]:
        c = self.config
        topic_data: dict[str, list[dict[str, Any]]] = {}
        for batch in batches:
            topic_data.setdefault(batch.tp.topic, []).append({"index": batch.tp.partition,
                                                              "records": batch.buffer})
        return {"acks": c["acks"], "timeout_ms": c["request_timeout_ms"], "transactional_id": None,
                "topic_data": [{"name": t, "partition_data": p} for t, p in topic_data.items()]}

    def _send_produce(self, node: int, batches: list[ProducerBatch], body: dict[str, Any]) -> bool:
        """Submit the Produce request from the sender's pass over the broker's open connection
        (written now, or queued there in order for a slot); its answer is handled in the
        future's callback. False: take the task path (connecting, acks=0, a connection type
        without submit, or a task of this broker still connecting: none may be overtaken)."""
        if self._acks == 0 or self._node_waiting.get(node):
            return False
        try:
            future = self.cluster.submit(node, API_PRODUCE, body)
        except RaftkaError:  # closed meanwhile, a body that cannot be encoded: the task path reports it
            return False
        if future is None:
            return False
        future.add_done_callback(functools.partial(self._produce_sent, node, batches))
        return True

    def _produce_sent(self, node: int, batches: list[ProducerBatch],
                      future: "asyncio.Future[tuple[int, Any]]") -> None:
        try:
            if self._closed:
                return  # close() has failed every batch still incomplete
            error = (errors.NetworkExceptionError("the Produce request was cancelled")
                     if future.cancelled() else future.exception())
            if error is None:
                code, answer = future.result()
                request_error = errors.error_for(code, (answer or {}).get("error_message")) if code else None
            else:
                if not isinstance(error, RaftkaError):
                    error = errors.NetworkExceptionError(f"Produce to broker {node} failed: {error!r}")
                if isinstance(error, (errors.NetworkExceptionError, errors.RequestTimedOutError)):
                    self.cluster.connection_failed(node)
                code, answer, request_error = error.code, None, error
            self._produce_answered(batches, code, answer, request_error)
        except Exception:  # a bug here must not leave the batches in flight forever
            log.exception("handling a Produce answer failed")
        finally:
            self._node_in_flight[node] -= 1
            self._wakeup.set()

    async def _produce(self, node: int, batches: list[ProducerBatch], body: dict[str, Any]) -> None:
        """The task path of a Produce request: connects first when needed, then submits and
        leaves the answer to ``_produce_sent``, as the sender's pass does; the batches held back
        for this broker meanwhile are then submitted by the pass."""
        waiting = True
        handed_over = False
        try:
            try:
                if self._acks != 0:
                    future = await self.cluster.submit_connected(node, API_PRODUCE, body)
                    self._node_waiting[node] -= 1
                    waiting = False
                    self._wakeup.set()
                    if future is not None:
                        future.add_done_callback(functools.partial(self._produce_sent, node, batches))
                        handed_over = True
                        return
                # acks=0, or a connection type without submit
                code, answer = await self.cluster.request(node, API_PRODUCE, body,
                                                          expect_response=self._acks != 0)
            except RaftkaError as error:
                code, answer, request_error = error.code, None, error
            else:
                request_error = errors.error_for(code, (answer or {}).get("error_message")) if code else None
            self._produce_answered(batches, code, answer, request_error)
        finally:
            if waiting:
                self._node_waiting[node] -= 1
            if not handed_over:  # else _produce_sent does this when the answer comes
                self._node_in_flight[node] -= 1
                self._wakeup.set()

    def _produce_answered(self, batches: list[ProducerBatch], code: int, answer: Any,
                          request_error: RaftkaError | None) -> None:
        c = self.config
        for batch in batches:
            self._in_flight[batch.tp].remove(batch)
        if c["acks"] == 0 and request_error is None:
            for batch in batches:
                self._acknowledged(batch, -1, -1, -1)
            return
        if request_error is not None:
            for batch in batches:  # no per-partition answer: any of them may have been written
                if batch.base_sequence is not None:
                    self._maybe_written.add(batch.order)
                self._on_error(batch, request_error)
            return
        results: dict[TopicPartition, dict[str, Any]] = {}
        for topic in answer.get("responses") or []:
            for p in topic.get("partition_responses") or []:
                results[TopicPartition(topic["name"], p["index"])] = p
        for batch in batches:
            p = results.get(batch.tp)
            if p is None:
                self._on_error(batch, errors.UnknownServerError(
                    "the Produce answer has no entry for this partition",
                    topic=batch.tp.topic, partition=batch.tp.partition))
                continue
            pcode = p.get("error_code", 0) or 0
            if pcode in (errors.NONE, errors.DUPLICATE_SEQUENCE_NUMBER):
                self._acknowledged(batch, p.get("base_offset", -1) if pcode == errors.NONE else -1,
                                   p.get("log_append_time_ms", -1), p.get("log_start_offset", -1))
                continue
            if pcode not in REFUSED_BEFORE_APPEND and batch.base_sequence is not None:
                self._maybe_written.add(batch.order)
            if errors.SPECS.get(pcode, errors.SPECS[-1]).invalid_metadata:
                self.cluster.update_leader(batch.tp, p.get("current_leader"))
            self._on_error(batch, errors.error_for(pcode, p.get("error_message"),
                                                   topic=batch.tp.topic, partition=batch.tp.partition))

    def _earlier_pending(self, batch: ProducerBatch) -> bool:
        earlier = [b for b in self._in_flight.get(batch.tp, []) if b.order < batch.order]
        with self.accumulator.lock:
            queued = list(self.accumulator.queues.get(batch.tp) or ())
        return bool(earlier) or any(b.order < batch.order for b in queued)

    def _on_error(self, batch: ProducerBatch, error: RaftkaError) -> None:
        # OUT_OF_ORDER_SEQUENCE_NUMBER behind a requeued earlier batch is expected: that earlier
        # batch is missing at the leader; send this one again after it.
        ordered_retry = (isinstance(error, errors.OutOfOrderSequenceNumberError)
                         and (batch.tp in self._muted or self._earlier_pending(batch)))
        if error.retriable or ordered_retry:
            if error.invalid_metadata:
                self.cluster.request_update()
            self._retry_or_fail(batch, error)
        else:
            if error.topic is None:
                error = errors.error_for(error.code, error.message, topic=batch.tp.topic,
                                         partition=batch.tp.partition)
            self._fail(batch, error)


def _creation_order(batch: ProducerBatch) -> int:
    return batch.order


def _to_asyncio(record: FutureRecordMetadata, future: "asyncio.Future[RecordMetadata]") -> None:
    if future.done():
        return
    if record.failed():
        future.set_exception(record.exception)  # type: ignore[arg-type]
    else:
        future.set_result(record.value)  # type: ignore[arg-type]
