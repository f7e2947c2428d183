"""The client's network layer: bootstrap, one pipelined connection per broker, the metadata cache.

Every producer, consumer and admin client owns one :class:`Cluster`. It

- parses ``bootstrap_servers`` (``"h:p,h:p"`` or a list),
- keeps one connection per broker address (the transport pipelines requests on it),
- keeps a metadata cache (brokers, topics, partitions, leaders, leader epochs), refreshed by a
  background task when asked (``request_update()``: after NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, a lost connection) and at least every
  ``metadata_max_age_ms``; failed refreshes are retried every ``retry_backoff_ms``,
- bounds every request by ``request_timeout_ms``. A connection whose request timed out or
  failed is closed and re-opened on next use, so a dead broker costs one timeout, not a hang.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Protocol, Sequence

from raftka.client.aio.metrics import MetricConfig, Sensor, sensor_metrics
from raftka.client.aio.protocol import KAFKA_VERSIONS
from raftka.common.schema import ZERO_UUID
from raftka.client.aio.timeouts import cancel_and_wait, wait_for
from raftka.client.errors import KafkaClosedError, KafkaTimeoutError, NoBrokersAvailable
from raftka.common import errors
from raftka.common.errors import NetworkExceptionError, RaftkaError, RequestTimedOutError
from raftka.common.security import SslAuthenticationError
from raftka.client.structs import BrokerMetadata, PartitionMetadata, TopicPartition

log = logging.getLogger(__name__)

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_CREATE_TOPICS = 19
API_DELETE_TOPICS = 20
API_INIT_PRODUCER_ID = 22
API_OFFSET_FOR_LEADER_EPOCH = 23
API_DESCRIBE_CONFIGS = 32
API_ALTER_CONFIGS = 33
API_DESCRIBE_CLUSTER = 60

DEFAULT_PORT = 9092
TRACKED = object()  # refresh_metadata's default: the topics this client tracks
CONNECTIONS_MAX = 1024  # distinct broker addresses one client keeps connections to
CLOSE_TIMEOUT_S = 2.0  # how long close() waits for its metadata task, and for connections being opened
# After the brokers refused this client's credentials (SASL_AUTHENTICATION_FAILED), the metadata
# task tries again this seldom (Kafka's reconnect.backoff.max.ms): each try costs the broker a
# password hash, and only a changed credential makes it succeed.
AUTHENTICATION_RETRY_BACKOFF_MS = 1000


class ConnectionLike(Protocol):
    """What the cluster needs from a transport connection (common/transport.py)."""

    async def request(self, api_key: int, body: Any, api_version: int = 0, *,
                      timeout_ms: int | None = None,
                      expect_response: bool = True) -> tuple[int, Any]:
        """Send one request; ``(error_code, body)`` of its answer."""
        ...

    def close(self) -> Any:
        """Close; requests in flight fail with NetworkExceptionError."""
        ...


ConnectionFactory = Callable[[str, int, str], Awaitable[ConnectionLike]]


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"a:1,b:2"`` or ``["a:1", "b"]`` -> ``[("a", 1), ("b", 9092)]``; ConfigError when empty."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, str(DEFAULT_PORT)
        try:
            out.append((host.strip("[]") or "127.0.0.1", int(port)))
        except ValueError:
            raise errors.ConfigError("bootstrap_servers", f"bad address {item!r} (want host:port)") from None
    if not out:
        raise errors.ConfigError("bootstrap_servers", "no address given")
    return out


async def default_connection_factory(host: str, port: int, client_id: str) -> ConnectionLike:
    """Open a pipelined connection with the shared transport (common/transport.py)."""
    from raftka.common.transport import Connection  # the shared transport
    return await Connection.open(host, port, client_id=client_id, kafka_versions=KAFKA_VERSIONS)


@dataclass
class TopicInfo:
    """One topic of the metadata cache."""

    name: str
    topic_id: Any
    error_code: int
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    sorted_partitions: list[int] | None = None  # cached by ClusterMetadata
    available: list[int] | None = None


@dataclass
class ClusterMetadata:
    """A snapshot of what Metadata answered (replaced, never mutated in place, except leaders
    learnt from a NOT_LEADER_OR_FOLLOWER answer)."""

    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)

    def partitions_for(self, topic: str) -> list[int] | None:
        """Sorted partition indexes of ``topic``, None when unknown (cached: do not mutate)."""
        info = self.topics.get(topic)
        if info is None or info.error_code != errors.NONE or not info.partitions:
            return None
        if info.sorted_partitions is None:
            info.sorted_partitions = sorted(info.partitions)
        return info.sorted_partitions

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of ``topic`` whose leader is a known broker (cached: do not mutate)."""
        info = self.topics.get(topic)
        if info is None:
            return []
        if info.available is None:
            info.available = sorted(p for p, m in info.partitions.items()
                                    if m.leader >= 0 and m.leader in self.brokers)
        return info.available

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        """The metadata of one partition, None when unknown."""
        info = self.topics.get(tp.topic)
        return info.partitions.get(tp.partition) if info else None

    def leader_for(self, tp: TopicPartition) -> int | None:
        """The leader's node id, None when offline or not a known broker."""
        meta = self.partition(tp)
        if meta is None or meta.leader < 0 or meta.leader not in self.brokers:
            return None
        return meta.leader

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The cached leader epoch of ``tp`` (-1 when unknown)."""
        meta = self.partition(tp)
        return meta.leader_epoch if meta else -1


def _broker_from(raw: dict[str, Any]) -> BrokerMetadata | None:
    node_id = raw.get("node_id", raw.get("broker_id"))
    host, port = raw.get("host"), raw.get("port")
    if host is None and raw.get("endpoints"):  # a controller's answer lists endpoints
        endpoint = raw["endpoints"][0]
        if isinstance(endpoint, dict):
            host, port = endpoint.get("host"), endpoint.get("port")
        else:
            host, _, port = str(endpoint).rpartition("//")[2].rpartition(":")
    if node_id is None or host is None or port is None:
        return None
    return BrokerMetadata(int(node_id), str(host), int(port), raw.get("rack"))


def parse_metadata(body: dict[str, Any]) -> ClusterMetadata:
    """A Metadata response body (docs/protocol.md) -> ClusterMetadata."""
    brokers = {}
    for raw in body.get("brokers") or []:
        if raw.get("fenced"):
            continue
        broker = _broker_from(raw)
        if broker is not None:
            brokers[broker.node_id] = broker
    topics = {}
    for raw in body.get("topics") or []:
        name = raw["name"]
        parts = {}
        for p in raw.get("partitions") or []:
            idx = p["partition_index"]
            parts[idx] = PartitionMetadata(
                name, idx, p.get("leader_id", -1) if p.get("leader_id") is not None else -1,
                p.get("leader_epoch", -1), tuple(p.get("replica_nodes") or ()),
                tuple(p.get("isr_nodes") or ()), tuple(p.get("offline_replicas") or ()))
        topic_id = raw.get("topic_id")
        topics[name] = TopicInfo(name, None if topic_id == ZERO_UUID else topic_id, raw.get("error_code", 0) or 0,
                                 parts)
    return ClusterMetadata(body.get("cluster_id"), body.get("controller_id", -1)
                           if body.get("controller_id") is not None else -1, brokers, topics)


class Cluster:
    """Connections, requests and the metadata cache of one client object (see module doc)."""

    def __init__(self, bootstrap_servers: str | Sequence[str], *, client_id: str = "raftka-python",
                 request_timeout_ms: int = 30_000, retry_backoff_ms: int = 100,
                 metadata_max_age_ms: int = 300_000,
                 connection_factory: ConnectionFactory | None = None,
                 rng: random.Random | None = None, metric_config: MetricConfig | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self._factory = connection_factory or default_connection_factory
        self._rng = rng or random.Random()
        self.metadata = ClusterMetadata()
        self._metadata_at = 0.0  # monotonic time of the last successful refresh
        self._tracked: set[str] = set()
        self._all_topics = False  # track every topic (pattern subscriptions, admin)
        self._connections: dict[tuple[str, int], ConnectionLike] = {}
        self._failed_at: dict[tuple[str, int], float] = {}  # address -> monotonic time of last failure
        self._opening: dict[tuple[str, int], asyncio.Future[ConnectionLike]] = {}
        self._update_wanted = asyncio.Event()
        self._updated = asyncio.Condition()
        self._refresh_count = 0
        self._last_refresh_error: BaseException | None = None
        # The brokers refused this client's credentials at the last refresh: waiters fail with it at once.
        self._authentication_error: RaftkaError | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()  # connections being closed after a failure
        self._closed = False
        # Kafka's network metrics of a client (metrics(); client/aio/metrics.py).
        mc = metric_config or MetricConfig()
        self.request_sensor = Sensor(mc)  # 1 per request sent
        self.response_sensor = Sensor(mc)  # 1 per answer received
        self.latency_sensor = Sensor(mc)  # ms from send to answer, of requests awaited here
        self.connection_creation_sensor = Sensor(mc)
        self.connection_close_sensor = Sensor(mc)

    # -- lifecycle --
    def start(self) -> None:
        """Start the background metadata task (on the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._metadata_loop())

    async def close(self) -> None:
        """Stop the metadata task and close every connection."""
        self._closed = True
        # Bounded (the loop also ends on _closed): not `await self._task`, which would hang
        # with it should it be slow to unwind.
        await cancel_and_wait([self._task], CLOSE_TIMEOUT_S)
        if self._closing:  # closes started by connection_failed (each bounded by its own timeout)
            await asyncio.wait(set(self._closing), timeout=CLOSE_TIMEOUT_S)
        # Connections still being opened would outlive the client (their read loops pending
        # when the loop stops): wait for them (bounded by their connect timeout) and close them.
        opening = list(self._opening.values())
        for pending in opening:
            pending.cancel()
        if opening:  # bounded: close() must return even if a connect ignores its cancellation
            await asyncio.wait(opening, timeout=CLOSE_TIMEOUT_S)
        for pending in opening:
            if pending.done() and not pending.cancelled() and pending.exception() is None:
                await _close_quietly(pending.result())
        for address in list(self._connections):
            await self._drop(address)

    async def connect_bootstrap(self, timeout_ms: int | None = None) -> None:
        """Fetch metadata once from any bootstrap server, as kafka-python's constructors do
        before returning: NoBrokersAvailable when none answered within ``timeout_ms`` (the
        clients' ``bootstrap_timeout_ms``; default ``request_timeout_ms``), naming the addresses
        and the last connection error. Brokers that answered but refused this client (its TLS
        handshake or SASL login) are not an unreachable bootstrap: that error is kept, and the
        first call that needs the cluster raises it at once, as it did before this check."""
        timeout_ms = timeout_ms or self.request_timeout_ms
        try:
            await self.refresh_metadata(timeout_ms=timeout_ms)
        except (errors.SaslAuthenticationFailedError, SslAuthenticationError) as error:
            self._authentication_error = error
        except KafkaTimeoutError as error:
            tried = ", ".join(f"{host}:{port}" for host, port in self.bootstrap)
            last = error.__cause__
            cause = f"last error: {last}" if last is not None else "no connection attempt finished"
            raise NoBrokersAvailable(f"no broker answered at {tried} within {timeout_ms} ms ({cause})") from last

    def bootstrap_connected(self) -> bool:
        """True while this client holds an open connection to a broker (kafka-python's
        ``bootstrap_connected``: the client reached the cluster and is still connected)."""
        return any(not getattr(conn, "closed", False) for conn in self._connections.values())

    def metrics(self) -> dict[str, float]:
        """Kafka's network metrics of this client (a group's common part, see metrics.py)."""
        out = {"connection-count": float(sum(not getattr(c, "closed", False) for c in self._connections.values()))}
        out.update(sensor_metrics("connection-creation", self.connection_creation_sensor, "total", "rate"))
        out.update(sensor_metrics("connection-close", self.connection_close_sensor, "total", "rate"))
        out.update(sensor_metrics("request", self.request_sensor, "total", "rate"))
        out.update(sensor_metrics("response", self.response_sensor, "total", "rate"))
        age = self.metadata_age_ms
        out["metadata-age"] = age / 1000 if age != float("inf") else math.nan  # seconds, as Kafka's
        return out

    # -- connections and requests --
    def address_of(self, node_id: int) -> tuple[str, int] | None:
        """(host, port) of broker ``node_id`` from the metadata, None when unknown."""
        broker = self.metadata.brokers.get(node_id)
        return (broker.host, broker.port) if broker else None

    async def _connection(self, address: tuple[str, int], timeout_ms: int) -> ConnectionLike:
        conn = self._connections.get(address)
        if conn is not None:
            if not getattr(conn, "closed", False):
                return conn
            await self._drop(address)  # the broker closed it (idle, restart): open a new one
        pending = self._opening.get(address)
        if pending is None:
            if len(self._connections) >= CONNECTIONS_MAX:
                await self._drop(next(iter(self._connections)))
            pending = asyncio.ensure_future(self._open(address))
            self._opening[address] = pending
            pending.add_done_callback(lambda f, a=address: self._opened(a, f))
        try:
            conn = await wait_for(asyncio.shield(pending), timeout_ms / 1000)
        except asyncio.TimeoutError:
            pending.cancel()
            self._failed_at[address] = time.monotonic()
            raise NetworkExceptionError(f"could not connect to {address[0]}:{address[1]} "
                                        f"within {timeout_ms} ms") from None
        except RaftkaError:
            self._failed_at[address] = time.monotonic()
            raise
        except OSError as error:
            self._failed_at[address] = time.monotonic()
            raise NetworkExceptionError(f"could not connect to {address[0]}:{address[1]}: {error}") from None
        return conn

    def _opened(self, address: tuple[str, int], pending: asyncio.Future[ConnectionLike]) -> None:
        self._opening.pop(address, None)
        if not pending.cancelled():
            pending.exception()  # retrieved: a waiter that timed out or was cancelled never will

    async def _open(self, address: tuple[str, int]) -> ConnectionLike:
        """Open a connection and adopt it here, even when whoever asked for it was cancelled
        meanwhile (it would otherwise be left open with its read loop pending)."""
        conn = await self._factory(address[0], address[1], self.client_id)
        if self._closed:
            await _close_quietly(conn)
            raise KafkaClosedError("the client is closed")
        kept = self._connections.setdefault(address, conn)
        if kept is not conn:
            await _close_quietly(conn)
        else:
            self.connection_creation_sensor.record()
        return kept

    async def _drop(self, address: tuple[str, int]) -> None:
        self._failed_at[address] = time.monotonic()
        conn = self._connections.pop(address, None)
        if conn is not None:
            self.connection_close_sensor.record()
            await _close_quietly(conn)

    async def request_address(self, address: tuple[str, int], api_key: int, body: Any, *,
                              timeout_ms: int | None = None,
                              expect_response: bool = True) -> tuple[int, Any]:
        """One request to one address. A lost connection or a timeout closes the connection and
        raises NetworkExceptionError / RequestTimedOutError (both retriable)."""
        timeout_ms = timeout_ms or self.request_timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        conn = await self._connection(address, timeout_ms)
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        self.request_sensor.record()
        sent = time.monotonic()
        try:
            answer = await wait_for(
                conn.request(api_key, body, timeout_ms=left_ms, expect_response=expect_response),
                left_ms / 1000 + 0.5)
            if expect_response:
                self.response_sensor.record()
                self.latency_sensor.record((time.monotonic() - sent) * 1000)
            return answer
        except asyncio.TimeoutError:
            await self._drop(address)
            self.request_update()
            raise RequestTimedOutError(f"no answer from {address[0]}:{address[1]} within "
                                       f"{timeout_ms} ms (request_timeout_ms)") from None
        except (NetworkExceptionError, RequestTimedOutError):
            await self._drop(address)
            self.request_update()
            raise
        except (OSError, ConnectionError, EOFError) as error:
            await self._drop(address)
            self.request_update()
            raise NetworkExceptionError(f"connection to {address[0]}:{address[1]} lost: {error}") from None

    def submit(self, node_id: int, api_key: int, body: Any, *,
               timeout_ms: int | None = None) -> "asyncio.Future[tuple[int, Any]] | None":
        """Submit to broker ``node_id`` over its open connection without awaiting (see
        Connection.submit: written now or queued in order): the answer's future. None when
        there is no open connection (then use :meth:`submit_connected`) or the connection type
        has no ``submit`` (then use :meth:`request`). When the future fails with
        NetworkExceptionError or RequestTimedOutError, call :meth:`connection_failed`."""
        address = self.address_of(node_id)
        conn = self._connections.get(address) if address is not None else None
        submit = getattr(conn, "submit", None)
        if submit is None or getattr(conn, "closed", False):
            return None
        return self._counted(submit(api_key, body, timeout_ms=timeout_ms or self.request_timeout_ms))

    def _counted(self, future: "asyncio.Future[tuple[int, Any]]") -> "asyncio.Future[tuple[int, Any]]":
        """Count a submitted request, and its answer when it comes (request-total, response-total)."""
        self.request_sensor.record()
        future.add_done_callback(self._answered)
        return future

    def _answered(self, future: "asyncio.Future[tuple[int, Any]]") -> None:
        if not future.cancelled() and future.exception() is None:
            self.response_sensor.record()

    async def submit_connected(self, node_id: int, api_key: int, body: Any, *,
                               timeout_ms: int | None = None) -> "asyncio.Future[tuple[int, Any]] | None":
        """:meth:`submit`, connecting first when needed (errors as :meth:`request`'s); None
        when the connection type has no ``submit``."""
        timeout_ms = timeout_ms or self.request_timeout_ms
        address = self.address_of(node_id)
        if address is None:
            self.request_update()
            raise errors.LeaderNotAvailableError(f"broker {node_id} is not in the metadata")
        conn = await self._connection(address, timeout_ms)
        submit = getattr(conn, "submit", None)
        if submit is None:
            return None
        try:
            return self._counted(submit(api_key, body, timeout_ms=timeout_ms))
        except NetworkExceptionError:
            self.connection_failed(node_id)
            raise

    def connection_failed(self, node_id: int) -> None:
        """A request sent with :meth:`submit` failed with a lost connection or a timeout:
        drop the connection and refresh the metadata, as :meth:`request` does."""
        address = self.address_of(node_id)
        conn = self._connections.pop(address, None) if address is not None else None
        if conn is not None:
            self.connection_close_sensor.record()
            self._failed_at[address] = time.monotonic()
            task = asyncio.get_running_loop().create_task(_close_quietly(conn))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        self.request_update()

    async def request(self, node_id: int, api_key: int, body: Any, *, timeout_ms: int | None = None,
                      expect_response: bool = True) -> tuple[int, Any]:
        """One request to broker ``node_id`` (its address from the metadata cache)."""
        address = self.address_of(node_id)
        if address is None:
            self.request_update()
            raise errors.LeaderNotAvailableError(f"broker {node_id} is not in the metadata")
        return await self.request_address(address, api_key, body, timeout_ms=timeout_ms,
                                          expect_response=expect_response)

    def candidate_addresses(self) -> list[tuple[str, int]]:
        """Known brokers (shuffled), then the bootstrap servers."""
        known = [(b.host, b.port) for b in self.metadata.brokers.values()]
        self._rng.shuffle(known)
        boot = list(self.bootstrap)
        self._rng.shuffle(boot)
        candidates = list(dict.fromkeys(known + boot))
        # Addresses that failed lately go last (stable sort keeps the shuffle among equals), so a
        # paused broker does not cost a request timeout on every metadata refresh.
        candidates.sort(key=lambda a: self._failed_at.get(a, 0.0))
        return candidates

    async def request_any(self, api_key: int, body: Any, *, timeout_ms: int | None = None,
                          retry_codes: Iterable[int] = (errors.NOT_CONTROLLER,),
                          split_budget: bool = False) -> tuple[int, Any]:
        """Send to any broker; on a lost connection, a timeout or a frame error in
        ``retry_codes``, try the next one (backoff ``retry_backoff_ms`` after each round) until
        ``timeout_ms`` (default ``request_timeout_ms``) runs out; then raise the last error.

        ``split_budget`` is for cheap lookups any broker answers at once (Metadata,
        FindCoordinator): an attempt that is not the round's last gets at most half of what is
        left, so a broker that accepts connections but answers nothing (paused, overloaded)
        cannot spend the whole budget while a healthy one waits next in line."""
        timeout_ms = timeout_ms or self.request_timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        retry = set(retry_codes)
        last: BaseException | None = None
        while True:
            candidates = self.candidate_addresses()
            refused = 0  # this round's brokers that refused us for good (a failed TLS handshake)
            for i, address in enumerate(candidates):
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    break
                attempt_ms = min(left_ms, self.request_timeout_ms)
                if split_budget and i < len(candidates) - 1:
                    attempt_ms = max(1, min(attempt_ms, left_ms // 2))
                try:
                    code, answer = await self.request_address(address, api_key, body, timeout_ms=attempt_ms)
                except (NetworkExceptionError, RequestTimedOutError) as error:
                    last = error
                    refused += not error.retriable
                    continue
                if code in retry:
                    last = errors.error_for(code, (answer or {}).get("error_message")
                                            if isinstance(answer, dict) else None)
                    continue
                return code, answer
            left_s = deadline - time.monotonic()
            if left_s <= 0 or (candidates and refused == len(candidates)):
                if isinstance(last, RaftkaError) and not last.retriable:
                    raise last
                raise KafkaTimeoutError(f"no broker answered within {timeout_ms} ms "
                                        f"(last error: {last})") from last
            await asyncio.sleep(min(left_s, self.retry_backoff_ms / 1000))

    # -- metadata --
    def add_topics(self, topics: Iterable[str]) -> None:
        """Track these topics (their metadata is fetched on every refresh)."""
        new = set(topics) - self._tracked
        if new:
            self._tracked |= new
            self.request_update()

    def track_all_topics(self, value: bool = True) -> None:
        """Fetch every topic's metadata on refresh (pattern subscriptions)."""
        self._all_topics = value
        self.request_update()

    def request_update(self) -> None:
        """Ask the background task for a refresh soon (coalesced)."""
        self._update_wanted.set()

    @property
    def metadata_age_ms(self) -> float:
        """Milliseconds since the last successful refresh (inf before one)."""
        return (time.monotonic() - self._metadata_at) * 1000 if self._metadata_at else float("inf")

    async def refresh_metadata(self, topics: Sequence[str] | None | object = TRACKED, *,
                               timeout_ms: int | None = None) -> ClusterMetadata:
        """Fetch metadata now for ``topics`` (None: every topic; default: the tracked ones, or
        every topic when tracking all) from any broker, merge it into the cache, and return what this answer said."""
        if topics is TRACKED:
            topics = None if self._all_topics else sorted(self._tracked)
        code, body = await self.request_any(API_METADATA, {"topics": [{"name": t} for t in topics]
                                                           if topics is not None else None,
                                                           "allow_auto_topic_creation": False},
                                            timeout_ms=timeout_ms, split_budget=True)
        if code != errors.NONE:
            raise errors.error_for(code, (body or {}).get("error_message") if isinstance(body, dict) else None)
        fresh = parse_metadata(body)
        self._merge(fresh, full=topics is None)
        self._metadata_at = time.monotonic()
        self._refresh_count += 1
        async with self._updated:
            self._updated.notify_all()
        return fresh

    def _merge(self, fresh: ClusterMetadata, *, full: bool) -> None:
        old = self.metadata
        topics = {} if full else {n: t for n, t in old.topics.items() if n not in fresh.topics}
        for name, info in fresh.topics.items():
            previous = old.topics.get(name)
            if previous is not None and previous.topic_id == info.topic_id:
                # A broker behind on metadata must not roll a leader back: keep the newer epoch.
                for idx, meta in info.partitions.items():
                    known = previous.partitions.get(idx)
                    if known is not None and known.leader_epoch > meta.leader_epoch:
                        info.partitions[idx] = known
            topics[name] = info
        if not full:
            for name in list(topics):
                if name not in self._tracked and name not in fresh.topics and not self._all_topics:
                    topics.pop(name)
        self.metadata = ClusterMetadata(fresh.cluster_id, fresh.controller_id,
                                        fresh.brokers or old.brokers, topics)

    def update_leader(self, tp: TopicPartition, leader: dict[str, Any] | None) -> None:
        """Apply ``current_leader`` {leader_id, leader_epoch} from an error answer when newer."""
        if not leader or leader.get("leader_id") is None or leader["leader_id"] < 0:  # -1: Kafka's "unknown"
            self.request_update()
            return
        info = self.metadata.topics.get(tp.topic)
        meta = info.partitions.get(tp.partition) if info else None
        epoch = leader.get("leader_epoch", -1)
        if meta is None or epoch <= meta.leader_epoch:
            self.request_update()
            return
        info.partitions[tp.partition] = meta._replace(leader=leader["leader_id"], leader_epoch=epoch)
        info.available = None
        if leader["leader_id"] not in self.metadata.brokers:
            self.request_update()

    async def wait_for_update(self, timeout_ms: float) -> bool:
        """Request a refresh and wait for it; False when none completed in time."""
        count = self._refresh_count
        self.request_update()
        try:
            async with self._updated:
                await wait_for(self._updated.wait_for(
                    lambda: self._refresh_count > count or self._authentication_error is not None),
                               timeout_ms / 1000)
            return True
        except asyncio.TimeoutError:
            return False

    async def partitions_for(self, topic: str, timeout_ms: float, partition: int | None = None) -> list[int]:
        """The partitions of ``topic``, waiting for metadata up to ``timeout_ms``, refreshing it
        every ``retry_backoff_ms``; with ``partition``, for metadata that has that partition
        (Kafka's producer waits so for an explicit partition: it may have just been added by
        CreatePartitions). Raises UnknownTopicOrPartitionError (or the topic's error) or
        KafkaTimeoutError (naming the partition when only it is missing)."""
        self.add_topics([topic])
        parts = self.metadata.partitions_for(topic)
        if parts is not None and (partition is None or partition in parts):
            return parts
        deadline = time.monotonic() + timeout_ms / 1000
        refreshes_before = self._refresh_count
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0:
                break
            await self.wait_for_update(left_ms)
            if self._authentication_error is not None:  # not retried: the credentials are wrong
                raise type(self._authentication_error)(self._authentication_error.message)
            parts = self.metadata.partitions_for(topic)
            if parts is not None and (partition is None or partition in parts):
                return parts
            info = self.metadata.topics.get(topic)
            if info is not None and info.error_code == errors.TOPIC_AUTHORIZATION_FAILED:  # not retried, as Kafka's
                raise errors.error_for(info.error_code, topic=topic)
            await asyncio.sleep(min(max(0.0, deadline - time.monotonic()), self.retry_backoff_ms / 1000))
        if parts is not None:
            raise KafkaTimeoutError(f"partition {partition} does not exist in the metadata after {int(timeout_ms)} ms "
                                    f"(partition count {len(parts)})", topic=topic, partition=partition)
        info = self.metadata.topics.get(topic)
        if info is not None and info.error_code not in (errors.NONE, errors.UNKNOWN_TOPIC_OR_PARTITION,
                                                        errors.LEADER_NOT_AVAILABLE):
            raise errors.error_for(info.error_code, topic=topic)
        if self._refresh_count > refreshes_before:  # a broker answered: the topic is not there
            raise errors.UnknownTopicOrPartitionError(
                f"topic not found in metadata within {int(timeout_ms)} ms", topic=topic)
        raise KafkaTimeoutError(f"no metadata within {int(timeout_ms)} ms (last error: "
                                f"{self._last_refresh_error})", topic=topic)

    async def _metadata_loop(self) -> None:
        while not self._closed:
            wait_s = max(0.0, (self.metadata_max_age_ms - self.metadata_age_ms) / 1000)
            if self._metadata_at and not self._update_wanted.is_set():
                try:
                    await wait_for(self._update_wanted.wait(), wait_s)
                except asyncio.TimeoutError:
                    pass
            self._update_wanted.clear()
            backoff_ms = self.retry_backoff_ms
            try:
                await self.refresh_metadata()
                self._last_refresh_error = self._authentication_error = None
            except asyncio.CancelledError:
                raise
            except Exception as error:  # retried after the backoff; waiters see their timeout
                self._last_refresh_error = error
                log.debug("metadata refresh failed: %s", error)
                self._update_wanted.set()
                if isinstance(error, (errors.SaslAuthenticationFailedError, SslAuthenticationError)):
                    self._authentication_error = error
                    backoff_ms = max(backoff_ms, AUTHENTICATION_RETRY_BACKOFF_MS)
                    async with self._updated:
                        self._updated.notify_all()
            await asyncio.sleep(backoff_ms / 1000)


async def _close_quietly(conn: Any) -> None:
    """Close a connection; closing a broken one may fail, and it is gone either way."""
    try:
        result = conn.close()
        if inspect.isawaitable(result):
            await result
    except Exception:
        pass
