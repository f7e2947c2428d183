"""The partitions this broker hosts: roles from committed metadata, and the data APIs on them.

``on_metadata(view)`` is the only way a partition changes role (see partition.py's table). The
data paths (Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch) live here; the broker server
turns wire bodies into calls and answers.

Produce path cost: per batch, a header read and a CRC-32C over its bytes (in C), then one
write of the same bytes with base offset and leader epoch rewritten. Records are never decoded.

A replica whose log fails a check on read (storage's ``LogCorruptedError``: a batch the disk
changed) goes *offline* here, one partition at a time, without fencing the broker:

    state              what this broker does                                   until
    offline, leader    asks the controller to move leadership to another ISR   the metadata log makes
                       member (AlterPartition without itself); reads from the   it a follower
                       corrupt offset answer KAFKA_STORAGE_ERROR meanwhile
    offline, leader,   stays leader (no replica holds the records): reads from  another replica joins
    alone in the ISR   the corrupt offset keep answering KAFKA_STORAGE_ERROR     the ISR (then as above)
    healing            a follower: cuts its log after the last good batch      the leader adds it back
                       (``Log.truncate_at_corruption``) and fetches the rest    to the ISR: online again
                       again from the leader

``offline`` maps each such partition to its ``OfflineReplica``; /health and /metrics show them.
"""
from __future__ import annotations

import asyncio
import heapq
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Any, Callable

from raftka.storage import Corruption, LogCorruptedError, LogManager
from raftka.broker.fetch_session import (FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, FetchSession,
                                         FetchSessionCache, forgotten)
from raftka.broker.metadata import EMPTY, MetadataView
from raftka.broker.partition import Partition, ReplicaState, now_ms
from raftka.broker.quota import (FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS, ReplicationQuota,
                                 is_listed, listed_partitions)
from raftka.broker.replica_fetcher import ReplicaFetcher
from raftka.common import errors
from raftka.common.authenticator import ANONYMOUS
from raftka.common.errors import NotLeaderOrFollowerError, RaftkaError, UnknownTopicOrPartitionError
from raftka.common.ratelog import RateLimitedLog
from raftka.common.sasl import SaslClientSettings

log = logging.getLogger(__name__)
# A follower Fetch this broker refuses (not a replica): one line per broker and partition a minute.
refused_fetch_log = RateLimitedLog(log)

TP = tuple[str, int]
FETCH_WAIT_MS_MAX = 30_000
# Partition names one summary log line shows (role changes, stray logs); each partition's own
# line is at DEBUG. A restart moves 10,000 replicas at once: one INFO line each flooded the log
# and cost ~5% of the event loop.
SUMMARY_NAMES_MAX = 10
# The controller's Raft journal directory (<log.dirs[0]>/__cluster_metadata-0 in combined mode):
# never a partition replica of ours, never deleted.
METADATA_TOPIC = "__cluster_metadata"


OFFLINE_LEADER = "leader: moving leadership to an in-sync replica"
OFFLINE_ALONE = "leader: no other in-sync replica to take over; reads from the corrupt offset fail"
HEALING = "re-replicating from the leader after cutting the log at the corrupt batch"


@dataclass
class OfflineReplica:
    """A replica out of service because its log is corrupt (module docstring)."""

    corruption: Corruption
    state: str = OFFLINE_LEADER
    healed_at_partition_epoch: int = -1  # the partition epoch when the log was cut (HEALING)

    def describe(self, tp: tuple[str, int]) -> dict:
        c = self.corruption
        return {"topic": tp[0], "partition": tp[1], "state": self.state, "file": str(c.file),
                "position": c.position, "offset": c.offset, "cause": c.cause, "problem": c.problem}


