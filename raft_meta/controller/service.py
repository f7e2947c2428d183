"""The controller's RPC service: what one controller answers on its CONTROLLER listener.

Every controller answers DescribeQuorum (its own view of the Raft quorum). Every other API is
served by the **active controller** only (the Raft leader, once it has applied the log it
inherited); any other controller answers NOT_CONTROLLER with body
``{"controller_id": id or -1, "controller_endpoint": "host:port" or None}`` so the caller can go
straight to the active one.

A decision is a committed record: the metadata handlers (``QuorumController`` in
quorum_controller.py, attached by server.py) build typed metadata records, commit them through Raft (``RaftClient.submit``) and answer only after the commit. A leader
change during the commit answers NOT_CONTROLLER (retriable); a commit that does not finish in
``controller.quorum.request.timeout.ms`` answers REQUEST_TIMED_OUT (retriable, the change may
still happen: records are idempotent, so a retry is safe).

Handlers never raise for bad input: a typed RaftkaError becomes its error code and message in
the response; anything else is a bug, logged, and answered UNKNOWN_SERVER_ERROR.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import Any, Awaitable, Callable

from raftka.common import errors
from raftka.common.errors import NotControllerError, RaftkaError
from raftka.common.server_config import ServerConfig
from raftka.raft_meta.metadata.state import ControllerStateMachine, controller_record
from raftka.raft_meta.raft import RaftClient

log = logging.getLogger(__name__)

# Kafka's API keys (the wire helper's ApiKey enum carries the same numbers).
API_FETCH = 1
API_METADATA = 3
API_CREATE_TOPICS = 19
API_DELETE_TOPICS = 20
API_INIT_PRODUCER_ID = 22
API_DESCRIBE_CONFIGS = 32
API_ALTER_CONFIGS = 33
API_DESCRIBE_QUORUM = 55
API_ALTER_PARTITION = 56
API_BROKER_REGISTRATION = 62
API_BROKER_HEARTBEAT = 63
API_ALLOCATE_PRODUCER_IDS = 67

REGISTER_RETRY_BACKOFF_MS = 200
FETCH_MAX_WAIT_MS_MAX = 10_000
# A metadata fetcher (broker) not seen for this long drops out of DescribeQuorum's observers.
OBSERVER_EXPIRY_MS = 30_000
OBSERVERS_MAX = 10_000
METADATA_TOPIC = "__cluster_metadata"
REGISTER_ATTEMPTS_MAX = 1000  # ~ minutes of retrying while no leader exists

# Every API the controller listener serves (some only once the metadata handlers are attached).
CONTROLLER_APIS = frozenset({
    API_FETCH, API_METADATA, API_CREATE_TOPICS, API_DELETE_TOPICS, API_INIT_PRODUCER_ID,
    API_DESCRIBE_CONFIGS, API_ALTER_CONFIGS, API_DESCRIBE_QUORUM, API_ALTER_PARTITION,
    API_BROKER_REGISTRATION, API_BROKER_HEARTBEAT, API_ALLOCATE_PRODUCER_IDS,
})

Handler = Callable[[int, dict], Awaitable[tuple[int, dict]]]

# The transport connection id of the request being handled (each handler runs in its own task,
# so this is per request); None outside a request or when the caller passed no context.
REQUEST_CONNECTION: contextvars.ContextVar[int | None] = contextvars.ContextVar("request_connection", default=None)


class ControllerService:
    """Serves one controller's RPC; the metadata-specific handlers live in ``handlers``."""

    def __init__(self, config: ServerConfig, raft: RaftClient, state: ControllerStateMachine) -> None:
        self.config = config
        self.raft = raft
        self.state = state
        self.request_timeout_ms: int = config["controller.quorum.request.timeout.ms"]
        self.handlers: dict[int, Handler] = {API_DESCRIBE_QUORUM: self.describe_quorum,
                                             API_FETCH: self.fetch_metadata}
        # Served by every controller (a fetch gets committed records from whoever has them).
        self.any_controller_apis = {API_DESCRIBE_QUORUM, API_FETCH}
        self.fetch_max_records: int = config["metadata.fetch.max.records"]
        self._new_records = asyncio.Event()
        self.request_counts: dict[int, int] = {}
        self.error_counts: dict[int, int] = {}
        # replica_id -> (last fetch_offset, monotonic seconds): fetchers shown as observers.
        self.fetchers: dict[int, tuple[int, float]] = {}
        # Coroutine functions started with the service (e.g. the fencing timer), cancelled at close.
        self.background_factories: list[Callable[[], Awaitable[None]]] = []
        self.started_monotonic = time.monotonic()
        self._tasks: list[asyncio.Task] = []
        # Called with a connection id when a peer closed its connection to this listener.
        self.connection_closed_listeners: list[Callable[[int], None]] = []

    # -- lifecycle -------------------------------------------------------------------------

    def start_background(self) -> None:
        loop = asyncio.get_running_loop()
        self._new_records = asyncio.Event()

        def wake() -> None:
            event, self._new_records = self._new_records, asyncio.Event()
            event.set()

        def on_apply(offset: int, kind: Any, result: Any) -> None:  # tick thread
            try:
                loop.call_soon_threadsafe(wake)
            except RuntimeError:
                pass  # loop closed during shutdown
        self.state.add_listener(on_apply)
        self._tasks.append(loop.create_task(self._announce_endpoint()))
        for factory in self.background_factories:
            self._tasks.append(loop.create_task(factory()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    async def _announce_endpoint(self) -> None:
        """Commit this controller's RPC endpoint (idempotent), retrying until a leader takes it."""
        host, port = self.config.controller_listener
        record = controller_record(self.config.node_id, host, port)
        for _ in range(REGISTER_ATTEMPTS_MAX):
            if self.state.controllers.get(self.config.node_id) == (host, port):
                return
            try:
                await self.raft.submit(record, self.request_timeout_ms)
                return
            except RaftkaError as error:
                if not error.retriable:
                    log.error("cannot announce controller endpoint: %s", error)
                    return
            await asyncio.sleep(REGISTER_RETRY_BACKOFF_MS / 1000)

    # -- dispatch --------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self.raft.is_leader

    def not_controller(self) -> tuple[int, dict]:
        leader = self.raft.leader_id
        endpoint = self.state.controllers.get(leader) if leader is not None else None
        return errors.NOT_CONTROLLER, {
            "controller_id": leader if leader is not None else -1,
            "controller_endpoint": f"{endpoint[0]}:{endpoint[1]}" if endpoint else None,
            "error_message": (f"controller {self.config.node_id} is not the active controller"
                              + (f"; controller {leader} is" if leader is not None else "; none elected yet")),
        }

    def connection_closed(self, connection_id: int) -> None:
        """The peer closed connection ``connection_id`` (EOF or reset): tell the listeners."""
        for listener in self.connection_closed_listeners:
            try:
                listener(connection_id)
            except Exception:
                log.exception("connection-closed listener failed")

    async def handle(self, api_key: int, api_version: int, body: Any, ctx: Any = None) -> tuple[int, dict]:
        if isinstance(ctx, dict) and ctx.get("connection_id") is not None:
            REQUEST_CONNECTION.set(ctx["connection_id"])
        if api_key in CONTROLLER_APIS:  # bounded key set: unknown keys are not counted
            self.request_counts[api_key] = self.request_counts.get(api_key, 0) + 1
        code, out = await self._handle(api_key, api_version, body)
        if code != errors.NONE and api_key in CONTROLLER_APIS:
            self.error_counts[api_key] = self.error_counts.get(api_key, 0) + 1
        return code, out

    async def _handle(self, api_key: int, api_version: int, body: Any) -> tuple[int, dict]:
        if api_key in CONTROLLER_APIS and api_key not in self.any_controller_apis and not self.is_active:
            return self.not_controller()
        handler = self.handlers.get(api_key)
        if handler is None:
            return errors.UNSUPPORTED_VERSION, {
                "error_message": f"the controller listener does not serve api key {api_key}"}
        if body is None:
            body = {}
        if not isinstance(body, dict):
            return errors.INVALID_REQUEST, {"error_message": "request body must be a map"}
        try:
            return await handler(api_version, body)
        except NotControllerError:
            return self.not_controller()
        except RaftkaError as error:
            return error.code, {"error_message": error.message}
        except Exception:
            log.exception("controller handler for api key %d failed", api_key)
            return errors.UNKNOWN_SERVER_ERROR, {"error_message": "internal error; see the controller log"}

    async def commit(self, records: list[bytes]) -> list[Any]:
        """Commit envelope records in order; returns their apply results."""
        results = []
        for record in records:
            results.append(await self.raft.submit(record, self.request_timeout_ms))
        return results

    # -- metadata fetch (brokers and tools follow the committed log) ------------------------

    async def fetch_metadata(self, api_version: int, body: dict) -> tuple[int, dict]:
        """Fetch on the controller listener: committed metadata-log records after an offset.

        Request {topic: "__cluster_metadata" (optional), fetch_offset: int (last offset the
        caller has; 0 = nothing), max_records: int, max_wait_ms: int (long poll when nothing is
        new), replica_id: int (optional: the fetching broker's id; listed as an observer with
        its lag by DescribeQuorum)}. Response {records: [[offset, bytes]] (envelope records, see state.py),
        snapshot: bytes or None, snapshot_offset: int, high_watermark: int (this controller's
        last applied offset), leader_id: int}. When fetch_offset is older than this controller's
        in-memory window, the answer is the full snapshot as of snapshot_offset (then fetch
        again from there). Records are committed: a fetcher never sees one that is undone.
        """
        topic = body.get("topic", METADATA_TOPIC)
        if topic != METADATA_TOPIC:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, {
                "error_message": f"the controller listener serves only {METADATA_TOPIC}, not {topic!r}"}
        # Types and ranges were checked at the boundary (common/msgpack_bodies.py METADATA_FETCH).
        offset = body["fetch_offset"]
        max_records = min(body.get("max_records", self.fetch_max_records), self.fetch_max_records)
        max_wait_ms = min(max(body["max_wait_ms"], 0), FETCH_MAX_WAIT_MS_MAX)
        replica_id = body.get("replica_id")
        if replica_id is not None and replica_id >= 0:
            if replica_id in self.fetchers or len(self.fetchers) < OBSERVERS_MAX:
                self.fetchers[replica_id] = (offset, time.monotonic())
        if self.state.offset <= offset and max_wait_ms > 0:
            waiter = self._new_records
            try:
                await asyncio.wait_for(waiter.wait(), max_wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        records, snapshot, snapshot_offset = self.state.records_since(offset, max_records)
        leader = self.raft.leader_id
        return errors.NONE, {
            "records": [[o, r] for o, r in records],
            "snapshot": snapshot,
            "snapshot_offset": snapshot_offset,
            "high_watermark": self.state.offset,
            "leader_id": leader if leader is not None else -1,
        }

    # -- DescribeQuorum --------------------------------------------------------------------

    async def describe_quorum(self, api_version: int, body: dict) -> tuple[int, dict]:
        """Like Kafka's DescribeQuorum, from this controller's point of view.

        Body: {node_id, role, active, leader_id, leader_endpoint, term (Kafka: leader epoch),
        commit_index, high_watermark (= commit index), last_applied_index, metadata_offset,
        voters: [{node_id, raft_address, endpoint, connected, log_end_offset, lag}],
        observers: [{raft_address}]}. A voter's log_end_offset is known only on the leader (its
        match index); ``lag`` = leader's log end - voter's log end.
        """
        status = self.raft.status()
        leader_endpoint = self.state.controllers.get(status.leader_id) if status.leader_id is not None else None
        leader_end = next((v.match_index for v in status.voters if v.node_id == status.leader_id), None)
        voters = []
        for voter in status.voters:
            endpoint = self.state.controllers.get(voter.node_id)
            end = voter.match_index if status.role == "leader" else (
                voter.match_index if voter.node_id == self.config.node_id else None)
            voters.append({
                "node_id": voter.node_id,
                "raft_address": voter.address,
                "endpoint": f"{endpoint[0]}:{endpoint[1]}" if endpoint else None,
                "connected": voter.connected,
                "log_end_offset": end,
                "lag": (leader_end - end) if (leader_end is not None and end is not None
                                               and status.role == "leader") else None,
            })
        return errors.NONE, {
            "node_id": self.config.node_id,
            "role": status.role,
            "active": self.is_active,
            "leader_id": status.leader_id if status.leader_id is not None else -1,
            "leader_endpoint": f"{leader_endpoint[0]}:{leader_endpoint[1]}" if leader_endpoint else None,
            "term": status.term,
            "commit_index": status.commit_index,
            "high_watermark": status.commit_index,
            "last_applied_index": status.last_applied_index,
            "metadata_offset": self.state.offset,
            "has_quorum": status.has_quorum,
            "voters": voters,
            "observers": [{"raft_address": a} for a in status.observers] + self._fetcher_observers(),
            "uptime_ms": int((time.monotonic() - self.started_monotonic) * 1000),
        }

    def _fetcher_observers(self) -> list[dict]:
        now = time.monotonic()
        for replica_id, (_, seen) in list(self.fetchers.items()):
            if (now - seen) * 1000 > OBSERVER_EXPIRY_MS:
                del self.fetchers[replica_id]
        return [{"replica_id": replica_id, "raft_address": None, "log_end_offset": offset,
                 "lag": max(0, self.state.offset - offset),
                 "last_fetch_ms_ago": int((now - seen) * 1000)}
                for replica_id, (offset, seen) in sorted(self.fetchers.items())]
