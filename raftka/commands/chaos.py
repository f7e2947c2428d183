"""`raftka chaos ...`: the chaos harness (chaos/).

- `raftka chaos proxy [--listen 127.0.0.1:8474] [--seed N]`: a TCP proxy server with Toxiproxy's
  HTTP API (drive it with any Toxiproxy client).
"""
from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("chaos", help="chaos harness: Toxiproxy-compatible proxy, fault runs, checker")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="chaos_command", metavar="ACTION")

    proxy = sub.add_parser("proxy", help="run a TCP proxy server with Toxiproxy's HTTP API")
    proxy.add_argument("--listen", default="127.0.0.1:8474", metavar="HOST:PORT",
                       help="the HTTP API address (default 127.0.0.1:8474, Toxiproxy's)")
    proxy.add_argument("--seed", type=int, default=None,
                       help="seed for jitter, toxicity and slicer sizes (default: random)")
    proxy.set_defaults(func=run_proxy)


def run_proxy(args: argparse.Namespace) -> int:
    from chaos.proxy_server import ApiError, main
    try:
        return main(args.listen, args.seed)
    except ApiError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
