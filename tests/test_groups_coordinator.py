"""The group coordinator's state machine and protocol, in one process, with a fake clock and an
in-memory __consumer_offsets (every append is "committed" at once, or fails when told to).

These tests drive JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit bodies straight into
broker/group/coordinator.py (offsets go through its OffsetManager, broker/group/offsets.py) and
check what Kafka's GroupCoordinator would answer: member ids, generations, fencing of stale
generations, rebalance on join/leave/expiry, static members, loading from the log after a failover.
"""
from __future__ import annotations

import asyncio

import pytest

from raftka.broker.group.coordinator import CoordinatorConfig, GroupCoordinator
from raftka.broker.group.group import Group, GroupState, IllegalGroupTransition
from raftka.broker.group.records import Loaded, apply_record, java_string_hash, partition_for
from raftka.common import errors
from raftka.common.codec import decoder, encoder
from raftka.common.messages.groups import HEARTBEAT_REQUEST


class FakeStore:
    """In-memory __consumer_offsets: a list of (key, value, timestamp) per partition."""

    def __init__(self) -> None:
        self.logs: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
        self.fail_with: int | None = None

    async def append(self, partition: int, entries, timeout_ms: int) -> int:
        await asyncio.sleep(0)
        if self.fail_with is not None:
            raise errors.error_for(self.fail_with)
        log = self.logs.setdefault(partition, [])
        base = len(log)
        log.extend((k, v, 1000) for k, v in entries)
        return base

    async def load(self, partition: int, still_current) -> Loaded:
        loaded = Loaded({}, {})
        for offset, (key, value, ts) in enumerate(self.logs.get(partition, [])):
            apply_record(loaded, key, value, offset, ts)
        return loaded

    def deletes_by_time(self, partition: int) -> bool:
        return True  # as a __consumer_offsets created before compaction: retention rewrites live records


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def coordinator(store: FakeStore | None = None, clock: Clock | None = None, **overrides) -> GroupCoordinator:
    config = CoordinatorConfig(num_partitions=4, min_session_timeout_ms=100, initial_rebalance_delay_ms=0)
    for key, value in overrides.items():
        setattr(config, key, value)
    c = GroupCoordinator(1, config, store or FakeStore(), clock=clock or Clock(), wall=lambda: 5_000)
    c.set_partition_count(4)
    return c


async def loaded(c: GroupCoordinator) -> GroupCoordinator:
    for index in range(4):
        c.elect(index, 0)
    for load in c.partitions.values():
        await load.task
    return c


def join_body(member_id: str = "", *, group: str = "g", session: int = 1000, instance: str | None = None,
              protocols=(("range", b"sub"),)) -> dict:
    return {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": 2000, "member_id": member_id,
            "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": n, "metadata": m} for n, m in protocols]}


async def join_new(c: GroupCoordinator, **kw) -> asyncio.Task:
    """JoinGroup with no member id: MEMBER_ID_REQUIRED, then the real join (held) as a task."""
    first = await c.join_group(join_body(**kw))
    assert first["error_code"] == errors.MEMBER_ID_REQUIRED and first["member_id"]
    return asyncio.ensure_future(c.join_group(join_body(first["member_id"], **kw)))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def run(coro):
    return asyncio.run(coro)


def test_java_string_hash_matches_kafka_partitioning():
    # Values of Java's "...".hashCode(), which decide the __consumer_offsets partition.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("polygenelubricants") == -2_147_483_648  # Integer.MIN_VALUE, a known Java case
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert java_string_hash("hello") == 99_162_322
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # two UTF-16 units, as Java counts
    assert all(0 <= partition_for(f"group-{i}", 7) < 7 for i in range(200))


def test_the_state_table_refuses_illegal_moves():
    group = Group("g", 0)
    with pytest.raises(IllegalGroupTransition):
        group.transition_to(GroupState.STABLE, 0)
    group.transition_to(GroupState.PREPARING_REBALANCE, 0)
    with pytest.raises(IllegalGroupTransition):
        group.transition_to(GroupState.STABLE, 0)
    group.transition_to(GroupState.COMPLETING_REBALANCE, 0)
    group.transition_to(GroupState.STABLE, 0)
    group.transition_to(GroupState.DEAD, 0)


