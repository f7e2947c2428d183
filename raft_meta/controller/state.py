"""The metadata log as the Raft layer sees it: an envelope around the metadata records.

Every Raft record of the controller quorum is one byte of kind, then its payload:

    b"M" + metadata record   a metadata record (raft_meta's encode_record bytes), replayed into
                             the metadata image by the metadata state machine
    b"C" + msgpack [node_id, host, port]
                             a controller announces its RPC endpoint (so that a non-active
                             controller can answer NOT_CONTROLLER with the active one's endpoint,
                             and `raftka quorum status` can show every voter's endpoint)

Unknown kinds and undecodable payloads are skipped, deterministically on every node (apply never
raises: an exception would be swallowed on one node and not another). The Raft index of the
last applied record is the **metadata offset** (what BrokerHeartbeat reports as caught up).

Snapshot bytes: msgpack map {"v": 1, "controllers": {id: [host, port]}, "offset": int,
"metadata": bytes (the metadata state machine's own snapshot)}.

Threads: ``apply``/``snapshot``/``restore`` run on pysyncobj's tick thread (see raft.py).
Listeners registered with ``add_listener`` run there too and must hand work to their own loop.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Protocol

import msgpack

log = logging.getLogger(__name__)

KIND_METADATA = b"M"
KIND_CONTROLLER = b"C"
SNAPSHOT_VERSION = 1
SNAPSHOT_BYTES_MAX = 512 * 1024 * 1024


class MetadataMachine(Protocol):
    """The metadata state machine the envelope delegates to (raft_meta's image + delta replay)."""

    def apply(self, record: bytes, index: int) -> Any: ...

    def snapshot(self) -> bytes: ...

    def restore(self, snapshot: bytes) -> None: ...


def controller_record(node_id: int, host: str, port: int) -> bytes:
    return KIND_CONTROLLER + msgpack.packb([node_id, host, port], use_bin_type=True)


def metadata_record(encoded: bytes) -> bytes:
    return KIND_METADATA + encoded


Listener = Callable[[int, "bytes | None", Any], None]  # (offset, record kind or None after a restore, apply result)


class ControllerStateMachine:
    """StateMachine (raft.py) for the controller quorum and its observers."""

    def __init__(self, metadata: MetadataMachine) -> None:
        self.metadata = metadata
        self.controllers: dict[int, tuple[str, int]] = {}
        self.offset = 0  # Raft index of the last applied record
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()  # guards _listeners only

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def apply(self, record: bytes, index: int) -> Any:
        self.offset = index
        kind, payload = record[:1], record[1:]
        result: Any = None
        if kind == KIND_METADATA:
            result = self.metadata.apply(payload, index)
        elif kind == KIND_CONTROLLER:
            try:
                node_id, host, port = msgpack.unpackb(payload, raw=False)
                self.controllers[int(node_id)] = (str(host), int(port))
            except Exception:
                log.warning("skipping undecodable controller record at offset %d", index)
        else:
            log.warning("skipping record of unknown kind %r at offset %d", kind, index)
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(index, kind, result)
            except Exception:
                log.exception("metadata listener failed at offset %d", index)
        return result

    def snapshot(self) -> bytes:
        return msgpack.packb({
            "v": SNAPSHOT_VERSION,
            "controllers": {node_id: list(ep) for node_id, ep in self.controllers.items()},
            "offset": self.offset,
            "metadata": self.metadata.snapshot(),
        }, use_bin_type=True)

    def restore(self, snapshot: bytes) -> None:
        data = msgpack.unpackb(snapshot, raw=False, strict_map_key=False,
                               max_bin_len=SNAPSHOT_BYTES_MAX)
        assert data.get("v") == SNAPSHOT_VERSION, f"unknown snapshot version {data.get('v')}"
        self.controllers = {int(k): (str(v[0]), int(v[1])) for k, v in data["controllers"].items()}
        self.offset = int(data["offset"])
        self.metadata.restore(data["metadata"])
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(self.offset, None, None)
            except Exception:
                log.exception("metadata listener failed after restore")
