"""Partition leader elections and ISR upkeep (the active controller's decisions; pure functions).

Given a partition and the set of live (registered, unfenced) brokers, ``target`` says what the
partition should be, in this order of rules:

1. The ISR drops members that are not live, but never becomes empty: when no member is live it
   stays as it is (its members are the only replicas known to hold every committed record).
2. The leader stays while it is live and in the ISR.
3. Otherwise the first replica (in replica order) that is live and in the ISR leads.
4. With none, the partition is offline (leader -1) unless unclean leader election is enabled:
   then the first live replica leads with an ISR of itself (acknowledged records may be lost).
5. Preferred leader: when the first replica is live and in the ISR, it leads (a leader change,
   so the leader epoch moves on and the old leader becomes a follower).

``changes`` turns targets into PartitionChangeRecords that expect the current partition epoch,
so a decision taken on a stale image is refused at replay instead of undoing a newer change.
"""
from __future__ import annotations

from typing import AbstractSet, Callable, Iterable, Iterator

from raftka.raft_meta.metadata.image import NO_LEADER, MetadataImage, PartitionRegistration, TopicImage
from raftka.raft_meta.metadata.records import PartitionChangeRecord

UNCLEAN_CONFIG = "unclean.leader.election.enable"


def target(partition: PartitionRegistration, live: AbstractSet[int], unclean: bool,
           preferred: bool = True) -> tuple[int, tuple[int, ...]]:
    """(leader, isr) the partition should have; see the module docstring for the rules."""
    isr = tuple(b for b in partition.isr if b in live) or partition.isr
    leader = partition.leader
    if leader == NO_LEADER or leader not in live or leader not in isr:
        candidates = [b for b in partition.replicas if b in isr and b in live]
        if candidates:
            leader = candidates[0]
        elif unclean and (alive := [b for b in partition.replicas if b in live]):
            leader, isr = alive[0], (alive[0],)
        else:
            leader = NO_LEADER
    if preferred and partition.replicas[0] in live and partition.replicas[0] in isr:
        leader = partition.replicas[0]
    return leader, isr


def unclean_enabled(topic: TopicImage, default: bool) -> bool:
    """The topic's unclean.leader.election.enable, else the controllers' default."""
    value = topic.configs.get(UNCLEAN_CONFIG)
    return default if value is None else bool(value)


def changes(image: MetadataImage, live: AbstractSet[int], unclean_default: bool, *,
            involving: Callable[[PartitionRegistration], bool] | None = None,
            preferred: bool = True, limit: int | None = None,
            topics: Iterable[str] | None = None) -> Iterator[PartitionChangeRecord]:
    """Partition changes that bring the partitions of ``image`` to their ``target``, given the
    live brokers ``live`` (which may differ from the image's: e.g. the image minus a broker
    being fenced). ``involving`` limits the partitions looked at, ``topics`` the topics (None:
    all; names not in the image are skipped); at most ``limit`` changes."""
    count = 0
    for name in sorted(image.topics if topics is None else topics):
        topic = image.topics.get(name)
        if topic is None:
            continue
        unclean = unclean_enabled(topic, unclean_default)
        for index, partition in enumerate(topic.partitions):
            if involving is not None and not involving(partition):
                continue
            leader, isr = target(partition, live, unclean, preferred)
            if leader == partition.leader and isr == partition.isr:
                continue
            yield PartitionChangeRecord(
                topic=name, topic_id=topic.topic_id, partition=index,
                expected_partition_epoch=partition.partition_epoch,
                leader=None if leader == partition.leader else leader,
                isr=None if isr == partition.isr else isr)
            count += 1
            if limit is not None and count >= limit:
                return


def involves(broker_id: int) -> Callable[[PartitionRegistration], bool]:
    """Partitions that ``broker_id`` leads or is in the ISR of."""
    return lambda p: p.leader == broker_id or broker_id in p.isr
