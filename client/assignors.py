"""Partition assignors (the group leader runs one) and the consumer protocol they speak.

The coordinator never reads what members say about their subscriptions: it hands every
member's bytes to the leader, the leader's assignor splits the partitions, and the coordinator
hands each member its bytes back. Both are Kafka's consumer protocol (``protocol_type =
"consumer"``; common/messages/consumer_protocol.py declares them), so Raftka consumers share a
group with Kafka's clients:

- subscription: ConsumerProtocolSubscription, sent at v3 as Kafka's own consumer sends it
  (topics, user_data, owned_partitions, generation_id, rack_id); v0-3 are read, a newer
  version with the v3 layout.
- assignment: ConsumerProtocolAssignment, sent at v3 (assigned_partitions, user_data); every
  version reads the same.

Assignors, by protocol name (Kafka's):

- ``range``: per topic, the sorted members get consecutive ranges (the first ones one extra).
- ``roundrobin``: all partitions in (topic, partition) order dealt to the sorted members in turn,
  skipping members not subscribed to a partition's topic.
- ``cooperative-sticky`` (the default): a balanced assignment that moves as few partitions as
  possible from their current owner; a partition that must move is first revoked by its owner
  and only assigned in the follow-up rebalance (KIP-429), so the rest of the group keeps
  consuming during a rebalance.

Members are sorted by ``group_instance_id`` when they have one, else by member id, so static
members keep their partitions across restarts with the eager assignors too.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, NamedTuple, Sequence

from raftka.client.structs import TopicPartition
from raftka.common.messages import consumer_protocol as wire

EAGER = "eager"
COOPERATIVE = "cooperative"
# What this client writes: the newest versions (every field it fills exists there).
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3


class Subscription(NamedTuple):
    """What a member tells the leader: its topics, what it owns now, and from which generation."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = []
    generation_id: int = -1
    group_instance_id: str | None = None  # filled in from the JoinGroup answer, not encoded
    rack_id: str | None = None


class Assignment(NamedTuple):
    """What a member gets: its partitions (and assignor data)."""

    partitions: list[TopicPartition]
    user_data: bytes | None = None


def _grouped(partitions: Iterable[TopicPartition]) -> list[dict]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return [{"topic": topic, "partitions": sorted(parts)} for topic, parts in sorted(by_topic.items())]


def _ungrouped(entries: list[dict]) -> list[TopicPartition]:
    return [TopicPartition(e["topic"], p) for e in entries for p in e["partitions"]]


