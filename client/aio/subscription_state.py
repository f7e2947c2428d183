"""What the asyncio consumer reads: its subscription, its assigned partitions and, per assigned
partition, where it stands (the role of Kafka's SubscriptionState).

No I/O happens here. The consumer (client/aio/consumer.py) changes the subscription and the
assignment; the fetcher (client/aio/fetcher.py) reads the states to build fetches and writes
what the answers teach (high watermark, fetch position, buffered records, errors). Whoever
changes a state so that fetching should react wakes the fetcher itself: this class has no
event loop.

A partition's *position* is the offset of the next record ``poll`` returns; its *fetch
position* the next offset to fetch (ahead of the position by what is buffered). A partition
without a position waits for one: the group's committed offset (``awaiting_committed``) or a
reset (``reset``: EARLIEST / LATEST from ``auto_offset_reset``). Each seek or reset bumps the
partition's *generation*: buffered records and answers to fetches sent before it are dropped.
"""
from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from raftka.client.errors import IllegalStateError, NoOffsetForPartitionError
from raftka.client.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition
from raftka.common import errors

LATEST = -1  # ListOffsets' timestamp for the high watermark
EARLIEST = -2  # ListOffsets' timestamp for the log start offset
RESETS = {"earliest": EARLIEST, "smallest": EARLIEST, "latest": LATEST, "largest": LATEST, "none": None}
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})  # skipped by patterns
# A topic matched by a pattern stays subscribed this long after it vanished from a metadata answer:
# brokers learn new topics at slightly different times, and one lagging answer must not make a
# group member flip its subscription (two needless rebalances).
PATTERN_TOPIC_GRACE_MS = 5000


class FetchedChunk:
    """The records of one fetch answer not yet handed out by ``poll``. Mutable (``poll`` moves
    ``index`` along) and one per answer, not per record."""

    __slots__ = ("generation", "records", "index", "nbytes", "unreleased")

    def __init__(self, generation: int, records: list[ConsumerRecord], nbytes: int) -> None:
        self.generation = generation  # the partition's generation when it was fetched
        self.records = records
        self.index = 0  # the next record to hand out
        self.nbytes = nbytes  # the answer's size
        self.unreleased = nbytes  # of it, still counted against max_partition_fetch_bytes


@dataclass
class PartitionState:
    """What the consumer knows of one assigned partition (module docstring).

    The fetch buffer lives here, not in the fetcher, so that dropping or seeking the partition
    drops its buffered records with it."""

    position: int | None = None
    fetch_position: int | None = None
    reset: int | None = None  # EARLIEST / LATEST pending, or None
    generation: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    paused: bool = False
    retry_at: float = 0.0  # no fetch before this (time.monotonic()); 0: none pending
    failed: BaseException | None = None  # raised by poll until the application seeks
    storage_error_since: float = 0.0  # KAFKA_STORAGE_ERROR answered since (time.monotonic()); 0: not now
    awaiting_committed: bool = False  # group mode: the position comes from the committed offset
    # The leader epoch of the last record fetched (the fetch position's epoch), and the partition's
    # leader epoch the fetch position was last fetched from or checked under (-1: none yet). A
    # newer leader epoch in the metadata means the fetch position is checked against the new
    # leader's log (OffsetsForLeaderEpoch) before the next fetch: an unclean election may have
    # truncated records this consumer already has.
    fetched_epoch: int = -1
    leader_epoch_seen: int = -1
    buffer: deque[FetchedChunk] = field(default_factory=deque)  # fetched, not yet polled
    buffered_bytes: int = 0

    def is_fetchable(self, now: float) -> bool:
        """May a fetch ask for this partition now (the fetcher checks its buffer size itself)?"""
        return (not self.paused and self.fetch_position is not None and self.failed is None
                and self.retry_at <= now)

    def needs_validation(self, leader_epoch: int) -> bool:
        """Must the fetch position be checked with the leader of ``leader_epoch`` first (the
        leader changed since records were fetched)?"""
        return self.fetched_epoch >= 0 and 0 <= self.leader_epoch_seen < leader_epoch

    def reset_to(self, offset: int | None, reset: int | None) -> None:
        """A seek (``offset``) or a pending reset (``reset``): start over from there."""
        self.generation += 1
        self.awaiting_committed = False
        self.buffer.clear()
        self.buffered_bytes = 0
        self.position = self.fetch_position = offset
        self.fetched_epoch = self.leader_epoch_seen = -1  # a new position: nothing fetched to check
        self.reset = reset
        self.failed = None
        self.retry_at = 0.0
        self.storage_error_since = 0.0


