"""The asyncio consumer: assign or subscribe (alone or in a consumer group), seek, poll, commit, iterate.

Positions: each assigned partition has a *position* (the offset of the next record ``poll``
returns) and a *fetch position* (the next offset to fetch; ahead of the position by what is
buffered). A background fetcher keeps one Fetch in flight per leader for the partitions whose
buffer holds less than ``max_partition_fetch_bytes`` (prefetch: while the application works
through one response, the next is on its way). ``seek`` bumps the partition's generation:
buffered records and answers to older fetches are dropped.

A partition without a position gets one from ``auto_offset_reset``: ``'earliest'`` (log start
offset), ``'latest'`` (high watermark) or ``'none'`` (``poll`` raises NoOffsetForPartitionError).
OFFSET_OUT_OF_RANGE (e.g. records deleted by retention) applies the same policy; with
``'none'`` ``poll`` raises OffsetOutOfRangeError until the application seeks.

Records come only from below the high watermark (the broker sends no more; the consumer also
drops anything at or above it) and never before the fetch offset (a batch may start earlier).

With a ``group_id`` the consumer is a member of that consumer group (client/aio/group.py,
docs/consumer-groups.md): ``subscribe`` joins the group and the partitions of the subscribed
topics are shared among its members; positions start from the committed offsets (else
``auto_offset_reset``); ``commit``/``commit_async`` (and auto-commit, every
``auto_commit_interval_ms`` in ``poll`` and on ``close``) store how far the application got.
``assign`` with a ``group_id`` reads and commits the group's offsets without joining it.
Without a ``group_id``, ``subscribe`` takes every partition and nothing can be committed.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from raftka.client.aio.cluster import API_FETCH, API_LIST_OFFSETS, Cluster
from raftka.client.aio.group import GroupMember
from raftka.client.aio.timeouts import cancel_and_wait, wait_for
from raftka.client.assignors import make_assignors
from raftka.client.errors import (ConfigError, IllegalStateError, KafkaClosedError, KafkaTimeoutError,
                           NoOffsetForPartitionError, SerializationError)
from raftka.common import errors
from raftka.common import records as rec
from raftka.common.errors import OffsetOutOfRangeError, RaftkaError
from raftka.client.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
SUBSCRIPTION_REFRESH_MS = 1000  # metadata age at which a subscription with missing topics refreshes
CLOSE_TASKS_TIMEOUT_S = 2.0  # how long close() waits for its cancelled tasks to finish
RESETS = {"earliest": EARLIEST, "smallest": EARLIEST, "latest": LATEST, "largest": LATEST, "none": None}
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})  # skipped by patterns
# A topic matched by a pattern stays subscribed this long after it vanished from a metadata answer:
# brokers learn new topics at slightly different times, and one lagging answer must not make a
# group member flip its subscription (two needless rebalances).
PATTERN_TOPIC_GRACE_MS = 5000

DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": "localhost:9092",
    "client_id": None,
    "group_id": None,
    "key_deserializer": None,
    "value_deserializer": None,
    "fetch_min_bytes": 1,
    "fetch_max_wait_ms": 500,
    "fetch_max_bytes": 52_428_800,
    "max_partition_fetch_bytes": 1_048_576,
    "request_timeout_ms": 30_000,
    "retry_backoff_ms": 100,
    "auto_offset_reset": "latest",
    "enable_auto_commit": True,
    "auto_commit_interval_ms": 5000,
    "group_instance_id": None,
    "session_timeout_ms": 10_000,
    "heartbeat_interval_ms": 3000,
    "max_poll_interval_ms": 300_000,
    "partition_assignment_strategy": ("cooperative-sticky",),
    "default_offset_commit_callback": None,
    "exclude_internal_topics": True,
    "max_poll_records": 500,
    "consumer_timeout_ms": float("inf"),
    "metadata_max_age_ms": 300_000,
    "check_crcs": True,
    "connection_factory": None,
}
# kafka-python options that mean nothing here; accepted and ignored.
IGNORED = {"api_version", "isolation_level"}


def consumer_config(configs: dict[str, Any]) -> dict[str, Any]:
    """Defaults + ``configs``, checked; ConfigError names a bad or unknown key."""
    unknown = set(configs) - set(DEFAULTS) - IGNORED
    if unknown:
        raise ConfigError(sorted(unknown)[0], "unknown consumer config")
    config = {**DEFAULTS, **{k: v for k, v in configs.items() if k not in IGNORED}}
    if config["auto_offset_reset"] not in RESETS:
        raise ConfigError("auto_offset_reset", f"must be earliest, latest or none, got "
                                               f"{config['auto_offset_reset']!r}")
    for key in ("fetch_max_bytes", "max_partition_fetch_bytes", "request_timeout_ms", "max_poll_records"):
        if not isinstance(config[key], int) or config[key] < 1:
            raise ConfigError(key, f"must be a positive int, got {config[key]!r}")
    for key in ("fetch_min_bytes", "fetch_max_wait_ms", "retry_backoff_ms"):
        if not isinstance(config[key], (int, float)) or config[key] < 0:
            raise ConfigError(key, f"must be >= 0, got {config[key]!r}")
    for key in ("auto_commit_interval_ms", "session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms"):
        if not isinstance(config[key], int) or isinstance(config[key], bool) or config[key] < 1:
            raise ConfigError(key, f"must be a positive int (milliseconds), got {config[key]!r}")
    if config["heartbeat_interval_ms"] >= config["session_timeout_ms"]:
        raise ConfigError("heartbeat_interval_ms", f"must be below session_timeout_ms "
                                                   f"({config['session_timeout_ms']}), got {config['heartbeat_interval_ms']}")
    if config["group_id"] is not None and (not isinstance(config["group_id"], str) or not config["group_id"]):
        raise ConfigError("group_id", f"must be a non-empty string or None, got {config['group_id']!r}")
    if config["group_instance_id"] is not None and (config["group_id"] is None
                                                    or not isinstance(config["group_instance_id"], str)
                                                    or not config["group_instance_id"]):
        raise ConfigError("group_instance_id", "must be a non-empty string, and needs a group_id")
    try:
        make_assignors(config["partition_assignment_strategy"])
    except ValueError as error:
        raise ConfigError("partition_assignment_strategy", str(error)) from None
    return config


@dataclass
class PartitionState:
    """What the consumer knows of one assigned partition."""

    position: int | None = None
    fetch_position: int | None = None
    reset: int | None = None  # EARLIEST / LATEST pending, or None
    generation: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    paused: bool = False
    retry_at: float = 0.0
    failed: BaseException | None = None  # raised by poll until the application seeks
    awaiting_committed: bool = False  # group mode: the position comes from the committed offset
    # Fetched records not yet polled, one chunk per fetch answer:
    # [generation, ConsumerRecords, next index, bytes, bytes not yet released]
    buffer: deque[list[Any]] = field(default_factory=deque)
    buffered_bytes: int = 0


_new_tuple = tuple.__new__
_OFFSET_MAX = 1 << 63


def decode_records(buf: bytes, fetch_offset: int, high_watermark: int, check_crcs: bool,
                   topic: str = "", partition: int = -1) -> tuple[list[ConsumerRecord], int]:
    """Records of ``buf`` (whole batches) with fetch_offset <= offset < high_watermark, as
    ConsumerRecords (not deserialized); and the offset to fetch next.

    Hot path of consuming: one comprehension per batch builds the records with
    ``tuple.__new__`` (no per-record method calls)."""
    out: list[ConsumerRecord] = []
    extend = out.extend
    new = _new_tuple
    record_cls = ConsumerRecord
    next_offset = fetch_offset
    hi = high_watermark if high_watermark >= 0 else _OFFSET_MAX
    for pos, header in rec.iter_batches(buf):
        if header.next_offset <= fetch_offset:
            continue
        if header.base_offset >= hi:
            break
        next_offset = max(next_offset, min(header.next_offset, hi))
        if header.is_control:
            continue
        records = rec.decode_batch(buf, pos, verify_crc=check_crcs)[1]
        if records and (records[0][0] < fetch_offset or records[-1][0] >= hi):
            records = [r for r in records if fetch_offset <= r[0] < hi]
        ts_type = header.timestamp_type
        epoch = header.partition_leader_epoch
        extend([new(record_cls, (topic, partition, offset, ts, ts_type, key, value, headers, None,
                                 -1 if key is None else len(key), -1 if value is None else len(value),
                                 sum(len(k) + len(v or b"") for k, v in headers) if headers else 0,
                                 epoch))
                for offset, ts, key, value, headers in records])
    return out, next_offset


async def list_offsets(cluster: Cluster, query: dict[TopicPartition, int], timeout_ms: float,
                       retry_backoff_ms: float) -> dict[TopicPartition, tuple[int, int]]:
    """ListOffsets at the leaders: {tp: timestamp (-1 latest, -2 earliest)} -> {tp: (offset,
    timestamp)}; retriable errors are retried until ``timeout_ms``. (The admin client uses it too.)"""
    deadline = time.monotonic() + timeout_ms / 1000
    left = dict(query)
    found: dict[TopicPartition, tuple[int, int]] = {}
    last: BaseException | None = None
    for topic in {tp.topic for tp in left}:
        await cluster.partitions_for(topic, timeout_ms)
    while left:
        if time.monotonic() >= deadline:
            raise KafkaTimeoutError(f"ListOffsets not answered within {int(timeout_ms)} ms "
                                    f"(last error: {last})")
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in left:
            leader = cluster.metadata.leader_for(tp)
            if leader is None:
                cluster.request_update()
                last = errors.LeaderNotAvailableError(topic=tp.topic, partition=tp.partition)
                continue
            by_node.setdefault(leader, []).append(tp)
        results = await asyncio.gather(*(_list_offsets_at(cluster, n, tps, left) for n, tps in by_node.items()),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, RaftkaError) and result.retriable:
                    last = result
                    continue
                raise result
            for tp, answer in result.items():
                if isinstance(answer, BaseException):
                    if isinstance(answer, RaftkaError) and answer.retriable:
                        last = answer
                        if answer.invalid_metadata:
                            cluster.request_update()
                        continue
                    raise answer
                found[tp] = answer
                left.pop(tp, None)
        if left:
            await asyncio.sleep(min(retry_backoff_ms / 1000, max(0.0, deadline - time.monotonic())))
            if any(cluster.metadata.leader_for(tp) is None for tp in left):
                await cluster.wait_for_update(max(1.0, (deadline - time.monotonic()) * 1000))
    return found


async def _list_offsets_at(cluster: Cluster, node: int, tps: list[TopicPartition], query: dict[TopicPartition, int]
                           ) -> dict[TopicPartition, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in tps:
        topics.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "timestamp": query[tp],
            "current_leader_epoch": cluster.metadata.leader_epoch(tp)})
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}
    code, answer = await cluster.request(node, API_LIST_OFFSETS, body)
    if code != errors.NONE:
        raise errors.error_for(code, (answer or {}).get("error_message"))
    out: dict[TopicPartition, Any] = {}
    for t in answer.get("topics") or []:
        for p in t.get("partitions") or []:
            tp = TopicPartition(t["name"], p["partition_index"])
            pcode = p.get("error_code", 0) or 0
            out[tp] = ((p.get("offset", -1), p.get("timestamp", -1)) if pcode == errors.NONE
                       else errors.error_for(pcode, p.get("error_message"), topic=tp.topic,
                                             partition=tp.partition))
    return out


class Consumer:
    """asyncio consumer; the blocking ``client.Consumer`` wraps it. ``topics`` subscribe (every
    partition, or the group's share of them with a ``group_id``); arguments as kafka-python's
    KafkaConsumer (see ``DEFAULTS``)."""

    def __init__(self, *topics: str, **configs: Any) -> None:
        self.config = consumer_config(configs)
        c = self.config
        self.cluster = Cluster(c["bootstrap_servers"], client_id=c["client_id"] or "raftka-consumer",
                               request_timeout_ms=c["request_timeout_ms"],
                               retry_backoff_ms=c["retry_backoff_ms"],
                               metadata_max_age_ms=c["metadata_max_age_ms"],
                               connection_factory=c["connection_factory"])
        self._default_reset = RESETS[c["auto_offset_reset"]]
        self._states: dict[TopicPartition, PartitionState] = {}
        self._subscription: set[str] | None = None
        self._pattern: re.Pattern[str] | None = None
        self._pattern_topics: dict[str, float] = {}  # matched topic -> when metadata last listed it
        self._wakeup = asyncio.Event()
        self._data = asyncio.Event()
        self._nodes_in_flight: set[int] = set()
        self._fetcher: asyncio.Task[None] | None = None
        self._resolver: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._committed_retry_at = 0.0
        self._group: GroupMember | None = None
        if c["group_id"] is not None:
            self._group = GroupMember(self.cluster, c, make_assignors(c["partition_assignment_strategy"]),
                                      subscribed_topics=self._subscribed_topics, positions=self.consumed_offsets,
                                      apply_assignment=self._apply_group_assignment, wake=self._data.set)
        if topics:
            self.subscribe(topics)

    # -- lifecycle --
    async def start(self) -> None:
        """Start the metadata and fetcher tasks (poll and friends call it)."""
        if self._fetcher is None:
            self.cluster.start()
            self._fetcher = asyncio.get_running_loop().create_task(self._run_fetcher())

    async def close(self, autocommit: bool = True, timeout_ms: float | None = None) -> None:
        """Leave the group (committing first when ``enable_auto_commit`` and ``autocommit``,
        revoking through the listener), stop fetching and close every connection. Leaving the
        group is given at most ``timeout_ms`` (None: no limit beyond its requests' own)."""
        if self._closed:
            return
        if self._group is not None:
            try:
                await wait_for(self._group.close(autocommit, self.config["request_timeout_ms"]),
                               None if timeout_ms is None else timeout_ms / 1000)
            except asyncio.TimeoutError:
                log.warning("consumer: leaving the group took over %d ms; closed without it", timeout_ms)
            except Exception:  # closing goes on whatever the group says
                log.exception("consumer: leaving the group failed")
        self._closed = True
        await cancel_and_wait([self._fetcher, self._resolver, *self._tasks], CLOSE_TASKS_TIMEOUT_S)
        await self.cluster.close()

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaClosedError("the consumer is closed")

    # -- assignment --
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replaces any assignment). With a ``group_id`` their
        positions start from the group's committed offsets, but the group is not joined."""
        self._check_open()
        if self._subscription is not None or self._pattern is not None:
            raise IllegalStateError("assign() after subscribe(); call unsubscribe() first")
        self._set_assignment([TopicPartition(*tp) for tp in partitions])

    def _set_assignment(self, partitions: Sequence[TopicPartition]) -> None:
        wanted = set(partitions)
        for tp in list(self._states):
            if tp not in wanted:
                del self._states[tp]
        for tp in partitions:
            if tp not in self._states:
                self._states[tp] = self._new_state(tp)
        self.cluster.add_topics({tp.topic for tp in partitions})
        self._wakeup.set()

    def _new_state(self, tp: TopicPartition) -> PartitionState:
        if self._group is not None:  # the committed offset first, then auto_offset_reset
            return PartitionState(awaiting_committed=True)
        state = PartitionState(reset=self._default_reset)
        if self._default_reset is None:
            state.failed = NoOffsetForPartitionError("no position and auto_offset_reset='none'; seek first",
                                                     topic=tp.topic, partition=tp.partition)
        return state

    def _apply_group_assignment(self, added: set[TopicPartition], removed: set[TopicPartition]) -> None:
        """The group moved partitions: drop the removed ones' fetch state, start the added ones."""
        for tp in removed:
            self._states.pop(tp, None)
        for tp in sorted(added):
            if tp not in self._states:
                self._states[tp] = self._new_state(tp)
        self.cluster.add_topics({tp.topic for tp in added})
        self._wakeup.set()

    def consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What the application has consumed: the position of every assigned partition."""
        return {tp: OffsetAndMetadata(s.position) for tp, s in self._states.items() if s.position is not None}

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned now."""
        return set(self._states)

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """Consume ``topics`` (or the topics matching ``pattern``, also ones created later).
        With a ``group_id`` the group's members share their partitions (``listener``: a
        ConsumerRebalanceListener); without one this consumer takes every partition."""
        self._check_open()
        if self._group is not None and self._subscription is None and self._pattern is None and self._states:
            raise IllegalStateError("subscribe() after assign(); call unsubscribe() first")
        if pattern is not None:
            self._pattern = re.compile(pattern)
            self._pattern_topics = {}
            self._subscription = None
            self.cluster.track_all_topics()
        else:
            topics = [topics] if isinstance(topics, str) else list(topics)
            if not topics:
                raise ValueError("subscribe needs topics or a pattern")
            self._subscription = set(topics)
            self._pattern = None
            self.cluster.add_topics(topics)
        if self._group is not None:
            self._group.subscribe(listener)
        self._update_subscription()

    def subscription(self) -> set[str] | None:
        """The subscribed topic names (None when assigned by hand or by pattern)."""
        return set(self._subscription) if self._subscription is not None else None

    def unsubscribe(self) -> "asyncio.Task[None] | None":
        """Drop the subscription and every assigned partition. In a group this revokes them
        (listener) and leaves the group: the returned task does that and may be awaited."""
        self._subscription = None
        self._pattern = None
        self._states.clear()
        if self._group is not None and self._group.subscribed:
            task = asyncio.get_running_loop().create_task(self._group.unsubscribe())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return task
        return None

    def _subscribed_topics(self) -> list[str]:
        """The topics of the subscription: the named ones, or those matching the pattern now."""
        if self._pattern is not None:
            skip = INTERNAL_TOPICS if self.config["exclude_internal_topics"] else frozenset()
            now = time.monotonic()
            for t, info in self.cluster.metadata.topics.items():
                if info.error_code == errors.NONE and self._pattern.fullmatch(t) and t not in skip:
                    self._pattern_topics[t] = now
            for t, seen in list(self._pattern_topics.items()):
                if now - seen > PATTERN_TOPIC_GRACE_MS / 1000:
                    del self._pattern_topics[t]
            return sorted(self._pattern_topics)
        return sorted(self._subscription or ())

    def _update_subscription(self) -> None:
        if self._subscription is None and self._pattern is None:
            return
        meta = self.cluster.metadata
        topics = self._subscribed_topics()
        if (any(meta.partitions_for(t) is None for t in topics) or self._pattern is not None) \
                and self.cluster.metadata_age_ms > SUBSCRIPTION_REFRESH_MS:
            self.cluster.request_update()  # a subscribed topic may appear (or match) any time
        if self._group is not None:
            return  # the group's leader assigns
        wanted = [TopicPartition(t, p) for t in topics for p in (meta.partitions_for(t) or [])]
        if set(wanted) != set(self._states):
            self._set_assignment(wanted)

    async def topics(self) -> set[str]:
        """Every topic name in the cluster."""
        await self.start()
        meta = await self.cluster.refresh_metadata(topics=None)
        return set(meta.topics)

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partitions of ``topic`` as the cluster says now; None when it does not exist."""
        await self.start()
        fresh = await self.cluster.refresh_metadata([topic])
        parts = fresh.partitions_for(topic)
        return set(parts) if parts is not None else None

    # -- positions --
    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self._states.get(TopicPartition(*tp))
        if state is None:
            raise IllegalStateError(f"partition {tp.topic}-{tp.partition} is not assigned to this consumer")
        return state

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record ``poll`` returns for ``partition``."""
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self._seek(self._state(partition), offset, None)

    def _seek(self, state: PartitionState, offset: int | None, reset: int | None) -> None:
        state.generation += 1
        state.awaiting_committed = False
        state.buffer.clear()
        state.buffered_bytes = 0
        state.position = state.fetch_position = offset
        state.reset = reset
        state.failed = None
        state.retry_at = 0.0
        self._wakeup.set()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Next poll starts at the log start offset (all assigned partitions when none given)."""
        for tp in partitions or tuple(self._states):
            self._seek(self._state(tp), None, EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Next poll starts at the high watermark (only records produced from now on)."""
        for tp in partitions or tuple(self._states):
            self._seek(self._state(tp), None, LATEST)

    async def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int:
        """The offset of the next record for ``partition`` (resolving a pending reset)."""
        await self.start()
        state = self._state(partition)
        if state.position is None and state.awaiting_committed:
            await self._resolve_committed([TopicPartition(*partition)], timeout_ms)
        if state.position is None:
            await self._resolve_positions([TopicPartition(*partition)], timeout_ms)
        if state.failed is not None and state.position is None:
            raise state.failed
        assert state.position is not None
        return state.position

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning (and fetching) records of these partitions until ``resume``."""
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        """Undo ``pause``."""
        for tp in partitions:
            self._state(tp).paused = False
        self._wakeup.set()

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {tp for tp, s in self._states.items() if s.paused}

    def highwater(self, partition: TopicPartition) -> int | None:
        """The last high watermark seen in a fetch of ``partition`` (None before one)."""
        hw = self._state(partition).high_watermark
        return hw if hw >= 0 else None

    # -- offsets by time --
    async def _list_offsets(self, query: dict[TopicPartition, int], timeout_ms: float | None = None
                            ) -> dict[TopicPartition, tuple[int, int]]:
        await self.start()
        return await list_offsets(self.cluster, query, timeout_ms or self.config["request_timeout_ms"],
                                  self.config["retry_backoff_ms"])

    async def beginning_offsets(self, partitions: Iterable[TopicPartition],
                                timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        found = await self._list_offsets({TopicPartition(*tp): EARLIEST for tp in partitions}, timeout_ms)
        return {tp: off for tp, (off, _ts) in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next acknowledged record gets)."""
        found = await self._list_offsets({TopicPartition(*tp): LATEST for tp in partitions}, timeout_ms)
        return {tp: off for tp, (off, _ts) in found.items()}

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int],
                                timeout_ms: float | None = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is >= the given one, per partition (None: none)."""
        for ts in timestamps.values():
            if ts < 0:
                raise ValueError(f"timestamps must be >= 0, got {ts}")
        found = await self._list_offsets({TopicPartition(*tp): ts for tp, ts in timestamps.items()}, timeout_ms)
        return {tp: (OffsetAndTimestamp(off, ts) if off >= 0 else None) for tp, (off, ts) in found.items()}

    async def _resolve_positions(self, tps: Sequence[TopicPartition] | None = None,
                                 timeout_ms: float | None = None) -> None:
        pending = {tp: s.reset for tp, s in self._states.items()
                   if s.position is None and s.reset is not None and (tps is None or tp in tps)}
        if not pending:
            return
        generations = {tp: self._states[tp].generation for tp in pending}
        found = await self._list_offsets(pending, timeout_ms)  # type: ignore[arg-type]
        for tp, (offset, _ts) in found.items():
            state = self._states.get(tp)
            if state is None or state.generation != generations[tp] or state.position is not None:
                continue  # reassigned or sought meanwhile
            state.position = state.fetch_position = offset
            state.reset = None
        self._wakeup.set()

    # -- fetching --
    async def _run_fetcher(self) -> None:
        backoff = self.config["retry_backoff_ms"] / 1000
        while not self._closed:
            self._wakeup.clear()
            try:
                self._update_subscription()
                # Positions are looked up in a task of their own: a partition whose ListOffsets
                # keeps failing must not hold up fetching for the others.
                if (self._resolver is None or self._resolver.done()) and any(
                        s.position is None and (s.reset is not None or s.awaiting_committed)
                        for s in self._states.values()):
                    self._resolver = asyncio.get_running_loop().create_task(self._resolve_in_background())
                self._send_fetches()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not stop every partition's fetching
                log.exception("consumer fetcher step failed")
            try:
                await wait_for(self._wakeup.wait(), backoff if self._needs_retry() else 1.0)
            except asyncio.TimeoutError:
                pass

    async def _resolve_committed(self, tps: Sequence[TopicPartition] | None = None,
                                 timeout_ms: float | None = None) -> None:
        """Group mode: positions of newly assigned partitions from the group's committed
        offsets; partitions without one fall back to auto_offset_reset."""
        pending = [tp for tp, s in self._states.items()
                   if s.awaiting_committed and s.position is None and (tps is None or tp in tps)]
        if not pending or self._group is None:
            return
        found = await self._group.committed(pending, timeout_ms or self.config["request_timeout_ms"])
        for tp in pending:
            state = self._states.get(tp)
            if state is None or not state.awaiting_committed or state.position is not None:
                continue  # revoked or sought meanwhile
            state.awaiting_committed = False
            committed = found.get(tp)
            if committed is not None:
                state.position = state.fetch_position = committed.offset
            else:
                state.reset = self._default_reset
                if self._default_reset is None:
                    state.failed = NoOffsetForPartitionError(
                        "no committed offset and auto_offset_reset='none'; seek first",
                        topic=tp.topic, partition=tp.partition)
                    self._data.set()
        self._wakeup.set()

    async def _resolve_in_background(self) -> None:
        try:
            await self._resolve_committed(timeout_ms=self.config["request_timeout_ms"])
            await self._resolve_positions(timeout_ms=self.config["request_timeout_ms"])
        except RaftkaError as error:
            log.debug("consumer: looking up reset positions failed: %s", error)
            await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)
        finally:
            self._wakeup.set()

    def _needs_retry(self) -> bool:
        return any(s.position is None or s.retry_at for s in self._states.values()) or (
            (self._subscription is not None or self._pattern is not None) and not self._states)

    def _send_fetches(self) -> None:
        c = self.config
        now = time.monotonic()
        by_node: dict[int, list[tuple[TopicPartition, PartitionState]]] = {}
        for tp, state in self._states.items():
            if (state.paused or state.fetch_position is None or state.failed is not None
                    or state.buffered_bytes >= c["max_partition_fetch_bytes"] or state.retry_at > now):
                continue
            state.retry_at = 0.0
            leader = self.cluster.metadata.leader_for(tp)
            if leader is None:
                self.cluster.request_update()
                state.retry_at = now + c["retry_backoff_ms"] / 1000
                continue
            if leader in self._nodes_in_flight:
                continue
            by_node.setdefault(leader, []).append((tp, state))
        for node, parts in by_node.items():
            self._nodes_in_flight.add(node)
            task = asyncio.get_running_loop().create_task(self._fetch(node, parts))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _fetch(self, node: int, parts: list[tuple[TopicPartition, PartitionState]]) -> None:
        c = self.config
        asked = {tp: (state.generation, state.fetch_position) for tp, state in parts}
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, state in parts:
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": self.cluster.metadata.leader_epoch(tp),
                "fetch_offset": state.fetch_position, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": c["max_partition_fetch_bytes"]})
        body = {"replica_id": -1, "max_wait_ms": c["fetch_max_wait_ms"], "min_bytes": c["fetch_min_bytes"],
                "max_bytes": c["fetch_max_bytes"], "isolation_level": 0,
                "topics": [{"topic": t, "partitions": p} for t, p in topics.items()]}
        try:
            try:
                code, answer = await self.cluster.request(
                    node, API_FETCH, body, timeout_ms=c["request_timeout_ms"] + int(c["fetch_max_wait_ms"]))
            except RaftkaError as error:
                self._backoff([tp for tp, _ in parts], error)
                return
            if code != errors.NONE:
                self._backoff([tp for tp, _ in parts], errors.error_for(code, (answer or {}).get("error_message")))
                return
            for t in answer.get("responses") or []:
                for p in t.get("partitions") or []:
                    tp = TopicPartition(t["topic"], p["partition_index"])
                    if tp in asked:
                        self._handle_partition(tp, p, *asked[tp])
        finally:
            self._nodes_in_flight.discard(node)
            if not self._closed:
                # The next fetch to this node leaves now, not at the fetcher loop's next pass
                # (turns of the loop later): the leader holds a waiting fetch again sooner.
                try:
                    self._send_fetches()
                except Exception:  # the fetcher loop's pass below retries
                    log.exception("consumer fetcher step failed")
            self._wakeup.set()

    def _backoff(self, tps: Iterable[TopicPartition], error: BaseException) -> None:
        log.debug("fetch failed, backing off: %s", error)
        retry_at = time.monotonic() + self.config["retry_backoff_ms"] / 1000
        for tp in tps:
            state = self._states.get(tp)
            if state is not None:
                state.retry_at = retry_at
        self.cluster.request_update()

    def _handle_partition(self, tp: TopicPartition, p: dict[str, Any], generation: int, fetch_offset: int) -> None:
        state = self._states.get(tp)
        if state is None or state.generation != generation or state.fetch_position != fetch_offset:
            return  # sought, reassigned or already advanced: this answer is stale
        code = p.get("error_code", 0) or 0
        if code == errors.NONE:
            hw = p.get("high_watermark", -1)
            state.high_watermark = hw
            state.log_start_offset = p.get("log_start_offset", -1)
            raw = p.get("records") or b""
            if not raw:
                return
            try:
                found, next_offset = decode_records(raw, fetch_offset, hw, self.config["check_crcs"],
                                                    tp.topic, tp.partition)
            except RaftkaError as error:
                state.failed = error if error.topic else errors.error_for(
                    error.code, error.message, topic=tp.topic, partition=tp.partition)
                self._data.set()
                return
            state.fetch_position = next_offset
            if found:
                nbytes = len(raw)  # counts against max_partition_fetch_bytes until polled
                state.buffer.append([generation, found, 0, nbytes, nbytes])
                state.buffered_bytes += nbytes
                self._data.set()
            return
        error = errors.error_for(code, p.get("error_message"), topic=tp.topic, partition=tp.partition)
        if code == errors.OFFSET_OUT_OF_RANGE:
            if self._default_reset is None:
                state.failed = OffsetOutOfRangeError(
                    f"offset {fetch_offset} is out of range (log start {p.get('log_start_offset')}, "
                    f"high watermark {p.get('high_watermark')}) and auto_offset_reset='none'",
                    topic=tp.topic, partition=tp.partition)
                self._data.set()
            else:
                log.info("offset %s of %s-%s out of range; resetting (%s)", fetch_offset, tp.topic,
                         tp.partition, self.config["auto_offset_reset"])
                self._seek(state, None, self._default_reset)
            return
        if error.retriable:
            if error.invalid_metadata:
                self.cluster.update_leader(tp, p.get("current_leader"))
            self._backoff([tp], error)
            return
        state.failed = error
        self._data.set()

    # -- polling --
    def _deserialize(self, tp: TopicPartition, records: list[ConsumerRecord]
                     ) -> tuple[list[ConsumerRecord], SerializationError | None]:
        """``records`` through the deserializers; stops at the first that raises: (the records
        before it, the error)."""
        c = self.config
        key_deserializer, value_deserializer = c["key_deserializer"], c["value_deserializer"]
        new = _new_tuple
        out: list[ConsumerRecord] = []
        append = out.append
        for r in records:
            key, value = r[5], r[6]
            try:
                if key_deserializer is not None and key is not None:
                    key = key_deserializer(key)
                if value_deserializer is not None and value is not None:
                    value = value_deserializer(value)
            except Exception as error:
                failure = SerializationError(f"deserializing offset {r[2]} failed: "
                                             f"{type(error).__name__}: {error}", topic=tp.topic,
                                             partition=tp.partition)
                failure.__cause__ = error
                return out, failure
            append(new(ConsumerRecord, (*r[:5], key, value, *r[7:])))
        return out, None

    def _drain(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        taken = 0
        c = self.config
        deserialize = c["key_deserializer"] is not None or c["value_deserializer"] is not None
        for tp, state in list(self._states.items()):
            if state.failed is not None and not state.buffer:
                if out:
                    return out  # hand out what we have; the error comes with the next poll
                error = state.failed
                if not isinstance(error, (NoOffsetForPartitionError, OffsetOutOfRangeError)):
                    state.failed = None  # raised once; fetching resumes (and may fail again)
                raise error
            if state.paused:
                continue
            buffer = state.buffer
            while buffer and taken < max_records:
                chunk = buffer[0]
                generation, records, index, nbytes, unreleased = chunk
                n = len(records)
                if generation != state.generation:
                    buffer.popleft()
                    state.buffered_bytes -= unreleased
                    continue
                position = state.position
                if position is not None:
                    while index < n and records[index][2] < position:  # [2]: offset
                        index += 1
                take = min(n - index, max_records - taken)
                if take > 0:
                    part = records if index == 0 and take == n else records[index:index + take]
                    failure = None
                    if deserialize:
                        part, failure = self._deserialize(tp, part)
                    if part:
                        listed = out.get(tp)
                        if listed is None:
                            out[tp] = part
                        else:
                            listed.extend(part)
                        index += len(part)
                        taken += len(part)
                        state.position = part[-1][2] + 1
                        released = min(unreleased, nbytes * len(part) // n)
                        unreleased -= released
                        state.buffered_bytes -= released
                    if failure is not None:  # the failing record stays first in line
                        chunk[2], chunk[4] = index, unreleased
                        state.position = records[index][2]
                        if out:
                            self._wakeup.set()
                            return out  # the error comes with the next poll
                        raise failure
                if index >= n:
                    buffer.popleft()
                    state.buffered_bytes -= unreleased
                else:
                    chunk[2], chunk[4] = index, unreleased
            if not buffer and state.fetch_position is not None and state.position is not None:
                state.position = max(state.position, state.fetch_position)
            if taken >= max_records:
                break
        if out:
            # Rotate so one busy partition does not starve the others across polls.
            first = next(iter(out))
            if first in self._states:
                self._states[first] = self._states.pop(first)
        self._wakeup.set()
        return out

    async def poll(self, timeout_ms: float = 0, max_records: int | None = None,
                   update_offsets: bool = True) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far, up to ``max_records`` (default ``max_poll_records``), waiting up
        to ``timeout_ms`` for the first. Raises a partition's error (OffsetOutOfRangeError,
        NoOffsetForPartitionError, CorruptRecordError, ...) once its records before it are out."""
        self._check_open()
        if self._group is not None and self._group._in_callback:
            raise IllegalStateError("poll() from a rebalance listener")
        await self.start()
        if not self._states and self._subscription is None and self._pattern is None:
            raise IllegalStateError("no partitions: call assign() or subscribe() first")
        max_records = max_records or self.config["max_poll_records"]
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._data.clear()
            if self._group is not None:
                await self._group.poll(deadline)  # joins, rebalance listeners, auto-commit
            self._update_subscription()
            out = self._drain(max_records)
            if out:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return {}
            try:
                await wait_for(self._data.wait(), left)
            except asyncio.TimeoutError:
                return {}

    async def getone(self, timeout_ms: float | None = None) -> ConsumerRecord | None:
        """One record, waiting up to ``timeout_ms`` (None: ``consumer_timeout_ms``); None when
        nothing arrived in time."""
        timeout = self.config["consumer_timeout_ms"] if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + min(timeout, 10**9) / 1000
        join_deadline = time.monotonic() + self.config["max_poll_interval_ms"] / 1000
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            got = await self.poll(timeout_ms=max(0.0, min(left_ms, 60_000)), max_records=1)
            for records in got.values():
                return records[0]
            if left_ms <= 0:
                if self.awaiting_first_assignment() and time.monotonic() < join_deadline:
                    deadline = time.monotonic() + min(timeout, 10**9) / 1000
                    continue
                return None

    def awaiting_first_assignment(self) -> bool:
        """True while a group member has not been given any partition yet and its join is under
        way: the iterator's ``consumer_timeout_ms`` starts counting only after that, as with
        kafka-python, whose poll waits for the join."""
        group = self._group
        return (group is not None and group.subscribed and not self._states and group.rebalances == 0
                and group.fatal is None)

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        record = await self.getone()
        if record is None:
            raise StopAsyncIteration
        return record

    # -- committed offsets (groups) --
    def _need_group(self, what: str) -> GroupMember:
        if self._group is None:
            raise IllegalStateError(f"{what} needs a group_id: committed offsets belong to consumer groups, "
                                    "and this consumer has none")
        return self._group

    @staticmethod
    def _normalize(offsets: Any) -> dict[TopicPartition, OffsetAndMetadata]:
        out = {}
        for tp, value in dict(offsets).items():
            if isinstance(value, OffsetAndMetadata):
                out[TopicPartition(*tp)] = value
            elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                out[TopicPartition(*tp)] = OffsetAndMetadata(value)
            elif isinstance(value, tuple) and value and isinstance(value[0], int):
                out[TopicPartition(*tp)] = OffsetAndMetadata(*value)
            else:
                raise ValueError(f"offset for {tp} must be an int >= 0 or an OffsetAndMetadata, got {value!r}")
        return out

    async def commit(self, offsets: Any = None) -> None:
        """Commit ``offsets`` ({TopicPartition: OffsetAndMetadata or int}: the next record to
        read), by default the position of every assigned partition, and wait for the
        coordinator. CommitFailedError when a rebalance took this consumer out of the group."""
        group = self._need_group("commit()")
        self._check_open()
        await self.start()
        chosen = self.consumed_offsets() if offsets is None else self._normalize(offsets)
        await group.commit(chosen, self.config["request_timeout_ms"])

    def commit_async(self, offsets: Any = None, callback: Any = None) -> "asyncio.Task[None]":
        """Commit in the background; ``callback(offsets, None or exception)`` when done
        (default ``default_offset_commit_callback``). Returns the task."""
        group = self._need_group("commit_async()")
        self._check_open()
        chosen = self.consumed_offsets() if offsets is None else self._normalize(offsets)
        return group.commit_async(chosen, callback or self.config["default_offset_commit_callback"])

    async def committed(self, partition: TopicPartition, metadata: bool = False,
                        timeout_ms: float | None = None) -> "int | OffsetAndMetadata | None":
        """The group's committed offset of ``partition`` (None when nothing is committed);
        an OffsetAndMetadata with ``metadata=True``."""
        group = self._need_group("committed()")
        self._check_open()
        await self.start()
        tp = TopicPartition(*partition)
        found = (await group.committed([tp], timeout_ms or self.config["request_timeout_ms"])).get(tp)
        if found is None:
            return None
        return found if metadata else found.offset

    def group_metadata(self) -> dict[str, Any] | None:
        """{group_id, generation_id, member_id, group_instance_id} (None without a group)."""
        if self._group is None:
            return None
        return {"group_id": self._group.group_id, "generation_id": self._group.generation,
                "member_id": self._group.member_id, "group_instance_id": self._group.instance_id}
