"""The replication path on Kafka's wire protocol: a follower's ReplicaFetcher sends Kafka's Fetch
v12 to a leader's listener, and the leader's Kafka path (BrokerServer.handle with the Fetch shims
of broker/kafka_wire.py, then ReplicaManager.fetch) treats it as a follower's fetch: records up to
the log end, the follower's position recorded (HW, ISR expansion), a diverging epoch that survives
Kafka's encoding, and a clear refusal for a broker that is not a replica.

Each test runs a real BrokerServer's request handler (not started: no controller) on a real
listener, and a real ReplicaManager + ReplicaFetcher for the follower, over storage Logs in
tmp_path, on one asyncio loop. Every request the leader's listener reads is recorded, so a
follower that sent another API or version fails the test.
"""
from __future__ import annotations

import asyncio
import logging
import time

from raftka.broker.metadata import PartitionInfo
from raftka.broker.partition import Partition
from raftka.broker.replica_fetcher import ReplicaFetcher
from raftka.broker.replica_manager import ReplicaManager
from raftka.broker.server import BrokerServer
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.messages import BROKER_API
from raftka.common.records import BatchBuilder
from raftka.common.server import Server
from raftka.common.server_config import server_config
from raftka.common.transport import Connection
from raftka.storage.log import Log

TOPIC = "t"
LEADER, FOLLOWER, STRANGER = 1, 2, 9
WAIT_MS = 50  # replica.fetch.wait.max.ms: a fetch at the log end is answered after this long


def _config(node_id: int, log_dir) -> object:
    return server_config({"process.roles": "broker", "node.id": str(node_id),
                          "controller.quorum.voters": "100@127.0.0.1:1",
                          "controller.quorum.bootstrap.servers": "127.0.0.1:1",
                          "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir),
                          "replica.fetch.wait.max.ms": WAIT_MS, "replica.fetch.backoff.ms": 10})


def _batch(*values: bytes) -> bytes:
    builder = BatchBuilder()
    for value in values:
        builder.append(int(time.time() * 1000), None, value)
    return builder.build()


def _info(leader: int, epoch: int, isr: tuple[int, ...],
          replicas: tuple[int, ...] = (LEADER, FOLLOWER)) -> PartitionInfo:
    return PartitionInfo(replicas=replicas, isr=isr, leader=leader, leader_epoch=epoch, partition_epoch=epoch)


def _records(partition: Partition) -> bytes:
    log = partition.log
    return bytes(log.read(log.log_start_offset, 1 << 20, min_one_batch=True).records)


class Leader:
    """A BrokerServer's request handler on a listener, with the Kafka APIs a broker declares."""

    def __init__(self, tmp_path) -> None:
        self.broker = BrokerServer(_config(LEADER, tmp_path / "leader"), say=lambda line: None, http=False)
        self.requests: list[tuple[int, int, dict]] = []  # (api key, version, body)
        self.server: Server | None = None

    def host(self, info: PartitionInfo, min_insync_replicas: int = 1) -> Partition:
        replicas = self.broker.replicas
        partition = Partition(TOPIC, 0, LEADER, self.broker.logs.get_or_create(TOPIC, 0, {}),
                              min_insync_replicas=min_insync_replicas)
        partition.apply_metadata(info)
        replicas.partitions[(TOPIC, 0)] = partition
        return partition

    async def handle(self, request):
        self.requests.append((request.api_key, request.api_version, request.body))
        return await self.broker.handle(request)

    async def start(self) -> str:
        handlers = self.broker.handlers
        self.server = Server(self.handle, kafka_api={k: BROKER_API[k] for k in handlers})
        await self.server.start("127.0.0.1", 0)
        return f"127.0.0.1:{self.server.port}"

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
        self.broker.logs.close()


def _follower(tmp_path, broker_id: int, leader_address: str) -> ReplicaManager:
    manager = ReplicaManager(broker_id, _config(broker_id, tmp_path / f"f{broker_id}"), logs=None,
                             alter_partition=None)
    manager.dial_proxies = {LEADER: leader_address}  # no metadata: dial the leader's listener directly
    return manager


