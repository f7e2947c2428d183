"""The blocking producer, shaped like kafka-python's KafkaProducer; wraps client.aio.Producer.

``send`` serializes on the caller's thread, then hands the record to the I/O thread through a
bounded queue. When the topic's metadata is known and the buffer has room (the usual case) it
returns at once; otherwise it waits for the append, so a missing topic or a full buffer raises
from ``send`` after ``max_block_ms``, as in kafka-python. Records keep their send order either way.
"""
from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

from client._sync import LoopThread
from client.aio.producer import Producer as AioProducer
from client.errors import KafkaClosedError, KafkaTimeoutError
from client.futures import FutureRecordMetadata
from client.structs import RecordMetadata, TopicPartition

CLOSE_TIMEOUT_S_DEFAULT = 60.0
SEND_QUEUE_MAX = 10_000  # records handed to the I/O thread but not yet appended (backpressure)
SEND_WAIT_MARGIN_S = 5.0  # beyond max_block_ms, for the I/O thread to get to a waiting send


@dataclass
class _Queued:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None
    timestamp_ms: int | None
    result: FutureRecordMetadata
    appended: threading.Event | None  # set when a waiting send may return
    error: BaseException | None = None


class Producer:
    """Send records to topics. Arguments are kafka-python's (``bootstrap_servers``, ``acks``,
    ``linger_ms``, ``batch_size``, ``compression_type``, ``enable_idempotence``, ``retries``,
    ``key_serializer``, ``value_serializer``, ``buffer_memory``, ``max_block_ms``,
    ``delivery_timeout_ms``, ``request_timeout_ms``, ...; see client.aio.producer.DEFAULTS).

    The I/O runs on a background thread with its own event loop; callbacks added to the futures
    run there and must not block.
    """

    def __init__(self, **configs: Any) -> None:
        self._io = LoopThread("raftka-producer-io")
        try:
            self._aio: AioProducer = self._io.run(_make(configs))
        except BaseException:
            self._io.stop()
            raise
        self.config = self._aio.config
        self._queue: deque[_Queued] = deque()
        self._lock = threading.Lock()
        self._pumping = False

    def send(self, topic: str, value: Any = None, key: Any = None,
             headers: Sequence[tuple[str, bytes]] | None = None, partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue a record; returns a future whose ``get(timeout)`` gives RecordMetadata(topic,
        partition, offset, timestamp). Blocks up to ``max_block_ms`` for metadata or buffer room,
        then raises KafkaTimeoutError; a bad record raises at once."""
        if not self._io.alive or self._aio._closing:
            raise KafkaClosedError("the producer is closed")
        if value is None and key is None:
            raise ValueError("send needs a value or a key (a None value with a key is a tombstone)")
        key_bytes, value_bytes, header_list = self._aio.serialize(topic, key, value, headers)
        fast = len(self._queue) < SEND_QUEUE_MAX and self._aio.can_append_without_waiting(topic, partition)
        item = _Queued(topic, key_bytes, value_bytes, header_list, partition, timestamp_ms,
                       FutureRecordMetadata(), None if fast else threading.Event())
        with self._lock:
            self._queue.append(item)
            start = not self._pumping
            self._pumping = True
        if start:
            self._io.call_soon(self._start_pump)
        if item.appended is not None:
            if not item.appended.wait(self.config["max_block_ms"] / 1000 + SEND_WAIT_MARGIN_S):
                raise KafkaTimeoutError(f"send not accepted within max_block_ms={self.config['max_block_ms']}")
            if item.error is not None:
                raise item.error
        return item.result

    # -- on the I/O thread --
    def _start_pump(self) -> None:
        self._io.loop.create_task(self._pump())

    async def _pump(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._pumping = False
                    return
                item = self._queue.popleft()
            try:
                inner = await self._aio.append_serialized(item.topic, item.key, item.value, item.headers,
                                                          item.partition, item.timestamp_ms)
            except BaseException as error:  # noqa: BLE001 - handed to the caller, never lost
                item.error = error
                item.result.failure(error)
                if isinstance(error, asyncio.CancelledError):
                    raise
            else:
                inner.add_done_callback(lambda f, r=item.result: _relay(f, r))
            finally:
                if item.appended is not None:
                    item.appended.set()

    def flush(self, timeout: float | None = None) -> list[tuple[TopicPartition, BaseException]]:
        """Send everything now and wait until each record is acknowledged or failed (up to
        ``timeout`` seconds, then KafkaTimeoutError). Returns [(partition, error)] for batches that
        failed since the previous flush; empty when every record was acknowledged."""
        return self._io.run(self._flush(None if timeout is None else timeout * 1000))

    async def _flush(self, timeout_ms: float | None) -> list[tuple[TopicPartition, BaseException]]:
        while self._pumping:  # records still on their way from send() to the accumulator
            await asyncio.sleep(0.001)
        return await self._aio.flush(timeout_ms)

    def close(self, timeout: float | None = None) -> list[tuple[TopicPartition, BaseException]]:
        """Flush for up to ``timeout`` seconds, fail what is left (KafkaClosedError), stop the I/O
        thread. Returns the failures as ``flush`` does. Safe to call twice."""
        if not self._io.alive:
            return []
        timeout_s = CLOSE_TIMEOUT_S_DEFAULT if timeout is None else timeout
        try:
            return self._io.run(self._close(timeout_s * 1000), timeout_s + 10)
        finally:
            self._io.stop()

    async def _close(self, timeout_ms: float) -> list[tuple[TopicPartition, BaseException]]:
        try:
            await asyncio.wait_for(self._flush(None), timeout_ms / 1000)
        except asyncio.TimeoutError:
            pass
        failures = await self._aio.close(timeout_ms)
        with self._lock:  # records still on their way to the accumulator fail, never hang
            left, self._queue = list(self._queue), deque()
        for item in left:
            error = KafkaClosedError("the producer was closed before this record was queued",
                                     topic=item.topic, partition=item.partition)
            item.error = error
            item.result.failure(error)
            if item.appended is not None:
                item.appended.set()
            failures.append((TopicPartition(item.topic, item.partition if item.partition is not None else -1),
                             error))
        return failures

    def partitions_for(self, topic: str) -> set[int]:
        """The partition indexes of ``topic`` (waits up to max_block_ms for metadata)."""
        return self._io.run(self._aio.partitions_for(topic))

    def metrics(self) -> dict[str, int]:
        """Counters: produce_requests, batches_sent, batch_retries, producer_id_resets."""
        return dict(self._aio.metrics)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        io = getattr(self, "_io", None)
        if io is not None and io.alive:
            io.stop(0)


def _relay(inner: "asyncio.Future[RecordMetadata]", result: FutureRecordMetadata) -> None:
    if inner.cancelled():
        result.failure(KafkaClosedError("the send was cancelled"))
    elif inner.exception() is not None:
        result.failure(inner.exception())  # type: ignore[arg-type]
    else:
        result.success(inner.result())


async def _make(configs: dict[str, Any]) -> AioProducer:
    producer = AioProducer(**configs)
    await producer.start()
    return producer