def _sample(tps: list[TP]) -> str:
    """At most SUMMARY_NAMES_MAX partition names, then how many more."""
    names = ", ".join(f"{topic}-{index}" for topic, index in tps[:SUMMARY_NAMES_MAX])
    return names + (f" ... and {len(tps) - SUMMARY_NAMES_MAX:,} more" if len(tps) > SUMMARY_NAMES_MAX else "")


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class ReplicaManager:
    """The partition replicas of one broker and the data APIs on them (module docstring)."""
    def __init__(self, broker_id: int, config: Any, logs: LogManager,
                 alter_partition: Callable[[Partition, tuple[int, ...]], Any], *,
                 clock: Callable[[], float] = now_ms) -> None:
        self.broker_id = broker_id
        self.clock = clock
        self.config = config
        self.logs = logs
        self.alter_partition = alter_partition  # coroutine function (partition, new_isr) -> None
        # Called once per disk error (KAFKA_STORAGE_ERROR from storage): the broker stops leading.
        self.on_storage_error: Callable[[Partition, RaftkaError], None] | None = None
        self.partitions: dict[TP, Partition] = {}
        self.topic_ids: dict[TP, str] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        # Incremental fetch sessions of followers and consumers here (KIP-227); made at the first
        # Fetch that asks for one (session_cache).
        self.fetch_sessions: FetchSessionCache | None = None
        self.view: MetadataView = EMPTY
        self.dial_proxies: dict[int, str] = {}  # broker.dial.proxies: broker id -> address to dial
        # How followers (and the group coordinator) dial other brokers: inter.broker.listener.name
        # and, when that listener is TLS, its context, when it is SASL_*, the login (set by the
        # broker at start). peer_sasl also means replica Fetches must be authenticated here.
        self.inter_broker_listener = "PLAINTEXT"
        self.peer_ssl: ssl.SSLContext | None = None
        self.peer_sasl: SaslClientSettings | None = None
        self.truncations = 0
        # The replication throttle (broker/quota.py): what this broker sends as leader and fetches
        # as follower for throttled replicas out of the ISR.
        self.leader_quota = ReplicationQuota()
        self.follower_quota = ReplicationQuota()
        self.offline: dict[TP, OfflineReplica] = {}  # corrupt replicas (module docstring)
        self.corrupt_replicas = 0  # replicas taken offline for corruption, ever
        self.healed_replicas = 0  # ... and back in the ISR after re-replicating
        self._tasks: list[asyncio.Task] = []
        # The ISR check visits only partitions that can need an AlterPartition (_isr_loop):
        # those in _isr_watch at every tick, the others when their deadline in _isr_heap comes.
        self._isr_watch: set[TP] = set()
        self._isr_deadlines: dict[TP, float] = {}
        self._isr_heap: list[tuple[float, TP]] = []

    # -- metadata -> roles -----------------------------------------------------------------------

    def endpoint_of(self, broker_id: int) -> str | None:
        """A broker's endpoint on inter.broker.listener.name as committed, or None."""
        if broker_id in self.dial_proxies:
            return self.dial_proxies[broker_id]
        broker = self.view.brokers.get(broker_id)
        if broker is None:
            return None
        return broker.endpoints.get(self.inter_broker_listener)

    def min_isr_of(self, configs: dict) -> int:
        """min.insync.replicas of a topic: its override, else this broker's dynamic one (its own,
        else the cluster-wide one), else server.properties."""
        value = configs.get("min.insync.replicas", self.view.dynamic_config(self.broker_id, "min.insync.replicas"))
        return int(value) if value is not None else self.config["min.insync.replicas"]

    def on_metadata(self, view: MetadataView) -> None:
        """Apply a committed metadata view: create, move or stop local partition replicas.
        Topics whose TopicInfo is the previous view's object are unchanged and skipped."""
        previous = self.view
        self.view = view
        self.leader_quota.set_rate(view.dynamic_config(self.broker_id, LEADER_RATE))
        self.follower_quota.set_rate(view.dynamic_config(self.broker_id, FOLLOWER_RATE))
        # the default min ISR may move
        everything = (view.cluster_configs is not previous.cluster_configs
                      or view.broker_configs.get(self.broker_id) != previous.broker_configs.get(self.broker_id))
        # Views share their topic map's base (OverlayMap): only the names it reports may have changed,
        # so a change costs what changed, not every topic (None: compare every name).
        names = None
        changed_keys = getattr(view.topics, "changed_keys", None)
        if not everything and changed_keys is not None and type(previous.topics) is type(view.topics):
            names = changed_keys(previous.topics)
        if names is None:
            changed = [name for name, topic in view.topics.items()
                       if everything or previous.topics.get(name) is not topic]
            touched = set(changed) | {name for name in previous.topics if name not in view.topics}
        else:
            changed = sorted(name for name in names
                             if name in view.topics and previous.topics.get(name) is not view.topics[name])
            touched = set(changed) | {name for name in names if name in previous.topics and name not in view.topics}
        wanted: set[TP] = set()
        # What this view changed here, for one INFO line (_log_moves): kind -> partitions.
        moves: dict[str, list[TP]] = {"leader of": [], "follower of": [], "stopped": [], "new ISR of": []}
        for name in changed:
            topic = view.topics[name]
            leader_listed = listed_partitions(topic.configs.get(LEADER_REPLICAS), self.broker_id)
            follower_listed = listed_partitions(topic.configs.get(FOLLOWER_REPLICAS), self.broker_id)
            for index, info in enumerate(topic.partitions):
                if self.broker_id not in info.replicas:
                    continue
                tp = (name, index)
                wanted.add(tp)
                self.leader_quota.mark(tp, is_listed(leader_listed, index))
                self.follower_quota.mark(tp, is_listed(follower_listed, index))
                partition = self.partitions.get(tp)
                if partition is not None and self.topic_ids.get(tp) != topic.topic_id:
                    self._stop(tp, delete=True)  # a new topic of the same name
                    moves["stopped"].append(tp)
                    partition = None
                if partition is None:
                    partition = Partition(name, index, self.broker_id,
                                          self.logs.get_or_create(name, index, dict(topic.configs)),
                                          clock=self.clock)
                    self.partitions[tp] = partition
                    self.topic_ids[tp] = topic.topic_id
                    if self.fetch_sessions is not None:
                        self.fetch_sessions.hosted(tp, partition)
                elif previous.topics.get(name) is not None and previous.topics[name].configs != topic.configs:
                    self.logs.get_or_create(name, index, dict(topic.configs))  # AlterConfigs: new log configs
                partition.min_insync_replicas = self.min_isr_of(topic.configs)
                change = partition.apply_metadata(info)
                self._isr_watch.add(tp)  # a new role or ISR: the ISR loop reschedules it
                if change is not None and (change != "isr" or partition.is_leader):
                    moves[f"{change} of" if change != "isr" else "new ISR of"].append(tp)
                if change == "leader":
                    self._unfollow(tp)
                elif change == "follower":
                    self._unfollow(tp)
                    if tp in self.offline and info.leader >= 0:
                        self._heal(partition)
                    if info.leader >= 0:
                        self._follow(tp, info.leader)
                if tp in self.offline:
                    self._check_offline(partition)
        # A topic's local replicas all come from the previous view's partitions of it.
        for name in touched:
            before = previous.topics.get(name)
            for index in range(len(before.partitions) if before is not None else 0):
                if (name, index) in self.partitions and (name, index) not in wanted:
                    self._stop((name, index), delete=True)
                    moves["stopped"].append((name, index))
        self._log_moves(view.offset, moves)

    @staticmethod
    def _log_moves(offset: int, moves: dict[str, list[TP]]) -> None:
        """One INFO line for what a metadata view changed here, with the counts and at most
        SUMMARY_NAMES_MAX partition names: "metadata offset 812: leader of 3,334, follower of
        6,666 partition(s) of 1,000 topic(s): t0-0, t0-3, ... and 9,990 more". A role change or a
        stop of a single partition is named; ISR changes alone are left to the partition's own
        lines (partition.py) unless several came at once (a fenced broker leaves thousands)."""
        isr_only = not any(tps for kind, tps in moves.items() if kind != "new ISR of")
        if isr_only and len(moves["new ISR of"]) <= 1:
            return
        counts = ", ".join(f"{kind} {len(tps):,}" for kind, tps in moves.items() if tps)
        every = [tp for tps in moves.values() for tp in tps]
        topics = len({topic for topic, _ in every})
        log.info("metadata offset %d: %s partition(s) of %s topic(s): %s", offset, counts, f"{topics:,}",
                 _sample(every))

    def _follow(self, tp: TP, leader_id: int) -> None:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id)
            fetcher.start()
        fetcher.add(tp)

    def _unfollow(self, tp: TP) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(tp)

    def _stop(self, tp: TP, *, delete: bool) -> None:
        partition = self.partitions.pop(tp)
        self.topic_ids.pop(tp, None)
        self.offline.pop(tp, None)
        self.leader_quota.mark(tp, False)
        self.follower_quota.mark(tp, False)
        self._unfollow(tp)
        partition.stop()
        if delete:
            self.logs.delete(*tp)
        log.debug("%s: stopped%s", partition.name, " and deleted" if delete else "")

    # -- background: ISR proposals, HW checkpoints ---------------------------------------------------

    def start(self) -> None:
        """Start the ISR check and storage maintenance tasks."""
        self._tasks.append(asyncio.create_task(self._isr_loop(), name="isr-check"))
        self._tasks.append(asyncio.create_task(self._checkpoint_loop(), name="hw-checkpoint"))

    async def _isr_loop(self) -> None:
        """Propose ISR changes as leader, and move offline replicas on. Costs what can change,
        not what is hosted: each tick visits the offline replicas, the partitions in
        ``_isr_watch`` (metadata just changed them, an AlterPartition just ended, or a follower
        outside the ISR may join) and the leaders whose shrink deadline has come."""
        lag_ms = self.config["replica.lag.time.max.ms"]
        interval_s = max(0.05, min(lag_ms / 2, 1000) / 1000)
        while True:
            await asyncio.sleep(interval_s)
            now = self.clock()
            due, self._isr_watch = self._isr_watch, set()
            due.update(self.offline)
            heap = self._isr_heap
            while heap and heap[0][0] <= now:
                deadline, tp = heapq.heappop(heap)
                if self._isr_deadlines.get(tp) == deadline:  # else rescheduled since: stale
                    del self._isr_deadlines[tp]
                    due.add(tp)
            for tp in due:
                partition = self.partitions.get(tp)
                if partition is None:
                    continue
                offline = self.offline.get(tp)
                if offline is not None and offline.state != HEALING:
                    self._check_offline(partition)  # resign again (refused, or a new ISR member)
                    if offline.state == OFFLINE_LEADER:
                        continue
                proposal = self._isr_eligible(partition, partition.isr_proposal(lag_ms, now))
                if proposal is not None:
                    partition.alter_in_flight = True
                    self._tasks.append(asyncio.create_task(self._alter(partition, proposal)))
                self._schedule_isr_check(tp, partition, lag_ms, now)
            self._tasks = [t for t in self._tasks if not t.done()]

    def _isr_eligible(self, partition: Partition, proposal: tuple[int, ...] | None) -> tuple[int, ...] | None:
        """``proposal`` without the followers it adds that are not registered and unfenced in the
        committed metadata (Kafka's isReplicaIsrEligible): the controller would refuse them with
        INELIGIBLE_REPLICA. A killed follower's last fetches keep it "caught up" for
        replica.lag.time.max.ms, so without this every leader would re-propose it each tick until it
        comes back, one refused AlterPartition round after another. None: nothing left to ask."""
        if proposal is None:
            return None
        brokers = self.view.brokers
        kept = tuple(r for r in proposal if r in partition.isr
                     or (r in brokers and not brokers[r].fenced))
        return kept if kept != tuple(partition.isr) else None

    def _schedule_isr_check(self, tp: TP, partition: Partition, lag_ms: int, now: float) -> None:
        """When ``partition`` needs its next ISR check. A follower leaves the ISR only once not
        caught up for ``lag_ms``, so a leader with a full ISR waits until the oldest caught-up
        time of its followers is that old (caught-up times only move forward). A leader short
        of replicas is checked every tick (a follower may join at any fetch); a follower, or a
        leader with an AlterPartition in flight, not until metadata or the answer comes."""
        if not partition.is_leader or partition.alter_in_flight:
            return
        if len(partition.isr) < len(partition.replicas):
            self._isr_watch.add(tp)
            return
        caught_up = [partition.followers[r].last_caught_up_ms if r in partition.followers else 0.0
                     for r in partition.isr if r != self.broker_id]
        if not caught_up:
            return  # the only replica: nobody to drop or add
        deadline = min(caught_up) + lag_ms
        if deadline <= now:  # lagging, but not proposed (refused): ask again next tick
            self._isr_watch.add(tp)
            return
        self._isr_deadlines[tp] = deadline
        heapq.heappush(self._isr_heap, (deadline, tp))

    async def _alter(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        epoch = partition.leader_epoch
        try:
            await self.alter_partition(partition, new_isr)
        except RaftkaError as error:
            log.info("%s: AlterPartition to %s refused: %s", partition.name, list(new_isr), error)
            await asyncio.sleep(0.2)  # the metadata log brings the state that refused us
        except Exception:
            log.exception("%s: AlterPartition failed", partition.name)
        finally:
            if partition.leader_epoch == epoch:
                partition.alter_in_flight = False
            self._isr_watch.add((partition.topic, partition.index))  # check the outcome next tick

    async def _checkpoint_loop(self) -> None:
        """storage's maintenance: retention, flush.ms, HW checkpoints (on their own interval)."""
        interval_s = min(self.config["replica.high.watermark.checkpoint.interval.ms"], 1000) / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.logs.run_maintenance()
            except Exception:
                log.exception("log maintenance failed")

    def checkpoint_all(self) -> None:
        """Write every log dir's HW checkpoint now."""
        try:
            self.logs.checkpoint_high_watermarks()
        except RaftkaError as error:
            log.warning("HW checkpoint failed: %s", error)

    def delete_stray_logs(self) -> int:
        """Once caught up with the metadata log: delete local logs of partitions this broker no
        longer hosts (topics deleted or moved while it was down)."""
        stray = [(lg.topic, lg.partition) for lg in self.logs.logs()
                 if (lg.topic, lg.partition) not in self.partitions and lg.topic != METADATA_TOPIC]
        for topic, index in stray:
            log.debug("%s-%d: deleting a stray log (not a replica here any more)", topic, index)
            self.logs.delete(topic, index)
        if stray:
            log.info("deleted %s stray log(s) (not replicas here any more): %s", f"{len(stray):,}", _sample(stray))
        return len(stray)

    async def close(self) -> None:
        """Stop fetchers and background tasks; checkpoint HWs."""
        for task in self._tasks:
            task.cancel()
        for fetcher in list(self.fetchers.values()):
            await fetcher.close()
        if self.fetch_sessions is not None:
            self.fetch_sessions.close()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self.checkpoint_all()

    # -- lookups ----------------------------------------------------------------------------------

    def current_leader(self, topic: str, index: int) -> dict:
        """{leader_id, leader_epoch} as committed, for NOT_LEADER_OR_FOLLOWER answers."""
        info = self.view.partition(topic, index)
        if info is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": info.leader, "leader_epoch": info.leader_epoch}

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int | None = None) -> Partition:
        """The partition if this broker leads it (at ``current_leader_epoch`` when given), else a typed error."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            if self.view.partition(topic, index) is None:
                raise UnknownTopicOrPartitionError(f"unknown topic or partition {topic}-{index}",
                                                   topic=topic, partition=index)
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} hosts no replica of {topic}-{index}",
                                           topic=topic, partition=index)
        partition.check_leader(current_leader_epoch)
        return partition

    # -- Produce ------------------------------------------------------------------------------------

    def append(self, topic: str, index: int, records: bytes, acks: int) -> tuple[Partition, Any]:
        """Validate and append one partition's produce payload (no await). Raises typed errors."""
        partition = self.leader_partition(topic, index)
        if not isinstance(records, (bytes, bytearray)) or not records:
            raise errors.CorruptRecordError("records must be non-empty bytes (record batches)",
                                            topic=topic, partition=index)
        # storage validates each header and CRC and max.message.bytes (topic, else the broker's
        # message.max.bytes) before it writes anything.
        try:
            return partition, partition.append_as_leader(bytes(records), acks)
        except errors.KafkaStorageError as error:
            self.storage_failed(partition, error)
            raise

    def storage_failed(self, partition: Partition, error: RaftkaError) -> None:
        """A disk error on ``partition``: tell the broker (it asks to be fenced)."""
        log.error("%s: disk error, this broker gives up its partitions: %s", partition.name, error.message)
        if self.on_storage_error is not None:
            self.on_storage_error(partition, error)

    # -- corrupt replicas: offline, leadership moved, healed (module docstring) -------------------------

    def replica_corrupted(self, partition: Partition, error: LogCorruptedError) -> None:
        """A read of ``partition``'s log met a corrupt batch: take the replica out of service
        (storage logged the ERROR with the file and position)."""
        tp = (partition.topic, partition.index)
        offline = self.offline.get(tp)
        if offline is None:
            offline = self.offline[tp] = OfflineReplica(error.corruption)
            self.corrupt_replicas += 1
            log.warning("%s: replica offline: its log is corrupt from offset %d (%s byte %d)", partition.name,
                        error.corruption.offset, error.corruption.file.name, error.corruption.position)
        else:  # a lower corrupt batch, or corrupt again after the cut (a second disk error)
            offline.corruption = error.corruption
            if offline.state == HEALING:
                offline.state = OFFLINE_LEADER
        self._check_offline(partition)

    def _check_offline(self, partition: Partition) -> None:
        """Move an offline replica on: a leader resigns (or waits for another ISR member), a
        follower heals, a healed follower back in the ISR is online again."""
        tp = (partition.topic, partition.index)
        offline = self.offline[tp]
        if offline.state == HEALING:
            if partition.broker_id in partition.isr and partition.partition_epoch > offline.healed_at_partition_epoch:
                del self.offline[tp]
                self.healed_replicas += 1
                log.info("%s: healed: re-replicated from leader %d and back in the ISR %s", partition.name,
                         partition.leader_id, list(partition.isr))
            return
        if partition.is_leader:
            self._resign(partition, offline)
        elif partition.state is ReplicaState.FOLLOWER and partition.leader_id >= 0:
            self._heal(partition)

    def _resign(self, partition: Partition, offline: OfflineReplica) -> None:
        """Ask the controller to move leadership to the other ISR members (AlterPartition
        without this broker). With nobody else in the ISR the partition stays here: no other
        replica holds every committed record. Retried by the ISR loop until metadata moves it."""
        others = tuple(r for r in partition.isr if r != self.broker_id)
        if not others:
            if offline.state != OFFLINE_ALONE:
                log.warning("%s: corrupt, but no other replica is in the ISR %s: it stays the leader and "
                            "reads from offset %d answer KAFKA_STORAGE_ERROR", partition.name,
                            list(partition.isr), offline.corruption.offset)
            offline.state = OFFLINE_ALONE
            return
        offline.state = OFFLINE_LEADER
        if partition.alter_in_flight:
            return  # the ISR loop asks again once the answer is in
        log.warning("%s: corrupt: asking the controller to move leadership to the ISR %s", partition.name,
                    list(others))
        partition.alter_in_flight = True
        self._tasks.append(asyncio.get_running_loop().create_task(self._alter(partition, others)))

    def _heal(self, partition: Partition) -> None:
        """Not the leader any more: cut the log after its last good batch and fetch the rest
        from the leader (the replica fetcher, as for any follower)."""
        tp = (partition.topic, partition.index)
        offline = self.offline[tp]
        if offline.state == HEALING:
            return
        before = partition.log.log_end_offset
        try:
            partition.log.truncate_at_corruption()
        except RaftkaError as error:
            log.error("%s: could not cut the corrupt log: %s", partition.name, error.message)
            return
        offline.state = HEALING
        offline.healed_at_partition_epoch = partition.partition_epoch
        self.truncations += 1
        log.warning("%s: healing: log cut from %d to %d (the last good batch); re-replicating from leader %d",
                    partition.name, before, partition.log.log_end_offset, partition.leader_id)

    # -- Fetch --------------------------------------------------------------------------------------

    def replica_fetch_refusal(self, replica_id: int, listener: str, principal: str) -> str | None:
        """Why a replica Fetch (``replica_id`` >= 0) that came in on ``listener`` as ``principal``
        is refused, or None to take it. When brokers log in to each other (the inter-broker
        listener is SASL_*), a follower is taken only on that listener and only authenticated:
        a follower's fetch offsets move the high watermark and the ISR, so an anonymous one on
        a client listener could claim records as replicated that no follower holds. Kafka
        asks for ClusterAction on the cluster; with no authorizer yet, the listener stands in."""
        if self.peer_sasl is None or (listener == self.inter_broker_listener and principal != ANONYMOUS):
            return None
        return (f"replica_id {replica_id} on listener {listener} as {principal}: replicas fetch only on the "
                f"inter-broker listener {self.inter_broker_listener}, logged in")

    def read_partition(self, replica_id: int, request: dict, topic: str, first_pass: bool,
                       budget: int, session: FetchSession | None = None, *, min_one_batch: bool = True) -> dict:
        """One partition's Fetch answer (records may be empty). ``first_pass``: record a
        follower's position (once per request); ``session``: the fetch session it came through;
        ``min_one_batch``: give the first batch even when it is larger than ``budget``."""
        index = request.get("partition")
        out = {"partition_index": index, "error_code": errors.NONE, "error_message": None, "high_watermark": -1,
               "last_stable_offset": -1, "log_start_offset": -1, "diverging_epoch": None, "current_leader": None,
               "records": b""}
        try:
            partition = self.leader_partition(topic, index, request.get("current_leader_epoch"))
            fetch_offset = request.get("fetch_offset", 0)
            log_ = partition.log
            out["log_start_offset"] = log_.log_start_offset
            if replica_id >= 0 and replica_id not in partition.replicas:
                # Before anything else: a stranger gets no records and no diverging epoch either.
                # Kafka's Fetch answer has no error message: the leader says it, once a minute.
                message = (f"broker {replica_id} is not a replica of {partition.name} (replicas "
                           f"{list(partition.replicas)}): its fetch answered NOT_LEADER_OR_FOLLOWER")
                refused_fetch_log.warning(f"not-a-replica-{replica_id}-{partition.name}", "%s", message)
                raise NotLeaderOrFollowerError(message, topic=topic, partition=index)
            diverging = partition.diverging_epoch(request.get("last_fetched_epoch", -1), fetch_offset)
            if diverging is not None:
                out.update(diverging_epoch=diverging, high_watermark=log_.high_watermark,
                           last_stable_offset=log_.high_watermark)
                return out
            if replica_id >= 0:
                if first_pass:
                    partition.record_follower_fetch(replica_id, fetch_offset, session=session,
                                                    log_start_offset=request.get("log_start_offset", -1))
                max_offset = None
            else:
                max_offset = log_.high_watermark
            hw = log_.high_watermark
            out.update(high_watermark=hw, last_stable_offset=hw)
            limit = log_.log_end_offset if max_offset is None else max_offset
            if fetch_offset == limit or (max_offset is not None and limit < fetch_offset <= log_.log_end_offset):
                return out
            throttled = replica_id >= 0 and (topic, index) in self.leader_quota.throttled
            if throttled and replica_id not in partition.isr and self.leader_quota.is_exceeded():
                self.leader_quota.held_back_total += 1
                return out  # Kafka's leader: no records for a throttled replica over its quota this round
            max_bytes = max(0, min(request.get("partition_max_bytes", 1 << 20), budget))
            try:
                data = log_.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
            finally:
                known = self.offline.get((topic, index))
                if log_.corruption is not None and (known is None or known.corruption != log_.corruption):
                    # Met by this read (raised, or found after the good batches it returns).
                    self.replica_corrupted(partition, LogCorruptedError(log_.corruption, topic=topic,
                                                                        partition=index))
            out["records"] = bytes(data.records) if not isinstance(data.records, bytes) else data.records
            if throttled:  # counted as read, so the next partitions of this answer see it
                self.leader_quota.record(len(out["records"]))
        except RaftkaError as error:
            out.update(error_code=error.code, error_message=error.message)
            if error.code in (errors.NOT_LEADER_OR_FOLLOWER, errors.FENCED_LEADER_EPOCH, errors.UNKNOWN_LEADER_EPOCH):
                out["current_leader"] = self.current_leader(topic, index)
        return out

    def session_cache(self) -> FetchSessionCache:
        """The fetch sessions here, made at the first use (max.incremental.fetch.session.cache.slots)."""
        if self.fetch_sessions is None:
            self.fetch_sessions = FetchSessionCache(self.config["max.incremental.fetch.session.cache.slots"],
                                                    clock=self.clock)
        return self.fetch_sessions

    async def fetch(self, body: dict) -> dict:
        """A Fetch answer; waits up to max_wait_ms for min_bytes (long poll). A fetch in a fetch
        session (KIP-227, broker/fetch_session.py) reads and answers only partitions with news."""
        # The body was decoded against its declaration at the boundary (Kafka's FetchRequest, as
        # followers and clients send it): the values are integers of the declared types; their
        # ranges are clamped here.
        replica_id = body.get("replica_id", -1)
        max_wait_ms = min(max(body.get("max_wait_ms", 0), 0), FETCH_WAIT_MS_MAX)
        min_bytes = max(body.get("min_bytes", 1), 0)
        max_bytes = min(max(body.get("max_bytes", self.config["fetch.max.bytes"]), 0),
                        self.config["fetch.max.bytes"])
        topics = body.get("topics") or []
        deadline = time.monotonic() + max_wait_ms / 1000
        session_id = body.get("session_id", INVALID_SESSION_ID)
        epoch = body.get("session_epoch", FINAL_EPOCH)
        named: dict[TP, None] = {}  # the partitions the request names, in its order
        full = epoch in (FINAL_EPOCH, INITIAL_EPOCH)
        if full:  # closes the session it names; epoch 0 asks for a new one
            session = None
            if session_id != INVALID_SESSION_ID or epoch == INITIAL_EPOCH:
                size = sum(len(topic.get("partitions") or ()) for topic in topics)
                session = self.session_cache().full(session_id, epoch, replica_id, size)
            if session is None:
                return await self._fetch_without_session(replica_id, topics, min_bytes, max_bytes, deadline)
        else:
            try:
                session = self.session_cache().incremental(session_id, epoch, replica_id)
            except (errors.FetchSessionIdNotFoundError, errors.InvalidFetchSessionEpochError) as error:
                log.debug("Fetch from %s: %s", replica_id, error)
                return {"error_code": error.code, "session_id": INVALID_SESSION_ID, "responses": [],
                        "throttle_time_ms": 0}
        for topic in topics:
            name = topic.get("topic")
            for request in topic.get("partitions") or ():
                tp = (name, request.get("partition"))
                session.add(tp, request)
                named[tp] = None
        if not full:
            for tp in forgotten(body):  # after the additions, as Kafka's session update
                session.forget(tp)
        return await self._fetch_in_session(session, named, full, replica_id, min_bytes, max_bytes, deadline)

    async def _fetch_in_session(self, session: FetchSession, named: dict[TP, None], full: bool, replica_id: int,
                                min_bytes: int, max_bytes: int, deadline: float) -> dict:
        """Read the partitions the request names and those with news (``pending``), in the
        session's order; answer those whose answer is news (every one for a ``full`` fetch). Only
        the first partition with records may exceed ``max_bytes``; those that give records move to
        the end of the order (fairness, broker/fetch_session.py). The long poll waits on the
        session: its partitions tell it of news."""
        answers: dict[TP, dict] = {}
        total = 0
        # A full fetch made the session: its order is the request's.
        to_read = list(named) if full else session.in_order(session.pending.union(named))
        first_pass = True
        while True:
            for tp in to_read:
                cached = session.partitions.get(tp)
                if cached is None:
                    continue  # named and forgotten by the same request
                session.attach(tp, cached, self.partitions.get(tp))
                is_named = tp in named
                previous = answers.get(tp)  # read again after a wake-up: the new answer replaces it
                others = total - len(previous["records"]) if previous is not None else total
                budget = max(0, max_bytes - others)
                answer = self.read_partition(replica_id, cached.request, tp[0], first_pass and is_named, budget,
                                             session=session, min_one_batch=others == 0)
                if (not answer["records"] and (others or (replica_id >= 0 and tp in self.leader_quota.throttled))
                        and self._has_more(replica_id, tp, cached.request, answer)):
                    # max_bytes ran out before it, or the throttle held it back (broker/quota.py): read
                    # it at the next fetch, which does not name it (its entry did not change)
                    session.pending.add(tp)
                else:
                    session.pending.discard(tp)  # what the read itself changed (our HW) is in the answer
                if full or cached.is_news(answer, is_named):
                    total = others + len(answer["records"])
                    answers[tp] = answer
            first_pass = False
            remaining = deadline - time.monotonic()
            errored = any(a["error_code"] != errors.NONE or a["diverging_epoch"] for a in answers.values())
            if total >= min_bytes or remaining <= 0 or errored or not session.partitions:
                break
            loop = asyncio.get_running_loop()
            woken = session.waiter()
            timer = loop.call_later(remaining, _wake, woken)
            try:
                await woken
            finally:
                timer.cancel()
                session.stop_waiting()
            if session.closed:
                break  # closed by a newer full fetch of the same fetcher, or evicted
            to_read = session.in_order(session.pending)
        responses: dict[str, list[dict]] = {}
        for tp, answer in answers.items():
            cached = session.partitions.get(tp)
            if cached is not None:
                cached.sent(answer)
                if answer["records"]:
                    session.to_end(cached)
            responses.setdefault(tp[0], []).append(answer)
        return {"error_code": errors.NONE, "session_id": INVALID_SESSION_ID if session.closed else session.id,
                "responses": [{"topic": name, "partitions": parts} for name, parts in responses.items()],
                "throttle_time_ms": 0}

    def _has_more(self, replica_id: int, tp: TP, request: dict, answer: dict) -> bool:
        """Whether ``answer`` (without records) left records the fetcher may read: what was left of
        ``max_bytes`` did not hold the next batch."""
        partition = self.partitions.get(tp)
        if partition is None or answer["error_code"] != errors.NONE or answer["diverging_epoch"]:
            return False
        log_ = partition.log
        return request.get("fetch_offset", 0) < (log_.log_end_offset if replica_id >= 0 else log_.high_watermark)

    async def _fetch_without_session(self, replica_id: int, topics: list[dict], min_bytes: int, max_bytes: int,
                                     deadline: float) -> dict:
        """A full fetch without a session: every partition it names, read again at each wake-up."""
        first_pass = True
        while True:
            budget = max_bytes
            responses = []
            total = 0
            waits = []
            for topic in topics:
                name = topic.get("topic")
                answers = []
                for request in topic.get("partitions") or []:
                    answer = self.read_partition(replica_id, request, name, first_pass, budget)
                    size = len(answer["records"])
                    total += size
                    budget = max(0, budget - size)
                    answers.append(answer)
                    partition = self.partitions.get((name, request.get("partition")))
                    if partition is not None:
                        waits.append(partition)
                responses.append({"topic": name, "partitions": answers})
            first_pass = False
            remaining = deadline - time.monotonic()
            errored = any(a["error_code"] != errors.NONE or a["diverging_epoch"] for r in responses
                          for a in r["partitions"])
            if total >= min_bytes or remaining <= 0 or errored or not waits:
                return {"responses": responses, "throttle_time_ms": 0}
            # One future that the partitions complete themselves (a follower's fetch at the next
            # append, a consumer's at the next HW move) and one timer: no task per partition and
            # no asyncio.wait, so the answer leaves one turn of the loop after the wake-up.
            loop = asyncio.get_running_loop()
            woken = loop.create_future()
            for partition in waits:
                partition.add_fetch_waiter(woken, replica_id >= 0)
            timer = loop.call_later(remaining, _wake, woken)
            try:
                await woken
            finally:
                timer.cancel()
                for partition in waits:
                    partition.remove_fetch_waiter(woken)

    # -- ListOffsets, OffsetsForLeaderEpoch ---------------------------------------------------------

    def list_offset(self, topic: str, request: dict) -> dict:
        """One partition's ListOffsets answer (-1 latest = HW, -2 earliest, else by timestamp)."""
        index = request.get("partition_index")
        out = {"partition_index": index, "error_code": errors.NONE, "timestamp": -1, "offset": -1,
               "leader_epoch": -1}
        try:
            partition = self.leader_partition(topic, index, request.get("current_leader_epoch"))
            timestamp = request.get("timestamp", -1)
            log_ = partition.log
            out["leader_epoch"] = partition.leader_epoch
            if log_.high_watermark < partition.leader_epoch_start_offset:
                # A new leader whose HW has not yet reached the start of its epoch would answer
                # an offset below what the previous leader already gave out (Kafka does the same).
                raise errors.for_code(errors.OFFSET_NOT_AVAILABLE)(
                    f"{partition.name}: the high watermark {log_.high_watermark} has not caught up with the "
                    f"leader epoch start {partition.leader_epoch_start_offset} yet; retry",
                    topic=topic, partition=index)
            if timestamp == -1:
                out["offset"] = log_.high_watermark
            elif timestamp == -2:
                out["offset"] = log_.log_start_offset
            else:
                try:
                    found = log_.offset_for_timestamp(timestamp)
                except LogCorruptedError as error:
                    self.replica_corrupted(partition, error)
                    raise
                if found is not None:
                    offset, ts = (found if isinstance(found, tuple) else (found.offset, found.timestamp))
                    if offset < log_.high_watermark:
                        out.update(offset=offset, timestamp=ts)
        except RaftkaError as error:
            out.update(error_code=error.code, error_message=error.message)
            if error.code in (errors.NOT_LEADER_OR_FOLLOWER, errors.FENCED_LEADER_EPOCH):
                out["current_leader"] = self.current_leader(topic, index)
        return out

    def offsets_for_leader_epoch(self, topic: str, request: dict) -> dict:
        """One partition's OffsetsForLeaderEpoch answer: the leader-epoch cache's, as Kafka gives
        it (storage/epoch_cache.py), (-1, -1) included for an epoch newer than ours or an empty
        cache: Kafka's consumer then cannot place the divergence and applies auto_offset_reset.
        (A follower's Fetch takes its diverging epoch from Partition.diverging_epoch instead.)"""
        index = request.get("partition")
        out = {"partition": index, "error_code": errors.NONE, "leader_epoch": -1, "end_offset": -1}
        try:
            partition = self.leader_partition(topic, index, request.get("current_leader_epoch"))
            epoch, end_offset = partition.log.leader_epoch_cache.end_offset_for(request.get("leader_epoch", -1))
            out.update(leader_epoch=epoch, end_offset=end_offset)
        except RaftkaError as error:
            out.update(error_code=error.code, error_message=error.message)
        return out

    # -- status ------------------------------------------------------------------------------------

    def is_caught_up(self) -> bool:
        """Every follower replica we host is in the ISR (as committed)."""
        return all(p.broker_id in p.isr for p in self.partitions.values() if p.state is ReplicaState.FOLLOWER)
