"""Consumer group membership on the client: finding the coordinator, joining, assigning (on the
leader), heartbeats, committed offsets. Kafka's ConsumerCoordinator, for client.aio.Consumer.

Life of a member (the consumer drives it from ``poll``; a background task heartbeats):

1. **Find the coordinator** (FindCoordinator on any broker). Three connections go to it, so a
   held request never delays another: one for JoinGroup/SyncGroup (held until the rebalance
   gets there), one for Heartbeat (held up to ``heartbeat_interval_ms`` with the ``max_wait_ms``
   extension, a tagged field of Heartbeat v4 that a Kafka coordinator skips; answered at once
   when a rebalance starts), one for commits and offset fetches.
2. **Join** (in ``poll``). With the eager protocol (range, roundrobin, sticky) the member first
   commits (``enable_auto_commit``) and revokes everything it owns
   (``on_partitions_revoked``); with the cooperative protocol (cooperative-sticky, the default)
   it keeps consuming what it owns. JoinGroup carries the subscription of every configured
   assignor (its topics, and for cooperative also the partitions it owns); the answer names the
   leader, and the leader alone gets everyone's subscriptions, runs the chosen assignor and sends
   the assignment in its SyncGroup.
3. **Take the assignment** (in ``poll``). Eager: everything assigned is new
   (``on_partitions_assigned``). Cooperative: partitions it owned and did not get back are
   committed and revoked (``on_partitions_revoked``), and the member rejoins at once, so the
   follow-up rebalance hands them to their new owner; newly assigned ones get
   ``on_partitions_assigned``. A new partition starts from its committed offset, else from
   ``auto_offset_reset``.
4. **Stay in**: heartbeats every ``heartbeat_interval_ms``; REBALANCE_IN_PROGRESS means rejoin
   on the next ``poll``. A member whose application has not called ``poll`` for
   ``max_poll_interval_ms`` leaves the group (its partitions go to others) and rejoins on its
   next ``poll``. UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID mean it is no
   longer in the group: its partitions are lost (``on_partitions_lost``, which defaults to
   ``on_partitions_revoked``), and commits for them fail with CommitFailedError.
5. **Leave**: ``close`` commits (auto-commit), revokes, and sends LeaveGroup, so the others
   take over at once. A static member (``group_instance_id``) does not leave: if it comes back
   within ``session_timeout_ms`` it gets its partitions back without a rebalance.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from raftka.client.assignors import (COOPERATIVE, AbstractPartitionAssignor, Assignment, Subscription,
                              decode_assignment, decode_subscription, encode_assignment, encode_subscription,
                              rebalance_protocol)
from raftka.client.aio.cluster import Cluster, default_connection_factory
from raftka.client.aio.metrics import MetricConfig, Sensor, event_metrics, metric_config, sensor_metrics
from raftka.client.aio.timeouts import cancel_and_wait, wait_for
from raftka.client.errors import KafkaTimeoutError
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import NetworkExceptionError, RaftkaError, RequestTimedOutError
from raftka.client.structs import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
JOIN_EXTRA_MS = 5000  # a JoinGroup may be held up to the rebalance timeout; wait this much longer
JOIN_WAIT_MS_MAX = 240_000  # the coordinator holds a JoinGroup at most this long
CLOSE_TASKS_TIMEOUT_S = 2.0  # how long close() waits for its cancelled tasks to finish
LEAVE_TIMEOUT_MS = 3000
LANES = ("join", "heartbeat", "offsets")

# Answers after which the coordinator must be looked up again.
COORDINATOR_MOVED = {errors.NOT_COORDINATOR, errors.COORDINATOR_NOT_AVAILABLE}
# Answers that are worth the same request again after a short wait.
RETRY_LATER = COORDINATOR_MOVED | {errors.COORDINATOR_LOAD_IN_PROGRESS, errors.REQUEST_TIMED_OUT,
                                   errors.NETWORK_EXCEPTION}
# Answers that mean this member is not (or no longer) in the current generation.
MEMBERSHIP_LOST = {errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.FENCED_INSTANCE_ID}


class CommitFailedError(RaftkaError):
    """A commit was refused because this consumer is not (any more) a member of the group's
    current generation, or does not own the partitions any more: a rebalance took them
    (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID; the
    broker's error, or the consumer's own finding, is ``error``). The consumer
    rejoins on its next ``poll``; records processed since the last successful commit may be
    delivered again to the partition's next owner."""

    name = "COMMIT_FAILED"

    def __init__(self, error: RaftkaError) -> None:
        self.error = error
        super().__init__(f"commit refused ({error.name}): the group rebalanced; {error.message}")


