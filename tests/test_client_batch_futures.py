"""Per-record producer futures completed by their batch (client.futures.ProduceRequestResult)
and appends from several threads into one accumulator (the blocking Producer appends on the
caller's thread)."""
from __future__ import annotations

import threading

import pytest

from raftka.client.aio.accumulator import RecordAccumulator
from raftka.client.errors import KafkaTimeoutError
from raftka.client.futures import FutureRecordMetadata, ProduceRequestResult
from raftka.common import records as rec
from raftka.client.structs import TopicPartition


def test_a_batch_completes_every_record_future_with_its_own_offset():
    result = ProduceRequestResult("t", 2)
    futures = [FutureRecordMetadata(result, i, 1000 + i, -1, 5, 0) for i in range(3)]
    seen: list[object] = []
    futures[1].add_callback(lambda md: seen.append(md.offset))
    futures[2].add_errback(lambda e: seen.append(("err", e)))
    assert not any(f.is_done for f in futures)
    with pytest.raises(KafkaTimeoutError):
        futures[0].get(timeout=0.01)
    result.complete(40, -1, 0, None)
    assert [f.get(0).offset for f in futures] == [40, 41, 42]
    assert [f.get(0).timestamp for f in futures] == [1000, 1001, 1002]  # CreateTime: the record's
    assert futures[0].get(0).partition == 2 and futures[0].get(0).serialized_value_size == 5
    assert seen == [41]  # the errback of a successful record never runs
    futures[0].add_callback(lambda md: seen.append(("late", md.offset)))  # runs at once
    assert seen == [41, ("late", 40)]
    result.complete(99, -1, 0, None)  # completed once: ignored
    assert futures[2].get(0).offset == 42


def test_a_failed_batch_fails_every_record_and_runs_errbacks():
    result = ProduceRequestResult("t", 0)
    futures = [FutureRecordMetadata(result, i, 1, -1, 1, 0) for i in range(2)]
    errors: list[BaseException] = []
    futures[0].add_errback(errors.append)
    boom = RuntimeError("boom")
    result.complete(-1, -1, -1, boom)
    assert errors == [boom] and all(f.failed() and f.exception is boom for f in futures)
    with pytest.raises(RuntimeError):
        futures[1].get(0)


def test_get_wakes_when_the_batch_completes_on_another_thread():
    result = ProduceRequestResult("t", 0)
    future = FutureRecordMetadata(result, 3, 1, -1, 1, 0)
    threading.Timer(0.05, result.complete, (10, 777, 0, None)).start()
    metadata = future.get(timeout=10)
    assert metadata.offset == 13 and metadata.timestamp == 777  # LogAppendTime from the broker


def test_appends_from_threads_keep_each_threads_order_and_lose_nothing():
    acc = RecordAccumulator(batch_size=300, linger_ms=1000, buffer_memory=10_000_000)
    tp = TopicPartition("t", 0)
    per_thread = 2000

    def send(tag: bytes) -> None:
        for i in range(per_thread):
            assert acc.try_append(tp, 1, None, tag + b"%06d" % i, None, 40) is not None

    def drain(stop: threading.Event, out: list) -> None:
        while not stop.is_set():
            with acc.lock:
                dq = acc.queues.get(tp)
                while dq and dq[0].closed:
                    out.append(acc.pop(tp))

    stop, drained = threading.Event(), []
    drainer = threading.Thread(target=drain, args=(stop, drained))
    drainer.start()
    senders = [threading.Thread(target=send, args=(tag,)) for tag in (b"a", b"b", b"c")]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    stop.set()
    drainer.join()
    with acc.lock:
        while acc.queues.get(tp):  # an emptied queue is removed
            drained.append(acc.pop(tp))
    values = [r.value for b in drained for r in rec.decode_batch(b.buffer)[1]]
    assert sum(b.record_count for b in drained) == len(values) == 3 * per_thread
    for tag in (b"a", b"b", b"c"):
        assert [v for v in values if v[:1] == tag] == [tag + b"%06d" % i for i in range(per_thread)]
    assert acc.buffer_used == 3 * per_thread * 40


def _batch_bytes(values: list[bytes], base_offset: int = 0) -> bytes:
    builder = rec.BatchBuilder(base_offset=base_offset)
    for v in values:
        builder.append(1000, None, v)
    return builder.build()


def test_fetched_records_come_out_in_order_within_fetch_offset_and_high_watermark():
    from raftka.client.aio.fetcher import decode_records
    raw = _batch_bytes([b"a", b"b", b"c"], 0) + _batch_bytes([b"d", b"e"], 3)
    found, next_offset = decode_records(raw, 1, 4, True, "t", 2)
    assert [(r.offset, r.value, r.topic, r.partition) for r in found] == [(1, b"b", "t", 2), (2, b"c", "t", 2),
                                                                          (3, b"d", "t", 2)]
    assert next_offset == 4 and found[0].serialized_value_size == 1 and found[0].serialized_key_size == -1


def test_a_failing_deserializer_stops_the_poll_at_its_record():
    import asyncio

    from raftka.client.aio.consumer import Consumer
    from raftka.client.aio.fetcher import decode_records
    from raftka.client.aio.subscription_state import FetchedChunk, PartitionState
    from raftka.client.errors import SerializationError

    def value_deserializer(v: bytes) -> str:
        if v == b"bad":
            raise ValueError("not text")
        return v.decode()

    async def main() -> None:
        consumer = Consumer(bootstrap_servers="127.0.0.1:1", value_deserializer=value_deserializer)
        tp = TopicPartition("t", 0)
        raw = _batch_bytes([b"a", b"b", b"bad", b"c"])
        found, _ = decode_records(raw, 0, -1, True, "t", 0)
        state = PartitionState(position=0, fetch_position=4)
        state.buffer.append(FetchedChunk(0, found, len(raw)))
        state.buffered_bytes = len(raw)
        consumer._subscriptions.states[tp] = state
        first = consumer._fetcher.drain(10)
        assert [r.value for r in first[tp]] == ["a", "b"] and state.position == 2
        with pytest.raises(SerializationError, match="offset 2"):
            consumer._fetcher.drain(10)
        assert state.position == 2  # still at the record that fails
        state.position = 3  # the application seeks past it
        assert [r.value for r in consumer._fetcher.drain(10)[tp]] == ["c"]
        assert state.buffered_bytes == 0 and not state.buffer
    asyncio.run(main())
