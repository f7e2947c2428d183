"""`raftka server --config FILE`: run a controller, a broker, or both (process.roles).

Combined mode composes the two servers here, above both (as Kafka's KafkaRaftServer does): the
broker package never imports the controller's."""
from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from raftka.common.server_config import ServerConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("server", help="run a controller and/or broker node")
    parser.add_argument("--config", required=True, help="properties file (Kafka's keys)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from raftka.common import event_loop
    from raftka.common.server_config import load_server_config
    event_loop.event_loop_name()  # a bad RAFTKA_EVENT_LOOP fails before anything starts
    config = load_server_config(args.config)
    if "broker" in config.roles:
        if config.is_controller:
            return run_combined(config)
        from raftka.broker.server import run_broker
        return run_broker(config)
    from raftka.raft_meta.controller.server import run_controller
    return run_controller(config)


def run_combined(config: "ServerConfig", *, print_line: Callable[[str], None] | None = None) -> int:
    """Combined mode (process.roles=broker,controller): a controller and a broker in one process
    and one event loop. The Raft member is built on the main thread first (pysyncobj's tick
    thread dies with its creator). The broker reaches the quorum through
    controller.quorum.bootstrap.servers, or else through this process's own CONTROLLER listener
    (NOT_CONTROLLER answers lead it to the active controller). The HTTP listener, if any, is the
    controller's."""
    import asyncio

    from raftka.broker.server import serve_broker, stop_on_signals
    from raftka.common import event_loop
    from raftka.raft_meta.controller.server import build_raft, serve_controller
    say = print_line or (lambda line: print(line, flush=True))
    if not config["controller.quorum.bootstrap.servers"]:
        host, port = config.controller_listener
        config.values["controller.quorum.bootstrap.servers"] = [f"{host}:{port}"]
    raft, state = build_raft(config)

    async def main() -> int:
        stop = stop_on_signals()
        controller_stop = asyncio.Event()
        controller = asyncio.create_task(serve_controller(config, raft, state, controller_stop, say))
        try:
            await serve_broker(config, stop, say, http=False)
        finally:
            controller_stop.set()  # the broker first: its controlled shutdown needs the quorum
            await controller
        return 0
    try:
        return event_loop.run(main())
    finally:
        raft.close()
