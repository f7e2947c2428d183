"""The metadata image: an immutable picture of the cluster as of one metadata-log offset.

Kafka's ``MetadataImage``. Every voter, observer and broker holds one and replaces it (never
mutates it) when records are replayed: ``MetadataDelta(image).replay(record, offset)`` ...
``.apply()`` gives the next image, reusing every broker, topic and partition that did not change
(so ``new.topics[name] is old.topics[name]`` for an untouched topic, and readers on other threads
may hold an image for as long as they like).

All classes are frozen dataclasses; their sequences are tuples and their mappings read-only:
``types.MappingProxyType``, except an image's ``topics`` and ``topic_names_by_id``, which are
``OverlayMap``s (overlay_map.py) so that the next image copies only the topics that changed.
Field meanings are Kafka's:

    BrokerRegistration     broker_id, incarnation_id (changes on every broker start),
                           broker_epoch (= offset of the registration record), endpoints
                           {listener name: "host:port"}, rack (None: no rack), fenced
    PartitionRegistration  replicas (the first is the preferred leader), isr, leader (-1: none,
                           the partition is offline), leader_epoch (bumped on every leader
                           change), partition_epoch (bumped on every change)
    TopicImage             name, topic_id (32 hex chars, new for every creation of the name),
                           partitions (index = partition number), configs (topic overrides only)
    MetadataImage          offset (last metadata record replayed), brokers, topics,
                           cluster_configs (cluster-wide overrides), next_producer_id,
                           scram_credentials {user: {ScramMechanism: ScramCredential}}
                           (common/scram.py: salt, StoredKey, ServerKey, iterations; a
                           credential's repr shows neither salt nor keys),
                           acls (common/acl.py AclIndex: the ACL bindings by id, indexed by
                           resource for the authorizer; shared by images until ACLs change),
                           broker_configs {broker id: its own config overrides} (per-broker
                           dynamic configs; above cluster_configs for that broker)

Snapshots: ``image_to_bytes`` / ``image_from_bytes``: the image as the metadata records that
rebuild it (Kafka's RegisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord,
ProducerIdsRecord, UserScramCredentialRecords, AccessControlEntryRecords after a Raftka header
carrying the offset;
record_schemas.py); a restored image equals the original (``==``).
Images, brokers and topics compare with ``==`` but are not hashable (their mappings are not);
``PartitionRegistration`` is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Iterator, Mapping

from raftka.common import acl, errors
from raftka.common.acl import AclBinding, AclIndex
from raftka.common.scram import MECHANISMS_BY_NUMBER, ScramCredential, ScramMechanism
from raftka.raft_meta.metadata import record_schemas as schemas
from raftka.raft_meta.metadata.overlay_map import OverlayMap
from raftka.raft_meta.metadata.records import broker_resource_id

NO_LEADER = -1
SNAPSHOT_BYTES_MAX = 512 * 1024 * 1024
# Records one snapshot may hold: brokers, topics, their partitions and configs (a snapshot is
# bounded by its bytes first; every record takes at least 4).
SNAPSHOT_RECORDS_MAX = SNAPSHOT_BYTES_MAX // 4


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
    # listener -> Kafka's protocol id, as registered, where the listener's name does not say it
    security_protocols: Mapping[str, int] = field(default_factory=lambda: _EMPTY_MAP)

    def security_protocol(self, listener: str) -> int:
        """Kafka's security protocol id of ``listener`` (0 PLAINTEXT .. 3 SASL_SSL)."""
        return self.security_protocols.get(listener, schemas.SECURITY_PROTOCOLS.get(listener, 0))

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
    # A reassignment under way (KIP-455): replicas being added (catching up) and removed (once
    # every adding one is in the ISR); both empty otherwise.
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replica list a reassignment ends with (the replicas when none is under way)."""
        return tuple(b for b in self.replicas if b not in self.removing_replicas)

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
    # user -> {mechanism: credential}; users without a credential are not keys.
    scram_credentials: Mapping[str, Mapping[ScramMechanism, ScramCredential]] = field(
        default_factory=lambda: _EMPTY_MAP)
    acls: AclIndex = field(default_factory=lambda: AclIndex.EMPTY)
    # broker id -> that broker's own config overrides (brokers without any are not keys).
    broker_configs: Mapping[int, Mapping[str, Any]] = field(default_factory=lambda: _EMPTY_MAP)
    # topic id -> name; derived from ``topics`` (built when not given), not part of equality.
    topic_names_by_id: Mapping[str, str] = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    EMPTY: ClassVar["MetadataImage"]

    def __post_init__(self) -> None:
        if self.topic_names_by_id is None:
            object.__setattr__(self, "topic_names_by_id",
                               OverlayMap({t.topic_id: name for name, t in self.topics.items()}))

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

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The user's SCRAM credential for ``mechanism``, or None (what a SASL/SCRAM server looks up)."""
        return self.scram_credentials.get(user, _EMPTY_MAP).get(mechanism)

    def scram_credential_infos(self) -> dict[str, list[tuple[ScramMechanism, int]]]:
        """{user: [(mechanism, iterations)]} of every user with a credential, users and
        mechanisms in order (what DescribeUserScramCredentials shows: never a salt or a key)."""
        return {user: [(m, c.iterations) for m, c in sorted(creds.items(), key=lambda item: item[0].number)]
                for user, creds in sorted(self.scram_credentials.items())}

    def partitions(self) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Every (topic, index, partition), topics in name order."""
        for name in sorted(self.topics):
            topic = self.topics[name]
            for index, partition in enumerate(topic.partitions):
                yield topic, index, partition


MetadataImage.EMPTY = MetadataImage(offset=0, brokers=_EMPTY_MAP, topics=OverlayMap(),
                                    cluster_configs=_EMPTY_MAP, next_producer_id=0)
EMPTY_IMAGE = MetadataImage.EMPTY


# -- snapshots ---------------------------------------------------------------------------------

def image_to_bytes(image: MetadataImage) -> bytes:
    """The image as the records that rebuild it (a KRaft snapshot): a record sequence
    (record_schemas.py) of a MetadataSnapshotHeaderRecord (the offset), then per broker a
    RegisterBrokerRecord (with its epoch and fenced state), per topic a TopicRecord, its
    PartitionRecords in partition order and a ConfigRecord of its overrides (when it has any),
    then a ConfigRecord of the cluster's overrides (when any), one of each broker's own overrides
    (BROKER resource named by the broker id, by id), a ProducerIdsRecord (the next
    producer id), a UserScramCredentialRecord per user and mechanism and an
    AccessControlEntryRecord per ACL. Deterministic: brokers by id, topics and users by name,
    mechanisms by number, ACLs by id."""
    try:
        return schemas.encode_records(_snapshot_records(image))
    except schemas.FrameError as error:  # an image no replay could have built (a bug)
        raise ValueError(f"metadata image offset {image.offset} cannot be snapshotted: {error}") from None


def _snapshot_records(image: MetadataImage) -> Iterator[tuple[int, dict]]:
    yield schemas.METADATA_SNAPSHOT_HEADER.api_key, {"offset": image.offset}
    for _, b in sorted(image.brokers.items()):
        yield schemas.REGISTER_BROKER.api_key, {
            "broker_id": b.broker_id, "incarnation_id": b.incarnation_id, "broker_epoch": b.broker_epoch,
            "end_points": _end_points(b), "rack": b.rack, "fenced": b.fenced}
    partition_key = schemas.PARTITION.api_key
    for _, t in sorted(image.topics.items()):
        yield schemas.TOPIC.api_key, {"name": t.name, "topic_id": t.topic_id}
        for index, p in enumerate(t.partitions):
            yield partition_key, {
                "partition_id": index, "topic_id": t.topic_id, "replicas": p.replicas, "isr": p.isr,
                "leader": p.leader, "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                "removing_replicas": p.removing_replicas or None, "adding_replicas": p.adding_replicas or None}
        if t.configs:
            yield schemas.CONFIG.api_key, {"resource_type": schemas.RESOURCE_TYPE_TOPIC, "resource_name": t.name,
                                           "configs": schemas.config_entries(t.configs)}
    if image.cluster_configs:
        yield schemas.CONFIG.api_key, {"resource_type": schemas.RESOURCE_TYPE_BROKER, "resource_name": "",
                                       "configs": schemas.config_entries(image.cluster_configs)}
    for broker_id, configs in sorted(image.broker_configs.items()):
        yield schemas.CONFIG.api_key, {"resource_type": schemas.RESOURCE_TYPE_BROKER, "resource_name": str(broker_id),
                                       "configs": schemas.config_entries(configs)}
    yield schemas.PRODUCER_IDS.api_key, {"broker_id": -1, "next_producer_id": image.next_producer_id}
    for user, credentials in sorted(image.scram_credentials.items()):
        for mechanism, c in sorted(credentials.items(), key=lambda item: item[0].number):
            yield schemas.USER_SCRAM_CREDENTIAL.api_key, {
                "name": user, "mechanism": mechanism.number, "salt": c.salt, "stored_key": c.stored_key,
                "server_key": c.server_key, "iterations": c.iterations}
    for acl_id, b in sorted(image.acls.bindings.items()):
        yield schemas.ACCESS_CONTROL_ENTRY.api_key, {
            "id": acl_id, "resource_type": int(b.resource_type), "resource_name": b.resource_name,
            "pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
            "operation": int(b.operation), "permission_type": int(b.permission)}


def _end_points(broker: BrokerRegistration) -> list[dict]:
    out = []
    for name, address in broker.endpoints.items():
        host, _, port = address.rpartition(":")
        out.append({"name": name, "host": host, "port": int(port),
                    "security_protocol": broker.security_protocol(name)})
    return out


def image_from_bytes(data: bytes) -> MetadataImage:
    """Replays a snapshot's records (``image_to_bytes``) into a fresh image; ValueError naming
    the fault for bytes it did not write."""
    if len(data) > SNAPSHOT_BYTES_MAX:
        raise ValueError(f"metadata snapshot of {len(data)} bytes; at most {SNAPSHOT_BYTES_MAX}")
    try:
        return _replay_snapshot(schemas.iter_sequence(data, SNAPSHOT_RECORDS_MAX))
    except schemas.FrameError as error:
        raise ValueError(f"undecodable metadata snapshot: {error}") from None


def _replay_snapshot(records: Iterator[tuple[int, dict]]) -> MetadataImage:
    first = next(records, None)
    if first is None or first[0] != schemas.METADATA_SNAPSHOT_HEADER.api_key:
        raise schemas.FrameError("a metadata snapshot begins with a MetadataSnapshotHeaderRecord")
    offset = first[1]["offset"]
    brokers: dict[int, BrokerRegistration] = {}
    topics: dict[str, tuple[str, list[PartitionRegistration], Mapping]] = {}  # by topic id
    topic_ids: dict[str, str] = {}  # by name
    cluster_configs: Mapping = _EMPTY_MAP
    broker_configs: dict[int, Mapping] = {}
    next_producer_id = 0
    scram: dict[str, dict[ScramMechanism, ScramCredential]] = {}
    acls: dict[str, AclBinding] = {}
    for api_key, body in records:
        if api_key == schemas.PARTITION.api_key:
            topic = topics.get(body["topic_id"])
            if topic is None or body["partition_id"] != len(topic[1]):
                raise schemas.FrameError(f"PartitionRecord {body['partition_id']} of topic id {body['topic_id']} "
                                         "does not follow its topic's previous partition")
            topic[1].append(PartitionRegistration(tuple(body["replicas"]), tuple(body["isr"]), body["leader"],
                                                  body["leader_epoch"], body["partition_epoch"],
                                                  tuple(body["removing_replicas"] or ()),
                                                  tuple(body["adding_replicas"] or ())))
        elif api_key == schemas.REGISTER_BROKER.api_key:
            broker_id = body["broker_id"]
            brokers[broker_id] = BrokerRegistration(
                broker_id, body["incarnation_id"], body["broker_epoch"],
                frozen_map({e["name"]: f"{e['host']}:{e['port']}" for e in body["end_points"]}),
                body["rack"], body["fenced"],
                frozen_map({e["name"]: e["security_protocol"] for e in body["end_points"]
                            if e["security_protocol"] != schemas.SECURITY_PROTOCOLS.get(e["name"], 0)}))
        elif api_key == schemas.TOPIC.api_key:
            topics[body["topic_id"]] = (body["name"], [], _EMPTY_MAP)
            topic_ids[body["name"]] = body["topic_id"]
        elif api_key == schemas.CONFIG.api_key:
            configs = frozen_map(schemas.config_values(body["configs"]))
            if body["resource_type"] == schemas.RESOURCE_TYPE_BROKER and body["resource_name"] == "":
                cluster_configs = configs
            elif body["resource_type"] == schemas.RESOURCE_TYPE_BROKER:
                broker_id = broker_resource_id(body["resource_name"])
                if broker_id is None:
                    raise schemas.FrameError(f"ConfigRecord of a broker named {body['resource_name']!r:.40}: "
                                             "not a broker id")
                if configs:
                    broker_configs[broker_id] = configs
            else:
                topic_id = topic_ids.get(body["resource_name"])
                if body["resource_type"] != schemas.RESOURCE_TYPE_TOPIC or topic_id is None:
                    raise schemas.FrameError(f"ConfigRecord of resource type {body['resource_type']} "
                                             f"{body['resource_name']!r} names no topic of the snapshot")
                name, partitions, _ = topics[topic_id]
                topics[topic_id] = (name, partitions, configs)
        elif api_key == schemas.PRODUCER_IDS.api_key:
            next_producer_id = body["next_producer_id"]
        elif api_key == schemas.USER_SCRAM_CREDENTIAL.api_key:
            mechanism = MECHANISMS_BY_NUMBER.get(body["mechanism"])
            if mechanism is None:
                raise schemas.FrameError(f"UserScramCredentialRecord of {body['name']!r:.80}: unknown SCRAM "
                                         f"mechanism number {body['mechanism']}")
            scram.setdefault(body["name"], {})[mechanism] = ScramCredential(
                mechanism, body["salt"], body["stored_key"], body["server_key"], body["iterations"])
        elif api_key == schemas.ACCESS_CONTROL_ENTRY.api_key:
            try:
                acls[body["id"]] = acl.binding(body["resource_type"], body["resource_name"], body["pattern_type"],
                                               body["principal"], body["host"], body["operation"],
                                               body["permission_type"])
            except errors.InvalidRequestError as error:
                raise schemas.FrameError(f"AccessControlEntryRecord {body['id']}: {error.message}") from None
        else:
            raise schemas.FrameError(f"{schemas.RECORDS[api_key].name} does not belong in a metadata snapshot")
    images = {name: TopicImage(name, topic_id, tuple(partitions), configs)
              for topic_id, (name, partitions, configs) in topics.items()}
    return MetadataImage(offset=offset, brokers=MappingProxyType(brokers), topics=OverlayMap(images),
                         cluster_configs=cluster_configs, next_producer_id=next_producer_id,
                         scram_credentials=MappingProxyType({u: MappingProxyType(c) for u, c in scram.items()}),
                         acls=AclIndex(acls) if acls else AclIndex.EMPTY,
                         broker_configs=MappingProxyType(broker_configs) if broker_configs else _EMPTY_MAP)
