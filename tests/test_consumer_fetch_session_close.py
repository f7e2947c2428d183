"""Raftka's consumer ends its fetch sessions (KIP-227) at close: one Fetch per session naming it
with session_epoch -1 (FINAL_EPOCH) and no partitions, so the broker frees the slot at once. Close
waits for those at most SESSION_CLOSE_TIMEOUT_MS and never raises, even when a broker does not
answer. Against tests/test_consumer_fetch_sessions.py's fake Kafka, which keeps sessions as
broker/fetch_session.py does."""
from __future__ import annotations

import asyncio
import time

import pytest

from raftka.client.aio.fetcher import FINAL_EPOCH, SESSION_CLOSE_TIMEOUT_MS
from raftka.common import errors
from test_consumer_fetch_sessions import T, SessionKafka, poll_values, settle, start_with, tps

pytestmark = pytest.mark.timeout(60)


async def sessions_at_both_brokers():
    """A consumer that read 4 partitions led by brokers 1 and 2 and holds a session at each."""
    kafka = SessionKafka({T: 4})
    for index in range(4):
        kafka.append(tps(index).pop(), [b"v"])
    c = start_with(kafka)
    await poll_values(c, 4)
    await settle(kafka, 1)
    await settle(kafka, 2)
    return kafka, c


def test_close_ends_the_session_at_every_broker():
    async def main() -> SessionKafka:
        kafka, c = await sessions_at_both_brokers()
        assert {s["node"] for s in kafka.sessions.values()} == {1, 2}, "a session at each broker first"
        opened = {(s["node"], i) for i, s in kafka.sessions.items()}
        since = len(kafka.fetches)
        await c.close()
        closes = [f for f in kafka.fetches[since:] if f.epoch == FINAL_EPOCH]
        assert sorted((f.node, f.session_id) for f in closes) == sorted(opened), "one close per session"
        assert all(not f.named and not f.forgotten and not f.answered and f.code == errors.NONE for f in closes)
        return kafka

    kafka = asyncio.run(main())
    assert kafka.sessions == {}, f"sessions left at the brokers after close: {kafka.sessions}"


def test_close_waits_a_bounded_time_for_a_broker_that_does_not_answer_and_does_not_raise():
    async def main() -> tuple[SessionKafka, float]:
        kafka, c = await sessions_at_both_brokers()
        kafka.hang_nodes.add(2)
        started = time.monotonic()
        await c.close()
        return kafka, time.monotonic() - started

    kafka, took_s = asyncio.run(main())
    # Waiting for broker 2's answer is bounded; the rest of close (tasks, connections) is quick here.
    assert took_s < SESSION_CLOSE_TIMEOUT_MS / 1000 + 1.0, f"close took {took_s:.2f} s"
    assert [s["node"] for s in kafka.sessions.values()] == [2], "broker 1's session is closed all the same"
