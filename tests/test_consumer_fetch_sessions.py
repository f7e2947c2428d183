"""The asyncio consumer fetches in fetch sessions (KIP-227), against a fake Kafka whose Fetch
keeps sessions as broker/fetch_session.py does: a full fetch first, then incremental ones that
name only the partitions whose entry changed, ``forgotten_topics_data`` for those no longer
fetched (paused, with a full buffer, led elsewhere), a full fetch again after
FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH, and full fetches throughout when the
broker grants no session (session_id 0)."""
from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import pytest

from raftka.client import TopicPartition
from raftka.client.aio.fetcher import SESSION_EPOCH_MAX, FetchSession
from raftka.common import errors
from test_client_logic import FakeKafka, batch_of, consumer

pytestmark = pytest.mark.timeout(60)

T = "t"


class FetchSeen(NamedTuple):
    node: int
    session_id: int
    epoch: int
    named: dict[TopicPartition, int]  # tp -> fetch offset
    forgotten: set[TopicPartition]
    answered: set[TopicPartition]
    code: int = errors.NONE  # the answer's whole-request error


class SessionKafka(FakeKafka):
    """FakeKafka whose Fetch keeps sessions; ``fetches`` records every Fetch and its answer."""

    def __init__(self, topics: dict[str, int]) -> None:
        super().__init__(topics)
        self.sessions: dict[int, dict[str, Any]] = {}  # id -> node, epoch, {tp: offset}, {tp: (hw, lso)} sent
        self.next_session_id = 100
        self.grant = True  # False: no free slot, every answer says session_id 0
        self.fetches: list[FetchSeen] = []

    def handle(self, node: int, api: int, body: dict[str, Any]) -> tuple[int, Any]:
        if api != 1:
            return super().handle(node, api, body)
        session_id, epoch = body.get("session_id", 0), body.get("session_epoch", -1)
        named = {TopicPartition(t["topic"], p["partition"]): p["fetch_offset"]
                 for t in body["topics"] for p in t["partitions"]}
        forgotten = {TopicPartition(t["topic"], i) for t in body.get("forgotten_topics_data") or []
                     for i in t["partitions"]}
        if epoch > 0:  # incremental
            session = self.sessions.get(session_id)
            code = (errors.FETCH_SESSION_ID_NOT_FOUND if session is None or session["node"] != node
                    else errors.INVALID_FETCH_SESSION_EPOCH if session["epoch"] != epoch else errors.NONE)
            if code != errors.NONE:
                self.fetches.append(FetchSeen(node, session_id, epoch, named, forgotten, set(), code))
                return 0, {"error_code": code, "session_id": 0, "responses": []}
            session["epoch"] = epoch + 1
            for tp in forgotten:
                session["parts"].pop(tp, None)
                session["sent"].pop(tp, None)
            session["parts"].update(named)
        else:
            self.sessions.pop(session_id, None)  # a full fetch closes the session it names
            session = {"node": node, "epoch": 1, "parts": dict(named), "sent": {}}
            session_id = 0
            if epoch == 0 and self.grant:
                session_id = self.next_session_id
                self.next_session_id += 1
                self.sessions[session_id] = session
        answers = []
        for tp, offset in session["parts"].items():
            answer = self.fetch(node, tp, offset)
            shown = (answer["high_watermark"], answer["log_start_offset"])
            if answer["records"] or answer["error_code"] or session["sent"].get(tp) != shown:
                session["sent"][tp] = shown
                answers.append((tp, answer))
        self.fetches.append(FetchSeen(node, body.get("session_id", 0), epoch, named, forgotten,
                                      {tp for tp, _ in answers}))
        return 0, {"error_code": 0, "session_id": session_id, "responses": [
            {"topic": tp.topic, "partitions": [answer]} for tp, answer in answers]}

    def append(self, tp: TopicPartition, values: list[bytes]) -> None:
        self.logs[tp].append(batch_of(values, self.leo[tp], self.epochs[tp]))
        self.leo[tp] += len(values)

    def to(self, node: int, since: int = 0) -> list[FetchSeen]:
        return [f for f in self.fetches[since:] if f.node == node]


def tps(*indexes: int) -> set[TopicPartition]:
    return {TopicPartition(T, i) for i in indexes}


async def poll_values(c, want: int, rounds: int = 200) -> dict[TopicPartition, list[bytes]]:
    got: dict[TopicPartition, list[bytes]] = {}
    for _ in range(rounds):
        for tp, records in (await c.poll(timeout_ms=20)).items():
            got.setdefault(tp, []).extend(r.value for r in records)
        if sum(map(len, got.values())) >= want:
            break
    return got


