"""Fencing on disconnect: the active controller fences a broker whose persistent heartbeat
connection its end closed (as a kill -9'd process's kernel does) once no heartbeat has come for
``broker.session.disconnect.grace.ms``, long before ``broker.session.timeout.ms``; a broker that
reconnects and heartbeats within the grace, or a caller using one connection per request, is
not fenced. Real 3-controller quorum; the brokers are played over the wire.
"""
from __future__ import annotations

import asyncio
import threading
import time

from raftka.common import errors
from raftka.common.transport import Connection
from raftka.cluster import wait_until
from raftka.cluster.controller_client import KAFKA_VERSIONS
from tests.test_controller_metadata import FakeBrokers, metadata, ok, registration, wait_unfenced

SESSION_MS = 30_000  # only the disconnect path can fence within these tests' waits
GRACE_MS = 500
CONFIGS = {"broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 300,
           "broker.session.disconnect.grace.ms": GRACE_MS}


def register(cluster, broker_id):
    out = ok(cluster, 62, registration(cluster, broker_id))
    return out["broker_epoch"]


def heartbeat_body(broker_id, epoch):
    return {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": 1 << 40}


async def _beat(address, body, count):
    """``count`` heartbeats on one new connection; returns it still open."""
    host, port = address
    connection = await Connection.open(host, port, client_id="broker-test", kafka_versions=KAFKA_VERSIONS)
    for _ in range(count):
        code, out = await connection.request(63, body, timeout_ms=10_000)
        assert code == errors.NONE, out
    return connection


def fenced(cluster, broker_id):
    return next(b for b in metadata(cluster)["brokers"] if b["node_id"] == broker_id)["fenced"]


def test_a_broker_whose_heartbeat_connection_closes_is_fenced_after_the_grace_not_the_session(cluster_factory):
    cluster = cluster_factory(voters=3, configs=CONFIGS)
    address = cluster.controller_address(cluster.wait_for_leader(timeout_s=30))
    others = FakeBrokers(cluster, [1, 2])  # one connection per heartbeat: never fenced on close
    try:
        epoch = register(cluster, 3)
        body = heartbeat_body(3, epoch)

        async def beat_then_die():
            connection = await _beat(address, body, 3)
            await connection.close()  # what the kernel does for a process killed with -9
            return time.monotonic()
        closed_at = asyncio.run(beat_then_die())
        wait_until(lambda: fenced(cluster, 3), SESSION_MS / 1000 / 3, interval_s=0.05,
                   what="broker 3 fenced after its connection closed")
        took_s = time.monotonic() - closed_at
        assert GRACE_MS / 1000 * 0.9 <= took_s < SESSION_MS / 1000 / 3, took_s
        assert not fenced(cluster, 1) and not fenced(cluster, 2)  # one-shot connections closed every 0.3 s
        # The fenced broker is back once it heartbeats again.
        asyncio.run(_close_after_beats(address, body, 1))
        wait_until(lambda: not fenced(cluster, 3), 20, what="broker 3 unfenced by its next heartbeat")
    finally:
        others.close()


async def _close_after_beats(address, body, count):
    connection = await _beat(address, body, count)
    await connection.close()


def test_a_broker_that_reconnects_and_heartbeats_within_the_grace_stays_unfenced(cluster_factory):
    cluster = cluster_factory(voters=3, configs=CONFIGS)
    address = cluster.controller_address(cluster.wait_for_leader(timeout_s=30))
    epoch = register(cluster, 4)
    body = heartbeat_body(4, epoch)
    asyncio.run(_close_after_beats(address, body, 1))  # unfenced by its first heartbeat
    wait_until(lambda: not fenced(cluster, 4), 20, what="broker 4 unfenced")
    seen_fenced = []
    stop = threading.Event()

    def watch():  # a fence followed by an unfence would hide between two looks at the end
        while not stop.wait(0.05):
            if fenced(cluster, 4):
                seen_fenced.append(time.monotonic())

    async def reconnect():
        connection = await _beat(address, body, 2)
        await connection.close()  # e.g. the broker dropped it after a request timed out
        await asyncio.sleep(GRACE_MS / 1000 / 5)
        connection = await _beat(address, body, 1)  # ... and heartbeats again at once
        deadline = time.monotonic() + 4 * GRACE_MS / 1000
        beats = 0
        while time.monotonic() < deadline:  # and keeps heartbeating on the new connection
            code, _ = await connection.request(63, body, timeout_ms=10_000)
            assert code == errors.NONE
            beats += 1
            await asyncio.sleep(0.2)
        await connection.close()
        return beats
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert asyncio.run(reconnect()) >= 3
    finally:
        stop.set()
        watcher.join(10)
    assert not seen_fenced, "a broker that heartbeat again within the grace was fenced"
