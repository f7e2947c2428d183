"""`raftka dump-log PATH...`: Kafka's kafka-dump-log. Decodes partition log files offline.

PATH is a segment (``00000000000000000000.log``), its ``.index`` or ``.timeindex``, or a
partition directory (every segment in it, in offset order). For a segment it prints one line
per record batch (offsets, producer id and sequence, leader epoch, timestamps, size, codec,
CRC and whether it checks out); ``--print-data-log`` adds every record (key, value, headers).
Every batch's CRC-32C is verified and its records decoded; offsets must not go back. A corrupt
batch or index entry, bytes that are not a whole batch, or a sealed segment without its
``.index`` or ``.timeindex`` are reported and make the exit code 1 (the rest of a segment after
a corrupt batch cannot be trusted and is not read). The newest segment of a directory may lack
its indexes while its broker runs or after a crash (the broker writes them at roll and close,
and rebuilds them when it opens the log): that is only noted.
"""
from __future__ import annotations

import argparse
import mmap
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from raftka.cli.commands._common import CommandError, one_line_errors

PRINT_BYTES_MAX = 1024  # a printed key or value is cut after this many bytes (--max-bytes)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("dump-log", help="decode segment and index files, check CRCs",
                                   description="Decode partition log files offline (Kafka's kafka-dump-log).")
    parser.add_argument("paths", nargs="*", metavar="PATH", help=".log, .index, .timeindex files or partition dirs")
    parser.add_argument("--files", help="comma-separated files (Kafka's flag; same as PATH)")
    parser.add_argument("--print-data-log", action="store_true", help="print every record too")
    parser.add_argument("--max-bytes", type=int, default=PRINT_BYTES_MAX,
                        help="cut printed keys and values after this many bytes")
    parser.set_defaults(func=run)


class Report:
    def __init__(self) -> None:
        self.problems = 0

    def problem(self, text: str) -> None:
        self.problems += 1
        print(f"ERROR: {text}")


def expand(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".log", ".index", ".timeindex"))
            if not files:
                raise CommandError(f"{path} holds no .log, .index or .timeindex file")
            out.extend(sorted(files, key=lambda p: (p.stem, {".log": 0, ".index": 1, ".timeindex": 2}[p.suffix])))
        elif path.exists():
            out.append(path)
        else:
            raise CommandError(f"no such file or directory: {path}")
    return out


@one_line_errors
def run(args: argparse.Namespace) -> int:
    paths = list(args.paths) + [p for p in (args.files or "").split(",") if p]
    if not paths:
        raise CommandError("dump-log: give at least one PATH (a .log/.index/.timeindex file or a partition dir)")
    report = Report()
    for path in expand(paths):
        print(f"Dumping {path}")
        if path.suffix == ".log":
            check_indexes_present(path, report)
            dump_segment(path, report, print_records=args.print_data_log, max_bytes=args.max_bytes)
        elif path.suffix == ".index":
            dump_offset_index(path, report)
        elif path.suffix == ".timeindex":
            dump_time_index(path, report)
        else:
            raise CommandError(f"{path}: not a .log, .index or .timeindex file")
    if report.problems:
        print(f"{report.problems} problem(s) found")
        return 1
    return 0


def _base_offset(path: Path) -> int | None:
    return int(path.stem) if path.stem.isdigit() else None


@contextmanager
def _mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    with open(path, "rb") as file:
        size = file.seek(0, 2)
        if size == 0:
            yield b""
            return
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mapped
        finally:
            mapped.close()


def check_indexes_present(path: Path, report: Report) -> None:
    """A segment's ``.index`` and ``.timeindex`` must be beside it, except the newest segment's."""
    newest = max((p.name for p in path.parent.glob("*.log") if p.stem.isdigit()), default=path.name)
    for suffix in (".index", ".timeindex"):
        index = path.with_suffix(suffix)
        if index.exists():
            continue
        if path.name == newest:
            print(f"Note: {index} is missing (normal for the active segment of a running broker or after "
                  f"a crash: the broker rebuilds it when it opens the log)")
        else:
            report.problem(f"{index} is missing: {path.name} is a sealed segment, whose indexes were "
                           f"written when it rolled (the broker rebuilds them when it next opens the log)")


