"""Fuzzing (#hardening): the wire protocol of a real broker and segment recovery.

Kafka request frames (tests/fuzz_wire.py). The default suite runs a bounded, seeded sample
(seconds); `scripts/test.sh -m soak -k fuzz` runs the long target (RAFTKA_FUZZ_INPUTS, default 1,000,000 inputs) and prints the counts that
docs/security.md quotes. Either way: no crash, every input answered or its connection closed,
no input answered UNKNOWN_SERVER_ERROR, and the data produced before the fuzz reads back
byte-identical after it.
"""
from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_wire import TOPIC, FuzzResult, run
from raftka.common.records import BatchBuilder
from raftka.storage import Log

SEED = int(os.environ.get("RAFTKA_FUZZ_SEED", "20261124"))


@pytest.fixture(scope="module")
def broker(module_cluster_factory):
    """1 controller + 1 broker (the fuzz target), with the fuzz topic holding known records."""
    from raftka.client import AdminClient, NewTopic, Producer
    cluster = module_cluster_factory("fuzz", controllers=1, brokers=1,
                                     configs={"default.replication.factor": 1, "min.insync.replicas": 1})
    admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    finally:
        admin.close()
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        for i in range(200):
            producer.send(TOPIC, value=f"before-{i}".encode())
        producer.flush(30)
    finally:
        producer.close()
    return cluster


def committed_values(cluster) -> list[bytes]:
    from raftka.client import Consumer, TopicPartition
    consumer = Consumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        for _ in range(50):
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
            if len(values) >= 200:
                break
        return values
    finally:
        consumer.close()


def fuzz(cluster, inputs: int) -> FuzzResult:
    broker_id = cluster.broker_ids[0]
    before = committed_values(cluster)
    assert before[:200] == [f"before-{i}".encode() for i in range(200)]
    result = run(cluster.broker_address(broker_id), SEED, inputs, alive=lambda: cluster.alive(broker_id),
                 progress=lambda r: print(r.summary(), flush=True))
    print(result.summary())
    assert not result.crashed, f"the broker died: {result.summary()} (reproduce with RAFTKA_FUZZ_SEED={SEED})"
    assert result.inputs == inputs
    # Every request is decoded against its declaration before a handler runs (bytes that do not
    # decode close the connection); a handler answers odd values with typed errors, never by failing.
    assert result.error_codes[-1] == 0, f"UNKNOWN_SERVER_ERROR answered: {result.summary()} (RAFTKA_FUZZ_SEED={SEED})"
    after = committed_values(cluster)
    assert after[:200] == before[:200], f"data before the fuzz changed (RAFTKA_FUZZ_SEED={SEED})"
    return result


def test_a_bounded_wire_fuzz_crashes_nothing_and_loses_nothing(broker):
    result = fuzz(broker, int(os.environ.get("RAFTKA_FUZZ_INPUTS_SMOKE", "3000")))
    assert result.outcomes["answered"] > 0 and result.outcomes["closed"] > 0  # both paths were hit


@pytest.mark.soak
@pytest.mark.timeout(7200)  # ~1,000 inputs/s on the 2-core box: the suite's 300 s would cut it
def test_a_million_fuzzed_frames_crash_nothing_and_lose_nothing(broker):
    fuzz(broker, int(os.environ.get("RAFTKA_FUZZ_INPUTS", "1000000")))


# -- segment recovery ------------------------------------------------------------------------

def _batch(i: int) -> bytes:
    builder = BatchBuilder(batch_size=1 << 16)
    for j in range(3):
        builder.append(1_000 + i, None, f"v{i}-{j}".encode())
    return builder.build()


@settings(deadline=None, max_examples=60, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches=st.integers(1, 25), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=6),
       cut=st.floats(0, 1), append_junk=st.binary(max_size=200), data=st.data())
def test_recovery_of_a_damaged_log_opens_and_keeps_a_prefix_of_what_was_written(
        tmp_path_factory, batches, flips, cut, append_junk, data):
    """Bytes flipped, a tail cut, junk appended, after a crash (no clean close): the log opens,
    what it serves is a prefix of what was written, and it takes new appends after it."""
    path = tmp_path_factory.mktemp("recover")
    config = {"segment.bytes": data.draw(st.sampled_from([400, 1500, 1 << 20]))}
    log = Log.open(path, config, topic="t", partition=0)
    for i in range(batches):
        log.append_as_leader(_batch(i), 0)
    written = read_values(log)
    segments = sorted(path.glob("*.log"))
    victim = segments[data.draw(st.integers(0, len(segments) - 1))]
    raw = bytearray(victim.read_bytes())
    for where, value in flips:
        if raw:
            raw[int(where * (len(raw) - 1))] = value
    raw = raw[:int(len(raw) * cut)] if data.draw(st.booleans()) else raw
    victim.write_bytes(bytes(raw) + append_junk)  # the open Log is abandoned: a crash
    reopened = Log.open(path, config, topic="t", partition=0)
    try:
        served = read_values(reopened)
        assert served == written[:len(served)]
        end = reopened.log_end_offset
        # The partition leader epoch lies outside the CRC (as in Kafka): a flipped byte there
        # is not detected, so append at whatever epoch the recovered log holds.
        reopened.append_as_leader(_batch(99), max(0, reopened.leader_epoch_cache.latest_epoch))
        assert read_values(reopened)[len(served):] == [b"v99-0", b"v99-1", b"v99-2"]
        assert reopened.log_end_offset == end + 3
    finally:
        reopened.close()


def test_a_damaged_base_offset_past_what_the_segment_can_hold_is_cut(tmp_path):
    """The base offset lies outside the CRC; a flipped high byte makes it leap past the 2^31
    relative offsets a segment can hold. Recovery cuts that batch instead of keeping a log that
    fails at its next roll (found by the property above in CI)."""
    log = Log.open(tmp_path, {"segment.bytes": 400}, topic="t", partition=0)
    log.append_as_leader(_batch(0), 0)
    segment = next(tmp_path.glob("*.log"))
    raw = bytearray(segment.read_bytes())
    raw[0] = 1  # baseOffset becomes 2^56
    segment.write_bytes(bytes(raw))
    reopened = Log.open(tmp_path, {"segment.bytes": 400}, topic="t", partition=0)
    try:
        assert reopened.log_end_offset == 0
        for i in range(1, 6):  # enough to roll
            reopened.append_as_leader(_batch(i), 0)
        assert read_values(reopened)[:3] == [b"v1-0", b"v1-1", b"v1-2"]
    finally:
        reopened.close()


def read_values(log: Log) -> list[bytes]:
    from raftka.common.records import iter_records
    values, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        records = list(iter_records(chunk.records))
        if not records:
            break
        values.extend(r.value for r in records if r.offset >= offset)
        offset = records[-1].offset + 1
    return values


def test_the_fuzzer_is_seeded():
    from fuzz_wire import make_input, valid_bodies
    a, b = random.Random(7), random.Random(7)
    assert [make_input(a, valid_bodies(a), n) for n in range(50)] == [make_input(b, valid_bodies(b), n) for n in range(50)]
