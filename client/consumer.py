"""The blocking consumer, shaped like kafka-python's KafkaConsumer; wraps client.aio.Consumer."""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Iterable, Iterator

from client._sync import LoopThread
from client.aio.consumer import Consumer as AioConsumer
from client.structs import ConsumerRecord, OffsetAndTimestamp, TopicPartition

ITERATOR_POLL_MS = 1000  # one poll of the iterator waits at most this long before re-checking


class Consumer:
    """Read records from assigned (or subscribed) partitions. ``Consumer('topic', ...)``
    subscribes; arguments are kafka-python's (``bootstrap_servers``, ``auto_offset_reset``,
    ``key_deserializer``, ``value_deserializer``, ``consumer_timeout_ms``, ``max_poll_records``,
    ``fetch_min_bytes``, ``fetch_max_wait_ms``, ``max_partition_fetch_bytes``, ...; see
    client.aio.consumer.DEFAULTS). ``group_id`` is accepted but groups are not implemented yet:
    see docs/client.md. Iterating yields ConsumerRecord and stops after ``consumer_timeout_ms``
    without a record.
    """

    def __init__(self, *topics: str, **configs: Any) -> None:
        self._io = LoopThread("raftka-consumer-io")
        try:
            self._aio: AioConsumer = self._io.run(_make(topics, configs))
        except BaseException:
            self._io.stop()
            raise
        self.config = self._aio.config
        self._iter_buffer: deque[ConsumerRecord] = deque()

    def _call(self, fn: Any, *args: Any) -> Any:
        async def call() -> Any:
            return fn(*args)
        return self._io.run(call())

    # -- assignment and positions (state lives on the I/O thread; calls hop there) --
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions."""
        self._iter_buffer.clear()
        self._call(self._aio.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned now."""
        return self._call(self._aio.assignment)

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None) -> None:
        """Consume every partition of these topics (or those matching ``pattern``); no group."""
        self._call(self._aio.subscribe, topics, pattern)

    def subscription(self) -> set[str] | None:
        """The subscribed topic names (None when assigned by hand or by pattern)."""
        return self._call(self._aio.subscription)

    def unsubscribe(self) -> None:
        """Drop the subscription and every assigned partition."""
        self._iter_buffer.clear()
        self._call(self._aio.unsubscribe)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """The next record returned for ``partition`` is the one at ``offset``."""
        self._drop_iterated(partition)
        self._call(self._aio.seek, partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Next records come from the log start offset (all assigned partitions when none given)."""
        self._drop_iterated(*partitions)
        self._call(self._aio.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Next records come from the high watermark (all assigned partitions when none given)."""
        self._drop_iterated(*partitions)
        self._call(self._aio.seek_to_end, *partitions)

    def _drop_iterated(self, *partitions: TopicPartition) -> None:
        # Records fetched for the iterator but not yet yielded are behind a seek: drop them.
        if not partitions:
            self._iter_buffer.clear()
            return
        keep = {TopicPartition(*tp) for tp in partitions}
        self._iter_buffer = deque(r for r in self._iter_buffer
                                  if TopicPartition(r.topic, r.partition) not in keep)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record for ``partition``."""
        tp = TopicPartition(*partition)
        for record in self._iter_buffer:  # records fetched for the iterator are not consumed yet
            if (record.topic, record.partition) == tp:
                return record.offset
        return self._io.run(self._aio.position(tp))

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning (and fetching) records of these partitions until ``resume``."""
        self._call(self._aio.pause, *partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """Undo ``pause``."""
        self._call(self._aio.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return self._call(self._aio.paused)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark of the last fetch of ``partition`` (None before one)."""
        return self._call(self._aio.highwater, partition)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log start offset per partition."""
        return self._io.run(self._aio.beginning_offsets(list(partitions)))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermark per partition."""
        return self._io.run(self._aio.end_offsets(list(partitions)))

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose timestamp is >= the given one (None: no such record)."""
        return self._io.run(self._aio.offsets_for_times(timestamps))

    def topics(self) -> set[str]:
        """Every topic name in the cluster."""
        return self._io.run(self._aio.topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partitions of ``topic``; None when it does not exist."""
        return self._io.run(self._aio.partitions_for_topic(topic))

    # -- reading --
    def poll(self, timeout_ms: float = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition, up to ``max_records``, waiting up to ``timeout_ms`` for some."""
        if self._iter_buffer:
            # The iterator holds records already taken from the fetcher: hand those out first.
            limit = max_records or self.config["max_poll_records"]
            out: dict[TopicPartition, list[ConsumerRecord]] = {}
            while self._iter_buffer and limit:
                r = self._iter_buffer.popleft()
                out.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
                limit -= 1
            return out
        return self._io.run(self._aio.poll(timeout_ms, max_records))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        if self._iter_buffer:
            return self._iter_buffer.popleft()
        timeout_ms = self.config["consumer_timeout_ms"]
        deadline = time.monotonic() + min(timeout_ms, 10**9) / 1000
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            batch = self._io.run(self._aio.poll(max(0.0, min(left_ms, ITERATOR_POLL_MS))))
            for records in batch.values():
                self._iter_buffer.extend(records)
            if self._iter_buffer:
                return self._iter_buffer.popleft()
            if left_ms <= 0:
                raise StopIteration

    def commit(self, offsets: Any = None) -> None:
        """Not available yet (consumer groups): raises IllegalStateError."""
        self._io.run(self._aio.commit(offsets))

    def committed(self, partition: TopicPartition) -> int | None:
        """Not available yet (consumer groups): raises IllegalStateError."""
        return self._io.run(self._aio.committed(partition))

    def close(self, autocommit: bool = True) -> None:
        """Stop fetching, close connections and the I/O thread. Safe to call twice."""
        if not self._io.alive:
            return
        try:
            self._io.run(self._aio.close(), 30)
        finally:
            self._io.stop()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        io = getattr(self, "_io", None)
        if io is not None and io.alive:
            io.stop(0)


async def _make(topics: tuple[str, ...], configs: dict[str, Any]) -> AioConsumer:
    consumer = AioConsumer(*topics, **configs)
    await consumer.start()
    return consumer
