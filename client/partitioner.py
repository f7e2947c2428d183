"""Kafka's default partitioner: murmur2 of the key bytes, sticky partitions for keyless records.

``murmur2`` is the 32-bit MurmurHash2 variant of Kafka's Java client (seed 0x9747b28c), so the
same key lands on the same partition as with Kafka's clients:
``partition = (murmur2(key) & 0x7fffffff) % num_partitions``.
"""
from __future__ import annotations

import random
from typing import Sequence

from raftka.common.records import records_ext

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The hash as Kafka's ``Utils.murmur2`` returns it: a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - (length & 3)
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clears the sign bit (not abs, which differs for MIN_VALUE)."""
    return number & 0x7FFFFFFF


# The C hash when the extension is built (the same function; tests/test_partitioner.py compares).
_murmur2 = records_ext.murmur2 if records_ext is not None else murmur2


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a serialized key."""
    return (_murmur2(key) & 0x7FFFFFFF) % num_partitions  # to_positive, inlined (per record)


class DefaultPartitioner:
    """murmur2 for keyed records; for keyless ones a *sticky* partition per topic, kept until the
    batch it fills is closed (full or sent), so keyless records make few, large batches.

    ``rng`` is injectable so tests can be reproduced from a seed.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def __call__(self, topic: str, key: bytes | None, all_partitions: Sequence[int],
                 available: Sequence[int]) -> int:
        """Pick a partition. ``available`` are those with a leader now (may be empty)."""
        if key is not None:
            return all_partitions[partition_for_key(key, len(all_partitions))]
        return self.sticky_partition(topic, all_partitions, available)

    def sticky_partition(self, topic: str, all_partitions: Sequence[int],
                         available: Sequence[int]) -> int:
        """The current sticky partition of ``topic`` (chosen when there is none)."""
        current = self._sticky.get(topic)
        if current is not None and current in all_partitions:
            return current
        return self._choose(topic, all_partitions, available, None)

    def on_batch_closed(self, topic: str, partition: int, all_partitions: Sequence[int],
                        available: Sequence[int]) -> None:
        """The batch of ``partition`` closed: if it was the sticky one, move to another."""
        if self._sticky.get(topic) == partition:
            self._choose(topic, all_partitions, available, partition)

    def _choose(self, topic: str, all_partitions: Sequence[int], available: Sequence[int],
                previous: int | None) -> int:
        pool = list(available) or list(all_partitions)
        if previous is not None and len(pool) > 1:
            pool = [p for p in pool if p != previous]
        chosen = self._rng.choice(pool)
        self._sticky[topic] = chosen
        return chosen
