"""The interim metadata machine replays deterministically and idempotently.

A seeded generator builds a random sequence of metadata records (registrations, fences,
unfences, topic creates/deletes, partition changes, config changes, producer-id blocks, and
junk). Properties: two fresh machines fed the same records end with equal images; re-applying
every record a second time (a retried command) changes nothing that a retry should not;
snapshot/restore midway then the rest equals straight replay. Failing seeds are printed.
"""
from __future__ import annotations

import random

import msgpack
import pytest

from raft_meta.controller.metadata_adapter import MetadataStateMachine


def records(seed: int, count: int = 300) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    topics: list[str] = []
    for _ in range(count):
        kind = rng.choice(["register", "fence", "unfence", "create", "delete", "change", "config", "pid", "junk"])
        broker = rng.randint(1, 4)
        if kind == "register":
            r = {"type": "register_broker", "broker_id": broker, "incarnation_id": f"inc{rng.randint(1, 3)}",
                 "endpoints": {"PLAINTEXT": f"h:{broker}"}, "rack": rng.choice([None, "a", "b"])}
        elif kind in ("fence", "unfence"):
            r = {"type": f"{kind}_broker", "broker_id": broker, "broker_epoch": rng.randint(0, count)}
        elif kind == "create":
            name = f"t{rng.randint(1, 6)}"
            topics.append(name)
            rf = rng.randint(1, 3)
            r = {"type": "create_topic", "name": name, "topic_id": f"id-{name}-{rng.randint(1, 2)}",
                 "partitions": [rng.sample([1, 2, 3, 4], rf) for _ in range(rng.randint(1, 3))], "configs": {}}
        elif kind == "delete" and topics:
            name = rng.choice(topics)
            r = {"type": "delete_topic", "name": name, "topic_id": f"id-{name}-{rng.randint(1, 2)}"}
        elif kind == "change" and topics:
            r = {"type": "partition_change", "topic": rng.choice(topics), "partition": rng.randint(0, 2),
                 "expected_partition_epoch": rng.randint(0, 3), "isr": rng.sample([1, 2, 3, 4], rng.randint(1, 3)),
                 "leader": rng.choice([None, 1, 2, 3])}
        elif kind == "config" and topics:
            r = {"type": "config_change", "topic": rng.choice(topics),
                 "configs": {"retention.ms": rng.choice([None, 1000, 2000])}}
        elif kind == "pid":
            r = {"type": "producer_ids", "broker_id": 1, "first_id": rng.choice([0, 1, 2, 5]), "size": 1}
        else:
            out.append(rng.choice([b"\xc1", msgpack.packb({"type": "nope"}), msgpack.packb({"x": 1})]))
            continue
        out.append(msgpack.packb(r, use_bin_type=True))
    return out


def replay(recs: list[bytes], machine: MetadataStateMachine | None = None, start: int = 2) -> MetadataStateMachine:
    machine = machine or MetadataStateMachine()
    for i, rec in enumerate(recs):
        machine.apply(rec, start + i)
    return machine


@pytest.mark.parametrize("seed", range(20))
def test_replay_is_deterministic_and_snapshots_do_not_change_the_outcome(seed):
    recs = records(seed)
    try:
        a, b = replay(recs), replay(recs)
        assert a.image == b.image
        cut = len(recs) // 2
        first = replay(recs[:cut])
        restored = MetadataStateMachine()
        restored.restore(first.snapshot())
        replay(recs[cut:], restored, start=2 + cut)
        assert restored.image == a.image
    except AssertionError:
        print(f"failing seed: {seed}")
        raise


@pytest.mark.parametrize("seed", range(20))
def test_a_retried_record_applied_right_after_itself_is_a_no_op(seed):
    """pysyncobj may commit a record twice when the caller retries after a leader change: the
    second copy lands right after the first (or later); either way it must not change the image
    except for what re-registration and producer-id blocks define."""
    recs = records(seed)
    try:
        machine = MetadataStateMachine()
        index = 2
        for rec in recs:
            machine.apply(rec, index)
            once = machine.image
            machine.apply(rec, index + 1)  # the retry
            assert machine.image == once, msgpack.unpackb(rec, raw=False) if rec[:1] != b"\xc1" else rec
            index += 2
    except AssertionError:
        print(f"failing seed: {seed}")
        raise


def test_apply_never_raises_and_unknown_records_return_an_error():
    machine = MetadataStateMachine()
    for junk in (b"", b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"type": "nope"}),
                 msgpack.packb({"type": "create_topic"})):
        result = machine.apply(junk, 2)
        assert isinstance(result, dict) and "error" in result
    assert machine.image == MetadataStateMachine().image
