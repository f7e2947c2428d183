"""Per-record producer futures completed by their batch (client.futures.ProduceRequestResult)
and appends from several threads into one accumulator (the blocking Producer appends on the
caller's thread)."""
from __future__ import annotations

import threading

import pytest

from client.aio.accumulator import RecordAccumulator
from client.errors import KafkaTimeoutError
from client.futures import FutureRecordMetadata, ProduceRequestResult
from client.protocol import records as rec
from client.structs import TopicPartition


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
        while acc.queues[tp]:
            drained.append(acc.pop(tp))
    values = [r.value for b in drained for r in rec.decode_batch(b.buffer)[1]]
    assert sum(b.record_count for b in drained) == len(values) == 3 * per_thread
    for tag in (b"a", b"b", b"c"):
        assert [v for v in values if v[:1] == tag] == [tag + b"%06d" % i for i in range(per_thread)]
    assert acc.buffer_used == 3 * per_thread * 40
