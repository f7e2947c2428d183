"""The coordinator's records in the broker's own ``__consumer_offsets`` replicas, and the high
watermarks the lag figures need.

``OffsetsStore`` is what the coordinator and its offset manager write through (tests give them
an in-memory one); ``store_error`` says what a failed write means to a group client.

``ReplicaOffsetsStore.append`` is a Produce with acks=all done inside the broker: the replica
manager validates and appends the batch, then the call waits until the high watermark has passed
it (every ISR member has it). ``load`` replays a partition below its high watermark once that has
reached the start of this leader's epoch, so only committed records are ever loaded.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Protocol

from raftka.broker.group.records import OFFSETS_TOPIC, Loaded, build_batch, replay
from raftka.broker.network import PeerConnection
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import NotLeaderOrFollowerError, RaftkaError

log = logging.getLogger(__name__)

LOAD_POLL_S = 0.02
END_OFFSETS_TIMEOUT_MS = 5000
PEERS_MAX = 256

# What a failed append to __consumer_offsets means to a group client (Kafka's mapping).
STORE_ERRORS = {
    errors.UNKNOWN_TOPIC_OR_PARTITION: errors.COORDINATOR_NOT_AVAILABLE,
    errors.NOT_ENOUGH_REPLICAS: errors.COORDINATOR_NOT_AVAILABLE,
    errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: errors.COORDINATOR_NOT_AVAILABLE,
    errors.REQUEST_TIMED_OUT: errors.COORDINATOR_NOT_AVAILABLE,
    errors.NOT_LEADER_OR_FOLLOWER: errors.NOT_COORDINATOR,
    errors.FENCED_LEADER_EPOCH: errors.NOT_COORDINATOR,
    errors.KAFKA_STORAGE_ERROR: errors.NOT_COORDINATOR,
    errors.MESSAGE_TOO_LARGE: errors.INVALID_COMMIT_OFFSET_SIZE,
    errors.RECORD_LIST_TOO_LARGE: errors.INVALID_COMMIT_OFFSET_SIZE,
}


def store_error(error: RaftkaError) -> int:
    """The error code a group client gets for a failed append (STORE_ERRORS)."""
    return STORE_ERRORS.get(error.code, errors.UNKNOWN_SERVER_ERROR)


class OffsetsStore(Protocol):
    """Where the coordinator's records go: the ``__consumer_offsets`` partitions it leads."""

    async def append(self, partition: int, entries: list[tuple[bytes, bytes | None]], timeout_ms: int) -> int:
        """Append the records with acks=all; the log offset of the first once committed.
        Raises a typed error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT...)."""
        ...

    async def load(self, partition: int, still_current: Callable[[], bool]) -> Loaded:
        """Replay the partition below its high watermark, once that has reached the start of
        this leader's epoch."""
        ...

    def deletes_by_time(self, partition: int) -> bool:
        """Whether the partition's log deletes segments by time (cleanup.policy includes delete:
        a topic created before compaction existed), so live records must be written again
        before that; a compacted one keeps the latest record of every key by itself."""
        ...


class ReplicaOffsetsStore:
    """OffsetsStore over the broker's ReplicaManager (see the module docstring)."""

    def __init__(self, replicas: Any, load_buffer_bytes: int) -> None:
        self.replicas = replicas
        self.load_buffer_bytes = load_buffer_bytes

    async def append(self, partition: int, entries: list[tuple[bytes, bytes | None]], timeout_ms: int) -> int:
        """Append with acks=all; the first record's offset once below the high watermark."""
        deadline = time.monotonic() + timeout_ms / 1000
        replica, info = self.replicas.append(OFFSETS_TOPIC, partition, build_batch(entries), -1)
        code = await replica.wait_for_replication(info.last_offset + 1, deadline)
        if code != errors.NONE:
            raise errors.error_for(code, f"{OFFSETS_TOPIC}-{partition}: {errors.name_of(code)}")
        return info.first_offset

    def deletes_by_time(self, partition: int) -> bool:
        replica = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
        return replica is None or replica.log.config.delete

    async def load(self, partition: int, still_current: Callable[[], bool]) -> Loaded:
        """Everything below the high watermark, once it has reached this leader epoch's start."""
        while True:
            if not still_current():
                raise asyncio.CancelledError()
            replica = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
            if replica is None or not replica.is_leader:
                raise NotLeaderOrFollowerError(f"not the leader of {OFFSETS_TOPIC}-{partition}")
            if replica.high_watermark >= replica.leader_epoch_start_offset:
                break
            await asyncio.sleep(LOAD_POLL_S)
        log_ = replica.log
        end = replica.high_watermark
        offset = log_.log_start_offset
        loaded = Loaded({}, {}, partition=partition)
        while offset < end and still_current():
            data = log_.read(offset, self.load_buffer_bytes, max_offset=end, min_one_batch=True)
            if not data.records:
                break
            next_offset = replay(loaded, bytes(data.records))
            if next_offset <= offset:
                break
            offset = next_offset
            await asyncio.sleep(0)  # a big partition must not stall the broker's loop
        return loaded


class EndOffsets:
    """High watermarks of data partitions, for group lag: read locally where this broker leads,
    else asked of the leader with ListOffsets (one connection per broker, reused)."""

    def __init__(self, replicas: Any, broker_id: int, max_frame_bytes: int) -> None:
        self.replicas = replicas
        self.broker_id = broker_id
        self.max_frame_bytes = max_frame_bytes
        self._peers: dict[int, PeerConnection] = {}

    async def lookup(self, tps: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """{(topic, partition): high watermark} for those whose leader answered."""
        out: dict[tuple[str, int], int] = {}
        remote: dict[int, list[tuple[str, int]]] = {}
        view = self.replicas.view
        for tp in tps:
            local = self.replicas.partitions.get(tp)
            if local is not None and local.is_leader:
                out[tp] = local.high_watermark
                continue
            info = view.partition(*tp)
            if info is not None and info.leader >= 0:
                remote.setdefault(info.leader, []).append(tp)
        results = await asyncio.gather(*(self._ask(node, parts) for node, parts in remote.items()),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, dict):
                out.update(result)
        return out

    async def _ask(self, node: int, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        address = self.replicas.endpoint_of(node)
        if address is None:
            return {}
        peer = self._peers.get(node)
        if peer is None or peer.address != address:
            if len(self._peers) >= PEERS_MAX:
                await self._peers.pop(next(iter(self._peers))).close()
            peer = self._peers[node] = PeerConnection(address, client_id=f"broker-{self.broker_id}-lag",
                                                      max_frame_bytes=self.max_frame_bytes, ssl=self.replicas.peer_ssl,
                                                      sasl=self.replicas.peer_sasl)
        topics: dict[str, list[dict]] = {}
        for topic, index in tps:
            topics.setdefault(topic, []).append({"partition_index": index, "current_leader_epoch": -1,
                                                 "timestamp": -1})
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}
        try:
            code, answer = await peer.request(ApiKey.LIST_OFFSETS, body, timeout_ms=END_OFFSETS_TIMEOUT_MS)
        except RaftkaError as error:
            log.debug("end offsets from broker %d failed: %s", node, error)
            return {}
        out = {}
        if code == errors.NONE:
            for t in answer.get("topics") or []:
                for p in t.get("partitions") or []:
                    if not p.get("error_code") and p.get("offset", -1) >= 0:
                        out[(t["name"], p["partition_index"])] = p["offset"]
        return out

    async def close(self) -> None:
        """Close the connections to other brokers."""
        for peer in self._peers.values():
            await peer.close()
        self._peers.clear()
