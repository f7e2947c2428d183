"""The metadata image: an immutable picture of the cluster as of one metadata-log offset.

Kafka's ``MetadataImage``. Every voter, observer and broker holds one and replaces it (never
mutates it) when records are replayed: ``MetadataDelta(image).replay(record, offset)`` ...
``.apply()`` gives the next image, reusing every broker, topic and partition that did not change
(so ``new.topics[name] is old.topics[name]`` for an untouched topic, and readers on other threads
may hold an image for as long as they like).

All classes are frozen dataclasses; their mappings are read-only (``types.MappingProxyType``)
and their sequences are tuples. Field meanings are Kafka's:

    BrokerRegistration     broker_id, incarnation_id (changes on every broker start),
                           broker_epoch (= offset of the registration record), endpoints
                           {listener name: "host:port"}, rack (None: no rack), fenced
    PartitionRegistration  replicas (the first is the preferred leader), isr, leader (-1: none,
                           the partition is offline), leader_epoch (bumped on every leader
                           change), partition_epoch (bumped on every change)
    TopicImage             name, topic_id (32 hex chars, new for every creation of the name),
                           partitions (index = partition number), configs (topic overrides only)
    MetadataImage          offset (last metadata record replayed), brokers, topics,
                           cluster_configs (cluster-wide overrides), next_producer_id

Snapshots: ``image_to_bytes`` / ``image_from_bytes`` (msgpack); a restored image equals the
original (``==``).
Images, brokers and topics compare with ``==`` but are not hashable (their mappings are not);
``PartitionRegistration`` is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Iterator, Mapping

import msgpack

NO_LEADER = -1
SNAPSHOT_VERSION = 1
SNAPSHOT_BYTES_MAX = 512 * 1024 * 1024


def frozen_map(values: Mapping | None = None) -> Mapping:
    """A read-only view of a private copy of ``values`` (list values become tuples)."""
    return MappingProxyType({k: tuple(v) if isinstance(v, list) else v for k, v in (values or {}).items()})


_EMPTY_MAP: Mapping = MappingProxyType({})


@dataclass(frozen=True)
class BrokerRegistration:
    """A registered broker (Kafka's BrokerRegistration)."""

    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: Mapping[str, str]
    rack: str | None
    fenced: bool

    def endpoint(self, listener: str | None = None) -> str | None:
        """The "host:port" of ``listener`` (or of the first listener when None)."""
        if listener is None:
            return next(iter(self.endpoints.values()), None)
        return self.endpoints.get(listener)


@dataclass(frozen=True)
class PartitionRegistration:
    """One partition's replicas, ISR, leader and epochs (Kafka's PartitionRegistration)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def is_offline(self) -> bool:
        return self.leader == NO_LEADER


@dataclass(frozen=True)
class TopicImage:
    """A topic: its id, its partitions (index = partition number) and its config overrides."""

    name: str
    topic_id: str
    partitions: tuple[PartitionRegistration, ...]
    configs: Mapping[str, Any]

    def partition(self, index: int) -> PartitionRegistration | None:
        return self.partitions[index] if 0 <= index < len(self.partitions) else None


@dataclass(frozen=True)
class MetadataImage:
    """The whole cluster metadata as of ``offset``. Immutable; see the module docstring."""

    offset: int
    brokers: Mapping[int, BrokerRegistration]
    topics: Mapping[str, TopicImage]
    cluster_configs: Mapping[str, Any]
    next_producer_id: int
    # topic id -> name; derived from ``topics`` (built when not given), not part of equality.
    topic_names_by_id: Mapping[str, str] = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    EMPTY: ClassVar["MetadataImage"]

    def __post_init__(self) -> None:
        if self.topic_names_by_id is None:
            object.__setattr__(self, "topic_names_by_id",
                               MappingProxyType({t.topic_id: name for name, t in self.topics.items()}))

    def partition(self, topic: str, index: int) -> PartitionRegistration | None:
        """The partition ``index`` of topic ``topic``, or None when either is unknown."""
        image = self.topics.get(topic)
        return image.partition(index) if image is not None else None

    def topic_by_id(self, topic_id: str) -> TopicImage | None:
        name = self.topic_names_by_id.get(topic_id)
        return self.topics.get(name) if name is not None else None

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def live_broker_ids(self) -> list[int]:
        """Ids of the registered, unfenced brokers, ascending."""
        return sorted(b for b, reg in self.brokers.items() if not reg.fenced)

    def is_live(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is not None and not reg.fenced

    def partitions(self) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Every (topic, index, partition), topics in name order."""
        for name in sorted(self.topics):
            topic = self.topics[name]
            for index, partition in enumerate(topic.partitions):
                yield topic, index, partition


MetadataImage.EMPTY = MetadataImage(offset=0, brokers=_EMPTY_MAP, topics=_EMPTY_MAP,
                                    cluster_configs=_EMPTY_MAP, next_producer_id=0)
EMPTY_IMAGE = MetadataImage.EMPTY


# -- snapshots ---------------------------------------------------------------------------------

def image_to_bytes(image: MetadataImage) -> bytes:
    """The image as msgpack (the metadata part of a Raft snapshot). Deterministic order."""
    return msgpack.packb({
        "v": SNAPSHOT_VERSION,
        "offset": image.offset,
        "brokers": [[b.broker_id, b.incarnation_id, b.broker_epoch, dict(b.endpoints), b.rack, b.fenced]
                    for _, b in sorted(image.brokers.items())],
        "topics": [[t.name, t.topic_id, {k: list(v) if isinstance(v, tuple) else v for k, v in t.configs.items()},
                    [[list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch]
                     for p in t.partitions]]
                   for _, t in sorted(image.topics.items())],
        "cluster_configs": {k: list(v) if isinstance(v, tuple) else v for k, v in image.cluster_configs.items()},
        "next_producer_id": image.next_producer_id,
    }, use_bin_type=True)


def image_from_bytes(data: bytes) -> MetadataImage:
    """Inverse of ``image_to_bytes``; raises ValueError for bytes it did not write."""
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False, max_bin_len=SNAPSHOT_BYTES_MAX)
        if raw.get("v") != SNAPSHOT_VERSION:
            raise ValueError(f"unknown metadata snapshot version {raw.get('v')!r}")
        brokers = {
            int(b[0]): BrokerRegistration(int(b[0]), str(b[1]), int(b[2]), frozen_map(b[3]), b[4], bool(b[5]))
            for b in raw["brokers"]}
        topics = {
            str(t[0]): TopicImage(str(t[0]), str(t[1]), tuple(
                PartitionRegistration(tuple(p[0]), tuple(p[1]), int(p[2]), int(p[3]), int(p[4])) for p in t[3]),
                frozen_map(t[2]))
            for t in raw["topics"]}
        return MetadataImage(offset=int(raw["offset"]), brokers=MappingProxyType(brokers),
                             topics=MappingProxyType(topics), cluster_configs=frozen_map(raw["cluster_configs"]),
                             next_producer_id=int(raw["next_producer_id"]))
    except ValueError:
        raise
    except Exception as error:  # msgpack errors, missing keys, wrong shapes
        raise ValueError(f"undecodable metadata snapshot: {error!r}") from None
