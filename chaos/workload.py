"""The workload of a chaos run: producers of unique values and concurrent consumers, recorded in
the history, and the final read that gives the truth.

- Producers (``p0``, ``p1``, ...): each an asyncio ``client.aio.Producer`` sending values
  ``"<producer>-<n>"`` round-robin over the partitions at a paced rate, with at most
  ``in_flight_max`` sends outstanding. Safe config: acks=all + idempotence. A ``send`` that raises
  before the record was queued is ``fail`` (never sent); a future that fails after queuing is
  ``info`` (it may have been written: the producer retried it for up to delivery.timeout.ms).
- Consumers (``c0``, ...): one consumer group (``group_id``, subscribe, auto-commit off) reading
  from the log start; each records what every poll returned, commits the consumed positions after
  each poll (ok, fail when refused e.g. by a rebalance, info when unknown), and every tenth poll
  reads the committed offsets back. With a client without consumer groups (``committed()``
  raising IllegalStateError) they fall back to assign() of every partition, without commits.
- ``final_read``: once healed and idle, every partition from its log start to its high watermark.
- Keyed (``keys`` > 0, the ``compact`` scenario): each send picks one of the partition's keys
  (key ``k07`` lives on partition 7 % partitions), so keys repeat and the log cleaner has old
  values to remove; a ``tombstone_ratio`` of them are tombstones (null value), after which no
  producer writes that key for ``deleted_s`` (unless every key of the partition is deleted), so
  tombstones outlive delete.retention.ms and the cleaner removes them too. The value written
  is ``"<key>/<producer>-<n>"``; a tombstone carries it in its ``WRITE_HEADER`` header. Polls
  and the final read record that string, so the checker knows every record read by its write.

Everything runs on one event loop in one thread (``Workload.start``); ``counters`` is read by the
progress line. Every client it makes gets ``client_configs`` (a secure cluster's login: security
keywords, kafka-python's names), which stay out of ``WorkloadConfig`` and so out of the history.
"""
from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from raftka.client import NewTopic, TopicPartition
from raftka.client.aio.admin import AdminClient
from raftka.client.aio.consumer import Consumer
from raftka.client.aio.producer import Producer
from raftka.client.errors import (IllegalStateError, InvalidReplicationFactorError, NotControllerError, RaftkaError,
                           RequestTimedOutError, TopicAlreadyExistsError)

from raftka.chaos.history import HistoryWriter

POLL_RECORDS_MAX = 2000
STOP_GRACE_S = 2.0
WRITE_HEADER = "chaos-write"  # a tombstone's write, since its value is null


@dataclass
class WorkloadConfig:
    """What the workload does; ``unsafe()`` gives the deliberately unsafe variant."""

    topic: str = "chaos"
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    producers: int = 3
    rate_per_producer: float = 100.0  # sends per second
    in_flight_max: int = 50  # per producer
    consumers: int = 2
    acks: Any = "all"
    idempotent: bool = True
    unclean_leader_election: bool = False
    request_timeout_ms: int = 5000
    delivery_timeout_ms: int = 30_000
    max_block_ms: int = 10_000
    linger_ms: int = 2
    group_id: str = "chaos"
    groups: str = "auto"  # "auto": use consumer groups when the client has them; "yes"; "no"
    keys: int = 0  # > 0: keyed writes over this many keys (0: unkeyed values)
    tombstone_ratio: float = 0.0  # keyed: the share of sends that are tombstones
    deleted_s: tuple[float, float] = (2.0, 8.0)  # keyed: no producer writes a key this long after its tombstone
    topic_configs: dict[str, Any] = field(default_factory=dict)  # on top of min ISR and unclean election

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def unsafe(cls, **overrides: Any) -> "WorkloadConfig":
        """acks=1, no idempotence, unclean leader election: acknowledged writes can be lost."""
        values = dict(acks=1, idempotent=False, unclean_leader_election=True, min_insync_replicas=1)
        values.update(overrides)
        return cls(**values)


@dataclass
class Counters:
    invoked: int = 0
    acked: int = 0
    failed: int = 0
    unknown: int = 0
    read: int = 0
    commits: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, error: BaseException) -> None:
        name = type(error).__name__
        self.errors[name] = self.errors.get(name, 0) + 1


