"""`raftka server --config FILE`: run a controller, a broker, or both (process.roles)."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("server", help="run a controller and/or broker node")
    parser.add_argument("--config", required=True, help="properties file (Kafka's keys)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("error: not implemented yet")
