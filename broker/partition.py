"""One partition replica on this broker: its role, its log, and (as leader) the ISR and the HW.

Replica states and the legal moves between them. A move happens only because a committed
metadata record says so (``MetadataView``), never because of a request or a timeout:

    from       to         when (guard)
    NONE       LEADER     metadata names this broker leader at epoch E; this broker is a replica
    NONE       FOLLOWER   metadata names another broker (or none: -1) leader at epoch E; this broker
                          is a replica
    LEADER     LEADER     same leader, leader epoch E' > E (re-elected): a new epoch starts here
    LEADER     FOLLOWER   another leader (or none) at E' > E
    FOLLOWER   LEADER     this broker at E' > E
    FOLLOWER   FOLLOWER   another leader (or none) at E' > E: truncation is re-checked
    any        STOPPED    the topic is deleted (or its id changed) or this broker is no replica
    any        (stays)    same leader epoch, larger partition epoch: only replicas/ISR change

A move with E' <= E is refused (stale metadata never moves a replica back), except that the
ISR / partition epoch are taken whenever the partition epoch grows. STOPPED is final: the
replica manager drops the object.

Invariants kept here (docs/replication.md):
- A leader appends only as leader at its current epoch, and stamps that epoch on every batch;
  the leader-epoch cache records where each epoch started.
- HW = min log end offset over the ISR (leader included); it never goes backwards while leading.
- acks=all is answered once HW passes the batch (every ISR member has it); an append is
  refused up front when the ISR is smaller than min.insync.replicas.
- ISR changes are only proposed here (AlterPartition); the partition takes an ISR only from a
  committed answer or from the metadata log.
"""
from __future__ import annotations

import asyncio
import collections
import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from raftka.common import errors
from raftka.common.errors import (FencedLeaderEpochError, NotEnoughReplicasError, NotLeaderOrFollowerError,
                                  OffsetOutOfRangeError)
from raftka.common.ratelog import RateLimitedLog
from raftka.broker.metadata import PartitionInfo

log = logging.getLogger(__name__)
# ISR changes a leader takes are INFO one by one while few: at most one shrink and one expansion
# a second (a single partition's change is always seen). A storm (a restarted broker rejoins
# thousands of ISRs) goes to DEBUG past that, and the next INFO line counts the ones left out.
ISR_INFO_INTERVAL_S = 1.0
isr_lines = RateLimitedLog(log, interval_s=ISR_INFO_INTERVAL_S)


class ReplicaState(enum.Enum):
    """A replica's role on this broker (the state table in the module docstring)."""
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"
    STOPPED = "stopped"


class IllegalTransition(AssertionError):
    """A programmer error: a move the state table above does not allow."""


@dataclass
class FollowerProgress:
    """What the leader knows of one follower replica (Kafka's Replica state)."""

    log_end_offset: int = -1  # -1: not fetched yet in this leader epoch
    last_caught_up_ms: float = 0.0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: float = 0.0
    log_start_offset: int = -1  # as its last fetch said; -1: not known
    # The fetch session its last fetch of this partition came through (broker/fetch_session.py):
    # while the session holds the partition, every fetch in it fetches the partition unnamed.
    session: Any = None


def now_ms() -> float:
    """Monotonic milliseconds (the default clock)."""
    return time.monotonic() * 1000


