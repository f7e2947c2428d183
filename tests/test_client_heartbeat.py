"""The consumer's heartbeats against a coordinator that answers at once, as Kafka's does.

Raftka's client sends Heartbeat v4 with the tagged ``max_wait_ms`` (its heartbeat interval), which
a Raftka coordinator holds; a Kafka coordinator skips the unknown tag and answers at once. A fake
coordinator answering every heartbeat at once shows the client then paces itself by
``heartbeat_interval_ms`` (a few back-to-back heartbeats at most, then one per interval), instead
of sending the next one the moment the last is answered.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from raftka.client import aio
from raftka.common import errors
from raftka.common.api import ApiKey

pytestmark = pytest.mark.timeout(60)

INTERVAL_MS = 100
WATCH_S = 1.5


class ImmediateCoordinator:
    """Broker 1: metadata for topic ``t`` and a group coordinator that never holds an answer."""

    def __init__(self) -> None:
        self.heartbeats: list[tuple[float, dict[str, Any]]] = []

    async def connect(self, host: str, port: int, client_id: str) -> "ImmediateCoordinator":
        return self

    async def request(self, api_key: int, body: Any, api_version: int = 0, *, timeout_ms: int | None = None,
                      expect_response: bool = True) -> tuple[int, Any]:
        await asyncio.sleep(0)
        if api_key == ApiKey.METADATA:
            return errors.NONE, {"cluster_id": "fake", "controller_id": 1,
                                 "brokers": [{"node_id": 1, "host": "fake", "port": 1, "rack": None}],
                                 "topics": [{"error_code": 0, "name": "t", "topic_id": "t", "partitions": [
                                     {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                                      "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}]}]}
        if api_key == ApiKey.FIND_COORDINATOR:
            return errors.NONE, {"error_code": 0, "error_message": None, "node_id": 1, "host": "fake", "port": 1}
        if api_key == ApiKey.JOIN_GROUP:
            return errors.NONE, {"error_code": 0, "generation_id": 1, "protocol_type": "consumer",
                                 "protocol_name": body["protocols"][0]["name"], "leader": "m-1",
                                 "skip_assignment": True, "member_id": "m-1", "members": []}
        if api_key == ApiKey.SYNC_GROUP:
            return errors.NONE, {"error_code": 0, "protocol_type": "consumer",
                                 "protocol_name": body["protocol_name"], "assignment": b""}
        if api_key == ApiKey.HEARTBEAT:
            self.heartbeats.append((time.monotonic(), body))
            return errors.NONE, {"throttle_time_ms": 0, "error_code": 0}
        if api_key == ApiKey.LEAVE_GROUP:
            return errors.NONE, {"error_code": 0, "members": []}
        return errors.UNSUPPORTED_VERSION, {}

    def close(self) -> None:
        pass


def test_against_a_coordinator_that_answers_at_once_heartbeats_go_one_per_interval():
    kafka = ImmediateCoordinator()

    async def main() -> None:
        c = aio.Consumer("t", bootstrap_servers="fake:1", connection_factory=kafka.connect, group_id="g",
                         heartbeat_interval_ms=INTERVAL_MS, session_timeout_ms=1000, enable_auto_commit=False)
        deadline = time.monotonic() + 10
        while not kafka.heartbeats and time.monotonic() < deadline:
            await c.poll(timeout_ms=50)
        started = time.monotonic()
        while time.monotonic() - started < WATCH_S:
            await c.poll(timeout_ms=50)
        await c.close()

    asyncio.run(main())
    assert kafka.heartbeats, "the consumer never joined"
    assert all(body["max_wait_ms"] == INTERVAL_MS for _, body in kafka.heartbeats)  # the tag, skipped by Kafka
    first = kafka.heartbeats[0][0]
    watched = [t for t, _ in kafka.heartbeats if t - first <= WATCH_S]
    # One per interval, plus the few sent back to back before the client notices it is not held.
    assert WATCH_S * 1000 / INTERVAL_MS / 2 <= len(watched) <= WATCH_S * 1000 / INTERVAL_MS + 6, len(watched)
