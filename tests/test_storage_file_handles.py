"""The bounded cache of open segment files (storage/file_handles.py, ``log.open.files.max``).

Each test counts the descriptors this process really holds (``/proc/self/fd``) on the test's
own ``.log`` files, checks the bytes read back against what was written, and runs the segment
and log code paths that can meet an evicted file: reads, appends, truncation, retention,
deletion, recovery and flush. The property test interleaves appends, reads, flushes and cache
resizes from a seed printed with any failure.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from raftka.common.errors import ConfigError
from raftka.common.records import BatchBuilder, assign_offsets, read_header
from raftka.common.server_config import SERVER_CONFIGS
from raftka.storage import Log, LogManager
from raftka.storage import file_handles
from raftka.storage.file_handles import FileHandleCache, resolve_open_files_max, segment_files
from raftka.storage.segment import AppendedBatch, LogSegment


def open_log_fds(under: Path) -> list[str]:
    """Paths of the ``.log`` files under ``under`` that this process holds open."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the directory's own descriptor, closed by now
        if target.startswith(str(under)) and target.endswith(".log"):
            found.append(target)
    return found


def batch(offset: int, tag: int, count: int = 2) -> bytes:
    builder = BatchBuilder(batch_size=1 << 20)
    for i in range(count):
        builder.append(1000 + offset + i, f"k{tag}".encode(), f"v{tag}-{offset + i}".encode() * 3)
    return assign_offsets(builder.build(), offset, 0)


def append(seg: LogSegment, data: bytes) -> None:
    h = read_header(data, 0)
    seg.append(data, [AppendedBatch(0, len(data), h.base_offset, h.last_offset, h.max_timestamp)])


def new_segments(directory: Path, cache: FileHandleCache, count: int) -> list[LogSegment]:
    return [LogSegment(directory, base * 1_000_000, index_interval_bytes=64, index_bytes_max=4096,
                       create=True, files=cache) for base in range(count)]


@pytest.fixture
def small_process_cache():
    """The process-wide cache (the one every Log uses) shrunk to 4 for one test."""
    cache = segment_files()
    before = cache.open_files_max
    cache.set_max(4)
    yield cache
    cache.set_max(before)


def test_a_cache_of_4_keeps_at_most_4_of_10_segment_files_open_and_reads_return_what_was_written(tmp_path):
    cache = FileHandleCache(4)
    segs = new_segments(tmp_path, cache, 10)
    assert len(open_log_fds(tmp_path)) <= 4
    written: dict[int, bytes] = {i: b"" for i in range(10)}
    for round_ in range(5):
        for i, seg in enumerate(segs):
            data = batch(seg.next_offset, i)
            append(seg, data)
            written[i] += data
            assert len(open_log_fds(tmp_path)) <= 4 and cache.open_count <= 4
    for i, seg in enumerate(segs):  # every read now meets an evicted file
        assert seg.pread(0, seg.size) == written[i]
        assert seg.find(seg.base_offset + 4) is not None
        assert len(open_log_fds(tmp_path)) <= 4
    assert cache.evictions > 0 and cache.opens > 0
    for seg in segs:
        seg.close()
    assert open_log_fds(tmp_path) == [] and cache.open_count == 0


def test_a_file_in_use_is_never_closed_the_cache_opens_one_more_instead(tmp_path):
    # A file's lock is what a thread holds while it makes a system call on the descriptor;
    # holding it here stands for a read or write running on another thread.
    cache = FileHandleCache(1)
    first, = new_segments(tmp_path, cache, 1)
    append(first, batch(0, 1))
    with first.file.lock:
        first.file.referenced = False
        second = LogSegment(tmp_path, 5_000_000, index_interval_bytes=64, index_bytes_max=4096,
                            create=True, files=cache)
        assert first.file.fd >= 0 and cache.open_count == 2  # over the bound, not closed under use
    assert first.pread(0, first.size) == batch(0, 1)
    third = LogSegment(tmp_path, 9_000_000, index_interval_bytes=64, index_bytes_max=4096,
                       create=True, files=cache)  # the next open closes the now idle ones
    assert cache.open_count == 1 and first.file.fd == second.file.fd == -1
    assert len(open_log_fds(tmp_path)) == 1
    for seg in (first, second, third):
        seg.close()


