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
    parser.add_argument("--log-format", default="text", choices=["text", "json"],
                        help="log lines on stderr: text, or one JSON object per line (ts, level, logger, "
                             "message, exception) for log shippers; the ready lines on stdout stay as they are")
    parser.set_defaults(func=run)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (json.dumps escapes the newlines of a message or
    a traceback): ts (UTC, ISO 8601, milliseconds), level, logger, message, and exception (the
    formatted traceback) or stack when the record has one."""

    def format(self, record: logging.LogRecord) -> str:
        import datetime
        import json
        line = {"ts": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
                .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str, log_format: str) -> None:
    """The root logger on stderr, as text or as JSON lines (then Python's warnings go through it
    too, so that every line on stderr is JSON)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json"
                         else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler])
    if log_format == "json":
        logging.captureWarnings(True)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, getattr(args, "log_format", "text"))
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