def test_a_group_forms_one_generation_with_a_leader_and_everyone_gets_the_stored_assignment():
    async def main():
        store = FakeStore()
        c = await loaded(coordinator(store))
        a = await join_new(c)
        await settle()
        assert a.done()  # a single member: the rebalance completes at once (no initial delay here)
        ja = a.result()
        assert ja["error_code"] == 0 and ja["generation_id"] == 1 and ja["leader"] == ja["member_id"]
        assert [m["member_id"] for m in ja["members"]] == [ja["member_id"]]
        b = await join_new(c)  # a second member: a rebalance; a must rejoin
        await settle()
        assert not b.done()
        hb = await c.heartbeat({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"]})
        assert hb["error_code"] == errors.REBALANCE_IN_PROGRESS
        a2 = asyncio.ensure_future(c.join_group(join_body(ja["member_id"])))
        await settle()
        ja2, jb = a2.result(), b.result()
        assert ja2["generation_id"] == jb["generation_id"] == 2
        assert ja2["leader"] == ja["member_id"] and len(ja2["members"]) == 2 and jb["members"] == []
        follower = asyncio.ensure_future(c.sync_group({"group_id": "g", "generation_id": 2,
                                                       "member_id": jb["member_id"]}))
        await settle()
        assert not follower.done()  # waits for the leader's assignment
        leader = await c.sync_group({"group_id": "g", "generation_id": 2, "member_id": ja["member_id"],
                                     "assignments": [{"member_id": ja["member_id"], "assignment": b"A"},
                                                     {"member_id": jb["member_id"], "assignment": b"B"}]})
        assert leader["assignment"] == b"A" and (await follower)["assignment"] == b"B"
        assert c.groups["g"].state is GroupState.STABLE
        assert any(value is not None for _, value, _ in store.logs[partition_for("g", 4)])  # stored first
    run(main())


def test_a_commit_from_a_stale_generation_or_unknown_member_is_refused():
    async def main():
        c = await loaded(coordinator())
        ja = (await (await join_new(c)))
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"], "assignments": []})

        def commit(generation, member):
            return c.offset_commit({"group_id": "g", "generation_id_or_member_epoch": generation, "member_id": member,
                                    "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                             "committed_offset": 5}]}]})
        ok = await commit(1, ja["member_id"])
        assert ok["topics"][0]["partitions"][0]["error_code"] == 0
        stale = await commit(0, ja["member_id"])
        assert stale["topics"][0]["partitions"][0]["error_code"] == errors.ILLEGAL_GENERATION
        unknown = await commit(1, "someone-else")
        assert unknown["topics"][0]["partitions"][0]["error_code"] == errors.UNKNOWN_MEMBER_ID
        tool = await commit(-1, "")  # a tool may not commit while the group has members
        assert tool["topics"][0]["partitions"][0]["error_code"] == errors.UNKNOWN_MEMBER_ID
        fetched = await c.offset_fetch({"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]})
        assert [(p["partition_index"], p["committed_offset"]) for p in fetched["topics"][0]["partitions"]] == \
            [(0, 5), (1, -1)]
    run(main())


def test_a_member_without_heartbeats_is_expired_and_the_others_rebalance():
    async def main():
        clock = Clock()
        c = await loaded(coordinator(clock=clock))
        a, b = await join_new(c), await join_new(c)  # both fetch member ids before either joins
        await settle()
        ja, jb = a.result(), b.result()
        assert ja["generation_id"] == jb["generation_id"] == 1  # one rebalance took both
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": ja["leader"], "assignments": []})
        other = jb["member_id"] if ja["leader"] == ja["member_id"] else ja["member_id"]
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": other})
        clock.now += 600
        assert (await c.heartbeat({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"]}))[
            "error_code"] == 0
        clock.now += 600  # b's session (1000 ms) ran out; a heartbeated 600 ms ago
        c.tick()
        group = c.groups["g"]
        assert jb["member_id"] not in group.members and group.state is GroupState.PREPARING_REBALANCE
        assert (await c.heartbeat({"group_id": "g", "generation_id": 1, "member_id": jb["member_id"]}))[
            "error_code"] == errors.UNKNOWN_MEMBER_ID
        again = await c.join_group(join_body(ja["member_id"]))
        assert again["generation_id"] == 2 and len(again["members"]) == 1
    run(main())


def test_a_member_that_does_not_rejoin_in_time_is_dropped_at_the_rebalance_timeout():
    async def main():
        clock = Clock()
        c = await loaded(coordinator(clock=clock))
        ja = await (await join_new(c))
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"], "assignments": []})
        b = await join_new(c)  # rebalance; a keeps heartbeating but never rejoins
        await settle()
        clock.now += 900
        await c.heartbeat({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"]})
        clock.now += 1200  # past the 2000 ms rebalance timeout
        c.tick()
        await settle()
        jb = b.result()
        assert jb["generation_id"] == 2 and jb["leader"] == jb["member_id"] and len(jb["members"]) == 1
        assert ja["member_id"] not in c.groups["g"].members
    run(main())


def test_leaving_makes_the_group_empty_and_its_offsets_stay():
    async def main():
        c = await loaded(coordinator())
        ja = await (await join_new(c))
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"], "assignments": []})
        await c.offset_commit({"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": ja["member_id"],
                               "topics": [{"name": "t", "partitions": [{"partition_index": 3,
                                                                        "committed_offset": 42}]}]})
        left = await c.leave_group({"group_id": "g", "members": [{"member_id": ja["member_id"]}]})
        assert left["members"][0]["error_code"] == 0
        await settle()
        assert c.groups["g"].state is GroupState.EMPTY
        # now a tool may commit (generation -1, no member id): kafka-consumer-groups --reset-offsets
        tool = await c.offset_commit({"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                                      "topics": [{"name": "t", "partitions": [{"partition_index": 3,
                                                                               "committed_offset": 7}]}]})
        assert tool["topics"][0]["partitions"][0]["error_code"] == 0
        assert c.groups["g"].state is GroupState.EMPTY and c.offsets.committed("g")[("t", 3)].offset == 7
    run(main())


def test_a_static_member_restarting_within_its_session_keeps_its_assignment_without_a_rebalance():
    async def main():
        c = await loaded(coordinator())
        first = await c.join_group(join_body(instance="host-1"))  # static: no MEMBER_ID_REQUIRED
        assert first["error_code"] == 0
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": first["member_id"],
                            "assignments": [{"member_id": first["member_id"], "assignment": b"mine"}]})
        again = await c.join_group(join_body(instance="host-1"))  # restarted: no member id
        assert again["error_code"] == 0 and again["generation_id"] == 1 and again["member_id"] != first["member_id"]
        assert again["skip_assignment"] is True
        sync = await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": again["member_id"],
                                   "group_instance_id": "host-1"})
        assert sync["assignment"] == b"mine" and c.groups["g"].state is GroupState.STABLE
        zombie = await c.heartbeat({"group_id": "g", "generation_id": 1, "member_id": first["member_id"],
                                    "group_instance_id": "host-1"})
        assert zombie["error_code"] == errors.FENCED_INSTANCE_ID
    run(main())


def test_a_static_member_that_expires_while_its_rejoin_is_written_is_answered_not_left_waiting():
    class GatedStore(FakeStore):
        gate: asyncio.Event | None = None

        async def append(self, partition, entries, timeout_ms):
            if self.gate is not None:
                await self.gate.wait()
            return await super().append(partition, entries, timeout_ms)

    async def main():
        store, clock = GatedStore(), Clock()
        c = await loaded(coordinator(store, clock))
        first = await c.join_group(join_body(instance="host-1"))
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": first["member_id"],
                            "assignments": [{"member_id": first["member_id"], "assignment": b"mine"}]})
        store.gate = asyncio.Event()
        rejoin = asyncio.ensure_future(c.join_group(join_body(instance="host-1")))
        await settle()  # the rejoin now waits on its group record
        clock.now += 10_000  # past the session: the member expires meanwhile
        c.tick()
        store.gate.set()
        answer = await asyncio.wait_for(rejoin, 2)  # before the fix: held for ever
        assert answer["error_code"] == errors.UNKNOWN_MEMBER_ID
        again = await c.join_group(join_body(instance="host-1"))  # joins again from scratch
        assert again["error_code"] == 0 and again["generation_id"] >= 2
    run(main())


