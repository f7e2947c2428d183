"""The broker's read-only view of committed metadata, and how it follows the metadata log.

The one module that knows how metadata is represented: it reads the interim dict image of
``raft_meta/controller/metadata_adapter.py`` or raft_meta's typed ``MetadataImage``, whichever the
controllers replay (``build_metadata_machine``). The rest of the broker sees :class:`MetadataView` (brokers, topics, partitions
as small frozen records) and is called back with a new view after each applied batch.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from client.protocol import errors
from client.protocol.errors import RaftkaError
from raft_meta.controller.rpc import call
from raft_meta.controller.state import ControllerStateMachine

log = logging.getLogger(__name__)
API_FETCH = 1


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    broker_epoch: int
    endpoints: dict[str, str]
    rack: str | None
    fenced: bool

    def endpoint(self, listener: str = "PLAINTEXT") -> tuple[str, int] | None:
        address = self.endpoints.get(listener)
        if not address:
            return None
        host, _, port = address.rpartition(":")
        return host, int(port)


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as committed: Kafka's PartitionRegistration fields."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, Any]


class MetadataView:
    """Committed metadata as of ``offset`` (immutable once built)."""

    def __init__(self, offset: int, brokers: dict[int, BrokerInfo], topics: dict[str, TopicInfo],
                 controllers: dict[int, tuple[str, int]]) -> None:
        self.offset = offset
        self.brokers = brokers
        self.topics = topics
        self.controllers = controllers

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        if info is None or not 0 <= index < len(info.partitions):
            return None
        return info.partitions[index]


EMPTY = MetadataView(-1, {}, {}, {})


def _view_of(state: ControllerStateMachine, previous: MetadataView) -> MetadataView:
    image = state.metadata.image
    if isinstance(image, dict):  # the interim dict image (metadata_adapter.py)
        brokers = {int(b): BrokerInfo(int(b), info["broker_epoch"], dict(info["endpoints"]), info.get("rack"),
                                      bool(info["fenced"])) for b, info in image["brokers"].items()}
        raw_topics = [(name, t["topic_id"], [(p["replicas"], p["isr"], p["leader"], p["leader_epoch"],
                                              p["partition_epoch"]) for p in t["partitions"]], t["configs"])
                      for name, t in image["topics"].items()]
    else:  # raft_meta.metadata.image.MetadataImage
        brokers = {int(b): BrokerInfo(int(b), r.broker_epoch, dict(r.endpoints), r.rack, bool(r.fenced))
                   for b, r in image.brokers.items()}
        raw_topics = [(name, t.topic_id, [(p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch)
                                          for p in t.partitions], t.configs)
                      for name, t in image.topics.items()]
    topics = {}
    for name, topic_id, partitions, configs in raw_topics:
        old = previous.topics.get(name)
        parts = tuple(PartitionInfo(tuple(r), tuple(i), l, le, pe) for r, i, l, le, pe in partitions)
        if old is not None and old.topic_id == topic_id and old.partitions == parts and old.configs == dict(configs):
            topics[name] = old  # unchanged: keep the old record
        else:
            topics[name] = TopicInfo(name, topic_id, parts, dict(configs))
    return MetadataView(state.offset, brokers, topics, dict(state.controllers))


class MetadataFollower:
    """Follows the committed metadata log from the controllers and publishes views.

    Replays into the same metadata state machine the controllers use
    (``raft_meta.controller.server.build_metadata_machine``), so it reads whatever records they
    write. One long-polling Fetch at a time; on an error it moves to the next controller.
    """

    def __init__(self, bootstrap: Sequence[str], broker_id: int,
                 on_update: Callable[[MetadataView], None], *, config: Any = None, max_wait_ms: int = 500,
                 max_records: int = 5000, request_timeout_ms: int = 5000, retry_backoff_ms: int = 100) -> None:
        from raft_meta.controller.server import build_metadata_machine
        self.state = ControllerStateMachine(build_metadata_machine(config))
        self.view = EMPTY
        self.bootstrap = list(bootstrap)
        self.broker_id = broker_id
        self._on_update = on_update
        self.max_wait_ms = max_wait_ms
        self.max_records = max_records
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._next = 0
        self._closed = asyncio.Event()
        self.errors_seen = 0

    @property
    def offset(self) -> int:
        return self.state.offset

    async def fetch_once(self) -> int:
        address = self.bootstrap[self._next % len(self.bootstrap)]
        body = {"topic": "__cluster_metadata", "fetch_offset": self.state.offset, "max_records": self.max_records,
                "max_wait_ms": self.max_wait_ms, "replica_id": self.broker_id}
        code, out = await call(address, API_FETCH, body, timeout_ms=self.request_timeout_ms,
                               client_id=f"broker-{self.broker_id}-metadata")
        if code != errors.NONE:
            raise errors.error_for(code, (out or {}).get("error_message"))
        applied = 0
        if out.get("snapshot") is not None:
            self.state.restore(out["snapshot"])
            applied += 1
        for offset, record in out["records"]:
            if offset > self.state.offset:
                self.state.apply(record, offset)
                applied += 1
        if applied:
            self.view = _view_of(self.state, self.view)
            self._on_update(self.view)
        return applied

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