class ConsumerRebalanceListener:
    """Subclass and pass to ``subscribe(..., listener=)``: called from ``poll`` (and ``close``)
    when partitions are taken away or given. Methods may be coroutines with the asyncio consumer."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """Before partitions go to another member: commit what was processed of them."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """After partitions were given to this consumer (their positions come next)."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """Partitions that may already belong to another member (this consumer left the group
        without revoking them); committing them is no longer possible. Defaults to
        ``on_partitions_revoked``."""
        return self.on_partitions_revoked(lost)


class MemberInformation(NamedTuple):
    """A group member as DescribeGroups shows it (kafka-python's shape); ``member_metadata`` and
    ``member_assignment`` are decoded (Subscription, Assignment) for consumer groups."""

    member_id: str
    client_id: str
    client_host: str
    member_metadata: Any
    member_assignment: Any
    group_instance_id: str | None = None


class GroupInformation(NamedTuple):
    """A group as DescribeGroups shows it (kafka-python's shape)."""

    error_code: int
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberInformation]
    authorized_operations: Any = None
    coordinator: int = -1
    generation_id: int = -1


async def _call(fn: Callable[..., Any], *args: Any) -> None:
    result = fn(*args)
    if inspect.isawaitable(result):
        await result


async def find_coordinator(cluster: Cluster, group_id: str, timeout_ms: float) -> tuple[int, str, int]:
    """(node_id, host, port) of ``group_id``'s coordinator; retries COORDINATOR_NOT_AVAILABLE
    (e.g. while ``__consumer_offsets`` is created) until ``timeout_ms``."""
    deadline = time.monotonic() + timeout_ms / 1000
    last: RaftkaError | None = None
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            raise KafkaTimeoutError(f"no coordinator found for group {group_id!r} within {int(timeout_ms)} ms "
                                    f"(last error: {last})")
        try:
            code, body = await cluster.request_any(ApiKey.FIND_COORDINATOR, {"key": group_id, "key_type": 0},
                                                   timeout_ms=left_ms, split_budget=True)
        except KafkaTimeoutError as error:
            last = error
            continue
        code = code or (body or {}).get("error_code", 0)
        if code == errors.NONE:
            return int(body["node_id"]), str(body["host"]), int(body["port"])
        last = errors.error_for(code, (body or {}).get("error_message"))
        if not last.retriable:
            raise last
        await asyncio.sleep(min(cluster.retry_backoff_ms / 1000, max(0.0, deadline - time.monotonic())))


class Coordinator:
    """Connections to one group's coordinator, one per lane (module docstring, step 1)."""

    def __init__(self, cluster: Cluster, group_id: str, *, client_id: str,
                 connection_factory: Any = None, request_timeout_ms: int) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.client_id = client_id
        self.factory = connection_factory or default_connection_factory
        self.request_timeout_ms = request_timeout_ms
        self.node: tuple[int, str, int] | None = None
        self._connections: dict[str, Any] = {}
        self._finding: asyncio.Task | None = None

    async def ensure(self, timeout_ms: float) -> tuple[int, str, int]:
        """The coordinator (looked up once per move; concurrent callers share the lookup)."""
        if self.node is not None:
            return self.node
        if self._finding is None or self._finding.done():
            self._finding = asyncio.ensure_future(find_coordinator(self.cluster, self.group_id, timeout_ms))
        self.node = await asyncio.shield(self._finding)
        return self.node

    def mark_dead(self, reason: str) -> None:
        """Forget the coordinator (it moved or is unreachable) and close its connections."""
        if self.node is not None:
            log.info("group %s: coordinator %d lost (%s); looking it up again", self.group_id, self.node[0], reason)
        self.node = None
        for lane in list(self._connections):
            self._close(lane)

    def _close(self, lane: str) -> None:
        conn = self._connections.pop(lane, None)
        if conn is not None:
            try:
                result = conn.close()
                if inspect.isawaitable(result):
                    asyncio.ensure_future(result)
            except Exception:
                pass

    async def request(self, lane: str, api_key: int, body: dict, timeout_ms: float) -> dict:
        """One request on ``lane``; the answer body (with its ``error_code``). A lost connection
        or a timeout closes that lane and marks the coordinator dead, and raises."""
        node = await self.ensure(max(timeout_ms, self.request_timeout_ms))
        try:
            conn = self._connections.get(lane)
            if conn is None or getattr(conn, "closed", False):
                conn = await wait_for(self.factory(node[1], node[2], self.client_id), timeout_ms / 1000)
                self._connections[lane] = conn
            code, answer = await conn.request(api_key, body, timeout_ms=int(timeout_ms))
        except (NetworkExceptionError, RequestTimedOutError, OSError, ConnectionError, asyncio.TimeoutError) as error:
            self._close(lane)  # a late answer would hold up the next one on this connection
            self.mark_dead(str(error))
            if isinstance(error, RaftkaError):
                raise
            raise NetworkExceptionError(str(error) or f"no connection to {node[1]}:{node[2]}") from None
        if code != errors.NONE:
            raise errors.error_for(code, (answer or {}).get("error_message") if isinstance(answer, dict) else None)
        answer = answer or {}
        if answer.get("error_code") in COORDINATOR_MOVED:
            self.mark_dead(errors.name_of(answer["error_code"]))
        return answer

    async def close(self) -> None:
        """Close every lane."""
        for lane in list(self._connections):
            self._close(lane)
        if self._finding is not None and not self._finding.done():
            self._finding.cancel()


class CoordinatorSensors:
    """What the member measures for Kafka's consumer-coordinator-metrics (client/aio/metrics.py)."""

    def __init__(self, config: MetricConfig) -> None:
        self.heartbeat = Sensor(config)  # ms from a Heartbeat's send to its answer
        self.join = Sensor(config)  # ms of each JoinGroup (its MEMBER_ID_REQUIRED round included)
        self.sync = Sensor(config)  # ms of each SyncGroup
        self.rebalance = Sensor(config)  # 1 per rebalance this member completed
        self.commit = Sensor(config)  # ms of each OffsetCommit acknowledged


class GroupMember:
    """This consumer's membership in its group (module docstring). The consumer calls
    ``poll(deadline)`` from its own ``poll``; everything that runs listeners happens there."""

    def __init__(self, cluster: Cluster, config: dict[str, Any], assignors: list[AbstractPartitionAssignor], *,
                 subscribed_topics: Callable[[], list[str]], positions: Callable[[], dict[TopicPartition, Any]],
                 apply_assignment: Callable[[set[TopicPartition], set[TopicPartition]], None],
                 wake: Callable[[], None]) -> None:
        self.cluster = cluster
        self.config = config
        self.group_id: str = config["group_id"]
        self.instance_id: str | None = config.get("group_instance_id")
        self.assignors = assignors
        self.protocol = rebalance_protocol(assignors)
        self.coordinator = Coordinator(cluster, self.group_id, client_id=config["client_id"] or "raftka-consumer",
                                       connection_factory=config.get("connection_factory"),
                                       request_timeout_ms=config["request_timeout_ms"])
        self._subscribed_topics = subscribed_topics
        self._positions = positions  # {tp: OffsetAndMetadata} of what the application consumed
        self._apply_assignment = apply_assignment  # (added, removed) -> the consumer's fetch states
        self._wake = wake
        self.listener: Any = None
        self.member_id = ""
        self.generation = -1
        self.leader_id: str | None = None
        self.protocol_name: str | None = None
        self.owned: set[TopicPartition] = set()
        # tp -> the grant under which it is owned (a new number each time it is assigned), so a
        # commit can tell that a partition was taken away (and perhaps given back) meanwhile.
        self._grants: dict[TopicPartition, int] = {}
        self._grants_made = 0
        self.subscribed = False
        self.rejoin_needed = False
        self.rejoin_reason = ""
        self.lost = False  # membership lost: owned partitions must be given up as lost
        self.joined_topics: list[str] = []  # the subscription sent in the last JoinGroup
        self.group_topics: dict[str, int] = {}  # leader: partition counts it assigned from
        self.fatal: RaftkaError | None = None
        self.last_poll = time.monotonic()
        self.next_auto_commit = time.monotonic() + config["auto_commit_interval_ms"] / 1000
        self.rebalances = 0
        self._join: asyncio.Task | None = None
        self._heartbeat: asyncio.Task | None = None
        self._commits: set[asyncio.Task] = set()
        self._heartbeat_now = asyncio.Event()  # a new generation: hold a heartbeat for it at once
        self._closed = False
        self._in_callback = False
        self._retry_at = 0.0
        self.sensors = CoordinatorSensors(metric_config(config))
        self._last_heartbeat = 0.0  # monotonic time of the last heartbeat answer
        self._last_rebalance = 0.0  # monotonic time the last rebalance completed

    @property
    def in_callback(self) -> bool:
        """True while a rebalance listener runs (the consumer's poll must not re-enter it)."""
        return self._in_callback

    @property
    def in_generation(self) -> bool:
        """True while this member holds a generation (joined and not known to be out)."""
        return bool(self.member_id) and self.generation > 0 and not self.lost

    # -- subscription -----------------------------------------------------------------------

    def subscribe(self, listener: Any) -> None:
        """Take part in the group (called by the consumer's ``subscribe``)."""
        self.listener = listener
        if not self.subscribed:
            self.subscribed = True
            self.request_rejoin("subscribed")
        elif self._subscribed_topics() != self.joined_topics:
            self.request_rejoin("subscription changed")

    def request_rejoin(self, reason: str) -> None:
        """Rejoin on the next poll."""
        if not self.rejoin_needed:
            log.debug("group %s: rejoin needed (%s)", self.group_id, reason)
        self.rejoin_needed = True
        self.rejoin_reason = reason
        self._wake()

    # -- driven by the consumer's poll ----------------------------------------------------------

    async def poll(self, deadline: float) -> None:
        """Find the coordinator, (re)join when needed, take finished assignments (listeners run
        here), auto-commit when due. Waits for a rebalance only while owning nothing."""
        if self.fatal is not None:
            error, self.fatal = self.fatal, None
            raise error
        self.last_poll = time.monotonic()
        if self._heartbeat is None and self.subscribed:
            self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_loop(), name="group-heartbeat")
        if not self.subscribed:
            await self._maybe_auto_commit()
            return
        if self.lost and self._join is None:
            await self._lose_partitions()
        self._check_metadata()
        if self.rejoin_needed and self._join is None and time.monotonic() >= self._retry_at:
            await self._prepare_join()
            self.rejoin_needed = False
            self._join = asyncio.get_running_loop().create_task(self._join_and_sync(), name="group-join")
            self._join.add_done_callback(lambda _t: self._wake())
        if self._join is not None and not self._join.done() and not self.owned:
            left = deadline - time.monotonic()
            if left > 0:
                await asyncio.wait([self._join], timeout=left)
        if self._join is not None and self._join.done():
            join, self._join = self._join, None
            await self._finish_join(join)
        await self._maybe_auto_commit()

    async def _invoke(self, method: str, partitions: set[TopicPartition]) -> None:
        if self.listener is None:
            return
        fn = getattr(self.listener, method, None)
        if fn is None:
            return
        self._in_callback = True
        try:
            await _call(fn, set(partitions))
        except Exception:  # a listener's bug must not wedge the group (Kafka logs it too)
            log.exception("group %s: rebalance listener %s failed", self.group_id, method)
        finally:
            self._in_callback = False

    async def _lose_partitions(self) -> None:
        lost, self.owned = set(self.owned), set()
        self.lost = False
        if lost:
            log.info("group %s: lost %d partition(s)", self.group_id, len(lost))
            self._apply_assignment(set(), lost)
            await self._invoke("on_partitions_lost", lost)

    async def _prepare_join(self) -> None:
        """Before JoinGroup: eager members commit and revoke everything; cooperative ones only
        what they no longer subscribe to."""
        if self.protocol == COOPERATIVE:
            topics = set(self._subscribed_topics())
            gone = {tp for tp in self.owned if tp.topic not in topics}
            if gone:
                await self._revoke(gone)
            return
        if self.owned:
            await self._revoke(set(self.owned))

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        if self.config["enable_auto_commit"] and self.in_generation:
            await self._commit_quietly({tp: o for tp, o in self._positions().items() if tp in partitions})
        await self._invoke("on_partitions_revoked", partitions)
        self.owned -= partitions
        self._apply_assignment(set(), partitions)

    async def _finish_join(self, join: asyncio.Task) -> None:
        try:
            assignment: Assignment = join.result()
        except asyncio.CancelledError:
            self.request_rejoin("join cancelled")
            return
        except RaftkaError as error:
            self._join_failed(error)
            return
        assigned = set(assignment.partitions)
        self.rebalances += 1
        self.sensors.rebalance.record()
        self._last_rebalance = time.monotonic()
        for assignor in self.assignors:
            if assignor.name == self.protocol_name:
                assignor.on_assignment(assignment, self.generation)
        if self.protocol == COOPERATIVE:
            revoked = self.owned - assigned
            if revoked:
                await self._revoke(revoked)
                self.request_rejoin(f"revoked {len(revoked)} partition(s) for the follow-up rebalance")
            added = assigned - self.owned
        else:
            added = assigned - self.owned
            removed = self.owned - assigned
            if removed:  # nothing should be owned after an eager revoke; stay safe
                self._apply_assignment(set(), removed)
        self.owned = set(assigned)
        self._grants = {tp: g for tp, g in self._grants.items() if tp in self.owned}
        for tp in added:
            self._grants_made += 1
            self._grants[tp] = self._grants_made
        self._apply_assignment(added, set())
        log.info("group %s: generation %d, member %s: %d partition(s) assigned (%d new)", self.group_id,
                 self.generation, self.member_id, len(assigned), len(added))
        await self._invoke("on_partitions_assigned", added)

    def _join_failed(self, error: RaftkaError) -> None:
        code = error.code
        backoff = self.config["retry_backoff_ms"] / 1000
        if code == errors.UNKNOWN_MEMBER_ID:
            self._reset_member("join refused: unknown member id")
        elif code == errors.ILLEGAL_GENERATION:
            self.generation = -1
            self.lost = bool(self.owned)
        elif code == errors.FENCED_INSTANCE_ID or code in (errors.INCONSISTENT_GROUP_PROTOCOL,
                                                           errors.INVALID_SESSION_TIMEOUT, errors.INVALID_GROUP_ID,
                                                           errors.GROUP_AUTHORIZATION_FAILED):
            self.fatal = error
            log.error("group %s: cannot join: %s", self.group_id, error)
        elif code != errors.REBALANCE_IN_PROGRESS:
            log.info("group %s: join failed, retrying: %s", self.group_id, error)
            self._retry_at = time.monotonic() + backoff
        self.request_rejoin(f"join failed: {error.name}")

    def _reset_member(self, reason: str) -> None:
        log.info("group %s: leaving generation %d as member %s (%s)", self.group_id, self.generation,
                 self.member_id, reason)
        self.member_id = ""
        self.generation = -1
        self.lost = bool(self.owned)

    def _check_metadata(self) -> None:
        """A changed subscription (a pattern matched a new topic) or, on the leader, a changed
        partition count means a rebalance."""
        if self._join is not None or self.rejoin_needed or not self.in_generation:
            return
        topics = self._subscribed_topics()
        if topics != self.joined_topics:
            self.request_rejoin(f"subscription changed to {topics}")
            return
        if self.member_id == self.leader_id and self.group_topics:
            meta = self.cluster.metadata
            for topic, count in self.group_topics.items():
                parts = meta.partitions_for(topic)
                if parts is not None and len(parts) != count:
                    self.request_rejoin(f"{topic} now has {len(parts)} partitions")
                    return

    # -- JoinGroup and SyncGroup (a background task) --------------------------------------------

    def _join_timeout_ms(self) -> int:
        return min(self.config["max_poll_interval_ms"], JOIN_WAIT_MS_MAX) + JOIN_EXTRA_MS

    async def _join_and_sync(self) -> Assignment:
        c = self.config
        topics = self._subscribed_topics()
        self.joined_topics = topics
        owned = sorted(self.owned) if self.protocol == COOPERATIVE else []
        protocols = [{"name": a.name, "metadata": encode_subscription(Subscription(
            topics, a.subscription_user_data(topics), owned, self.generation))} for a in self.assignors]
        body = {"group_id": self.group_id, "session_timeout_ms": c["session_timeout_ms"],
                "rebalance_timeout_ms": c["max_poll_interval_ms"], "member_id": self.member_id,
                "group_instance_id": self.instance_id, "protocol_type": PROTOCOL_TYPE, "protocols": protocols,
                "reason": self.rejoin_reason}
        started = time.monotonic()
        for _ in range(3):  # at most: MEMBER_ID_REQUIRED, then the real join
            answer = await self.coordinator.request("join", ApiKey.JOIN_GROUP, body, self._join_timeout_ms())
            code = answer.get("error_code", 0)
            if code == errors.MEMBER_ID_REQUIRED:
                self.member_id = body["member_id"] = answer["member_id"]
                continue
            if code != errors.NONE:
                raise errors.error_for(code, answer.get("error_message"))
            break
        else:
            raise errors.error_for(errors.MEMBER_ID_REQUIRED, "the coordinator kept asking for a member id")
        self.sensors.join.record((time.monotonic() - started) * 1000)
        self.member_id = answer["member_id"]
        self.generation = answer["generation_id"]
        self.leader_id = answer["leader"]
        self.protocol_name = answer["protocol_name"]
        self.lost = False
        self._heartbeat_now.set()
        assignments: list[dict] = []
        if self.member_id == self.leader_id and not answer.get("skip_assignment"):
            assignments = await self._assign(answer["protocol_name"], answer.get("members") or [])
        started = time.monotonic()
        sync = await self.coordinator.request("join", ApiKey.SYNC_GROUP, {
            "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": self.instance_id, "protocol_type": PROTOCOL_TYPE,
            "protocol_name": self.protocol_name, "assignments": assignments}, self._join_timeout_ms())
        self.sensors.sync.record((time.monotonic() - started) * 1000)
        code = sync.get("error_code", 0)
        if code != errors.NONE:
            raise errors.error_for(code, sync.get("error_message"))
        return decode_assignment(bytes(sync.get("assignment") or b""))

    async def _assign(self, protocol: str, members: list[dict]) -> list[dict]:
        """The leader's job: everyone's subscriptions -> the chosen assignor -> assignments."""
        assignor = next((a for a in self.assignors if a.name == protocol), None)
        if assignor is None:
            raise errors.error_for(errors.INCONSISTENT_GROUP_PROTOCOL, f"this consumer has no assignor {protocol!r}")
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            try:
                subscriptions[m["member_id"]] = decode_subscription(bytes(m.get("metadata") or b""),
                                                                    m.get("group_instance_id"))
            except ValueError as error:
                log.warning("group %s: member %s sent %s; it gets nothing", self.group_id, m["member_id"], error)
                subscriptions[m["member_id"]] = Subscription([])
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        self.cluster.add_topics(topics)
        meta = await self.cluster.refresh_metadata(topics) if topics else self.cluster.metadata
        counts = {t: len(parts) for t in topics if (parts := meta.partitions_for(t)) is not None}
        self.group_topics = counts
        result = assignor.assign(counts, subscriptions)
        log.info("group %s: leader assigned %d partition(s) of %d topic(s) to %d member(s) with %s", self.group_id,
                 sum(counts.values()), len(counts), len(subscriptions), protocol)
        return [{"member_id": member, "assignment": encode_assignment(result.get(member, Assignment([])))}
                for member in subscriptions]

    # -- heartbeats (a background task) -----------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        """Heartbeats, each held by a Raftka coordinator up to the interval (``max_wait_ms``, a
        tagged field of Heartbeat v4) and answered at once when the group changes. After a held
        answer (or an early NONE, which means the group moved on, e.g. to Stable) the next goes
        out at once, so a rebalance is heard of the moment it starts; after REBALANCE_IN_PROGRESS
        the next waits out the interval or a new generation. A coordinator that answers NONE early
        again and again (it does not hold: Kafka's, which skips the tag) gets one heartbeat per
        interval."""
        interval = self.config["heartbeat_interval_ms"] / 1000
        backoff = self.config["retry_backoff_ms"] / 1000
        early_nones = 0
        while not self._closed:
            if not self.in_generation or not self.subscribed:
                await asyncio.sleep(min(interval, 0.1))
                continue
            if time.monotonic() - self.last_poll > self.config["max_poll_interval_ms"] / 1000:
                log.warning("group %s: poll not called for over max_poll_interval_ms=%d; leaving the group "
                            "(processing takes too long: lower max_poll_records or raise the interval)",
                            self.group_id, self.config["max_poll_interval_ms"])
                await self.leave("poll timeout")
                self.request_rejoin("poll timeout")
                continue
            sent = time.monotonic()
            generation, member_id = self.generation, self.member_id
            self._heartbeat_now.clear()
            try:
                answer = await self.coordinator.request("heartbeat", ApiKey.HEARTBEAT, {
                    "group_id": self.group_id, "generation_id": generation, "member_id": member_id,
                    "group_instance_id": self.instance_id,
                    "max_wait_ms": int(interval * 1000)}, self.config["request_timeout_ms"] + interval * 1000)
                code = answer.get("error_code", 0)
                self._last_heartbeat = time.monotonic()
                self.sensors.heartbeat.record((self._last_heartbeat - sent) * 1000)
            except RaftkaError as error:
                code = error.code
            if generation != self.generation or member_id != self.member_id:
                continue  # a rebalance finished meanwhile: this answer is about the old generation
            pace = 0.0
            if code == errors.NONE:
                early_nones = early_nones + 1 if time.monotonic() - sent < interval / 2 else 0
                if early_nones > 3:
                    pace = interval
            elif code == errors.REBALANCE_IN_PROGRESS:
                if self._join is None:
                    self.request_rejoin("the group is rebalancing")
                pace = interval
            elif code in MEMBERSHIP_LOST:
                if code == errors.FENCED_INSTANCE_ID:
                    self.fatal = errors.error_for(code, "another consumer took this group_instance_id")
                self._reset_member(f"heartbeat answered {errors.name_of(code)}")
                self.request_rejoin(errors.name_of(code))
                continue
            else:
                await asyncio.sleep(backoff)
                continue
            wait = sent + pace - time.monotonic()
            if wait > 0:
                try:  # a new generation (our join completed) cuts the wait short
                    await wait_for(self._heartbeat_now.wait(), wait)
                except asyncio.TimeoutError:
                    pass

    async def leave(self, reason: str) -> None:
        """LeaveGroup (dynamic members only) and forget the generation."""
        if self.member_id and self.instance_id is None:
            try:
                await self.coordinator.request("offsets", ApiKey.LEAVE_GROUP, {
                    "group_id": self.group_id, "members": [{"member_id": self.member_id, "group_instance_id": None,
                                                            "reason": reason}]}, LEAVE_TIMEOUT_MS)
            except RaftkaError as error:
                log.debug("group %s: LeaveGroup failed: %s", self.group_id, error)
        if self.member_id:
            self._reset_member(reason)

    def metrics(self) -> dict[str, float]:
        """Kafka's consumer-coordinator-metrics, as measured here (the consumer adds
        assigned-partitions)."""
        s, now = self.sensors, time.monotonic()
        out: dict[str, float] = {}
        out.update(event_metrics("heartbeat", s.heartbeat))
        out.update(sensor_metrics("heartbeat-response-time", s.heartbeat, "max"))
        out["last-heartbeat-seconds-ago"] = now - self._last_heartbeat if self._last_heartbeat else math.nan
        out.update(event_metrics("join", s.join))
        out.update(sensor_metrics("join-time", s.join, "avg", "max"))
        out.update(event_metrics("sync", s.sync))
        out.update(sensor_metrics("sync-time", s.sync, "avg", "max"))
        out.update(sensor_metrics("rebalance", s.rebalance, "total", "rate"))
        out["last-rebalance-seconds-ago"] = now - self._last_rebalance if self._last_rebalance else math.nan
        out.update(event_metrics("commit", s.commit))
        out.update(sensor_metrics("commit-latency", s.commit, "avg", "max"))
        return out

    # -- offsets ----------------------------------------------------------------------------

    async def _maybe_auto_commit(self) -> None:
        if not self.config["enable_auto_commit"] or time.monotonic() < self.next_auto_commit:
            return
        self.next_auto_commit = time.monotonic() + self.config["auto_commit_interval_ms"] / 1000
        if self.subscribed and not self.in_generation:
            return
        offsets = self._positions()
        if offsets:
            self.commit_async(offsets, None)

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     callback: Callable[[Any, Any], Any] | None) -> asyncio.Task:
        """Commit in the background; ``callback(offsets, None or error)`` when done."""
        async def run() -> None:
            error: BaseException | None = None
            try:
                await self.commit(offsets, self.config["request_timeout_ms"])
            except RaftkaError as e:
                error = e
                log.info("group %s: async commit failed: %s", self.group_id, e)
            if callback is not None:
                try:
                    callback(dict(offsets), error)
                except Exception:
                    log.exception("commit callback failed")
        task = asyncio.get_running_loop().create_task(run())
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)
        return task

    async def _commit_quietly(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        if not offsets:
            return
        try:
            await self.commit(offsets, self.config["request_timeout_ms"])
        except RaftkaError as error:
            log.warning("group %s: committing before a revoke failed: %s", self.group_id, error)

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timeout_ms: float) -> None:
        """OffsetCommit as this member (or, with manual assignment, as generation -1); retries
        coordinator moves until ``timeout_ms``. CommitFailedError when the group moved on."""
        if not offsets:
            return
        deadline = time.monotonic() + timeout_ms / 1000
        # A member commits only partitions it owns, and only while it still owns them under the
        # same grant: a partition revoked since (even if given back) has a new owner whose
        # position came from the committed offset, and a late commit here would move it back.
        grants = {tp: self._grants.get(tp) for tp in offsets} if self.subscribed else {}
        topics: dict[str, list[dict]] = {}
        for tp, o in offsets.items():
            o = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
            topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": o.offset,
                                                    "committed_leader_epoch": o.leader_epoch,
                                                    "committed_metadata": o.metadata or ""})
        while True:
            if self.subscribed:
                if not self.in_generation:
                    raise CommitFailedError(errors.error_for(
                        errors.REBALANCE_IN_PROGRESS if self.member_id else errors.UNKNOWN_MEMBER_ID,
                        "not a member of the group's current generation"))
                moved = sorted(tp for tp, grant in grants.items()
                               if grant is None or tp not in self.owned or self._grants.get(tp) != grant)
                if moved:
                    raise CommitFailedError(errors.error_for(
                        errors.REBALANCE_IN_PROGRESS,
                        f"{len(moved)} partition(s) not owned by this member (any more), e.g. "
                        f"{moved[0].topic}-{moved[0].partition}: a rebalance gave them to the group's next owner"))
                generation, member_id = self.generation, self.member_id
            else:
                generation, member_id = -1, ""
            body = {"group_id": self.group_id, "generation_id_or_member_epoch": generation, "member_id": member_id,
                    "group_instance_id": self.instance_id if self.subscribed else None,
                    "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0:
                raise KafkaTimeoutError(f"commit of group {self.group_id!r} not acknowledged within "
                                        f"{int(timeout_ms)} ms")
            try:
                sent = time.monotonic()
                answer = await self.coordinator.request("offsets", ApiKey.OFFSET_COMMIT, body,
                                                        min(left_ms, self.config["request_timeout_ms"]))
                codes = {p.get("error_code", 0) for t in answer.get("topics") or [] for p in t.get("partitions") or []}
            except RaftkaError as error:
                if not error.retriable:
                    raise
                codes = {error.code}
            failed = codes - {errors.NONE}
            if not failed:
                self.sensors.commit.record((time.monotonic() - sent) * 1000)
                return
            code = min(failed)
            if failed & RETRY_LATER or failed <= {errors.COORDINATOR_LOAD_IN_PROGRESS}:
                if failed & COORDINATOR_MOVED:
                    self.coordinator.mark_dead(errors.name_of(code))
                await asyncio.sleep(min(self.config["retry_backoff_ms"] / 1000,
                                        max(0.0, deadline - time.monotonic())))
                continue
            join = self._join
            if (code in (errors.REBALANCE_IN_PROGRESS, errors.ILLEGAL_GENERATION) and self.subscribed
                    and join is not None and not join.done()):
                # Our own rejoin is under way (cooperative members keep their partitions
                # meanwhile): the commit goes through once it completes, with the new generation.
                await asyncio.wait([join], timeout=max(0.0, deadline - time.monotonic()))
                if join.done() and self.in_generation:
                    continue
            error = errors.error_for(code, f"committing offsets of group {self.group_id!r}")
            if code in MEMBERSHIP_LOST or code == errors.REBALANCE_IN_PROGRESS:
                if code in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION) and self.subscribed \
                        and generation == self.generation:
                    self._reset_member(f"commit answered {error.name}")
                    self.request_rejoin(error.name)
                elif code == errors.REBALANCE_IN_PROGRESS and self.subscribed and self._join is None:
                    self.request_rejoin(error.name)
                raise CommitFailedError(error)
            raise error

    async def committed(self, partitions: Iterable[TopicPartition], timeout_ms: float
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """OffsetFetch: the committed offset of each partition (None when none)."""
        wanted = sorted(set(partitions))
        topics: dict[str, list[int]] = {}
        for tp in wanted:
            topics.setdefault(tp.topic, []).append(tp.partition)
        deadline = time.monotonic() + timeout_ms / 1000
        last: RaftkaError | None = None
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0:
                raise KafkaTimeoutError(f"committed offsets of group {self.group_id!r} not fetched within "
                                        f"{int(timeout_ms)} ms (last error: {last})")
            try:
                answer = await self.coordinator.request("offsets", ApiKey.OFFSET_FETCH, {
                    "group_id": self.group_id,
                    "topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()]},
                    min(left_ms, self.config["request_timeout_ms"]))
                code = answer.get("error_code", 0)
            except RaftkaError as error:
                if not error.retriable:
                    raise
                code, answer = error.code, {}
            if code == errors.NONE:
                out: dict[TopicPartition, OffsetAndMetadata | None] = {tp: None for tp in wanted}
                for t in answer.get("topics") or []:
                    for p in t.get("partitions") or []:
                        if p.get("error_code"):
                            raise errors.error_for(p["error_code"], topic=t["name"], partition=p["partition_index"])
                        if p.get("committed_offset", -1) >= 0:
                            out[TopicPartition(t["name"], p["partition_index"])] = OffsetAndMetadata(
                                p["committed_offset"], p.get("metadata") or "", p.get("committed_leader_epoch", -1))
                return out
            last = errors.error_for(code, answer.get("error_message"))
            if not last.retriable:
                raise last
            await asyncio.sleep(min(self.config["retry_backoff_ms"] / 1000, max(0.0, deadline - time.monotonic())))

    # -- leaving ------------------------------------------------------------------------------

    async def unsubscribe(self) -> None:
        """Revoke everything (listener), leave the group, stop taking part."""
        if self._join is not None:
            self._join.cancel()
            self._join = None
        if self.owned:
            await self._revoke(set(self.owned))
        await self.leave("unsubscribed")
        self.subscribed = False
        self.rejoin_needed = False
        self.joined_topics = []

    async def close(self, autocommit: bool, timeout_ms: float) -> None:
        """Commit (auto-commit), revoke, leave (dynamic members), stop heartbeats, close."""
        if self._closed:
            return
        try:
            if self._join is not None:
                self._join.cancel()
                self._join = None
            if self.subscribed and self.owned and self.in_generation:
                if autocommit and self.config["enable_auto_commit"]:
                    await self._commit_quietly(self._positions())
                await self._invoke("on_partitions_revoked", set(self.owned))
            elif not self.subscribed and autocommit and self.config["enable_auto_commit"]:
                offsets = self._positions()
                if offsets:
                    try:
                        await self.commit(offsets, timeout_ms)
                    except RaftkaError as error:
                        log.warning("group %s: commit on close failed: %s", self.group_id, error)
            if self._commits:
                await asyncio.wait(list(self._commits), timeout=timeout_ms / 1000)
            if self.subscribed:
                await self.leave("consumer closed")
        finally:
            self._closed = True
            await cancel_and_wait([self._heartbeat, *self._commits], CLOSE_TASKS_TIMEOUT_S)
            await self.coordinator.close()
