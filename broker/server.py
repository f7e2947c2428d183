"""The broker process (``raftka server --config FILE`` with ``process.roles=broker``).

``run_broker(config)`` runs on one asyncio loop:

1. opens the partition logs (``log.dirs``) and starts one listener per client listener of
   ``listeners`` (each with its security protocol from ``listener.security.protocol.map``: TLS
   for SSL and SASL_SSL, SASL for SASL_PLAINTEXT and SASL_SSL against the SCRAM credentials in
   the metadata log, see ``_sasl_for``), and HTTP; when the inter-broker listener is SASL_*,
   this broker logs in to the others with its own jaas login and takes replica Fetches only on
   that listener (``_listener_handler``); with ``authorizer.class.name`` set, the ACLs decide
   every request instead (broker/authorization.py);
2. registers with the active controller (BrokerRegistration, following NOT_CONTROLLER), then
   follows the committed metadata log and heartbeats every ``broker.heartbeat.interval.ms``
   with the metadata offset it has applied; the controller unfences it once caught up;
3. becomes leader or follower of each partition only as committed metadata says;
4. prints ``raftka broker <id> ready plaintext=<host:port> [ssl=<host:port> ...] [http=<host:port>]``
   (each client listener under its name in lower case) once registered,
   unfenced and caught up with the metadata log (the cluster API waits for this line);
5. on SIGTERM: controlled shutdown (asks to be fenced, so leadership moves away first, at most
   ``controlled.shutdown.timeout.ms``), closes the listener and the logs (HW checkpointed).

A heartbeat answered STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED (the quorum lost or replaced
our registration) makes the broker register again with a new incarnation.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from typing import Any, Callable

from raftka.broker import authorization
from raftka.broker import configs as broker_configs
from raftka.broker.controller_channel import AlterPartitionManager, ControllerChannel
from raftka.broker.group import REQUEST as GROUP_REQUEST, GroupService
from raftka.broker.limits import ByteBudget
from raftka.storage import LogCleanerConfig, LogManager
from raftka.broker.metadata import EMPTY as EMPTY_VIEW, MetadataFollower, MetadataView
from raftka.broker.kafka_wire import ANSWER_SHIMS, HANDLER_WRAPPERS, REQUEST_SHIMS
from raftka.broker.metrics import BrokerMetrics
from raftka.broker.network import LISTENER, Request, Server
from raftka.common.api import ApiKey
from raftka.broker.partition import Partition
from raftka.broker.replica_manager import ReplicaManager
from raftka.common import errors, event_loop
from raftka.common.errors import RaftkaError
from raftka.common.ratelog import RateLimitedLog
from raftka.common.messages import BROKER_API
from raftka.common.meta_properties import read_cluster_id
from raftka.common.schema import ZERO_UUID
from raftka.common import security
from raftka.common.sasl import SaslServerSettings
from raftka.common.scram import ScramCredential, ScramMechanism
from raftka.common.server_config import ServerConfig

log = logging.getLogger(__name__)
# A replica Fetch refused for want of a login: one line per listener and peer address a minute.
refused_replica_log = RateLimitedLog(log)


FORWARDED = (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS,
             ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
             ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS,
             ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS)
INTERNAL_TOPIC_PREFIX = "__"  # __consumer_offsets: Metadata marks it is_internal, as Kafka does
REGISTER_TIMEOUT_MS = 60_000
ACKS_VALUES = (-1, 0, 1)
PRODUCE_TIMEOUT_MS_MAX = 300_000
DELETE_RECORDS_TIMEOUT_MS_MAX = 300_000  # a DeleteRecords answer waits for the ISR at most this long


class BrokerServer:
    """One broker: listener, metadata follower, heartbeats, replica manager."""

    def __init__(self, config: ServerConfig, say: Callable[[str], None] | None = None, *,
                 http: bool = True) -> None:
        self.config = config
        self.http = http
        self.http_runner = None
        self.broker_id = config.node_id
        self.say = say or (lambda line: print(line, flush=True))
        self.cluster_id = read_cluster_id(config["log.dirs"], self.broker_id)
        self.controllers = ControllerChannel(config["controller.quorum.bootstrap.servers"],
                                             timeout_ms=config["controller.request.timeout.ms"],
                                             client_id=f"broker-{self.broker_id}",
                                             proxies=config.proxies("controller.rpc.proxies"),
                                             ssl=config.controller_ssl_context(), sasl=config.controller_sasl())
        self.controllers.on_disconnect = self._heartbeat_soon
        # AlterPartition on a connection of its own: the controller answers a connection's
        # requests in arrival order, so heartbeats must not queue behind ISR changes.
        self._alter_channel = ControllerChannel(config["controller.quorum.bootstrap.servers"],
                                                timeout_ms=config["controller.request.timeout.ms"],
                                                client_id=f"broker-{self.broker_id}",
                                                proxies=config.proxies("controller.rpc.proxies"),
                                                ssl=self.controllers.ssl, sasl=self.controllers.sasl)
        self.alter_partitions = AlterPartitionManager(
            lambda body: self._alter_channel.request(ApiKey.ALTER_PARTITION, body),
            lambda: {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch})
        default_log_config = {"max.message.bytes": config["message.max.bytes"],
                              "segment.bytes": config["log.segment.bytes"],
                              "retention.ms": config["log.retention.ms"],
                              "retention.bytes": config["log.retention.bytes"],
                              "cleanup.policy": config["log.cleanup.policy"],
                              "min.cleanable.dirty.ratio": config["log.cleaner.min.cleanable.ratio"],
                              "delete.retention.ms": config["log.cleaner.delete.retention.ms"],
                              "min.compaction.lag.ms": config["log.cleaner.min.compaction.lag.ms"],
                              "max.compaction.lag.ms": config["log.cleaner.max.compaction.lag.ms"]}
        cleaner = LogCleanerConfig(
            enable=config["log.cleaner.enable"], threads=config["log.cleaner.threads"],
            backoff_ms=config["log.cleaner.backoff.ms"], dedupe_buffer_size=config["log.cleaner.dedupe.buffer.size"],
            io_buffer_size=config["log.cleaner.io.buffer.size"],
            io_buffer_load_factor=config["log.cleaner.io.buffer.load.factor"],
            io_max_bytes_per_second=config["log.cleaner.io.max.bytes.per.second"])
        cleaner.check()
        self.logs = LogManager(config["log.dirs"], default_log_config,
                               hw_checkpoint_interval_ms=config["replica.high.watermark.checkpoint.interval.ms"],
                               retention_check_interval_ms=config["log.retention.check.interval.ms"],
                               recovery_threads_per_data_dir=config["num.recovery.threads.per.data.dir"],
                               open_files_max=config["log.open.files.max"], cleaner_config=cleaner)
        self.replicas = ReplicaManager(self.broker_id, config, self.logs, self._alter_partition)
        self.replicas.dial_proxies = config.proxies("broker.dial.proxies")
        self.metrics = BrokerMetrics(self)
        self.produce_budget = ByteBudget(config["queued.max.request.bytes"])
        self.storage_error: str | None = None  # set at the first disk error; the broker then asks to be fenced
        self.replicas.on_storage_error = self._on_storage_error
        self.metadata: MetadataFollower | None = None
        self.broker_epoch = -1
        self.incarnation_id = uuid.uuid4().hex
        self.registered = False
        self.fenced = True
        self.caught_up = False
        self.stopping = False
        self.servers: dict[str, Server] = {}  # client listener name -> its server
        self.server: Server | None = None  # the PLAINTEXT listener's (else the first): /metrics counts it
        self._caught_up_event = asyncio.Event()
        self._metadata_event = asyncio.Event()
        self._producer_ids: list[int] = [0, 0]  # [next, end) of our AllocateProducerIds block
        self._producer_id_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        self.handlers = {
            ApiKey.PRODUCE: self.produce, ApiKey.FETCH: self.fetch, ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.METADATA: self.metadata_api,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offsets_for_leader_epoch,
            ApiKey.DESCRIBE_CLUSTER: self.describe_cluster,
            ApiKey.DELETE_RECORDS: self.delete_records,
            **{key: self._forwarder(key) for key in FORWARDED},
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,  # its BROKER resource here, topics forwarded
        }
        # Consumer groups (broker/group/): FindCoordinator, JoinGroup, ..., OffsetCommit/Fetch.
        self.last_heartbeat_ok_sent = 0.0  # monotonic send time of the last heartbeat the controller took
        self._heartbeat_ok_connection: float | None = None  # open time of the connection it went on
        self.groups = GroupService(self.broker_id, config, self.replicas, self.controllers.request,
                                   heartbeat_ok_at=self._heartbeat_lease_start)
        self.handlers.update(self.groups.handlers)
        # ACLs (broker/authorization.py) when authorizer.class.name is set; None: every request served.
        self.acl_gate = (authorization.AclGate(config, lambda: self.replicas.view, on_refused=self._refused)
                         if authorization.enabled(config) else None)

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen, register with the quorum, follow the metadata log, heartbeat."""
        config = self.config
        self.replicas.inter_broker_listener = config.inter_broker_listener
        self.replicas.peer_ssl = config.inter_broker_ssl_context()
        self.replicas.peer_sasl = config.inter_broker_sasl()
        for name in config.client_listeners:
            protocol = config.security_protocol(name)
            sasl = self._sasl_for(name, protocol)
            tls = config.server_ssl_context(name) if security.uses_tls(protocol) else None
            server = Server(self._listener_handler(name), **config.server_limits,  # socket.request.max.bytes, ...
                            sasl=sasl,
                            max_in_flight_per_connection=config["queued.max.requests"],
                            # ApiVersions is the transport's own answer
                            kafka_api={k: BROKER_API[k] for k in (*self.handlers, ApiKey.API_VERSIONS)},
                            name=f"broker {self.broker_id} {name}")
            self.servers[name] = server
            host, port = config.listeners[name]
            await server.start(host, port, ssl=tls)
        self.server = self.servers.get("PLAINTEXT") or next(iter(self.servers.values()))
        if self.http and "HTTP" in self.config.listeners:
            from raftka.broker.http import start_http
            http_host, http_port = self.config.listeners["HTTP"]
            self.http_runner = await start_http(self, http_host, http_port)
        await self.register()
        self.metadata = MetadataFollower(self.config["controller.quorum.bootstrap.servers"], self.broker_id,
                                         self._on_metadata, ssl=self.controllers.ssl, sasl=self.controllers.sasl)
        self._tasks.append(asyncio.create_task(self.metadata.run(), name="metadata-follower"))
        self._tasks.append(asyncio.create_task(self._heartbeat_loop(), name="heartbeat"))
        self.replicas.start()
        self.groups.start()

    async def wait_ready(self, timeout_s: float) -> None:
        """Wait until registered, unfenced and caught up with the metadata log."""
        await asyncio.wait_for(self._caught_up_event.wait(), timeout_s)

    def _sasl_for(self, listener: str, protocol: str) -> SaslServerSettings | None:
        """What a SASL_* listener authenticates connections with: its ``sasl.enabled.mechanisms``
        against the SCRAM credentials this broker's metadata holds (PLAIN too checks the password
        against them). None for PLAINTEXT and SSL. The inter-broker listener is no exception:
        other brokers log in to it as any client does (``ServerConfig.inter_broker_sasl``)."""
        if not security.uses_sasl(protocol):
            return None
        mechanisms = self.config.listener_value(listener, "sasl.enabled.mechanisms")
        return SaslServerSettings(tuple(mechanisms), self.scram_credential)

    def _listener_handler(self, listener: str) -> Callable[[Request], Any]:
        """``handle`` for the requests of one listener: they see its name in ``LISTENER`` (set in
        the request's own task, so nothing else sees it). With an authorizer, the ACLs decide
        every request (``AclGate``: a replica Fetch needs CLUSTER_ACTION on the cluster); without
        one, when brokers log in to each other, a replica Fetch is first checked
        (``ReplicaManager.replica_fetch_refusal``)."""
        gate = self.acl_gate
        if gate is not None:
            async def authorized(request: Request) -> "tuple[int, Any] | None":
                LISTENER.set(listener)
                return await gate.serve(request, self.handle)
            return authorized
        if self.replicas.peer_sasl is None:
            async def handle(request: Request) -> "tuple[int, Any] | None":
                LISTENER.set(listener)
                return await self.handle(request)
            return handle

        async def guarded(request: Request) -> "tuple[int, Any] | None":
            LISTENER.set(listener)
            if request.api_key == ApiKey.FETCH and request.body["replica_id"] >= 0:
                refusal = self.replicas.replica_fetch_refusal(request.body["replica_id"], listener, request.principal)
                if refusal is not None:
                    self.metrics.request(request.api_key)
                    self.metrics.error(request.api_key)
                    host = request.peer[0] if request.peer else "?"
                    refused_replica_log.warning(f"replica-fetch-{listener}-{host}",
                                                "refused a replica Fetch from %s, %s (CLUSTER_AUTHORIZATION_FAILED)",
                                                host, refusal)
                    return errors.CLUSTER_AUTHORIZATION_FAILED, {"error_message": refusal}
            return await self.handle(request)
        return guarded

    def _refused(self, api_key: int) -> None:
        """A request refused before its handler: counted as a request and an error."""
        self.metrics.request(api_key)
        self.metrics.error(api_key)

    def advertised_endpoints(self) -> list[tuple[str, str, int]]:
        """(listener, host, port) of every client listener as given to others (a port 0 in the
        config: the one bound)."""
        out = []
        for name in self.config.client_listeners:
            host, port = self.config.advertised(name)
            if port == 0 and name in self.servers:
                port = self.servers[name].port
            out.append((name, host, port))
        return out

    async def register(self) -> None:
        """BrokerRegistration (Kafka's) with a new incarnation id, retried until accepted: every
        client listener with its security protocol's id."""
        body = {"broker_id": self.broker_id, "cluster_id": self.cluster_id, "incarnation_id": self.incarnation_id,
                "listeners": [{"name": name, "host": host, "port": port,
                               "security_protocol": security.SECURITY_PROTOCOLS[self.config.security_protocol(name)]}
                              for name, host, port in self.advertised_endpoints()],
                "rack": self.config["broker.rack"]}
        deadline = time.monotonic() + REGISTER_TIMEOUT_MS / 1000
        while True:  # SIGTERM interrupts (serve_broker races start() with the stop event)
            try:
                code, out = await self.controllers.request(ApiKey.BROKER_REGISTRATION, body)
            except RaftkaError as error:  # no controller reachable yet: they may still be starting
                log.warning("cannot reach the controllers to register (%s); retrying", error.message)
                await asyncio.sleep(1.0)
                continue
            if code == errors.NONE:
                self.broker_epoch = out["broker_epoch"]
                self.registered = True
                log.info("registered as broker %d, epoch %d", self.broker_id, self.broker_epoch)
                return
            # DUPLICATE_BROKER_REGISTRATION: our previous incarnation is not fenced yet (it has
            # up to broker.session.timeout.ms); anything else not retriable is a real refusal.
            transient = code == errors.DUPLICATE_BROKER_REGISTRATION or errors.for_code(code).retriable
            if not transient and time.monotonic() > deadline:
                raise errors.error_for(code, f"registration of broker {self.broker_id} refused: {errors.name_of(code)}")
            log.info("registration refused (%s); retrying", errors.name_of(code))
            await asyncio.sleep(0.5)

    def _heartbeat_soon(self) -> None:
        """Heartbeat without waiting for the interval (our controller connection was dropped)."""
        self._metadata_event.set()

    def _on_storage_error(self, partition: Partition, error: RaftkaError) -> None:
        """A write failed (disk full, I/O error): like a Kafka broker whose log dir went offline,
        ask the controller to fence us so every partition we lead moves to a healthy ISR member."""
        if self.storage_error is None:
            self.storage_error = f"{partition.name}: {error.message}"
            log.error("log dir failed (%s): asking the controller to fence this broker", self.storage_error)
            self._metadata_event.set()  # heartbeat now

    def _on_metadata(self, view: MetadataView) -> None:
        self.replicas.on_metadata(view)
        if self.acl_gate is not None:
            self.acl_gate.on_metadata(view.acls)
        me = view.brokers.get(self.broker_id)
        self.fenced = me is None or me.fenced or me.broker_epoch != self.broker_epoch
        if not self.caught_up and view.offset >= self.broker_epoch >= 0:
            self.caught_up = True
            self.replicas.delete_stray_logs()
            self._metadata_event.set()  # heartbeat now: we can be unfenced
        # Load/unload the groups of the __consumer_offsets partitions we lead; not from a view
        # older than our registration (replaying history must not make us a coordinator).
        self.groups.on_metadata(view, caught_up=self.caught_up)
        if self.caught_up and not self.fenced:
            self._caught_up_event.set()

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The user's committed SCRAM credential for ``mechanism`` as this broker's metadata has it
        (a SASL server's credential lookup); None when there is none or no metadata yet."""
        return (self.metadata.view if self.metadata is not None else EMPTY_VIEW).scram_credential(user, mechanism)

    async def _heartbeat_loop(self) -> None:
        interval_s = self.config["broker.heartbeat.interval.ms"] / 1000
        while True:
            try:
                await self.heartbeat()
            except RaftkaError as error:
                log.debug("heartbeat failed: %s", error)
                # It retried until its deadline; connections it dropped meanwhile must not make
                # the next one start at once (no controller reachable: retry every interval).
                self._metadata_event.clear()
            try:
                await asyncio.wait_for(self._metadata_event.wait(), interval_s)
            except asyncio.TimeoutError:
                pass
            self._metadata_event.clear()

    async def heartbeat(self, *, want_shut_down: bool = False) -> dict:
        """One BrokerHeartbeat; registers again when the quorum forgot us."""
        assert self.metadata is not None
        body = {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch,
                "current_metadata_offset": self.metadata.offset, "want_fence": self.storage_error is not None,
                "want_shut_down": want_shut_down}
        sent = time.monotonic()
        code, out = await self.controllers.request(ApiKey.BROKER_HEARTBEAT, body,
                                                   timeout_ms=self.config["broker.heartbeat.interval.ms"] * 2)
        if code in (errors.STALE_BROKER_EPOCH, errors.BROKER_ID_NOT_REGISTERED) and not self.stopping:
            log.warning("heartbeat refused (%s): registering again", errors.name_of(code))
            self.incarnation_id = uuid.uuid4().hex
            self.caught_up = False
            await self.register()
            return {}
        if code != errors.NONE:
            raise errors.error_for(code, f"heartbeat of broker {self.broker_id} refused: {errors.name_of(code)}")
        self.last_heartbeat_ok_sent = sent
        self._heartbeat_ok_connection = self.controllers.connected_since()
        return out

    def _heartbeat_lease_start(self) -> float:
        """Send time of the last heartbeat the controller took, or 0 once the connection that
        carried it has closed: the controller fences a broker whose heartbeat connection closed
        after only broker.session.disconnect.grace.ms, far sooner than the session timeout the
        group coordinator's lease is sized by (a cut-off coordinator must stop answering first)."""
        since = self.controllers.connected_since()
        if since is None or since != self._heartbeat_ok_connection:
            return 0.0
        return self.last_heartbeat_ok_sent

    async def controlled_shutdown(self) -> None:
        """Ask to be fenced so the controller moves leadership away before we go."""
        self.stopping = True
        if not self.registered or self.metadata is None:
            return
        deadline = time.monotonic() + self.config["controlled.shutdown.timeout.ms"] / 1000
        while time.monotonic() < deadline:
            try:
                out = await self.heartbeat(want_shut_down=True)
                if out.get("should_shut_down"):
                    return
            except RaftkaError:
                pass
            await asyncio.sleep(0.1)

    async def close(self) -> None:
        """Stop tasks, the listener, the replicas and the logs."""
        for task in self._tasks:
            task.cancel()
        if self.metadata is not None:
            await self.metadata.close()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for server in self.servers.values():
            await server.close()
        await self.groups.close()
        await self.replicas.close()
        await self.alter_partitions.close()
        await self._alter_channel.close()
        await self.controllers.close()
        if self.http_runner is not None:
            await self.http_runner.cleanup()
        self.logs.close()

    @property
    def ready(self) -> bool:
        """Registered, unfenced, caught up, and no disk error."""
        return self.registered and self.caught_up and not self.fenced and self.storage_error is None

    # -- dispatch -----------------------------------------------------------------------------------

    async def handle(self, request: Request) -> "tuple[int, Any] | None":
        """Dispatch a request (decoded, and so checked, against its declaration by the transport,
        which closes the connection on unknown keys and versions) to its API handler, through the
        version semantics of broker/kafka_wire.py."""
        handler = self.handlers[request.api_key]
        started = time.monotonic()
        self.metrics.request(request.api_key)
        GROUP_REQUEST.set(request)  # this request's task only: the coordinator reads client id and host
        try:
            shim = REQUEST_SHIMS.get(request.api_key)
            body = request.body if shim is None else shim(request.api_version, request.body)
            wrapper = HANDLER_WRAPPERS.get(request.api_key)
            result = await (handler(body) if wrapper is None else wrapper(handler, request.api_version, body))
            if result is not None and result[0] == errors.NONE:
                answer_shim = ANSWER_SHIMS.get(request.api_key)
                if answer_shim is not None:
                    result = result[0], answer_shim(request.api_version, request.body, result[1])
        except RaftkaError as error:
            self.metrics.error(request.api_key)
            return error.code, {"error_message": error.message}
        finally:
            self.metrics.latency(request.api_key, time.monotonic() - started)
        return result

    # -- Metadata, DescribeCluster ---------------------------------------------------------------

    def _controller_id(self) -> int:
        active = self.controllers.active
        view = self.replicas.view
        for node_id, (host, port) in view.controllers.items():
            if active == f"{host}:{port}":
                return node_id
        return -1

    async def metadata_api(self, body: dict) -> tuple[int, dict]:
        """Metadata from this broker's image: the unfenced brokers and the topics asked for (all
        when ``topics`` is null). As a KRaft broker, ``controller_id`` is a live broker (clients
        send controller requests there; any broker forwards them to the active controller)."""
        view = self.replicas.view
        wanted = None if body["topics"] is None else [t["name"] for t in body["topics"] if t["name"] is not None]
        brokers = []
        listener = LISTENER.get()  # Kafka's rule: endpoints on the listener the request came in on
        for broker in sorted(view.brokers.values(), key=lambda b: b.broker_id):
            endpoint = broker.endpoint(listener)
            if broker.fenced or endpoint is None:
                continue
            brokers.append({"node_id": broker.broker_id, "host": endpoint[0], "port": endpoint[1],
                            "rack": broker.rack})
        live = {b["node_id"] for b in brokers}
        topics = []
        for name in (sorted(view.topics) if wanted is None else wanted):
            topic = view.topics.get(name)
            if topic is None:
                topics.append({"error_code": errors.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "topic_id": ZERO_UUID,
                               "partitions": []})
                continue
            parts = []
            for index, p in enumerate(topic.partitions):
                parts.append({"error_code": errors.NONE if p.leader >= 0 else errors.LEADER_NOT_AVAILABLE,
                              "partition_index": index, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
                              "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
                              "offline_replicas": [r for r in p.replicas if r not in live]})
            topics.append({"error_code": errors.NONE, "name": name, "topic_id": topic.topic_id, "partitions": parts,
                           "is_internal": name.startswith(INTERNAL_TOPIC_PREFIX)})
        return errors.NONE, {"cluster_id": self.cluster_id, "controller_id": min(live) if live else -1,
                             "brokers": brokers, "topics": topics}

    async def describe_cluster(self, body: dict) -> tuple[int, dict]:
        """Every registered broker with ``fenced``, and the active controller. A Kafka request's
        answer keeps Kafka's meaning (broker/kafka_wire.py): fenced brokers only when v2 asks
        (``is_fenced``), and a live broker as ``controller_id``, as in Metadata."""
        view = self.replicas.view
        brokers = []
        for broker in sorted(view.brokers.values(), key=lambda b: b.broker_id):
            endpoint = broker.endpoint(LISTENER.get()) or ("", -1)
            brokers.append({"broker_id": broker.broker_id, "host": endpoint[0], "port": endpoint[1],
                            "rack": broker.rack, "fenced": broker.fenced})
        return errors.NONE, {"cluster_id": self.cluster_id, "controller_id": self._controller_id(), "brokers": brokers}

    # -- Produce ------------------------------------------------------------------------------------

    async def produce(self, body: dict) -> "tuple[int, dict] | None":
        """Produce; the body was checked against its declaration (types, defaults filled in)."""
        acks = body["acks"]
        if acks not in ACKS_VALUES:
            return errors.INVALID_REQUIRED_ACKS, {"error_message": f"acks must be -1 (all), 0 or 1, got {acks!r}"}
        deadline = time.monotonic() + min(body["timeout_ms"], PRODUCE_TIMEOUT_MS_MAX) / 1000
        topic_data = body["topic_data"]
        size = _payload_bytes(topic_data)
        if not self.produce_budget.try_acquire(size):  # no await on the usual path
            await self.produce_budget.acquire(size)  # FIFO: a later produce never overtakes
        try:
            return await self._produce(acks, deadline, topic_data)
        finally:
            self.produce_budget.release(size)

    async def _produce(self, acks: int, deadline: float, topic_data: list) -> "tuple[int, dict] | None":
        # Every append happens here, before the first await: arrival order is append order.
        results: list[tuple[str, list[dict]]] = []
        waits: list[tuple[dict, Partition, int]] = []
        for topic in topic_data:
            name = topic["name"]
            answers = []
            topic_bytes = 0
            for part in topic["partition_data"]:
                index = part["index"]
                answer = {"index": index, "error_code": errors.NONE, "error_message": None, "base_offset": -1,
                          "log_append_time_ms": -1, "log_start_offset": -1, "current_leader": None}
                try:
                    records = part.get("records")  # None: CORRUPT_MESSAGE from the replica manager
                    partition, info = self.replicas.append(name, index, records, acks)
                    topic_bytes += len(records)
                    answer.update(base_offset=info.first_offset, log_start_offset=partition.log.log_start_offset,
                                  log_append_time_ms=getattr(info, "log_append_time_ms", -1))
                    if acks == -1:
                        waits.append((answer, partition, info.last_offset + 1))
                except RaftkaError as error:
                    answer.update(error_code=error.code, error_message=error.message)
                    if error.code in (errors.NOT_LEADER_OR_FOLLOWER, errors.FENCED_LEADER_EPOCH):
                        answer["current_leader"] = self.replicas.current_leader(name, index)
                answers.append(answer)
            if topic_bytes:  # once per topic: /metrics' per-topic bytes in (broker/metrics.py)
                self.metrics.bytes_in += topic_bytes
                self.metrics.topic_bytes_in[name] = self.metrics.topic_bytes_in.get(name, 0) + topic_bytes
            results.append((name, answers))
        if acks == 0:
            return None
        if waits:
            # One future per partition, woken by the partition itself (no task or timer per
            # request); most produce requests carry one partition, awaited without a gather.
            codes = [p.replication_waiter(end, deadline) for _, p, end in waits]
            for i, code in enumerate(codes):
                if not isinstance(code, int):
                    codes[i] = await code
            for (answer, partition, _), code in zip(waits, codes):
                if code != errors.NONE:
                    answer.update(error_code=code, error_message=f"{partition.name}: {errors.name_of(code)} while "
                                                                 "waiting for the ISR to replicate")
                    if code == errors.NOT_LEADER_OR_FOLLOWER:
                        answer["current_leader"] = self.replicas.current_leader(partition.topic, partition.index)
        return errors.NONE, {"responses": [{"name": n, "partition_responses": a} for n, a in results],
                             "throttle_time_ms": 0}

    # -- DeleteRecords ------------------------------------------------------------------------------

    async def delete_records(self, body: dict) -> tuple[int, dict]:
        """DeleteRecords: each partition's leader moves its log start to the offset (-1: the high
        watermark), then the answer waits (up to ``timeout_ms``) until every in-sync copy has
        followed, and carries the low watermark (Kafka's DelayedDeleteRecords)."""
        deadline = time.monotonic() + min(max(body.get("timeout_ms", 0), 0), DELETE_RECORDS_TIMEOUT_MS_MAX) / 1000
        topics: list[dict] = []
        waits: list[tuple[dict, Partition, int]] = []
        for topic in body.get("topics", ()):
            name = topic["name"]
            answers = []
            for part in topic["partitions"]:
                answer = {"partition_index": part["partition_index"], "low_watermark": -1, "error_code": errors.NONE}
                try:
                    partition = self.replicas.leader_partition(name, part["partition_index"])
                    start = partition.delete_records(part["offset"])
                    waits.append((answer, partition, start))
                except RaftkaError as error:
                    answer["error_code"] = error.code
                answers.append(answer)
            topics.append({"name": name, "partitions": answers})
        for answer, partition, start in waits:
            code = await partition.wait_for_low_watermark(start, deadline)
            answer["error_code"] = code
            answer["low_watermark"] = partition.low_watermark() if code == errors.NONE else -1
        return errors.NONE, {"throttle_time_ms": 0, "topics": topics}

    # -- Fetch, ListOffsets, OffsetsForLeaderEpoch --------------------------------------------------

    async def fetch(self, body: dict) -> tuple[int, dict]:
        out = await self.replicas.fetch(body)
        if body["replica_id"] < 0:
            by_topic = self.metrics.topic_bytes_out
            for t in out["responses"]:
                size = sum(len(p["records"]) for p in t["partitions"])
                if size:
                    self.metrics.bytes_out += size
                    by_topic[t["topic"]] = by_topic.get(t["topic"], 0) + size
        else:
            self.metrics.replication_bytes_out += sum(len(p["records"]) for t in out["responses"]
                                                      for p in t["partitions"])
            self.metrics.replication_partitions_out += sum(len(t["partitions"]) for t in out["responses"])
        return errors.NONE, out

    async def list_offsets(self, body: dict) -> tuple[int, dict]:
        topics = []
        for topic in body["topics"]:
            name = topic["name"]
            topics.append({"name": name, "partitions": [self.replicas.list_offset(name, p)
                                                         for p in topic["partitions"]]})
        return errors.NONE, {"topics": topics}

    async def offsets_for_leader_epoch(self, body: dict) -> tuple[int, dict]:
        topics = []
        for topic in body["topics"]:
            name = topic["topic"]
            topics.append({"topic": name, "partitions": [self.replicas.offsets_for_leader_epoch(name, p)
                                                          for p in topic["partitions"]]})
        return errors.NONE, {"topics": topics}

    # -- forwarded to the controller, producer ids ----------------------------------------------------

    def _forwarder(self, api_key: int) -> Callable[[dict], Any]:
        """CreateTopics, DeleteTopics, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
        CreatePartitions, DescribeUserScramCredentials, AlterUserScramCredentials, DescribeAcls,
        CreateAcls, DeleteAcls: the active controller answers."""
        async def forward(body: dict) -> tuple[int, dict]:
            return await self.controllers.request(api_key, body, retry_in_doubt=False)
        return forward

    async def describe_configs(self, body: dict) -> tuple[int, dict]:
        """DescribeConfigs: a BROKER resource is answered here (broker/configs.py: only this broker
        knows its server.properties), every other one by the active controller; the results keep
        the request's order."""
        resources = body["resources"]
        others = [r for r in resources if not broker_configs.is_broker_resource(r)]
        forwarded: list[dict] = []
        if others:
            code, out = await self.controllers.request(ApiKey.DESCRIBE_CONFIGS, {**body, "resources": others})
            if code != errors.NONE:
                return code, out
            forwarded = list(out["results"])
            if len(forwarded) != len(others):  # one result per resource, or the order means nothing
                return errors.UNKNOWN_SERVER_ERROR, {"error_message": f"the controller answered {len(forwarded)} "
                                                                      f"DescribeConfigs results for {len(others)}"}
        view, rest = self.replicas.view, iter(forwarded)
        synonyms, documentation = body.get("include_synonyms", False), body.get("include_documentation", False)
        results = [broker_configs.describe(self.config, view, r, include_synonyms=synonyms,
                                           include_documentation=documentation)
                   if broker_configs.is_broker_resource(r) else next(rest) for r in resources]
        return errors.NONE, {"throttle_time_ms": 0, "results": results}

    async def init_producer_id(self, body: dict) -> tuple[int, dict]:
        """Ids from a block of AllocateProducerIds (one controller commit per 1,000 producers)."""
        async with self._producer_id_lock:
            if self._producer_ids[0] >= self._producer_ids[1]:
                code, out = await self.controllers.request(ApiKey.ALLOCATE_PRODUCER_IDS,
                                                           {"broker_id": self.broker_id,
                                                            "broker_epoch": self.broker_epoch})
                if code != errors.NONE:
                    return code, {"error_message": f"AllocateProducerIds refused: {errors.name_of(code)}"}
                start = out["producer_id_start"]
                self._producer_ids = [start, start + out["producer_id_len"]]
            producer_id = self._producer_ids[0]
            self._producer_ids[0] += 1
        return errors.NONE, {"producer_id": producer_id, "producer_epoch": 0}

    # -- AlterPartition (called by the replica manager) -----------------------------------------------

    async def _alter_partition(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        """AlterPartition v3: the topic by id, each ISR member with the broker epoch our metadata
        knows (the controller refuses a member that registered again since: INELIGIBLE_REPLICA).
        The change goes out with every other pending one in a single request
        (AlterPartitionManager); the committed result is taken once its answer is in."""
        topic_id = self.replicas.topic_ids.get((partition.topic, partition.index))
        if topic_id is None:
            raise errors.for_code(errors.UNKNOWN_TOPIC_ID)(f"{partition.name}: no topic id in our metadata")
        brokers = self.replicas.view.brokers
        members = [{"broker_id": b, "broker_epoch": brokers[b].broker_epoch if b in brokers else -1} for b in new_isr]
        log.debug("%s: asking the controller for ISR %s (from %s)", partition.name, list(new_isr), list(partition.isr))
        try:
            answer = await self.alter_partitions.submit(topic_id, {
                "partition_index": partition.index, "leader_epoch": partition.leader_epoch,
                "new_isr_with_epochs": members, "partition_epoch": partition.partition_epoch})
        except RaftkaError as error:
            raise errors.error_for(error.code, f"{partition.name}: {error.message}") from None
        # Committed: the metadata log brings the same state.
        partition.take_alter_result({"leader": answer["leader_id"], "leader_epoch": answer["leader_epoch"],
                                     "isr": answer["isr"], "partition_epoch": answer["partition_epoch"]})


def _payload_bytes(topic_data: list) -> int:
    """Record bytes of a checked Produce body."""
    total = 0
    for topic in topic_data:
        for part in topic["partition_data"]:
            records = part.get("records")
            if records is not None:
                total += len(records)
    return total


def run_broker(config: ServerConfig, *, print_line: Callable[[str], None] | None = None) -> int:
    """The broker-only process: serve until SIGTERM/SIGINT, then shut down cleanly."""
    say = print_line or (lambda line: print(line, flush=True))

    async def main() -> int:
        stop = stop_on_signals()
        await serve_broker(config, stop, say)
        return 0
    return event_loop.run(main())


def stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A write past the file-size limit fails with EFBIG (a KAFKA_STORAGE_ERROR) instead of
    # killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return stop


async def serve_broker(config: ServerConfig, stop: asyncio.Event, say: Callable[[str], None], *,
                       http: bool = True) -> None:
    """Run a broker on the running loop until ``stop`` is set; prints the ready line."""
    broker = BrokerServer(config, say, http=http)
    stopped = asyncio.create_task(stop.wait())
    try:
        started = asyncio.create_task(broker.start())
        await asyncio.wait([started, stopped], return_when=asyncio.FIRST_COMPLETED)
        if started.done():
            started.result()  # a failed start raises here
            ready = asyncio.create_task(broker.wait_ready(3600))
            await asyncio.wait([ready, stopped], return_when=asyncio.FIRST_COMPLETED)
            if ready.done() and not ready.cancelled() and not ready.exception():
                note = " http=%s:%d" % config.listeners["HTTP"] if http and "HTTP" in config.listeners else ""
                listed = "".join(f" {name.lower()}={host}:{port}" for name, host, port in broker.advertised_endpoints())
                say(f"raftka broker {config.node_id} ready{listed}{note} epoch={broker.broker_epoch}")
            await stopped
            say(f"raftka broker {config.node_id} stopping")
            await broker.controlled_shutdown()
        else:
            started.cancel()
    finally:
        stopped.cancel()
        await broker.close()