class SubscriptionState:
    """The subscription (topics or a pattern, or none), the assigned partitions and their
    states. ``states`` is iterated in fetch and ``poll`` order (``rotate`` moves a partition
    to the end); read it, change it only through the methods."""

    def __init__(self, default_reset: int | None, group_mode: bool, exclude_internal_topics: bool = True) -> None:
        self.default_reset = default_reset  # EARLIEST, LATEST or None ('none')
        self.group_mode = group_mode  # positions start from the group's committed offsets
        self.exclude_internal_topics = exclude_internal_topics
        self.states: dict[TopicPartition, PartitionState] = {}
        self.topics: set[str] | None = None  # subscribed by name
        self.pattern: re.Pattern[str] | None = None  # subscribed by pattern
        self._pattern_topics: dict[str, float] = {}  # matched topic -> when metadata last listed it

    # -- subscription --
    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to these topic names (replacing any pattern)."""
        self.topics = set(topics)
        self.pattern = None

    def subscribe_pattern(self, pattern: str) -> None:
        """Subscribe to the topics matching ``pattern`` (replacing any names)."""
        self.pattern = re.compile(pattern)
        self._pattern_topics = {}
        self.topics = None

    def unsubscribe(self) -> None:
        """No subscription and no partition."""
        self.topics = None
        self.pattern = None
        self.states.clear()

    def has_subscription(self) -> bool:
        """Subscribed by names or by pattern (not assigned by hand, not unsubscribed)."""
        return self.topics is not None or self.pattern is not None

    def subscribed_topics(self, metadata_topics: Mapping[str, Any]) -> list[str]:
        """The topics of the subscription: the named ones, or those of ``metadata_topics`` (the
        cluster metadata's {name: info}) matching the pattern now."""
        if self.pattern is not None:
            skip = INTERNAL_TOPICS if self.exclude_internal_topics else frozenset()
            now = time.monotonic()
            for t, info in metadata_topics.items():
                if info.error_code == errors.NONE and self.pattern.fullmatch(t) and t not in skip:
                    self._pattern_topics[t] = now
            for t, seen in list(self._pattern_topics.items()):
                if now - seen > PATTERN_TOPIC_GRACE_MS / 1000:
                    del self._pattern_topics[t]
            return sorted(self._pattern_topics)
        return sorted(self.topics or ())

    # -- assignment --
    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Exactly these partitions: states of the others are dropped, kept ones keep theirs,
        new ones start without a position."""
        wanted = set(partitions)
        for tp in list(self.states):
            if tp not in wanted:
                del self.states[tp]
        for tp in partitions:
            if tp not in self.states:
                self.states[tp] = self._new_state(tp)

    def change_assignment(self, added: set[TopicPartition], removed: set[TopicPartition]) -> None:
        """The group moved partitions (incrementally): drop the removed, start the added."""
        for tp in removed:
            self.states.pop(tp, None)
        for tp in sorted(added):
            if tp not in self.states:
                self.states[tp] = self._new_state(tp)

    def _new_state(self, tp: TopicPartition) -> PartitionState:
        if self.group_mode:  # the committed offset first, then auto_offset_reset
            return PartitionState(awaiting_committed=True)
        state = PartitionState(reset=self.default_reset)
        if self.default_reset is None:
            state.failed = NoOffsetForPartitionError("no position and auto_offset_reset='none'; seek first",
                                                     topic=tp.topic, partition=tp.partition)
        return state

    def assigned_partitions(self) -> set[TopicPartition]:
        """The partitions assigned now (a copy)."""
        return set(self.states)

    def has_assignment(self) -> bool:
        """At least one partition is assigned."""
        return bool(self.states)

    def state(self, partition: TopicPartition) -> PartitionState:
        """The state of an assigned partition; IllegalStateError for any other."""
        tp = TopicPartition(*partition)
        state = self.states.get(tp)
        if state is None:
            raise IllegalStateError(f"partition {tp.topic}-{tp.partition} is not assigned to this consumer")
        return state

    def rotate(self, tp: TopicPartition) -> None:
        """Move ``tp`` to the end of the order, so one busy partition does not starve the
        others across polls."""
        if tp in self.states:
            self.states[tp] = self.states.pop(tp)

    # -- positions --
    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What the application has consumed: the position of every assigned partition that has one."""
        return {tp: OffsetAndMetadata(s.position) for tp, s in self.states.items() if s.position is not None}

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """``offset`` is the next record of ``partition``."""
        self.state(partition).reset_to(offset, None)

    def request_reset(self, partition: TopicPartition, reset: int | None) -> None:
        """Forget the position of ``partition``; it is looked up again with ``reset``
        (EARLIEST or LATEST)."""
        self.state(partition).reset_to(None, reset)

    def needs_reset(self, tp: TopicPartition) -> bool:
        """``tp`` waits for a position from a reset strategy (ListOffsets)."""
        state = self.states.get(tp)
        return state is not None and state.position is None and state.reset is not None

    def has_unresolved_positions(self) -> bool:
        """Some partition waits for a position a lookup can give (a reset or the committed offset)."""
        return any(s.position is None and (s.reset is not None or s.awaiting_committed)
                   for s in self.states.values())

    def pending_resets(self, tps: Sequence[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """{tp: EARLIEST or LATEST} of the partitions (of ``tps``, or all) waiting for a reset."""
        return {tp: s.reset for tp, s in self.states.items()
                if s.position is None and s.reset is not None and (tps is None or tp in tps)}

    def set_reset_position(self, tp: TopicPartition, generation: int, offset: int) -> None:
        """A reset's lookup found ``offset``; ignored when the partition was reassigned, sought
        or positioned since (its generation then differs or it has a position)."""
        state = self.states.get(tp)
        if state is None or state.generation != generation or state.position is not None:
            return
        state.position = state.fetch_position = offset
        state.reset = None

    def awaiting_committed(self, tps: Sequence[TopicPartition] | None = None) -> list[TopicPartition]:
        """The partitions (of ``tps``, or all) whose position waits for the committed offset."""
        return [tp for tp, s in self.states.items()
                if s.awaiting_committed and s.position is None and (tps is None or tp in tps)]

    def set_committed_position(self, tp: TopicPartition, committed: OffsetAndMetadata | None) -> bool:
        """The group's committed offset of ``tp`` (None: nothing committed, so the reset
        strategy applies). True when that leaves the partition failed (auto_offset_reset='none'),
        which ``poll`` should hear of. Ignored when revoked or sought meanwhile."""
        state = self.states.get(tp)
        if state is None or not state.awaiting_committed or state.position is not None:
            return False
        state.awaiting_committed = False
        if committed is not None:
            state.position = state.fetch_position = committed.offset
            return False
        state.reset = self.default_reset
        if self.default_reset is None:
            state.failed = NoOffsetForPartitionError("no committed offset and auto_offset_reset='none'; seek first",
                                                     topic=tp.topic, partition=tp.partition)
            return True
        return False

    def waiting_to_retry(self) -> bool:
        """Something only time will move: a partition without a position or in a fetch backoff,
        or a subscription with no partition yet."""
        return any(s.position is None or s.retry_at for s in self.states.values()) or (
            self.has_subscription() and not self.states)

    # -- pause --
    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching and returning these partitions' records."""
        for tp in partitions:
            self.state(tp).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Undo ``pause``."""
        for tp in partitions:
            self.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {tp for tp, s in self.states.items() if s.paused}

    def highwater(self, partition: TopicPartition) -> int | None:
        """The last high watermark a fetch of ``partition`` brought (None before one)."""
        hw = self.state(partition).high_watermark
        return hw if hw >= 0 else None
