"""`raftka server --config FILE`: run a controller, a broker, or both (process.roles)."""
from __future__ import annotations

import argparse
import logging
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("server", help="run a controller and/or broker node")
    parser.add_argument("--config", required=True, help="properties file (Kafka's keys)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from raft_meta.controller.config import load_server_config
    config = load_server_config(args.config)
    if "broker" in config.roles:
        if config.is_controller:
            from broker.server import run_combined
            return run_combined(config)
        from broker.server import run_broker
        return run_broker(config)
    from raft_meta.controller.server import run_controller
    return run_controller(config)
