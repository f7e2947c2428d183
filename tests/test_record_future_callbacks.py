"""Callbacks on a record's future (FutureRecordMetadata) are kept by its batch and called
straight from the batch's completion: kafka-python's call shapes (``fn(*args, value,
**kwargs)``), registration order kept across callbacks and errbacks of a batch, only the matching
kind called, a raising callback logged and the rest still run, and callbacks added after
completion run at once.
"""
from __future__ import annotations

import logging

from raftka.client.errors import KafkaTimeoutError
from raftka.client.futures import FutureRecordMetadata, ProduceRequestResult
from raftka.client.structs import RecordMetadata


def _batch(n: int) -> tuple[ProduceRequestResult, list[FutureRecordMetadata]]:
    result = ProduceRequestResult("t", 3)
    return result, [FutureRecordMetadata(result, i, 1000 + i, -1, 10, 0) for i in range(n)]


def test_callbacks_get_their_records_metadata_in_registration_order_and_errbacks_stay_silent():
    result, futures = _batch(3)
    calls: list = []
    futures[2].add_callback(lambda tag, md, extra=None: calls.append((tag, md, extra)), "c2", extra="x")
    futures[0].add_callback(lambda tag, md: calls.append((tag, md, None)), "c0")
    futures[0].add_errback(lambda err: calls.append(("e0", err, None)))
    futures[1].add_both(lambda value: calls.append(("b1", value, None)))
    assert calls == []
    result.complete(500, -1, 7, None)
    assert [c[0] for c in calls] == ["c2", "c0", "b1"]
    md = calls[0][1]
    assert isinstance(md, RecordMetadata) and calls[0][2] == "x"
    assert md == RecordMetadata("t", 3, 502, 1002, 7, -1, 10, 0)
    assert calls[1][1].offset == 500 and calls[2][1].offset == 501
    # Added after completion: called at once, with the same metadata.
    futures[2].add_callback(lambda md: calls.append(("late", md, None)))
    assert calls[-1] == ("late", md, None)


def test_a_failed_batch_calls_errbacks_with_the_error_and_never_callbacks():
    result, futures = _batch(2)
    seen: list = []
    futures[0].add_callback(seen.append)
    futures[0].add_errback(lambda prefix, err: seen.append((prefix, err)), "e0")
    futures[1].add_both(seen.append)
    error = KafkaTimeoutError("batch expired")
    result.complete(-1, -1, -1, error)
    assert seen == [("e0", error), error]
    futures[1].add_errback(seen.append)  # after completion
    assert seen[-1] is error


def test_a_raising_callback_is_logged_and_the_others_still_run(caplog):
    result, futures = _batch(2)
    ran: list = []

    def boom(_md):
        raise RuntimeError("user bug")
    futures[0].add_callback(boom)
    futures[1].add_callback(ran.append)
    with caplog.at_level(logging.ERROR):
        result.complete(0, -1, 0, None)
    assert len(ran) == 1 and ran[0].offset == 1
    assert any("user callback raised" in r.getMessage() for r in caplog.records)


def test_a_future_without_a_batch_still_takes_callbacks():
    future = FutureRecordMetadata()
    got: list = []
    future.add_callback(got.append).add_errback(lambda e: got.append(("err", e)))
    md = RecordMetadata("t", 0, 1, 2)
    future.success(md)
    assert got == [md]
