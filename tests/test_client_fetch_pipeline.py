"""The consumer's next fetch to a broker leaves as soon as the previous one is answered.

End-to-end latency at a steady rate depends on a consumer's fetch already waiting at the leader
(a long poll) when the high watermark moves: every turn of the event loop between an answer and
the next request is time in which the leader holds no fetch of ours. Against a fake broker
connection, count the turns of the client's event loop between a Fetch answer and the next
Fetch request: one (the task that sends it starts in the next turn), not the fetcher loop's
wake-up and then a new task (two or more).
"""
from __future__ import annotations

import asyncio
import statistics
from typing import Any

import pytest

from raftka.client import aio
from raftka.client import TopicPartition

pytestmark = pytest.mark.timeout(60)

FETCHES = 30  # answers to look at
ANSWER_DELAY_S = 0.002  # the fake leader's long poll: a short wait, then an empty answer


class Ticker:
    """Counts turns of the running event loop (a callback that re-schedules itself each turn)."""

    def __init__(self) -> None:
        self.turn = 0
        self._stopped = False

    def start(self) -> None:
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        if not self._stopped:
            self.turn += 1
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._stopped = True


class FakeLeader:
    """Broker 1 leads partition t-0 (empty); Fetch answers after ANSWER_DELAY_S with no records."""

    def __init__(self, ticker: Ticker) -> None:
        self.ticker = ticker
        self.fetch_sent: list[int] = []  # loop turn at which each Fetch request was made
        self.fetch_answered: list[int] = []  # loop turn at which each answer was handed back

    async def connect(self, host: str, port: int, client_id: str) -> "FakeLeader":
        return self

    async def request(self, api_key: int, body: Any, api_version: int = 0, *, timeout_ms: int | None = None,
                      expect_response: bool = True) -> tuple[int, Any]:
        if api_key == 3:  # Metadata
            return 0, {"cluster_id": "fake", "controller_id": 1,
                       "brokers": [{"node_id": 1, "host": "fake", "port": 1, "rack": None}],
                       "topics": [{"error_code": 0, "name": "t", "topic_id": "t", "partitions": [
                           {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                            "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}]}]}
        if api_key == 2:  # ListOffsets
            return 0, {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1, "offset": 0}
                for p in t["partitions"]]} for t in body["topics"]]}
        if api_key == 1:  # Fetch
            self.fetch_sent.append(self.ticker.turn)
            await asyncio.sleep(ANSWER_DELAY_S)
            self.fetch_answered.append(self.ticker.turn)
            return 0, {"responses": [{"topic": t["topic"], "partitions": [
                {"partition_index": p["partition"], "error_code": 0, "high_watermark": 0, "log_start_offset": 0,
                 "records": b"", "current_leader": None} for p in t["partitions"]]} for t in body["topics"]]}
        return 35, {}  # UNSUPPORTED_VERSION

    async def close(self) -> None:
        pass


def test_the_next_fetch_is_sent_in_the_turn_after_the_previous_answer():
    async def main() -> list[int]:
        ticker = Ticker()
        ticker.start()
        leader = FakeLeader(ticker)
        consumer = aio.Consumer(bootstrap_servers="fake:1", connection_factory=leader.connect,
                                       auto_offset_reset="earliest")
        consumer.assign([TopicPartition("t", 0)])
        await consumer.start()
        try:
            for _ in range(2000):
                if len(leader.fetch_answered) > FETCHES:
                    break
                await asyncio.sleep(ANSWER_DELAY_S)
        finally:
            await consumer.close()
            ticker.stop()
        assert len(leader.fetch_answered) > FETCHES, "the consumer stopped fetching"
        return [leader.fetch_sent[i + 1] - leader.fetch_answered[i] for i in range(FETCHES)]

    gaps = asyncio.run(main())
    assert statistics.median(gaps) <= 1, f"turns of the loop between an answer and the next fetch: {gaps}"