def _follow(manager: ReplicaManager, tmp_path, info: PartitionInfo) -> Partition:
    partition = Partition(TOPIC, 0, manager.broker_id, Log.open(tmp_path / f"f{manager.broker_id}-log",
                                                                   topic=TOPIC, partition=0))
    partition.apply_metadata(info)
    manager.partitions[(TOPIC, 0)] = partition
    return partition


def _fetcher(manager: ReplicaManager) -> ReplicaFetcher:
    """The manager's fetcher for the leader, driven round by round (fetch_once), not started."""
    fetcher = ReplicaFetcher(manager, LEADER)
    fetcher.add((TOPIC, 0))
    return fetcher


def test_a_follower_fetches_with_kafkas_fetch_v12_and_its_position_moves_the_leaders_high_watermark(tmp_path):
    async def main():
        leader = Leader(tmp_path)
        p1 = leader.host(_info(LEADER, 1, isr=(LEADER, FOLLOWER)), min_insync_replicas=2)
        p1.append_as_leader(_batch(b"a", b"b", b"c"), -1)
        assert p1.log.high_watermark == 0  # acks=all: waits for the follower
        address = await leader.start()
        follower = _follower(tmp_path, FOLLOWER, address)
        p2 = _follow(follower, tmp_path, _info(LEADER, 1, isr=(LEADER, FOLLOWER)))
        fetcher = _fetcher(follower)
        try:
            assert await fetcher.fetch_once()  # the records, from offset 0
            assert p2.log.log_end_offset == 3 and _records(p2) == _records(p1)
            assert p1.log.high_watermark == 0  # the leader knows only that the follower asked for 0
            assert await fetcher.fetch_once()  # from 3: the leader's HW moves, and the answer says so
            assert p1.log.high_watermark == 3 and p2.log.high_watermark == 3
            assert p1.followers[FOLLOWER].log_end_offset == 3
        finally:
            await fetcher.close()
            await leader.close()
        assert len(leader.requests) == 2
        # A full fetch that asks for a fetch session, then an incremental one in it (KIP-227).
        [session] = leader.broker.replicas.fetch_sessions.sessions.values()
        assert [(b["session_id"], b["session_epoch"]) for *_, b in leader.requests] == [(0, 0), (session.id, 1)]
        for api_key, version, body in leader.requests:
            assert (api_key, version) == (ApiKey.FETCH, 12), "the follower's fetch was not Kafka's Fetch v12"
            assert body["replica_id"] == FOLLOWER
            assert body["max_wait_ms"] == WAIT_MS and body["isolation_level"] == 0
            [topic] = body["topics"]
            [entry] = topic["partitions"]
            assert topic["topic"] == TOPIC and entry["current_leader_epoch"] == 1
            assert entry["last_fetched_epoch"] == (-1 if entry["fetch_offset"] == 0 else 1)
        assert [b["topics"][0]["partitions"][0]["fetch_offset"] for *_, b in leader.requests] == [0, 3]
    asyncio.run(main())


def test_a_follower_with_a_divergent_tail_truncates_on_the_diverging_epoch_of_a_kafka_answer(tmp_path):
    # Epoch 1: broker 2 leads and appends [a] (broker 1 copies it) and [b] (nobody copies it).
    # Epoch 2: broker 1 leads and appends [c]. Broker 2 comes back as a follower with [a, b].
    async def main():
        leader = Leader(tmp_path)
        address = await leader.start()
        follower = _follower(tmp_path, FOLLOWER, address)
        p2 = _follow(follower, tmp_path, _info(FOLLOWER, 1, isr=(FOLLOWER,)))
        p2.append_as_leader(_batch(b"a"), 1)
        p1 = leader.host(_info(FOLLOWER, 1, isr=(FOLLOWER,)))
        p1.log.append_as_follower(_records(p2))
        p2.append_as_leader(_batch(b"b"), 1)
        p1.apply_metadata(_info(LEADER, 2, isr=(LEADER,)))
        p1.append_as_leader(_batch(b"c"), 1)
        p2.apply_metadata(_info(LEADER, 2, isr=(LEADER,)))
        fetcher = _fetcher(follower)
        try:
            assert await fetcher.fetch_once()  # from 2, last fetched epoch 1: epoch 1 ends at 1 there
            assert (fetcher.truncations, p2.log.log_end_offset) == (1, 1), "no truncation at the diverging epoch"
            assert await fetcher.fetch_once()  # from 1: [c]
            assert p2.log.log_end_offset == 2 and _records(p2) == _records(p1)
            assert await fetcher.fetch_once()  # from 2: caught up; the leader may add it to the ISR
            assert p1.isr_proposal(lag_time_max_ms=10_000) == (LEADER, FOLLOWER)
        finally:
            await fetcher.close()
            await leader.close()
        assert all((api_key, version) == (ApiKey.FETCH, 12) for api_key, version, _ in leader.requests)
    asyncio.run(main())