def test_a_held_heartbeat_answers_as_soon_as_a_rebalance_starts():
    async def main():
        c = await loaded(coordinator())
        ja = await (await join_new(c))
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"], "assignments": []})
        held = asyncio.ensure_future(c.heartbeat({"group_id": "g", "generation_id": 1,
                                                  "member_id": ja["member_id"], "max_wait_ms": 400}))
        await settle()
        assert not held.done()
        await join_new(c)
        await settle()
        assert held.done() and held.result()["error_code"] == errors.REBALANCE_IN_PROGRESS
    run(main())


def test_the_new_leader_loads_groups_and_offsets_from_the_log_and_the_old_one_answers_not_coordinator():
    async def main():
        store = FakeStore()
        old = await loaded(coordinator(store))
        ja = await (await join_new(old))
        await old.sync_group({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"],
                              "assignments": [{"member_id": ja["member_id"], "assignment": b"x"}]})
        await old.offset_commit({"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": ja["member_id"],
                                 "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                          "committed_offset": 9}]}]})
        old.resign(partition_for("g", 4))
        assert (await old.heartbeat({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"]}))[
            "error_code"] == errors.NOT_COORDINATOR
        new = await loaded(coordinator(store))
        group = new.groups["g"]
        assert group.state is GroupState.STABLE and group.generation_id == 1
        assert group.members[ja["member_id"]].assignment == b"x" and new.offsets.committed("g")[("t", 0)].offset == 9
        # The member carries on with its generation: no rebalance needed after the move.
        assert (await new.heartbeat({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"]}))[
            "error_code"] == 0
    run(main())


def test_a_failed_write_answers_coordinator_errors_and_changes_nothing():
    async def main():
        store = FakeStore()
        c = await loaded(coordinator(store))
        await c.offset_commit({"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                               "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                        "committed_offset": 1}]}]})
        store.fail_with = errors.NOT_ENOUGH_REPLICAS
        out = await c.offset_commit({"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                                     "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                              "committed_offset": 2}]}]})
        assert out["topics"][0]["partitions"][0]["error_code"] == errors.COORDINATOR_NOT_AVAILABLE
        assert c.offsets.committed("g")[("t", 0)].offset == 1
        store.fail_with = errors.NOT_LEADER_OR_FOLLOWER
        out = await c.offset_commit({"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                                     "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                              "committed_offset": 2}]}]})
        assert out["topics"][0]["partitions"][0]["error_code"] == errors.NOT_COORDINATOR
    run(main())