def test_reads_and_appends_on_two_threads_over_a_cache_smaller_than_their_files_return_the_right_bytes(tmp_path):
    cache = FileHandleCache(2)
    segs = new_segments(tmp_path, cache, 6)
    written = {i: b"" for i in range(6)}
    locks = [threading.Lock() for _ in segs]  # the per-partition lock a Log would hold
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(400):
                i = rng.randrange(len(segs))
                with locks[i]:
                    seg = segs[i]
                    if rng.random() < 0.5:
                        data = batch(seg.next_offset, i)
                        append(seg, data)
                        written[i] += data
                    else:
                        assert seg.pread(0, seg.size) == written[i]
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert cache.evictions > 0
    for i, seg in enumerate(segs):
        assert seg.pread(0, seg.size) == written[i]
        seg.close()


def test_flush_fsyncs_a_written_segment_whose_file_was_closed_by_the_cache(tmp_path, monkeypatch):
    cache = FileHandleCache(1)
    written, clean = new_segments(tmp_path, cache, 2)
    written.flush(indexes=False)
    clean.flush(indexes=False)  # both synced once: a file is unsynced from its opening
    append(written, batch(0, 1))
    third = LogSegment(tmp_path, 9_000_000, index_interval_bytes=64, index_bytes_max=4096,
                       create=True, files=cache)
    assert written.file.fd == -1 and clean.file.fd == -1  # both evicted
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                  real_fsync(fd))[1])
    opens = cache.opens
    written.flush(indexes=False)
    clean.flush(indexes=False)
    assert synced == [str(written.log_path)]  # reopened and fsynced; the clean one left closed
    assert cache.opens == opens + 1
    written.flush(indexes=False)
    assert synced == [str(written.log_path)]  # nothing written since: no second fsync
    for seg in (written, clean, third):
        seg.close()


def test_a_log_truncates_deletes_and_retains_segments_whose_files_were_evicted(tmp_path, small_process_cache):
    lg = Log.open(tmp_path / "t-0", {"segment.bytes": 400, "retention.bytes": 2000}, topic="t", partition=0)
    expected = []
    for i in range(60):
        info = lg.append_as_leader(batch(0, i), 0)
        expected.append(info.first_offset)
        assert len(open_log_fds(tmp_path)) <= 4
    assert len(lg.segments) > 10
    lg.update_high_watermark(lg.log_end_offset)

    def read_offsets(start: int) -> list[int]:
        offsets, offset = [], start
        while offset < lg.log_end_offset:
            data = lg.read(offset, 100_000).records
            pos = 0
            while pos < len(data):
                h = read_header(data, pos)
                offsets.append(h.base_offset)
                pos += h.size
            offset = offsets[-1] + 2
        return offsets

    assert read_offsets(0) == expected
    lg.truncate_to(70)  # deletes the newer segments, cuts one whose file may be evicted
    assert lg.log_end_offset == 70 and read_offsets(0) == expected[:35]
    lg.flush()
    assert lg.delete_old_segments(0) > 0  # retention.bytes: deletes old, evicted segments
    start = lg.log_start_offset
    assert start > 0 and read_offsets(start) == [o for o in expected[:35] if o >= start]
    assert len(open_log_fds(tmp_path)) <= 4
    lg.close()
    assert open_log_fds(tmp_path) == []
    lg = Log.open(tmp_path / "t-0", {"segment.bytes": 400}, topic="t", partition=0)  # loads lazily
    assert read_offsets(start) == [o for o in expected[:35] if o >= start]
    assert len(open_log_fds(tmp_path)) <= 4
    lg.delete()
    assert open_log_fds(tmp_path) == [] and not (tmp_path / "t-0").exists()


