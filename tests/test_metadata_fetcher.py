"""A broker-side MetadataFetcher follows a real controller quorum's committed log, across the
loss of the controller it was fetching from, and hands each batch's delta to its loop."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

from client.protocol import errors
from raft_meta.controller.fetcher import MetadataFetcher
from raftka.cluster import wait_until
from raftka.controller_client import controller_request


def create(cluster, name):
    deadline = time.monotonic() + 30
    while True:
        code, out = controller_request(cluster.bootstrap_controllers, 19,
                                       {"topics": [{"name": name, "num_partitions": 2, "replication_factor": 1}]})
        if code == errors.NONE and out["topics"][0]["error_code"] == errors.NONE:
            return
        assert time.monotonic() < deadline, (code, out)
        time.sleep(0.05)


def test_a_fetcher_follows_the_log_and_survives_the_loss_of_its_controller(controller_cluster):
    cluster = controller_cluster
    cluster.wait_for_leader(timeout_s=30)
    code, out = controller_request(cluster.bootstrap_controllers, 62,
                                   {"broker_id": 1, "incarnation_id": uuid.uuid4().hex,
                                    "listeners": {"PLAINTEXT": "127.0.0.1:1"}})
    assert code == errors.NONE, out
    epoch = out["broker_epoch"]
    wait_until(lambda: controller_request(cluster.bootstrap_controllers, 63,
                                          {"broker_id": 1, "broker_epoch": epoch,
                                           "current_metadata_offset": 1 << 40})[1].get("is_fenced") is False,
               20, what="broker 1 unfenced")
    create(cluster, "first")
    updates = []
    deltas = []  # (delta, image, thread) per callback
    first_controller = next(iter(cluster.nodes))
    addresses = ["%s:%d" % cluster.controller_address(n) for n in cluster.nodes]  # first one first

    async def scenario():
        loop_thread = threading.current_thread()
        fetcher = MetadataFetcher(addresses, replica_id=1, on_update=updates.append, max_wait_ms=200,
                                  on_metadata_update=lambda d, i: deltas.append((d, i, threading.current_thread())))
        task = asyncio.create_task(fetcher.run())
        try:
            await wait_async(lambda: "first" in fetcher.image.topics, 20)
            await asyncio.to_thread(cluster.kill, first_controller)
            await asyncio.to_thread(create, cluster, "second")
            await wait_async(lambda: "second" in fetcher.image.topics, 30)
            assert fetcher.errors_seen >= 1  # it did lose its controller and moved on
        finally:
            await fetcher.close()
            await asyncio.wait_for(task, 10)
        return fetcher, loop_thread
    fetcher, loop_thread = asyncio.run(scenario())
    assert updates == sorted(updates) and updates[-1] == fetcher.state.offset
    image = fetcher.image
    assert image.brokers[1].fenced is False and image.brokers[1].broker_epoch == epoch
    assert all(thread is loop_thread for _, _, thread in deltas)  # callbacks ran on the loop
    assert deltas[-1][1] is image
    # Chained deltas tell broker 1 exactly which partitions it must lead.
    created = [d for d, _, _ in deltas if "second" in d.changed_topics]
    assert len(created) == 1
    assert set(created[0].local_changes(1).leaders) == {("second", 0), ("second", 1)}
    offsets = [i.offset for _, i, _ in deltas]
    assert offsets == sorted(offsets)


async def wait_async(predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)
