"""Crash test with real processes (issue #foundation item 6).

A child (tests/procs/log_crasher.py) appends batches to a partition log and fsyncs in a loop,
printing each flushed log end offset. The parent SIGKILLs it at a seeded random moment, twice
per seed (the second child recovers what the first left); after half of the kills it also
plays a machine crash (the unflushed tail cut at a random point and followed by random bytes or
zeros, the newest producer snapshot torn). Then it reopens the log and checks:
every offset the child reported as flushed is there; every batch passes its CRC and decodes to
records whose values spell their own offsets; offsets and the idempotent producer's
sequence numbers are contiguous from 0 (no retry appended twice); the file holds no
byte past the last whole batch, so no partial batch can be served. Seeds are printed on failure.
"""
from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raftka.common.records import decode_batch, iter_batches
from raftka.storage import Log

CRASHER = Path(__file__).resolve().parent / "procs" / "log_crasher.py"
SEEDS = int(os.environ.get("RAFTKA_CRASH_SEEDS", "24"))
KILLS_PER_SEED = 2
READY_TIMEOUT_S = 20.0


def _run_and_kill(directory: Path, seed: int, rng: random.Random) -> int:
    """Start a crasher, let it run a random while, SIGKILL it; the last flushed offset."""
    proc = subprocess.Popen([sys.executable, str(CRASHER), str(directory), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
        assert ready, f"seed {seed}: crasher not ready within {READY_TIMEOUT_S} s"
        line = proc.stdout.readline()
        assert line.startswith("ready"), f"seed {seed}: crasher did not start: {line!r}"
        time.sleep(rng.uniform(0.0, 0.25))
    finally:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
    assert "Traceback" not in err, err
    flushed = [int(l.split()[1]) for l in out.splitlines() if l.startswith("flushed")]
    return flushed[-1] if flushed else -1


def _lose_unflushed_data(directory: Path, flushed: int, rng: random.Random) -> None:
    """Simulate a machine crash: everything from the batch at offset ``flushed`` on was never
    fsynced, so cut it at a random point and leave random bytes or zeros after the cut (pages
    half written); tear the newest producer snapshot too (they are written without fsync)."""
    segments = sorted(directory.glob("*.log"))
    damaged = False
    for path in segments:
        data = path.read_bytes()
        if int(path.name[:20]) >= flushed:
            cut = 0
        else:
            cut = None
            for pos, header in iter_batches(data):
                if header.base_offset >= flushed:
                    cut = pos
                    break
            if cut is None:
                continue
        cut = rng.randint(cut, len(data))
        tail = rng.choice([b"", os.urandom(rng.randint(1, 3000)), b"\0" * rng.randint(1, 3000)])
        path.write_bytes(data[:cut] + tail)
        damaged = True
    snapshots = sorted(directory.glob("*.snapshot"))
    if damaged and snapshots and rng.random() < 0.5:
        snapshots[-1].write_bytes(snapshots[-1].read_bytes()[:rng.randint(0, 40)])


def _check_log(directory: Path, flushed: int, seed: int) -> int:
    log = Log.open(directory, {}, topic="crash", partition=0)
    try:
        leo = log.log_end_offset
        assert leo >= flushed, f"seed {seed}: flushed up to {flushed}, log ends at {leo}"
        offset = 0
        sequence = 0
        while offset < leo:
            data = log.read(offset, 1 << 20).records
            end = 0
            for pos, header in iter_batches(data):
                assert header.base_offset == offset, f"seed {seed}: gap at {offset}"
                assert header.base_sequence == sequence, \
                    f"seed {seed}: producer sequence {header.base_sequence} at offset {offset}, expected {sequence}"
                sequence = header.last_sequence + 1
                _, records = decode_batch(data, pos)  # checks the CRC too
                for record in records:
                    stamp = b"%d;" % record.offset
                    assert record.value.startswith(stamp), f"seed {seed}: offset {record.offset} damaged"
                offset = header.next_offset
                end = pos + header.size
            assert end == len(data), f"seed {seed}: a read returned a partial batch"
        assert offset == leo
        on_disk = sum(p.stat().st_size for p in directory.glob("*.log"))
        assert on_disk == log.size_in_bytes, f"seed {seed}: bytes past the last whole batch"
        return leo
    finally:
        log.close()


@pytest.mark.parametrize("seed", range(SEEDS))
def test_every_flushed_batch_survives_sigkill_intact_and_nothing_partial_is_served(tmp_path, seed):
    rng = random.Random(seed)
    directory = tmp_path / "crash-0"
    print(f"crash test seed {seed}")
    last_flushed = -1
    for kill in range(KILLS_PER_SEED):
        flushed = _run_and_kill(directory, seed * 100 + kill, rng)
        last_flushed = max(last_flushed, flushed)
        if rng.random() < 0.5 and last_flushed >= 0:
            _lose_unflushed_data(directory, last_flushed, rng)
    leo = _check_log(directory, last_flushed, seed)
    assert leo >= max(last_flushed, 0)
