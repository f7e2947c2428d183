"""`raftka perf ...`: benchmarks, like kafka-producer-perf-test and friends.

Each benchmark is a sub-subcommand; its module registers it in `register_<name>` below.
"""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("perf", help="benchmarks (storage, metadata, produce, consume, e2e, failover)")
    perf = parser.add_subparsers(dest="perf_command", metavar="BENCHMARK")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    register_storage(perf)
    from raftka import perf_metadata
    perf_metadata.register(perf)
    from raftka import perf_client  # produce, consume, e2e, failover
    perf_client.register(perf)


def register_storage(perf: argparse._SubParsersAction) -> None:
    from raftka import perf_storage
    perf_storage.register(perf)