async def settle(kafka: SessionKafka, node: int, fetches: int = 3) -> None:
    """Wait until ``fetches`` more Fetches went to ``node``."""
    since = len(kafka.fetches)
    for _ in range(500):
        if len(kafka.to(node, since)) >= fetches:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"fewer than {fetches} fetches to broker {node}")


def start_with(kafka: SessionKafka, **configs: Any):
    """A consumer assigned every partition of T, and the partitions led by broker 2 (0 and 1)."""
    for i in (0, 1):
        kafka.leaders[TopicPartition(T, i)] = 2
    c = consumer(kafka, auto_offset_reset="earliest", **configs)
    c.assign(sorted(tps(*range(kafka.topics[T]))))
    return c


def test_a_full_fetch_then_incremental_ones_that_name_only_what_changed():
    async def main() -> None:
        kafka = SessionKafka({T: 10})
        for i in range(10):
            kafka.append(TopicPartition(T, i), [f"{i}-a".encode()])
        c = start_with(kafka)
        try:
            got = await poll_values(c, 10)
            assert got == {tp: [f"{tp.partition}-a".encode()] for tp in tps(*range(10))}
            await settle(kafka, 1)
            since = len(kafka.fetches)
            await settle(kafka, 1)
            first1, first2 = kafka.to(1)[0], kafka.to(2)[0]
            # One session per broker, each opened by a full fetch of its partitions.
            assert (first1.session_id, first1.epoch, set(first1.named)) == (0, 0, tps(*range(2, 10)))
            assert (first2.session_id, first2.epoch, set(first2.named)) == (0, 0, tps(0, 1))
            ones = kafka.to(1)
            assert [f.epoch for f in ones] == list(range(len(ones))), "epochs 0, 1, 2, ... without a gap"
            assert all(f.session_id == 100 or f.session_id == 101 for f in ones[1:])
            idle = kafka.to(1, since)
            assert all(not f.named and not f.forgotten and not f.answered for f in idle), idle

            tp = TopicPartition(T, 5)
            kafka.append(tp, [b"5-b", b"5-c"])
            since = len(kafka.fetches)
            assert await poll_values(c, 2) == {tp: [b"5-b", b"5-c"]}
            await settle(kafka, 1)
            later = [f for f in kafka.to(1, since) if f.named]
            # The records' answer moved the fetch offset: only that partition is named again.
            assert later and all(f.named == {tp: 3} for f in later), later
            assert all(f.answered <= {tp} for f in kafka.to(1, since))
        finally:
            await c.close()

    asyncio.run(main())


def test_paused_and_buffer_full_partitions_are_forgotten_and_named_again_when_fetched_again():
    async def main() -> None:
        kafka = SessionKafka({T: 6})
        # One record fills a buffer: the partition is skipped until poll takes it.
        c = start_with(kafka, max_partition_fetch_bytes=1)
        try:
            await c.poll(timeout_ms=20)
            await settle(kafka, 1)
            full = TopicPartition(T, 3)
            since = len(kafka.fetches)
            kafka.append(full, [b"one"])
            await settle(kafka, 1, fetches=4)
            after = kafka.to(1, since)
            carried = next(i for i, f in enumerate(after) if full in f.answered)
            # The next fetch forgets it, and the broker sends it no more records.
            assert full in after[carried + 1].forgotten, after
            assert all(full not in f.answered and full not in f.named for f in after[carried + 2:]), after
            since = len(kafka.fetches)
            assert await poll_values(c, 1) == {full: [b"one"]}
            await settle(kafka, 1)
            assert any(f.named.get(full) == 1 for f in kafka.to(1, since)), "named again at its new fetch offset"

            paused = TopicPartition(T, 4)
            since = len(kafka.fetches)
            c.pause(paused)
            await settle(kafka, 1)
            assert any(paused in f.forgotten for f in kafka.to(1, since))
            kafka.append(paused, [b"held"])
            since = len(kafka.fetches)
            await settle(kafka, 1)
            assert all(paused not in f.answered for f in kafka.to(1, since))
            c.resume(paused)
            assert await poll_values(c, 1) == {paused: [b"held"]}
            assert any(f.named.get(paused) == 0 for f in kafka.to(1, since)), "named again when resumed"
        finally:
            await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("code", [errors.FETCH_SESSION_ID_NOT_FOUND, errors.INVALID_FETCH_SESSION_EPOCH])
