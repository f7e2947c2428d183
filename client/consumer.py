"""The blocking consumer, shaped like kafka-python's KafkaConsumer; wraps client.aio.Consumer.

Rebalance listeners run on the application's thread, inside ``poll`` (or ``close``,
``unsubscribe``), as in kafka-python: the I/O thread hands each call over and waits, so a
listener may call the consumer's blocking methods (``commit``, ``seek``, ``position``...).
Every call into the asyncio Consumer runs on the I/O thread (``_call``, ``_run``, or the loop
thread's ``run``): the asyncio Consumer is never touched from another thread, so it takes no lock.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections import deque
from typing import Any, Callable, Coroutine, Iterable, Iterator, NamedTuple

from raftka.client._sync import LoopThread, close_at_exit, forget_at_exit
from raftka.client.aio.consumer import Consumer as AioConsumer
from raftka.client.aio.group import CommitFailedError, ConsumerRebalanceListener
from raftka.client.errors import IllegalStateError, KafkaTimeoutError
from raftka.client.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

ITERATOR_POLL_MS = 1000  # one poll of the iterator waits at most this long before re-checking
CLOSE_TIMEOUT_S = 30.0  # close()'s default timeout
# close(timeout) returns within timeout + this, even when the I/O thread is stuck: time for
# cancelled tasks and connections to unwind after the group is left (each bounded at 2 s).
CLOSE_MARGIN_S = 3.0

log = logging.getLogger(__name__)

__all__ = ["Consumer", "ConsumerRebalanceListener", "CommitFailedError", "OffsetAndMetadata"]


class _ListenerCall(NamedTuple):
    """One rebalance-listener call handed from the I/O thread to the thread inside ``_run``."""

    fn: Callable[[set[TopicPartition]], Any]
    partitions: set[TopicPartition]
    done: concurrent.futures.Future[Any]  # completed once ``fn`` returned (or raised)


class _OnCallerThread:
    """Wraps the application's listener for the asyncio consumer: each call is run on the
    thread blocked in ``Consumer._run`` and awaited."""

    def __init__(self, listener: Any, consumer: "Consumer") -> None:
        self.listener = listener
        self.consumer = consumer

    async def _hand_over(self, fn: Callable[[set[TopicPartition]], Any], partitions: set[TopicPartition]) -> None:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.consumer._callbacks.put(_ListenerCall(fn, partitions, done))
        await asyncio.wrap_future(done)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._hand_over(self.listener.on_partitions_revoked, revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._hand_over(self.listener.on_partitions_assigned, assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        fn = getattr(self.listener, "on_partitions_lost", None) or self.listener.on_partitions_revoked
        await self._hand_over(fn, lost)


class Consumer:
    """Read records from assigned (or subscribed) partitions. ``Consumer('topic', ...)``
    subscribes; arguments are kafka-python's (``bootstrap_servers``, ``auto_offset_reset``,
    ``key_deserializer``, ``value_deserializer``, ``consumer_timeout_ms``, ``max_poll_records``,
    ``fetch_min_bytes``, ``fetch_max_wait_ms``, ``max_partition_fetch_bytes``, ...; see
    client.aio.consumer.DEFAULTS). ``group_id`` makes it a member of that consumer group (see
    docs/consumer-groups.md). Iterating yields ConsumerRecord and stops after
    ``consumer_timeout_ms`` without a record. The constructor fetches metadata from a bootstrap
    server first, as kafka-python's does: NoBrokersAvailable when none answers within
    ``bootstrap_timeout_ms``.
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
        self._callbacks: queue.Queue[Any] = queue.Queue()
        self._running = threading.local()
        close_at_exit(self)  # closed (committing, leaving its group) at interpreter exit if never closed

    def _run(self, coro: Coroutine[Any, Any, Any], timeout_s: float | None = None) -> Any:
        """Run ``coro`` (poll, close, unsubscribe: calls that may run rebalance listeners) on the
        I/O thread; meanwhile run the listener calls it hands over, on this thread. From inside a
        listener such a call would wait for itself: IllegalStateError, as in Kafka's client."""
        if getattr(self._running, "depth", 0):
            coro.close()
            raise IllegalStateError("poll(), close() and unsubscribe() cannot be called from a rebalance listener")
        future = self._io.submit(coro)
        future.add_done_callback(lambda f: self._callbacks.put(f))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._running.depth = 1
        try:
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    item = self._callbacks.get(timeout=wait)
                except queue.Empty:
                    future.cancel()
                    raise KafkaTimeoutError(f"no result within {timeout_s} s") from None
                if item is future:
                    return future.result()
                if isinstance(item, concurrent.futures.Future):
                    continue  # an earlier call's completion (it timed out): not ours
                try:
                    item.fn(item.partitions)
                except BaseException as error:  # the asyncio side logs it and goes on
                    item.done.set_exception(error)
                else:
                    item.done.set_result(None)
        finally:
            self._running.depth = 0

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

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Consume these topics (or those matching ``pattern``). With a ``group_id`` the group
        shares their partitions; ``listener`` hears of revoked and assigned ones (on this
        thread, inside ``poll``). Without one, every partition."""
        wrapped = _OnCallerThread(listener, self) if listener is not None else None
        self._call(self._aio.subscribe, topics, pattern, wrapped)

    def subscription(self) -> set[str] | None:
        """The subscribed topic names (None when assigned by hand or by pattern)."""
        return self._call(self._aio.subscription)

    def unsubscribe(self) -> None:
        """Drop the subscription and every assigned partition (in a group: revoke and leave)."""
        self._iter_buffer.clear()

        async def unsubscribe() -> None:
            task = self._aio.unsubscribe()
            if task is not None:
                await task
        self._run(unsubscribe())

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
        return self._run(self._aio.poll(timeout_ms, max_records))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        if self._iter_buffer:
            return self._iter_buffer.popleft()
        timeout_ms = self.config["consumer_timeout_ms"]
        deadline = time.monotonic() + min(timeout_ms, 10**9) / 1000
        join_deadline = time.monotonic() + self.config["max_poll_interval_ms"] / 1000
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            batch = self._run(self._aio.poll(max(0.0, min(left_ms, ITERATOR_POLL_MS))))
            for records in batch.values():
                self._iter_buffer.extend(records)
            if self._iter_buffer:
                return self._iter_buffer.popleft()
            if left_ms <= 0:
                # consumer_timeout_ms counts from the first assignment: joining the group first
                # (the coordinator may wait group.initial.rebalance.delay.ms) is not idleness.
                if self._call(self._aio.awaiting_first_assignment) and time.monotonic() < join_deadline:
                    deadline = time.monotonic() + min(timeout_ms, 10**9) / 1000
                    continue
                raise StopIteration

    def _consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Positions, minus records fetched for the iterator but not yet handed out."""
        offsets = self._call(self._aio.consumed_offsets)
        for record in self._iter_buffer:
            tp = TopicPartition(record.topic, record.partition)
            if tp in offsets and record.offset < offsets[tp].offset:
                offsets[tp] = OffsetAndMetadata(record.offset)
        return offsets

    def commit(self, offsets: Any = None) -> None:
        """Commit ``offsets`` ({TopicPartition: OffsetAndMetadata or int}; by default what the
        application has consumed) and wait. CommitFailedError when a rebalance took this
        consumer's partitions (it rejoins on the next poll)."""
        chosen = self._consumed_offsets() if offsets is None else offsets
        self._io.run(self._aio.commit(chosen))

    def commit_async(self, offsets: Any = None, callback: Any = None) -> "concurrent.futures.Future[None]":
        """Commit in the background; ``callback(offsets, None or exception)`` runs on the I/O
        thread when done (keep it short; no blocking consumer calls there). Returns a future."""
        chosen = self._consumed_offsets() if offsets is None else offsets

        async def start() -> "asyncio.Task[None]":
            return self._aio.commit_async(chosen, callback)
        task = self._io.run(start())
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def finish(t: "asyncio.Task[None]") -> None:
            if t.cancelled():
                done.cancel()
            elif t.exception() is not None:
                done.set_exception(t.exception())  # type: ignore[arg-type]
            else:
                done.set_result(None)
        self._io.call_soon(task.add_done_callback, finish)
        return done

    def committed(self, partition: TopicPartition, metadata: bool = False) -> "int | OffsetAndMetadata | None":
        """The group's committed offset of ``partition`` (None when none; an OffsetAndMetadata
        with ``metadata=True``)."""
        return self._io.run(self._aio.committed(partition, metadata))

    def group_metadata(self) -> dict[str, Any] | None:
        """{group_id, generation_id, member_id, group_instance_id}, or None without a group."""
        return self._call(self._aio.group_metadata)

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """kafka-python's shape and Kafka's names: ``consumer-metrics``,
        ``consumer-fetch-manager-metrics`` (``records-consumed-rate``, ``records-lag-max``,
        ``fetch-latency-avg``...) and, in a group, ``consumer-coordinator-metrics``, as measured
        (client/aio/metrics.py). ``raw`` is kafka-python's argument and changes nothing."""
        return self._call(self._aio.metrics)

    def bootstrap_connected(self) -> bool:
        """True while connected to a broker (kafka-python's name)."""
        if not self._io.alive:
            return False
        return self._call(self._aio.bootstrap_connected)

    def close(self, autocommit: bool = True, timeout: float | None = None) -> None:
        """Commit what was consumed (``enable_auto_commit`` and ``autocommit``), leave the
        group, stop fetching, close connections and the I/O thread. Safe to call twice.
        Leaving the group gets up to ``timeout`` seconds (default CLOSE_TIMEOUT_S); close returns
        within ``timeout`` + CLOSE_MARGIN_S even when the I/O thread is stuck (then logged)."""
        if not self._io.alive:
            return
        if getattr(self._running, "depth", 0):
            raise IllegalStateError("close() cannot be called from a rebalance listener")
        forget_at_exit(self)
        timeout_s = CLOSE_TIMEOUT_S if timeout is None else max(0.0, timeout)
        deadline = time.monotonic() + timeout_s + CLOSE_MARGIN_S
        try:
            if self._iter_buffer:  # records fetched but never handed out are not consumed
                rewind = {TopicPartition(r.topic, r.partition): r.offset for r in reversed(self._iter_buffer)}
                self._iter_buffer.clear()

                async def seek_back() -> None:
                    for tp, offset in rewind.items():
                        self._aio.seek(tp, offset)
                self._io.run(seek_back(), max(0.0, deadline - time.monotonic()))
            self._run(self._aio.close(autocommit, timeout_s * 1000), max(0.0, deadline - time.monotonic()))
        except KafkaTimeoutError:  # only the runs' own limits: the asyncio close raises none
            log.warning("consumer close: the I/O thread did not finish within %.1f s; "
                        "not waiting for it any longer", timeout_s + CLOSE_MARGIN_S)
        finally:
            self._io.stop(max(0.0, deadline - time.monotonic()))

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
    try:
        await consumer.start()  # NoBrokersAvailable from the constructor, as kafka-python's
    except BaseException:
        await consumer.close(autocommit=False, timeout_ms=1000)  # never joined: nothing to leave
        raise
    return consumer
