"""Incremental fetch sessions (KIP-227) on the serving side: what a leader remembers of a fetcher
that keeps asking for the same partitions, so that neither its requests nor the answers need to
name the partitions where nothing happened.

A fetcher (a follower broker, or a consumer such as kafka-python) says in each Fetch which session
it means with ``session_id`` and ``session_epoch``:

    session_id  epoch   meaning
    0           -1      a full fetch without a session (every Fetch before v7, librdkafka,
                        aiokafka); the answer's session_id is 0
    0           0       a full fetch that asks for a session: the answer's session_id names it, or is
                        0 when no slot is free (the fetcher then goes on with full fetches)
    X           0       closes session X, then as (0, 0)
    X           -1      closes session X, then as (0, -1)
    X           E > 0   an incremental fetch in session X, which must expect epoch E. Unknown X (or
                        X made by another fetcher): FETCH_SESSION_ID_NOT_FOUND (70); another
                        epoch: INVALID_FETCH_SESSION_EPOCH (71), the session left as it was. Both
                        are the whole answer (top-level error, no partitions): send a full fetch.

A session starts at epoch 1 and expects the next epoch (wrapping from 2^31-1 to 1) after each
incremental fetch. An incremental request names only partitions that are new to the session or
whose entry changed (fetch offset, leader epoch, ...): the session keeps the last entry of every
other one. ``forgotten_topics_data`` drops partitions. Its answer carries only the partitions with
news: records, a diverging epoch, a high watermark / last stable offset / log start offset other
than the one last sent, or an error (a new one, or for a partition the request named). A partition
it leaves out is unchanged for the fetcher.

The leader does no work for a quiet partition either: each partition tells the sessions that hold
it when something a fetch answer shows may have changed (Partition.watch: appends, high watermark
moves, DeleteRecords, role changes), and a session keeps those in ``pending``. An incremental fetch
reads the partitions it names and the pending ones, and its long poll waits on the session alone:
a follower's session wakes at new records, a consumer's at a high watermark move (as the
sessionless long poll of ReplicaManager.fetch). A partition not hosted here when it was read
(its answer an error) is read again once the replica manager hosts it (``hosted``). A log start
moved by retention alone is not news (the follower's own retention follows).

Fairness: a session reads its partitions in its own order, and an answer that carries records of
a partition moves it to the end of that order (as Kafka's session does), so when ``max_bytes``
runs out the partitions that did not fit are read first at the next fetch. As in Kafka, only the
first partition that has records may go beyond the budget (by at most one batch); after the
budget is spent, a partition with records to give answers none and stays in ``pending``, so the
next fetch reads it even if nothing new arrives and the fetcher does not name it.

A fetcher that is done (a consumer at close) ends its session with a full fetch naming it at
epoch -1 (FINAL_EPOCH) and no partitions: the session is removed, and the answer (session_id 0)
creates none.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's name and
default, 1000). When it is full, a new session takes the slot of (as Kafka's FetchSessionCache):
1. the least recently used session idle for FETCH_SESSION_EVICTION_MS (Kafka's
   min.incremental.fetch.session.eviction.ms), else
2. the consumer session with the fewest partitions (the least recently used among equals), when
   the new session is a follower's or has more partitions; a follower's session is never taken
   by another before it is idle that long.
Without a slot the fetch is served as a full one without a session (session_id 0). A follower
fetches from a leader with one fetcher (broker/replica_fetcher.py), so its new session replaces
any other of its sessions here: those were left by a fetcher that is gone (a restart).
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Final, Iterable

from raftka.common import errors

TP = tuple[str, int]

INVALID_SESSION_ID: Final = 0  # "no session", in requests and answers
FINAL_EPOCH: Final = -1  # a full fetch that wants no session (and closes the one it names)
INITIAL_EPOCH: Final = 0  # a full fetch that asks for a session (and closes the one it names)
EPOCH_MAX: Final = 0x7FFFFFFF  # after it, epoch 1 again
UNREAD: Final[Any] = object()  # CachedPartition.partition before the first read
FETCH_SESSION_EVICTION_MS: Final = 120_000  # a session unused this long may lose its slot to a new one
SESSION_ID_ATTEMPTS_MAX: Final = 100  # random ids tried before giving up (a nearly full id space)


def next_epoch(epoch: int) -> int:
    """The epoch a session expects after ``epoch``: 1 after the largest, never 0 or -1."""
    return 1 if epoch >= EPOCH_MAX else epoch + 1


class CachedPartition:
    """One partition of a session: the fetcher's last entry for it (Kafka's FetchPartition) and
    what the last answer that carried it said."""
    __slots__ = ("request", "order", "partition", "high_watermark", "last_stable_offset", "log_start_offset",
                 "error_code")

    def __init__(self, request: dict, order: int) -> None:
        self.request = request
        self.order = order  # its place in the session's read order (FetchSession.in_order)
        self.partition: Any = UNREAD  # the Partition watched for news (None: not hosted when last read)
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.error_code = errors.NONE

    def is_news(self, answer: dict, named: bool) -> bool:
        """Whether ``answer`` (this partition's, just read) tells the fetcher something the last
        answer did not; ``named``: the request named the partition."""
        if answer["records"] or answer["diverging_epoch"]:
            return True
        code = answer["error_code"]
        if code != errors.NONE:
            return named or code != self.error_code
        return (answer["high_watermark"] != self.high_watermark or self.error_code != errors.NONE
                or answer["last_stable_offset"] != self.last_stable_offset
                or answer["log_start_offset"] != self.log_start_offset)

    def sent(self, answer: dict) -> None:
        """``answer`` went to the fetcher: later answers are news relative to it."""
        self.high_watermark = answer["high_watermark"]
        self.last_stable_offset = answer["last_stable_offset"]
        self.log_start_offset = answer["log_start_offset"]
        self.error_code = answer["error_code"]


@dataclass(eq=False)
class FetchSession:
    """One fetcher's session on this broker (module docstring). ``replica_id`` >= 0: a follower's."""
    id: int
    replica_id: int
    last_used_ms: float  # when a fetch last used it (the replica manager's clock)
    # The cache's index of partitions not hosted here when a session last read them, and the
    # sessions holding each: the replica manager says when one is hosted (FetchSessionCache.hosted).
    unhosted: dict[TP, set["FetchSession"]] = field(default_factory=dict, repr=False)
    epoch: int = 1  # the epoch its next incremental fetch must carry
    closed: bool = False

    def __post_init__(self) -> None:
        self.partitions: dict[TP, CachedPartition] = {}
        self.pending: set[TP] = set()  # partitions with news since they were last read
        self._waiter: asyncio.Future | None = None
        self._next_order = 0  # CachedPartition.order of the next partition added or moved to the end

    @property
    def is_follower(self) -> bool:
        """A follower's session: kept before consumers' when slots run out."""
        return self.replica_id >= 0

    def holds(self, tp: TP) -> bool:
        """Whether this live session fetches ``tp`` every round (for the leader's ISR check)."""
        return not self.closed and tp in self.partitions

    def news(self, tp: TP, records: bool, hw: bool) -> None:
        """Called by a watched partition: something an answer for ``tp`` shows may have changed
        (``records``: new records or a new log start, what a follower waits for; ``hw``: the high
        watermark moved, what a consumer waits for). Wakes a waiting fetch that this can answer."""
        self.pending.add(tp)
        waiter = self._waiter
        if waiter is not None and not waiter.done() and (records if self.is_follower else hw):
            waiter.set_result(None)

    def waiter(self) -> asyncio.Future:
        """A future completed by the next ``news`` that can answer this session's long poll."""
        self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    def stop_waiting(self) -> None:
        """The long poll is over."""
        self._waiter = None

    def add(self, tp: TP, request: dict) -> CachedPartition:
        """Add ``tp`` with the fetcher's entry, or take its new entry."""
        cached = self.partitions.get(tp)
        if cached is None:
            cached = self.partitions[tp] = CachedPartition(request, self._next_order)
            self._next_order += 1
        else:
            cached.request = request
        return cached

    def in_order(self, tps: Iterable[TP]) -> list[TP]:
        """Those of ``tps`` the session holds, in its read order (module docstring: fairness)."""
        partitions = self.partitions
        held = [(partitions[tp].order, tp) for tp in tps if tp in partitions]
        held.sort()  # orders are unique: the partitions themselves are never compared
        return [tp for _, tp in held]

    def to_end(self, cached: CachedPartition) -> None:
        """``cached`` gave records: it is read after every other partition next time."""
        cached.order = self._next_order
        self._next_order += 1

    def attach(self, tp: TP, cached: CachedPartition, partition: Any) -> None:
        """Watch ``partition`` (the replica now hosted for ``tp``, or None) instead of the one before."""
        if cached.partition is partition:
            return
        self._unwatch(tp, cached)
        cached.partition = partition
        if partition is None:
            self.unhosted.setdefault(tp, set()).add(self)
        else:
            partition.watch(self)
            self._hosted(tp)

    def _hosted(self, tp: TP) -> None:
        sessions = self.unhosted.get(tp)
        if sessions is not None:
            sessions.discard(self)
            if not sessions:
                del self.unhosted[tp]

    def _unwatch(self, tp: TP, cached: CachedPartition) -> None:
        if cached.partition is None:
            self._hosted(tp)
        elif cached.partition is not UNREAD:
            cached.partition.unwatch(self)

    def forget(self, tp: TP) -> None:
        """Drop ``tp`` from the session."""
        cached = self.partitions.pop(tp, None)
        if cached is not None:
            self._unwatch(tp, cached)
        self.pending.discard(tp)

    def close(self) -> None:
        """Stop watching every partition; a waiting fetch answers at once."""
        self.closed = True
        for tp in list(self.partitions):
            self.forget(tp)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class FetchSessionCache:
    """The sessions of one broker, at most ``slots_max`` (module docstring: ids, eviction)."""
    def __init__(self, slots_max: int, clock: Callable[[], float], *,
                 eviction_ms: int = FETCH_SESSION_EVICTION_MS, rng: random.Random | None = None) -> None:
        self.slots_max = slots_max
        self.clock = clock  # milliseconds, monotonic (the replica manager's)
        self.eviction_ms = eviction_ms
        self.rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0  # sessions that lost their slot to a new one, ever
        self._unhosted: dict[TP, set[FetchSession]] = {}  # FetchSession.unhosted

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def partitions_cached(self) -> int:
        """Partitions held by all sessions (Kafka's NumIncrementalFetchPartitionsCached)."""
        return sum(len(s.partitions) for s in self.sessions.values())

    def incremental(self, session_id: int, epoch: int, replica_id: int) -> FetchSession:
        """The session an incremental fetch names, moved on to its next epoch; a typed error
        (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) when there is none to use."""
        session = self.sessions.get(session_id)
        if session is None or session.replica_id != replica_id:
            raise errors.FetchSessionIdNotFoundError(
                f"no fetch session {session_id} of {_fetcher(replica_id)} on this broker: send a full fetch")
        if epoch != session.epoch:
            raise errors.InvalidFetchSessionEpochError(
                f"fetch session {session_id} expects epoch {session.epoch}, not {epoch}: send a full fetch")
        session.epoch = next_epoch(epoch)
        session.last_used_ms = self.clock()
        return session

    def full(self, session_id: int, epoch: int, replica_id: int, size: int) -> FetchSession | None:
        """A full fetch: close the session it names (if the same fetcher's); with epoch 0 a new
        session for ``size`` partitions, or None (epoch -1, or no slot)."""
        old = self.sessions.get(session_id) if session_id != INVALID_SESSION_ID else None
        if old is not None and old.replica_id == replica_id:
            self.remove(old)
        if replica_id >= 0 and epoch == INITIAL_EPOCH:
            # A follower fetches from one leader with one fetcher: a session of its that this
            # fetch does not name was left by a fetcher that is gone (the broker restarted).
            for orphan in [s for s in self.sessions.values() if s.replica_id == replica_id]:
                self.remove(orphan)
        if epoch != INITIAL_EPOCH or self.slots_max <= 0:
            return None
        now = self.clock()
        if len(self.sessions) >= self.slots_max and not self._evict_for(replica_id >= 0, size, now):
            return None
        new_id = self._new_id()
        if new_id is None:
            return None
        session = self.sessions[new_id] = FetchSession(new_id, replica_id, last_used_ms=now, unhosted=self._unhosted)
        return session

    def hosted(self, tp: TP, partition: Any) -> None:
        """The replica manager hosts ``partition`` for ``tp`` now: sessions that found no replica
        of it watch this one, and read it at their next fetch (a waiting one wakes)."""
        for session in list(self._unhosted.get(tp, ())):
            cached = session.partitions.get(tp)
            if cached is not None:
                session.attach(tp, cached, partition)
                session.news(tp, records=True, hw=True)

    def remove(self, session: FetchSession) -> None:
        """Close ``session`` and free its slot."""
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
        session.close()

    def close(self) -> None:
        """Close every session (the broker stops)."""
        for session in list(self.sessions.values()):
            self.remove(session)

    def _evict_for(self, follower: bool, size: int, now: float) -> bool:
        # Runs only when a session is created in a full cache: one pass over at most slots_max.
        stale = [s for s in self.sessions.values() if now - s.last_used_ms >= self.eviction_ms]
        if stale:
            victim = min(stale, key=lambda s: s.last_used_ms)
        else:
            consumers = [s for s in self.sessions.values() if not s.is_follower]
            if not consumers:
                return False
            victim = min(consumers, key=lambda s: (len(s.partitions), s.last_used_ms))
            if not follower and size <= len(victim.partitions):
                return False
        self.remove(victim)
        self.evictions += 1
        return True

    def _new_id(self) -> int | None:
        for _ in range(SESSION_ID_ATTEMPTS_MAX):
            candidate = self.rng.randint(1, EPOCH_MAX)
            if candidate not in self.sessions:
                return candidate
        return None


def _fetcher(replica_id: int) -> str:
    return f"broker {replica_id}" if replica_id >= 0 else "this consumer"


def forgotten(body: dict) -> Iterable[TP]:
    """The partitions an incremental Fetch drops from its session (``forgotten_topics_data``)."""
    for topic in body.get("forgotten_topics_data") or ():
        for index in topic.get("partitions") or ():
            yield topic["topic"], index
