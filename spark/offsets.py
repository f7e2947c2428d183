"""Offset arithmetic for the `raftka` data source: the JSON form of streaming offsets, the
``maxOffsetsPerTrigger`` share per partition, the ``minOffsetsPerTrigger`` wait, and splitting
ranges for ``minPartitions``.

Pure functions on plain data, unit-tested without Spark.

Streaming offsets travel through Spark's checkpoint as JSON, in the same shape as Spark's Kafka
source: ``{"topic": {"0": 42, "1": 17}}`` - the next offset to read per partition. JSON object
keys are strings, so partition numbers come back as strings and are converted here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from raftka.client import TopicPartition


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{TopicPartition: offset} -> ``{"topic": {"0": offset}}`` (sorted, so equal offsets give
    equal JSON)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json(offsets: Mapping[str, Mapping[str, int]] | None) -> dict[TopicPartition, int]:
    """The inverse of ``to_json`` (accepts int or string partition keys)."""
    out: dict[TopicPartition, int] = {}
    for topic, parts in (offsets or {}).items():
        for part, offset in parts.items():
            out[TopicPartition(topic, int(part))] = int(offset)
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_records: int) -> dict[TopicPartition, int]:
    """End offsets reading at most ``max_records`` past ``start`` in all, shared among partitions
    in proportion to what each has waiting (largest remainders get the leftover records, so the
    total is exactly ``min(max_records, waiting)``). Partitions missing from ``start`` keep their
    ``latest`` offset (they are new: their first batch is empty, see the stream reader)."""
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")
    waiting = {tp: max(0, latest[tp] - start[tp]) for tp in latest if tp in start}
    total = sum(waiting.values())
    end = dict(latest)
    for tp in waiting:
        end[tp] = max(start[tp], latest[tp]) if total <= max_records else start[tp]
    if total <= max_records:
        return end
    shares: dict[TopicPartition, int] = {}
    remainders: list[tuple[float, TopicPartition]] = []
    for tp, size in waiting.items():
        exact = max_records * size / total
        shares[tp] = int(exact)
        remainders.append((exact - int(exact), tp))
    left = max_records - sum(shares.values())
    for _, tp in sorted(remainders, key=lambda item: (-item[0], item[1]))[:left]:
        shares[tp] += 1
    for tp, share in shares.items():
        end[tp] = start[tp] + min(share, waiting[tp])
    return end


def hold_back(waiting: int, min_records: int, since_last_batch_ms: float | None, max_delay_ms: int) -> bool:
    """minOffsetsPerTrigger with maxTriggerDelay, as spark-sql-kafka decides it: skip this trigger
    while fewer than ``min_records`` wait, unless ``max_delay_ms`` passed since the last batch went
    ahead (``None``: none has yet, so the query's first trigger never waits)."""
    if since_last_batch_ms is None or since_last_batch_ms >= max_delay_ms:
        return False
    return waiting < min_records


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Drop empty ranges; with ``min_partitions`` larger than the number of ranges, split the
    large ones (each in proportion to its share of all records, into near-equal parts) so there
    are at least about ``min_partitions`` tasks. Order: by topic, partition, start."""
    ranges = sorted((r for r in ranges if r.size > 0), key=lambda r: (r.topic, r.partition, r.start))
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, -(-r.size * min_partitions // total)))  # ceil, at most one per record
        for i in range(parts):
            lo = r.start + r.size * i // parts
            hi = r.start + r.size * (i + 1) // parts
            if hi > lo:
                out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out
