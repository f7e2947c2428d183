"""Incremental fetch sessions (KIP-227, broker/fetch_session.py) at a leader, and a follower's
ReplicaFetcher using them.

The state machine is driven through ReplicaManager.fetch with real Partitions over storage Logs
in tmp_path, on one asyncio loop: a full fetch that creates a session, incremental fetches that
add, change and forget partitions, epoch and id errors (71, 70), closing, eviction at the slot
limit. ``reads`` counts which partitions a fetch looked at, so a test fails if an incremental
fetch touched a partition without news. The follower side runs a real ReplicaFetcher against a
real BrokerServer handler on a listener (tests/test_broker_replica_fetch_wire.py's helpers).
"""
from __future__ import annotations

import asyncio
import time

import pytest

from raftka.broker.fetch_session import EPOCH_MAX, FetchSessionCache, next_epoch
from raftka.broker.metadata import PartitionInfo
from raftka.broker.partition import Partition
from raftka.broker.replica_manager import ReplicaManager
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.records import BatchBuilder
from raftka.storage.log import Log

from test_broker_replica_fetch_wire import FOLLOWER, LEADER, TOPIC, Leader, _follower, _info

FOLLOWER_ID, CONSUMER = 2, -1
WAIT_MS = 20_000  # a long poll that should be answered at once: waiting this long fails the test
ANSWER_TIMEOUT_S = 5.0


def _batch(n: int = 1) -> bytes:
    builder = BatchBuilder()
    for i in range(n):
        builder.append(int(time.time() * 1000), None, b"v%d" % i)
    return builder.build()


class Clock:
    """Milliseconds the test moves by hand (the sessions' and partitions' clock)."""
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _manager(tmp_path, partitions: int = 3, slots: int = 10, clock: Clock | None = None):
    """A leader (broker 1) of ``partitions`` partitions of "t", replicas (1, 2, 3), all in sync."""
    clock = clock or Clock()
    manager = ReplicaManager(1, {"fetch.max.bytes": 1 << 20, "max.incremental.fetch.session.cache.slots": slots},
                             logs=None, alter_partition=None, clock=clock)
    for index in range(partitions):
        log = Log.open(tmp_path / f"t-{index}", topic="t", partition=index)
        p = Partition("t", index, 1, log, min_insync_replicas=1, clock=clock)
        p.apply_metadata(PartitionInfo(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=1,
                                       partition_epoch=1))
        manager.partitions[("t", index)] = p
    reads: list[tuple[str, int]] = []
    original = manager.read_partition

    def counting(replica_id, request, topic, first_pass, budget, session=None, **options):
        reads.append((topic, request["partition"]))
        return original(replica_id, request, topic, first_pass, budget, session=session, **options)
    manager.read_partition = counting  # type: ignore[method-assign]
    return manager, reads, clock


def _entry(index: int, offset: int = 0) -> dict:
    return {"partition": index, "fetch_offset": offset, "current_leader_epoch": 1, "log_start_offset": 0,
            "partition_max_bytes": 1 << 20}


def _body(replica_id: int, session_id: int, epoch: int, entries: dict[int, int] | None = None,
          forget: list[int] | None = None, wait_ms: int = 0) -> dict:
    return {"replica_id": replica_id, "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": "t", "partitions": [_entry(i, o) for i, o in (entries or {}).items()]}],
            "forgotten_topics_data": [{"topic": "t", "partitions": forget}] if forget else []}


def _answered(out: dict) -> dict[int, dict]:
    return {p["partition_index"]: p for t in out["responses"] for p in t["partitions"]}


def _close(manager: ReplicaManager) -> None:
    for p in manager.partitions.values():
        p.log.close()


# -- the state machine ---------------------------------------------------------------------------

