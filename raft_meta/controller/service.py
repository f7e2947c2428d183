"""The controller's RPC service: what one controller answers on its CONTROLLER listener.

Every controller answers DescribeQuorum (Kafka's v0-2, from its own view of the Raft quorum;
``nodes`` lists each voter's CONTROLLER listener), and Fetch and FetchSnapshot of the committed
metadata log (``fetch_metadata``, ``fetch_snapshot``). Every other API is served by the **active
controller** only (the Raft leader, once it has applied the log it inherited); any other
controller answers NOT_CONTROLLER. Kafka's answers have no field naming the active controller,
so a caller (broker/controller_channel.py) asks the controller that refused for DescribeQuorum
and goes on to the leader's CONTROLLER listener.

Every API is served in Kafka's protocol (common/messages/): the broker-controller APIs
(BrokerRegistration, BrokerHeartbeat, AlterPartition, UnregisterBroker, AllocateProducerIds,
DescribeQuorum), the metadata-log Fetch and FetchSnapshot, and the admin APIs brokers forward
(CreateTopics, CreatePartitions, ElectLeaders, Alter/ListPartitionReassignments, DeleteTopics, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
DescribeUserScramCredentials, AlterUserScramCredentials, DescribeAcls, CreateAcls, DeleteAcls).

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
from typing import Any, Awaitable, Callable, NamedTuple

from raftka.common import authorizer, errors
from raftka.common.authenticator import ANONYMOUS
from raftka.common.errors import NotControllerError, RaftkaError
from raftka.common.messages.controller import CONTROLLER_LISTENER
from raftka.common.records import BatchBuilder
from raftka.common.server_config import ServerConfig
from raftka.raft_meta.controller.authorization import ControllerGate, refused_answer
from raftka.raft_meta.metadata.state import ControllerStateMachine, controller_record
from raftka.raft_meta.raft import RaftClient

log = logging.getLogger(__name__)

# Kafka's API keys (the wire helper's ApiKey enum carries the same numbers).
API_FETCH = 1
API_DESCRIBE_ACLS = 29
API_CREATE_ACLS = 30
API_DELETE_ACLS = 31
API_CREATE_TOPICS = 19
API_DELETE_TOPICS = 20
API_DESCRIBE_CONFIGS = 32
API_ALTER_CONFIGS = 33
API_CREATE_PARTITIONS = 37
API_ELECT_LEADERS = 43
API_ALTER_PARTITION_REASSIGNMENTS = 45
API_LIST_PARTITION_REASSIGNMENTS = 46
API_INCREMENTAL_ALTER_CONFIGS = 44
API_DESCRIBE_USER_SCRAM_CREDENTIALS = 50
API_ALTER_USER_SCRAM_CREDENTIALS = 51
API_DESCRIBE_QUORUM = 55
API_ALTER_PARTITION = 56
API_FETCH_SNAPSHOT = 59
API_BROKER_REGISTRATION = 62
API_BROKER_HEARTBEAT = 63
API_UNREGISTER_BROKER = 64
API_ALLOCATE_PRODUCER_IDS = 67

REGISTER_RETRY_BACKOFF_MS = 200
FETCH_MAX_WAIT_MS_MAX = 10_000
# Snapshot bytes in one FetchSnapshot answer, whatever its max_bytes asks (a metadata snapshot
# of a large cluster is tens of MiB; chunks keep each answer well under socket.request.max.bytes).
FETCH_SNAPSHOT_CHUNK_BYTES_MAX = 8 * 1024 * 1024
METADATA_PARTITION = 0
# A broker not heard from (fetch or heartbeat) for this long drops out of DescribeQuorum's observers.
OBSERVER_EXPIRY_MS = 30_000
OBSERVERS_MAX = 10_000
METADATA_TOPIC = "__cluster_metadata"
REGISTER_ATTEMPTS_MAX = 1000  # ~ minutes of retrying while no leader exists

# Every API the controller listener serves (some only once the metadata handlers are attached).
CONTROLLER_APIS = frozenset({
    API_FETCH, API_CREATE_TOPICS, API_CREATE_PARTITIONS, API_DELETE_TOPICS, API_ELECT_LEADERS,
    API_ALTER_PARTITION_REASSIGNMENTS, API_LIST_PARTITION_REASSIGNMENTS,
    API_DESCRIBE_CONFIGS, API_ALTER_CONFIGS, API_INCREMENTAL_ALTER_CONFIGS, API_DESCRIBE_QUORUM, API_ALTER_PARTITION,
    API_FETCH_SNAPSHOT, API_DESCRIBE_USER_SCRAM_CREDENTIALS, API_ALTER_USER_SCRAM_CREDENTIALS,
    API_DESCRIBE_ACLS, API_CREATE_ACLS, API_DELETE_ACLS, API_BROKER_REGISTRATION, API_BROKER_HEARTBEAT, API_UNREGISTER_BROKER, API_ALLOCATE_PRODUCER_IDS,
})
# Served from committed state without committing: never wait for ``before_commits``.
READ_ONLY_APIS = frozenset({API_FETCH, API_FETCH_SNAPSHOT, API_DESCRIBE_QUORUM})
# DescribeQuorum v2 lists each voter's CONTROLLER listener (as Kafka) and its Raft port under this name.
RAFT_LISTENER = "RAFT"

Handler = Callable[[int, dict], Awaitable[tuple[int, dict]]]


class ObserverProgress(NamedTuple):
    """A broker following the metadata log, as DescribeQuorum lists it among the observers."""
    log_end_offset: int  # the next offset it wants (what it fetches from, or its applied offset + 1)
    last_fetch_monotonic: float  # when it last fetched here, or last reported its progress
    last_caught_up_monotonic: float | None  # when it last had every committed record, None: not seen


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
                                             API_FETCH: self.fetch_metadata,
                                             API_FETCH_SNAPSHOT: self.fetch_snapshot}
        # Served by every controller (a fetch gets committed records from whoever has them).
        self.any_controller_apis = {API_DESCRIBE_QUORUM, API_FETCH, API_FETCH_SNAPSHOT}
        self.fetch_max_records: int = config["metadata.fetch.max.records"]
        # (snapshot id, bytes) of the snapshot last named in a Fetch answer, served by FetchSnapshot.
        self._fetch_snapshot: tuple[dict, bytes] | None = None
        self._new_records = asyncio.Event()
        self.request_counts: dict[int, int] = {}
        self.error_counts: dict[int, int] = {}
        # replica_id -> its progress: the brokers DescribeQuorum shows as observers.
        self.observers: dict[int, ObserverProgress] = {}
        # Coroutine functions started with the service (e.g. the fencing timer), cancelled at close.
        self.background_factories: list[Callable[[], Awaitable[None]]] = []
        self.started_monotonic = time.monotonic()
        self._tasks: list[asyncio.Task] = []
        # Called with a connection id when a peer closed its connection to this listener.
        self.connection_closed_listeners: list[Callable[[int], None]] = []
        # Awaited on the active controller before a request that may commit (bootstrap.py: the
        # bootstrap records come first in the log); None: nothing to do.
        self.before_commits: Callable[[], Awaitable[None]] | None = None
        # ACLs on this listener (authorization.py) when authorizer.class.name is set; None: off.
        self.gate: ControllerGate | None = None
        if authorizer.enabled(config):
            self.gate = ControllerGate(config, lambda: self.state.metadata.image.acls)

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
        # Kafka's answers have no field for the active controller: DescribeQuorum names it.
        leader = self.raft.leader_id
        return errors.NOT_CONTROLLER, {
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
        refusal = None
        if self.gate is not None:
            principal = (ctx.get("principal") if isinstance(ctx, dict) else None) or ANONYMOUS
            peer = ctx.get("peer") if isinstance(ctx, dict) else None
            refusal = self.gate.refusal(api_key, principal, peer[0] if peer else "")
        if refusal is not None:
            code, out = refused_answer(api_key, body, refusal)
        else:
            code, out = await self._handle(api_key, api_version, body)
        if (code != errors.NONE or refusal is not None) and api_key in CONTROLLER_APIS:
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
            if self.before_commits is not None and api_key not in READ_ONLY_APIS and self.is_active:
                await self.before_commits()
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

    def _metadata_partition(self, body: dict, partition_field: str) -> dict | None:
        """The request's one partition entry if it names exactly ``__cluster_metadata``-0."""
        topics = body.get("topics") or []
        if len(topics) != 1 or topics[0].get("topic", topics[0].get("name")) != METADATA_TOPIC:
            return None
        partitions = topics[0].get("partitions") or []
        if len(partitions) != 1 or partitions[0].get(partition_field) != METADATA_PARTITION:
            return None
        return partitions[0]

    def _current_leader(self) -> dict:
        leader = self.raft.leader_id
        return {"leader_id": leader if leader is not None else -1, "leader_epoch": self.raft.term}

    def _snapshot_for_fetch(self) -> tuple[dict, bytes]:
        """(snapshot id, bytes) of a snapshot a fetcher behind the log start can load and then
        fetch on from: the cached one while the records after it are still in the window (so
        lagging brokers share one), else a new one of the current state."""
        cached = self._fetch_snapshot
        if cached is not None and cached[0]["end_offset"] - 1 >= self.state.recent_from:
            return cached
        data, offset = self.state.current_snapshot()
        snapshot_id = {"end_offset": offset + 1, "epoch": self.raft.term}
        self._fetch_snapshot = (snapshot_id, data)
        return self._fetch_snapshot

    async def fetch_metadata(self, api_version: int, body: dict) -> tuple[int, dict]:
        """Kafka's Fetch (v12) of ``__cluster_metadata``-0: committed metadata-log entries.

        Offsets are the Raft log's indexes (with gaps: pysyncobj's own entries never reach the
        state machine). ``fetch_offset`` is the next offset the fetcher wants (its last applied
        offset + 1); the answer holds the committed entries from there on, each one Kafka record
        batch (magic 2) of one record: base_offset = the entry's offset, value = the entry's bytes
        (raft_meta/metadata/state.py's envelope, opaque here), timestamp 0 and partition leader
        epoch -1 (the state machine keeps neither), within ``max_bytes`` (at least one batch).
        ``high_watermark`` = last committed offset + 1, ``log_start_offset`` = the oldest offset
        still served as records. A fetcher behind the log start gets no records and the tagged
        ``snapshot_id``: it loads that snapshot with FetchSnapshot and fetches on from its
        ``end_offset``. Nothing new: the answer waits up to ``max_wait_ms`` (a long poll).
        ``replica_id`` >= 0 (a broker) is listed, with its fetch offset, as an observer by
        DescribeQuorum. Records are committed: a fetcher never sees one that is undone.
        """
        wanted = self._metadata_partition(body, "partition")
        if wanted is None:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, {
                "error_message": f"the controller listener serves only {METADATA_TOPIC}-{METADATA_PARTITION}"}
        fetch_offset = wanted["fetch_offset"]
        if fetch_offset < 0:
            return errors.OFFSET_OUT_OF_RANGE, {"error_message": f"fetch_offset {fetch_offset} is negative"}
        after = max(fetch_offset - 1, 0)  # records_since takes the last offset the fetcher has
        max_bytes = max(1, min(body["max_bytes"], wanted["partition_max_bytes"] or body["max_bytes"]))
        max_wait_ms = min(max(body["max_wait_ms"], 0), FETCH_MAX_WAIT_MS_MAX)
        self.observe(body["replica_id"], fetch_offset)
        if self.state.offset <= after and max_wait_ms > 0:
            waiter = self._new_records
            try:
                await asyncio.wait_for(waiter.wait(), max_wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        partition: dict[str, Any] = {"partition_index": METADATA_PARTITION, "error_code": errors.NONE,
                                     "current_leader": self._current_leader()}
        with self.state.apply_lock:  # the records and the offsets from the same instant
            high_watermark, log_start = self.state.offset + 1, self.state.recent_from + 1
            behind = after < self.state.recent_from and after < self.state.offset
            records = [] if behind else self.state.records_since(after, self.fetch_max_records)[0]
        if behind:
            partition["snapshot_id"] = self._snapshot_for_fetch()[0]
            batches = b""
        else:
            batches = _entry_batches(records, max_bytes)
        partition.update(high_watermark=high_watermark, last_stable_offset=high_watermark,
                         log_start_offset=log_start, records=batches)
        return errors.NONE, {"throttle_time_ms": 0, "error_code": errors.NONE, "session_id": 0,
                             "responses": [{"topic": METADATA_TOPIC, "partitions": [partition]}]}

    async def fetch_snapshot(self, api_version: int, body: dict) -> tuple[int, dict]:
        """Kafka's FetchSnapshot (v0-1): a chunk of the snapshot a Fetch answer named.

        The snapshot is the one this controller last handed out (``snapshot_id`` must match it,
        else SNAPSHOT_NOT_FOUND: the fetcher goes back to Fetch, which names a current one).
        The answer carries ``size`` (bytes of the whole snapshot) and the bytes from ``position``
        on, at most ``max_bytes`` and FETCH_SNAPSHOT_CHUNK_BYTES_MAX of them; a position outside
        the snapshot is POSITION_OUT_OF_RANGE.
        """
        wanted = self._metadata_partition(body, "partition")
        if wanted is None:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, {
                "error_message": f"the controller listener serves only {METADATA_TOPIC}-{METADATA_PARTITION}"}
        snapshot_id, position = wanted["snapshot_id"], wanted["position"]
        partition: dict[str, Any] = {"index": METADATA_PARTITION, "error_code": errors.NONE,
                                     "snapshot_id": snapshot_id, "current_leader": self._current_leader()}
        cached = self._fetch_snapshot
        if cached is None or cached[0] != snapshot_id:
            partition["error_code"] = errors.SNAPSHOT_NOT_FOUND
        elif not 0 <= position < len(cached[1]):
            partition["error_code"] = errors.POSITION_OUT_OF_RANGE
        else:
            data = cached[1]
            chunk_bytes = min(max(body["max_bytes"], 1), FETCH_SNAPSHOT_CHUNK_BYTES_MAX)
            partition.update(size=len(data), position=position,
                             unaligned_records=data[position:position + chunk_bytes])
        return errors.NONE, {"throttle_time_ms": 0, "error_code": errors.NONE,
                             "topics": [{"name": METADATA_TOPIC, "partitions": [partition]}]}

    # -- DescribeQuorum --------------------------------------------------------------------

    def observe(self, replica_id: int, log_end_offset: int) -> None:
        """A broker's progress on the metadata log: a Fetch here (``log_end_offset`` = its fetch
        offset) or, on the active controller, a BrokerHeartbeat (its applied offset + 1: a broker
        may fetch from another controller, and every broker heartbeats to the active one). It
        is caught up when it has every record this controller has applied."""
        if replica_id < 0 or (replica_id not in self.observers and len(self.observers) >= OBSERVERS_MAX):
            return
        now = time.monotonic()
        previous = self.observers.get(replica_id)
        caught_up = previous.last_caught_up_monotonic if previous is not None else None
        if log_end_offset > self.state.offset:
            caught_up = now
        self.observers[replica_id] = ObserverProgress(log_end_offset, now, caught_up)

    async def describe_quorum(self, api_version: int, body: dict) -> tuple[int, dict]:
        """Kafka's DescribeQuorum (v0-2) for the one partition ``__cluster_metadata``-0.

        The active controller answers as Kafka's Raft leader does: leader id and epoch (the Raft
        term), the high watermark, each voter's log end offset and fetch times, and the brokers
        following the metadata log as observers. Any other controller answers its own view in
        the same shape with the partition error NOT_LEADER_OR_FOLLOWER (Kafka's answer there),
        so a tool can go on to the leader: ``nodes`` (v2) lists every voter's CONTROLLER listener
        (where requests go) and its RAFT listener (the pysyncobj port).

        Every offset is on Kafka's scale, the offset after the last entry (exclusive), so that
        ``high_watermark`` - ``log_end_offset`` is a replica's lag and a caught-up broker's is 0:
        ``high_watermark`` = the last committed metadata record's offset + 1 (what Fetch answers
        as its high watermark); a voter's ``log_end_offset`` = its Raft match index + 1 (a voter
        may be ahead of the high watermark by pysyncobj's own entries, which carry no record);
        an observer's = the offset it fetches next. Timestamps are wall-clock ms, -1 unknown:
        a voter's ``last_fetch_timestamp`` is its last answer to the leader's AppendEntries
        (pysyncobj's push is Kafka's follower fetch); pysyncobj keeps no append time per entry,
        so a voter's ``last_caught_up_timestamp`` is known only when that answer acknowledged
        the leader's whole log (it is that answer's time), else -1. The leader itself reports
        -1 and now, as Kafka's does. An observer's times are those of its last fetch (or
        heartbeat) and of the last one that asked for the high watermark.
        """
        topics = body.get("topics") or []
        wanted = [(t.get("topic_name"), p.get("partition_index")) for t in topics for p in t.get("partitions") or []]
        if wanted != [(METADATA_TOPIC, 0)]:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, {
                "error_message": f"DescribeQuorum names exactly one partition, {METADATA_TOPIC}-0"}
        status = self.raft.status()
        leader_id = status.leader_id if status.leader_id is not None else -1
        now_ms, now = int(time.time() * 1000), time.monotonic()

        def wall_ms(monotonic: float | None) -> int:
            return -1 if monotonic is None else now_ms - int((now - monotonic) * 1000)

        is_leader = status.role == "leader"
        leader_end = next((v.match_index for v in status.voters if v.node_id == self.config.node_id), None)
        voters = []
        for voter in status.voters:
            known = is_leader or voter.node_id == self.config.node_id
            end = voter.match_index + 1 if known and voter.match_index is not None else -1
            if voter.node_id == self.config.node_id:
                fetched, caught_up = -1, (now_ms if is_leader else -1)
            else:
                fetched = wall_ms(voter.last_response_monotonic)
                whole_log = leader_end is not None and voter.match_index is not None and voter.match_index >= leader_end
                caught_up = fetched if whole_log else -1
            voters.append({"replica_id": voter.node_id, "log_end_offset": end,
                           "last_fetch_timestamp": fetched, "last_caught_up_timestamp": caught_up})
        observers = [{"replica_id": replica_id, "log_end_offset": progress.log_end_offset,
                      "last_fetch_timestamp": wall_ms(progress.last_fetch_monotonic),
                      "last_caught_up_timestamp": wall_ms(progress.last_caught_up_monotonic)}
                     for replica_id, progress in self._observers()]
        nodes = []
        for voter in status.voters:
            listeners = []
            endpoint = self.state.controllers.get(voter.node_id)
            if endpoint:
                listeners.append({"name": CONTROLLER_LISTENER, "host": endpoint[0], "port": endpoint[1]})
            host, _, port = voter.address.rpartition(":")
            if port.isdigit():
                listeners.append({"name": RAFT_LISTENER, "host": host, "port": int(port)})
            nodes.append({"node_id": voter.node_id, "listeners": listeners})
        partition = {"partition_index": 0, "error_code": errors.NONE, "error_message": None,
                     "leader_id": leader_id, "leader_epoch": status.term, "high_watermark": self.state.offset + 1,
                     "current_voters": voters, "observers": observers}
        if not self.is_active:
            partition["error_code"] = errors.NOT_LEADER_OR_FOLLOWER
            partition["error_message"] = (f"controller {self.config.node_id} is not the active controller; "
                                          + (f"controller {leader_id} leads" if leader_id >= 0 else "none is elected"))
        return errors.NONE, {"error_code": errors.NONE, "error_message": None,
                             "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}], "nodes": nodes}

    def quorum_status(self) -> dict:
        """This controller's own view of the quorum, for its HTTP /health and /metrics (http.py):
        {node_id, role, active, leader_id, term, commit_index, metadata_offset, has_quorum,
        voters: [{node_id, lag}]}. ``lag`` (leader's log end - voter's) is known on the leader only."""
        status = self.raft.status()
        leader_end = next((v.match_index for v in status.voters if v.node_id == status.leader_id), None)
        voters = [{"node_id": v.node_id,
                   "lag": (leader_end - v.match_index) if (status.role == "leader" and leader_end is not None
                                                           and v.match_index is not None) else None}
                  for v in status.voters]
        return {"node_id": self.config.node_id, "role": status.role, "active": self.is_active,
                "leader_id": status.leader_id if status.leader_id is not None else -1, "term": status.term,
                "commit_index": status.commit_index, "metadata_offset": self.state.offset,
                "has_quorum": status.has_quorum, "voters": voters}

    def _observers(self) -> list[tuple[int, ObserverProgress]]:
        """The observers heard from within OBSERVER_EXPIRY_MS, by replica id."""
        now = time.monotonic()
        for replica_id, progress in list(self.observers.items()):
            if (now - progress.last_fetch_monotonic) * 1000 > OBSERVER_EXPIRY_MS:
                del self.observers[replica_id]
        return sorted(self.observers.items())


def _entry_batches(entries: list[tuple[int, bytes]], max_bytes: int) -> bytes:
    """Committed entries as Kafka record batches, one per entry (see fetch_metadata), up to
    ``max_bytes`` (the first batch always goes, however large, as Kafka's Fetch does)."""
    batches: list[bytes] = []
    size = 0
    for offset, entry in entries:
        builder = BatchBuilder(base_offset=offset)
        builder.append(0, None, entry)
        batch = builder.build()
        if batches and size + len(batch) > max_bytes:
            break
        batches.append(batch)
        size += len(batch)
    return b"".join(batches)
