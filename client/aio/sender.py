"""The producer's sender: the I/O thread's send loop, as Kafka's Java client splits KafkaProducer
(the application side, client/aio/producer.py) from its Sender.

One sender task drains ready batches (see accumulator.py) into one Produce request per leader,
at most ``max_in_flight_requests_per_connection`` per broker. With ``enable_idempotence`` (the
default) the sender gets a producer id (InitProducerId) and stamps each batch with a
per-partition sequence on first send; a retried batch keeps it, so the leader drops a duplicate
and answers with the original offset.

Producer-id reset: when a sequenced batch fails for good, its partition's sequence has a gap the
leader would refuse forever, so once nothing is in flight the sender takes a new producer id
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

What the sender shares with the Producer, passed to it explicitly: the accumulator (the Producer
appends, the sender drains), the Cluster, the checked config, and two callbacks:
``on_batch_closed(batch)`` (a partition's last queued batch left: the partitioner may move its
sticky partition on) and ``on_producer_id(producer_id)`` (the id changed: the Producer keeps a
copy for ``try_append``'s check, read on any thread). The idempotence state (producer id, epoch,
sequences, a pending reset) is the sender's alone. The Producer calls ``start``, ``wakeup``,
``ensure_producer_id`` and ``close``, sets ``flushing`` and ``closing`` (send at once, no
linger), waits on ``batch_done`` in its flush and takes ``failures`` with ``take_failures``.

Threads: everything here runs on the I/O thread (the producer's event loop); other threads wake
it only through ``loop.call_soon_threadsafe(sender.wakeup)``. The accumulator's queues are
shared with appends on other threads, so the sender picks and expires batches under
``accumulator.lock`` (see accumulator.py).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, Callable

from raftka.client.aio.accumulator import ProducerBatch, RecordAccumulator
from raftka.client.aio.cluster import API_INIT_PRODUCER_ID, API_PRODUCE, Cluster
from raftka.client.aio.metrics import MetricConfig, Sensor, metric_config
from raftka.client.aio.timeouts import cancel_and_wait, wait_for
from raftka.client.errors import KafkaClosedError, KafkaTimeoutError
from raftka.client.structs import TopicPartition
from raftka.common import errors
from raftka.common.errors import RaftkaError

log = logging.getLogger(__name__)

CLOSE_TASKS_TIMEOUT_S = 2.0  # how long close() waits for its cancelled tasks to finish
# Delivery timeouts are looked at (a walk of every queued partition) at most this often, not on
# every pass: with thousands of partitions queued, those walks were a third of the I/O thread.
EXPIRY_CHECK_INTERVAL_S = 0.1

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


class SenderSensors:
    """What the sender measures for Kafka's producer-metrics (client/aio/metrics.py)."""

    def __init__(self, config: MetricConfig) -> None:
        self.record_send = Sensor(config)  # records per Produce request sent (retries included)
        self.record_retry = Sensor(config)  # records of batches requeued for a retry
        self.record_error = Sensor(config)  # records of batches failed for good
        self.batch_size = Sensor(config)  # bytes of each batch sent
        self.records_per_request = Sensor(config)
        self.request_latency = Sensor(config)  # ms from a Produce's submit to its answer
        self.record_queue_time = Sensor(config)  # ms from a batch's creation to its first send