def encode_subscription(subscription: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """Subscription -> the bytes a member sends in JoinGroup (ConsumerProtocolSubscription at
    ``version``; an older one drops the fields it lacks)."""
    return wire.encode_versioned(wire.CONSUMER_PROTOCOL_SUBSCRIPTION, version, {
        "topics": sorted(subscription.topics), "user_data": subscription.user_data,
        "owned_partitions": _grouped(subscription.owned_partitions),
        "generation_id": subscription.generation_id, "rack_id": subscription.rack_id})


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    """The bytes of a JoinGroup member entry -> Subscription; empty bytes subscribe to nothing.
    ConsumerProtocolError (a ValueError) when unreadable."""
    if not data:
        return Subscription([], group_instance_id=group_instance_id)
    _version, body = wire.decode_subscription(data)
    return Subscription(body["topics"], body["user_data"], _ungrouped(body["owned_partitions"]),
                        body["generation_id"], group_instance_id, body["rack_id"])


def encode_assignment(assignment: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    """Assignment -> the bytes the leader sends in SyncGroup (ConsumerProtocolAssignment)."""
    return wire.encode_versioned(wire.CONSUMER_PROTOCOL_ASSIGNMENT, version, {
        "assigned_partitions": _grouped(assignment.partitions), "user_data": assignment.user_data})


def decode_assignment(data: bytes) -> Assignment:
    """SyncGroup's bytes -> Assignment (empty bytes: nothing assigned, as a failed SyncGroup
    leaves it). ConsumerProtocolError (a ValueError) when unreadable."""
    if not data:
        return Assignment([])
    _version, body = wire.decode_assignment(data)
    return Assignment(_ungrouped(body["assigned_partitions"]), body["user_data"])


def _sort_key(member_id: str, subscription: Subscription) -> tuple[int, str]:
    if subscription.group_instance_id is not None:
        return (0, subscription.group_instance_id)
    return (1, member_id)


def _sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted(subscriptions, key=lambda m: _sort_key(m, subscriptions[m]))


class AbstractPartitionAssignor:
    """An assignor: ``name`` (the JoinGroup protocol name), the rebalance protocols it
    supports, and ``assign``. Subclass it for a custom assignor."""

    name = "abstract"
    supported_protocols: tuple[str, ...] = (EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        """{member_id: Assignment}: every partition of a subscribed topic to exactly one member
        subscribed to it. ``partitions_per_topic`` holds the topics that exist."""
        raise NotImplementedError

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None:
        """Extra bytes for this member's subscription (None by default)."""
        return None

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        """Called on every member with its assignment (for assignors that keep state)."""


class RangePartitionAssignor(AbstractPartitionAssignor):
    """Kafka's RangeAssignor (see the module docstring)."""

    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members = _sorted_members(subscriptions)
        for topic in sorted(partitions_per_topic):
            subscribers = [m for m in members if topic in subscriptions[m].topics]
            if not subscribers:
                continue
            count = partitions_per_topic[topic]
            each, extra = divmod(count, len(subscribers))
            start = 0
            for i, member in enumerate(subscribers):
                length = each + (1 if i < extra else 0)
                out[member] += [TopicPartition(topic, p) for p in range(start, start + length)]
                start += length
        return {m: Assignment(parts) for m, parts in out.items()}


class RoundRobinPartitionAssignor(AbstractPartitionAssignor):
    """Kafka's RoundRobinAssignor (see the module docstring)."""

    name = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members = _sorted_members(subscriptions)
        if not members:
            return {}
        turn = 0
        for topic in sorted(partitions_per_topic):
            for p in range(partitions_per_topic[topic]):
                for _ in range(len(members)):
                    member = members[turn % len(members)]
                    turn += 1
                    if topic in subscriptions[member].topics:
                        out[member].append(TopicPartition(topic, p))
                        break
        return {m: Assignment(parts) for m, parts in out.items()}


def sticky_assignment(partitions_per_topic: Mapping[str, int],
                      subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
    """A balanced assignment that keeps as many partitions with their current owner as it can.

    1. Each member keeps the partitions it owns that still exist and that it is still
       subscribed to; a partition claimed by two members stays with the one of the newer
       generation (the other claim is stale).
    2. Unowned partitions go, one by one, to the eligible member with the fewest partitions.
    3. While some partition could move from a member with more partitions to an eligible
       member with at least two fewer, move one (from the most loaded member first).

    With every member subscribed to the same topics the result is balanced (sizes differ by at
    most one) and only partitions of members above their fair share move.
    """
    members = _sorted_members(subscriptions)
    order = {m: i for i, m in enumerate(members)}
    valid = {TopicPartition(t, p) for t, n in partitions_per_topic.items() for p in range(n)}
    eligible: dict[str, set[str]] = {t: {m for m in members if t in subscriptions[m].topics}
                                     for t in partitions_per_topic}
    owner: dict[TopicPartition, tuple[int, str]] = {}
    for member in members:
        sub = subscriptions[member]
        for tp in sub.owned_partitions:
            if tp not in valid or member not in eligible.get(tp.topic, ()):
                continue
            claim = (sub.generation_id, member)
            current = owner.get(tp)
            if current is None or claim[0] > current[0]:
                owner[tp] = claim
    assigned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp, (_gen, member) in sorted(owner.items()):
        assigned[member].append(tp)
    for tp in sorted(valid - set(owner)):
        candidates = eligible.get(tp.topic) or set()
        if not candidates:
            continue
        target = min(candidates, key=lambda m: (len(assigned[m]), order[m]))
        assigned[target].append(tp)
    moves_max = len(valid) * max(1, len(members))  # a bound; each move shrinks the imbalance
    for _ in range(moves_max):
        moved = False
        for donor in sorted(members, key=lambda m: (-len(assigned[m]), order[m])):
            for tp in sorted(assigned[donor], reverse=True):
                receivers = [m for m in eligible[tp.topic] if len(assigned[m]) + 1 < len(assigned[donor])]
                if receivers:
                    target = min(receivers, key=lambda m: (len(assigned[m]), order[m]))
                    assigned[donor].remove(tp)
                    assigned[target].append(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return {m: sorted(parts) for m, parts in assigned.items()}


class StickyAssignor(AbstractPartitionAssignor):
    """Kafka's StickyAssignor: the sticky split with the eager protocol (everything revoked
    before each rebalance, then mostly the same partitions back)."""

    name = "sticky"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        return {m: Assignment(p) for m, p in sticky_assignment(partitions_per_topic, subscriptions).items()}


class CooperativeStickyAssignor(AbstractPartitionAssignor):
    """Kafka's CooperativeStickyAssignor (KIP-429): the sticky split, except that a partition
    whose owner changes is left out this round; its owner revokes it and rejoins, and the
    follow-up rebalance gives it to the new owner."""

    name = "cooperative-sticky"
    supported_protocols = (COOPERATIVE, EAGER)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        target = sticky_assignment(partitions_per_topic, subscriptions)
        owned_by: dict[TopicPartition, str] = {}
        newest: dict[TopicPartition, int] = {}
        for member in _sorted_members(subscriptions):  # the same tie-break as sticky_assignment
            sub = subscriptions[member]
            for tp in sub.owned_partitions:
                if tp not in newest or sub.generation_id > newest[tp]:
                    newest[tp] = sub.generation_id
                    owned_by[tp] = member
        out = {}
        for member, parts in target.items():
            kept = [tp for tp in parts if owned_by.get(tp, member) == member]
            out[member] = Assignment(kept)
        return out


ASSIGNORS: dict[str, type[AbstractPartitionAssignor]] = {
    cls.name: cls for cls in (RangePartitionAssignor, RoundRobinPartitionAssignor, StickyAssignor,
                              CooperativeStickyAssignor)}
# Kafka's Java class names, accepted in partition_assignment_strategy too.
ASSIGNORS.update({"RangeAssignor": RangePartitionAssignor, "RoundRobinAssignor": RoundRobinPartitionAssignor,
                  "StickyAssignor": StickyAssignor, "CooperativeStickyAssignor": CooperativeStickyAssignor})


def make_assignors(strategy: object) -> list[AbstractPartitionAssignor]:
    """``partition_assignment_strategy`` (names, classes or instances, or one of them) -> assignors."""
    items = strategy if isinstance(strategy, (list, tuple)) else [strategy]
    out: list[AbstractPartitionAssignor] = []
    for item in items:
        if isinstance(item, str):
            cls = ASSIGNORS.get(item) or ASSIGNORS.get(item.rsplit(".", 1)[-1])
            if cls is None:
                raise ValueError(f"unknown assignor {item!r}; known: {', '.join(sorted(ASSIGNORS))}")
            out.append(cls())
        elif isinstance(item, type) and issubclass(item, AbstractPartitionAssignor):
            out.append(item())
        elif isinstance(item, AbstractPartitionAssignor):
            out.append(item)
        else:
            raise ValueError(f"not an assignor: {item!r}")
    if not out:
        raise ValueError("at least one assignor is needed")
    return out


def rebalance_protocol(assignors: Sequence[AbstractPartitionAssignor]) -> str:
    """COOPERATIVE when every assignor supports it, else EAGER (as Kafka's consumer decides)."""
    return COOPERATIVE if all(COOPERATIVE in a.supported_protocols for a in assignors) else EAGER
