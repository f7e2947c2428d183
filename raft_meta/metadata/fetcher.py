"""Follow the committed metadata log from the controllers (what a broker does), on asyncio.

    fetcher = MetadataFetcher(["127.0.0.1:9401", ...], replica_id=broker_id,
                              on_metadata_update=lambda delta, image: ...)
    task = asyncio.create_task(fetcher.run())
    ...  fetcher.image is the broker's local MetadataImage
    await fetcher.close()

The fetcher long-polls one controller with Kafka's Fetch (v12) of ``__cluster_metadata``-0, as
a KRaft observer does (``replica_id`` = the broker's id; see service.fetch_metadata for how
entries travel as record batches), replays the entries in log order on the event loop thread
(no pysyncobj thread involved) into its own ``ControllerStateMachine(MetadataLoader())`` (or the
``state`` passed in). When it is behind the log start the answer names a snapshot
(``snapshot_id``): the fetcher reads it with FetchSnapshot (v1) in chunks of at most
``max_bytes``, restores it, and fetches on from the snapshot's end offset. After each fetched
batch it calls, on the loop:

- ``on_metadata_update(delta, image)``: ``delta`` (a MetadataDelta) holds what the batch changed,
  ``image`` is the new image; after a snapshot restore the delta goes from the old image to the
  restored one, so ``delta.local_changes(broker_id)`` is right either way;
- ``on_update(offset)``: the last applied offset (of any record kind).

Until it first reaches the log's high watermark (a broker starting, possibly far behind),
``on_metadata_update`` waits, as Kafka's MetadataLoader does while it "still needs to catch up":
one call with one delta from the image it started with, not one per fetched chunk (each would
re-apply every partition it touched; a log full of leader changes touches them all many times).

A callback that raises is logged and does not stop the fetcher. Any controller serves the same
committed log with the same offsets, so on an error the fetcher moves to the next bootstrap
controller (after ``retry_backoff_ms``) and goes on from its own offset.
"""
from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
from typing import Any, Callable, Final, Sequence

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import RaftkaError
from raftka.common.records import iter_records
from raftka.common.sasl import SaslClientSettings
from raftka.common.transport import Connection
from raftka.raft_meta.metadata.state import ControllerStateMachine
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage
from raftka.raft_meta.metadata.loader import MetadataLoader

log = logging.getLogger(__name__)

METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_PARTITION: Final = 0
# The Kafka versions the fetcher speaks (the controller's listener decodes them).
KAFKA_VERSIONS: Final = {ApiKey.FETCH: 12, ApiKey.FETCH_SNAPSHOT: 1}
FETCH_MAX_BYTES_DEFAULT: Final = 8 * 1024 * 1024  # as Kafka's Raft fetches
# Chunks of one snapshot read before giving up on it (a snapshot of SNAPSHOT_BYTES_MAX in chunks
# of at least 1 MiB needs 512); a controller that keeps answering short chunks is not followed.
SNAPSHOT_CHUNKS_MAX: Final = 4096
SNAPSHOT_BYTES_MAX: Final = 512 * 1024 * 1024  # state.py's limit on a snapshot it restores


MetadataUpdate = Callable[[MetadataDelta, MetadataImage], None]