class Sender:
    """Drains the accumulator into Produce requests and completes batches with their answers;
    see the module doc. Created and started by the Producer."""

    def __init__(self, accumulator: RecordAccumulator, cluster: Cluster, config: dict[str, Any], *,
                 on_batch_closed: Callable[[ProducerBatch], None],
                 on_producer_id: Callable[[int], None]) -> None:
        self.accumulator = accumulator
        self.cluster = cluster
        self.config = config
        self._on_batch_closed = on_batch_closed
        self._on_producer_id = on_producer_id
        self._acks = config["acks"]
        # Idempotence: the producer id, epoch and next sequence per partition.
        self.producer_id = -1
        self.producer_epoch = -1
        self._pid_task: asyncio.Task[None] | None = None
        self._next_sequence: dict[TopicPartition, int] = {}
        self._reset_pid = False
        self._maybe_written: set[int] = set()  # ProducerBatch.order of batches with an unknown outcome
        # In flight.
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self._node_in_flight: dict[int, int] = {}
        self._node_waiting: dict[int, int] = {}  # Produce tasks per broker connecting, not yet submitted
        self._muted: set[TopicPartition] = set()  # a batch was requeued; wait for in-flight to end
        self._next_expiry_check = 0.0  # monotonic time of the next delivery-timeout walk
        self._wakeup = asyncio.Event()
        self.wakeup = self._wakeup.set  # the Event's own set: no extra call when the Producer wakes us
        # Set by the Producer's wake from another thread, cleared as a pass starts: while set, a
        # pass is yet to start and will see every append made before it, so no further wakeup
        # is needed (keyed records over 10,000 partitions open a batch, and woke us, per record).
        self.wake_pending = False
        self.batch_done = asyncio.Event()  # set when a batch is acknowledged or failed (flush)
        self.flushing = 0  # flushes under way (set by the Producer): send without linger
        self.closing = False  # set by the Producer's close: send without linger
        self.closed = False  # set by close(): no more retries, the loops end
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.failures: list[tuple[TopicPartition, BaseException]] = []  # since the last take_failures
        # Raftka's own counters (tests read them), and the sensors behind Kafka's producer-metrics.
        self.counters = {"produce_requests": 0, "batches_sent": 0, "batch_retries": 0,
                         "producer_id_resets": 0}
        self.sensors = SenderSensors(metric_config(config))

    @property
    def requests_in_flight(self) -> int:
        """Produce requests sent and not yet answered (Kafka's requests-in-flight)."""
        return sum(self._node_in_flight.values())

    def start(self) -> None:
        """Start the send loop on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run_sender())

    def take_failures(self) -> list[tuple[TopicPartition, BaseException]]:
        """The (partition, error) of each batch failed since the previous call."""
        failures, self.failures = self.failures, []
        return failures

    async def close(self) -> list[tuple[TopicPartition, BaseException]]:
        """Fail every incomplete batch (KafkaClosedError), stop the tasks; the failures not yet
        taken."""
        self.closed = True
        with self.accumulator.lock:
            self.accumulator.closed = True  # an append racing with close fails rather than hangs
            left = list(self.accumulator.incomplete)
        for batch in left:
            error = KafkaClosedError("the producer was closed before this record was acknowledged",
                                     topic=batch.tp.topic, partition=batch.tp.partition)
            self._fail(batch, error)
        failures = self.take_failures()
        await cancel_and_wait([self._task, self._pid_task, *self._tasks], CLOSE_TASKS_TIMEOUT_S)
        return failures

    # -- producer id --
    def _set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._on_producer_id(producer_id)

    async def ensure_producer_id(self, timeout_ms: float) -> None:
        """Wait up to ``timeout_ms`` for a producer id (one InitProducerId task at a time)."""
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
        while not self.closed:
            try:
                code, body = await self.cluster.request_any(API_INIT_PRODUCER_ID,
                                                            {"transactional_id": None,
                                                             "transaction_timeout_ms": 60_000})
            except RaftkaError as error:
                if not error.retriable:
                    raise
                code, body = error.code, {}
            if code == errors.NONE:  # Kafka's answer carries its error in the body
                code = body.get("error_code", errors.NONE)
            if code == errors.NONE:
                self._set_producer_id(body["producer_id"], body["producer_epoch"])
                return
            spec = errors.SPECS.get(code)
            if spec is None or not spec.retriable:
                raise errors.error_for(code, (body or {}).get("error_message"))
            await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)
        raise KafkaClosedError("the producer was closed before it got a producer id")

    async def _reset_producer_id(self) -> None:
        """After a sequenced batch failed for good, the partition's sequence has a gap the leader
        would refuse forever: take a new producer id and restart every sequence at 0."""
        self._reset_pid = False
        self.counters["producer_id_resets"] += 1
        old_producer_id = self.producer_id
        self._set_producer_id(-1, self.producer_epoch)
        self._next_sequence.clear()
        for batch in list(self.accumulator.batches()):
            if batch.base_sequence is not None and batch.order in self._maybe_written:
                with self.accumulator.lock:
                    self.accumulator.remove(batch)
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
            await self.ensure_producer_id(self.config["request_timeout_ms"])
        except RaftkaError:
            self._reset_pid = True

    # -- the send loop --
    async def _run_sender(self) -> None:
        # Not `while True`: ends on closed too (set before close() cancels it), a second guard
        # should a cancellation ever be lost (Python 3.11's asyncio.wait_for lost them; the
        # client waits with client/aio/timeouts.py instead).
        while not self.closed:
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
        self.wake_pending = False  # appends from here on wake us again
        c = self.config
        now = time.monotonic()
        wake_at: float | None = None

        def later(t: float | None) -> None:
            nonlocal wake_at
            if t is not None:
                wake_at = t if wake_at is None else min(wake_at, t)

        if now >= self._next_expiry_check:
            self._next_expiry_check = now + EXPIRY_CHECK_INTERVAL_S
            self._expire(now)
        if self._reset_pid:
            if any(self._in_flight.values()):
                return None  # wait for in-flight answers; their completion wakes us
            await self._reset_producer_id()
            if self._reset_pid:  # no new producer id yet: send nothing under the old sequences
                return now + c["retry_backoff_ms"] / 1000
        urgent = bool(self.flushing or self.closing)
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
                if tp not in self.accumulator.queues:  # its last queued batch
                    self._on_batch_closed(batch)
                else:
                    later(now)  # more of this partition may go in the next request
        sensors = self.sensors
        for node, batches in by_node.items():
            self._node_in_flight[node] = self._node_in_flight.get(node, 0) + 1
            self.counters["produce_requests"] += 1
            self.counters["batches_sent"] += len(batches)
            records = 0
            for batch in batches:
                if batch.attempts == 0:  # time in the accumulator, from creation to first send
                    sensors.record_queue_time.record((now - batch.created) * 1000)
                batch.in_flight = True
                batch.attempts += 1
                self._in_flight.setdefault(batch.tp, []).append(batch)
                records += batch.record_count
                sensors.batch_size.record(len(batch.buffer or b""))
            sensors.record_send.record(records)
            sensors.records_per_request.record(records)
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
        if wake_at is None or wake_at > now + EXPIRY_CHECK_INTERVAL_S:  # else that pass looks
            with self.accumulator.lock:
                for dq in self.accumulator.queues.values():  # heads are the oldest: see accumulator.expire
                    if dq:
                        later(max(dq[0].created + c["delivery_timeout_ms"] / 1000, self._next_expiry_check))
        return wake_at

    def _prepare(self, batch: ProducerBatch) -> None:
        """Stamp the producer id and a sequence on a batch's first send (idempotence)."""
        if not self.config["enable_idempotence"] or batch.base_sequence is not None:
            return
        seq = self._next_sequence.get(batch.tp, 0)
        batch.stamp_producer(self.producer_id, self.producer_epoch, seq)
        self._next_sequence[batch.tp] = (seq + batch.record_count) % (1 << 31)

    def _expire(self, now: float) -> None:
        with self.accumulator.lock:
            expired = self.accumulator.expire(now, self.config["delivery_timeout_ms"] / 1000)
        for batch in expired:
            tp = batch.tp
            cause = f" (last error: {batch.last_error})" if batch.last_error else ""
            self._fail(batch, KafkaTimeoutError(
                f"{batch.record_count} records not acknowledged within delivery_timeout_ms="
                f"{self.config['delivery_timeout_ms']}{cause}", topic=tp.topic, partition=tp.partition))

    # -- batch outcomes --
    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if batch.done:
            return
        batch.fail(error)
        self.sensors.record_error.record(batch.record_count)
        self._maybe_written.discard(batch.order)
        self.accumulator.finished(batch)
        self.batch_done.set()
        self.failures.append((batch.tp, error))
        if self.config["enable_idempotence"] and batch.base_sequence is not None:
            self._reset_pid = True
        self._wakeup.set()

    def _acknowledged(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int,
                      log_start_offset: int) -> None:
        batch.complete(base_offset, log_append_time_ms, log_start_offset)
        self._maybe_written.discard(batch.order)
        self.accumulator.finished(batch)
        self.batch_done.set()

    def _retry_or_fail(self, batch: ProducerBatch, error: RaftkaError) -> None:
        c = self.config
        now = time.monotonic()
        batch.last_error = error
        expired = now - batch.created >= c["delivery_timeout_ms"] / 1000
        if batch.attempts > c["retries"] or expired or self.closed:
            self._fail(batch, error if not expired else KafkaTimeoutError(
                f"not acknowledged within delivery_timeout_ms={c['delivery_timeout_ms']} "
                f"(last error: {error})", topic=batch.tp.topic, partition=batch.tp.partition))
            return
        self.counters["batch_retries"] += 1
        self.sensors.record_retry.record(batch.record_count)
        self.accumulator.requeue(batch, now + c["retry_backoff_ms"] / 1000)
        self._muted.add(batch.tp)

    # -- Produce requests --
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
        except Exception:  # a bug below must not stop the pass with these batches taken: as above
            log.exception("submitting a Produce to broker %d failed", node)
            return False
        if future is None:
            return False
        future.add_done_callback(functools.partial(self._produce_sent, node, batches, time.monotonic()))
        return True

    def _produce_sent(self, node: int, batches: list[ProducerBatch], sent: float,
                      future: "asyncio.Future[tuple[int, Any]]") -> None:
        try:
            if self.closed:
                return  # close() has failed every batch still incomplete
            error = (errors.NetworkExceptionError("the Produce request was cancelled")
                     if future.cancelled() else future.exception())
            if error is None:
                self.sensors.request_latency.record((time.monotonic() - sent) * 1000)
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
                    sent = time.monotonic()  # connecting counts, as in Kafka's request-latency
                    future = await self.cluster.submit_connected(node, API_PRODUCE, body)
                    self._node_waiting[node] -= 1
                    waiting = False
                    self._wakeup.set()
                    if future is not None:
                        future.add_done_callback(functools.partial(self._produce_sent, node, batches, sent))
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
