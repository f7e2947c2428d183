"""The blocking producer, shaped like kafka-python's KafkaProducer; wraps client.aio.Producer."""
from __future__ import annotations

import asyncio
from typing import Any, Sequence

from client._sync import LoopThread
from client.aio.producer import Producer as AioProducer
from client.futures import FutureRecordMetadata
from client.structs import RecordMetadata, TopicPartition

CLOSE_TIMEOUT_S_DEFAULT = 60.0


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

    def send(self, topic: str, value: Any = None, key: Any = None,
             headers: Sequence[tuple[str, bytes]] | None = None, partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue a record; returns a future whose ``get(timeout)`` gives RecordMetadata(topic,
        partition, offset, timestamp). Blocks up to ``max_block_ms`` for metadata or buffer room,
        then raises KafkaTimeoutError; a bad record raises at once."""
        result = FutureRecordMetadata()
        inner: asyncio.Future[RecordMetadata] = self._io.run(
            self._aio.send(topic, value, key=key, headers=headers, partition=partition,
                           timestamp_ms=timestamp_ms))

        def relay(f: asyncio.Future[RecordMetadata]) -> None:
            if f.cancelled():
                result.failure(asyncio.CancelledError())
            elif f.exception() is not None:
                result.failure(f.exception())  # type: ignore[arg-type]
            else:
                result.success(f.result())
        self._io.call_soon(inner.add_done_callback, relay)
        return result

    def flush(self, timeout: float | None = None) -> list[tuple[TopicPartition, BaseException]]:
        """Send everything now and wait until each record is acknowledged or failed (up to
        ``timeout`` seconds, then KafkaTimeoutError). Returns [(partition, error)] for batches that
        failed since the previous flush; empty when every record was acknowledged."""
        return self._io.run(self._aio.flush(None if timeout is None else timeout * 1000))

    def close(self, timeout: float | None = None) -> list[tuple[TopicPartition, BaseException]]:
        """Flush for up to ``timeout`` seconds, fail what is left (KafkaClosedError), stop the I/O
        thread. Returns the failures as ``flush`` does. Safe to call twice."""
        if not self._io.alive:
            return []
        timeout_s = CLOSE_TIMEOUT_S_DEFAULT if timeout is None else timeout
        try:
            return self._io.run(self._aio.close(timeout_s * 1000), timeout_s + 10)
        finally:
            self._io.stop()

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


async def _make(configs: dict[str, Any]) -> AioProducer:
    producer = AioProducer(**configs)
    await producer.start()
    return producer
