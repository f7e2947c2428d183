"""A MetadataFetcher starting far behind the log (a broker restarting) publishes once, when it
first reaches the high watermark, as Kafka's MetadataLoader: one delta over every fetched chunk,
not one per chunk (each would re-apply every partition the chunk touched)."""
from __future__ import annotations

import asyncio

from raftka.raft_meta.metadata.fetcher import MetadataFetcher
from test_metadata_fetcher import create, register_unfenced_broker, wait_async

TOPICS = 12
CHUNK_BYTES = 64  # less than one entry: each fetch brings one batch


def test_a_fetcher_behind_the_log_publishes_one_update_when_caught_up(controller_cluster):
    cluster = controller_cluster
    cluster.wait_for_leader(timeout_s=30)
    register_unfenced_broker(cluster)
    for i in range(TOPICS):
        create(cluster, f"t{i}")
    addresses = ["%s:%d" % cluster.controller_address(n) for n in cluster.nodes]
    deltas = []
    offsets: list[int] = []

    async def scenario():
        fetcher = MetadataFetcher(addresses, replica_id=1, max_wait_ms=200, max_bytes=CHUNK_BYTES,
                                  on_update=offsets.append, on_metadata_update=lambda d, i: deltas.append(d))
        task = asyncio.create_task(fetcher.run())
        try:
            await wait_async(lambda: fetcher.caught_up, 30)
            assert fetcher.updates_published == 1 and len(deltas) == 1
            assert len(offsets) > TOPICS, "caught up over many fetches, each reporting its offset"
            assert {f"t{i}" for i in range(TOPICS)} <= set(deltas[0].changed_topics)
            assert set(deltas[0].local_changes(1).leaders) >= {(f"t{i}", p) for i in range(TOPICS) for p in (0, 1)}
            await asyncio.to_thread(create, cluster, "after")  # caught up: each batch is published
            await wait_async(lambda: "after" in fetcher.image.topics, 30)
            assert fetcher.updates_published >= 2
            assert set(deltas[-1].changed_topics) == {"after"}
        finally:
            await fetcher.close()
            await asyncio.wait_for(task, 10)
    asyncio.run(scenario())
