"""One consumer group as its coordinator holds it: members, generation, state. (Its committed
offsets are the offset manager's: offsets.py.)

States and the legal moves (Kafka's GroupMetadata; ``transition_to`` refuses any other move):

| state | meaning | entered from |
|---|---|---|
| Empty | no members (committed offsets may exist) | PreparingRebalance (the last member left or nobody rejoined) |
| PreparingRebalance | waiting for every member to (re)send JoinGroup, up to the rebalance timeout | Empty, Stable, CompletingRebalance |
| CompletingRebalance | joined; waiting for the leader's SyncGroup with the assignment | PreparingRebalance |
| Stable | every member has its assignment; heartbeats keep members in | CompletingRebalance |
| Dead | deleted, or unloaded because this broker stopped leading its partition | any state |

A move to PreparingRebalance happens when a member joins, leaves, is expired, or changes its
subscription (or the leader rejoins). The generation goes up by one each time a rebalance
completes with members (and also when it completes with none: the group is then Empty).

``group_id_of`` and ``optional_str`` check the request fields both the coordinator and the
offset manager read.
"""
from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any

from raftka.common import errors

GROUP_ID_CHARS_MAX = 255


class GroupState(enum.Enum):
    """Kafka's group states (names as ListGroups/DescribeGroups show them)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.EMPTY, GroupState.STABLE,
                                               GroupState.COMPLETING_REBALANCE}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupTransition(AssertionError):
    """A programmer error: a move the state table does not allow."""


def group_id_of(body: dict) -> str:
    """A request's ``group_id``; INVALID_GROUP_ID unless a non-empty string of at most
    GROUP_ID_CHARS_MAX characters."""
    group_id = body.get("group_id")
    if not isinstance(group_id, str) or not group_id or len(group_id) > GROUP_ID_CHARS_MAX:
        raise errors.for_code(errors.INVALID_GROUP_ID)(
            f"group_id must be a non-empty string of at most {GROUP_ID_CHARS_MAX} characters")
    return group_id


def optional_str(value: Any) -> str | None:
    """A request's optional string field (``group_instance_id``): None when absent or empty."""
    return value or None  # declared a nullable string: checked at the boundary


@dataclass
class Member:
    """One member: who it is, its timeouts, the protocols it offered, its assignment, and the
    answers it is waiting for (a JoinGroup or a SyncGroup held until the rebalance gets there)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    heartbeat_deadline_ms: float = 0.0
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        """A JoinGroup of this member is held until the rebalance completes."""
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        """A SyncGroup of this member is held until the leader's assignment is stored."""
        return self.sync_future is not None and not self.sync_future.done()

    def metadata_for(self, protocol: str) -> bytes:
        """The subscription this member offered for ``protocol``."""
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        """True when ``protocols`` are exactly the ones this member offered before."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]


@dataclass
class Group:
    """A group's state (see the module table)."""

    group_id: str
    partition: int  # its __consumer_offsets partition
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    static_members: dict[str, str] = field(default_factory=dict)  # group_instance_id -> member_id
    pending_members: dict[str, float] = field(default_factory=dict)  # MEMBER_ID_REQUIRED ids -> expiry (ms)
    rebalance_deadline_ms: float = 0.0
    initial_delay_until_ms: float = 0.0  # an empty group's first rebalance waits for more members
    rebalance_started_ms: float = 0.0
    state_timestamp_ms: int = 0  # wall clock (ms) of the last state change, for offset expiry
    rebalances: int = 0
    metadata_written_ms: int = 0  # wall clock of its last group metadata record (rewritten before retention)
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # held heartbeats wake on rebalances

    # -- state -------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        """True when the group is in ``state``."""
        return self.state is state

    def transition_to(self, state: GroupState, wall_ms: int) -> None:
        """Move to ``state``; IllegalGroupTransition when the table forbids it."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalGroupTransition(f"group {self.group_id}: {self.state.value} -> {state.value} is not a "
                                         "legal move")
        self.state = state
        self.state_timestamp_ms = wall_ms
        self.wake_heartbeats()

    def wake_heartbeats(self) -> None:
        """Answer every held Heartbeat now (the group changed)."""
        event, self.changed = self.changed, asyncio.Event()
        event.set()

    # -- members -----------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        """Add a member; the first one leads until the next rebalance picks otherwise."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        """Remove a member (and its static mapping); a new leader is picked if it led."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, new_member_id: str) -> Member:
        """A static member came back with a new member id: it keeps its place and assignment."""
        old_id = self.static_members[instance_id]
        member = self.members.pop(old_id)
        for future in (member.join_future, member.sync_future):
            if future is not None and not future.done():
                future.set_result({"error_code": errors.FENCED_INSTANCE_ID,
                                   "error_message": "replaced by a new member with the same group_instance_id"})
        member.join_future = member.sync_future = None
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_id:
            self.leader_id = new_member_id
        return member

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """True when ``instance_id`` belongs to a member other than ``member_id`` (a zombie)."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    @property
    def all_members_joined(self) -> bool:
        """Every member has a JoinGroup held, and nobody is still fetching a member id."""
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    @property
    def max_rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout among the members (how long a rebalance may wait)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ---------------------------------------------------------------------------

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Can a member offering these protocols join? (Same protocol type, one protocol in
        common with everyone.)"""
        if not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return bool(self.candidate_protocols() & names)

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those everyone supports;
        the most votes win (ties: the first member's preference order)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: no protocol in common")
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values()))
        order = [name for name, _ in first.protocols if name in candidates]
        return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))

    # -- what is stored and shown ------------------------------------------------------------

    def metadata_value(self, wall_ms: int) -> dict[str, Any]:
        """The group metadata record value: GroupMetadataValue's fields (records.py)."""
        protocol = self.protocol_name
        return {"protocol_type": self.protocol_type or "", "generation": self.generation_id, "protocol": protocol,
                "leader": self.leader_id, "current_state_timestamp": wall_ms,
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "rebalance_timeout": m.rebalance_timeout_ms, "session_timeout": m.session_timeout_ms,
                             "subscription": m.metadata_for(protocol) if protocol else b"",
                             "assignment": m.assignment}
                            for m in self.members.values()]}

    @classmethod
    def from_value(cls, group_id: str, partition: int, value: dict, now_ms: float) -> "Group":
        """A group loaded from its last metadata record (a decoded GroupMetadataValue): Stable
        with its members (their session timers start now), or Empty without."""
        group = cls(group_id, partition)
        group.generation_id = value["generation"]
        group.protocol_type = value["protocol_type"] or None  # Kafka writes "" for none
        group.protocol_name = value["protocol"]
        group.state_timestamp_ms = max(0, value["current_state_timestamp"])
        for raw in value["members"]:
            protocols = [(group.protocol_name, raw["subscription"])] if group.protocol_name else []
            # A v0 record has no rebalance timeout: Kafka uses the session timeout then.
            rebalance_ms = raw["rebalance_timeout"] if raw["rebalance_timeout"] >= 0 else raw["session_timeout"]
            member = Member(raw["member_id"], raw["group_instance_id"], raw["client_id"], raw["client_host"],
                            raw["session_timeout"], rebalance_ms, group.protocol_type or "", protocols,
                            raw["assignment"])
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            group.add(member)
        group.leader_id = value["leader"] if value["leader"] in group.members else group.leader_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group
