"""The blocking producer, shaped like kafka-python's KafkaProducer; wraps client.aio.Producer.

``send`` serializes, partitions and appends the record to its partition's open batch on the
caller's thread (as Kafka's Java producer does); the I/O thread only drains full or lingered
batches. When something must be waited for (the topic's metadata, metadata that has an
explicit partition, a producer id, room in ``buffer_memory``) the record goes to the I/O thread
instead and ``send`` waits for that append, so a missing topic or partition or a full buffer
raises from ``send`` after ``max_block_ms``, as in Kafka's producer. Either way the record is
in its batch when ``send`` returns, so a thread's records keep their send order. On the caller's thread this uses only the asyncio core's hand-over API
(``closing``, ``serialize``, ``try_append``: the thread rules are in client/aio/producer.py's
module doc); everything else runs on the I/O thread. docs/client.md describes the threads.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Any, Sequence

from raftka.client._sync import LoopThread, close_at_exit, forget_at_exit
from raftka.client.aio.producer import Producer as AioProducer
from raftka.client.aio.timeouts import wait_for
from raftka.client.errors import KafkaClosedError, KafkaTimeoutError
from raftka.client.futures import FutureRecordMetadata
from raftka.client.structs import TopicPartition

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S_DEFAULT = 60.0
# close(timeout) returns within timeout + this, even when the I/O thread is stuck (a callback that
# blocks): time for cancelled tasks and connections to unwind (each bounded at 2 s, usually ms).
CLOSE_MARGIN_S = 3.0
SEND_QUEUE_MAX = 10_000  # records handed to the I/O thread but not yet appended (backpressure)
SEND_WAIT_MARGIN_S = 5.0  # beyond max_block_ms, for the I/O thread to get to a waiting send


class _Queued:
    """A record ``send`` hands to the I/O thread because it must wait; ``send`` blocks on it."""

    __slots__ = ("topic", "key", "value", "headers", "partition", "timestamp_ms", "result",
                 "appended", "error")

    def __init__(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes | None]], partition: int | None,
                 timestamp_ms: int | None) -> None:
        self.topic, self.key, self.value, self.headers = topic, key, value, headers
        self.partition, self.timestamp_ms = partition, timestamp_ms
        self.result: FutureRecordMetadata | None = None
        self.appended = threading.Event()  # set when send may return
        self.error: BaseException | None = None


class Producer:
    """Send records to topics. Arguments are kafka-python's (``bootstrap_servers``, ``acks``,
    ``linger_ms``, ``batch_size``, ``compression_type``, ``enable_idempotence``, ``retries``,
    ``key_serializer``, ``value_serializer``, ``buffer_memory``, ``max_block_ms``,
    ``delivery_timeout_ms``, ``request_timeout_ms``, ...; see client.aio.producer.DEFAULTS).

    The I/O runs on a background thread with its own event loop; callbacks added to the futures
    run there and must not block. The constructor fetches metadata from a bootstrap server first,
    as kafka-python's does: NoBrokersAvailable when none answers within ``bootstrap_timeout_ms``.
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
        self._stopped = False  # set when the I/O thread is stopped (cheaper than is_alive per send)
        # No serializers: bytes values without key or headers need no serialize() call.
        self._plain = self.config["key_serializer"] is None and self.config["value_serializer"] is None
        close_at_exit(self)  # flushed then closed at interpreter exit when the application never closes it

    def send(self, topic: str, value: Any = None, key: Any = None,
             headers: Sequence[tuple[str, bytes]] | None = None, partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue a record; returns a future whose ``get(timeout)`` gives RecordMetadata(topic,
        partition, offset, timestamp). Blocks up to ``max_block_ms`` for metadata (with the
        explicit ``partition``, if any) or buffer room, then raises KafkaTimeoutError; a bad
        record raises at once."""
        aio = self._aio
        if aio.closing or self._stopped:
            raise KafkaClosedError("the producer is closed")
        if value is None and key is None:
            raise ValueError("send needs a value or a key (a None value with a key is a tombstone)")
        if (self._plain and type(value) is bytes and key is None and not headers):
            key_bytes, value_bytes, header_list = None, value, None  # nothing to serialize or check
        else:
            key_bytes, value_bytes, header_list = aio.serialize(topic, key, value, headers)
        if not self._queue:  # nothing waits before this record: append here, no hand-off
            record = aio.try_append(topic, key_bytes, value_bytes, header_list, partition, timestamp_ms)
            if record is not None:
                return record
        if not self._io.alive:
            raise KafkaClosedError("the producer is closed")
        item = _Queued(topic, key_bytes, value_bytes, header_list or [], partition, timestamp_ms)
        with self._lock:
            if len(self._queue) >= SEND_QUEUE_MAX:
                raise KafkaTimeoutError(f"{SEND_QUEUE_MAX} sends already wait for the I/O thread")
            self._queue.append(item)
            start = not self._pumping
            self._pumping = True
        if start:
            self._io.call_soon(self._start_pump)
        if not item.appended.wait(self.config["max_block_ms"] / 1000 + SEND_WAIT_MARGIN_S):
            raise KafkaTimeoutError(f"send not accepted within max_block_ms={self.config['max_block_ms']}")
        if item.error is not None:
            raise item.error
        if item.result is None:  # the I/O thread stopped under this send
            raise KafkaClosedError("the producer is closed")
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
                item.result = await self._aio.append_waiting(item.topic, item.key, item.value,
                                                             item.headers, item.partition,
                                                             item.timestamp_ms)
            except BaseException as error:  # noqa: BLE001 - handed to the caller, never lost
                item.error = error
                if isinstance(error, asyncio.CancelledError):
                    raise
            finally:
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
        thread. Returns the failures as ``flush`` does. Safe to call twice. Returns within
        ``timeout`` + CLOSE_MARGIN_S seconds even when the I/O thread is stuck (as Kafka's
        producer does, it then gives up on that thread: logged, and [] returned)."""
        forget_at_exit(self)
        if not self._io.alive:
            self._stopped = True
            return []
        timeout_s = CLOSE_TIMEOUT_S_DEFAULT if timeout is None else max(0.0, timeout)
        deadline = time.monotonic() + timeout_s + CLOSE_MARGIN_S
        try:
            return self._io.run(self._close(timeout_s * 1000), timeout_s + CLOSE_MARGIN_S)
        except KafkaTimeoutError:  # only run()'s own limit: _close() raises no timeout
            log.warning("producer close: the I/O thread did not finish within %.1f s; "
                        "not waiting for it any longer", timeout_s + CLOSE_MARGIN_S)
            return []
        finally:
            self._stopped = True
            self._io.stop(max(0.0, deadline - time.monotonic()))

    async def _close(self, timeout_ms: float) -> list[tuple[TopicPartition, BaseException]]:
        deadline = time.monotonic() + timeout_ms / 1000
        try:  # records still on their way from send() to the accumulator, then the flush
            await wait_for(self._flush(None), timeout_ms / 1000)
        except asyncio.TimeoutError:
            pass
        failures = await self._aio.close(max(0.0, (deadline - time.monotonic()) * 1000))
        with self._lock:  # records still on their way to the accumulator fail, never hang
            left, self._queue = list(self._queue), deque()
        for item in left:  # their send() raises this
            item.error = KafkaClosedError("the producer was closed before this record was queued",
                                          topic=item.topic, partition=item.partition)
            item.appended.set()
        return failures

    def partitions_for(self, topic: str) -> set[int]:
        """The partition indexes of ``topic`` (waits up to max_block_ms for metadata)."""
        return self._io.run(self._aio.partitions_for(topic))

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """kafka-python's shape and Kafka's names: ``{"producer-metrics": {"record-send-rate":
        ..., "record-send-total": ..., "request-latency-avg": ..., "batch-size-avg": ...,
        "buffer-available-bytes": ...}}``, as measured (client/aio/metrics.py). ``raw`` is
        kafka-python's argument and changes nothing: the values are plain numbers."""
        return self._io.run(_on_loop(self._aio.metrics))

    def bootstrap_connected(self) -> bool:
        """True while connected to a broker (kafka-python's name)."""
        if not self._io.alive:
            return False
        return self._io.run(_on_loop(self._aio.bootstrap_connected))

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        io = getattr(self, "_io", None)
        if io is not None and io.alive:
            io.stop(0)


async def _on_loop(fn: Any) -> Any:
    return fn()  # a plain call, made on the I/O thread that owns what it reads


async def _make(configs: dict[str, Any]) -> AioProducer:
    producer = AioProducer(**configs)
    try:
        await producer.start()  # NoBrokersAvailable from the constructor, as kafka-python's
    except BaseException:
        await producer.close(0)
        raise
    return producer
