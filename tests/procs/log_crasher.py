"""A test process for the storage crash test: appends to one partition log until killed.

Usage: log_crasher.py DIR SEED. Opens (and so recovers) the log in DIR, prints
``ready <log_end_offset>``, then loops: appends a few batches of seeded random sizes (records
whose values spell their own offsets, so a reader can check every byte), flushes (fsync), and
prints ``flushed <log_end_offset>`` once the flush returned. Batches come from one idempotent
producer whose sequence continues across restarts from the log's recovered producer state;
some are sent twice and the retry must get the original offsets. The parent SIGKILLs it at a random
moment; every offset below the last printed ``flushed`` line must survive intact.
"""
from __future__ import annotations

import os
import random
import sys


from raftka.common.records import BatchBuilder
from raftka.storage import Log

APPENDS_MAX = 1_000_000  # the parent kills us long before this
PRODUCER_ID = 42


def value_for(offset: int, size: int) -> bytes:
    stamp = b"%d;" % offset
    return (stamp * (size // len(stamp) + 1))[:max(size, len(stamp))]


def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    config = {"segment.bytes": rng.choice([160_000, 400_000, 2_000_000]),
              "index.interval.bytes": rng.choice([0, 512, 4096])}
    log = Log.open(directory, config, topic="crash", partition=0)
    print(f"ready {log.log_end_offset}", flush=True)
    epoch = max(log.leader_epoch_cache.latest_epoch, 0) + 1
    # An idempotent producer: its sequence continues from the state the log recovered.
    entry = log.producer_state.entry(PRODUCER_ID)
    sequence = entry.last_sequence + 1 if entry else 0
    for _ in range(APPENDS_MAX):
        for _ in range(rng.randint(1, 4)):
            base = log.log_end_offset
            size = rng.choice([10, 100, 1000, 5000])
            count = rng.randint(1, min(60, 150_000 // size))
            builder = BatchBuilder(batch_size=1 << 24, producer_id=PRODUCER_ID,
                                   producer_epoch=0, base_sequence=sequence)
            for i in range(count):
                builder.append(1_000 + base + i, None, value_for(base + i, size))
            batch = builder.build()
            info = log.append_as_leader(batch, epoch)
            assert info.first_offset == base and not info.duplicate
            if rng.random() < 0.2:  # a retry of a batch already in: its original offsets
                retry = log.append_as_leader(batch, epoch)
                assert retry.duplicate and retry.first_offset == base, retry
            sequence += count
        log.flush()
        print(f"flushed {log.log_end_offset}", flush=True)


if __name__ == "__main__":
    main()
