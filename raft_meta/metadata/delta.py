"""MetadataDelta: the changes made by replaying records on top of an image (Kafka's MetadataDelta).

    delta = MetadataDelta(image)
    result = delta.replay(record, offset)   # {"error": code, "message": ...} when refused
    new_image = delta.apply()                # unchanged brokers and topics are reused

``replay`` switches on the record type (records.py) and never raises: a record that does not
apply (stale epoch, unknown topic, unknown type, bad field) returns an error result and leaves
the delta exactly as it was. ``savepoint()`` / ``rollback(savepoint)`` undo several replays, so a
log entry of several records applies atomically. Replay reads no clock and no randomness: the
same records on the same image give the same next image on every voter, observer and broker.

What changed, for brokers reacting to it (``on_metadata_update(delta, image)``):
``changed_topics`` (created or changed, new value), ``deleted_topics`` (as they were in the base
image; a topic deleted and re-created under the same name appears in both, with different topic
ids), ``changed_brokers``, ``unregistered_brokers``, ``changed_scram_users``, ``acls_changed``,
``cluster_configs_changed``, ``changed_broker_configs`` and ``local_changes(broker_id)``.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from raftka.common import acl, errors, scram
from raftka.common.acl import AclBinding
from raftka.raft_meta.metadata.image import (
    NO_LEADER, BrokerRegistration, MetadataImage, PartitionRegistration, TopicImage, frozen_map,
)
from raftka.raft_meta.metadata.records import (
    PRODUCER_ID_BLOCK_SIZE_MAX, RESOURCE_BROKER, RESOURCE_CLUSTER, RESOURCE_TOPIC, AccessControlEntryRecord, ConfigRecord,
    FenceBrokerRecord,
    MetadataRecord, MetadataRecordError, PartitionChangeRecord, PartitionRecord, ProducerIdsRecord,
    RegisterBrokerRecord, RemoveAccessControlEntryRecord, RemoveTopicRecord, RemoveUserScramCredentialRecord, TopicRecord, UnfenceBrokerRecord,
    UnregisterBrokerRecord, UserScramCredentialRecord,
)
from raftka.raft_meta.metadata.overlay_map import OverlayMap
from raftka.raft_meta.metadata.records import broker_resource_id

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_NO_CONFIGS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class LocalReplicaChanges:
    """What one broker must become after a delta (Kafka's TopicsDelta.localChanges).

    ``leaders`` / ``followers``: partitions changed by the delta that this broker now leads /
    follows, with the topic and partition as they are after the delta. ``deletes``: partitions
    whose replica this broker must drop (topic deleted, or the broker left the replica set).
    Apply deletes first: a topic deleted and re-created in one delta is in ``deletes`` (the old
    topic id) and in ``leaders``/``followers`` (the new one).
    """

    leaders: dict[TopicPartition, tuple[TopicImage, PartitionRegistration]] = field(default_factory=dict)
    followers: dict[TopicPartition, tuple[TopicImage, PartitionRegistration]] = field(default_factory=dict)
    deletes: set[TopicPartition] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.leaders or self.followers or self.deletes)


def _refuse(code: int, message: str) -> MetadataRecordError:
    return MetadataRecordError(code, message)


class MetadataDelta:
    """Changes on top of ``image``; see the module docstring. Not thread-safe: one owner."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.offset = image.offset
        self._topics: dict[str, TopicImage | None] = {}  # None: deleted
        self._brokers: dict[int, BrokerRegistration | None] = {}  # None: unregistered
        self._cluster_configs: Mapping[str, Any] | None = None
        # broker id -> its own config overrides after the delta (empty: none left)
        self._broker_configs: dict[int, Mapping[str, Any]] = {}
        self._next_producer_id: int | None = None
        # user -> {mechanism: credential} as after the delta (empty: no credential left)
        self._scram: dict[str, Mapping[scram.ScramMechanism, scram.ScramCredential]] = {}
        # ACL id -> its binding after the delta (None: removed)
        self._acls: dict[str, AclBinding | None] = {}
        self._added_acl_ids: dict[AclBinding, str] = {}  # may hold entries rolled back: check against _acls
        self._undo: list[tuple[str, Any, bool, Any]] = []  # (what, key, was set, old value)

    @classmethod
    def between(cls, old: MetadataImage, new: MetadataImage) -> "MetadataDelta":
        """The delta that turns ``old`` into ``new`` (e.g. after a snapshot restore), so that
        ``changed_topics``, ``deleted_topics`` and ``local_changes`` work as after a replay."""
        delta = cls(old)
        delta.offset = new.offset
        names = None
        if isinstance(new.topics, OverlayMap) and isinstance(old.topics, OverlayMap):
            names = new.topics.changed_keys(old.topics)  # both from one base: only these can differ
        if names is None:
            names = itertools.chain(new.topics, (name for name in old.topics if name not in new.topics))
        for name in names:
            before, topic = old.topics.get(name), new.topics.get(name)
            if before is not topic and before != topic:
                delta._topics[name] = topic
        for broker_id, broker in new.brokers.items():
            before = old.brokers.get(broker_id)
            if before is not broker and before != broker:
                delta._brokers[broker_id] = broker
        for broker_id in old.brokers:
            if broker_id not in new.brokers:
                delta._brokers[broker_id] = None
        if new.cluster_configs != old.cluster_configs:
            delta._cluster_configs = new.cluster_configs
        if new.broker_configs != old.broker_configs:
            for broker_id in set(new.broker_configs) | set(old.broker_configs):
                after = new.broker_configs.get(broker_id, _NO_CONFIGS)
                if after != old.broker_configs.get(broker_id, _NO_CONFIGS):
                    delta._broker_configs[broker_id] = after
        if new.next_producer_id != old.next_producer_id:
            delta._next_producer_id = new.next_producer_id
        if new.scram_credentials != old.scram_credentials:
            for user in set(new.scram_credentials) | set(old.scram_credentials):
                after = new.scram_credentials.get(user, {})
                if after != old.scram_credentials.get(user, {}):
                    delta._scram[user] = after
        if new.acls != old.acls:
            for acl_id in set(new.acls.bindings) | set(old.acls.bindings):
                after = new.acls.bindings.get(acl_id)
                if after != old.acls.bindings.get(acl_id):
                    delta._acls[acl_id] = after
        return delta

    # -- reading through the delta ---------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        if name in self._topics:
            return self._topics[name]
        return self.image.topics.get(name)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self.image.brokers.get(broker_id)

    def topic_name_by_id(self, topic_id: str) -> str | None:
        for name, topic in self._topics.items():
            if topic is not None and topic.topic_id == topic_id:
                return name
        name = self.image.topic_names_by_id.get(topic_id)
        if name is not None and (topic := self.topic(name)) is not None and topic.topic_id == topic_id:
            return name
        return None

    def scram_credentials_of(self, user: str) -> Mapping[scram.ScramMechanism, scram.ScramCredential]:
        """{mechanism: credential} of ``user`` as after the delta (empty when it has none)."""
        if user in self._scram:
            return self._scram[user]
        return self.image.scram_credentials.get(user, {})

    @property
    def changed_scram_users(self) -> frozenset[str]:
        """Users whose SCRAM credentials this delta set or removed."""
        return frozenset(self._scram)

    def acl(self, acl_id: str) -> AclBinding | None:
        """The binding of ACL ``acl_id`` as after the delta (None: there is none)."""
        if acl_id in self._acls:
            return self._acls[acl_id]
        return self.image.acls.bindings.get(acl_id)

    def acl_id_of(self, binding: AclBinding) -> str | None:
        """The id of an ACL identical to ``binding`` as after the delta, or None."""
        added = self._added_acl_ids.get(binding)
        if added is not None and self._acls.get(added) == binding:
            return added
        found = self.image.acls.id_of(binding)
        return found if found is not None and found not in self._acls else None

    @property
    def acls_changed(self) -> bool:
        """Whether this delta added or removed an ACL."""
        return bool(self._acls)

    @property
    def next_producer_id(self) -> int:
        return self.image.next_producer_id if self._next_producer_id is None else self._next_producer_id

    @property
    def cluster_configs(self) -> Mapping[str, Any]:
        return self.image.cluster_configs if self._cluster_configs is None else self._cluster_configs

    def broker_configs_of(self, broker_id: int) -> Mapping[str, Any]:
        """Broker ``broker_id``'s own config overrides as after the delta (empty when none)."""
        if broker_id in self._broker_configs:
            return self._broker_configs[broker_id]
        return self.image.broker_configs.get(broker_id, _NO_CONFIGS)

    @property
    def changed_broker_configs(self) -> frozenset[int]:
        """Brokers whose own config overrides this delta set or removed."""
        return frozenset(self._broker_configs)

    @property
    def changed_topics(self) -> Mapping[str, TopicImage]:
        """Topics created or changed by this delta, as they are after it."""
        return MappingProxyType({n: t for n, t in self._topics.items() if t is not None})

    @property
    def deleted_topics(self) -> Mapping[str, TopicImage]:
        """Topics of the base image that this delta deleted (or replaced by a new topic id)."""
        out = {}
        for name, topic in self._topics.items():
            before = self.image.topics.get(name)
            if before is not None and (topic is None or topic.topic_id != before.topic_id):
                out[name] = before
        return MappingProxyType(out)

    @property
    def changed_brokers(self) -> Mapping[int, BrokerRegistration]:
        """Brokers registered or changed by this delta, as they are after it."""
        return MappingProxyType({b: r for b, r in self._brokers.items() if r is not None})

    @property
    def unregistered_brokers(self) -> frozenset[int]:
        """Brokers of the base image whose registration this delta removed."""
        return frozenset(b for b, r in self._brokers.items() if r is None and b in self.image.brokers)

    @property
    def cluster_configs_changed(self) -> bool:
        return self._cluster_configs is not None

    def is_empty(self) -> bool:
        return not (self._topics or self._brokers or self._cluster_configs is not None or self._broker_configs
                    or self._next_producer_id is not None or self._scram or self._acls)

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Partitions this delta changed that ``broker_id`` must now lead, follow or delete."""
        changes = LocalReplicaChanges()
        for name, before in self.deleted_topics.items():
            for index, partition in enumerate(before.partitions):
                if broker_id in partition.replicas:
                    changes.deletes.add((name, index))
        for name, topic in self.changed_topics.items():
            before = self.image.topics.get(name)
            same_topic = before is not None and before.topic_id == topic.topic_id
            for index, partition in enumerate(topic.partitions):
                previous = before.partitions[index] if same_topic and index < len(before.partitions) else None
                if previous is partition or previous == partition:
                    continue
                if broker_id in partition.replicas:
                    target = changes.leaders if partition.leader == broker_id else changes.followers
                    target[(name, index)] = (topic, partition)
                elif previous is not None and broker_id in previous.replicas:
                    changes.deletes.add((name, index))
        return changes

    # -- building the next image -----------------------------------------------------------

    def apply(self) -> MetadataImage:
        """The next image. Brokers, topics and partitions this delta did not touch are reused."""
        base = self.image
        if self.is_empty() and self.offset == base.offset:
            return base
        brokers = base.brokers
        if self._brokers:
            merged = dict(base.brokers)
            for broker_id, broker in self._brokers.items():
                if broker is None:
                    merged.pop(broker_id, None)
                else:
                    merged[broker_id] = broker
            brokers = MappingProxyType(merged)
        topics, names_by_id = base.topics, base.topic_names_by_id
        if self._topics:
            # Copy-on-write of only what changed: a persistent map, not a copy of every topic.
            changed = {name: topic for name, topic in self._topics.items() if topic is not None}
            deleted = [name for name, topic in self._topics.items() if topic is None]
            new_ids = {topic.topic_id: name for name, topic in changed.items()
                       if base.topic_names_by_id.get(topic.topic_id) != name}
            stale_ids = [before.topic_id for name, topic in self._topics.items()
                         if (before := base.topics.get(name)) is not None
                         and (topic is None or topic.topic_id != before.topic_id)
                         and before.topic_id not in new_ids
                         and base.topic_names_by_id.get(before.topic_id) == name]
            topics = _overlay(base.topics).updated(changed, deleted)
            names_by_id = _overlay(base.topic_names_by_id).updated(new_ids, stale_ids)
        scram_credentials = base.scram_credentials
        if self._scram:
            users = dict(base.scram_credentials)
            for user, credentials in self._scram.items():
                if credentials:
                    users[user] = credentials
                else:
                    users.pop(user, None)
            scram_credentials = MappingProxyType(users)
        acls = base.acls.updated(self._acls) if self._acls else base.acls
        broker_configs = base.broker_configs
        if self._broker_configs:
            merged_configs = dict(base.broker_configs)
            for broker_id, configs in self._broker_configs.items():
                if configs:
                    merged_configs[broker_id] = configs
                else:
                    merged_configs.pop(broker_id, None)
            broker_configs = MappingProxyType(merged_configs)
        return MetadataImage(offset=self.offset, brokers=brokers, topics=topics,
                             cluster_configs=self.cluster_configs, next_producer_id=self.next_producer_id,
                             scram_credentials=scram_credentials, acls=acls, topic_names_by_id=names_by_id,
                             broker_configs=broker_configs)

    # -- undo ------------------------------------------------------------------------------

    def savepoint(self) -> int:
        return len(self._undo)

    def rollback(self, savepoint: int) -> None:
        """Undo every change made after ``savepoint`` (offset included)."""
        while len(self._undo) > savepoint:
            what, key, was_set, old = self._undo.pop()
            if what == "topic":
                if was_set:
                    self._topics[key] = old
                else:
                    self._topics.pop(key, None)
            elif what == "broker":
                if was_set:
                    self._brokers[key] = old
                else:
                    self._brokers.pop(key, None)
            elif what == "cluster_configs":
                self._cluster_configs = old
            elif what == "broker_configs":
                if was_set:
                    self._broker_configs[key] = old
                else:
                    self._broker_configs.pop(key, None)
            elif what == "next_producer_id":
                self._next_producer_id = old
            elif what == "scram":
                if was_set:
                    self._scram[key] = old
                else:
                    self._scram.pop(key, None)
            elif what == "acl":
                if was_set:
                    self._acls[key] = old
                else:
                    self._acls.pop(key, None)
            elif what == "offset":
                self.offset = old

    def _set_topic(self, name: str, topic: TopicImage | None) -> None:
        self._undo.append(("topic", name, name in self._topics, self._topics.get(name)))
        self._topics[name] = topic

    def _set_broker(self, broker: BrokerRegistration | None, *, broker_id: int | None = None) -> None:
        """Set a broker's registration; ``broker`` None (with ``broker_id``) removes it."""
        key = broker.broker_id if broker is not None else broker_id
        self._undo.append(("broker", key, key in self._brokers, self._brokers.get(key)))
        self._brokers[key] = broker

    def _set_scram(self, user: str, credentials: Mapping[scram.ScramMechanism, scram.ScramCredential]) -> None:
        self._undo.append(("scram", user, user in self._scram, self._scram.get(user)))
        self._scram[user] = credentials

    def _set_acl(self, acl_id: str, binding: AclBinding | None) -> None:
        self._undo.append(("acl", acl_id, acl_id in self._acls, self._acls.get(acl_id)))
        self._acls[acl_id] = binding
        if binding is not None:
            self._added_acl_ids[binding] = acl_id

    # -- replay ----------------------------------------------------------------------------

    def replay(self, record: MetadataRecord, offset: int | None = None) -> dict:
        """Apply one record at ``offset`` (the log offset; None keeps the delta's offset).

        Returns the record's result (e.g. ``{"broker_epoch": 7}``) or, when it does not apply,
        ``{"error": code, "message": text}`` with the delta unchanged. Never raises.
        """
        savepoint = self.savepoint()
        if offset is not None:
            self._undo.append(("offset", None, True, self.offset))
            self.offset = offset
        try:
            handler = _HANDLERS.get(type(record))
            if handler is None:
                raise _refuse(errors.INVALID_REQUEST, f"unknown metadata record type {type(record).__name__}")
            return handler(self, record, self.offset)
        except MetadataRecordError as error:
            self.rollback(savepoint)
            return error.as_result()
        except Exception as error:  # a bug; must not escape into the Raft tick thread
            log.exception("replaying %r failed", record)
            self.rollback(savepoint)
            return {"error": errors.UNKNOWN_SERVER_ERROR, "message": f"replay failed: {error!r}"}

    def _replay_register_broker(self, r: RegisterBrokerRecord, offset: int) -> dict:
        if r.broker_id < 0:
            raise _refuse(errors.INVALID_REQUEST, f"broker id must be >= 0, got {r.broker_id}")
        current = self.broker(r.broker_id)
        if current is not None and current.incarnation_id == r.incarnation_id:
            return {"broker_epoch": current.broker_epoch}  # a retried registration
        self._set_broker(BrokerRegistration(broker_id=r.broker_id, incarnation_id=r.incarnation_id,
                                            broker_epoch=offset, endpoints=frozen_map(r.endpoints),
                                            rack=r.rack, fenced=True,
                                            security_protocols=frozen_map(r.protocol_overrides())))
        return {"broker_epoch": offset}

    def _current_broker(self, broker_id: int, broker_epoch: int, what: str) -> BrokerRegistration:
        current = self.broker(broker_id)
        if current is None:
            raise _refuse(errors.BROKER_ID_NOT_REGISTERED, f"{what}: broker {broker_id} is not registered")
        if current.broker_epoch != broker_epoch:
            raise _refuse(errors.STALE_BROKER_EPOCH,
                          f"{what}: broker {broker_id} has epoch {current.broker_epoch}, not {broker_epoch}")
        return current

    def _replay_fence_broker(self, r: FenceBrokerRecord, offset: int) -> dict:
        current = self._current_broker(r.broker_id, r.broker_epoch, "fence")
        if not current.fenced:
            self._set_broker(replace(current, fenced=True))
        return {}

    def _replay_unfence_broker(self, r: UnfenceBrokerRecord, offset: int) -> dict:
        current = self._current_broker(r.broker_id, r.broker_epoch, "unfence")
        if current.fenced:
            self._set_broker(replace(current, fenced=False))
        return {}

    def _replay_unregister_broker(self, r: UnregisterBrokerRecord, offset: int) -> dict:
        if self.broker(r.broker_id) is None:
            return {}  # already gone: a retried unregistration
        self._current_broker(r.broker_id, r.broker_epoch, "unregister")
        self._set_broker(None, broker_id=r.broker_id)
        return {}

    def _replay_topic(self, r: TopicRecord, offset: int) -> dict:
        existing = self.topic(r.name)
        if existing is not None:
            if existing.topic_id == r.topic_id:
                return {"topic_id": existing.topic_id}  # a retried creation
            raise _refuse(errors.TOPIC_ALREADY_EXISTS, f"topic {r.name!r} already exists")
        if not r.name or not r.topic_id:
            raise _refuse(errors.INVALID_REQUEST, "topic name and topic id must be non-empty")
        other = self.topic_name_by_id(r.topic_id)
        if other is not None:
            raise _refuse(errors.INVALID_REQUEST, f"topic id {r.topic_id} is already used by topic {other!r}")
        if not r.partitions:
            raise _refuse(errors.INVALID_PARTITIONS, f"topic {r.name!r} needs at least one partition")
        partitions = []
        for replicas in r.partitions:
            if not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
                raise _refuse(errors.INVALID_REPLICA_ASSIGNMENT,
                              f"replicas {list(replicas)} of topic {r.name!r}: need distinct broker ids >= 0")
            partitions.append(PartitionRegistration(replicas=tuple(replicas), isr=tuple(replicas),
                                                    leader=replicas[0], leader_epoch=0, partition_epoch=0))
        configs = {k: v for k, v in r.configs.items() if v is not None}
        self._set_topic(r.name, TopicImage(name=r.name, topic_id=r.topic_id, partitions=tuple(partitions),
                                           configs=frozen_map(configs)))
        return {"topic_id": r.topic_id}

    def _replay_partition(self, r: PartitionRecord, offset: int) -> dict:
        name = self.topic_name_by_id(r.topic_id)
        if name is None:
            raise _refuse(errors.UNKNOWN_TOPIC_ID, f"partition {r.partition}: unknown topic id {r.topic_id}")
        topic = self.topic(name)
        assert topic is not None  # found by its id just above
        where = f"{name}-{r.partition}"
        replicas, isr = tuple(r.replicas), tuple(r.isr)
        if not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
            raise _refuse(errors.INVALID_REPLICA_ASSIGNMENT, f"replicas {list(replicas)} of {where}: "
                                                             "need distinct broker ids >= 0")
        if not isr or len(set(isr)) != len(isr) or not set(isr) <= set(replicas) or r.leader not in isr:
            raise _refuse(errors.INVALID_REQUEST, f"{where}: ISR {list(isr)} must be distinct replicas of "
                                                  f"{list(replicas)} and hold the leader {r.leader}")
        if r.leader_epoch < 0 or r.partition_epoch < 0:
            raise _refuse(errors.INVALID_REQUEST, f"{where}: epochs must be >= 0")
        partition = PartitionRegistration(replicas=replicas, isr=isr, leader=r.leader,
                                          leader_epoch=r.leader_epoch, partition_epoch=r.partition_epoch,
                                          removing_replicas=tuple(r.removing_replicas),
                                          adding_replicas=tuple(r.adding_replicas))
        result = {"topic": name, "partition": r.partition}
        count = len(topic.partitions)
        if r.partition < count:
            if topic.partitions[r.partition] == partition:
                return result  # a retried commit of the same partition
            raise _refuse(errors.INVALID_UPDATE_VERSION,
                          f"partition {where} already exists as {topic.partitions[r.partition]}")
        if r.partition > count:
            raise _refuse(errors.INVALID_REQUEST, f"partition {where} does not follow the topic's {count} partition(s)")
        self._set_topic(name, replace(topic, partitions=topic.partitions + (partition,)))
        return result

    def _replay_remove_topic(self, r: RemoveTopicRecord, offset: int) -> dict:
        existing = self.topic(r.name)
        if existing is not None and existing.topic_id == r.topic_id:
            self._set_topic(r.name, None)
        return {}  # already gone: a retried deletion

    def _replay_partition_change(self, r: PartitionChangeRecord, offset: int) -> dict:
        topic = self.topic(r.topic)
        if topic is None or topic.topic_id != r.topic_id or not 0 <= r.partition < len(topic.partitions):
            raise _refuse(errors.UNKNOWN_TOPIC_OR_PARTITION,
                          f"unknown partition {r.topic}-{r.partition} (topic id {r.topic_id})")
        before = topic.partitions[r.partition]
        if before.partition_epoch != r.expected_partition_epoch:
            raise _refuse(errors.INVALID_UPDATE_VERSION,
                          f"partition epoch of {r.topic}-{r.partition} is {before.partition_epoch}, "
                          f"the change expected {r.expected_partition_epoch}")
        isr = before.isr if r.isr is None else tuple(r.isr)
        leader = before.leader if r.leader is None else r.leader
        replicas = before.replicas if r.replicas is None else tuple(r.replicas)
        removing = before.removing_replicas if r.removing_replicas is None else tuple(r.removing_replicas)
        adding = before.adding_replicas if r.adding_replicas is None else tuple(r.adding_replicas)
        where = f"{r.topic}-{r.partition}"
        if not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
            raise _refuse(errors.INVALID_REPLICA_ASSIGNMENT, f"replicas {list(replicas)} of {where}: "
                                                             "need distinct broker ids >= 0")
        if not set(removing) | set(adding) <= set(replicas) or set(removing) & set(adding):
            raise _refuse(errors.INVALID_REQUEST, f"{where}: adding {list(adding)} and removing {list(removing)} "
                                                  f"must be apart and among the replicas {list(replicas)}")
        if not isr or len(set(isr)) != len(isr) or not set(isr) <= set(replicas):
            raise _refuse(errors.INVALID_REQUEST,
                          f"ISR {list(isr)} of {where} must be distinct replicas of {list(replicas)}")
        if leader != NO_LEADER and leader not in isr:
            raise _refuse(errors.INVALID_REQUEST,
                          f"leader {leader} of {where} must be in the ISR {list(isr)} (or -1)")
        after = PartitionRegistration(
            replicas=replicas, isr=isr, leader=leader,
            leader_epoch=before.leader_epoch + (1 if leader != before.leader else 0),
            partition_epoch=before.partition_epoch + 1, removing_replicas=removing, adding_replicas=adding)
        partitions = list(topic.partitions)
        partitions[r.partition] = after
        self._set_topic(r.topic, replace(topic, partitions=tuple(partitions)))
        return {"leader": after.leader, "leader_epoch": after.leader_epoch, "isr": list(after.isr),
                "partition_epoch": after.partition_epoch}

    def _replay_config(self, r: ConfigRecord, offset: int) -> dict:
        if r.resource_type == RESOURCE_TOPIC:
            topic = self.topic(r.resource_name)
            if topic is None:
                raise _refuse(errors.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {r.resource_name!r}")
            self._set_topic(topic.name, replace(topic, configs=_merged(topic.configs, r.configs)))
        elif r.resource_type == RESOURCE_CLUSTER:
            if r.resource_name != "":
                raise _refuse(errors.INVALID_REQUEST, f"cluster config overrides are named \"\", "
                                                      f"got {r.resource_name!r:.40}")
            self._undo.append(("cluster_configs", None, True, self._cluster_configs))
            self._cluster_configs = _merged(self.cluster_configs, r.configs)
        elif r.resource_type == RESOURCE_BROKER:
            # Any id, registered or not: a broker may be configured before it first starts (Kafka too).
            broker_id = broker_resource_id(r.resource_name)
            if broker_id is None:
                raise _refuse(errors.INVALID_REQUEST, f"a broker's config overrides are named by its id, "
                                                      f"got {r.resource_name!r:.40}")
            self._undo.append(("broker_configs", broker_id, broker_id in self._broker_configs,
                               self._broker_configs.get(broker_id)))
            self._broker_configs[broker_id] = _merged(self.broker_configs_of(broker_id), r.configs)
        else:
            raise _refuse(errors.INVALID_REQUEST,
                          f"config resource type must be {RESOURCE_TOPIC!r}, {RESOURCE_CLUSTER!r} or "
                          f"{RESOURCE_BROKER!r}, got {r.resource_type!r}")
        return {}

    def _replay_producer_ids(self, r: ProducerIdsRecord, offset: int) -> dict:
        if not 1 <= r.size <= PRODUCER_ID_BLOCK_SIZE_MAX:
            raise _refuse(errors.INVALID_REQUEST,
                          f"producer id block size must be 1..{PRODUCER_ID_BLOCK_SIZE_MAX}, got {r.size}")
        if r.first_id != self.next_producer_id:
            raise _refuse(errors.INVALID_UPDATE_VERSION,
                          f"producer id block from {r.first_id} is not the next one (next id is {self.next_producer_id})")
        self._undo.append(("next_producer_id", None, True, self._next_producer_id))
        self._next_producer_id = r.first_id + r.size
        return {"first_id": r.first_id, "size": r.size}

    def _replay_user_scram_credential(self, r: UserScramCredentialRecord, offset: int) -> dict:
        c = r.credential
        try:
            scram.check_user_name(r.name)
            scram.check_iterations(c.iterations)
        except scram.ScramError as error:
            raise _refuse(errors.UNACCEPTABLE_CREDENTIAL, f"user {r.name!r:.80}: {error}") from None
        size = c.mechanism.digest_bytes
        if not 0 < len(c.salt) <= scram.SALT_BYTES_MAX or len(c.stored_key) != size or len(c.server_key) != size:
            raise _refuse(errors.UNACCEPTABLE_CREDENTIAL,
                          f"user {r.name!r:.80}: a {c.mechanism.name} credential has a salt of 1 to "
                          f"{scram.SALT_BYTES_MAX} bytes and keys of {size} bytes")
        current = self.scram_credentials_of(r.name)
        if current.get(c.mechanism) != c:  # the same credential again (a retried commit) changes nothing
            self._set_scram(r.name, MappingProxyType({**current, c.mechanism: c}))
        return {}

    def _replay_remove_user_scram_credential(self, r: RemoveUserScramCredentialRecord, offset: int) -> dict:
        current = self.scram_credentials_of(r.name)
        if r.mechanism in current:  # already gone: a retried removal
            self._set_scram(r.name, MappingProxyType({m: c for m, c in current.items() if m != r.mechanism}))
        return {}

    def _replay_access_control_entry(self, r: AccessControlEntryRecord, offset: int) -> dict:
        b = r.binding
        try:
            acl.binding(b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation,
                        b.permission)
        except errors.InvalidRequestError as error:
            raise _refuse(errors.INVALID_REQUEST, f"ACL {r.acl_id}: {error.message}") from None
        current = self.acl(r.acl_id)
        if current is not None and current != b:
            raise _refuse(errors.INVALID_REQUEST, f"ACL id {r.acl_id} already holds {current.describe()}")
        if current is None and self.acl_id_of(b) is None:  # else a retried commit: one binding, one id
            self._set_acl(r.acl_id, b)
        return {}

    def _replay_remove_access_control_entry(self, r: RemoveAccessControlEntryRecord, offset: int) -> dict:
        if self.acl(r.acl_id) is not None:  # already gone: a retried removal
            self._set_acl(r.acl_id, None)
        return {}


def _overlay(values: Mapping) -> OverlayMap:
    """``values`` as an OverlayMap (an image built elsewhere may hold another mapping)."""
    return values if isinstance(values, OverlayMap) else OverlayMap(values)


def _merged(configs: Mapping[str, Any], changes: Mapping[str, Any]) -> Mapping[str, Any]:
    out = dict(configs)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return frozen_map(out)


_HANDLERS = {
    RegisterBrokerRecord: MetadataDelta._replay_register_broker,
    FenceBrokerRecord: MetadataDelta._replay_fence_broker,
    UnfenceBrokerRecord: MetadataDelta._replay_unfence_broker,
    UnregisterBrokerRecord: MetadataDelta._replay_unregister_broker,
    TopicRecord: MetadataDelta._replay_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    PartitionChangeRecord: MetadataDelta._replay_partition_change,
    ConfigRecord: MetadataDelta._replay_config,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    UserScramCredentialRecord: MetadataDelta._replay_user_scram_credential,
    RemoveUserScramCredentialRecord: MetadataDelta._replay_remove_user_scram_credential,
    AccessControlEntryRecord: MetadataDelta._replay_access_control_entry,
    RemoveAccessControlEntryRecord: MetadataDelta._replay_remove_access_control_entry,
}
