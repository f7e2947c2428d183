"""`raftka perf ...`: benchmarks, like kafka-producer-perf-test and friends.

Each benchmark is a sub-subcommand; its module in raftka/bench/ registers it (``register``).
"""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("perf", help="benchmarks (storage, metadata, controller-stability, produce, consume, e2e, failover, partitions)")
    perf = parser.add_subparsers(dest="perf_command", metavar="BENCHMARK")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    register_storage(perf)
    from raftka.bench import metadata
    metadata.register(perf)
    from raftka.bench import stability
    stability.register(perf)
    from raftka.bench import client  # produce, consume, e2e, failover
    client.register(perf)
    from raftka.bench import partitions  # the partitions curve
    partitions.register(perf)


def register_storage(perf: argparse._SubParsersAction) -> None:
    from raftka.bench import storage
    storage.register(perf)