def test_a_full_fetch_with_epoch_zero_creates_a_session_and_answers_every_partition(tmp_path):
    async def main():
        manager, reads, _ = _manager(tmp_path)
        out = await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 0, 1: 0, 2: 0}))
        assert out["error_code"] == errors.NONE and out["session_id"] > 0
        assert sorted(_answered(out)) == [0, 1, 2], "a full answer names every partition asked for"
        [session] = manager.fetch_sessions.sessions.values()
        assert (session.id, session.epoch, session.replica_id) == (out["session_id"], 1, FOLLOWER_ID)
        assert sorted(session.partitions) == [("t", 0), ("t", 1), ("t", 2)]
        # Sessionless (0, -1), as before KIP-227: no session, answer session_id 0.
        out = await manager.fetch(_body(CONSUMER, 0, -1, {0: 0}))
        assert out.get("session_id", 0) == 0 and len(manager.fetch_sessions) == 1
        _close(manager)
    asyncio.run(main())


def test_an_incremental_fetch_reads_and_answers_only_partitions_with_news(tmp_path):
    async def main():
        manager, reads, _ = _manager(tmp_path, partitions=3)
        session_id = (await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 0, 1: 0, 2: 0})))["session_id"]
        reads.clear()
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 1))
        assert _answered(out) == {} and out["session_id"] == session_id
        assert reads == [], "an incremental fetch without news read a partition"
        manager.partitions[("t", 1)].append_as_leader(_batch(2), 1)
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 2))
        [(index, answer)] = _answered(out).items()
        assert index == 1 and answer["records"] and answer["high_watermark"] == 0
        assert reads == [("t", 1)]
        reads.clear()
        # The follower names partition 1 at its new log end: read, but no news (broker 3 lags).
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 3, {1: 2}))
        assert _answered(out) == {} and reads == [("t", 1)]
        assert manager.partitions[("t", 1)].followers[FOLLOWER_ID].log_end_offset == 2
        await manager.fetch(_body(3, 0, -1, {1: 2}))  # broker 3 too: the HW moves to 2
        reads.clear()
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 4))
        assert {i: a["high_watermark"] for i, a in _answered(out).items()} == {1: 2}, "HW news not answered"
        assert reads == [("t", 1)]
        _close(manager)
    asyncio.run(main())


def test_a_waiting_incremental_fetch_wakes_at_an_append_to_any_partition_of_its_session(tmp_path):
    async def main():
        manager, reads, _ = _manager(tmp_path, partitions=3)
        session_id = (await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 0, 1: 0, 2: 0})))["session_id"]
        reads.clear()
        fetch = asyncio.create_task(manager.fetch(_body(FOLLOWER_ID, session_id, 1, wait_ms=WAIT_MS)))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not fetch.done()
        manager.partitions[("t", 2)].append_as_leader(_batch(), 1)
        out = await asyncio.wait_for(fetch, ANSWER_TIMEOUT_S)
        assert list(_answered(out)) == [2] and reads == [("t", 2)]
        _close(manager)
    asyncio.run(main())


def test_added_changed_and_forgotten_partitions_change_what_the_session_holds(tmp_path):
    async def main():
        manager, reads, _ = _manager(tmp_path, partitions=3)
        session_id = (await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 0})))["session_id"]
        session = manager.fetch_sessions.sessions[session_id]
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 1, {1: 0, 2: 0}))  # added: answered
        assert sorted(_answered(out)) == [1, 2]
        assert sorted(session.partitions) == [("t", 0), ("t", 1), ("t", 2)]
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 2, forget=[0, 2]))
        assert sorted(session.partitions) == [("t", 1)]
        assert session not in manager.partitions[("t", 0)]._sessions, "a forgotten partition still tells the session"
        manager.partitions[("t", 0)].append_as_leader(_batch(), 1)
        reads.clear()
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 3))
        assert _answered(out) == {} and reads == [], "news of a forgotten partition was answered"
        _close(manager)
    asyncio.run(main())