@dataclass
class Partition:
    """One partition replica on this broker; moves only as committed metadata says (module docstring)."""
    topic: str
    index: int
    broker_id: int
    log: Any  # storage Log
    min_insync_replicas: int = 1
    state: ReplicaState = ReplicaState.NONE
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    leader_epoch_start_offset: int = 0
    alter_in_flight: bool = False
    isr_shrinks: int = 0
    isr_expands: int = 0
    clock: Callable[[], float] = now_ms  # milliseconds, monotonic; the simulation passes its own
    # Waiting fetches (ReplicaManager.fetch), woken only by what can answer them: a follower's
    # by new records, a consumer's by the HW moving; both by a role change.
    _record_waiters: set = field(default_factory=set)
    _hw_waiters: set = field(default_factory=set)
    # Fetch sessions holding this partition (broker/fetch_session.py), told of the same changes as
    # the waiters, so an incremental fetch reads only partitions with news.
    _sessions: set = field(default_factory=set)
    _changed: asyncio.Event | None = None  # made when someone waits (changed()): not per append
    # acks=all waiters in append order: [next_offset, leader_epoch, deadline, future]. One timer
    # (for the earliest deadline it knows of) serves them all, instead of a wait_for per request.
    _acks_waiters: collections.deque = field(default_factory=collections.deque)
    _acks_timer: Any = None
    _acks_timer_at: float = 0.0

    @property
    def name(self) -> str:
        """topic-index, for logs."""
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        """True while this replica leads at its current leader epoch."""
        return self.state is ReplicaState.LEADER

    @property
    def high_watermark(self) -> int:
        """The log's high watermark."""
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        """The log's end offset."""
        return self.log.log_end_offset

    # -- waking long polls and acks=all waiters -----------------------------------------------

    def _notify(self) -> None:
        if self._changed is not None:
            event, self._changed = self._changed, None
            event.set()
        if self._acks_waiters:
            self._settle_acks_waiters()

    def changed(self) -> asyncio.Event:
        """An event set at the next append, HW move or role change of this partition."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def add_fetch_waiter(self, future: asyncio.Future, replica: bool) -> None:
        """Complete ``future`` (result None) at the next append (``replica``: a follower's
        fetch) or the next HW move (a consumer's fetch, which reads up to the HW), or at a role
        change. One future, no task: the waiting fetch resumes in the next turn of the loop."""
        (self._record_waiters if replica else self._hw_waiters).add(future)

    def remove_fetch_waiter(self, future: asyncio.Future) -> None:
        """Forget ``future`` (its fetch was answered for another reason)."""
        self._record_waiters.discard(future)
        self._hw_waiters.discard(future)

    def watch(self, session: Any) -> None:
        """Tell ``session`` (a FetchSession) of every change a fetch answer shows, until unwatched."""
        self._sessions.add(session)

    def unwatch(self, session: Any) -> None:
        """Stop telling ``session``."""
        self._sessions.discard(session)

    def _wake_fetches(self, records: bool = True, hw: bool = True) -> None:
        if self._sessions:
            tp = (self.topic, self.index)
            for session in self._sessions:
                session.news(tp, records, hw)
        if records and self._record_waiters:
            waiters, self._record_waiters = self._record_waiters, set()
            for future in waiters:
                if not future.done():
                    future.set_result(None)
        if hw and self._hw_waiters:
            waiters, self._hw_waiters = self._hw_waiters, set()
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    # -- transitions (only from committed metadata) -------------------------------------------

    def apply_metadata(self, info: PartitionInfo, now: float | None = None) -> str | None:
        """Move as the committed ``info`` says; returns "leader"/"follower" when the role or
        epoch changed (the replica manager then starts or moves the follower fetcher), "isr"
        when only the ISR changed, None when nothing did."""
        if self.state is ReplicaState.STOPPED:
            raise IllegalTransition(f"{self.name}: STOPPED is final")
        if self.broker_id not in info.replicas:
            raise IllegalTransition(f"{self.name}: broker {self.broker_id} is not a replica; stop it instead")
        now = self.clock() if now is None else now
        if self.state is ReplicaState.NONE or info.leader_epoch > self.leader_epoch:
            if info.leader == self.broker_id:
                self._become_leader(info, now)
                return "leader"
            self._become_follower(info)
            return "follower"
        if info.leader_epoch < self.leader_epoch:
            log.debug("%s: ignoring stale metadata (leader epoch %d < %d)", self.name, info.leader_epoch,
                      self.leader_epoch)
            return None
        if info.partition_epoch > self.partition_epoch:
            self._take_isr(info.isr, info.partition_epoch, info.replicas)
            return "isr"
        return None

    def _become_leader(self, info: PartitionInfo, now: float) -> None:
        if self.state is ReplicaState.LEADER and info.leader_epoch <= self.leader_epoch:
            raise IllegalTransition(f"{self.name}: already leader at epoch {self.leader_epoch}")
        self.state = ReplicaState.LEADER
        self.leader_id = self.broker_id
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.replicas = info.replicas
        self.isr = info.isr
        self.alter_in_flight = False
        # The new epoch starts at our log end: records after it are this leader's.
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.log.leader_epoch_cache.assign(info.leader_epoch, self.log.log_end_offset)
        # Every ISR member counts as caught up now (Kafka does the same): it gets a full
        # replica.lag.time.max.ms to fetch from us before it can be dropped.
        self.followers = {r: FollowerProgress(last_caught_up_ms=now) for r in info.replicas if r != self.broker_id}
        self._maybe_advance_hw()
        # At DEBUG: the replica manager logs one INFO line per metadata change for all partitions.
        log.debug("%s: leader at epoch %d, ISR %s, log end %d, HW %d", self.name, self.leader_epoch,
                  list(self.isr), self.log.log_end_offset, self.log.high_watermark)
        self._notify()
        self._wake_fetches()

    def _become_follower(self, info: PartitionInfo) -> None:
        if self.state is ReplicaState.FOLLOWER and info.leader_epoch <= self.leader_epoch:
            raise IllegalTransition(f"{self.name}: already follower at epoch {self.leader_epoch}")
        self.state = ReplicaState.FOLLOWER
        self.leader_id = info.leader
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.replicas = info.replicas
        self.isr = info.isr
        self.followers = {}
        self.alter_in_flight = False
        log.debug("%s: follower of %d at epoch %d, log end %d", self.name, info.leader, info.leader_epoch,
                  self.log.log_end_offset)
        self._notify()  # acks=all waiters of a former leadership answer NOT_LEADER_OR_FOLLOWER
        self._wake_fetches()

    def stop(self) -> None:
        """STOPPED (final): waiters wake and answer NOT_LEADER_OR_FOLLOWER."""
        self.state = ReplicaState.STOPPED
        self.followers = {}
        self._notify()
        self._wake_fetches()

    def _take_isr(self, isr: tuple[int, ...], partition_epoch: int, replicas: tuple[int, ...] | None = None) -> None:
        if partition_epoch <= self.partition_epoch:
            return
        old = self.isr
        self.isr = tuple(isr)
        self.partition_epoch = partition_epoch
        if replicas is not None:
            self.replicas = replicas
            if self.is_leader:  # a replica added at the same leader epoch gets tracked too
                for replica in replicas:
                    if replica != self.broker_id and replica not in self.followers:
                        self.followers[replica] = FollowerProgress(last_caught_up_ms=self.clock())
        if self.is_leader:
            if len(self.isr) < len(old):
                self.isr_shrinks += 1
            elif len(self.isr) > len(old):
                self.isr_expands += 1
            line = "%s: ISR %s -> %s (partition epoch %d)"
            args = (self.name, list(old), list(self.isr), partition_epoch)
            if not isr_lines.log(logging.INFO, "shrink" if len(self.isr) < len(old) else "expand", line, *args):
                log.debug(line, *args)
            self._maybe_advance_hw()
        self._notify()

    def take_alter_result(self, result: dict) -> None:
        """A committed AlterPartition answer: take it if it is for our leader epoch."""
        if self.is_leader and result.get("leader_epoch") == self.leader_epoch and result.get("leader") == self.broker_id:
            self._take_isr(tuple(result["isr"]), int(result["partition_epoch"]))

    # -- leader: appends, follower progress, HW, ISR proposals ----------------------------------

    def check_leader(self, current_leader_epoch: int | None = None) -> None:
        """NotLeaderOrFollowerError unless leading; epoch errors as ``check_epoch``."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not lead {self.name} "
                                           f"(leader {self.leader_id} at epoch {self.leader_epoch})",
                                           topic=self.topic, partition=self.index)
        self.check_epoch(current_leader_epoch)

    def check_epoch(self, current_leader_epoch: int | None) -> None:
        """FENCED_LEADER_EPOCH for an older ``current_leader_epoch``, UNKNOWN_LEADER_EPOCH for a newer one."""
        if current_leader_epoch is None or current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}",
                                         topic=self.topic, partition=self.index)
        if current_leader_epoch > self.leader_epoch:
            raise errors.for_code(errors.UNKNOWN_LEADER_EPOCH)(
                f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch} (metadata not caught up)",
                topic=self.topic, partition=self.index)

    def append_as_leader(self, records: bytes, acks: int) -> Any:
        """Append a validated produce payload. No await: called in request arrival order."""
        self.check_leader()
        if acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(f"{self.name}: ISR {list(self.isr)} has fewer than min.insync.replicas="
                                         f"{self.min_insync_replicas} members", topic=self.topic, partition=self.index)
        info = self.log.append_as_leader(records, self.leader_epoch)
        self._maybe_advance_hw()
        self._notify()
        self._wake_fetches(hw=False)  # followers' fetches; a consumer's waits for the HW
        return info

    def _replication_code(self, next_offset: int, epoch: int) -> int | None:
        """An acks=all answer for records ending before ``next_offset`` appended at ``epoch``,
        or None while the HW has not reached them."""
        if not self.is_leader or self.leader_epoch != epoch:
            return errors.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= next_offset:
            if len(self.isr) < self.min_insync_replicas:
                return errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return errors.NONE
        return None

    def replication_waiter(self, next_offset: int, deadline: float) -> "int | asyncio.Future[int]":
        """acks=all: the error code to answer now, or a future of it that completes once HW >=
        ``next_offset`` (NONE or NOT_ENOUGH_REPLICAS_AFTER_APPEND), the leadership moves
        (NOT_LEADER_OR_FOLLOWER) or ``deadline`` (time.monotonic()) passes (REQUEST_TIMED_OUT).
        No task or timer per call: waiters sit in append order and wake on ``_notify``."""
        code = self._replication_code(next_offset, self.leader_epoch)
        if code is not None:
            return code
        now = time.monotonic()
        if deadline <= now:
            return errors.REQUEST_TIMED_OUT
        future = asyncio.get_running_loop().create_future()
        self._acks_waiters.append((next_offset, self.leader_epoch, deadline, future))
        if self._acks_timer is None or deadline < self._acks_timer_at:
            self._arm_acks_timer(deadline, now)
        return future

    async def wait_for_replication(self, next_offset: int, deadline: float) -> int:
        """acks=all: wait until HW >= ``next_offset``; returns the error code to answer
        (``replication_waiter``, awaited)."""
        waiter = self.replication_waiter(next_offset, deadline)
        return waiter if isinstance(waiter, int) else await waiter

    def _settle_acks_waiters(self) -> None:
        # Waiters of one epoch were appended in offset order, so the first that is not ready
        # ends the scan; those of an older epoch (or after losing the lead) all come first.
        waiters = self._acks_waiters
        while waiters:
            next_offset, epoch, _, future = waiters[0]
            if not future.done():
                code = self._replication_code(next_offset, epoch)
                if code is None:
                    return
                future.set_result(code)
            waiters.popleft()

    def _arm_acks_timer(self, deadline: float, now: float) -> None:
        if self._acks_timer is not None:
            self._acks_timer.cancel()
        self._acks_timer_at = deadline
        self._acks_timer = asyncio.get_running_loop().call_later(max(0.0, deadline - now), self._expire_acks_waiters)

    def _expire_acks_waiters(self) -> None:
        """The timer: answer REQUEST_TIMED_OUT to waiters past their deadline, re-arm for the rest."""
        self._acks_timer = None
        now = time.monotonic()
        kept: collections.deque = collections.deque()
        earliest = None
        for waiter in self._acks_waiters:
            future, deadline = waiter[3], waiter[2]
            if future.done():
                continue
            if deadline <= now:
                code = self._replication_code(waiter[0], waiter[1])
                future.set_result(errors.REQUEST_TIMED_OUT if code is None else code)
                continue
            kept.append(waiter)
            if earliest is None or deadline < earliest:
                earliest = deadline
        self._acks_waiters = kept
        if earliest is not None:
            self._arm_acks_timer(earliest, now)

    def _maybe_advance_hw(self) -> bool:
        if not self.is_leader:
            return False
        leos = [self.log.log_end_offset]
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            progress = self.followers.get(replica)
            leos.append(progress.log_end_offset if progress is not None else -1)
        new_hw = min(leos)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            self._notify()
            self._wake_fetches(records=False)
            return True
        return False

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> dict | None:
        """Where a fetcher's log leaves ours, or None when its last epoch agrees with our history."""
        if last_fetched_epoch is None or last_fetched_epoch < 0:
            return None
        epoch, end_offset = self.end_offset_for_epoch(last_fetched_epoch)
        latest = self.log.leader_epoch_cache.latest_epoch
        if epoch < 0 and 0 <= latest < last_fetched_epoch:
            # An epoch newer than any we know: our whole history is older, so the fetcher
            # keeps what agrees with our latest epoch, not nothing.
            epoch, end_offset = latest, self.log.log_end_offset
        if epoch != last_fetched_epoch or end_offset < fetch_offset:
            return {"epoch": epoch, "end_offset": end_offset}
        return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch`` we know, offset where it ends), for a follower's diverging
        epoch (Fetch v12) and its truncation; (-1, log start) when we cannot say. The
        OffsetsForLeaderEpoch answer is the epoch cache's own (ReplicaManager)."""
        found_epoch, end_offset = self.log.leader_epoch_cache.end_offset_for(epoch)
        if found_epoch < 0:
            # No history to compare with (empty cache, or an epoch newer than ours): the asker
            # keeps nothing past our log start.
            return -1, self.log.log_start_offset
        return found_epoch, end_offset

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now: float | None = None,
                              log_start_offset: int = -1, session: Any = None) -> None:
        """A follower fetched from ``fetch_offset``: its log end offset. Kafka's rule for "caught
        up": it asked for our log end, or for at least what our log end was at its last fetch.
        ``log_start_offset``: the follower's, which DeleteRecords waits on (low_watermark).
        ``session``: the fetch session the fetch came through (None: a full fetch without one)."""
        progress = self.followers.get(replica_id)
        if progress is None or not self.is_leader:
            return
        progress.session = session
        if log_start_offset > progress.log_start_offset:
            progress.log_start_offset = log_start_offset
            self._notify()  # a DeleteRecords may be waiting for it
        now = self.clock() if now is None else now
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            progress.last_caught_up_ms = now
        elif fetch_offset >= progress.last_fetch_leader_leo >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        moved = fetch_offset != progress.log_end_offset
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_leo = leo
        progress.last_fetch_ms = now
        # The HW is the least log end of the ISR: a fetch that leaves this follower's where it
        # was cannot move it (appends and ISR changes recompute it themselves). A follower's
        # Fetch lists every partition it follows from us, most of them unchanged.
        if moved:
            self._maybe_advance_hw()

    # -- DeleteRecords --------------------------------------------------------------------------

    def low_watermark(self) -> int:
        """The least log start offset of this leader and its ISR followers (Kafka's low
        watermark): what DeleteRecords answers, once every in-sync copy has deleted too."""
        starts = [self.log.log_start_offset]
        for replica in self.isr:
            if replica != self.broker_id:
                progress = self.followers.get(replica)
                starts.append(progress.log_start_offset if progress is not None else -1)
        return min(starts)

    def delete_records(self, offset: int) -> int:
        """Leader: delete the records before ``offset`` (-1: the high watermark); returns the
        offset the log now starts at. OffsetOutOfRangeError past the high watermark."""
        self.check_leader()
        target = self.log.high_watermark if offset == -1 else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"{self.name}: cannot delete records before offset {offset}",
                                        topic=self.topic, partition=self.index)
        start = self.log.delete_records_before(target)
        self._wake_fetches(hw=False)  # followers hear the new log start at once and follow
        return start

    async def wait_for_low_watermark(self, offset: int, deadline: float) -> int:
        """DeleteRecords' wait: NONE once every in-sync copy starts at ``offset`` or later,
        NOT_LEADER_OR_FOLLOWER when the lead moves, REQUEST_TIMED_OUT at ``deadline``
        (time.monotonic())."""
        epoch = self.leader_epoch
        while self.low_watermark() < offset:
            if not self.is_leader or self.leader_epoch != epoch:
                return errors.NOT_LEADER_OR_FOLLOWER
            left = deadline - time.monotonic()
            if left <= 0:
                return errors.REQUEST_TIMED_OUT
            try:
                await asyncio.wait_for(self.changed().wait(), left)
            except asyncio.TimeoutError:
                pass
        return errors.NONE if self.is_leader and self.leader_epoch == epoch else errors.NOT_LEADER_OR_FOLLOWER

    def isr_proposal(self, lag_time_max_ms: int, now: float | None = None) -> tuple[int, ...] | None:
        """The ISR this leader should ask for, or None: drop followers not caught up within
        ``lag_time_max_ms``; add a follower that reached the HW and this epoch's start."""
        if not self.is_leader or self.alter_in_flight:
            return None
        now = self.clock() if now is None else now
        out = [r for r in self.isr if r != self.broker_id
               and self._lagging(self.followers.get(r, FollowerProgress()), now, lag_time_max_ms)]
        if out:
            return tuple(r for r in self.isr if r not in out)
        hw = self.log.high_watermark
        joining = [r for r, p in self.followers.items() if r not in self.isr and p.log_end_offset >= 0
                   and p.log_end_offset >= hw and p.log_end_offset >= self.leader_epoch_start_offset
                   and not self._lagging(p, now, lag_time_max_ms)]
        if joining:
            return tuple(self.isr) + tuple(sorted(joining))
        return None

    def _lagging(self, progress: FollowerProgress, now: float, lag_time_max_ms: int) -> bool:
        """Not caught up within ``lag_time_max_ms``. A follower at our log end whose fetch session
        still holds this partition fetched it, unnamed, at each fetch in the session: our log end
        only grows while we lead, so it was caught up at the session's last fetch too (kept, so
        the next checks need not ask the session)."""
        if now - progress.last_caught_up_ms <= lag_time_max_ms:
            return False
        session = progress.session
        if (session is not None and progress.log_end_offset == self.log.log_end_offset
                and session.holds((self.topic, self.index))):
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, session.last_used_ms)
        return now - progress.last_caught_up_ms > lag_time_max_ms

    @property
    def under_replicated(self) -> bool:
        """Leading with an ISR smaller than the replica set."""
        return self.is_leader and len(self.isr) < len(self.replicas)


