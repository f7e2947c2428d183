"""The asyncio consumer's fetcher: Fetch and ListOffsets requests to partition leaders, the
prefetch buffers, decoding answers into records, and position lookups (the role of Kafka's
Fetcher and OffsetFetcher).

A background task keeps one Fetch in flight per leader for the fetchable partitions whose
buffer holds less than ``max_partition_fetch_bytes`` (prefetch: while the application works
through one answer, the next is on its way); the next fetch to a leader leaves as soon as its
answer is in. Answers become ConsumerRecords at once (``decode_records``) and wait in the
partition's buffer (client/aio/subscription_state.py) until ``drain`` hands them to ``poll``.

Positions: a partition without one gets the group's committed offset (group mode) or, failing
that, one from ``auto_offset_reset`` by ListOffsets, in a task of its own. OFFSET_OUT_OF_RANGE
applies ``auto_offset_reset`` again; with ``'none'`` the partition fails until a seek.

Each leader is fetched from in a fetch session (KIP-227, served by broker/fetch_session.py; the
role of Kafka's FetchSessionHandler, here ``FetchSession``). The first Fetch to a broker is a full
one (session_id 0, epoch 0) naming every partition fetched from it; its answer names the session.
The next ones are incremental (session_id, epoch 1, 2, ...): they name only the partitions added
or whose entry changed (fetch offset, current leader epoch) or that the last answer carried, and
list in ``forgotten_topics_data`` the session's partitions not fetched from that broker this
time (unassigned, paused, failed, backing off, being validated, led elsewhere now, or with a full
buffer: the broker would otherwise keep answering their records). An answer carries only the
partitions with news; the others are unchanged. FETCH_SESSION_ID_NOT_FOUND or
INVALID_FETCH_SESSION_EPOCH, a failed Fetch or a lost connection start over with a full fetch.
A broker without a free slot answers session_id 0: every Fetch to it is then a full one (each
asks for a session again, as Kafka's consumer does). At close, ``close_sessions`` ends each
session: a Fetch naming it with epoch FINAL_EPOCH and no partitions, so the broker frees its slot
at once rather than when a newcomer needs it (Kafka's consumer does the same).

Records come only from below the high watermark (the broker sends no more; the fetcher also
drops anything at or above it) and never before the fetch offset (a batch may start earlier).

After a leader change (a newer leader epoch in the metadata) a partition whose records were
fetched is checked before it is fetched again, as Kafka's consumer does (KIP-320): an
OffsetsForLeaderEpoch to the new leader asks where the epoch of the last fetched record ends in
its log. At or past the fetch position, nothing was lost and fetching goes on. Before it, the
new leader's log diverges there (an unclean election truncated records): records only prefetched
are dropped and fetched again from the position; if the application already had records past
the divergence, the position moves back to it (with ``auto_offset_reset``) or ``poll`` raises
OffsetOutOfRangeError until a seek (``'none'``).

KAFKA_STORAGE_ERROR is retriable (the broker moves leadership off a failed disk or a corrupt
replica within seconds), but not forever: a partition answering it for
``min(request_timeout_ms, STORAGE_ERROR_RETRY_MS_MAX)`` without a good answer in between fails,
and ``poll`` raises KafkaStorageError, so nobody reports success over records it could not read.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from raftka.client.aio.cluster import API_FETCH, API_LIST_OFFSETS, API_OFFSET_FOR_LEADER_EPOCH, Cluster
from raftka.client.aio.group import GroupMember
from raftka.client.aio.metrics import MetricConfig, Sensor, metric_config, sensor_metrics
from raftka.client.aio.subscription_state import FetchedChunk, PartitionState, SubscriptionState
from raftka.client.aio.timeouts import wait_for
from raftka.client.errors import KafkaTimeoutError, NoOffsetForPartitionError, SerializationError
from raftka.client.structs import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from raftka.common import errors
from raftka.common import records as rec
from raftka.common.errors import OffsetOutOfRangeError, RaftkaError

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__
_OFFSET_MAX = 1 << 63
# How long a partition may keep answering KAFKA_STORAGE_ERROR before poll raises it. A corrupt
# leader hands over to an in-sync replica, and a broker with a failed disk is fenced, within a
# second or two (one heartbeat and one controller commit); past this, no healthy replica holds
# the records (e.g. replication factor 1) and retrying longer only hides that.
STORAGE_ERROR_RETRY_MS_MAX = 10_000
CONSUMER_REPLICA_ID = -1  # OffsetsForLeaderEpoch v3+: the request comes from a consumer, not a follower
INVALID_SESSION_ID = 0  # Fetch: no session, in requests and answers
INITIAL_EPOCH = 0  # Fetch: a full fetch that asks for a session (and closes the one it names)
FINAL_EPOCH = -1  # Fetch: a full fetch without a session (and closes the one it names)
# How long close() waits for the brokers to answer the Fetches that close its sessions: a broker
# that does not answer by then drops the session when a new one needs its slot.
SESSION_CLOSE_TIMEOUT_MS = 500
SESSION_EPOCH_MAX = 0x7FFFFFFF  # after it, a session's epoch is 1 again
# The hot loops below build ConsumerRecords positionally and unpack decoded records in one step
# (named access per field would cost more than the rest of the loop); these fix the orders they rely on.
assert rec.Record._fields == ("offset", "timestamp", "key", "value", "headers")
assert ConsumerRecord._fields == ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value",
                                  "headers", "checksum", "serialized_key_size", "serialized_value_size",
                                  "serialized_header_size", "leader_epoch")


def decode_records(buf: bytes, fetch_offset: int, high_watermark: int, check_crcs: bool,
                   topic: str = "", partition: int = -1) -> tuple[list[ConsumerRecord], int]:
    """Records of ``buf`` (whole batches) with fetch_offset <= offset < high_watermark, as
    ConsumerRecords (not deserialized); and the offset to fetch next.

    Hot path of consuming: the C extension (common/records.py ``records_ext``) builds each
    batch's ConsumerRecords. Without it, and for a batch it does not accept (``decode_batch``
    then raises the error), one comprehension per batch builds them with ``tuple.__new__`` (no
    per-record method calls)."""
    out: list[ConsumerRecord] = []
    extend = out.extend
    new = _new_tuple
    record_cls = ConsumerRecord
    ext = rec.records_ext
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
        if ext is not None:
            _header, data = rec.records_section(buf, pos, verify_crc=check_crcs)
            found = ext.consumer_records(
                record_cls, data, header.record_count, header.base_offset, header.base_timestamp,
                header.max_timestamp if header.timestamp_type else None, fetch_offset, hi, topic,
                partition, header.timestamp_type, header.partition_leader_epoch)
            if found is not None:
                extend(found)
                continue
        _header, records = rec.decode_batch(buf, pos, verify_crc=check_crcs)
        if records and (records[0].offset < fetch_offset or records[-1].offset >= hi):
            records = [r for r in records if fetch_offset <= r.offset < hi]
        ts_type = header.timestamp_type
        epoch = header.partition_leader_epoch
        # Fields in ConsumerRecord's order (checked above).
        extend([new(record_cls, (topic, partition, offset, timestamp, ts_type, key, value, headers, None,
                                 -1 if key is None else len(key), -1 if value is None else len(value),
                                 sum(len(k) + len(v or b"") for k, v in headers) if headers else 0,
                                 epoch))
                for offset, timestamp, key, value, headers in records])
    return out, next_offset


async def list_offsets(cluster: Cluster, query: dict[TopicPartition, int], timeout_ms: float,
                       retry_backoff_ms: float) -> dict[TopicPartition, OffsetAndTimestamp]:
    """ListOffsets at the leaders: {tp: timestamp (-1 latest, -2 earliest)} -> {tp:
    OffsetAndTimestamp(offset, timestamp)}; retriable errors are retried until ``timeout_ms``.
    (The admin client uses it too.)"""
    deadline = time.monotonic() + timeout_ms / 1000
    left = dict(query)
    found: dict[TopicPartition, OffsetAndTimestamp] = {}
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
                           ) -> dict[TopicPartition, OffsetAndTimestamp | RaftkaError]:
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
    out: dict[TopicPartition, OffsetAndTimestamp | RaftkaError] = {}
    for t in answer.get("topics") or []:
        for p in t.get("partitions") or []:
            tp = TopicPartition(t["name"], p["partition_index"])
            pcode = p.get("error_code", 0) or 0
            out[tp] = (OffsetAndTimestamp(p.get("offset", -1), p.get("timestamp", -1)) if pcode == errors.NONE
                       else errors.error_for(pcode, p.get("error_message"), topic=tp.topic,
                                             partition=tp.partition))
    return out


class FetchTarget(NamedTuple):
    """What one Fetch asked of a partition: its answer counts only if both still hold."""

    generation: int
    fetch_offset: int


class ValidationTarget(NamedTuple):
    """What one OffsetsForLeaderEpoch checked of a partition: its answer counts only if the
    partition's generation and fetch position still hold."""

    generation: int
    fetch_offset: int
    leader_epoch: int  # the leader epoch it was asked under