def test_a_wrong_epoch_answers_71_and_leaves_the_session_an_unknown_id_answers_70(tmp_path):
    async def main():
        manager, _, _ = _manager(tmp_path)
        session_id = (await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 0})))["session_id"]
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 5))
        assert out == {"error_code": errors.INVALID_FETCH_SESSION_EPOCH, "session_id": 0, "responses": [],
                       "throttle_time_ms": 0}
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 1))  # the expected epoch still works
        assert out["error_code"] == errors.NONE and out["session_id"] == session_id
        out = await manager.fetch(_body(FOLLOWER_ID, session_id, 1))  # a replayed epoch does not
        assert out["error_code"] == errors.INVALID_FETCH_SESSION_EPOCH
        for body in (_body(FOLLOWER_ID, session_id + 1, 1), _body(FOLLOWER_ID, 0, 3),
                     _body(3, session_id, 2)):  # unknown id, no id, another fetcher's session
            out = await manager.fetch(body)
            assert out["error_code"] == errors.FETCH_SESSION_ID_NOT_FOUND and out["responses"] == []
        _close(manager)
    asyncio.run(main())


def test_a_full_fetch_naming_a_session_closes_it_and_epoch_zero_opens_a_new_one(tmp_path):
    async def main():
        manager, _, _ = _manager(tmp_path)
        first = (await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 0})))["session_id"]
        second = (await manager.fetch(_body(FOLLOWER_ID, first, 0, {0: 0, 1: 0})))["session_id"]
        assert second not in (0, first) and list(manager.fetch_sessions.sessions) == [second]
        assert not manager.partitions[("t", 0)]._sessions - {manager.fetch_sessions.sessions[second]}
        out = await manager.fetch(_body(FOLLOWER_ID, second, -1, {0: 0}))  # close, no new session
        assert out.get("session_id", 0) == 0 and len(manager.fetch_sessions) == 0
        assert all(not p._sessions for p in manager.partitions.values()), "a closed session is still told of news"
        out = await manager.fetch(_body(FOLLOWER_ID, second, 1))
        assert out["error_code"] == errors.FETCH_SESSION_ID_NOT_FOUND
        _close(manager)
    asyncio.run(main())


def test_a_followers_new_session_replaces_the_one_its_restarted_broker_left(tmp_path):
    async def main():
        manager, _, _ = _manager(tmp_path)
        orphan = (await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 0})))["session_id"]
        consumer = (await manager.fetch(_body(CONSUMER, 0, 0, {0: 0})))["session_id"]
        other = (await manager.fetch(_body(3, 0, 0, {0: 0})))["session_id"]
        new = (await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 0})))["session_id"]  # no id: a fresh fetcher
        assert set(manager.fetch_sessions.sessions) == {consumer, other, new} and orphan not in (consumer, other, new)
        # A consumer may hold several sessions (several clients share replica_id -1).
        second_consumer = (await manager.fetch(_body(CONSUMER, 0, 0, {0: 0})))["session_id"]
        assert {consumer, second_consumer} <= set(manager.fetch_sessions.sessions)
        _close(manager)
    asyncio.run(main())


def test_epochs_wrap_to_one_after_the_largest():
    assert next_epoch(0) == 1 and next_epoch(41) == 42 and next_epoch(EPOCH_MAX) == 1


# -- the slot limit --------------------------------------------------------------------------------

def test_a_full_cache_gives_a_stale_sessions_slot_then_a_small_consumers_else_no_session():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock, eviction_ms=1000)
    follower = cache.full(0, 0, FOLLOWER_ID, size=100)
    consumer = cache.full(0, 0, CONSUMER, size=0)
    for index in range(3):
        consumer.add(("t", index), _entry(index))
    assert len(cache) == 2
    # Another consumer, no larger, while nobody is stale: no slot, a full fetch without session.
    assert cache.full(0, 0, CONSUMER, size=3) is None and len(cache) == 2
    # A larger consumer takes the smaller consumer's slot; a follower's is never taken.
    bigger = cache.full(0, 0, CONSUMER, size=4)
    assert bigger is not None and consumer.closed and set(cache.sessions.values()) == {follower, bigger}
    # A follower takes a consumer's slot whatever its size.
    other_follower = cache.full(0, 0, 3, size=1)
    assert other_follower is not None and bigger.closed and cache.evictions == 2
    # Two followers fill the cache: a new one waits until one is idle for eviction_ms.
    assert cache.full(0, 0, 4, size=500) is None
    clock.now += 1000
    cache.incremental(other_follower.id, 1, 3)  # used now: the first follower is the stale one
    newest = cache.full(0, 0, 4, size=1)
    assert newest is not None and follower.closed and not other_follower.closed and cache.evictions == 3


