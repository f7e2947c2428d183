"""The group coordinator: consumer group membership on the brokers; committed offsets are its
offset manager's (offsets.py), to which it hands OffsetCommit and OffsetFetch.

Each broker coordinates the groups whose ``__consumer_offsets`` partition it leads
(records.py: ``partition_for``). When it becomes leader of such a partition (a committed
metadata change), it waits until the partition's high watermark reaches the start of its leader
epoch, replays the partition below the high watermark, and then answers for those groups;
meanwhile they are answered COORDINATOR_LOAD_IN_PROGRESS. When it stops leading the partition,
it drops the groups (held JoinGroup/SyncGroup/Heartbeat answers get NOT_COORDINATOR) and the new
leader loads them.

The protocol (Kafka's classic group protocol, docs/consumer-groups.md):

- JoinGroup: a member without a member id gets MEMBER_ID_REQUIRED and a fresh id (a static
  member, with ``group_instance_id``, gets its id at once). Any join, leave, expiry or changed
  subscription moves the group to PreparingRebalance; each JoinGroup is held until every
  member has rejoined or the rebalance timeout passed (members that did not rejoin are removed).
  The rebalance then completes: the generation goes up, one protocol (assignor) is chosen, the
  leader gets every member's subscription.
- SyncGroup: the leader sends the assignment; it is written to ``__consumer_offsets`` (acks=all)
  before anyone gets theirs. Then the group is Stable.
- Heartbeat: keeps a member in; answers REBALANCE_IN_PROGRESS when it must rejoin. Raftka
  extension: ``max_wait_ms`` holds a Heartbeat in a Stable group up to that long and answers
  the moment a rebalance starts, so members learn of it at once rather than at their next
  heartbeat.
- DescribeGroups, ListGroups, DeleteGroups (only a group without members).
- OffsetDelete (KIP-496): a group without members may lose any committed offset; a consumer
  group with members only those of topics none of its members subscribes to (their protocol
  metadata, Kafka's ConsumerProtocolSubscription, says which); another group with members none.

With the offset manager (offsets.py; its docstring has the whole interface): the coordinator
answers its ``owner_error`` and ``admit_commit`` (a commit's member and generation), tells it
``group_dead`` whenever a group is dropped, hands it each partition's loaded offsets
(``restore``) and, on the retention timer, each live group's membership side (``retain``).
Neither touches the other's state.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Awaitable, Callable

from raftka.broker.group.group import Group, GroupState, Member, group_id_of, optional_str
from raftka.broker.group.offsets import PARTITIONS_PER_DELETE_MAX, OffsetManager, RetentionView
from raftka.broker.group.records import OFFSETS_TOPIC, group_key, group_value, partition_for
from raftka.broker.group.store import OffsetsStore, store_error
from raftka.common import errors
from raftka.common.errors import RaftkaError
from raftka.common.messages.consumer_protocol import ConsumerProtocolError, decode_subscription

log = logging.getLogger(__name__)

# The request being handled (the broker sets it), for the member's client id and host.
REQUEST: contextvars.ContextVar[Any] = contextvars.ContextVar("raftka_group_request", default=None)

JOIN_WAIT_MS_MAX = 240_000  # a held JoinGroup stays below the transport's handler safety net (300 s)
HEARTBEAT_WAIT_MS_MAX = 10_000  # a held Heartbeat (max_wait_ms extension) waits at most this long
TICK_MS_MAX = 1000  # the timer loop wakes at least this often
TICK_MS_MIN = 20  # and at most this often for deadlines (joins and leaves wake it at once)
LOAD_RETRY_MS = 500
STATE_BY_NAME = {s.value: s for s in GroupState}
CONSUMER_PROTOCOL_TYPE = "consumer"  # members' metadata is Kafka's consumer protocol (subscribed topics)


def monotonic_ms() -> float:
    """The default clock: monotonic milliseconds."""
    return time.monotonic() * 1000


def wall_ms() -> int:
    """Milliseconds since the epoch (commit timestamps, offset expiry)."""
    return int(time.time() * 1000)


@dataclass
class PartitionLoad:
    """A __consumer_offsets partition this broker leads: loading, then loaded."""

    index: int
    leader_epoch: int
    topic_id: str = ""
    loaded: bool = False
    task: asyncio.Task | None = None
    started_ms: float = 0.0


@dataclass
class CoordinatorConfig:
    """The broker configs the coordinator reads (Kafka's names; docs/consumer-groups.md)."""

    num_partitions: int = 50
    replication_factor: int = 3
    segment_bytes: int = 104_857_600
    retention_ms: int = 10_080 * 60_000
    retention_check_interval_ms: int = 600_000
    commit_timeout_ms: int = 5000
    load_buffer_bytes: int = 5_242_880
    metadata_max_bytes: int = 4096
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000

    @classmethod
    def from_server_config(cls, config: Any) -> "CoordinatorConfig":
        """From a ServerConfig (or any mapping with Kafka's keys)."""
        return cls(config["offsets.topic.num.partitions"], config["offsets.topic.replication.factor"],
                   config["offsets.topic.segment.bytes"], config["offsets.retention.minutes"] * 60_000,
                   config["offsets.retention.check.interval.ms"], config["offsets.commit.timeout.ms"],
                   config["offsets.load.buffer.size"], config["offset.metadata.max.bytes"],
                   config["group.min.session.timeout.ms"], config["group.max.session.timeout.ms"],
                   config["group.initial.rebalance.delay.ms"])


def _fail(code: int, message: str | None = None, **fields: Any) -> dict:
    return {"error_code": code, "error_message": message, **fields}


def _join_error(code: int, message: str | None = None, member_id: str = "") -> dict:
    return _fail(code, message, generation_id=-1, protocol_type=None, protocol_name=None, leader="",
                 skip_assignment=False, member_id=member_id, members=[])


@dataclass
class CoordinatorStats:
    """Counters for /metrics (offset commits: OffsetManager.commits)."""

    rebalances: int = 0
    expired_members: int = 0
    loads: int = 0
    load_ms_last: float = 0.0
    groups_by_partition: dict[int, int] = field(default_factory=dict)


class GroupCoordinator:
    """Groups of the __consumer_offsets partitions this broker leads (module docstring); their
    committed offsets are held by ``self.offsets``."""

    def __init__(self, broker_id: int, config: CoordinatorConfig, store: OffsetsStore, *,
                 clock: Callable[[], float] = monotonic_ms, wall: Callable[[], int] = wall_ms) -> None:
        self.broker_id = broker_id
        self.config = config
        self.store = store
        self.clock = clock
        self.wall = wall
        self.groups: dict[str, Group] = {}
        self.partitions: dict[int, PartitionLoad] = {}
        self.num_partitions: int | None = None  # of __consumer_offsets, once it exists
        self.stats = CoordinatorStats()
        self.offsets = OffsetManager(store, self, commit_timeout_ms=config.commit_timeout_ms,
                                     metadata_max_bytes=config.metadata_max_bytes, retention_ms=config.retention_ms,
                                     wall=wall)
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._runner: asyncio.Task | None = None
        self._last_maintenance_ms = 0.0
        # None, or a callable: False while this broker may have been fenced without knowing it
        # (then nothing is served: NOT_COORDINATOR). The broker sets it (service.py).
        self.lease: Callable[[], bool] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the timer loop (member expiry, rebalance deadlines, offset retention)."""
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run(), name="group-coordinator")
            self._last_maintenance_ms = self.clock()

    async def close(self) -> None:
        """Stop timers, drop every group (held answers get NOT_COORDINATOR)."""
        for index in list(self.partitions):
            self.resign(index)
        tasks = [t for t in [self._runner, *self._tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self) -> None:
        while True:
            try:
                self.tick()
                now = self.clock()
                if now - self._last_maintenance_ms >= self.config.retention_check_interval_ms:
                    self._last_maintenance_ms = now
                    await self.maintain()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in one pass must not stop expiring members for good
                log.exception("group coordinator timer pass failed")
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self._next_timer_ms() / 1000)
            except asyncio.TimeoutError:
                pass

    def _next_timer_ms(self) -> float:
        now = self.clock()
        soonest = now + TICK_MS_MAX
        for group in self.groups.values():
            for member in group.members.values():
                soonest = min(soonest, member.heartbeat_deadline_ms)
            soonest = min([soonest, *group.pending_members.values()])
            if group.is_(GroupState.PREPARING_REBALANCE):
                soonest = min(soonest, group.rebalance_deadline_ms, max(group.initial_delay_until_ms, now))
        return max(TICK_MS_MIN, soonest - now + 1)

    # -- which partitions we lead ---------------------------------------------------------------

    def set_partition_count(self, count: int | None) -> None:
        """The committed partition count of __consumer_offsets (None: the topic does not exist)."""
        self.num_partitions = count
        if count is None:
            for index in list(self.partitions):
                self.resign(index)

    def elect(self, index: int, leader_epoch: int, topic_id: str = "") -> None:
        """This broker leads partition ``index`` at ``leader_epoch``: load its groups (again if
        the epoch changed: another leader may have written in between)."""
        current = self.partitions.get(index)
        if current is not None and (current.leader_epoch, current.topic_id) == (leader_epoch, topic_id):
            return
        if current is not None:
            self.resign(index)
        load = PartitionLoad(index, leader_epoch, topic_id, started_ms=self.clock())
        self.partitions[index] = load
        load.task = self._spawn(self._load(load), f"load-offsets-{index}")
        log.info("%s-%d: leader at epoch %d; loading its groups", OFFSETS_TOPIC, index, leader_epoch)

    def resign(self, index: int) -> None:
        """This broker no longer leads partition ``index``: drop its groups."""
        load = self.partitions.pop(index, None)
        if load is None:
            return
        if load.task is not None and not load.task.done():
            load.task.cancel()
        dropped = 0
        for group_id, group in list(self.groups.items()):
            if group.partition == index:
                self._drop(group, errors.NOT_COORDINATOR)
                dropped += 1
        log.info("%s-%d: not leader any more; unloaded %d group(s)", OFFSETS_TOPIC, index, dropped)

    def _drop(self, group: Group, code: int) -> None:
        for member in group.members.values():
            for future in (member.join_future, member.sync_future):
                if future is not None and not future.done():
                    future.set_result(_join_error(code, f"group {group.group_id} moved or was deleted"))
        if not group.is_(GroupState.DEAD):
            group.transition_to(GroupState.DEAD, self.wall())
        self.groups.pop(group.group_id, None)
        self.offsets.group_dead(group.group_id)

    async def _load(self, load: PartitionLoad) -> None:
        def current() -> bool:
            return self.partitions.get(load.index) is load
        while current():
            try:
                loaded = await self.store.load(load.index, current)
                break
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("%s-%d: loading failed (%s); retrying", OFFSETS_TOPIC, load.index, error)
                await asyncio.sleep(LOAD_RETRY_MS / 1000)
        else:
            return
        if not current():
            return
        now = self.clock()
        count = 0
        for group_id in set(loaded.groups) | set(loaded.offsets):
            value = loaded.groups.get(group_id)
            offsets = loaded.offsets.get(group_id) or {}
            if value is None and not offsets:
                continue  # deleted
            try:
                group = Group.from_value(group_id, load.index, value, now) if value else Group(group_id, load.index)
            except (KeyError, TypeError, ValueError) as error:
                log.warning("group %s: unreadable metadata (%s); loading its offsets only", group_id, error)
                group = Group(group_id, load.index)
            self.offsets.restore(group_id, offsets)
            group.metadata_written_ms = loaded.group_written_ms.get(group_id, 0)
            if not value:  # known by its commits only: Empty since the last one
                group.state_timestamp_ms = self.offsets.last_commit_ms(group_id)
            self.groups[group_id] = group
            count += 1
        load.loaded = True
        self.stats.loads += 1
        self.stats.load_ms_last = self.clock() - load.started_ms
        log.info("%s-%d: loaded %d group(s) from %d record(s) in %.0f ms", OFFSETS_TOPIC, load.index, count,
                 loaded.records, self.stats.load_ms_last)
        self._wake.set()

    def owner_error(self, group_id: str) -> int:
        """NONE when this broker coordinates ``group_id`` and has loaded it; else the error."""
        if self.num_partitions is None:
            return errors.COORDINATOR_NOT_AVAILABLE
        if self.lease is not None and not self.lease():
            return errors.NOT_COORDINATOR
        load = self.partitions.get(partition_for(group_id, self.num_partitions))
        if load is None:
            return errors.NOT_COORDINATOR
        if not load.loaded:
            return errors.COORDINATOR_LOAD_IN_PROGRESS
        return errors.NONE

    # -- JoinGroup ----------------------------------------------------------------------------

    async def join_group(self, body: dict) -> dict:
        """JoinGroup (see the module docstring); the answer may be held until the rebalance completes."""
        try:
            group_id = group_id_of(body)
        except RaftkaError as error:
            return _join_error(error.code, error.message)
        # Types, sizes and counts were checked at the boundary against JoinGroup's declaration.
        session_ms = body["session_timeout_ms"]
        rebalance_ms = body.get("rebalance_timeout_ms", -1)
        rebalance_ms = session_ms if rebalance_ms < 0 else rebalance_ms
        member_id = body.get("member_id") or ""
        instance_id = optional_str(body.get("group_instance_id"))
        protocol_type = body.get("protocol_type")
        protocols = [(p["name"], bytes(p.get("metadata") or b"")) for p in body["protocols"]]
        code = self.owner_error(group_id)
        if code:
            return _join_error(code)
        if not self.config.min_session_timeout_ms <= session_ms <= self.config.max_session_timeout_ms:
            return _join_error(errors.INVALID_SESSION_TIMEOUT,
                               f"session_timeout_ms {session_ms} is outside [group.min.session.timeout.ms="
                               f"{self.config.min_session_timeout_ms}, group.max.session.timeout.ms="
                               f"{self.config.max_session_timeout_ms}]")
        if not protocols or not isinstance(protocol_type, str) or not protocol_type:
            return _join_error(errors.INCONSISTENT_GROUP_PROTOCOL, "protocol_type and protocols are required")
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return _join_error(errors.UNKNOWN_MEMBER_ID, f"group {group_id} has no member {member_id}")
            group = self.groups[group_id] = Group(group_id, partition_for(group_id, self.num_partitions or 1),
                                                  state_timestamp_ms=self.wall())
        if group.is_(GroupState.DEAD):
            return _join_error(errors.COORDINATOR_NOT_AVAILABLE)
        if not group.supports(protocol_type, protocols):
            return _join_error(errors.INCONSISTENT_GROUP_PROTOCOL,
                               f"group {group_id} uses protocol type {group.protocol_type} with protocols "
                               f"{sorted(group.candidate_protocols())}")
        request = REQUEST.get()
        client_id = (getattr(request, "client_id", None) or "") if request is not None else ""
        peer = getattr(request, "peer", None) if request is not None else None
        client_host = f"/{peer[0]}" if isinstance(peer, (tuple, list)) and peer else ""
        rebalance_ms = min(rebalance_ms, JOIN_WAIT_MS_MAX)
        details = dict(client_id=client_id, client_host=client_host, session_ms=session_ms,
                       rebalance_ms=rebalance_ms, protocol_type=protocol_type, protocols=protocols)
        if not member_id:
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if instance_id is not None:
                if instance_id in group.static_members:
                    return await self._rejoin_static(group, instance_id, new_id, details)
                return await self._add_member_and_rebalance(group, new_id, instance_id, details, "static member joined")
            group.pending_members[new_id] = self.clock() + session_ms
            self._wake.set()
            return _join_error(errors.MEMBER_ID_REQUIRED, "join again with this member_id", member_id=new_id)
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return await self._add_member_and_rebalance(group, member_id, instance_id, details, "member joined")
        if group.is_static_member_fenced(member_id, instance_id):
            return _join_error(errors.FENCED_INSTANCE_ID, f"group_instance_id {instance_id} has a newer member")
        member = group.members.get(member_id)
        if member is None:
            return _join_error(errors.UNKNOWN_MEMBER_ID, f"group {group_id} has no member {member_id}")
        if member.group_instance_id != instance_id:
            return _join_error(errors.FENCED_INSTANCE_ID, f"member {member_id} joined with another group_instance_id")
        return await self._rejoin(group, member, details)

    def _update_member(self, member: Member, details: dict) -> None:
        member.client_id = details["client_id"] or member.client_id
        member.client_host = details["client_host"] or member.client_host
        member.session_timeout_ms = details["session_ms"]
        member.rebalance_timeout_ms = details["rebalance_ms"]
        member.protocols = details["protocols"]
        member.heartbeat_deadline_ms = self.clock() + member.session_timeout_ms

    async def _rejoin(self, group: Group, member: Member, details: dict) -> dict:
        same = member.same_protocols(details["protocols"])
        state = group.state
        if state is GroupState.COMPLETING_REBALANCE and same:
            return self._join_answer(group, member)
        if state is GroupState.STABLE and same and member.member_id != group.leader_id:
            return self._join_answer(group, member)
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return _join_error(errors.UNKNOWN_MEMBER_ID)
        self._update_member(member, details)
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(_join_error(errors.REBALANCE_IN_PROGRESS, "superseded by a newer JoinGroup"))
        future = member.join_future = asyncio.get_running_loop().create_future()
        if state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member.member_id} rejoined"
                                    + ("" if same else " with a new subscription"))
        self._maybe_complete_join(group)
        return await future

    async def _add_member_and_rebalance(self, group: Group, member_id: str, instance_id: str | None,
                                        details: dict, reason: str) -> dict:
        member = Member(member_id, instance_id, details["client_id"], details["client_host"], details["session_ms"],
                        details["rebalance_ms"], details["protocol_type"], details["protocols"], is_new=True)
        member.heartbeat_deadline_ms = self.clock() + member.session_timeout_ms
        future = member.join_future = asyncio.get_running_loop().create_future()
        group.add(member)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._extend_initial_delay(group)
        else:
            self._prepare_rebalance(group, f"{reason}: {member_id}")
        self._maybe_complete_join(group)
        return await future

    async def _rejoin_static(self, group: Group, instance_id: str, new_id: str, details: dict) -> dict:
        """A static member restarted (same group_instance_id, no member id): it takes its old
        place. In a Stable group with an unchanged subscription nobody else notices: no rebalance."""
        old_id = group.static_members[instance_id]
        member = group.replace_static_member(instance_id, new_id)
        same = member.same_protocols(details["protocols"])
        self._update_member(member, details)
        log.info("group %s: static member %s came back as %s (was %s)", group.group_id, instance_id, new_id, old_id)
        if group.is_(GroupState.STABLE) and same:
            generation = group.generation_id
            try:
                await self._store_group(group)
            except RaftkaError as error:
                return _join_error(store_error(error), error.message)
            if group.members.get(new_id) is not member:
                # Expired (or replaced) while its record was written: nothing would answer a
                # join held for a member that is gone. It joins again from scratch.
                return _join_error(errors.UNKNOWN_MEMBER_ID, f"static member {instance_id} left the group "
                                   "while it rejoined; join again")
            if group.generation_id == generation:
                return self._join_answer(group, member, skip_assignment=True)
        future = member.join_future = asyncio.get_running_loop().create_future()
        if not group.is_(GroupState.PREPARING_REBALANCE):
            self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        self._maybe_complete_join(group)
        return await future

    def _join_answer(self, group: Group, member: Member, *, skip_assignment: bool = False) -> dict:
        leader = member.member_id == group.leader_id
        protocol = group.protocol_name or ""
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata_for(protocol)} for m in group.members.values()] if leader else []
        return {"error_code": errors.NONE, "error_message": None, "generation_id": group.generation_id,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "leader": group.leader_id, "skip_assignment": skip_assignment and leader,
                "member_id": member.member_id, "members": members}

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        now = self.clock()
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_syncs(group, errors.REBALANCE_IN_PROGRESS)
        was_empty = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.wall())
        group.rebalance_started_ms = now
        group.rebalance_deadline_ms = now + min(max(group.max_rebalance_timeout_ms, 1), JOIN_WAIT_MS_MAX)
        group.initial_delay_until_ms = 0.0
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            group.initial_delay_until_ms = min(now + self.config.initial_rebalance_delay_ms,
                                               group.rebalance_deadline_ms)
        group.rebalances += 1
        self.stats.rebalances += 1
        log.info("group %s: preparing rebalance (generation %d): %s", group.group_id, group.generation_id, reason)
        self._wake.set()

    def _extend_initial_delay(self, group: Group) -> None:
        """A member joined during an empty group's initial delay: wait a little longer for more
        (Kafka's InitialDelayedJoin), never past the rebalance timeout."""
        group.rebalance_deadline_ms = group.rebalance_started_ms + min(max(group.max_rebalance_timeout_ms, 1),
                                                                       JOIN_WAIT_MS_MAX)
        if group.initial_delay_until_ms:
            group.initial_delay_until_ms = min(self.clock() + self.config.initial_rebalance_delay_ms,
                                               group.rebalance_deadline_ms)

    def _reset_syncs(self, group: Group, code: int) -> None:
        for member in group.members.values():
            if member.awaiting_sync:
                assert member.sync_future is not None
                member.sync_future.set_result(_fail(code, None, protocol_type=None, protocol_name=None,
                                                    assignment=b""))
            member.sync_future = None

    def _maybe_complete_join(self, group: Group) -> None:
        if (group.is_(GroupState.PREPARING_REBALANCE) and group.all_members_joined
                and self.clock() >= group.initial_delay_until_ms):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Every member rejoined, or time is up: start the next generation."""
        for member in list(group.members.values()):
            if not member.awaiting_join:
                log.info("group %s: removing member %s (did not rejoin in time)", group.group_id, member.member_id)
                self._remove_member(group, member)
        if not group.members:
            group.generation_id += 1
            group.protocol_name = None
            group.leader_id = None
            group.transition_to(GroupState.EMPTY, self.wall())
            log.info("group %s: empty at generation %d", group.group_id, group.generation_id)
            self._spawn(self._store_group_quietly(group), f"store-group-{group.group_id}")
            return
        group.generation_id += 1
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition_to(GroupState.COMPLETING_REBALANCE, self.wall())
        now = self.clock()
        for member in group.members.values():
            member.is_new = False
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
            future, member.join_future = member.join_future, None
            if future is not None and not future.done():
                future.set_result(self._join_answer(group, member))
        log.info("group %s: generation %d with %d member(s), protocol %s, leader %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name, group.leader_id)

    def _remove_member(self, group: Group, member: Member) -> None:
        for future in (member.join_future, member.sync_future):
            if future is not None and not future.done():
                future.set_result(_join_error(errors.UNKNOWN_MEMBER_ID, "removed from the group"))
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} {reason}")
        self._maybe_complete_join(group)

    # -- SyncGroup ----------------------------------------------------------------------------

    async def sync_group(self, body: dict) -> dict:
        """SyncGroup: the leader's assignment is stored, then everyone gets theirs."""
        def error(code: int, message: str | None = None) -> dict:
            return _fail(code, message, protocol_type=None, protocol_name=None, assignment=b"")
        try:
            group_id = group_id_of(body)
        except RaftkaError as e:
            return error(e.code, e.message)
        member_id = body.get("member_id") or ""
        generation = body.get("generation_id")
        instance_id = optional_str(body.get("group_instance_id"))
        code = self.owner_error(group_id)
        if code:
            return error(code)
        group = self.groups.get(group_id)
        if group is None:
            return error(errors.UNKNOWN_MEMBER_ID, f"unknown group {group_id}")
        if group.is_static_member_fenced(member_id, instance_id):
            return error(errors.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return error(errors.UNKNOWN_MEMBER_ID, f"group {group_id} has no member {member_id}")
        if generation != group.generation_id:
            return error(errors.ILLEGAL_GENERATION, f"generation {generation} is not the group's "
                                                    f"{group.generation_id}")
        if (body.get("protocol_type") not in (None, group.protocol_type)
                or body.get("protocol_name") not in (None, group.protocol_name)):
            return error(errors.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return error(errors.REBALANCE_IN_PROGRESS)
        if group.is_(GroupState.STABLE):
            member.heartbeat_deadline_ms = self.clock() + member.session_timeout_ms
            return self._sync_answer(group, member)
        if not group.is_(GroupState.COMPLETING_REBALANCE):
            return error(errors.UNKNOWN_MEMBER_ID)
        member.heartbeat_deadline_ms = self.clock() + member.session_timeout_ms
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(error(errors.REBALANCE_IN_PROGRESS, "superseded by a newer SyncGroup"))
        future = member.sync_future = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            raw = body.get("assignments") or []
            assignments = {a["member_id"]: bytes(a.get("assignment") or b"") for a in raw}
            self._spawn(self._store_assignment(group, group.generation_id, assignments),
                        f"store-assignment-{group_id}")
        return await future

    def _sync_answer(self, group: Group, member: Member) -> dict:
        return {"error_code": errors.NONE, "error_message": None, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name, "assignment": member.assignment}

    async def _store_assignment(self, group: Group, generation: int, assignments: dict[str, bytes]) -> None:
        """Write the group with the leader's assignment; on success every waiting member gets
        its part and the group is Stable. On failure they get the error and rejoin."""
        previous = {m.member_id: m.assignment for m in group.members.values()}
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        entries: list[tuple[bytes, bytes | None]] = [_metadata_record(group, self.wall())]
        for member_id, assignment in previous.items():  # applied only on success
            if member_id in group.members:
                group.members[member_id].assignment = assignment
        try:
            await self._append(group, entries)
            group.metadata_written_ms = self.wall()
        except RaftkaError as error:
            if group.generation_id == generation and group.is_(GroupState.COMPLETING_REBALANCE):
                code = store_error(error)
                log.warning("group %s: storing the assignment failed (%s)", group.group_id, error)
                self._reset_syncs(group, code)
                self._prepare_rebalance(group, "storing the assignment failed")
            return
        if group.generation_id != generation or not group.is_(GroupState.COMPLETING_REBALANCE):
            return  # a rebalance began meanwhile; the syncs were answered REBALANCE_IN_PROGRESS
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        group.transition_to(GroupState.STABLE, self.wall())
        for member in group.members.values():
            future, member.sync_future = member.sync_future, None
            if future is not None and not future.done():
                future.set_result(self._sync_answer(group, member))
        log.info("group %s: stable at generation %d", group.group_id, generation)

    async def _append(self, group: Group, entries: list[tuple[bytes, bytes | None]]) -> int:
        return await self.store.append(group.partition, entries, self.config.commit_timeout_ms)

    async def _store_group(self, group: Group) -> None:
        await self._append(group, [_metadata_record(group, self.wall())])
        group.metadata_written_ms = self.wall()

    async def _store_group_quietly(self, group: Group) -> None:
        try:
            await self._store_group(group)
        except RaftkaError as error:
            log.info("group %s: storing group metadata failed: %s", group.group_id, error)

    # -- Heartbeat, LeaveGroup ------------------------------------------------------------------

    async def heartbeat(self, body: dict) -> dict:
        """Heartbeat; with ``max_wait_ms`` (Raftka's extension: a tagged field of Kafka's v4,
        common/messages/groups.py) held while the group stays Stable, and answered the moment the
        group changes. Without it (Kafka's clients, versions 0-3) the answer is immediate."""
        try:
            group_id = group_id_of(body)
        except RaftkaError as e:
            return _fail(e.code, e.message)
        member_id = body.get("member_id") or ""
        generation = body.get("generation_id")
        instance_id = optional_str(body.get("group_instance_id"))
        wait_ms = body.get("max_wait_ms") or 0  # absent before v4 and from Kafka's clients
        code = self._heartbeat_check(group_id, member_id, generation, instance_id, touch=True)
        if code or wait_ms <= 0:
            return _fail(code)
        group = self.groups[group_id]
        member = group.members[member_id]
        wait_ms = min(wait_ms, member.session_timeout_ms // 2, HEARTBEAT_WAIT_MS_MAX)
        if wait_ms > 0:
            try:
                await asyncio.wait_for(group.changed.wait(), wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        return _fail(self._heartbeat_check(group_id, member_id, generation, instance_id, touch=False))

    def _heartbeat_check(self, group_id: str, member_id: str, generation: Any, instance_id: str | None, *,
                         touch: bool) -> int:
        code = self.owner_error(group_id)
        if code:
            return code
        group = self.groups.get(group_id)
        if group is None:
            return errors.UNKNOWN_MEMBER_ID
        if group.is_static_member_fenced(member_id, instance_id):
            return errors.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or group.is_(GroupState.EMPTY):
            return errors.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE
        if generation != group.generation_id:
            return errors.ILLEGAL_GENERATION
        if touch:
            member.heartbeat_deadline_ms = self.clock() + member.session_timeout_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            return errors.REBALANCE_IN_PROGRESS
        return errors.NONE

    async def leave_group(self, body: dict) -> dict:
        """LeaveGroup for one or more members (by member id, or a static member's instance id)."""
        try:
            group_id = group_id_of(body)
        except RaftkaError as e:
            return _fail(e.code, e.message, members=[])
        raw = body.get("members")
        if raw is None:
            raw = [{"member_id": body.get("member_id") or "", "group_instance_id": None}]
        code = self.owner_error(group_id)
        if code:
            return _fail(code, members=[])
        group = self.groups.get(group_id)
        if group is None:
            return _fail(errors.UNKNOWN_MEMBER_ID, f"unknown group {group_id}", members=[])
        out = []
        for item in raw:
            member_id = item.get("member_id") or ""
            instance_id = optional_str(item.get("group_instance_id"))
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
            result = errors.NONE
            if member_id in group.pending_members:
                del group.pending_members[member_id]
                self._maybe_complete_join(group)
            elif group.is_static_member_fenced(member_id, instance_id):
                result = errors.FENCED_INSTANCE_ID
            elif member_id not in group.members:
                result = errors.UNKNOWN_MEMBER_ID
            else:
                reason = item.get("reason") or "left the group"
                self._remove_member_and_update_group(group, group.members[member_id], str(reason))
            out.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": result})
        return _fail(errors.NONE, members=out)

    # -- timers ---------------------------------------------------------------------------------

    def tick(self) -> None:
        """Expire members whose session ran out and pending member ids; complete rebalances
        whose time is up. Called by the timer loop (and by tests with their own clock)."""
        now = self.clock()
        for group in list(self.groups.values()):
            if group.is_(GroupState.DEAD):
                continue
            for member in list(group.members.values()):
                if member.awaiting_join or member.awaiting_sync:
                    continue  # a held request keeps a member in (Kafka's shouldKeepAlive)
                if now > member.heartbeat_deadline_ms and member.member_id in group.members:
                    self.stats.expired_members += 1
                    log.info("group %s: member %s expired (no heartbeat for %d ms)", group.group_id,
                             member.member_id, member.session_timeout_ms)
                    self._remove_member_and_update_group(group, member, "expired")
            for member_id, deadline in list(group.pending_members.items()):
                if now > deadline:
                    del group.pending_members[member_id]
                    self._maybe_complete_join(group)
            if group.is_(GroupState.PREPARING_REBALANCE):
                if now >= group.rebalance_deadline_ms:
                    self._complete_join(group)
                else:
                    self._maybe_complete_join(group)

    # -- OffsetCommit, OffsetFetch: the offset manager's ---------------------------------------

    async def offset_commit(self, body: dict) -> dict:
        """OffsetCommit (OffsetManager.offset_commit; it asks ``admit_commit``)."""
        return await self.offsets.offset_commit(body)

    async def offset_fetch(self, body: dict) -> dict:
        """OffsetFetch (OffsetManager.offset_fetch)."""
        return await self.offsets.offset_fetch(body)

    def admit_commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None) -> tuple[int, int]:
        """For the offset manager: may this member commit at this generation? (error code, the
        group's partition). A commit with generation -1 creates an unknown group (Empty), as
        Kafka's does; a member's commit counts as a heartbeat."""
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return errors.ILLEGAL_GENERATION, -1
            group = self.groups[group_id] = Group(group_id, partition_for(group_id, self.num_partitions or 1),
                                                  state_timestamp_ms=self.wall())
        return self._commit_check(group, generation, member_id, instance_id), group.partition

    def _commit_check(self, group: Group, generation: int, member_id: str, instance_id: str | None) -> int:
        if group.is_(GroupState.DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, instance_id):
            return errors.FENCED_INSTANCE_ID
        if generation < 0 and not member_id and group.is_(GroupState.EMPTY):
            return errors.NONE  # a tool or a manually assigned consumer on a group without members
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return errors.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if generation != group.generation_id:
            return errors.ILLEGAL_GENERATION
        member.heartbeat_deadline_ms = self.clock() + member.session_timeout_ms
        return errors.NONE

    # -- DescribeGroups, ListGroups, DeleteGroups ------------------------------------------------

    async def describe_groups(self, body: dict) -> dict:
        """DescribeGroups: state, protocol and members (with subscription and assignment bytes)."""
        ids = body["groups"]
        out = []
        for group_id in ids:
            entry = {"error_code": errors.NONE, "group_id": group_id, "group_state": "", "protocol_type": "",
                     "protocol_data": "", "members": []}
            code = self.owner_error(group_id) if isinstance(group_id, str) else errors.INVALID_GROUP_ID
            group = self.groups.get(group_id) if not code else None
            if code:
                entry["error_code"] = code
            elif group is None:
                entry["group_state"] = GroupState.DEAD.value
            else:
                protocol = group.protocol_name or ""
                entry.update(group_state=group.state.value, protocol_type=group.protocol_type or "",
                             protocol_data=protocol, generation_id=group.generation_id, leader=group.leader_id,
                             members=[{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                       "client_id": m.client_id, "client_host": m.client_host,
                                       "member_metadata": _metadata_or_empty(m, protocol),
                                       "member_assignment": m.assignment} for m in group.members.values()])
            out.append(entry)
        return {"groups": out}

    async def list_groups(self, body: dict) -> dict:
        """ListGroups: the groups this broker coordinates (optionally only some states)."""
        states = body.get("states_filter") or []
        loading = any(not load.loaded for load in self.partitions.values())
        wanted = {s.lower() for s in states}
        groups = [{"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.value}
                  for g in sorted(self.groups.values(), key=lambda g: g.group_id)
                  if not g.is_(GroupState.DEAD) and (not wanted or g.state.value.lower() in wanted)]
        return {"error_code": errors.COORDINATOR_LOAD_IN_PROGRESS if loading else errors.NONE, "groups": groups}

    async def delete_groups(self, body: dict) -> dict:
        """DeleteGroups: only groups without members (NON_EMPTY_GROUP otherwise); their
        offsets and metadata get tombstones."""
        ids = body["groups_names"]
        results = []
        for group_id in ids:
            code = self.owner_error(group_id) if isinstance(group_id, str) and group_id else errors.INVALID_GROUP_ID
            group = self.groups.get(group_id) if not code else None
            if not code and group is None:
                code = errors.GROUP_ID_NOT_FOUND
            elif group is not None and not group.is_(GroupState.EMPTY):
                code = errors.NON_EMPTY_GROUP
            if not code and group is not None:
                try:
                    await self.offsets.delete_group(group_id, group.partition)
                    if self.groups.get(group_id) is group:
                        self._drop(group, errors.GROUP_ID_NOT_FOUND)
                except RaftkaError as error:
                    code = store_error(error)
            results.append({"group_id": group_id, "error_code": code})
        return {"results": results}

    # -- OffsetDelete ------------------------------------------------------------------------------

    async def offset_delete(self, body: dict) -> dict:
        """OffsetDelete (Kafka's handleDeleteOffsets, KIP-496): the group-level error
        (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for
        a group with members that is not a consumer group) or one answer per partition:
        GROUP_SUBSCRIBED_TO_TOPIC for a topic a member subscribes to, else its offset is deleted
        (tombstones written by the offset manager, answered once replicated). A partition
        without a committed offset is answered NONE."""
        try:
            group_id = group_id_of(body)
        except RaftkaError as e:
            return _offset_delete_answer(e.code)
        wanted = [(t["name"], p["partition_index"]) for t in body["topics"] for p in t["partitions"]]
        if len(wanted) > PARTITIONS_PER_DELETE_MAX:
            raise errors.InvalidRequestError(f"{len(wanted)} partitions in one OffsetDelete; at most "
                                             f"{PARTITIONS_PER_DELETE_MAX}")
        code = self.owner_error(group_id)
        if code:
            return _offset_delete_answer(code)
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return _offset_delete_answer(errors.GROUP_ID_NOT_FOUND)
        subscribed: set[str] | None = set()
        if not group.is_(GroupState.EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return _offset_delete_answer(errors.NON_EMPTY_GROUP)
            subscribed = _subscribed_topics(group)
        codes = {tp: errors.GROUP_SUBSCRIBED_TO_TOPIC for tp in wanted if subscribed is None or tp[0] in subscribed}
        eligible = [tp for tp in wanted if tp not in codes]
        codes.update(await self.offsets.delete_offsets(group_id, group.partition, eligible))
        by_topic: dict[str, list[dict]] = {}
        for name, index in wanted:
            by_topic.setdefault(name, []).append({"partition_index": index, "error_code": codes[(name, index)]})
        return _offset_delete_answer(errors.NONE, [{"name": n, "partitions": ps} for n, ps in by_topic.items()])

    # -- offset retention (the rule and the records are the offset manager's) --------------------

    async def maintain(self) -> None:
        """Offset retention for every group this broker serves (OffsetManager.retain): offsets of
        groups empty for longer than offsets.retention.minutes expire (the group is dropped), live
        records are written again before the topic's time retention could delete them."""
        wall = self.wall()  # one time for the pass: no group's verdict depends on how long the writes before it took
        for group in list(self.groups.values()):
            if group.is_(GroupState.DEAD) or self.owner_error(group.group_id):
                continue
            view = RetentionView(
                group.group_id, group.partition,
                empty_since_ms=group.state_timestamp_ms if group.is_(GroupState.EMPTY) else None,
                metadata_written_ms=group.metadata_written_ms,
                metadata_record=(partial(_metadata_record, group, group.state_timestamp_ms)
                                 if group.members or group.generation_id else None))
            retained = await self.offsets.retain(view, wall)
            if retained.expired:
                if self.groups.get(group.group_id) is group:
                    self._drop(group, errors.GROUP_ID_NOT_FOUND)
            elif retained.rewritten_ms is not None:
                group.metadata_written_ms = retained.rewritten_ms

    # -- for /metrics and the lag figures -------------------------------------------------------

    def loaded_groups(self) -> list[Group]:
        """Groups of loaded partitions."""
        return [g for g in self.groups.values() if not g.is_(GroupState.DEAD)
                and (load := self.partitions.get(g.partition)) is not None and load.loaded]


def _metadata_record(group: Group, stamp_ms: int) -> tuple[bytes, bytes]:
    """The group's metadata record, ``stamp_ms`` as its state timestamp."""
    return group_key(group.group_id), group_value(group.metadata_value(stamp_ms))


def _offset_delete_answer(code: int, topics: list[dict] | None = None) -> dict:
    return {"error_code": code, "throttle_time_ms": 0, "topics": topics or []}


def _subscribed_topics(group: Group) -> set[str] | None:
    """The topics the members of a consumer group subscribe to, read from the metadata of every
    protocol (assignor) they offer, so a member that joined since the last choice counts too; None
    when one cannot be read: then every topic counts as subscribed, so no offset a member may use
    is deleted."""
    topics: set[str] = set()
    for member in group.members.values():
        for _name, metadata in member.protocols:
            try:
                topics.update(decode_subscription(metadata)[1]["topics"])
            except ConsumerProtocolError as error:
                log.info("group %s: member %s: %s; every topic counts as subscribed", group.group_id,
                         member.member_id, error.message)
                return None
    return topics


def _metadata_or_empty(member: Member, protocol: str) -> bytes:
    try:
        return member.metadata_for(protocol) if protocol else b""
    except KeyError:
        return b""
