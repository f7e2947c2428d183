"""The replication throttle of a reassignment (Kafka's ReplicationQuotaManager, as a token bucket).

Each broker has two quotas, each a rate in bytes per second read from its dynamic broker configs
as it sees them (its own override, else the cluster-wide one; ``MetadataView.dynamic_config``),
re-read at every metadata update:

    quota      rate key                              bytes counted
    leader     leader.replication.throttled.rate     records this broker, as leader, answers followers
    follower   follower.replication.throttled.rate   records this broker, as follower, fetches

Only the bytes of *throttled replicas* count, and only those can be held back. Which replicas are
throttled is a pair of topic configs, ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas``: "partition:broker,..." or "*" (every replica of the
topic); a broker throttles partition p on its side when "p:<its id>" (or "*") is listed.
``raftka reassign --execute --throttle RATE`` lists the old replicas of each moving partition as
leader replicas and the new ones as follower replicas, and sets both rates on every broker of the
move; ``--verify`` removes all of it once the move is done.

As in Kafka, a throttled replica that is in the ISR is never held back (its bytes still count):
the throttle slows the copy of a replica catching up, never the replication acks=all waits for.
While a quota is exceeded, the follower leaves its throttled out-of-ISR partitions out of its
fetches (broker/replica_fetcher.py) and the leader answers them no records
(broker/replica_manager.py); every other partition keeps flowing in the same fetches.

The bucket holds at most ``rate * BURST_S`` bytes and starts full. Bytes are counted after they
are read, so one read may take it below zero: the debt is waited out before the next throttled
read. Over any span t the throttled bytes stay below ``rate * t`` + the bucket + one read (a
partition's ``replica.fetch.max.bytes``). A rate of 0 holds throttled replicas back entirely; no
rate (Kafka's default, Long.MAX_VALUE) is no throttle.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Final, Iterable

from raftka.common.configs import QUOTA_BYTES_PER_SECOND_DEFAULT

TP = tuple[str, int]

LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"
ALL_REPLICAS: Final = "*"
BURST_S: Final = 1.0  # the bucket holds this many seconds of the rate
DELAY_S_MAX: Final = 1.0  # a caller waiting for the quota looks again at least this often (the rate may change)


class ReplicationQuota:
    """One quota of a broker (module docstring): its rate, its bucket and its throttled replicas.
    ``clock``: seconds, monotonic."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, burst_s: float = BURST_S) -> None:
        self.clock = clock
        self.burst_s = burst_s
        self.rate: int | None = None  # bytes per second; None: no limit
        self.tokens = 0.0
        self._refilled_at = clock()
        # The partitions this broker throttles on this quota's side (the replica manager keeps it
        # from the topic configs): a set, so that an unthrottled partition costs one lookup.
        self.throttled: set[TP] = set()
        self.bytes_total = 0  # bytes of throttled replicas counted, ever
        self.held_back_total = 0  # throttled partitions left out of a fetch or answered no records, ever

    @property
    def capacity(self) -> float:
        return 0.0 if self.rate is None else self.rate * self.burst_s

    def set_rate(self, rate: Any) -> None:
        """The configured rate (an int, None or Kafka's Long.MAX_VALUE: no limit). A new limit
        starts with a full bucket; a changed one keeps what the bucket holds, up to its new size."""
        new = None if rate is None or int(rate) >= QUOTA_BYTES_PER_SECOND_DEFAULT else max(0, int(rate))
        if new == self.rate:
            return
        self._refill()
        full = self.rate is None
        self.rate = new
        if new is not None:
            self.tokens = self.capacity if full else min(self.tokens, self.capacity)
            self._refilled_at = self.clock()

    def _refill(self) -> None:
        now = self.clock()
        if self.rate is not None:
            self.tokens = min(self.capacity, self.tokens + (now - self._refilled_at) * self.rate)
        self._refilled_at = now

    def is_exceeded(self) -> bool:
        """Whether throttled replicas out of the ISR are held back now (the bucket is empty)."""
        if self.rate is None:
            return False
        self._refill()
        return self.tokens <= 0

    def record(self, size: int) -> None:
        """``size`` bytes of a throttled replica were read."""
        if size <= 0:
            return
        self.bytes_total += size
        if self.rate is not None:
            self._refill()
            self.tokens -= size

    def delay_s(self) -> float:
        """How long until the bucket holds a byte again (0 when it does), at most DELAY_S_MAX."""
        if not self.is_exceeded():
            return 0.0
        if not self.rate:
            return DELAY_S_MAX
        return min(DELAY_S_MAX, (1 - self.tokens) / self.rate)

    def mark(self, tp: TP, throttled: bool) -> None:
        """Whether ``tp`` is throttled here (from its topic's config)."""
        if throttled:
            self.throttled.add(tp)
        else:
            self.throttled.discard(tp)


def listed_partitions(value: Any, broker_id: int) -> frozenset[int] | str:
    """The partitions a ``*.replication.throttled.replicas`` value lists on ``broker_id``, or
    ALL_REPLICAS for "*". ``value``: the typed config (a list of "partition:broker" items), its
    text ("0:1,1:2"), or None (nothing throttled). Items that are not "partition:broker" are
    skipped (the controller refuses them: common/configs.py)."""
    if value is None:
        return frozenset()
    items: Iterable[str] = value.split(",") if isinstance(value, str) else value
    items = [str(item).strip() for item in items if str(item).strip()]
    if items == [ALL_REPLICAS]:
        return ALL_REPLICAS
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if partition.isdigit() and broker.isdigit() and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


def is_listed(listed: frozenset[int] | str, partition: int) -> bool:
    """Whether ``partition`` is throttled by what ``listed_partitions`` gave."""
    return listed == ALL_REPLICAS or partition in listed