def test_a_fetch_from_a_broker_that_is_not_a_replica_is_refused_and_the_leader_says_why(tmp_path, caplog):
    async def main():
        leader = Leader(tmp_path)
        p1 = leader.host(_info(LEADER, 1, isr=(LEADER,)))
        p1.append_as_leader(_batch(b"a"), 1)
        address = await leader.start()
        stranger = _follower(tmp_path, STRANGER, address)
        p9 = _follow(stranger, tmp_path, _info(LEADER, 1, isr=(LEADER,), replicas=(LEADER, STRANGER)))
        fetcher = _fetcher(stranger)
        connection = await Connection.open("127.0.0.1", leader.server.port, client_id="test",
                                           kafka_versions={ApiKey.FETCH: 12})
        try:
            assert not await fetcher.fetch_once()
            assert p9.log.log_end_offset == 0 and STRANGER not in p1.followers
            # Even with an epoch the leader does not have: refused, not told to truncate.
            _, out = await connection.request(ApiKey.FETCH, {
                "replica_id": STRANGER, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [{
                    "partition": 0, "current_leader_epoch": 1, "fetch_offset": 5, "last_fetched_epoch": 7,
                    "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        finally:
            await connection.close()
            await fetcher.close()
            await leader.close()
        answer = out["responses"][0]["partitions"][0]
        assert answer["error_code"] == errors.NOT_LEADER_OR_FOLLOWER
        assert answer["diverging_epoch"] == {"epoch": -1, "end_offset": -1} and answer["records"] in (None, b"")
    with caplog.at_level(logging.WARNING, logger="raftka.broker.replica_manager"):
        asyncio.run(main())
    assert any(f"broker {STRANGER} is not a replica of {TOPIC}-0" in r.getMessage() for r in caplog.records)


def test_a_follower_behind_the_leaders_log_start_starts_over_there_and_follows_later_deletions(tmp_path):
    async def main():
        leader = Leader(tmp_path)
        p1 = leader.host(_info(LEADER, 1, isr=(LEADER,)))
        for value in (b"a", b"b", b"c", b"d"):
            p1.append_as_leader(_batch(value), 1)
        assert p1.delete_records(2) == 2  # DeleteRecords while the follower was away
        address = await leader.start()
        follower = _follower(tmp_path, FOLLOWER, address)
        p2 = _follow(follower, tmp_path, _info(LEADER, 1, isr=(LEADER,)))
        fetcher = _fetcher(follower)
        try:
            assert await fetcher.fetch_once()  # from 0: out of range below 2, so start over at 2
            assert (p2.log.log_start_offset, p2.log.log_end_offset) == (2, 2)
            assert await fetcher.fetch_once()  # from 2: c and d
            assert p2.log.log_end_offset == 4 and _records(p2) == _records(p1)
            assert p1.followers[FOLLOWER].log_start_offset == 2
            p1.delete_records(3)
            assert p1.isr == (LEADER,) and p1.low_watermark() == 3  # the follower is not in the ISR
            assert await fetcher.fetch_once()  # the answer carries log start 3: the follower deletes too
            assert p2.log.log_start_offset == 3
            assert await fetcher.fetch_once()  # and says so in its next fetch
            assert p1.followers[FOLLOWER].log_start_offset == 3
        finally:
            await fetcher.close()
            await leader.close()
    asyncio.run(main())