def dump_segment(path: Path, report: Report, *, print_records: bool, max_bytes: int) -> None:
    from raftka.common.errors import CorruptRecordError
    from raftka.common.records import BATCH_OVERHEAD_BYTES, LOG_OVERHEAD_BYTES, decode_batch, read_header
    base = _base_offset(path)
    print(f"Starting offset: {base if base is not None else 'unknown'}")
    batches = records = 0
    with _mapped(path) as data:
        total = len(data)
        pos = 0
        expected = base
        while pos < total:
            if total - pos < BATCH_OVERHEAD_BYTES:  # not even a whole header left
                report.problem(f"{total - pos} bytes at position {pos} are not a whole record batch")
                break
            try:
                header = read_header(data, pos)
            except CorruptRecordError as error:
                report.problem(f"position {pos}: {error.message}")
                break
            size = header.batch_length + LOG_OVERHEAD_BYTES
            if total - pos < size:
                report.problem(f"the batch at position {pos} (baseOffset {header.base_offset}) declares {size} "
                               f"bytes but only {total - pos} are left: a torn write")
                break
            problem = None
            decoded = []
            try:
                _, decoded = decode_batch(data, pos)
            except CorruptRecordError as error:
                problem = error.message
            valid = problem is None
            if expected is not None and header.base_offset < expected:
                report.problem(f"the batch at position {pos} starts at offset {header.base_offset}, before "
                               f"{expected} (offsets go back)")
            print(_batch_line(header, pos, valid))
            if not valid:
                report.problem(str(problem))
                break  # lengths after a corrupt batch cannot be trusted
            if print_records:
                for index, record in enumerate(decoded):
                    print(_record_line(record, header, index, max_bytes))
            batches += 1
            records += header.record_count
            expected = header.next_offset
            pos += size
    print(f"Batches: {batches}, records: {records}, bytes: {pos} of {total}")


_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _batch_line(h, pos: int, valid: bool) -> str:  # type: ignore[no-untyped-def]
    kind = "LogAppendTime" if h.timestamp_type == 1 else "CreateTime"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"position: {pos} {kind}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {_CODECS.get(h.compression, h.compression)} crc: {h.crc} isvalid: {str(valid).lower()}")


def _record_line(record, header, index: int, max_bytes: int) -> str:  # type: ignore[no-untyped-def]
    sequence = -1 if header.base_sequence < 0 else header.base_sequence + index
    kind = "LogAppendTime" if header.timestamp_type == 1 else "CreateTime"
    headers = ",".join(f"{k}:{_show(v, max_bytes)}" for k, v in record.headers)
    return (f"| offset: {record.offset} {kind}: {record.timestamp} "
            f"keySize: {-1 if record.key is None else len(record.key)} "
            f"valueSize: {-1 if record.value is None else len(record.value)} sequence: {sequence} "
            f"headerKeys: [{','.join(k for k, _ in record.headers)}] headers: [{headers}] "
            f"key: {_show(record.key, max_bytes)} payload: {_show(record.value, max_bytes)}")


def _show(data: bytes | None, max_bytes: int) -> str:
    if data is None:
        return "null"
    text = bytes(data[:max_bytes]).decode("utf-8", errors="backslashreplace")
    return text + (f"...({len(data)} bytes)" if len(data) > max_bytes else "")


def dump_offset_index(path: Path, report: Report) -> None:
    from raftka.storage.index import OFFSET_ENTRY as _OFFSET_ENTRY  # relative_offset:u32 position:u32
    base = _base_offset(path) or 0
    data = path.read_bytes()
    if len(data) % _OFFSET_ENTRY.size:
        report.problem(f"{path}: {len(data)} bytes is not a whole number of {_OFFSET_ENTRY.size}-byte entries")
    last = (-1, -1)
    for i in range(len(data) // _OFFSET_ENTRY.size):
        relative, position = _OFFSET_ENTRY.unpack_from(data, i * _OFFSET_ENTRY.size)
        print(f"offset: {base + relative} position: {position}")
        if (relative, position) <= last or relative <= last[0] or position <= last[1]:
            report.problem(f"entry {i}: offset {base + relative} position {position} does not increase")
        last = (relative, position)


def dump_time_index(path: Path, report: Report) -> None:
    from raftka.storage.index import TIME_ENTRY as _TIME_ENTRY  # timestamp:i64 relative_offset:u32
    base = _base_offset(path) or 0
    data = path.read_bytes()
    if len(data) % _TIME_ENTRY.size:
        report.problem(f"{path}: {len(data)} bytes is not a whole number of {_TIME_ENTRY.size}-byte entries")
    last_ts, last_rel = None, -1
    for i in range(len(data) // _TIME_ENTRY.size):
        timestamp, relative = _TIME_ENTRY.unpack_from(data, i * _TIME_ENTRY.size)
        print(f"timestamp: {timestamp} offset: {base + relative}")
        if (last_ts is not None and timestamp <= last_ts) or relative < last_rel:
            report.problem(f"entry {i}: timestamp {timestamp} offset {base + relative} does not increase")
        last_ts, last_rel = timestamp, relative
