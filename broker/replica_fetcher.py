"""Followers pull from leaders: one fetcher task per leader broker, for every partition this
broker follows there (Kafka's ReplicaFetcherThread, on asyncio).

Each round sends one Fetch, in Kafka's wire protocol at v12 (``KAFKA_VERSIONS``), as a Kafka
broker's follower does: ``replica_id`` = this broker's id, topics by name, and per partition its
log end offset as ``fetch_offset``, the leader epoch it believes in (``current_leader_epoch``)
and the epoch of its last batch (``last_fetched_epoch``), in a fetch session (KIP-227, served by
broker/fetch_session.py): the first round (session_id 0, epoch 0) is a full fetch naming every
partition, and its answer names the session; later rounds are incremental: they name only the
partitions whose entry changed (we appended, truncated, or the leader epoch moved) or that were
added, and forget the removed ones (``forgotten_topics_data``). Their answers carry only the
partitions with news; the others are unchanged, and no work is done for them here. Only
partitions added, answered, or not fetchable yet are looked at again (``_changed``). An
answer of FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH (the leader restarted,
evicted the session, or a request was lost), and any failed round, start a new session with a
full fetch. The leader answers records from there
(whole batches, as bytes: never decoded or re-encoded on the way), or a ``diverging_epoch`` when
our history left its own: then we truncate to where they agree (``min(leader's end offset of that
epoch, ours)``) and fetch again: truncation by leader epoch, never by high watermark alone. After
an append the follower's HW = min(leader's HW, its log end).

The replication throttle (broker/quota.py): while this broker's follower quota is exceeded, the
throttled partitions not in the ISR are left out of the fetches (``_held``), as Kafka's follower
does; the others keep flowing. In a session, a partition an incremental fetch does not name stays
in the session and the leader keeps answering its news, so leaving one out means forgetting it
(``forgotten_topics_data``); once the quota allows, it is named again with its entry, as a
partition added. The records of every throttled partition are counted, in the ISR or not.

When inter.broker.listener.name is SASL_*, the connection logs in first
(``ReplicaManager.peer_sasl``). A refused login (a wrong password, or a credential not created
yet) or a refused replica Fetch is retried with the connection's reconnect backoff and the
fetcher's, and logged at most once a minute per leader: replication resumes by itself once the
credential exists.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import RaftkaError
from raftka.common.ratelog import RateLimitedLog
from raftka.broker.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from raftka.broker.network import PeerConnection
from raftka.broker.partition import Partition, ReplicaState

if TYPE_CHECKING:
    from raftka.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
# A leader refusing our login (or our replica Fetch): one line per leader a minute (the fetcher
# retries every backoff, and the cause is a config or a credential, not the network).
refused_log = RateLimitedLog(log)
REFUSED_ERRORS: Final = frozenset({errors.SASL_AUTHENTICATION_FAILED, errors.UNSUPPORTED_SASL_MECHANISM,
                                   errors.ILLEGAL_SASL_STATE, errors.CLUSTER_AUTHORIZATION_FAILED})

# What a follower sends in Kafka's wire protocol, at which version. Fetch v12: the first with
# last_fetched_epoch and diverging_epoch (truncation without OffsetsForLeaderEpoch), the last
# that names topics (v13+ name them by topic id).
KAFKA_VERSIONS: Final[dict[int, int]] = {ApiKey.FETCH: 12}
# Kafka's answer leaves diverging_epoch out when there is none: it decodes as this default.
NO_DIVERGING_EPOCH: Final = {"epoch": -1, "end_offset": -1}
REQUEST_TIMEOUT_MARGIN_MS = 5000


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker (module docstring)."""
    def __init__(self, manager: "ReplicaManager", leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: set[tuple[str, int]] = set()
        self._wake = asyncio.Event()
        self._closed = False
        self._connection: PeerConnection | None = None
        self._address: str | None = None
        self.task: asyncio.Task | None = None
        self.truncations = 0
        # The fetch session at the leader: its id (0: none yet) and the epoch of our next fetch
        # (0: a full fetch that asks for a new session, closing session_id if any).
        self.session_id = INVALID_SESSION_ID
        self.session_epoch = INITIAL_EPOCH
        self._in_session: dict[tuple[str, int], dict] = {}  # tp -> the entry the leader holds for it
        self._changed: set[tuple[str, int]] = set()  # partitions whose entry may differ from it
        self._forget: set[tuple[str, int]] = set()  # removed partitions the leader's session holds
        self._held: set[tuple[str, int]] = set()  # left out by the throttle: looked at again every round

    def add(self, tp: tuple[str, int]) -> None:
        """Start fetching ``tp`` from this leader."""
        self.partitions.add(tp)
        self._forget.discard(tp)
        self._changed.add(tp)
        self._wake.set()

    def remove(self, tp: tuple[str, int]) -> None:
        """Stop fetching ``tp``."""
        self.partitions.discard(tp)
        self._changed.discard(tp)
        self._held.discard(tp)
        if self._in_session.pop(tp, None) is not None:
            self._forget.add(tp)

    def _new_session(self) -> None:
        """The next fetch is a full one that replaces the session (its state at the leader is not
        known, or the leader has none)."""
        self.session_epoch = INITIAL_EPOCH

    def start(self) -> None:
        """Run the fetch loop as a task."""
        self.task = asyncio.create_task(self.run(), name=f"replica-fetcher-{self.leader_id}")

    async def close(self) -> None:
        """Stop the loop and close the connection."""
        self._closed = True
        self._wake.set()
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass
        if self._connection is not None:
            await self._connection.close()

    async def _connection_for_leader(self) -> PeerConnection | None:
        address = self.manager.endpoint_of(self.leader_id)
        if address is None:
            return None
        if self._connection is None or self._address != address:
            if self._connection is not None:
                await self._connection.close()
            self._connection = PeerConnection(address, client_id=f"broker-{self.manager.broker_id}-fetcher",
                                              max_frame_bytes=self.manager.config["socket.request.max.bytes"],
                                              kafka_versions=KAFKA_VERSIONS, ssl=self.manager.peer_ssl,
                                              sasl=self.manager.peer_sasl)
            self._address = address
        return self._connection

    async def run(self) -> None:
        """Fetch rounds until closed; back off after a failed round."""
        config = self.manager.config
        backoff_s = config["replica.fetch.backoff.ms"] / 1000
        while not self._closed:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                progressed = await self.fetch_once()
            except RaftkaError as error:
                if error.code in REFUSED_ERRORS:
                    refused_log.warning(f"refused-{self.leader_id}", "leader %d refused this broker: %s",
                                        self.leader_id, error.message)
                else:
                    log.debug("fetch from leader %d failed: %s", self.leader_id, error)
                progressed = False
            except OSError as error:
                log.debug("fetch from leader %d failed: %s", self.leader_id, error)
                progressed = False
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug: keep the fetcher alive, say so once per round
                log.exception("fetch from leader %d failed", self.leader_id)
                progressed = False
            if not progressed:
                await asyncio.sleep(backoff_s)

    def _fetchable(self, tp: tuple[str, int]) -> Partition | None:
        partition = self.manager.partitions.get(tp)
        if partition is None or partition.state is not ReplicaState.FOLLOWER or partition.leader_id != self.leader_id:
            return None
        return partition

    def _entries(self, partition_max_bytes: int) -> dict[str, list[dict]] | None:
        """This round's partition entries by topic (all of them for a full fetch, else those that
        changed), or None when there is nothing to ask. Updates what the session holds."""
        full = self.session_epoch == INITIAL_EPOCH
        if full:
            self._in_session = {}
            self._forget = set()
            candidates, self._changed = self.partitions, set()
        else:
            candidates, self._changed = self._changed, set()
            if self._held:
                candidates = candidates | self._held
        self._held = set()
        quota = self.manager.follower_quota
        over = bool(quota.throttled) and quota.is_exceeded()
        if over and not full:  # throttled partitions the session holds and no candidate: out too
            throttled = quota.throttled
            small, large = ((throttled, self._in_session) if len(throttled) < len(self._in_session)
                            else (self._in_session.keys(), throttled))
            candidates = candidates | {tp for tp in small if tp in large}
        topics: dict[str, list[dict]] = {}
        for tp in sorted(candidates):
            partition = self._fetchable(tp)
            if partition is None:  # not (yet) following this leader: look again next round
                self._changed.add(tp)
                if self._in_session.pop(tp, None) is not None:
                    self._forget.add(tp)
                continue
            if over and tp in quota.throttled and self.manager.broker_id not in partition.isr:
                self._held.add(tp)  # Kafka's follower leaves it out of the fetch while over quota
                quota.held_back_total += 1
                if self._in_session.pop(tp, None) is not None:
                    self._forget.add(tp)
                continue
            entry = fetch_request_for(partition, partition_max_bytes)
            if full or self._in_session.get(tp) != entry:
                self._in_session[tp] = entry
                topics.setdefault(tp[0], []).append(entry)
        if not self._in_session and not self._forget:
            return None
        return topics

    async def fetch_once(self) -> bool:
        """One Fetch round; False when nothing could be asked or every partition answered failed."""
        config = self.manager.config
        connection = await self._connection_for_leader()
        if connection is None:
            return False
        full = self.session_epoch == INITIAL_EPOCH
        topics = self._entries(config["replica.fetch.max.bytes"])
        if topics is None:
            if self._held:  # every partition waits for the throttle: not a failure
                await asyncio.sleep(self.manager.follower_quota.delay_s())
                return True
            return False
        forget, self._forget = self._forget, set()
        forgotten: dict[str, list[int]] = {}
        for topic, index in sorted(forget):
            forgotten.setdefault(topic, []).append(index)
        wait_ms = config["replica.fetch.wait.max.ms"]
        body = {"replica_id": self.manager.broker_id, "max_wait_ms": wait_ms,
                "min_bytes": config["replica.fetch.min.bytes"], "max_bytes": config["replica.fetch.response.max.bytes"],
                "isolation_level": 0, "session_id": self.session_id, "session_epoch": self.session_epoch,
                "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()],
                "forgotten_topics_data": [{"topic": t, "partitions": parts} for t, parts in forgotten.items()]}
        try:
            _, out = await connection.request(ApiKey.FETCH, body, timeout_ms=wait_ms + REQUEST_TIMEOUT_MARGIN_MS)
        except BaseException:
            self._new_session()  # whether the leader took this round is unknown
            raise
        code = out["error_code"]  # Kafka's answers carry a whole-request error in the body
        if code in (errors.FETCH_SESSION_ID_NOT_FOUND, errors.INVALID_FETCH_SESSION_EPOCH):
            log.info("fetch session %d at leader %d: %s; starting a new one", self.session_id, self.leader_id,
                     errors.name_of(code))
            if code == errors.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self._new_session()
            return True  # the full fetch goes out at once
        if code != errors.NONE:
            self._new_session()
            raise errors.error_for(code, f"Fetch from leader {self.leader_id}: {errors.name_of(code)}")
        if out["session_id"] == INVALID_SESSION_ID:  # declined (no slot), or closed by the leader
            self.session_id = INVALID_SESSION_ID
            self._new_session()
        elif full:
            self.session_id, self.session_epoch = out["session_id"], next_epoch(INITIAL_EPOCH)
        else:
            self.session_epoch = next_epoch(self.session_epoch)
        answered = ok = False
        quota = self.manager.follower_quota
        for topic in out["responses"]:
            for answer in topic["partitions"]:
                tp = (topic["topic"], answer["partition_index"])
                entry = self._in_session.get(tp)
                if entry is None:
                    continue  # removed while the fetch was out
                answered = True
                if answer["records"] and tp in quota.throttled:
                    quota.record(len(answer["records"]))
                if self._take(tp, entry["current_leader_epoch"], answer):
                    ok = True
                self._changed.add(tp)  # appended, truncated, or failed: look at its entry again
        return ok or not answered

    def _take(self, tp: tuple[str, int], epoch: int, answer: dict) -> bool:
        partition = self.manager.partitions.get(tp)
        if partition is None or partition.state is not ReplicaState.FOLLOWER or partition.leader_epoch != epoch:
            return True  # our role changed while the fetch was out: the answer is moot
        try:
            ok, truncated = apply_fetch_answer(partition, answer, self.leader_id)
        except errors.KafkaStorageError as error:
            self.manager.storage_failed(partition, error)
            return False
        if truncated:
            self.truncations += 1
            self.manager.truncations += 1
        return ok


def fetch_request_for(partition: Partition, partition_max_bytes: int) -> dict:
    """A follower's Fetch entry for one partition (Kafka's FetchPartition): from its log end
    offset, with the leader epoch it believes in and the epoch of its last batch."""
    return {"partition": partition.index, "current_leader_epoch": partition.leader_epoch,
            "fetch_offset": partition.log.log_end_offset,
            "last_fetched_epoch": partition.log.leader_epoch_cache.latest_epoch,
            "log_start_offset": partition.log.log_start_offset, "partition_max_bytes": partition_max_bytes}


def diverging_epoch_of(answer: dict) -> dict | None:
    """The answer's ``diverging_epoch`` {epoch, end_offset}, or None when it has none (Kafka's
    default, or None from a leader's ``read_partition`` not yet encoded). An epoch of -1 with an
    end offset is one: the leader has no epoch as old as ours and keeps nothing past that offset."""
    diverging = answer.get("diverging_epoch")
    if diverging is None or diverging == NO_DIVERGING_EPOCH:
        return None
    return diverging


def apply_fetch_answer(partition: Partition, answer: dict, leader_id: int) -> tuple[bool, bool]:
    """Take one partition's Fetch answer from the leader (Kafka's PartitionData): truncate on a
    diverging epoch, else append the records and move the HW. Returns (answer usable, truncated)."""
    code = answer["error_code"]
    if code == errors.OFFSET_OUT_OF_RANGE and answer["log_start_offset"] > partition.log.log_end_offset:
        # Everything we would fetch next is gone from the leader (retention or DeleteRecords
        # while we were away): start over at its log start, as Kafka's follower does.
        leader_start = answer["log_start_offset"]
        log.warning("%s: offset %d is below leader %d's log start %d: starting the log over there",
                    partition.name, partition.log.log_end_offset, leader_id, leader_start)
        partition.log.truncate_fully_and_start_at(leader_start)
        return True, True
    if code != errors.NONE:
        # Fenced / unknown epoch / not leader (or not a replica there): wait for metadata, back off.
        log.debug("%s: fetch from leader %d: %s", partition.name, leader_id, errors.name_of(code))
        return False, False
    diverging = diverging_epoch_of(answer)
    if diverging is not None:
        return True, truncate_to_diverging(partition, diverging, leader_id)
    records = answer["records"]  # null from a leader with nothing to send
    if records:
        partition.log.append_as_follower(records)
    hw = min(answer["high_watermark"], partition.log.log_end_offset)
    if hw > partition.log.high_watermark:
        partition.log.update_high_watermark(hw)
    if records or hw:
        partition._notify()
    # DeleteRecords (or retention) moved the leader's log start: follow it, up to our HW.
    start = min(answer["log_start_offset"], partition.log.high_watermark)
    if start > partition.log.log_start_offset:
        partition.log.delete_records_before(start)
    return True, False


def truncate_to_diverging(partition: Partition, diverging: dict, leader_id: int) -> bool:
    """Truncate to where our history and the leader's agree: min(the leader's end offset of the
    diverging epoch, ours). Never by high watermark. True when records were removed."""
    leader_epoch, leader_end = int(diverging["epoch"]), int(diverging["end_offset"])
    if leader_epoch < 0:
        target = leader_end
    else:
        own_epoch, own_end = partition.end_offset_for_epoch(leader_epoch)
        target = min(leader_end, own_end) if own_epoch >= 0 else partition.log.log_start_offset
    target = max(target, partition.log.log_start_offset)
    if target < partition.log.log_end_offset:
        log.info("%s: truncating from %d to %d (leader %d: epoch %d ends at %d)", partition.name,
                 partition.log.log_end_offset, target, leader_id, leader_epoch, leader_end)
        partition.log.truncate_to(target)
        return True
    # Nothing past the divergence point: forget epochs the leader does not have, so the next
    # fetch's last_fetched_epoch matches its history.
    partition.log.leader_epoch_cache.truncate_from_end(target)
    return False
