"""The producer's record accumulator: per-partition queues of batches, and the buffer budget.

A batch's life (each step happens once, in this order; see :class:`ProducerBatch`):

    open      records are appended (only the newest batch of a partition is open)
    closed    full, lingered ``linger_ms``, flushed or drained: its bytes are built, no appends
    sent      in a Produce request; ``base_sequence`` stamped on first send (idempotence)
    requeued  a retriable error: back in its partition's queue *in creation order*, before any
              later batch, with the same sequence, after ``retry_backoff_ms``
    done      acknowledged (every record's future gets RecordMetadata) or failed (every
              record's future gets the error); its buffer bytes are released

Memory: every appended record reserves its estimated size from ``buffer_memory``; a send that
would exceed it waits up to ``max_block_ms`` for acknowledgements to release bytes, then fails
with KafkaTimeoutError. While anyone waits for memory, every batch counts as ready (no linger).

Threads (the producer's rules are in client/aio/producer.py's module doc): ``try_append`` may
be called from any thread (the blocking Producer appends on the caller's thread, as Kafka's Java
producer does) while the I/O thread drains; every other method runs on the I/O thread. ``lock``
(a plain Lock, held for a few dict and builder operations, never across an await or a call back
into the accumulator) guards the queues, the open batches' builders, ``buffer_used``,
``incomplete`` and ``closed``; the sender holds it while it picks and closes batches. A record's
outcome is its batch's :class:`ProduceRequestResult`, completed once.
"""
from __future__ import annotations

import asyncio
import itertools
import struct
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator

from raftka.client.aio.timeouts import wait_for
from raftka.client.errors import KafkaTimeoutError
from raftka.client.futures import ProduceRequestResult
import crc32c

from raftka.common import records as rec
from raftka.common.errors import MessageTooLargeError
from raftka.client.structs import TopicPartition

_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence (adjacent)
_CRC = struct.Struct(">I")
RECORD_OVERHEAD_BYTES = 24  # a record's varints and attributes, roughly (for the budget only)
# compression_type values (Kafka's names) -> codec id of the batch attributes.
COMPRESSION_CODES = {None: rec.COMPRESSION_NONE, "none": rec.COMPRESSION_NONE, "gzip": rec.COMPRESSION_GZIP,
                     "snappy": rec.COMPRESSION_SNAPPY, "lz4": rec.COMPRESSION_LZ4, "zstd": rec.COMPRESSION_ZSTD}
COMPRESSION_CHOICES = "None, 'none', 'gzip', 'snappy', 'lz4' or 'zstd'"


def record_size_estimate(key: bytes | None, value: bytes | None,
                         headers: list[tuple[str, bytes]] | None) -> int:
    """Bytes a record counts against ``buffer_memory`` (an estimate of its encoded size)."""
    size = RECORD_OVERHEAD_BYTES + (len(key) if key else 0) + (len(value) if value else 0)
    for hkey, hvalue in headers or ():
        size += len(hkey) + (len(hvalue) if hvalue else 0) + 4
    return size


_order = itertools.count()