class MetadataFetcher:
    """A broker's follower of the committed metadata log; see the module docstring."""

    def __init__(self, bootstrap: Sequence[str], state: ControllerStateMachine | None = None, *,
                 replica_id: int | None = None, on_metadata_update: MetadataUpdate | None = None,
                 on_update: Callable[[int], None] | None = None,
                 max_wait_ms: int = 500, max_bytes: int = FETCH_MAX_BYTES_DEFAULT, request_timeout_ms: int = 5000,
                 retry_backoff_ms: int = 100, ssl: "ssl_module.SSLContext | None" = None,
                 sasl: SaslClientSettings | None = None) -> None:
        assert bootstrap, "at least one controller address"
        assert request_timeout_ms > max_wait_ms
        assert max_bytes > 0
        self.bootstrap = list(bootstrap)
        self.state = state if state is not None else ControllerStateMachine(MetadataLoader())
        assert isinstance(self.state.metadata, MetadataLoader), "the fetcher replays into a MetadataLoader"
        self.loader: MetadataLoader = self.state.metadata
        self.replica_id = replica_id
        self.on_metadata_update = on_metadata_update
        self.on_update = on_update
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.ssl = ssl  # the controller listener is SSL / SASL_SSL
        self.sasl = sasl  # it is SASL_*: log in with these first
        self._next = 0
        self._closed = asyncio.Event()
        self._connection: Connection | None = None  # to the current controller, reused between fetches
        self.errors_seen = 0  # for tests and metrics
        self.snapshots_loaded = 0  # for tests and metrics
        self.updates_published = 0  # on_metadata_update calls, for tests and metrics
        self.caught_up = False  # reached the high watermark once: every batch is published since
        self._published = self.loader.image  # the image on_metadata_update last saw

    async def _request(self, address: str, api_key: int, body: dict) -> dict:
        """One Kafka request to ``address`` on the fetcher's connection (opened on first use,
        dropped on any failure); the answer's body."""
        connection = self._connection
        if connection is not None and (connection.closed or connection.address != address):
            await connection.close()
            connection = self._connection = None
        if connection is None:
            host, _, port = address.rpartition(":")
            connection = self._connection = await Connection.open(
                host, int(port), client_id="metadata-fetcher" if self.replica_id is None
                else f"metadata-fetcher-{self.replica_id}",
                connect_timeout_ms=self.request_timeout_ms, request_timeout_ms=self.request_timeout_ms,
                kafka_versions=KAFKA_VERSIONS, ssl=self.ssl, sasl=self.sasl)
        try:
            _, out = await connection.request(api_key, body, KAFKA_VERSIONS[api_key],
                                              timeout_ms=self.request_timeout_ms)
        except BaseException:
            self._connection = None
            await connection.close()
            raise
        return out

    async def fetch_once(self) -> int:
        """One fetch from the current controller; returns how many records were applied."""
        address = self.bootstrap[self._next % len(self.bootstrap)]
        out = await self._request(address, ApiKey.FETCH, fetch_request(
            self.state.offset + 1, replica_id=self.replica_id, max_wait_ms=self.max_wait_ms, max_bytes=self.max_bytes))
        partition = fetched_partition(out, address)
        snapshot_id = partition["snapshot_id"]
        snapshot = await self._read_snapshot(address, snapshot_id) if snapshot_id["end_offset"] >= 0 else None
        applied = 0
        before = self.loader.image
        if snapshot is not None:
            try:
                self.state.restore(snapshot)
            except (ValueError, TypeError) as error:
                raise errors.CorruptMessageError(f"undecodable metadata snapshot from {address}: {error}") from None
            self.snapshots_loaded += 1  # the next fetch goes on from the offset the snapshot restored
            applied += 1
        self.loader.begin_batch()
        try:
            for offset, entry in fetched_entries(partition):
                if offset <= self.state.offset:
                    continue  # already have it (an answer raced with a snapshot)
                self.state.apply(entry, offset)
                applied += 1
        finally:
            delta, image = self.loader.end_batch()
        if not applied:
            return 0
        if not self.caught_up:
            if self.state.offset + 1 < partition["high_watermark"]:
                self._notify_offset()
                return applied  # published once caught up (module docstring)
            self.caught_up = True
        if snapshot is not None or self._published is not before:  # a restore, or deferred batches
            delta = MetadataDelta.between(self._published, image)
        self._published = image
        self.updates_published += 1
        if self.on_metadata_update is not None:
            try:
                self.on_metadata_update(delta, image)
            except Exception:
                log.exception("on_metadata_update failed at offset %d", image.offset)
        self._notify_offset()
        return applied

    def _notify_offset(self) -> None:
        if self.on_update is not None:
            try:
                self.on_update(self.state.offset)
            except Exception:
                log.exception("on_update failed at offset %d", self.state.offset)

    async def _read_snapshot(self, address: str, snapshot_id: dict) -> bytes:
        """The whole snapshot ``snapshot_id`` from ``address``, with FetchSnapshot in chunks."""
        chunks: list[bytes] = []
        position = 0
        for _ in range(SNAPSHOT_CHUNKS_MAX):
            out = await self._request(address, ApiKey.FETCH_SNAPSHOT, {
                "replica_id": -1 if self.replica_id is None else self.replica_id, "max_bytes": self.max_bytes,
                "topics": [{"name": METADATA_TOPIC, "partitions": [{
                    "partition": METADATA_PARTITION, "current_leader_epoch": -1, "snapshot_id": snapshot_id,
                    "position": position}]}]})
            if out["error_code"] != errors.NONE:
                raise errors.error_for(out["error_code"], f"metadata FetchSnapshot from {address}")
            partition = _only_partition(out["topics"], "name", "partitions", address)
            if partition["error_code"] != errors.NONE:
                raise errors.error_for(partition["error_code"], f"metadata FetchSnapshot from {address}")
            chunk, size = bytes(partition["unaligned_records"] or b""), partition["size"]
            if partition["position"] != position or not chunk or not 0 < size <= SNAPSHOT_BYTES_MAX \
                    or position + len(chunk) > size:
                raise errors.CorruptMessageError(
                    f"FetchSnapshot from {address}: a chunk of {len(chunk)} bytes at position "
                    f"{partition['position']} of {size} does not continue the {position} bytes read")
            chunks.append(chunk)
            position += len(chunk)
            if position == size:
                return b"".join(chunks)
        raise errors.CorruptMessageError(f"FetchSnapshot from {address}: no end after {SNAPSHOT_CHUNKS_MAX} chunks")

    @property
    def image(self) -> MetadataImage:
        """The local metadata image (committed metadata records up to ``image.offset``)."""
        return self.loader.image

    @property
    def offset(self) -> int:
        """The last committed offset applied, of any record kind (what BrokerHeartbeat reports
        as ``current_metadata_offset``); >= ``image.offset``."""
        return self.state.offset

    async def run(self) -> None:
        while not self._closed.is_set():
            try:
                await self.fetch_once()
            except (RaftkaError, OSError) as error:
                self.errors_seen += 1
                log.debug("metadata fetch from %s failed: %s", self.bootstrap[self._next % len(self.bootstrap)], error)
                self._next += 1
                try:
                    await asyncio.wait_for(self._closed.wait(), self.retry_backoff_ms / 1000)
                except asyncio.TimeoutError:
                    pass

    async def close(self) -> None:
        self._closed.set()
        if self._connection is not None:
            await self._connection.close()
            self._connection = None