class FetchSession:
    """This consumer's fetch session with one broker (module docstring): the id and epoch of the
    next Fetch (epoch INITIAL_EPOCH: a full one), and what the broker's session holds.

        next Fetch     sent as    its outcome                           then
        full           (S, 0)     answer with session_id N > 0          incremental (N, 1)
        full           (S, 0)     answer with session_id 0 (no slot)    full (0, 0)
        incremental    (S, E)     answer                                incremental (S, E + 1)
        any            (S, E)     FETCH_SESSION_ID_NOT_FOUND            full (0, 0)
        any            (S, E)     INVALID_FETCH_SESSION_EPOCH, another  full (S, 0), which closes S
                                  error, no answer (lost, timed out)

    E + 1 wraps from SESSION_EPOCH_MAX to 1. One Fetch per broker is in flight at a time, so the
    states never overlap."""

    __slots__ = ("session_id", "epoch", "entries")

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # tp -> (fetch offset, current leader epoch) as the broker holds it. None: held, but named
        # again in the next incremental fetch (an answer carried it, and the broker reads a
        # partition again only when it is named or has news: records dropped here as stale would
        # otherwise never come back).
        self.entries: dict[TopicPartition, tuple[int, int] | None] = {}

    def next_fetch(self, wanted: dict[TopicPartition, tuple[int, int]]
                   ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """The next Fetch for the partitions ``wanted`` now ({tp: (fetch offset, leader epoch)}):
        (the partitions it names, those it forgets). What it names becomes what the broker holds."""
        if self.epoch == INITIAL_EPOCH:
            self.entries = dict(wanted)
            return list(wanted), []
        entries = self.entries
        forgotten = [tp for tp in entries if tp not in wanted]
        for tp in forgotten:
            del entries[tp]
        named = []
        for tp, entry in wanted.items():
            if entries.get(tp) != entry:
                entries[tp] = entry
                named.append(tp)
        return named, forgotten

    def answered(self, session_id: int, carried: Iterable[TopicPartition]) -> None:
        """The broker took the Fetch: its answer's ``session_id`` and the partitions it carried."""
        if session_id == INVALID_SESSION_ID:  # no slot (or closed): the next Fetch is full again
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            return
        if self.epoch == INITIAL_EPOCH:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = 1 if self.epoch >= SESSION_EPOCH_MAX else self.epoch + 1
        entries = self.entries
        for tp in carried:
            if tp in entries:
                entries[tp] = None

    def restart(self, session_known: bool = True) -> None:
        """The next Fetch is a full one: whether the broker took the last one is not known, or it
        refused the session. It closes the session it names; ``session_known`` False: the broker
        has none to close."""
        self.epoch = INITIAL_EPOCH
        if not session_known:
            self.session_id = INVALID_SESSION_ID


class FetchSensors:
    """What the fetcher measures for Kafka's consumer-fetch-manager-metrics (client/aio/metrics.py)."""

    def __init__(self, config: MetricConfig) -> None:
        self.fetch = Sensor(config)  # 1 per Fetch answered
        self.fetch_latency = Sensor(config)  # ms from a Fetch's send to its answer
        self.bytes = Sensor(config)  # record bytes per Fetch answer
        self.records_per_request = Sensor(config)  # records decoded per Fetch answer
        self.records_lag = Sensor(config)  # high watermark - position, per partition fetched
        self.records_consumed = Sensor(config)  # records handed to the application per poll


class Fetcher:
    """Fetches for the assigned partitions of ``subscriptions`` and hands the records to
    ``poll`` (module docstring). ``refresh_subscription`` runs at each pass of the background
    loop (a subscription's partitions may change); ``notify`` wakes a waiting ``poll`` (records
    or an error arrived); ``group`` (None without a group_id) gives committed offsets."""

    def __init__(self, cluster: Cluster, config: dict[str, Any], subscriptions: SubscriptionState,
                 group: GroupMember | None, *, refresh_subscription: Callable[[], None],
                 notify: Callable[[], None]) -> None:
        self.cluster = cluster
        self.config = config
        self.subscriptions = subscriptions
        self._group = group
        self._refresh_subscription = refresh_subscription
        self._notify = notify
        self._wakeup = asyncio.Event()
        self._nodes_in_flight: set[int] = set()
        self._sessions: dict[int, FetchSession] = {}  # broker id -> our fetch session there
        self._validating: set[TopicPartition] = set()  # partitions with an OffsetsForLeaderEpoch in flight
        self._loop_task: asyncio.Task[None] | None = None
        self._resolver: asyncio.Task[None] | None = None
        self._fetches: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.sensors = FetchSensors(metric_config(config))
        self._decoded = 0  # records decoded from Fetch answers (records-per-request)

    # -- lifecycle --
    @property
    def started(self) -> bool:
        """The background loop was started."""
        return self._loop_task is not None

    def start(self) -> None:
        """Start the background loop (once)."""
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        """Run a pass of the background loop soon: the assignment, a position or a pause changed."""
        self._wakeup.set()

    def close(self) -> list[asyncio.Task[Any] | None]:
        """Stop: no more fetches leave. Returns the tasks for the caller to cancel and await."""
        self._closed = True
        return [self._loop_task, self._resolver, *self._fetches]

    async def close_sessions(self, timeout_ms: float = SESSION_CLOSE_TIMEOUT_MS) -> None:
        """After ``close``: end our fetch session at each broker (module docstring), waiting at
        most ``timeout_ms`` for all the answers. Never raises: a broker that does not answer
        keeps the session until its slot is needed."""
        ends = [(node, session.session_id) for node, session in self._sessions.items()
                if session.session_id != INVALID_SESSION_ID]
        self._sessions.clear()
        if not ends:
            return
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": self.config["fetch_max_bytes"],
                "isolation_level": 0, "session_epoch": FINAL_EPOCH, "topics": [], "forgotten_topics_data": []}
        # Whatever epoch the broker expects: a full fetch naming a session closes it.
        closes = [self.cluster.request(node, API_FETCH, {**body, "session_id": session_id}, timeout_ms=int(timeout_ms))
                  for node, session_id in ends]
        try:  # on timeout the requests still out are cancelled
            results = await wait_for(asyncio.gather(*closes, return_exceptions=True), timeout_ms / 1000)
        except asyncio.TimeoutError:
            log.debug("closing fetch sessions at brokers %s took over %d ms", [n for n, _ in ends], timeout_ms)
            return
        for (node, session_id), result in zip(ends, results):
            if isinstance(result, BaseException):
                log.debug("closing fetch session %d at broker %d failed: %s", session_id, node, result)

    async def _run(self) -> None:
        backoff = self.config["retry_backoff_ms"] / 1000
        while not self._closed:
            self._wakeup.clear()
            try:
                self._refresh_subscription()
                # Positions are looked up in a task of their own: a partition whose ListOffsets
                # keeps failing must not hold up fetching for the others.
                if (self._resolver is None or self._resolver.done()) and self.subscriptions.has_unresolved_positions():
                    self._resolver = asyncio.get_running_loop().create_task(self._resolve_in_background())
                self._send_fetches()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not stop every partition's fetching
                log.exception("consumer fetcher step failed")
            try:
                await wait_for(self._wakeup.wait(), backoff if self.subscriptions.waiting_to_retry() else 1.0)
            except asyncio.TimeoutError:
                pass

    # -- positions --
    async def list_offsets(self, query: dict[TopicPartition, int], timeout_ms: float | None = None
                           ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """``list_offsets`` with this consumer's cluster and settings (``timeout_ms`` None or 0:
        ``request_timeout_ms``)."""
        return await list_offsets(self.cluster, query, timeout_ms or self.config["request_timeout_ms"],
                                  self.config["retry_backoff_ms"])

    async def reset_positions(self, tps: Sequence[TopicPartition] | None = None,
                              timeout_ms: float | None = None) -> None:
        """Look up the positions of the partitions (of ``tps``, or all) waiting for a reset."""
        subscriptions = self.subscriptions
        pending = subscriptions.pending_resets(tps)
        if not pending:
            return
        generations = {tp: subscriptions.states[tp].generation for tp in pending}
        found = await self.list_offsets(pending, timeout_ms)
        for tp, answer in found.items():
            subscriptions.set_reset_position(tp, generations[tp], answer.offset)
        self._wakeup.set()

    async def resolve_committed(self, tps: Sequence[TopicPartition] | None = None,
                                timeout_ms: float | None = None) -> None:
        """Group mode: positions of newly assigned partitions (of ``tps``, or all) from the
        group's committed offsets; partitions without one fall back to auto_offset_reset."""
        subscriptions = self.subscriptions
        pending = subscriptions.awaiting_committed(tps)
        if not pending or self._group is None:
            return
        found = await self._group.committed(pending, timeout_ms or self.config["request_timeout_ms"])
        for tp in pending:
            if subscriptions.set_committed_position(tp, found.get(tp)):
                self._notify()  # poll raises NoOffsetForPartitionError
        self._wakeup.set()

    async def _resolve_in_background(self) -> None:
        try:
            await self.resolve_committed(timeout_ms=self.config["request_timeout_ms"])
            await self.reset_positions(timeout_ms=self.config["request_timeout_ms"])
        except RaftkaError as error:
            log.debug("consumer: looking up reset positions failed: %s", error)
            await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)
        finally:
            self._wakeup.set()

    # -- fetching --
    def _send_fetches(self) -> None:
        c = self.config
        max_bytes = c["max_partition_fetch_bytes"]
        now = time.monotonic()
        # Per leader not fetched from now: {tp: (fetch offset, leader epoch)} to fetch, and their states.
        wanted: dict[int, dict[TopicPartition, tuple[int, int]]] = {}
        by_node: dict[int, list[tuple[TopicPartition, PartitionState]]] = {}
        to_validate: dict[int, list[tuple[TopicPartition, PartitionState, int]]] = {}
        metadata = self.cluster.metadata
        brokers = metadata.brokers
        for tp, state in self.subscriptions.states.items():
            if state.buffered_bytes >= max_bytes or not state.is_fetchable(now) or tp in self._validating:
                continue
            state.retry_at = 0.0
            # One metadata lookup per partition (leader_for and leader_epoch would make two): this
            # loop runs after every answer, over every assigned partition.
            meta = metadata.partition(tp)
            if meta is None or meta.leader < 0 or meta.leader not in brokers:
                self.cluster.request_update()
                state.retry_at = now + c["retry_backoff_ms"] / 1000
                continue
            leader, leader_epoch = meta.leader, meta.leader_epoch
            if state.needs_validation(leader_epoch):
                to_validate.setdefault(leader, []).append((tp, state, leader_epoch))
                continue
            if leader in self._nodes_in_flight:
                continue
            state.leader_epoch_seen = max(state.leader_epoch_seen, leader_epoch)
            wanted.setdefault(leader, {})[tp] = (state.fetch_position, leader_epoch)  # type: ignore[assignment]
            by_node.setdefault(leader, []).append((tp, state))
        for node, checks in to_validate.items():
            self._validating.update(tp for tp, _, _ in checks)
            task = asyncio.get_running_loop().create_task(self._validate(node, checks))
            self._fetches.add(task)
            task.add_done_callback(self._fetches.discard)
        for node, parts in by_node.items():
            session = self._sessions.get(node)
            if session is None:
                session = self._sessions[node] = FetchSession()
            body = self._fetch_body(session, wanted[node])
            asked = {tp: FetchTarget(state.generation, state.fetch_position) for tp, state in parts}
            self._nodes_in_flight.add(node)
            task = asyncio.get_running_loop().create_task(self._fetch(node, session, body, asked))
            self._fetches.add(task)
            task.add_done_callback(self._fetches.discard)

    def _fetch_body(self, session: FetchSession, wanted: dict[TopicPartition, tuple[int, int]]) -> dict[str, Any]:
        """The Fetch request for ``wanted`` in ``session`` (full, or naming what changed)."""
        c = self.config
        partition_max_bytes = c["max_partition_fetch_bytes"]
        named, forgotten = session.next_fetch(wanted)
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp in named:
            fetch_offset, leader_epoch = wanted[tp]
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": leader_epoch, "fetch_offset": fetch_offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": partition_max_bytes})
        forgotten_topics: dict[str, list[int]] = {}
        for tp in forgotten:
            forgotten_topics.setdefault(tp.topic, []).append(tp.partition)
        return {"replica_id": -1, "max_wait_ms": c["fetch_max_wait_ms"], "min_bytes": c["fetch_min_bytes"],
                "max_bytes": c["fetch_max_bytes"], "isolation_level": 0,
                "session_id": session.session_id, "session_epoch": session.epoch,
                "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
                "forgotten_topics_data": [{"topic": t, "partitions": p} for t, p in forgotten_topics.items()]}

    async def _fetch(self, node: int, session: FetchSession, body: dict[str, Any],
                     asked: dict[TopicPartition, FetchTarget]) -> None:
        c = self.config
        try:
            try:
                sent = time.monotonic()
                code, answer = await self.cluster.request(
                    node, API_FETCH, body, timeout_ms=c["request_timeout_ms"] + int(c["fetch_max_wait_ms"]))
            except BaseException as error:
                session.restart()  # whether the broker took this Fetch is not known
                if isinstance(error, RaftkaError):
                    self._backoff(asked, error)
                    return
                raise
            if code == errors.NONE:  # Kafka's Fetch answers carry a whole-request error in the body
                code = (answer or {}).get("error_code", 0) or 0
            if code in (errors.FETCH_SESSION_ID_NOT_FOUND, errors.INVALID_FETCH_SESSION_EPOCH):
                log.debug("fetch session %d at broker %d: %s; sending a full fetch", session.session_id, node,
                          errors.name_of(code))
                session.restart(session_known=code != errors.FETCH_SESSION_ID_NOT_FOUND)
                return  # the full fetch leaves at once (below)
            if code != errors.NONE:
                session.restart()
                self._backoff(asked, errors.error_for(code, (answer or {}).get("error_message")))
                return
            carried = []
            sensors = self.sensors
            decoded_before, nbytes = self._decoded, 0
            for t in answer.get("responses") or []:
                for p in t.get("partitions") or []:
                    tp = TopicPartition(t["topic"], p["partition_index"])
                    carried.append(tp)
                    nbytes += len(p.get("records") or b"")
                    target = asked.get(tp)
                    if target is not None:
                        self._handle_partition(tp, p, target)
            session.answered(answer.get("session_id") or INVALID_SESSION_ID, carried)
            sensors.fetch.record()
            sensors.fetch_latency.record((time.monotonic() - sent) * 1000)
            sensors.bytes.record(nbytes)
            sensors.records_per_request.record(self._decoded - decoded_before)
        finally:
            self._nodes_in_flight.discard(node)
            if not self._closed:
                # The next fetch to this node leaves now, not at the background loop's next pass
                # (turns of the loop later): the leader holds a waiting fetch again sooner.
                try:
                    self._send_fetches()
                except Exception:  # the background loop's pass retries
                    log.exception("consumer fetcher step failed")
            self._wakeup.set()

    def _backoff(self, tps: Iterable[TopicPartition], error: BaseException) -> None:
        log.debug("fetch failed, backing off: %s", error)
        retry_at = time.monotonic() + self.config["retry_backoff_ms"] / 1000
        states = self.subscriptions.states
        for tp in tps:
            state = states.get(tp)
            if state is not None:
                state.retry_at = retry_at
        self.cluster.request_update()

    def _handle_partition(self, tp: TopicPartition, p: dict[str, Any], target: FetchTarget) -> None:
        state = self.subscriptions.states.get(tp)
        fetch_offset = target.fetch_offset
        if state is None or state.generation != target.generation or state.fetch_position != fetch_offset:
            return  # sought, reassigned or already advanced: this answer is stale
        code = p.get("error_code", 0) or 0
        if code == errors.NONE:
            state.storage_error_since = 0.0
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
                self._notify()
                return
            state.fetch_position = next_offset
            if state.position is not None and hw >= 0:
                self.sensors.records_lag.record(max(0, hw - state.position))
            if found:
                self._decoded += len(found)
                state.fetched_epoch = found[-1].leader_epoch
                nbytes = len(raw)  # counts against max_partition_fetch_bytes until polled
                state.buffer.append(FetchedChunk(target.generation, found, nbytes))
                state.buffered_bytes += nbytes
                self._notify()
            return
        error = errors.error_for(code, p.get("error_message"), topic=tp.topic, partition=tp.partition)
        if code == errors.OFFSET_OUT_OF_RANGE:
            default_reset = self.subscriptions.default_reset
            if default_reset is None:
                state.failed = OffsetOutOfRangeError(
                    f"offset {fetch_offset} is out of range (log start {p.get('log_start_offset')}, "
                    f"high watermark {p.get('high_watermark')}) and auto_offset_reset='none'",
                    topic=tp.topic, partition=tp.partition)
                self._notify()
            else:
                log.info("offset %s of %s-%s out of range; resetting (%s)", fetch_offset, tp.topic,
                         tp.partition, self.config["auto_offset_reset"])
                state.reset_to(None, default_reset)
                self._wakeup.set()
            return
        if code == errors.KAFKA_STORAGE_ERROR:
            now = time.monotonic()
            bound_ms = min(self.config["request_timeout_ms"], STORAGE_ERROR_RETRY_MS_MAX)
            if not state.storage_error_since:
                state.storage_error_since = now
            elif (now - state.storage_error_since) * 1000 >= bound_ms:
                state.storage_error_since = 0.0
                # Kafka's Fetch answer has no room for the broker's message (the file and position):
                # the leader's log and its /health name them.
                leader = self.cluster.metadata.leader_for(tp)
                where = f"broker {leader}" if leader is not None and leader >= 0 else "the partition leader"
                state.failed = errors.error_for(
                    code, f"{tp.topic}-{tp.partition} at offset {fetch_offset}: "
                          f"{p.get('error_message') or error.message} (still failing after {bound_ms / 1000:g} s "
                          f"of retries; {where}'s log and /health name the file)",
                    topic=tp.topic, partition=tp.partition)
                self._notify()
                return
        if error.retriable:
            if error.invalid_metadata:
                self.cluster.update_leader(tp, p.get("current_leader"))
            self._backoff([tp], error)
            return
        state.failed = error
        self._notify()

    def metrics(self) -> dict[str, float]:
        """Kafka's consumer-fetch-manager-metrics, as measured here."""
        s = self.sensors
        out: dict[str, float] = {}
        out.update(sensor_metrics("fetch", s.fetch, "total", "rate"))
        out.update(sensor_metrics("fetch-latency", s.fetch_latency, "avg", "max"))
        out.update(sensor_metrics("bytes-consumed", s.bytes, "total", "rate"))
        out.update(sensor_metrics("fetch-size", s.bytes, "avg", "max"))
        out.update(sensor_metrics("records-per-request", s.records_per_request, "avg"))
        out.update(sensor_metrics("records-lag", s.records_lag, "max"))
        out.update(sensor_metrics("records-consumed", s.records_consumed, "total", "rate"))
        return out

    # -- checking positions after a leader change (module docstring) --
    async def _validate(self, node: int, checks: list[tuple[TopicPartition, PartitionState, int]]) -> None:
        asked: dict[TopicPartition, ValidationTarget] = {}
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, state, leader_epoch in checks:
            asked[tp] = ValidationTarget(state.generation, state.fetch_position, leader_epoch)
            topics.setdefault(tp.topic, []).append({"partition": tp.partition, "current_leader_epoch": leader_epoch,
                                                    "leader_epoch": state.fetched_epoch})
        body = {"replica_id": CONSUMER_REPLICA_ID, "topics": [{"topic": t, "partitions": p} for t, p in topics.items()]}
        try:
            try:
                code, answer = await self.cluster.request(node, API_OFFSET_FOR_LEADER_EPOCH, body)
            except RaftkaError as error:
                self._backoff(asked, error)
                return
            if code != errors.NONE:
                self._backoff(asked, errors.error_for(code, (answer or {}).get("error_message")))
                return
            for t in answer.get("topics") or []:
                for p in t.get("partitions") or []:
                    tp = TopicPartition(t["topic"], p["partition"])
                    target = asked.get(tp)
                    if target is not None:
                        self._validated(tp, p, target)
        finally:
            self._validating.difference_update(asked)
            self._wakeup.set()

    def _validated(self, tp: TopicPartition, p: dict[str, Any], target: ValidationTarget) -> None:
        """Act on one partition's OffsetsForLeaderEpoch answer (module docstring)."""
        state = self.subscriptions.states.get(tp)
        if state is None or state.generation != target.generation or state.fetch_position != target.fetch_offset:
            return  # sought, reassigned or reset meanwhile: the position it checked is gone
        code = p.get("error_code", 0) or 0
        if code != errors.NONE:
            error = errors.error_for(code, None, topic=tp.topic, partition=tp.partition)
            if error.retriable:  # FENCED / UNKNOWN_LEADER_EPOCH, NOT_LEADER: new metadata, then again
                self._backoff([tp], error)
            else:
                state.failed = error
                self._notify()
            return
        end_epoch, end_offset = p.get("leader_epoch", -1), p.get("end_offset", -1)
        known = end_epoch >= 0 and end_offset >= 0
        if known and end_offset >= target.fetch_offset:
            state.leader_epoch_seen = target.leader_epoch  # the new leader has everything fetched
            return
        position = state.position
        name = f"{tp.topic}-{tp.partition}"
        if known and position is not None and end_offset >= position:
            log.info("%s: the leader's log diverges at offset %d, past the position %d: dropping prefetched "
                     "records and fetching again from the position", name, end_offset, position)
            state.reset_to(position, None)
        elif self.subscriptions.default_reset is None:
            where = f"at offset {end_offset}" if known else "before any offset the new leader knows"
            state.failed = OffsetOutOfRangeError(
                f"log truncated after a leader change: the leader's log diverges {where}, and records up to "
                f"position {position} were consumed; auto_offset_reset='none', so seek first",
                topic=tp.topic, partition=tp.partition)
            self._notify()
        elif known:
            log.warning("%s: log truncated after a leader change; records from offset %d that were consumed "
                        "are gone: resuming at the divergence %d", name, end_offset, end_offset)
            state.reset_to(end_offset, None)
        else:
            log.warning("%s: the new leader knows no epoch of the fetched records; resetting (%s)", name,
                        self.config["auto_offset_reset"])
            state.reset_to(None, self.subscriptions.default_reset)
        self._wakeup.set()

    # -- handing records to poll --
    def _deserialize(self, tp: TopicPartition, records: list[ConsumerRecord]
                     ) -> tuple[list[ConsumerRecord], SerializationError | None]:
        """``records`` through the deserializers; stops at the first that raises: (the records
        before it, the error)."""
        c = self.config
        key_deserializer, value_deserializer = c["key_deserializer"], c["value_deserializer"]
        new = _new_tuple
        record_cls = ConsumerRecord
        out: list[ConsumerRecord] = []
        append = out.append
        for r in records:
            key, value = r.key, r.value
            try:
                if key_deserializer is not None and key is not None:
                    key = key_deserializer(key)
                if value_deserializer is not None and value is not None:
                    value = value_deserializer(value)
            except Exception as error:
                failure = SerializationError(f"deserializing offset {r.offset} failed: "
                                             f"{type(error).__name__}: {error}", topic=tp.topic,
                                             partition=tp.partition)
                failure.__cause__ = error
                return out, failure
            # Built as in decode_records (``_replace`` costs three times as much per record).
            append(new(record_cls, (r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, key, value,
                                    r.headers, r.checksum, r.serialized_key_size, r.serialized_value_size,
                                    r.serialized_header_size, r.leader_epoch)))
        return out, None

    def drain(self, max_records: int, only: set[TopicPartition] | None = None
              ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """``_drain``, counted in records-consumed."""
        out = self._drain(max_records, only)
        if out:
            self.sensors.records_consumed.record(sum(len(records) for records in out.values()))
        return out

    def _drain(self, max_records: int, only: set[TopicPartition] | None
               ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` buffered records, by partition (of ``only`` when given),
        deserialized; each partition's position moves past what it hands out. Raises a
        partition's error (once its records before the error are out)."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        taken = 0
        c = self.config
        deserialize = c["key_deserializer"] is not None or c["value_deserializer"] is not None
        subscriptions = self.subscriptions
        for tp, state in list(subscriptions.states.items()):
            if only is not None and tp not in only:
                continue
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
                records, index, nbytes, unreleased = chunk.records, chunk.index, chunk.nbytes, chunk.unreleased
                n = len(records)
                if chunk.generation != state.generation:
                    buffer.popleft()
                    state.buffered_bytes -= unreleased
                    continue
                position = state.position
                if position is not None:
                    while index < n and records[index].offset < position:
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
                        state.position = part[-1].offset + 1
                        released = min(unreleased, nbytes * len(part) // n)
                        unreleased -= released
                        state.buffered_bytes -= released
                    if failure is not None:  # the failing record stays first in line
                        chunk.index, chunk.unreleased = index, unreleased
                        state.position = records[index].offset
                        if out:
                            self._wakeup.set()
                            return out  # the error comes with the next poll
                        raise failure
                if index >= n:
                    buffer.popleft()
                    state.buffered_bytes -= unreleased
                else:
                    chunk.index, chunk.unreleased = index, unreleased
            if not buffer and state.fetch_position is not None and state.position is not None:
                state.position = max(state.position, state.fetch_position)
            if taken >= max_records:
                break
        if out:
            subscriptions.rotate(next(iter(out)))  # one busy partition must not starve the others
        self._wakeup.set()
        return out
