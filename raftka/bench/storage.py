"""`raftka perf storage`: the partition log's figures against the raw disk (issue #foundation, item 7).

Measured in one run, on one disk (``--dir``, default: a temporary directory in the current
directory), with one fsync policy (``--flush-messages``; default: fsync once at the end of each
phase, Kafka's default of leaving flushes to the OS):

1. raw sequential write: ``os.write`` of the same chunk sizes to a plain file, same fsyncs;
2. log append of pre-encoded batches of 100-byte records, 16 KiB per batch
   (``Log.append_as_leader``: validation, CRC check, offset stamping, indexes, write);
3. the same with 1 MiB batches, and the ratio to the raw rate;
4. read: the whole log fetched from offset 0 in 1 MiB fetches (page cache warm);
5. batch encode (BatchBuilder) and decode (decode_batch) of 100-byte records, one core.

Prints a table and, with --json, a JSON object. Nothing here asserts a target.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

RECORD_VALUE_BYTES = 100
SMALL_BATCH_BYTES = 16 * 1024
LARGE_BATCH_BYTES = 1024 * 1024
FETCH_BYTES = 1024 * 1024


def register(perf: argparse._SubParsersAction) -> None:
    parser = perf.add_parser("storage", help="partition log append/read rates against the raw disk")
    parser.add_argument("--quick", action="store_true", help="smaller volumes (a ~15 s demo)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument("--dir", default=None, help="directory on the disk to measure "
                        "(default: a temporary directory under the current one)")
    parser.add_argument("--mb", type=int, default=None,
                        help="MiB written per append phase (default 192 quick, 1024 full)")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure, median reported "
                        "(default 3 quick, 5 full)")
    parser.add_argument("--flush-messages", type=int, default=None,
                        help="fsync after this many records (log) / the same bytes (raw); "
                        "default: once at the end of each phase")
    parser.set_defaults(func=run)


def _batches(batch_bytes: int, count: int) -> list[bytes]:
    from raftka.common.records import BatchBuilder
    out = []
    now = int(time.time() * 1000)
    for n in range(count):
        builder = BatchBuilder(batch_size=batch_bytes)
        value = bytes([65 + n % 26]) * RECORD_VALUE_BYTES
        i = 0
        while builder.append(now + i, None, value):
            i += 1
        out.append(builder.build())
    return out


def _raw_write(path: Path, chunk: bytes, total: int, fsync_every: int | None) -> float:
    """Seconds to write ``total`` chunks sequentially (+ fsyncs as the policy says)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for i in range(1, total + 1):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
            if fsync_every and i % fsync_every == 0:
                os.fsync(fd)
        os.fsync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)


def _log_append(directory: Path, batches: list[bytes], total: int, config: dict) -> tuple[float, Any]:
    from raftka.storage import Log
    log = Log.open(directory, config, topic="perf", partition=0)
    start = time.perf_counter()
    append = log.append_as_leader
    n = len(batches)
    for i in range(total):
        append(batches[i % n], 0)
    log.flush()
    return time.perf_counter() - start, log


def _log_read(log: Any) -> tuple[float, int]:
    start = time.perf_counter()
    offset, end, total = 0, log.log_end_offset, 0
    read = log.read
    from raftka.common.records import iter_batches
    while offset < end:
        data = read(offset, FETCH_BYTES).records
        total += len(data)
        last = None
        for _, header in iter_batches(data):  # a consumer finds its next fetch offset so
            last = header
        offset = last.next_offset
    return time.perf_counter() - start, total


def _recover(directory: Path, expected_end: int) -> float:
    """Seconds to open the log as after a crash (no clean shutdown, recovery point 0): every
    batch is re-validated (length, CRC) and the indexes rebuilt."""
    from raftka.storage import Log
    start = time.perf_counter()
    log = Log.open(directory, {"max.message.bytes": 2 * LARGE_BATCH_BYTES}, topic="perf", partition=0)
    seconds = time.perf_counter() - start
    assert log.log_end_offset == expected_end, (log.log_end_offset, expected_end)
    log.close()
    return seconds


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _codec_rates(seconds_budget: float) -> tuple[float, float]:
    from raftka.common.records import BatchBuilder, decode_batch
    value = b"v" * RECORD_VALUE_BYTES
    now = int(time.time() * 1000)
    records = 0
    built = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds_budget:
        builder = BatchBuilder(batch_size=SMALL_BATCH_BYTES)
        i = 0
        while builder.append(now + i, None, value):
            i += 1
        built.append(builder.build())
        records += builder.record_count
    encode = records / (time.perf_counter() - start)
    records = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds_budget:
        for batch in built:
            records += len(decode_batch(batch)[1])
            if time.perf_counter() - start >= seconds_budget:
                break
    decode = records / (time.perf_counter() - start)
    return encode, decode