def test_requests_for_groups_of_partitions_we_do_not_lead_or_are_loading_are_refused():
    async def main():
        c = coordinator()
        out = await c.join_group(join_body())
        assert out["error_code"] == errors.NOT_COORDINATOR
        c.elect(partition_for("g", 4), 0)
        assert c.owner_error("g") == errors.COORDINATOR_LOAD_IN_PROGRESS
        await c.partitions[partition_for("g", 4)].task
        assert c.owner_error("g") == errors.NONE
        bad = await c.join_group({**join_body(), "session_timeout_ms": 10})
        assert bad["error_code"] == errors.INVALID_SESSION_TIMEOUT
        other = await c.join_group({**join_body(), "protocol_type": "connect"})
        assert other["error_code"] == errors.MEMBER_ID_REQUIRED  # an empty group takes any protocol type
    run(main())


def test_an_empty_group_waits_the_initial_delay_for_more_members():
    async def main():
        clock = Clock()
        c = await loaded(coordinator(clock=clock, initial_rebalance_delay_ms=300))
        a = await join_new(c)
        await settle()
        assert not a.done()
        b = await join_new(c)
        await settle()
        assert not a.done() and not b.done()
        clock.now += 310
        c.tick()
        await settle()
        assert a.done() and b.done() and a.result()["generation_id"] == b.result()["generation_id"] == 1
    run(main())


def test_offsets_of_a_long_empty_group_expire_and_live_records_are_rewritten_before_retention():
    async def main():
        store = FakeStore()
        wall = [1_000_000]
        c = GroupCoordinator(1, CoordinatorConfig(num_partitions=4, min_session_timeout_ms=100,
                                                  initial_rebalance_delay_ms=0, retention_ms=10_000),
                             store, clock=Clock(), wall=lambda: wall[0])
        c.set_partition_count(4)
        await loaded(c)
        for group in ("idle", "busy"):
            await c.offset_commit({"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                   "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                            "committed_offset": 3}]}]})
        joined = await (await join_new(c, group="busy"))
        await c.sync_group({"group_id": "busy", "generation_id": 1, "member_id": joined["member_id"],
                            "assignments": []})
        written = {p: len(log) for p, log in store.logs.items()}
        wall[0] += 6_000  # past half the retention: live records are written again
        await c.maintain()
        assert c.offsets.committed("idle")[("t", 0)].offset == 3 and c.offsets.committed("busy")[("t", 0)].offset == 3
        assert sum(len(log) for log in store.logs.values()) > sum(written.values())
        wall[0] += 6_000  # "idle" has been empty for over the retention: its offsets expire
        await c.maintain()
        assert "idle" not in c.groups and not c.offsets.committed("idle")  # the offsets went with the group
        assert c.offsets.committed("busy")[("t", 0)].offset == 3
        reloaded = await loaded(coordinator(store))  # and the log says the same
        assert "idle" not in reloaded.groups and not reloaded.offsets.committed("idle")
        assert reloaded.offsets.committed("busy")[("t", 0)].offset == 3
    run(main())