def _only_partition(topics: list, topic_field: str, partitions_field: str, address: str) -> dict[str, Any]:
    """The one partition of an answer about ``__cluster_metadata``-0 (CorruptMessageError else)."""
    if len(topics) != 1 or topics[0][topic_field] != METADATA_TOPIC or len(topics[0][partitions_field]) != 1:
        raise errors.CorruptMessageError(f"{address} answered about other partitions than "
                                         f"{METADATA_TOPIC}-{METADATA_PARTITION}")
    return topics[0][partitions_field][0]


def fetch_request(fetch_offset: int, *, replica_id: int | None = None, max_wait_ms: int = 0,
                  max_bytes: int = FETCH_MAX_BYTES_DEFAULT) -> dict[str, Any]:
    """Kafka's Fetch (v12) of ``__cluster_metadata``-0 from ``fetch_offset`` (the next offset
    wanted), sessionless; ``replica_id`` None: a tool, not listed as an observer."""
    return {"replica_id": -1 if replica_id is None else replica_id, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": METADATA_TOPIC, "partitions": [{
                "partition": METADATA_PARTITION, "current_leader_epoch": -1, "fetch_offset": fetch_offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": max_bytes}]}]}


def fetched_partition(answer: dict[str, Any], address: str) -> dict[str, Any]:
    """The ``__cluster_metadata``-0 partition of a Fetch answer; its error raised as a RaftkaError."""
    if answer["error_code"] != errors.NONE:
        raise errors.error_for(answer["error_code"], f"metadata Fetch from {address}")
    partition = _only_partition(answer["responses"], "topic", "partitions", address)
    if partition["error_code"] != errors.NONE:
        raise errors.error_for(partition["error_code"], f"metadata Fetch from {address}")
    return partition


def fetched_entries(partition: dict[str, Any]) -> list[tuple[int, bytes]]:
    """(offset, entry bytes) of a fetched partition's record batches (CRCs checked; see
    service.fetch_metadata for how entries travel)."""
    entries = []
    for record in iter_records(partition["records"] or b""):
        if record.value is None:
            raise errors.CorruptMessageError(f"a metadata record without a value at offset {record.offset}")
        entries.append((record.offset, record.value))
    return entries


async def fetch_entries(address: str, fetch_offset: int = 0, *, max_wait_ms: int = 0,
                        timeout_ms: int = 5000) -> tuple[dict[str, Any], list[tuple[int, bytes]]]:
    """One Fetch of the committed metadata log from the controller at ``address`` (tools, tests):
    (the partition's answer, its entries). A fetch behind the log start has no entries and a
    ``snapshot_id``; a MetadataFetcher goes on from there."""
    host, _, port = address.rpartition(":")
    connection = await Connection.open(host, int(port), client_id="raftka-tool", connect_timeout_ms=timeout_ms,
                                       request_timeout_ms=timeout_ms, kafka_versions=KAFKA_VERSIONS)
    try:
        _, answer = await connection.request(ApiKey.FETCH, fetch_request(fetch_offset, max_wait_ms=max_wait_ms),
                                             timeout_ms=timeout_ms)
    finally:
        await connection.close()
    partition = fetched_partition(answer, address)
    return partition, fetched_entries(partition)
