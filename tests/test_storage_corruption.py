"""Corruption found on read (storage/): a batch that a disk changed after it was written.

Each test writes a real log, flips bytes in a segment file the way a failing disk would (inside
a sealed segment below the recovery point, in a header, in a clean-shutdown active segment), and
proves that the read refuses the batch with a KAFKA_STORAGE_ERROR naming the file and byte
position, that it is logged at ERROR once per partition and cause, that the log remembers where,
and that ``truncate_at_corruption`` cuts the log after its last good batch. Before this work the
flipped payload was served as if it were good (CRCs were not checked on read).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from raftka.common.errors import KafkaStorageError
from raftka.common.records import BatchBuilder, iter_batches
from raftka.storage import Log, LogCorruptedError
from raftka.storage.log import _corruption_log


def make_batch(tag: int, count: int = 2, value_size: int = 60) -> bytes:
    builder = BatchBuilder(batch_size=1 << 20)
    for i in range(count):
        builder.append(1_000 + i, b"k%d" % tag, bytes([tag % 256]) * value_size)
    return builder.build()


@pytest.fixture(autouse=True)
def fresh_rate_limit():
    """The rate limiter is per process: each test starts with nothing written yet."""
    _corruption_log._causes.clear()
    yield


def open_log(tmp_path: Path) -> Log:
    return Log.open(tmp_path / "t-0", {"segment.bytes": 1024}, topic="t", partition=0)


def written_log(tmp_path: Path, batches: int = 12) -> Log:
    lg = open_log(tmp_path)
    for tag in range(batches):
        lg.append_as_leader(make_batch(tag), leader_epoch=0)
    lg.close()
    return open_log(tmp_path)  # reopened: nothing in the tail cache, every read goes to the files


def flip(path: Path, position: int, count: int = 4) -> None:
    """Invert ``count`` bytes at ``position`` in place, as a disk returning bad sectors would."""
    with open(path, "r+b") as file:
        file.seek(position)
        data = file.read(count)
        file.seek(position)
        file.write(bytes(b ^ 0xFF for b in data))


def batch_positions(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of each batch in a segment file."""
    return [(pos, h.base_offset, h.size) for pos, h in iter_batches(path.read_bytes())]


def read_everything(lg: Log, start: int = 0) -> int:
    offset = start
    while offset < lg.log_end_offset:
        data = lg.read(offset, 10_000).records
        last = list(iter_batches(data))[-1][1]
        offset = last.next_offset
    return offset


def test_a_flipped_payload_in_a_sealed_segment_is_refused_with_its_file_and_position_and_logged_once(
        tmp_path, caplog):
    lg = written_log(tmp_path)
    sealed = lg.segments[0]
    assert len(lg.segments) > 2 and sealed.next_offset <= lg.recovery_point
    pos, base, size = batch_positions(sealed.log_path)[1]
    flip(sealed.log_path, pos + size - 10)  # inside the records: only the CRC can tell
    caplog.set_level(logging.ERROR, logger="raftka.storage.log")
    good = lg.read(0, 100_000).records  # the batches before it still go out (they pass their check)
    assert [h.base_offset for _, h in iter_batches(good)] == [0] and base == 2
    for _ in range(3):  # a consumer retrying from the corrupt batch
        with pytest.raises(LogCorruptedError) as raised:
            lg.read(base, 100_000)
    error = raised.value
    assert isinstance(error, KafkaStorageError) and error.code == 56  # KAFKA_STORAGE_ERROR on the wire
    assert str(sealed.log_path) in error.message and f"byte {pos}" in error.message and "CRC" in error.message
    assert lg.corruption.offset == base and lg.corruption.position == pos and lg.corruption.cause == "crc"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and str(sealed.log_path) in errors[0].getMessage() and f"byte {pos}" in errors[0].getMessage()
    assert lg.read(sealed.next_offset, 100_000).records  # later segments are fine
    lg.close()


@pytest.mark.parametrize("where, cause", [(8, "header"), (0, "offsets"), (16, "header")])
def test_a_damaged_header_is_corruption_too_never_a_short_or_empty_read(tmp_path, where, cause):
    """batchLength (8), baseOffset (0, outside the CRC: caught by offset continuity) and the
    magic byte (16): the read fails loudly instead of answering nothing."""
    lg = written_log(tmp_path)
    seg = lg.segments[1]
    pos, base, _ = batch_positions(seg.log_path)[1]
    flip(seg.log_path, pos + where, 1 if where == 16 else 4)
    with pytest.raises(LogCorruptedError) as raised:
        read_everything(lg, seg.base_offset)
    assert raised.value.corruption.position == pos and raised.value.corruption.offset == base
    assert raised.value.corruption.cause in (cause, "index")
    lg.close()


def test_truncate_at_corruption_keeps_every_batch_before_it_and_the_log_takes_appends_again(tmp_path):
    lg = written_log(tmp_path)
    lg.update_high_watermark(lg.log_end_offset)
    seg = lg.segments[1]
    pos, base, size = batch_positions(seg.log_path)[1]
    flip(seg.log_path, pos + 30)
    with pytest.raises(LogCorruptedError):
        read_everything(lg)
    assert lg.truncate_at_corruption() == base
    assert lg.log_end_offset == base and lg.high_watermark == base and lg.corruption is None
    assert len(lg.segments) == 2 and lg.segments[-1].size == pos
    assert read_everything(lg) == base  # everything left passes its check
    lg.append_as_follower(_restamped(make_batch(99), base))  # a follower fetches the rest again
    assert read_everything(lg) == base + 2
    lg.close()
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == base + 2 and read_everything(reopened) == base + 2
    reopened.close()


def test_flipped_bytes_in_the_active_segment_after_a_clean_shutdown_are_found_by_the_read(tmp_path):
    lg = written_log(tmp_path, batches=3)
    lg.close()  # clean
    active = lg.segments[-1].log_path
    pos, base, size = batch_positions(active)[-1]
    flip(active, pos + size - 5)
    lg = open_log(tmp_path)  # clean: no scan, the indexes are trusted
    with pytest.raises(LogCorruptedError) as raised:
        read_everything(lg)
    assert raised.value.corruption.file == active and raised.value.corruption.position == pos
    lg.close()


def _restamped(records: bytes, base_offset: int) -> bytes:
    from raftka.common.records import assign_offsets
    return assign_offsets(records, base_offset, 0)


def test_offset_for_timestamp_reports_a_corrupt_batch_the_same_way(tmp_path):
    lg = written_log(tmp_path)
    seg = lg.segments[0]
    pos, base, size = batch_positions(seg.log_path)[0]
    flip(seg.log_path, pos + size - 10)
    with pytest.raises(LogCorruptedError) as raised:
        lg.offset_for_timestamp(0)
    assert raised.value.corruption.position == pos
    lg.close()


def test_a_log_without_corruption_has_nothing_to_cut(tmp_path):
    lg = written_log(tmp_path, batches=2)
    assert lg.truncate_at_corruption() is None and lg.log_end_offset == 4
    lg.close()
    assert os.path.exists(tmp_path / "t-0")