def test_a_join_whose_protocol_metadata_declares_128_mib_is_refused_without_allocating_it():
    """A JoinGroup whose protocol metadata declares 128 MiB that the frame does not hold is
    refused by the decoder (the listener closes the connection before the coordinator runs);
    tracemalloc's peak over the decode shows nothing near the declared size is allocated."""
    import struct
    import tracemalloc
    from raftka.common.api import ApiKey
    from raftka.common.codec import CodecError, decoder, encoder
    from raftka.common.messages import KAFKA_API

    request = KAFKA_API[ApiKey.JOIN_GROUP][0]  # v5: not flexible, bytes carry an int32 length
    body = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"meta"}]}
    wire = encoder(request, 5)(body)
    assert decoder(request, 5)(wire)["protocols"][0]["metadata"] == b"meta"  # the body as sent passes
    lying = wire.replace(struct.pack(">i", 4) + b"meta", struct.pack(">i", 128 * 1024 * 1024) + b"meta")
    tracemalloc.start()
    try:
        with pytest.raises(CodecError) as refused:
            decoder(request, 5)(lying)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.field == "protocols[0].metadata"
    assert peak_bytes < 4 * 1024 * 1024


def test_a_group_dropped_while_its_commit_is_written_loses_its_offsets_with_it_and_the_log_keeps_them():
    """The coordinator tells its offset manager when a group is gone (resign, DeleteGroups): a
    commit whose write finishes after that is not applied to the dropped group, and a reload
    reads it from the log."""
    class GatedStore(FakeStore):
        def __init__(self) -> None:
            super().__init__()
            self.gate = asyncio.Event()
            self.gate.set()

        async def append(self, partition: int, entries, timeout_ms: int) -> int:
            base = await super().append(partition, entries, timeout_ms)
            await self.gate.wait()
            return base

    async def main():
        store = GatedStore()
        c = await loaded(coordinator(store))
        body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 4}]}]}
        store.gate.clear()
        pending = asyncio.ensure_future(c.offset_commit(body))
        await settle()
        c.resign(partition_for("g", 4))
        store.gate.set()
        assert (await pending)["topics"][0]["partitions"][0]["error_code"] == 0
        assert "g" not in c.groups and not c.offsets.committed("g")
        await loaded(c)
        assert c.offsets.committed("g")[("t", 0)].offset == 4
        deleted = await c.delete_groups({"groups_names": ["g"]})
        assert deleted["results"] == [{"group_id": "g", "error_code": errors.NONE}]
        assert "g" not in c.groups and not c.offsets.committed("g")
        fetched = await c.offset_fetch({"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]})
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == -1
        assert "g" not in (await loaded(coordinator(store))).groups  # the tombstones are in the log
    run(main())


def kafka_heartbeat(version: int, member_id: str, **fields) -> dict:
    """A Heartbeat body as the broker's Kafka listener hands it over: encoded at ``version`` and
    decoded against the declaration (the tagged max_wait_ms only when given, as v4)."""
    body = {"group_id": "g", "generation_id": 1, "member_id": member_id, "group_instance_id": None, **fields}
    return decoder(HEARTBEAT_REQUEST, version)(encoder(HEARTBEAT_REQUEST, version)(body))


def test_a_kafka_heartbeat_with_the_max_wait_ms_tag_is_held_and_answers_as_a_rebalance_starts():
    async def main():
        c = await loaded(coordinator())
        ja = await (await join_new(c))
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"], "assignments": []})
        body = kafka_heartbeat(4, ja["member_id"], max_wait_ms=400)
        assert body["max_wait_ms"] == 400
        held = asyncio.ensure_future(c.heartbeat(body))
        await settle()
        assert not held.done()
        await join_new(c)
        await settle()
        assert held.done() and held.result()["error_code"] == errors.REBALANCE_IN_PROGRESS
    run(main())


@pytest.mark.parametrize("version", [0, 3, 4])
def test_a_kafka_heartbeat_without_the_tag_answers_at_once(version):
    async def main():
        c = await loaded(coordinator())
        ja = await (await join_new(c))
        await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": ja["member_id"], "assignments": []})
        body = kafka_heartbeat(version, ja["member_id"])
        assert body["max_wait_ms"] == 0  # absent: the declaration's default
        answer = asyncio.ensure_future(c.heartbeat(body))
        await settle()  # no rebalance, no clock moving: only an immediate answer is done by now
        assert answer.done() and answer.result()["error_code"] == errors.NONE
    run(main())
