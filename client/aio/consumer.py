"""The asyncio consumer: assign or subscribe (alone or in a consumer group), seek, poll, commit, iterate.

Three parts, as in Kafka's Java client (KafkaConsumer, SubscriptionState, Fetcher):

- ``Consumer`` (here): the public API; it checks arguments, changes the subscription state and
  drives the group member and the fetcher.
- ``SubscriptionState`` (client/aio/subscription_state.py): what is subscribed and assigned,
  and per assigned partition its position, fetch position, pause, pending reset, the high
  watermark it learned and its buffered records. No I/O.
- ``Fetcher`` (client/aio/fetcher.py): Fetch and ListOffsets at the leaders, the prefetch
  pipeline, decoding answers into ConsumerRecords, and position lookups (committed offsets,
  ``auto_offset_reset``).

Positions: each assigned partition has a *position* (the offset of the next record ``poll``
returns) and a *fetch position* (the next offset to fetch; ahead of the position by what is
buffered). The fetcher keeps one Fetch in flight per leader for the partitions whose buffer
holds less than ``max_partition_fetch_bytes`` (prefetch: while the application works through
one response, the next is on its way). ``seek`` bumps the partition's generation: buffered
records and answers to older fetches are dropped.

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
import time
from typing import Any, Iterable, Sequence

from raftka.client.aio.cluster import Cluster
from raftka.client.aio.configs import CLIENT_DEFAULTS, check_config
from raftka.client.aio.metrics import metric_config
from raftka.client.aio.fetcher import Fetcher
from raftka.client.aio.group import GroupMember
from raftka.client.aio.subscription_state import EARLIEST, LATEST, RESETS, SubscriptionState
from raftka.client.aio.timeouts import cancel_and_wait, wait_for
from raftka.client.assignors import make_assignors
from raftka.client.aio.security import SECURITY_DEFAULTS, apply_security
from raftka.client.errors import ConfigError, IllegalStateError, KafkaClosedError
from raftka.client.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

log = logging.getLogger(__name__)

SUBSCRIPTION_REFRESH_MS = 1000  # metadata age at which a subscription with missing topics refreshes
CLOSE_TASKS_TIMEOUT_S = 2.0  # how long close() waits for its cancelled tasks to finish

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
    **SECURITY_DEFAULTS,
    **CLIENT_DEFAULTS,
}


def consumer_config(configs: dict[str, Any]) -> dict[str, Any]:
    """Defaults + ``configs``, checked; ConfigError names a bad or unknown key (the keys every
    client ignores or refuses: client/aio/configs.py)."""
    config = check_config("consumer", configs, DEFAULTS)
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
    apply_security(config)
    return config


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
                               connection_factory=c["connection_factory"], metric_config=metric_config(c))
        self._subscriptions = SubscriptionState(RESETS[c["auto_offset_reset"]], group_mode=c["group_id"] is not None,
                                                exclude_internal_topics=c["exclude_internal_topics"])
        self._data = asyncio.Event()  # set when poll may have something to hand out (or raise)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False
        self._bootstrapped = False
        self._closed = False
        self._group: GroupMember | None = None
        if c["group_id"] is not None:
            self._group = GroupMember(self.cluster, c, make_assignors(c["partition_assignment_strategy"]),
                                      subscribed_topics=self._subscribed_topics, positions=self.consumed_offsets,
                                      apply_assignment=self._apply_group_assignment, wake=self._data.set)
        self._fetcher = Fetcher(self.cluster, c, self._subscriptions, self._group,
                                refresh_subscription=self._update_subscription, notify=self._data.set)
        if topics:
            self.subscribe(topics)

    # -- lifecycle --
    async def start(self) -> None:
        """Start the metadata and fetcher tasks and fetch metadata from a bootstrap server, as
        aiokafka's ``start()`` (and kafka-python's constructor) does: NoBrokersAvailable when
        none answers within ``bootstrap_timeout_ms``. ``poll`` and friends start the tasks by
        themselves."""
        self._start()
        if not self._bootstrapped:
            await self.cluster.connect_bootstrap(self.config["bootstrap_timeout_ms"])
            self._bootstrapped = True

    def _start(self) -> None:
        """Start the metadata and fetcher tasks (once), on the running loop."""
        if not self._started:
            self._started = True
            self.cluster.start()
            self._fetcher.start()

    async def stop(self) -> None:
        """aiokafka's name for ``close()``: commit (auto-commit), leave the group, close."""
        await self.close()

    async def __aenter__(self) -> "Consumer":
        try:
            await self.start()
        except BaseException:  # __aexit__ does not run when __aenter__ raises: stop the tasks here
            await self.close(autocommit=False)
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def bootstrap_connected(self) -> bool:
        """True while connected to a broker (kafka-python's name)."""
        return self.cluster.bootstrap_connected()

    def metrics(self) -> dict[str, dict[str, float]]:
        """kafka-python's shape, Kafka's names: ``consumer-metrics`` (connections, requests),
        ``consumer-fetch-manager-metrics`` and, with a group_id, ``consumer-coordinator-metrics``,
        with what this consumer measured (client/aio/metrics.py; on its event loop's thread)."""
        out = {"consumer-metrics": self.cluster.metrics(),
               "consumer-fetch-manager-metrics": self._fetcher.metrics()}
        if self._group is not None:
            coordinator = self._group.metrics()
            coordinator["assigned-partitions"] = float(len(self._subscriptions.assigned_partitions()))
            out["consumer-coordinator-metrics"] = coordinator
        return out

    async def close(self, autocommit: bool = True, timeout_ms: float | None = None) -> None:
        """Leave the group (committing first when ``enable_auto_commit`` and ``autocommit``,
        revoking through the listener), stop fetching, end the fetch sessions at the brokers (at
        most SESSION_CLOSE_TIMEOUT_MS, client/aio/fetcher.py) and close every connection. Leaving
        the group is given at most ``timeout_ms`` (None: no limit beyond its requests' own)."""
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
        await cancel_and_wait([*self._fetcher.close(), *self._tasks], CLOSE_TASKS_TIMEOUT_S)
        await self._fetcher.close_sessions()  # frees their slots at the brokers (bounded, never raises)
        await self.cluster.close()

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaClosedError("the consumer is closed")

    # -- assignment --
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replaces any assignment). With a ``group_id`` their
        positions start from the group's committed offsets, but the group is not joined."""
        self._check_open()
        if self._subscriptions.has_subscription():
            raise IllegalStateError("assign() after subscribe(); call unsubscribe() first")
        self._set_assignment([TopicPartition(*tp) for tp in partitions])

    def _set_assignment(self, partitions: Sequence[TopicPartition]) -> None:
        self._subscriptions.assign(partitions)
        self.cluster.add_topics({tp.topic for tp in partitions})
        self._fetcher.wake()

    def _apply_group_assignment(self, added: set[TopicPartition], removed: set[TopicPartition]) -> None:
        """The group moved partitions: drop the removed ones' fetch state, start the added ones."""
        self._subscriptions.change_assignment(added, removed)
        self.cluster.add_topics({tp.topic for tp in added})
        self._fetcher.wake()

    def consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What the application has consumed: the position of every assigned partition."""
        return self._subscriptions.all_consumed()

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned now."""
        return self._subscriptions.assigned_partitions()

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """Consume ``topics`` (or the topics matching ``pattern``, also ones created later).
        With a ``group_id`` the group's members share their partitions (``listener``: a
        ConsumerRebalanceListener); without one this consumer takes every partition."""
        self._check_open()
        subscriptions = self._subscriptions
        if self._group is not None and not subscriptions.has_subscription() and subscriptions.has_assignment():
            raise IllegalStateError("subscribe() after assign(); call unsubscribe() first")
        if pattern is not None:
            subscriptions.subscribe_pattern(pattern)
            self.cluster.track_all_topics()
        else:
            topics = [topics] if isinstance(topics, str) else list(topics)
            if not topics:
                raise ValueError("subscribe needs topics or a pattern")
            subscriptions.subscribe(topics)
            self.cluster.add_topics(topics)
        if self._group is not None:
            self._group.subscribe(listener)
        self._update_subscription()

    def subscription(self) -> set[str] | None:
        """The subscribed topic names (None when assigned by hand or by pattern)."""
        topics = self._subscriptions.topics
        return set(topics) if topics is not None else None

    def unsubscribe(self) -> "asyncio.Task[None] | None":
        """Drop the subscription and every assigned partition. In a group this revokes them
        (listener) and leaves the group: the returned task does that and may be awaited."""
        self._subscriptions.unsubscribe()
        if self._group is not None and self._group.subscribed:
            task = asyncio.get_running_loop().create_task(self._group.unsubscribe())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return task
        return None

    def _subscribed_topics(self) -> list[str]:
        """The topics of the subscription: the named ones, or those matching the pattern now."""
        return self._subscriptions.subscribed_topics(self.cluster.metadata.topics)

    def _update_subscription(self) -> None:
        subscriptions = self._subscriptions
        if not subscriptions.has_subscription():
            return
        meta = self.cluster.metadata
        topics = self._subscribed_topics()
        if (any(meta.partitions_for(t) is None for t in topics) or subscriptions.pattern is not None) \
                and self.cluster.metadata_age_ms > SUBSCRIPTION_REFRESH_MS:
            self.cluster.request_update()  # a subscribed topic may appear (or match) any time
        if self._group is not None:
            return  # the group's leader assigns
        wanted = [TopicPartition(t, p) for t in topics for p in (meta.partitions_for(t) or [])]
        if set(wanted) != set(subscriptions.states):
            self._set_assignment(wanted)

    async def topics(self) -> set[str]:
        """Every topic name in the cluster."""
        self._start()
        meta = await self.cluster.refresh_metadata(topics=None)
        return set(meta.topics)

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partitions of ``topic`` as the cluster says now; None when it does not exist."""
        self._start()
        fresh = await self.cluster.refresh_metadata([topic])
        parts = fresh.partitions_for(topic)
        return set(parts) if parts is not None else None

    # -- positions --
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record ``poll`` returns for ``partition``."""
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self._subscriptions.seek(partition, offset)
        self._fetcher.wake()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Next poll starts at the log start offset (all assigned partitions when none given)."""
        for tp in partitions or tuple(self._subscriptions.states):
            self._subscriptions.request_reset(tp, EARLIEST)
            self._fetcher.wake()

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Next poll starts at the high watermark (only records produced from now on)."""
        for tp in partitions or tuple(self._subscriptions.states):
            self._subscriptions.request_reset(tp, LATEST)
            self._fetcher.wake()

    async def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int:
        """The offset of the next record for ``partition`` (resolving a pending reset)."""
        self._start()
        state = self._subscriptions.state(partition)
        if state.position is None and state.awaiting_committed:
            await self._fetcher.resolve_committed([TopicPartition(*partition)], timeout_ms)
        if state.position is None:
            await self._fetcher.reset_positions([TopicPartition(*partition)], timeout_ms)
        if state.failed is not None and state.position is None:
            raise state.failed
        assert state.position is not None
        return state.position

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning (and fetching) records of these partitions until ``resume``."""
        self._subscriptions.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """Undo ``pause``."""
        self._subscriptions.resume(partitions)
        self._fetcher.wake()

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return self._subscriptions.paused()

    def highwater(self, partition: TopicPartition) -> int | None:
        """The last high watermark seen in a fetch of ``partition`` (None before one)."""
        return self._subscriptions.highwater(partition)

    # -- offsets by time --
    async def _list_offsets(self, query: dict[TopicPartition, int], timeout_ms: float | None = None
                            ) -> dict[TopicPartition, OffsetAndTimestamp]:
        self._start()
        return await self._fetcher.list_offsets(query, timeout_ms)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition],
                                timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        found = await self._list_offsets({TopicPartition(*tp): EARLIEST for tp in partitions}, timeout_ms)
        return {tp: answer.offset for tp, answer in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next acknowledged record gets)."""
        found = await self._list_offsets({TopicPartition(*tp): LATEST for tp in partitions}, timeout_ms)
        return {tp: answer.offset for tp, answer in found.items()}

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int],
                                timeout_ms: float | None = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is >= the given one, per partition (None: none)."""
        for ts in timestamps.values():
            if ts < 0:
                raise ValueError(f"timestamps must be >= 0, got {ts}")
        found = await self._list_offsets({TopicPartition(*tp): ts for tp, ts in timestamps.items()}, timeout_ms)
        return {tp: (answer if answer.offset >= 0 else None) for tp, answer in found.items()}

    # -- polling --
    async def poll(self, timeout_ms: float = 0, max_records: int | None = None,
                   update_offsets: bool = True) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far, up to ``max_records`` (default ``max_poll_records``), waiting up
        to ``timeout_ms`` for the first. Raises a partition's error (OffsetOutOfRangeError,
        NoOffsetForPartitionError, CorruptRecordError, ...) once its records before it are out."""
        return await self._records(timeout_ms, max_records, None)

    async def getmany(self, *partitions: TopicPartition, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """aiokafka's ``getmany``: ``poll``, limited to ``partitions`` when given (assigned ones:
        IllegalStateError otherwise); records of other partitions stay buffered for later."""
        return await self._records(timeout_ms, max_records, self._only(partitions))

    def _only(self, partitions: Sequence[TopicPartition]) -> set[TopicPartition] | None:
        if not partitions:
            return None
        only = {TopicPartition(*tp) for tp in partitions}
        missing = only - self._subscriptions.assigned_partitions()
        if missing:
            raise IllegalStateError(f"not assigned to this consumer: {sorted(missing)}")
        return only

    async def _records(self, timeout_ms: float, max_records: int | None,
                       only: set[TopicPartition] | None) -> dict[TopicPartition, list[ConsumerRecord]]:
        self._check_open()
        if self._group is not None and self._group.in_callback:
            raise IllegalStateError("poll() from a rebalance listener")
        self._start()
        if not self._subscriptions.has_assignment() and not self._subscriptions.has_subscription():
            raise IllegalStateError("no partitions: call assign() or subscribe() first")
        max_records = max_records or self.config["max_poll_records"]
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._data.clear()
            if self._group is not None:
                await self._group.poll(deadline)  # joins, rebalance listeners, auto-commit
            self._update_subscription()
            out = self._fetcher.drain(max_records, only)
            if out:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return {}
            try:
                await wait_for(self._data.wait(), left)
            except asyncio.TimeoutError:
                return {}

    async def getone(self, *partitions: TopicPartition, timeout_ms: float | None = None) -> ConsumerRecord | None:
        """One record (of ``partitions`` when given, as aiokafka's ``getone``), waiting up to
        ``timeout_ms`` (None: ``consumer_timeout_ms``, which is forever by default, as aiokafka
        waits); None when nothing arrived in time."""
        only = self._only(partitions)
        timeout = self.config["consumer_timeout_ms"] if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + min(timeout, 10**9) / 1000
        join_deadline = time.monotonic() + self.config["max_poll_interval_ms"] / 1000
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            got = await self._records(max(0.0, min(left_ms, 60_000)), 1, only)
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
        return (group is not None and group.subscribed and not self._subscriptions.has_assignment()
                and group.rebalances == 0 and group.fatal is None)

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
        self._start()
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
        self._start()
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