class ProducerBatch:
    """A batch of one partition; see the module doc for its life."""

    __slots__ = ("tp", "builder", "created", "order", "count", "result", "reserved_bytes",
                 "closed", "buffer", "base_sequence", "producer_id", "producer_epoch", "attempts",
                 "retry_at", "in_flight", "done", "last_error")

    def __init__(self, tp: TopicPartition, builder: Any, created: float) -> None:
        self.tp = tp
        self.builder = builder
        self.created = created
        self.order = next(_order)
        self.count = 0  # records appended
        self.result = ProduceRequestResult(tp.topic, tp.partition)
        self.reserved_bytes = 0
        self.closed = False
        self.buffer: bytes | None = None
        self.base_sequence: int | None = None  # stamped on first send; kept across retries
        self.producer_id = -1
        self.producer_epoch = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.in_flight = False
        self.done = False
        self.last_error: BaseException | None = None

    @property
    def record_count(self) -> int:
        """Records appended so far."""
        return self.count

    def close(self) -> None:
        """No more appends: build the batch's bytes."""
        if not self.closed:
            self.closed = True
            self.buffer = self.builder.build()
            self.builder = None

    def stamp_producer(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Write producer id, epoch and base sequence into the built header, recomputing the CRC
        (those fields lie inside it). Retries re-send these same bytes."""
        assert self.buffer is not None, "stamp_producer needs a closed batch"
        buf = bytearray(self.buffer)
        _PRODUCER_FIELDS.pack_into(buf, rec.PRODUCER_ID_OFFSET, producer_id, producer_epoch, base_sequence)
        _CRC.pack_into(buf, rec.CRC_OFFSET, crc32c.crc32c(memoryview(buf)[rec.ATTRIBUTES_OFFSET:]))
        self.buffer = bytes(buf)
        self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence

    def complete(self, base_offset: int, log_append_time_ms: int, log_start_offset: int) -> None:
        """Every record gets its RecordMetadata (offset -1 when unknown, acks=0), in one step."""
        self.done = True
        self.result.complete(base_offset, log_append_time_ms, log_start_offset, None)

    def fail(self, error: BaseException) -> None:
        """Every record gets ``error``."""
        self.done = True
        self.last_error = error
        self.result.complete(-1, -1, -1, error)


class RecordAccumulator:
    """Per-partition batch queues bounded by ``buffer_memory``; see the module doc."""

    def __init__(self, *, batch_size: int = 16384, linger_ms: float = 5,
                 compression_type: str | None = None, buffer_memory: int = 33_554_432,
                 max_request_size: int = 1_048_576,
                 builder_factory: Callable[..., Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if compression_type not in COMPRESSION_CODES:
            from raftka.client.errors import ConfigError
            raise ConfigError("compression_type", f"must be {COMPRESSION_CHOICES}, got {compression_type!r}")
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = COMPRESSION_CODES[compression_type]
        self.buffer_memory = buffer_memory
        self.max_request_size = max_request_size
        self._builder_factory = builder_factory or rec.BatchBuilder
        self.clock = clock
        # Only partitions with a queued batch: the sender's pass walks this dict, so an empty
        # queue is removed (walking every partition ever used, 2,000-10,000 of them, on each
        # pass held the lock the caller's appends wait for).
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.buffer_used = 0
        self.closed = False  # set by the producer's close: no appends after it
        # Not re-entrant: nothing done under it takes it again (expired and failed batches are
        # taken out under it and failed after it is released). See the rules in the module doc.
        self.lock = threading.Lock()
        self._memory_freed: asyncio.Condition | None = None
        self.memory_waiters = 0
        self.incomplete: set[ProducerBatch] = set()

    # -- memory --
    async def reserve(self, nbytes: int, max_block_ms: float) -> None:
        """Reserve ``nbytes`` of ``buffer_memory``, waiting up to ``max_block_ms``."""
        if nbytes > self.max_request_size:
            raise MessageTooLargeError(f"the record is about {nbytes} bytes, over max_request_size="
                                       f"{self.max_request_size}")
        if nbytes > self.buffer_memory:
            raise MessageTooLargeError(f"the record is about {nbytes} bytes, over buffer_memory="
                                       f"{self.buffer_memory}")
        with self.lock:
            if self.buffer_used + nbytes <= self.buffer_memory and not self.memory_waiters:
                self.buffer_used += nbytes
                return
        if self._memory_freed is None:
            self._memory_freed = asyncio.Condition()
        self.memory_waiters += 1
        try:
            async with self._memory_freed:
                await wait_for(self._memory_freed.wait_for(
                    lambda: self.buffer_used + nbytes <= self.buffer_memory), max_block_ms / 1000)
                with self.lock:
                    self.buffer_used += nbytes
        except asyncio.TimeoutError:
            raise KafkaTimeoutError(
                f"buffer_memory={self.buffer_memory} bytes full for max_block_ms={max_block_ms}: "
                f"records are produced faster than the brokers acknowledge them") from None
        finally:
            self.memory_waiters -= 1

    def release(self, nbytes: int) -> None:
        """Give ``nbytes`` back to ``buffer_memory`` and wake waiting sends (on the I/O thread)."""
        with self.lock:
            self.buffer_used -= nbytes
        if self._memory_freed is not None and self.memory_waiters:
            cond = self._memory_freed

            async def notify() -> None:
                async with cond:
                    cond.notify_all()
            asyncio.get_running_loop().create_task(notify())

    # -- appending (any thread) --
    def _new_batch(self, tp: TopicPartition) -> ProducerBatch:
        builder = self._builder_factory(compression_type=self.compression,
                                        batch_size=self.batch_size,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1)
        batch = ProducerBatch(tp, builder, self.clock())
        self.queues.setdefault(tp, deque()).append(batch)
        self.incomplete.add(batch)
        return batch

    def append(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes | None]] | None, reserved: int
               ) -> tuple[ProducerBatch, int, ProducerBatch | None]:
        """Append to the open batch of ``tp`` or a new one, ``reserved`` bytes already taken
        from ``buffer_memory``. Returns (batch appended to, the record's index in it, batch
        closed because it was full or None)."""
        with self.lock:
            if self.closed:
                from raftka.client.errors import KafkaClosedError
                raise KafkaClosedError("the producer is closed")
            return self._append(tp, timestamp_ms, key, value, headers, reserved)

    def try_append(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None,
                   value: bytes | None, headers: list[tuple[str, bytes | None]] | None,
                   size: int) -> tuple[ProducerBatch, int, ProducerBatch | None] | None:
        """``append`` with the memory reservation, when it needs no wait: None when the buffer
        is full or others wait for memory (the caller then takes the waiting path)."""
        with self.lock:
            if self.closed or self.memory_waiters or self.buffer_used + size > self.buffer_memory:
                return None
            dq = self.queues.get(tp)
            if dq:  # the common case, inline: the open batch takes the record
                batch = dq[-1]
                if not batch.closed and batch.builder.append(timestamp_ms, key, value, headers or ()):
                    self.buffer_used += size
                    index = batch.count
                    batch.count = index + 1
                    batch.reserved_bytes += size
                    return batch, index, None
            self.buffer_used += size
            try:
                return self._append(tp, timestamp_ms, key, value, headers, size)
            except BaseException:
                self.buffer_used -= size
                raise

    def _append(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes | None]] | None, reserved: int
                ) -> tuple[ProducerBatch, int, ProducerBatch | None]:
        dq = self.queues.get(tp)
        closed: ProducerBatch | None = None
        if dq:
            batch = dq[-1]
            if not batch.closed:
                if batch.builder.append(timestamp_ms, key, value, headers or ()):
                    index = batch.count
                    batch.count = index + 1
                    batch.reserved_bytes += reserved
                    return batch, index, None
                batch.close()
                closed = batch
        batch = self._new_batch(tp)
        if not batch.builder.append(timestamp_ms, key, value, headers or ()):
            raise MessageTooLargeError(f"a record of about {reserved} bytes does not fit an empty batch",
                                       topic=tp.topic, partition=tp.partition)
        batch.count = 1
        batch.reserved_bytes += reserved
        return batch, 0, closed

    def requeue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch that failed retriably back, before every later batch of its partition."""
        with self.lock:
            batch.in_flight = False
            batch.retry_at = retry_at
            dq = self.queues.setdefault(batch.tp, deque())
            index = 0
            while index < len(dq) and dq[index].order < batch.order:
                index += 1
            dq.insert(index, batch)

    def finished(self, batch: ProducerBatch) -> None:
        """The batch is done (acknowledged or failed): release its bytes."""
        with self.lock:
            if batch not in self.incomplete:
                return
            self.incomplete.discard(batch)
        self.release(batch.reserved_bytes)

    def batches(self) -> Iterator[ProducerBatch]:
        """Every queued batch, partition by partition (a snapshot)."""
        with self.lock:
            snapshot = [b for dq in self.queues.values() for b in dq]
        yield from snapshot

    def has_queued(self) -> bool:
        """True when any partition has a queued batch."""
        with self.lock:
            return any(self.queues.values())

    def first_ready(self, tp: TopicPartition, now: float, *, urgent: bool) -> tuple[ProducerBatch | None, float | None]:
        """The head batch of ``tp`` if it may be sent now, else (None, when to look again).
        The caller holds ``lock`` (as for ``pop``)."""
        dq = self.queues.get(tp)
        if not dq:
            return None, None
        batch = dq[0]
        if batch.retry_at > now:
            return None, batch.retry_at
        if batch.closed or urgent or self.memory_waiters or len(dq) > 1:
            return batch, None
        due = batch.created + self.linger_ms / 1000
        if now >= due:
            return batch, None
        return None, due

    def pop(self, tp: TopicPartition) -> ProducerBatch:
        """Take the head batch of ``tp`` for sending (closing it). The caller holds ``lock``."""
        dq = self.queues[tp]
        batch = dq.popleft()
        if not dq:
            del self.queues[tp]
        batch.close()
        return batch

    def remove(self, batch: ProducerBatch) -> None:
        """Take a queued batch out of its partition's queue. The caller holds ``lock``."""
        dq = self.queues[batch.tp]
        dq.remove(batch)
        if not dq:
            del self.queues[batch.tp]

    def expire(self, now: float, limit_s: float) -> list[ProducerBatch]:
        """Take out every queued batch created ``limit_s`` or more before ``now``. A partition's
        queue is in creation order (a requeued batch goes back to its place), so only heads
        need looking at. The caller holds ``lock``."""
        expired: list[ProducerBatch] = []
        emptied: list[TopicPartition] = []
        for tp, dq in self.queues.items():
            while dq and now - dq[0].created >= limit_s:
                expired.append(dq.popleft())
            if not dq:
                emptied.append(tp)
        for tp in emptied:
            del self.queues[tp]
        return expired
