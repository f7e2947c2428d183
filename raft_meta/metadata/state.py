"""The metadata log as the Raft layer sees it: an envelope around the metadata records.

Every Raft record of the controller quorum is one byte of kind, then its payload:

    b"M" + metadata entry    typed metadata records (raft_meta/metadata/records.py
                             ``encode_entry`` bytes), replayed atomically into the metadata image
                             by the metadata state machine (``MetadataLoader``)
    b"C" + ControllerEndpointRecord
                             one framed record (record_schemas.py: Raftka api key 10000,
                             {node_id, host, port}): a controller announces its RPC endpoint
                             (so that a non-active controller can answer NOT_CONTROLLER with the
                             active one's endpoint, and `raftka quorum status` can show every
                             voter's endpoint)

Unknown kinds and undecodable payloads are skipped, deterministically on every node (apply never
raises: an exception would be swallowed on one node and not another). The Raft index of the
last applied record is the **metadata offset** (what BrokerHeartbeat reports as caught up).

Snapshots and the fetch window: the Raft layer snapshots after ``metadata.log.snapshot.min.records``
entries or ``metadata.log.max.snapshot.interval.ms``; this module adds Kafka's third bound, the
bytes of records applied since the last snapshot (``metadata.log.max.record.bytes.between.snapshots``:
one entry may hold thousands of records, so an entry count alone lets the log since the last
snapshot, and with it a restarted broker's catch-up, grow with the cluster's history). Past it,
``apply`` asks the Raft layer for a snapshot (``request_snapshot``). Each Raft snapshot also moves
the fetch window (``recent``) on to the records after the snapshot before it: a fetcher a few
entries behind still gets records, one from further back (a broker restarting from offset 0)
loads a snapshot of the current state.

Snapshot bytes: one framed ControllerSnapshotRecord (record_schemas.py: Raftka api key 10002)
{offset, controllers [{node_id, host, port}], metadata (the metadata state machine's own
snapshot bytes)}.

Threads: ``apply``/``snapshot``/``restore`` run on pysyncobj's tick thread (see raft.py).
Listeners registered with ``add_listener`` run there too and must hand work to their own loop.
"""
from __future__ import annotations

import bisect
import collections
import itertools
import logging
import threading
from typing import Any, Callable, Protocol

from raftka.raft_meta.metadata import record_schemas as schemas

log = logging.getLogger(__name__)

KIND_METADATA = b"M"
KIND_CONTROLLER = b"C"
SNAPSHOT_BYTES_MAX = 512 * 1024 * 1024
# Recent committed records kept in memory for metadata fetches; older offsets get a snapshot.
RECENT_RECORDS_MAX = 50_000


class MetadataMachine(Protocol):
    """The metadata state machine the envelope delegates to (raft_meta.metadata.loader.MetadataLoader;
    tests use simpler ones)."""

    def apply(self, record: bytes, index: int) -> Any: ...

    def snapshot(self) -> bytes: ...

    def restore(self, snapshot: bytes) -> None: ...


def controller_record(node_id: int, host: str, port: int) -> bytes:
    """The b"C" record of a controller's RPC endpoint; ValueError for a host or port the
    declaration cannot carry."""
    return KIND_CONTROLLER + schemas.encode_frame(schemas.CONTROLLER_ENDPOINT.api_key,
                                                  {"node_id": node_id, "host": host, "port": port})


def metadata_record(encoded: bytes) -> bytes:
    return KIND_METADATA + encoded


Listener = Callable[[int, "bytes | None", Any], None]  # (offset, record kind or None after a restore, apply result)