def written(record: Any) -> str | None:
    """The write a record read comes from: its value, or a tombstone's ``WRITE_HEADER``. A keyed
    write's string is rebuilt with the key as stored, so a record whose key changed on its way
    (or in the cleaner) reads as a write nobody made: a phantom."""
    if record.value is not None:
        text = record.value.decode(errors="replace")
    else:
        text = next((v.decode(errors="replace") for k, v in record.headers or () if k == WRITE_HEADER), None)
    if text is not None and record.key is not None and "/" in text:
        text = f"{record.key.decode(errors='replace')}/{text.split('/', 1)[1]}"
    return text


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:300]


class Workload:
    """Producers and consumers against ``bootstrap_servers``, writing to ``history``;
    ``client_configs``: security keywords every client gets (``ProxiedCluster.client_configs``)."""

    def __init__(self, bootstrap_servers: str, history: HistoryWriter, config: WorkloadConfig, *,
                 seed: int, client_configs: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap_servers
        self.client_configs = dict(client_configs or {})  # may hold a password: never logged
        self.history = history
        self.config = config
        self.rng = random.Random(seed)
        self.counters = Counters()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="chaos-workload", daemon=True)
        self._thread.start()
        self._stopping: asyncio.Event | None = None
        self._tasks: list[asyncio.Future[Any]] = []
        self._outstanding: set[asyncio.Future[Any]] = set()
        self.groups_used = False
        self._deleted_until: dict[str, float] = {}  # keyed: key -> when producers may write it again

    def _run(self, coroutine: Any, timeout_s: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    # -- setup --
    def setup(self, timeout_s: float = 60.0) -> None:
        """Create the topic (RF, min ISR, unclean election as configured) and wait for leaders."""
        self._run(self._setup(timeout_s), timeout_s + 5)

    async def _setup(self, timeout_s: float) -> None:
        c = self.config
        admin = AdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=15_000, **self.client_configs)
        try:
            configs = {"min.insync.replicas": str(c.min_insync_replicas),
                       "unclean.leader.election.enable": str(c.unclean_leader_election).lower(),
                       **{k: str(v) for k, v in c.topic_configs.items()}}
            deadline = time.monotonic() + timeout_s
            while True:  # a broker may be fenced for a moment (just started, controller moved)
                try:
                    await admin.create_topics([NewTopic(c.topic, c.partitions, c.replication_factor,
                                                        topic_configs=configs)])
                    break
                except TopicAlreadyExistsError:
                    break  # an earlier attempt that timed out did create it
                except (InvalidReplicationFactorError, RequestTimedOutError, NotControllerError):
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)
            while True:
                described = await admin.describe_topics([c.topic])
                parts = described[0]["partitions"] if described else []
                if len(parts) == c.partitions and all(p["leader"] >= 0 and len(p["isr"]) == c.replication_factor
                                                      for p in parts):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {c.topic} not fully replicated within {timeout_s} s: {parts}")
                await asyncio.sleep(0.2)
        finally:
            await admin.close()

    # -- running --
    def start(self) -> None:
        """Start producers and consumers (returns at once)."""
        async def begin() -> None:
            self._stopping = asyncio.Event()
            for i in range(self.config.producers):
                self._tasks.append(asyncio.ensure_future(self._produce(i)))
            for i in range(self.config.consumers):
                self._tasks.append(asyncio.ensure_future(self._consume(i)))
        self._run(begin(), 10)

    def stop(self, timeout_s: float) -> None:
        """Stop invoking; wait up to ``timeout_s`` for outstanding sends, then close everything.
        Sends still unanswered stay invoke-only in the history (outcome unknown)."""
        async def end() -> None:
            assert self._stopping is not None
            self._stopping.set()
            await asyncio.wait(self._tasks, timeout=timeout_s + STOP_GRACE_S * 2)
        self._run(end(), timeout_s + 30)

    def close(self) -> None:
        async def cancel() -> None:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            self._run(cancel(), 30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    async def _produce(self, index: int) -> None:
        c = self.config
        name = f"p{index}"
        producer = Producer(bootstrap_servers=self.bootstrap, client_id=f"chaos-{name}", acks=c.acks,
                            enable_idempotence=c.idempotent, linger_ms=c.linger_ms,
                            request_timeout_ms=c.request_timeout_ms, delivery_timeout_ms=c.delivery_timeout_ms,
                            max_block_ms=c.max_block_ms,
                            max_in_flight_requests_per_connection=5 if c.idempotent else 1,
                            **self.client_configs)
        # A window per partition: a partition whose leader is unreachable fills its own window,
        # and the producer goes on writing to the others (as Jepsen's per-key workers do).
        per_partition = max(5, c.in_flight_max // c.partitions)
        windows = [asyncio.Semaphore(per_partition) for _ in range(c.partitions)]
        outstanding: set[asyncio.Future[Any]] = set()
        period = 1.0 / c.rate_per_producer
        next_at = time.monotonic() + self.rng.random() * period
        sequence = 0
        turn = index  # round-robin over partitions, starting at a different one per producer
        keys_of = [[f"k{k:02d}" for k in range(c.keys) if k % c.partitions == p] for p in range(c.partitions)]
        assert self._stopping is not None
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                if next_at > now:
                    await asyncio.sleep(next_at - now)
                next_at = max(next_at + period, time.monotonic() - 1.0)  # no burst after a stall
                free = [(turn + k) % c.partitions for k in range(c.partitions)
                        if not windows[(turn + k) % c.partitions].locked()]
                if not free:
                    await asyncio.sleep(0.05)  # every window full: the cluster is not answering
                    continue
                partition = free[0]
                turn = partition + 1
                window = windows[partition]
                await window.acquire()
                value = f"{name}-{sequence}"
                sequence += 1
                if c.keys:
                    now = time.monotonic()
                    live = [k for k in keys_of[partition] if self._deleted_until.get(k, 0.0) <= now]
                    key = self.rng.choice(live or keys_of[partition])
                    value = f"{key}/{value}"
                    tombstone = self.rng.random() < c.tombstone_ratio
                    if tombstone:  # the key stays deleted a while: its tombstone can outlive delete.retention.ms
                        self._deleted_until[key] = now + self.rng.uniform(*c.deleted_s)
                    invoked = self.history.append(name, "invoke", "send", value=value, partition=partition,
                                                  key=key, tombstone=tombstone)
                    record = dict(value=None if tombstone else value.encode(), key=key.encode(),
                                  headers=[(WRITE_HEADER, value.encode())] if tombstone else None)
                else:
                    invoked = self.history.append(name, "invoke", "send", value=value, partition=partition)
                    record = dict(value=value.encode())
                self.counters.invoked += 1
                try:
                    future = await producer.send(c.topic, partition=partition, **record)
                except RaftkaError as error:  # not queued: certainly not written
                    window.release()
                    self.counters.failed += 1
                    self.counters.error(error)
                    self.history.append(name, "fail", "send", value=value, partition=partition,
                                        error=_describe(error), latency=round(self.history.now() - invoked["time"], 6))
                    continue
                outstanding.add(future)
                future.add_done_callback(
                    lambda f, v=value, p=partition, t=invoked["time"], w=window: self._sent(name, v, p, t, f, w, outstanding))
            if outstanding:
                await asyncio.wait(outstanding, timeout=c.delivery_timeout_ms / 1000 + STOP_GRACE_S)
        finally:
            await producer.close(timeout_ms=1000)

    def _sent(self, name: str, value: str, partition: int, invoked_at: float, future: "asyncio.Future[Any]",
              window: asyncio.Semaphore, outstanding: set[asyncio.Future[Any]]) -> None:
        window.release()
        outstanding.discard(future)
        latency = round(self.history.now() - invoked_at, 6)
        if future.cancelled():
            return  # closing: stays invoke-only (unknown)
        error = future.exception()
        if error is None:
            metadata = future.result()
            self.counters.acked += 1
            self.history.append(name, "ok", "send", value=value, partition=metadata.partition,
                                offset=metadata.offset, latency=latency)
        else:
            self.counters.unknown += 1
            self.counters.error(error)
            self.history.append(name, "info", "send", value=value, partition=partition,
                                error=_describe(error), latency=latency)

    async def _group_consumer(self, name: str) -> Consumer | None:
        """A consumer in the workload's group when the client has consumer groups (its
        ``committed()`` answers instead of raising IllegalStateError), else None."""
        c = self.config
        if c.groups == "no":
            return None
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "groups not implemented yet" from an older client
            consumer = Consumer(bootstrap_servers=self.bootstrap, client_id=f"chaos-{name}", group_id=c.group_id,
                                auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=200,
                                request_timeout_ms=c.request_timeout_ms, **self.client_configs)
        try:
            consumer.subscribe([c.topic])
            await consumer.committed(TopicPartition(c.topic, 0))
        except IllegalStateError:
            await consumer.close()
            if c.groups == "yes":
                raise
            return None
        return consumer

    async def _consume(self, index: int) -> None:
        c = self.config
        name = f"c{index}"
        tps = [TopicPartition(c.topic, p) for p in range(c.partitions)]
        consumer = await self._group_consumer(name)
        in_group = consumer is not None
        if consumer is None:
            consumer = Consumer(bootstrap_servers=self.bootstrap, client_id=f"chaos-{name}",
                                auto_offset_reset="earliest", fetch_max_wait_ms=200,
                                request_timeout_ms=c.request_timeout_ms, **self.client_configs)
            consumer.assign(tps)
        else:
            self.groups_used = True
        polls = 0
        assert self._stopping is not None
        try:
            while not self._stopping.is_set():
                try:
                    got = await consumer.poll(timeout_ms=300, max_records=POLL_RECORDS_MAX)
                except IllegalStateError:
                    raise
                except RaftkaError as error:
                    self.counters.error(error)
                    await asyncio.sleep(0.2)
                    continue
                records = [[tp.partition, r.offset, written(r)] for tp, rs in got.items() for r in rs]
                if records:
                    self.counters.read += len(records)
                    self.history.append(name, "ok", "poll", records=records)
                    if in_group:
                        await self._commit(consumer, name, {tp.partition: rs[-1].offset + 1 for tp, rs in got.items() if rs})
                polls += 1
                if in_group and polls % 10 == 0:
                    await self._read_committed(consumer, name, tps)
        finally:
            await consumer.close()

    async def _commit(self, consumer: Consumer, name: str, offsets: dict[int, int]) -> None:
        """Commit the consumed positions; ok / fail (refused: e.g. a rebalance) / info (unknown)."""
        self.history.append(name, "invoke", "commit", group=self.config.group_id, offsets=offsets)
        try:
            await consumer.commit({TopicPartition(self.config.topic, p): o for p, o in offsets.items()})
        except RaftkaError as error:
            self.counters.error(error)
            kind = "info" if error.retriable or isinstance(error, RequestTimedOutError) else "fail"
            self.history.append(name, kind, "commit", group=self.config.group_id, offsets=offsets,
                                error=_describe(error))
            return
        self.counters.commits += 1
        self.history.append(name, "ok", "commit", group=self.config.group_id, offsets=offsets)

    async def _read_committed(self, consumer: Consumer, name: str, tps: list[TopicPartition]) -> None:
        started = self.history.now()
        offsets = {}
        try:
            for tp in tps:
                offsets[tp.partition] = await consumer.committed(tp)
        except RaftkaError as error:
            self.counters.error(error)
            return
        self.history.append(name, "ok", "committed", group=self.config.group_id, invoked_at=round(started, 6),
                            offsets={p: o for p, o in offsets.items() if o is not None})

    # -- the truth --
    def final_read(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Read every partition from its log start to its high watermark and append the ``final``
        op; raises TimeoutError when the log cannot be read in time."""
        return self._run(self._final_read(timeout_s), timeout_s + 10)

    async def _final_read(self, timeout_s: float) -> dict[str, Any]:
        c = self.config
        tps = [TopicPartition(c.topic, p) for p in range(c.partitions)]
        consumer = Consumer(bootstrap_servers=self.bootstrap, client_id="chaos-final", auto_offset_reset="earliest",
                            fetch_max_wait_ms=100, request_timeout_ms=c.request_timeout_ms, **self.client_configs)
        deadline = time.monotonic() + timeout_s
        try:
            consumer.assign(tps)
            start = await consumer.beginning_offsets(tps, timeout_ms=timeout_s * 1000)
            for tp in tps:
                consumer.seek(tp, start[tp])
            records: dict[int, list[list[Any]]] = {tp.partition: [] for tp in tps}
            positions = {tp: start[tp] for tp in tps}
            while True:
                end = await consumer.end_offsets(tps, timeout_ms=max(1000, (deadline - time.monotonic()) * 1000))
                while any(positions[tp] < end[tp] for tp in tps):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"final read incomplete after {timeout_s} s: at {positions}, "
                                           f"high watermarks {end}")
                    got = await consumer.poll(timeout_ms=500, max_records=POLL_RECORDS_MAX)
                    for tp, rs in got.items():
                        for r in rs:
                            records[tp.partition].append([r.offset, written(r)])
                            positions[tp] = r.offset + 1
                again = await consumer.end_offsets(tps, timeout_ms=max(1000, (deadline - time.monotonic()) * 1000))
                if again == end:  # nothing came in meanwhile: this is the whole log
                    break
            return self.history.append("final", "ok", "final", log_start={tp.partition: start[tp] for tp in tps},
                                       high_watermark={tp.partition: end[tp] for tp in tps}, records=records)
        finally:
            await consumer.close()