def test_an_unknown_session_or_a_wrong_epoch_starts_over_with_a_full_fetch(code):
    async def main() -> None:
        kafka = SessionKafka({T: 6})
        c = start_with(kafka)
        try:
            await c.poll(timeout_ms=20)
            await settle(kafka, 1)
            (session_id, session), = [(k, s) for k, s in kafka.sessions.items() if s["node"] == 1]
            since = len(kafka.fetches)
            if code == errors.FETCH_SESSION_ID_NOT_FOUND:
                kafka.sessions.pop(session_id)  # the broker restarted or evicted it
            else:
                session["epoch"] += 7  # a Fetch it took whose answer was lost
            kafka.append(TopicPartition(T, 2), [b"after"])
            assert await poll_values(c, 1) == {TopicPartition(T, 2): [b"after"]}
            await settle(kafka, 1)
            seen = kafka.to(1, since)
            refused = next(i for i, f in enumerate(seen) if f.code == code)
            full = seen[refused + 1]
            expect_id = 0 if code == errors.FETCH_SESSION_ID_NOT_FOUND else session_id
            assert (full.session_id, full.epoch, set(full.named)) == (expect_id, 0, tps(*range(2, 6)))
            assert seen[refused + 2].epoch == 1 and seen[refused + 2].session_id > session_id
        finally:
            await c.close()

    asyncio.run(main())


def test_without_a_session_slot_every_fetch_is_full():
    async def main() -> None:
        kafka = SessionKafka({T: 4})
        kafka.grant = False
        c = start_with(kafka)
        try:
            kafka.append(TopicPartition(T, 3), [b"x"])
            assert await poll_values(c, 1) == {TopicPartition(T, 3): [b"x"]}
            await settle(kafka, 1)
            ones = kafka.to(1)
            assert len(ones) >= 3
            assert all((f.session_id, f.epoch) == (0, 0) and set(f.named) == tps(2, 3) for f in ones), ones
        finally:
            await c.close()

    asyncio.run(main())


def test_a_seek_is_named_in_the_next_fetch_and_a_leader_change_moves_the_partition_to_the_other_session():
    async def main() -> None:
        kafka = SessionKafka({T: 6})
        for i in range(6):
            kafka.append(TopicPartition(T, i), [f"{i}".encode()])
        c = start_with(kafka)
        try:
            assert sum(map(len, (await poll_values(c, 6)).values())) == 6
            await settle(kafka, 1)
            tp = TopicPartition(T, 4)
            since = len(kafka.fetches)
            c.seek(tp, 0)
            assert await poll_values(c, 1) == {tp: [b"4"]}, "the record again, once"
            assert any(f.named.get(tp) == 0 for f in kafka.to(1, since))

            moved = TopicPartition(T, 5)
            kafka.leaders[moved] = 2
            kafka.epochs[moved] += 1
            kafka.append(moved, [b"5-new"])
            since = len(kafka.fetches)
            assert await poll_values(c, 1) == {moved: [b"5-new"]}
            assert any(f.named.get(moved) == 1 for f in kafka.to(2, since)), "named in broker 2's session"
            assert any(moved in f.forgotten for f in kafka.to(1, since)), "forgotten in broker 1's session"
            await settle(kafka, 1)
            assert await poll_values(c, 1, rounds=10) == {}, "nothing read twice"
        finally:
            await c.close()

    asyncio.run(main())


def test_the_session_state_machine_on_its_own():
    a, b, c = tps(0), tps(1), tps(2)
    (a,), (b,), (c,) = a, b, c
    session = FetchSession()
    assert session.next_fetch({a: (0, 1), b: (5, 1)}) == ([a, b], [])  # full: everything
    session.answered(7, [a])
    assert (session.session_id, session.epoch) == (7, 1)
    # a: carried by the answer, so named again; b unchanged; c new.
    assert session.next_fetch({a: (0, 1), b: (5, 1), c: (0, 2)}) == ([a, c], [])
    session.answered(7, [])
    assert session.next_fetch({b: (5, 2), c: (0, 2)}) == ([b], [a])  # a leader epoch moved; a gone
    session.epoch = SESSION_EPOCH_MAX
    session.answered(7, [])
    assert session.epoch == 1, "the epoch wraps to 1, never 0 or -1"
    session.restart()
    assert (session.session_id, session.epoch) == (7, 0), "the full fetch closes session 7"
    assert session.next_fetch({c: (0, 2)}) == ([c], [])
    session.answered(0, [c])
    assert (session.session_id, session.epoch) == (0, 0), "no slot: full fetches"
    session.restart(session_known=False)
    assert session.session_id == 0
