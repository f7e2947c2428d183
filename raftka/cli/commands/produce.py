"""`raftka produce TOPIC`: Kafka's console producer. One record per line of stdin.

    printf 'match-1:goal\\nmatch-2:card\\n' | raftka produce events --key-separator :
    printf 'source:web,trace:42\\tmatch-1:goal\\n' | raftka produce events --headers --key-separator :
    printf 'match-1\\tgoal\\n' | raftka produce --topic events --property parse.key=true

``--property`` takes the console producer's line reader properties (parse.key, key.separator,
parse.headers, headers.delimiter, ...; see READER_PROPERTIES); ``--key-separator SEP`` stands for
``parse.key=true`` with ``key.separator=SEP``, ``--headers`` for ``parse.headers=true``. A line is
``[HEADERS<headers.delimiter>][KEY<key.separator>]VALUE`` with HEADERS ``k1:v1,k2:v2`` (tab,
comma and colon by default); an empty header part means no headers. ``--producer-property`` and
``--producer.config`` take producer configs by Kafka's names; a flag given on the command line
wins over them, as in Kafka's tool. Prints ``produced N records to TOPIC`` on stderr at the end;
exit 1 if any record was not acknowledged.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, add_client_property_args,
                                         bootstrap_servers, client_role_configs, one_line_errors, say)

ACKS = {"all": "all", "-1": "all", "1": 1, "0": 0}
LINE_BYTES_MAX = 1_048_576  # a longer line is refused (a record larger than max.request.size anyway)
TIMEOUT_MS = 30_000  # --timeout-ms when not given

# Kafka's LineMessageReader properties (--property KEY=VALUE) -> (the LineFormat field they set,
# whether the value is a boolean). --key-separator and --headers set the same fields.
READER_PROPERTIES = {
    "parse.key": ("parse_key", True),
    "key.separator": ("key_separator", False),
    "parse.headers": ("parse_headers", True),
    "headers.delimiter": ("headers_delimiter", False),
    "headers.separator": ("headers_separator", False),
    "headers.key.separator": ("headers_key_separator", False),
    "null.marker": ("null_marker", False),
    "ignore.error": ("ignore_error", True),
}


@dataclass
class LineFormat:
    """How a line of stdin becomes a record (the defaults are Kafka's)."""
    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    null_marker: str | None = None  # a key, value or header value equal to it is null
    ignore_error: bool = False  # a missing separator: no key (or no headers) instead of an error

    def check(self) -> None:
        """CommandError for separators a line could not be split by."""
        for name, (field, boolean) in READER_PROPERTIES.items():
            if not boolean and field != "null_marker" and getattr(self, field) == "":
                raise CommandError(f"{name} must not be empty")
        if self.parse_headers and self.headers_delimiter == self.headers_separator:
            raise CommandError("headers.delimiter and headers.separator must differ")
        if self.parse_headers and self.headers_separator == self.headers_key_separator:
            raise CommandError("headers.separator and headers.key.separator must differ")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("produce", help="send lines of stdin as records (console producer)",
                                   description="Send each line of stdin as one record.")
    parser.add_argument("topic", metavar="TOPIC", nargs="?", help="the topic (or --topic)")
    parser.add_argument("--topic", dest="topic_flag", metavar="TOPIC", help="the topic (Kafka's flag)")
    add_bootstrap_args(parser)
    add_client_property_args(parser, "producer")
    parser.add_argument("--key-separator", metavar="SEP",
                        help="each line is KEY<SEP>VALUE (parse.key=true, key.separator=SEP)")
    parser.add_argument("--acks", choices=sorted(ACKS), default=None,
                        help="all (default, idempotent), 1 (leader only) or 0 (no answer)")
    parser.add_argument("--headers", action="store_true",
                        help="each line starts with headers: k1:v1,k2:v2<TAB>... (parse.headers=true)")
    parser.add_argument("--property", action="append", metavar="KEY=VALUE",
                        help="a line reader property, as Kafka's console producer takes them: "
                             + ", ".join(READER_PROPERTIES) + "; repeatable")
    parser.add_argument("--partition", type=int, default=None, help="send every record to this partition")
    parser.add_argument("--compression-type", choices=["none", "gzip", "snappy", "lz4", "zstd"], default=None,
                        help="default none")
    parser.add_argument("--linger-ms", type=int, default=None, help="default 5")
    parser.add_argument("--batch-size", type=int, default=None, help="default 16384")
    parser.add_argument("--timeout-ms", type=int, default=None,
                        help=f"how long a record may wait for its acknowledgement (delivery.timeout.ms; "
                             f"default {TIMEOUT_MS})")
    parser.add_argument("--quiet", action="store_true", help="no summary line on stderr")
    parser.set_defaults(func=run)


def line_format(args: argparse.Namespace) -> LineFormat:
    """The LineFormat of --key-separator, --headers and then --property KEY=VALUE (a boolean is
    true when it says "true" in any case, as in Kafka); CommandError for a key the reader does
    not know."""
    fmt = LineFormat(parse_headers=bool(args.headers))
    if args.key_separator is not None:
        if args.key_separator == "":
            raise CommandError("--key-separator must not be empty")
        fmt.parse_key, fmt.key_separator = True, args.key_separator
    for item in args.property or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CommandError(f"--property {item!r}: expected KEY=VALUE")
        if key not in READER_PROPERTIES:
            raise CommandError(f"--property {key}: unknown (known: {', '.join(READER_PROPERTIES)})")
        field, boolean = READER_PROPERTIES[key]
        setattr(fmt, field, value.strip().lower() == "true" if boolean else value)
    fmt.check()
    return fmt


def parse_line(line: str, fmt: LineFormat, number: int
               ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]:
    """(key, value, headers) of one input line, as Kafka's LineMessageReader splits it;
    CommandError naming the line when it lacks a separator (unless ignore.error)."""
    rest = line
    parsed_headers = None
    if fmt.parse_headers:
        head, found, after = rest.partition(fmt.headers_delimiter)
        if found:
            rest = after
            parsed_headers = [] if head == fmt.null_marker else _headers(head, fmt, number)
        elif not fmt.ignore_error:
            shown = "tab" if fmt.headers_delimiter == "\t" else repr(fmt.headers_delimiter)
            raise CommandError(f"line {number}: no {shown} after the headers (headers.delimiter)")
    key = None
    if fmt.parse_key:
        text, found, after = rest.partition(fmt.key_separator)
        if found:
            key, rest = _bytes(text, fmt), after
        elif not fmt.ignore_error:
            raise CommandError(f"line {number}: no key separator {fmt.key_separator!r} found")
    return key, _bytes(rest, fmt), parsed_headers


def _headers(text: str, fmt: LineFormat, number: int) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    for item in text.split(fmt.headers_separator) if text else []:
        name, found, value = item.partition(fmt.headers_key_separator)
        if not found and fmt.ignore_error:
            out.append((item, None))
            continue
        if not found or not name:
            raise CommandError(f"line {number}: header {item!r} is not KEY{fmt.headers_key_separator}VALUE")
        if name == fmt.null_marker:
            raise CommandError(f"line {number}: a header key may not be the null.marker {name!r}")
        out.append((name, _bytes(value, fmt)))
    return out


def _bytes(text: str, fmt: LineFormat) -> bytes | None:
    return None if text == fmt.null_marker else text.encode("utf-8", errors="surrogateescape")


def _topic(args: argparse.Namespace) -> str:
    named = [t for t in (args.topic, args.topic_flag) if t]
    if len(named) != 1:
        raise CommandError("name the topic once (TOPIC or --topic TOPIC)")
    return named[0]


def producer_configs(args: argparse.Namespace, properties: dict[str, Any]) -> dict[str, Any]:
    """The Producer's keywords: a flag given on the command line, else the property, else the
    flag's default (Kafka's console producer merges them so)."""
    timeout_ms = args.timeout_ms if args.timeout_ms is not None else TIMEOUT_MS
    defaults: dict[str, Any] = {"acks": "all", "compression_type": None, "linger_ms": 5, "batch_size": 16384,
                                "client_id": "raftka-produce"}
    flags: dict[str, Any] = {}
    if args.acks is not None:
        flags["acks"] = ACKS[args.acks]
    if args.compression_type is not None:
        flags["compression_type"] = None if args.compression_type == "none" else args.compression_type
    if args.linger_ms is not None:
        flags["linger_ms"] = args.linger_ms
    if args.batch_size is not None:
        flags["batch_size"] = args.batch_size
    linger_ms = flags.get("linger_ms", properties.get("linger_ms", defaults["linger_ms"]))
    waits = {"max_block_ms": timeout_ms, "request_timeout_ms": min(timeout_ms, 30_000),
             "delivery_timeout_ms": max(timeout_ms, min(timeout_ms, 30_000) + int(linger_ms or 0))}
    (flags if args.timeout_ms is not None else defaults).update(waits)
    configs = {**defaults, **properties, **flags}
    if "enable_idempotence" not in properties:  # idempotent exactly when acks=all
        configs["enable_idempotence"] = str(configs["acks"]) in ("all", "-1")
    return configs


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from raftka.client import Producer
    topic = _topic(args)
    fmt = line_format(args)
    properties, admin_configs = client_role_configs(args, "producer")
    configs = producer_configs(args, properties)
    servers = bootstrap_servers(args)
    check_topic(servers, topic, args.timeout_ms or TIMEOUT_MS, partition=args.partition, configs=admin_configs)
    producer = Producer(**{**configs, "bootstrap_servers": servers})
    began = time.monotonic()
    sent = 0
    failure: BaseException | None = None
    try:
        for number, raw in enumerate(sys.stdin.buffer, 1):
            if len(raw) > LINE_BYTES_MAX:
                raise CommandError(f"line {number} is {len(raw)} bytes, more than {LINE_BYTES_MAX}")
            line = raw.decode("utf-8", errors="surrogateescape").rstrip("\r\n")
            key, value, headers = parse_line(line, fmt, number)
            if key is None and value is None:
                raise CommandError(f"line {number}: a record needs a key or a value (both are null.marker)")
            producer.send(topic, value, key=key, headers=headers, partition=args.partition)
            sent += 1
    except BaseException as error:  # still deliver what was read before the problem
        failure = error
    failed = producer.close(timeout=configs["delivery_timeout_ms"] / 1000) or []
    if failure is not None:
        raise failure
    if failed:
        tp, error = failed[0]
        raise CommandError(f"{len(failed)} batch(es) not acknowledged; first: partition {tp.partition}: "
                           f"{getattr(error, 'message', None) or error} ({getattr(error, 'name', type(error).__name__)})")
    if not args.quiet:
        acks = {"all": "all", "-1": "all"}.get(str(configs["acks"]), str(configs["acks"]))
        say(f"produced {sent} record{'' if sent == 1 else 's'} to {topic} in {time.monotonic() - began:.1f} s (acks={acks})")
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
