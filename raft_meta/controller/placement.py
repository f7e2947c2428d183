"""Replica placement for new topics (the active controller's decision; pure functions).

Round-robin over the unfenced brokers: partition i gets the rf brokers starting at position
(start + i) of the broker list, so replicas spread evenly and the first replica (the preferred
leader, which leads at creation) rotates. ``start`` is the broker that leads fewest partitions
now, so leadership stays balanced across topics.

Rack-aware when any broker has a rack: the broker list alternates racks (a1, b1, c1, a2, b2,
...; brokers without a rack form one rack of their own), so consecutive replicas of a partition
sit in different racks whenever there are at least rf racks of even size.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

from raftka.raft_meta.metadata.image import BrokerRegistration, MetadataImage


def leader_counts(image: MetadataImage) -> dict[int, int]:
    """How many partitions each unfenced broker leads now."""
    counts = {b: 0 for b in image.live_broker_ids()}
    for topic in image.topics.values():
        for partition in topic.partitions:
            if partition.leader in counts:
                counts[partition.leader] += 1
    return counts


def rack_alternated(brokers: Iterable[BrokerRegistration]) -> list[int]:
    """Broker ids ordered so that racks alternate (plain ascending ids when no rack is set)."""
    brokers = sorted(brokers, key=lambda b: b.broker_id)
    if all(b.rack is None for b in brokers):
        return [b.broker_id for b in brokers]
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker in brokers:
        by_rack[broker.rack or ""].append(broker.broker_id)
    racks = [by_rack[r] for r in sorted(by_rack)]
    order = []
    for i in range(max(len(r) for r in racks)):
        order.extend(r[i] for r in racks if i < len(r))
    return order


def place_replicas(brokers: Iterable[BrokerRegistration], led: Mapping[int, int], partitions: int,
                   replication_factor: int) -> list[tuple[int, ...]]:
    """Replica lists for ``partitions`` new partitions over ``brokers`` (the unfenced ones).

    ``led``: partitions each broker leads now (updated by the caller as it places more).
    The caller checks 1 <= replication_factor <= number of brokers.
    """
    order = rack_alternated(brokers)
    assert 1 <= replication_factor <= len(order), "checked by the caller"
    first = min(order, key=lambda b: (led.get(b, 0), b))
    start = order.index(first)
    n = len(order)
    return [tuple(order[(start + i + j) % n] for j in range(replication_factor)) for i in range(partitions)]
