"""The controller process: Raft member + metadata state machine + RPC listener.

``run_controller(config)`` must be called from the main thread (pysyncobj's tick thread dies
with the thread that created it). It:

1. builds the metadata state machine and the Raft client (journal and snapshots in
   ``<log.dirs[0]>/__cluster_metadata-0``, Raft port from ``controller.quorum.voters``);
2. starts the RPC server on the ``CONTROLLER://host:port`` listener;
3. prints ``raftka controller <id> ready raft=<host:port> rpc=<host:port>`` on stdout (the
   cluster API and scripts wait for it);
4. serves until SIGTERM/SIGINT, then closes the listener and the Raft node and returns 0.

Combined mode uses the pieces: ``build_raft`` (main thread) and ``serve_controller`` (on a loop).

Readiness means "listening", not "leader elected": use DescribeQuorum to find the leader.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
from typing import Any, Callable

from raftka.common import event_loop, security
from raftka.common.sasl import SaslServerSettings
from raftka.common.server_config import ServerConfig
from raftka.raft_meta.controller.rpc import RpcServer
from raftka.raft_meta.controller.service import ControllerService
from raftka.raft_meta.metadata.state import ControllerStateMachine
from raftka.raft_meta.raft import RaftClient, RaftConfig

log = logging.getLogger(__name__)


def build_metadata_machine(config: ServerConfig) -> Any:
    """The metadata state machine: typed records replayed into a MetadataImage."""
    from raftka.raft_meta.metadata.loader import MetadataLoader
    return MetadataLoader()


def build_raft(config: ServerConfig) -> tuple[RaftClient, ControllerStateMachine]:
    """The Raft member and its state machine. Main thread only (pysyncobj's tick thread)."""
    assert threading.current_thread() is threading.main_thread()
    state = ControllerStateMachine(
        build_metadata_machine(config),
        record_bytes_between_snapshots_max=config["metadata.log.max.record.bytes.between.snapshots"])
    raft = RaftClient(
        RaftConfig(
            voters=config.voters, node_id=config.node_id, log_dir=config.metadata_dir,
            password=config.secret, dial=config.dial, bind_address=config.raft_bind_address,
            snapshot_min_entries=config["metadata.log.snapshot.min.records"],
            snapshot_min_interval_s=config["metadata.log.max.snapshot.interval.ms"] / 1000,
        ),
        state,
        on_leader_change=lambda leader, term: log.info("leader is now %s (term %d)", leader, term),
    )
    state.request_snapshot = raft.request_snapshot  # the bytes bound (state.py) on top of raft's own
    return raft, state


def run_controller(config: ServerConfig, *, print_line: Callable[[str], None] | None = None) -> int:
    """The controller-only process: build the Raft member, serve until SIGTERM/SIGINT."""
    say = print_line or (lambda line: print(line, flush=True))
    raft, state = build_raft(config)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_controller(config, raft, state, stop, say)
        return 0
    try:
        return event_loop.run(main())
    finally:
        raft.close()


async def serve_controller(config: ServerConfig, raft: RaftClient, state: ControllerStateMachine,
                           stop: asyncio.Event, say: Callable[[str], None]) -> ControllerService:
    """Serve the controller listeners on the running loop until ``stop`` is set, then close them.

    Combined mode (process.roles=broker,controller) builds the Raft member with ``build_raft``
    on the main thread, then runs this next to the broker in one event loop; the broker may
    read ``state`` (committed metadata, applied on the tick thread) through its listeners.
    """
    service = ControllerService(config, raft, state)
    from raftka.raft_meta.controller.quorum_controller import QuorumController
    QuorumController(service)  # the metadata handlers and the active controller's duties
    host, port = config.controller_listener
    name = config.controller_listener_name
    protocol = config.security_protocol(name)
    sasl = None
    if security.uses_sasl(protocol):
        # Brokers and tools log in with the SCRAM credentials of the committed metadata (the
        # brokers' own user from `storage format --add-scram`, before any broker exists).
        sasl = SaslServerSettings(tuple(config.listener_value(name, "sasl.enabled.mechanisms")),
                                  lambda user, mechanism: state.metadata.image.scram_credential(user, mechanism))
    server = RpcServer(service.handle, **config.server_limits,  # socket.request.max.bytes, max.connections, ...
                       sasl=sasl, name=f"controller {config.node_id} {name}")
    server.on_peer_closed = service.connection_closed  # a kill -9'd broker's heartbeat connection
    await server.start(host, port, ssl=config.server_ssl_context(name) if security.uses_tls(protocol) else None)
    service.start_background()
    http_runner = None
    http_note = ""
    try:
        if "HTTP" in config.listeners:
            from raftka.raft_meta.controller.http import start_http
            http_host, http_port = config.listeners["HTTP"]
            http_runner = await start_http(service, http_host, http_port)
            http_note = f" http={http_host}:{http_port}"
        say(f"raftka controller {config.node_id} ready raft={config.voters[config.node_id]} "
            f"rpc={host}:{server.port}{http_note}")
        await stop.wait()
        say(f"raftka controller {config.node_id} stopping")
    finally:
        await service.close()
        await server.close()
        if http_runner is not None:
            await http_runner.cleanup()
    return service


def main_for_tests(argv: list[str]) -> int:  # pragma: no cover - convenience for ad-hoc runs
    from raftka.common.server_config import load_server_config
    return run_controller(load_server_config(argv[0]))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_for_tests(sys.argv[1:]))
