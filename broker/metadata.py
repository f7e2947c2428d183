"""The broker's read-only view of committed metadata, and how it follows the metadata log.

The one module that knows raft_meta's ``MetadataImage``: the rest of the broker sees
:class:`MetadataView` (brokers, topics, partitions as small frozen records), published after each
batch of committed records the ``MetadataFetcher`` applies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from raftka.common.acl import AclIndex
from raftka.common.scram import ScramCredential, ScramMechanism
from raftka.raft_meta.metadata.fetcher import MetadataFetcher
from raftka.raft_meta.metadata.overlay_map import OverlayMap


@dataclass(frozen=True)
class BrokerInfo:
    """A registered broker as committed: id, epoch, endpoints, rack, fenced."""
    broker_id: int
    broker_epoch: int
    endpoints: dict[str, str]
    rack: str | None
    fenced: bool

    def endpoint(self, listener: str = "PLAINTEXT") -> tuple[str, int] | None:
        """(host, port) of the named listener, or None."""
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
    """A topic as committed: id, partitions, config overrides."""
    name: str
    topic_id: str
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, Any]


class MetadataView:
    """Committed metadata as of ``offset`` (immutable once built)."""

    def __init__(self, offset: int, brokers: dict[int, BrokerInfo], topics: Mapping[str, TopicInfo],
                 controllers: dict[int, tuple[str, int]], cluster_configs: dict[str, Any] | None = None,
                 scram_credentials: Mapping[str, Mapping[ScramMechanism, ScramCredential]] | None = None,
                 acls: AclIndex = AclIndex.EMPTY, broker_configs: dict[int, dict[str, Any]] | None = None) -> None:
        self.offset = offset
        self.brokers = brokers
        # Read-only. A topic unchanged since the previous view keeps its TopicInfo object; an
        # OverlayMap, so that the next view copies only the topics that changed.
        self.topics = topics
        self.controllers = controllers
        # Cluster-wide config overrides. The same object as the previous view's while unchanged (the
        # replica manager re-applies every topic when it is not): an empty one is kept, not replaced.
        self.cluster_configs = cluster_configs if cluster_configs is not None else {}
        # user -> {mechanism: credential}: the image's own read-only mapping (credentials are frozen).
        self.scram_credentials = scram_credentials if scram_credentials is not None else {}
        # The image's ACL index: the same object until an ACL changes (the authorizer keys on it).
        self.acls = acls
        # broker id -> that broker's own config overrides; the same object as the previous view's
        # while unchanged, as cluster_configs.
        self.broker_configs = broker_configs if broker_configs is not None else {}

    def dynamic_config(self, broker_id: int, key: str) -> Any:
        """A dynamic broker config (common/configs.py BROKER_DYNAMIC_CONFIGS) as broker
        ``broker_id`` sees it: its own override, else the cluster-wide one, else None (then
        server.properties decides)."""
        own = self.broker_configs.get(broker_id)
        if own is not None and key in own:
            return own[key]
        return self.cluster_configs.get(key)

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The user's committed SCRAM credential for ``mechanism``, or None."""
        return self.scram_credentials.get(user, {}).get(mechanism)

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        """The committed state of ``topic``-``index``, or None."""
        info = self.topics.get(topic)
        if info is None or not 0 <= index < len(info.partitions):
            return None
        return info.partitions[index]


EMPTY = MetadataView(-1, {}, OverlayMap(), {})


def _topic_info(name: str, t: Any) -> TopicInfo:
    parts = tuple(PartitionInfo(tuple(p.replicas), tuple(p.isr), p.leader, p.leader_epoch, p.partition_epoch)
                  for p in t.partitions)
    return TopicInfo(name, t.topic_id, parts, dict(t.configs))


def _view_of(image: Any, offset: int, controllers: dict, previous: MetadataView, delta: Any = None) -> MetadataView:
    """A MetadataView of raft_meta's MetadataImage. With the ``delta`` that led from the previous
    image, only the topics it changed are rebuilt; the others keep their TopicInfo objects (the
    replica manager skips them by identity), so an update costs what it changed, not the
    cluster's size."""
    brokers = {int(b): BrokerInfo(int(b), r.broker_epoch, dict(r.endpoints), r.rack, bool(r.fenced))
               for b, r in image.brokers.items()}
    if delta is None:
        built = {name: _topic_info(name, t) for name, t in image.topics.items()}
        for name, info in built.items():
            if previous.topics.get(name) == info:
                built[name] = previous.topics[name]
        topics: Mapping[str, TopicInfo] = OverlayMap(built)
    else:
        base = previous.topics if isinstance(previous.topics, OverlayMap) else OverlayMap(previous.topics)
        topics = base.updated({name: _topic_info(name, t) for name, t in delta.changed_topics.items()},
                              delta.deleted_topics)
    cluster_configs = dict(image.cluster_configs)
    if cluster_configs == previous.cluster_configs:
        cluster_configs = previous.cluster_configs
    broker_configs = {int(b): dict(c) for b, c in getattr(image, "broker_configs", {}).items()}
    if broker_configs == previous.broker_configs:
        broker_configs = previous.broker_configs
    return MetadataView(offset, brokers, topics, dict(controllers), cluster_configs, image.scram_credentials,
                        image.acls, broker_configs)


class MetadataFollower:
    """Follows the committed metadata log (raft_meta's MetadataFetcher) and publishes views."""

    def __init__(self, bootstrap: Sequence[str], broker_id: int,
                 on_update: Callable[[MetadataView], None], *, max_wait_ms: int = 500,
                 request_timeout_ms: int = 5000, ssl: Any = None, sasl: Any = None) -> None:
        self.view = EMPTY
        self._on_update = on_update
        self.fetcher = MetadataFetcher(list(bootstrap), replica_id=broker_id, on_metadata_update=self._updated,
                                       max_wait_ms=max_wait_ms, request_timeout_ms=request_timeout_ms,
                                       ssl=ssl, sasl=sasl)  # the controller listener's TLS and login

    @property
    def offset(self) -> int:
        """The metadata offset applied (what heartbeats report)."""
        return self.fetcher.state.offset

    def _updated(self, delta: Any, image: Any) -> None:
        self.view = _view_of(image, self.fetcher.state.offset, self.fetcher.state.controllers, self.view, delta)
        self._on_update(self.view)

    async def run(self) -> None:
        """Follow the log until closed."""
        await self.fetcher.run()

    async def close(self) -> None:
        """Stop following."""
        await self.fetcher.close()