def test_with_zero_slots_every_fetch_is_a_full_one(tmp_path):
    async def main():
        manager, _, _ = _manager(tmp_path, slots=0)
        out = await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 0, 1: 0}))
        assert out.get("session_id", 0) == 0 and sorted(_answered(out)) == [0, 1]
        assert len(manager.fetch_sessions) == 0
        _close(manager)
    asyncio.run(main())


# -- the leader's ISR check with partitions fetched unnamed -----------------------------------------

def test_a_follower_whose_session_holds_a_quiet_partition_stays_in_sync_until_its_fetches_stop(tmp_path):
    async def main():
        lag_ms = 10_000
        manager, _, clock = _manager(tmp_path, partitions=1)
        p = manager.partitions[("t", 0)]
        p.append_as_leader(_batch(), 1)
        third = await manager.fetch(_body(3, 0, -1, {0: 1}))  # broker 3 catches up without a session
        session_id = (await manager.fetch(_body(FOLLOWER_ID, 0, 0, {0: 1})))["session_id"]
        assert third.get("session_id", 0) == 0 and session_id
        for epoch in range(1, 6):  # broker 2 goes on fetching in its session, never naming "t"-0
            clock.now += lag_ms // 2
            assert _answered(await manager.fetch(_body(FOLLOWER_ID, session_id, epoch))) == {}
            await manager.fetch(_body(3, 0, -1, {0: 1}))
        assert p.isr_proposal(lag_ms) is None, "a follower fetching in its session was dropped from the ISR"
        clock.now += lag_ms + 1  # broker 2 stops fetching
        await manager.fetch(_body(3, 0, -1, {0: 1}))
        assert p.isr_proposal(lag_ms) == (1, 3)
        _close(manager)
    asyncio.run(main())