def test_property_appends_reads_flushes_and_resizes_agree_with_a_model_and_stay_within_the_bound(tmp_path):
    """Random interleavings (seeded; the seed is in every failure message): the bytes of every
    segment equal what was appended, and the process never holds more descriptors than the
    cache's maximum at that moment."""
    seeds = [int(os.environ["RAFTKA_TEST_SEED"])] if "RAFTKA_TEST_SEED" in os.environ else \
        [random.randrange(2**32) for _ in range(4)]
    for seed in seeds:
        rng = random.Random(seed)
        directory = tmp_path / f"seed-{seed}"
        directory.mkdir()
        cache = FileHandleCache(rng.randint(1, 5))
        segs = new_segments(directory, cache, rng.randint(2, 12))
        model = {i: b"" for i in range(len(segs))}
        for step in range(300):
            i = rng.randrange(len(segs))
            seg = segs[i]
            op = rng.random()
            where = f"seed {seed} (rerun with RAFTKA_TEST_SEED={seed}), step {step}, segment {i}"
            if op < 0.45:
                data = batch(seg.next_offset, i, rng.randint(1, 4))
                append(seg, data)
                model[i] += data
            elif op < 0.85:
                assert seg.pread(0, seg.size) == model[i], where
            elif op < 0.95:
                seg.flush(indexes=False)
            else:
                cache.set_max(rng.randint(1, 5))
            held = len(open_log_fds(directory))
            assert held <= cache.open_files_max and held == cache.open_count, where
        for i, seg in enumerate(segs):
            assert seg.pread(0, seg.size) == model[i], f"seed {seed}: segment {i} at the end"
            seg.close()
        assert open_log_fds(directory) == [], f"seed {seed}"


def test_log_open_files_max_is_derived_from_the_open_files_limit_and_refuses_nonsense():
    assert resolve_open_files_max(-1, soft_limit=1024) == 768
    assert resolve_open_files_max(-1, soft_limit=20_000) == 20_000 - file_handles.OPEN_FILES_RESERVE_MAX
    assert resolve_open_files_max(500, soft_limit=20_000) == 500
    for bad in (0, -2):
        with pytest.raises(ConfigError, match="log.open.files.max: must be a count of at least 1"):
            resolve_open_files_max(bad, soft_limit=1024)
    with pytest.raises(ConfigError, match="open-files limit of 1024 .* at most 768"):
        resolve_open_files_max(5000, soft_limit=1024)
    assert SERVER_CONFIGS.keys["log.open.files.max"].parse("500") == 500
    with pytest.raises(ConfigError, match="log.open.files.max"):
        SERVER_CONFIGS.keys["log.open.files.max"].parse("0")


def test_a_log_manager_applies_log_open_files_max_to_the_process_wide_cache(tmp_path):
    cache = segment_files()
    before = cache.open_files_max
    try:
        manager = LogManager([str(tmp_path / "d")], open_files_max=7)
        assert cache.open_files_max == 7
        manager.close()
        with pytest.raises(ConfigError, match="log.open.files.max"):
            LogManager([str(tmp_path / "e")], open_files_max=0)
    finally:
        cache.set_max(before)


def test_a_broker_with_more_partitions_than_its_open_files_limit_opens_appends_and_reloads_them_all(tmp_path):
    """The reason for the cache: a child process with an open-files soft limit of 256 hosts 600
    partition logs (the default maximum: 192 segment files), appends to and reads every one,
    closes them and loads them again on 8 threads; without the cache the 257th open fails."""
    script = textwrap.dedent(f"""
        import os, resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        from raftka.common.records import BatchBuilder
        from raftka.storage import LogManager
        from raftka.storage.file_handles import segment_files
        def held():
            return sum(os.readlink(f"/proc/self/fd/" + fd).endswith(".log")
                       for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/" + fd))
        most = 0
        manager = LogManager([{str(tmp_path / "data")!r}], open_files_max=-1)
        for p in range(600):
            b = BatchBuilder(batch_size=1 << 16)
            b.append(1000, None, b"v%d" % p)
            manager.get_or_create("t", p).append_as_leader(b.build(), 0)
            most = max(most, held())
        manager.close()
        manager = LogManager([{str(tmp_path / "data")!r}], open_files_max=-1)
        for p in range(600):
            lg = manager.get("t", p)
            assert lg.log_end_offset == 1 and b"v%d" % p in lg.read(0, 1000).records, p
            most = max(most, held())
        manager.close()
        print("OK", segment_files().open_files_max, most)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    ok, maximum, most = out.stdout.split()
    assert ok == "OK" and int(maximum) == 192 and 0 < int(most) <= 192