def run(args: argparse.Namespace) -> int:
    from raftka.common.records import read_header
    mib = args.mb or (192 if args.quick else 1024)
    runs = args.runs or (3 if args.quick else 5)
    parent = Path(args.dir) if args.dir else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="raftka-perf-storage-", dir=parent))
    say: Callable[[str], None] = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json \
        else (lambda s: print(s, flush=True))
    results: dict[str, Any] = {"dir": str(work), "mib_per_phase": mib, "runs": runs,
                               "flush_messages": args.flush_messages,
                               "record_value_bytes": RECORD_VALUE_BYTES}
    try:
        say(f"raftka perf storage: {mib} MiB per phase, {runs} run(s), dir {work}, fsync "
            + (f"every {args.flush_messages} records" if args.flush_messages else "at the end of each phase"))
        rows = []
        for label, batch_bytes in (("16 KiB", SMALL_BATCH_BYTES), ("1 MiB", LARGE_BATCH_BYTES)):
            batches = _batches(batch_bytes, 8)
            per_batch = read_header(batches[0]).record_count
            batch_size = len(batches[0])
            total = max(1, mib * 1024 * 1024 // batch_size)
            config: dict[str, Any] = {"max.message.bytes": batch_size + 1024}
            fsync_every = None
            if args.flush_messages:
                config["flush.messages"] = args.flush_messages
                fsync_every = -(-args.flush_messages // per_batch)  # the log's flush cadence
            raw_s, log_s, read_s, recover_s = [], [], [], []
            read_bytes = 0
            # Warm-up (not timed): the first write of this much data pays for the kernel
            # reclaiming page cache; without it whichever phase runs first looks slow.
            _raw_write(work / "warm-up", batches[0], total, None)
            for r in range(runs):
                # Raw and log alternate which goes first, and each starts after os.sync(), so
                # neither pays for the other's dirty pages.
                directory = work / f"perf-{label.replace(' ', '')}-{r}"
                if r % 2:
                    os.sync()
                    seconds, log = _log_append(directory, batches, total, config)
                    os.sync()
                    raw_s.append(_raw_write(work / f"raw-{r}", batches[0], total, fsync_every))
                else:
                    os.sync()
                    raw_s.append(_raw_write(work / f"raw-{r}", batches[0], total, fsync_every))
                    os.sync()
                    seconds, log = _log_append(directory, batches, total, config)
                log_s.append(seconds)
                seconds, read_bytes = _log_read(log)
                read_s.append(seconds)
                recover_s.append(_recover(directory, log.log_end_offset))
                log.delete()
            nbytes = total * batch_size
            raw = nbytes / _median(raw_s) / 1e6
            app = nbytes / _median(log_s) / 1e6
            rec = total * per_batch / _median(log_s)
            rd = read_bytes / _median(read_s) / 1e6
            key = label.replace(" ", "").lower()
            results[key] = {"batch_bytes": batch_size, "records_per_batch": per_batch,
                            "batches": total, "raw_write_mb_s": round(raw, 1),
                            "append_mb_s": round(app, 1), "append_records_s": round(rec),
                            "ratio_to_raw": round(app / raw, 3), "read_mb_s": round(rd, 1),
                            "read_records_s": round(read_bytes / batch_size * per_batch / _median(read_s)),
                            "recovery_mb_s": round(nbytes / _median(recover_s) / 1e6, 1)}
            rows.append((f"raw write, {label} chunks", raw, None, None))
            rows.append((f"log append, {label} batches", app, rec, app / raw))
            rows.append((f"log read, 1 MiB fetches ({label} batches)", rd,
                         results[key]["read_records_s"], None))
            rows.append((f"recovery after a crash ({label} batches, CRC scan)",
                         results[key]["recovery_mb_s"], None, None))
        encode, decode = _codec_rates(1.0 if args.quick else 3.0)
        results["encode_records_s"] = round(encode)
        results["decode_records_s"] = round(decode)
        say("")
        say(f"{'figure':<50} {'MB/s':>9} {'records/s':>12} {'vs raw':>8}")
        for name, mbs, recs, ratio in rows:
            say(f"{name:<50} {mbs:>9.1f} {(f'{recs:,.0f}' if recs else ''):>12} "
                f"{(f'{ratio:.0%}' if ratio else ''):>8}")
        say(f"{'batch encode (BatchBuilder, 100-byte values)':<50} {'':>9} {encode:>12,.0f}")
        say(f"{'batch decode (decode_batch, 100-byte values)':<50} {'':>9} {decode:>12,.0f}")
        say("")
        checks = [
            ("1 MiB append vs raw", results["1mib"]["ratio_to_raw"], 0.70, "{:.0%}"),
            ("16 KiB append records/s", results["16kib"]["append_records_s"], 300_000, "{:,.0f}"),
            ("encode records/s", encode, 1_000_000, "{:,.0f}"),
            ("decode records/s", decode, 500_000, "{:,.0f}"),
        ]
        results["targets_met"] = all(value >= target for _, value, target, _ in checks)
        for name, value, target, fmt in checks:
            verdict = "met" if value >= target else "MISSED"
            say(f"target {name}: {fmt.format(value)} (>= {fmt.format(target)}): {verdict}")
        if args.json:
            print(json.dumps(results, indent=2))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
