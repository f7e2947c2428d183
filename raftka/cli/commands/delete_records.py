"""`raftka delete-records`: Kafka's kafka-delete-records, on the public AdminClient.

    raftka delete-records --offset-json-file offsets.json

The file is kafka-delete-records': ``{"version": 1, "partitions": [{"topic": "orders",
"partition": 0, "offset": 1000}]}``; offset -1 deletes everything below the high watermark. Each
partition's log start offset moves up to the offset (records below it are gone for every
consumer, whose ``auto.offset.reset`` then applies), once every in-sync replica has moved it.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, bootstrap_servers, command_configs,
                                         one_line_errors, read_json_file)

def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("delete-records", help="delete a partition's records below an offset",
                                   description="Delete records (DeleteRecords), as kafka-delete-records.")
    add_bootstrap_args(parser)
    parser.add_argument("--offset-json-file", required=True, metavar="FILE",
                        help='{"partitions": [{"topic": "T", "partition": 0, "offset": 1000}]} (-1: the high watermark)')
    parser.add_argument("--timeout-ms", type=int, default=60_000, help="request timeout")
    parser.set_defaults(func=run)


def parse_offsets(document: Any, source: str) -> dict[Any, int]:
    """{TopicPartition: offset} of kafka-delete-records' JSON; CommandError saying what is wrong."""
    from raftka.client import TopicPartition
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CommandError(f'{source}: expected {{"partitions": [{{"topic": "T", "partition": 0, "offset": N}}]}}')
    out: dict[Any, int] = {}
    for entry in entries:
        def number(key: str, low: int) -> bool:
            value = entry.get(key) if isinstance(entry, dict) else None
            return isinstance(value, int) and not isinstance(value, bool) and value >= low
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str) and number("partition", 0)
                and number("offset", -1)):
            raise CommandError(f"{source}: each entry needs a topic, a partition (>= 0) and an offset (>= -1), "
                               f"got {json.dumps(entry)[:100]}")
        tp = TopicPartition(entry["topic"], entry["partition"])
        if tp in out:
            raise CommandError(f"{source}: {tp.topic}-{tp.partition} is listed twice")
        out[tp] = entry["offset"]
    return out


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from raftka.client import AdminClient
    offsets = parse_offsets(read_json_file(args.offset_json_file, "--offset-json-file"), args.offset_json_file)
    print("Executing records delete operation")
    with AdminClient(**{**command_configs(args, "admin"), "bootstrap_servers": bootstrap_servers(args),
                        "request_timeout_ms": args.timeout_ms, "client_id": "raftka-delete-records"}) as admin:
        results = admin.delete_records(offsets, timeout_ms=args.timeout_ms)
    print("Records delete operation completed:")
    for tp, result in sorted(results.items()):
        print(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {result['low_watermark']}")
    return 0