def test_a_partition_hosted_after_a_session_asked_for_it_is_answered_without_being_named_again(tmp_path):
    async def main():
        manager, _, clock = _manager(tmp_path, partitions=1)
        body = _body(FOLLOWER_ID, 0, 0, {0: 0})
        body["topics"].append({"topic": "late", "partitions": [_entry(0)]})
        out = await manager.fetch(body)
        session_id = out["session_id"]
        [late] = [t["partitions"][0] for t in out["responses"] if t["topic"] == "late"]
        assert late["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
        fetch = asyncio.create_task(manager.fetch(_body(FOLLOWER_ID, session_id, 1, wait_ms=WAIT_MS)))
        await asyncio.sleep(0)
        p = Partition("late", 0, 1, Log.open(tmp_path / "late-0", topic="late", partition=0), clock=clock)
        p.apply_metadata(PartitionInfo(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=1, partition_epoch=1))
        manager.partitions[("late", 0)] = p
        manager.fetch_sessions.hosted(("late", 0), p)  # as on_metadata does for a new replica
        p.append_as_leader(_batch(), 1)  # wakes the fetch: the session watches the new replica
        out = await asyncio.wait_for(fetch, ANSWER_TIMEOUT_S)
        [answer] = [t["partitions"][0] for t in out["responses"] if t["topic"] == "late"]
        assert answer["error_code"] == errors.NONE and answer["records"]
        p.log.close()
        _close(manager)
    asyncio.run(main())


# -- the follower's side: a session per leader ---------------------------------------------------------

def _follow_many(manager: ReplicaManager, tmp_path, count: int) -> list[Partition]:
    out = []
    for index in range(count):
        p = Partition(TOPIC, index, manager.broker_id, Log.open(tmp_path / f"f-{index}", topic=TOPIC, partition=index))
        p.apply_metadata(_info(LEADER, 1, isr=(LEADER, FOLLOWER)))
        manager.partitions[(TOPIC, index)] = p
        out.append(p)
    return out


def _host_many(leader: Leader, count: int) -> list[Partition]:
    replicas = leader.broker.replicas
    out = []
    for index in range(count):
        p = Partition(TOPIC, index, LEADER, leader.broker.logs.get_or_create(TOPIC, index, {}))
        p.apply_metadata(_info(LEADER, 1, isr=(LEADER, FOLLOWER)))
        replicas.partitions[(TOPIC, index)] = p
        out.append(p)
    return out


def _named(body: dict) -> list[int]:
    return sorted(p["partition"] for t in body["topics"] for p in t["partitions"])


def test_a_follower_names_every_partition_once_then_only_those_it_appended_to(tmp_path):
    from raftka.broker.replica_fetcher import ReplicaFetcher

    async def main():
        leader = Leader(tmp_path)
        led = _host_many(leader, 4)
        address = await leader.start()
        follower = _follower(tmp_path, FOLLOWER, address)
        followed = _follow_many(follower, tmp_path, 4)
        fetcher = ReplicaFetcher(follower, LEADER)
        for index in range(4):
            fetcher.add((TOPIC, index))
        try:
            assert await fetcher.fetch_once()  # full: creates the session
            led[2].append_as_leader(_batch(3), 1)
            assert await fetcher.fetch_once()  # incremental: only "t"-2 has news (3 records)
            assert followed[2].log.log_end_offset == 3
            assert await fetcher.fetch_once()  # names "t"-2 at 3: the leader's HW moves
            assert led[2].high_watermark == 3 and followed[2].high_watermark == 3
            fetcher.remove((TOPIC, 0))
            assert await fetcher.fetch_once()  # forgets "t"-0
            # The leader forgets the session (a restart): 70, then a new full session.
            leader.broker.replicas.fetch_sessions.close()
            assert await fetcher.fetch_once()
            assert await fetcher.fetch_once()
        finally:
            await fetcher.close()
            await leader.close()
        bodies = [b for api, _, b in leader.requests if api == ApiKey.FETCH]
        session_id = bodies[1]["session_id"]
        assert [(b["session_id"], b["session_epoch"]) for b in bodies] == [
            (0, 0), (session_id, 1), (session_id, 2), (session_id, 3), (session_id, 4), (0, 0)]
        assert [_named(b) for b in bodies] == [[0, 1, 2, 3], [], [2], [], [], [1, 2, 3]]
        assert bodies[3]["forgotten_topics_data"] == [{"topic": TOPIC, "partitions": [0]}]
    asyncio.run(main())


def test_a_failed_round_makes_the_next_fetch_a_full_one_that_closes_the_session(tmp_path):
    from raftka.broker.replica_fetcher import ReplicaFetcher

    async def main():
        leader = Leader(tmp_path)
        _host_many(leader, 2)
        address = await leader.start()
        follower = _follower(tmp_path, FOLLOWER, address)
        _follow_many(follower, tmp_path, 2)
        fetcher = ReplicaFetcher(follower, LEADER)
        fetcher.add((TOPIC, 0))
        fetcher.add((TOPIC, 1))
        try:
            assert await fetcher.fetch_once()
            first = fetcher.session_id
            connection = await fetcher._connection_for_leader()
            request = connection.request

            async def lost(*args, **kwargs):
                raise ConnectionResetError("the round in flight is lost")
            connection.request = lost
            with pytest.raises(ConnectionResetError):
                await fetcher.fetch_once()
            connection.request = request
            assert await fetcher.fetch_once()
        finally:
            await fetcher.close()
            await leader.close()
        last = [b for api, _, b in leader.requests if api == ApiKey.FETCH][-1]
        assert (last["session_id"], last["session_epoch"]) == (first, 0) and _named(last) == [0, 1]
        assert list(leader.broker.replicas.fetch_sessions.sessions) == [fetcher.session_id] != [first]
    asyncio.run(main())
