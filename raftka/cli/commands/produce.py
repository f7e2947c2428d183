"""`raftka produce TOPIC`: Kafka's console producer. One record per line of stdin.

    printf 'match-1:goal\\nmatch-2:card\\n' | raftka produce events --key-separator :
    printf 'source:web,trace:42\\tmatch-1:goal\\n' | raftka produce events --headers --key-separator :

With ``--headers`` a line starts with ``k1:v1,k2:v2`` and a tab (Kafka's parse.headers layout:
headers.delimiter tab, headers.separator comma, headers.key.separator colon); an empty header
part before the tab means no headers. Prints ``produced N records to TOPIC`` on stderr at the
end; exit 1 if any record was not acknowledged.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, bootstrap_servers, command_configs,
                                         one_line_errors, say)

ACKS = {"all": "all", "-1": "all", "1": 1, "0": 0}
LINE_BYTES_MAX = 1_048_576  # a longer line is refused (a record larger than max.request.size anyway)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("produce", help="send lines of stdin as records (console producer)",
                                   description="Send each line of stdin as one record.")
    parser.add_argument("topic", metavar="TOPIC")
    add_bootstrap_args(parser)
    parser.add_argument("--key-separator", metavar="SEP",
                        help="each line is KEY<SEP>VALUE (without it, lines are values with no key)")
    parser.add_argument("--acks", choices=sorted(ACKS), default="all",
                        help="all (default, idempotent), 1 (leader only) or 0 (no answer)")
    parser.add_argument("--headers", action="store_true",
                        help="each line starts with headers: k1:v1,k2:v2<TAB>...")
    parser.add_argument("--partition", type=int, default=None, help="send every record to this partition")
    parser.add_argument("--compression-type", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--timeout-ms", type=int, default=30_000,
                        help="how long a record may wait for its acknowledgement (delivery.timeout.ms)")
    parser.add_argument("--quiet", action="store_true", help="no summary line on stderr")
    parser.set_defaults(func=run)


def parse_line(line: str, *, key_separator: str | None, headers: bool, number: int
               ) -> tuple[bytes | None, bytes, list[tuple[str, bytes]] | None]:
    """(key, value, headers) of one input line; CommandError naming the line when it does not
    have the layout the flags ask for."""
    parsed_headers = None
    if headers:
        head, tab, line = line.partition("\t")
        if not tab:
            raise CommandError(f"line {number}: no tab after the headers (--headers expects k1:v1,k2:v2<TAB>...)")
        parsed_headers = []
        for item in head.split(","):
            if not item:
                continue
            key, colon, value = item.partition(":")
            if not colon or not key:
                raise CommandError(f"line {number}: header {item!r} is not KEY:VALUE")
            parsed_headers.append((key, value.encode()))
    if key_separator is None:
        return None, line.encode(), parsed_headers
    key, sep, value = line.partition(key_separator)
    if not sep:
        raise CommandError(f"line {number}: no key separator {key_separator!r} found")
    return key.encode(), value.encode(), parsed_headers


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from raftka.client import Producer
    acks = ACKS[args.acks]
    if args.key_separator == "":
        raise CommandError("--key-separator must not be empty")
    servers = bootstrap_servers(args)
    check_topic(servers, args.topic, args.timeout_ms, partition=args.partition, configs=command_configs(args, "admin"))
    producer = Producer(**{**command_configs(args, "producer"), "bootstrap_servers": servers}, acks=acks, enable_idempotence=acks == "all",
                        compression_type=None if args.compression_type == "none" else args.compression_type,
                        linger_ms=args.linger_ms, batch_size=args.batch_size, client_id="raftka-produce",
                        max_block_ms=args.timeout_ms, request_timeout_ms=min(args.timeout_ms, 30_000),
                        delivery_timeout_ms=max(args.timeout_ms, min(args.timeout_ms, 30_000) + args.linger_ms))
    began = time.monotonic()
    sent = 0
    failure: BaseException | None = None
    try:
        for number, raw in enumerate(sys.stdin.buffer, 1):
            if len(raw) > LINE_BYTES_MAX:
                raise CommandError(f"line {number} is {len(raw)} bytes, more than {LINE_BYTES_MAX}")
            line = raw.decode("utf-8", errors="surrogateescape").rstrip("\r\n")
            key, value, headers = parse_line(line, key_separator=args.key_separator, headers=args.headers,
                                             number=number)
            producer.send(args.topic, value, key=key, headers=headers, partition=args.partition)
            sent += 1
    except BaseException as error:  # still deliver what was read before the problem
        failure = error
    failed = producer.close(timeout=args.timeout_ms / 1000) or []
    if failure is not None:
        raise failure
    if failed:
        tp, error = failed[0]
        raise CommandError(f"{len(failed)} batch(es) not acknowledged; first: partition {tp.partition}: "
                           f"{getattr(error, 'message', None) or error} ({getattr(error, 'name', type(error).__name__)})")
    if not args.quiet:
        say(f"produced {sent} record{'' if sent == 1 else 's'} to {args.topic} in {time.monotonic() - began:.1f} s (acks={args.acks})")
    return 0


def check_topic(servers: str, topic: str, timeout_ms: int, *, partition: int | None = None,
                configs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The topic's description; CommandError when it does not exist (or lacks ``partition``).
    ``configs``: the admin client's other keywords (--command-config)."""
    from raftka.client import AdminClient
    with AdminClient(**{**(configs or {}), "bootstrap_servers": servers, "request_timeout_ms": timeout_ms,
                        "client_id": "raftka-tools"}) as admin:
        [described] = admin.describe_topics([topic])
    if described["error_code"] != 0:
        raise CommandError(f"unknown topic {topic!r} (UNKNOWN_TOPIC_OR_PARTITION); create it with: "
                           f"raftka topics create {topic}")
    count = len(described["partitions"])
    if partition is not None and not 0 <= partition < count:
        raise CommandError(f"topic {topic!r} has partitions 0-{count - 1}, not {partition}")
    return described
