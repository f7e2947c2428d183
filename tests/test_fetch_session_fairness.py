"""Fair Fetch answers in a fetch session (KIP-227, broker/fetch_session.py): when ``max_bytes``
runs out, only the first partition with records goes past it, the partitions that gave records
move to the end of the session's order, and those cut off are read first at the next fetch (even
unnamed and without new appends). So a session over partitions that each hold more than one
answer can carry is served in turn, not always the same partition. Driven through
ReplicaManager.fetch over real Logs (tests/test_fetch_sessions.py's helpers)."""
from __future__ import annotations

import asyncio
import time

from raftka.common import errors
from raftka.common.records import BatchBuilder

from test_fetch_sessions import FOLLOWER_ID, _answered, _body, _close, _manager

VALUE_BYTES = 1000
BATCHES = 4  # per partition, one record each
PARTITIONS = 3


def _big_batch() -> bytes:
    builder = BatchBuilder()
    builder.append(int(time.time() * 1000), None, b"x" * VALUE_BYTES)
    return builder.build()


def test_partitions_each_holding_more_than_max_bytes_are_answered_in_turn(tmp_path):
    batch = _big_batch()
    max_bytes = len(batch) + len(batch) // 2  # room for one batch, not two

    async def main() -> list[list[int]]:
        manager, _, _ = _manager(tmp_path, partitions=PARTITIONS)
        for index in range(PARTITIONS):
            for _ in range(BATCHES):
                manager.partitions[("t", index)].append_as_leader(_big_batch(), 1)
        offsets = {index: 0 for index in range(PARTITIONS)}
        carriers: list[list[int]] = []

        async def fetch(session_id: int, epoch: int, named: dict[int, int]) -> dict:
            body = _body(FOLLOWER_ID, session_id, epoch, named)
            body["max_bytes"] = max_bytes
            out = await manager.fetch(body)
            assert out["error_code"] == errors.NONE
            answered = _answered(out)
            size = sum(len(p["records"]) for p in answered.values())
            assert size <= max_bytes, f"an answer of {size} bytes for max_bytes {max_bytes}"
            carried = sorted(i for i, p in answered.items() if p["records"])
            for index in carried:
                offsets[index] += 1  # one record per batch
            carriers.append(carried)
            return out

        # The fetcher names only what gave records (its offset moved), as Raftka's fetchers do.
        session_id = (await fetch(0, 0, dict(offsets)))["session_id"]
        for epoch in range(1, PARTITIONS * BATCHES):
            await fetch(session_id, epoch, {i: offsets[i] for i in carriers[-1]})
        _close(manager)
        return carriers

    carriers = asyncio.run(main())
    assert all(len(c) == 1 for c in carriers), f"each answer has room for one partition's batch: {carriers}"
    order = [c[0] for c in carriers]
    assert order == list(range(PARTITIONS)) * BATCHES, f"partitions not served in turn: {order}"