class ControllerStateMachine:
    """StateMachine (raft.py) for the controller quorum and its observers."""

    def __init__(self, metadata: MetadataMachine, *, recent_records_max: int = RECENT_RECORDS_MAX,
                 record_bytes_between_snapshots_max: int | None = None,
                 request_snapshot: Callable[[], None] | None = None) -> None:
        assert record_bytes_between_snapshots_max is None or record_bytes_between_snapshots_max > 0
        self.metadata = metadata
        self.controllers: dict[int, tuple[str, int]] = {}
        self.offset = 0  # Raft index of the last applied record
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()  # guards _listeners only
        # Held by the tick thread while applying or restoring, and by readers on other threads
        # (metadata fetch, snapshots for fetchers) so they never see half an apply.
        self.apply_lock = threading.RLock()
        # (offset, record) of the records applied after offset ``recent_from``, oldest first.
        # Raft indexes have gaps (pysyncobj's own no-op and membership entries never reach us).
        self.recent: collections.deque[tuple[int, bytes]] = collections.deque()
        self.recent_from = 0
        self.recent_records_max = recent_records_max
        # Bytes of records applied since the last snapshot (taken or restored); past the bound,
        # request_snapshot (RaftClient.request_snapshot, set by the controller) is called once
        # (or at the first record after it is set: the journal may replay before).
        # None (brokers' fetchers, tests): only the Raft layer's own bounds apply.
        self.record_bytes_between_snapshots_max = record_bytes_between_snapshots_max
        self.request_snapshot = request_snapshot
        self.record_bytes_since_snapshot = 0
        self._snapshot_asked = False  # since the last snapshot
        self.snapshot_offset = 0  # offset of the last snapshot taken or restored

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def apply(self, record: bytes, index: int) -> Any:
        with self.apply_lock:
            result = self._apply_locked(record, index)
            self.record_bytes_since_snapshot += len(record)
        bound = self.record_bytes_between_snapshots_max
        if (bound is not None and self.record_bytes_since_snapshot >= bound and not self._snapshot_asked
                and self.request_snapshot is not None):
            self._snapshot_asked = True
            log.info("asking for a metadata snapshot at offset %d: %d bytes of records since the one at offset %d "
                     "(metadata.log.max.record.bytes.between.snapshots=%d)", index, self.record_bytes_since_snapshot,
                     self.snapshot_offset, bound)
            self.request_snapshot()
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(index, record[:1], result)
            except Exception:
                log.exception("metadata listener failed at offset %d", index)
        return result

    def _apply_locked(self, record: bytes, index: int) -> Any:
        self.recent.append((index, record))
        while len(self.recent) > self.recent_records_max:
            self.recent_from = self.recent.popleft()[0]
        self.offset = index
        kind, payload = record[:1], record[1:]
        result: Any = None
        if kind == KIND_METADATA:
            result = self.metadata.apply(payload, index)
        elif kind == KIND_CONTROLLER:
            try:
                api_key, body = schemas.decode_frame(memoryview(payload))
                if api_key != schemas.CONTROLLER_ENDPOINT.api_key:
                    raise schemas.FrameError(f"{schemas.RECORDS[api_key].name} is not a controller endpoint")
                self.controllers[body["node_id"]] = (body["host"], body["port"])
            except schemas.FrameError as error:
                log.warning("skipping undecodable controller record at offset %d: %s", index, error)
        else:
            log.warning("skipping record of unknown kind %r at offset %d", kind, index)
        return result

    def records_since(self, offset: int, max_records: int) -> tuple[list[tuple[int, bytes]], bytes | None, int]:
        """Committed records after ``offset`` (exclusive), oldest first, at most ``max_records``.

        Returns (records, snapshot, snapshot_offset): when ``offset`` is older than the in-memory
        window, ``snapshot`` is the full state (``current_snapshot`` bytes) as of ``snapshot_offset``
        and ``records`` follow it; otherwise snapshot is None. Safe from any thread.
        """
        with self.apply_lock:
            if offset >= self.offset:
                return [], None, offset
            if offset >= self.recent_from:
                start = bisect.bisect_right(self.recent, offset, key=lambda item: item[0])
                out = list(itertools.islice(self.recent, start, start + max_records))
                return out, None, offset
            return [], self._snapshot_locked(), self.offset

    def snapshot(self) -> bytes:
        """The Raft layer's snapshot of the state as of ``offset`` (raft.py calls it when it
        compacts its journal). It starts a new interval: the bytes count restarts, and the fetch
        window drops the records up to the previous snapshot (module docstring). For a snapshot
        without these effects (a fetcher's), use ``current_snapshot``."""
        with self.apply_lock:
            data = self._snapshot_locked()
            previous, self.snapshot_offset = self.snapshot_offset, self.offset
            while self.recent and self.recent[0][0] <= previous:
                self.recent_from = self.recent.popleft()[0]
            self.record_bytes_since_snapshot = 0
            self._snapshot_asked = False
        return data

    def current_snapshot(self) -> tuple[bytes, int]:
        """(snapshot bytes, offset) of the state now, for a fetcher behind the window; unlike
        ``snapshot`` it changes nothing. Safe from any thread."""
        with self.apply_lock:
            return self._snapshot_locked(), self.offset

    def _snapshot_locked(self) -> bytes:
        return schemas.encode_frame(schemas.CONTROLLER_SNAPSHOT.api_key, {
            "offset": self.offset,
            "controllers": [{"node_id": node_id, "host": host, "port": port}
                            for node_id, (host, port) in sorted(self.controllers.items())],
            "metadata": self.metadata.snapshot(),
        })

    def restore(self, snapshot: bytes) -> None:
        """Replace the whole state with a snapshot's. ValueError (and no change) for bytes that
        are not a snapshot this module wrote."""
        if len(snapshot) > SNAPSHOT_BYTES_MAX:
            raise ValueError(f"controller snapshot of {len(snapshot)} bytes; at most {SNAPSHOT_BYTES_MAX}")
        try:
            api_key, data = schemas.decode_frame(memoryview(snapshot))
        except schemas.FrameError as error:
            raise ValueError(f"undecodable controller snapshot: {error}") from None
        if api_key != schemas.CONTROLLER_SNAPSHOT.api_key:
            raise ValueError(f"undecodable controller snapshot: it holds a {schemas.RECORDS[api_key].name}")
        controllers = {c["node_id"]: (c["host"], c["port"]) for c in data["controllers"]}
        offset, metadata = data["offset"], data["metadata"]
        with self.apply_lock:
            self.metadata.restore(metadata)  # first: it raises before anything changed
            self.controllers = controllers
            self.offset = offset
            self.recent.clear()
            self.recent_from = self.snapshot_offset = self.offset
            self.record_bytes_since_snapshot = 0
            self._snapshot_asked = False
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(self.offset, None, None)
            except Exception:
                log.exception("metadata listener failed after restore")
