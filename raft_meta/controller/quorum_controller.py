"""The active controller's decisions: validate a request, build typed records, commit, answer.

``QuorumController(service)`` adds the metadata RPC handlers (BrokerRegistration,
BrokerHeartbeat, UnregisterBroker, CreateTopics, CreatePartitions, DeleteTopics,
DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, AlterPartition, InitProducerId,
AllocateProducerIds, Metadata, through scram_credentials.py DescribeUserScramCredentials and
AlterUserScramCredentials, through acls.py DescribeAcls, CreateAcls and DeleteAcls) to a ``ControllerService`` and starts the active controller's
periodic duties. A newly active controller first commits the bootstrap records of an empty
metadata log (bootstrap.py). Request and response bodies are in docs/controller.md; the broker-controller
APIs take and answer Kafka's shapes (common/messages/controller.py).

Every decision is read from the committed image (``service.state.metadata.image``), turned into
records (raft_meta/metadata/records.py) and committed as one atomic entry before the answer goes
out. Decisions taken on an image that moved on meanwhile are refused at replay (records carry
the epochs and ids they expect) and retried from the new image, at most
``DECISION_ATTEMPTS_MAX`` times.

Kept only in the active controller's memory, never committed (as Kafka): broker heartbeat times
(monotonic clock), the connection each broker's last heartbeat came on, the grace period of a
newly active controller, this controller's block of producer ids for InitProducerId. Their
consequences (fence, unfence, leader moves) are records.

Fencing on disconnect (not in Kafka, which waits for the session timeout): when the peer closes
the connection a broker's last heartbeats came on (at least ``DISCONNECT_HEARTBEATS_MIN`` in a
row: a persistent connection) (EOF or reset: a kill -9'd process's kernel closes its sockets at
once) and no heartbeat from that broker arrives within
``broker.session.disconnect.grace.ms`` (on any connection), the broker is fenced then. A live
broker that closed its connection itself (a request timed out) heartbeats again at once on a new
one (broker/server.py), well inside the grace, so it is not fenced; a hung or cut-off broker
(SIGSTOP, a network partition) closes nothing and is still fenced by the session timeout.

Periodic duties (every ``ELECTION_CHECK_INTERVAL_MS`` while active):
- fence a broker silent for ``broker.session.timeout.ms`` (a newly active controller first
  gives every broker one session timeout of grace);
- bring every partition to its election target (elections.py): leaders off fenced brokers,
  fenced brokers out of ISRs, offline partitions back online, preferred leaders back.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
import uuid
from typing import Any, Iterable

from raftka.common import errors
from raftka.common.configs import BROKER_DYNAMIC_CONFIGS, TOPIC_CONFIGS, ConfigDef, config_text
from raftka.common.server_config import LISTENER_PREFIX, SERVER_CONFIGS
from raftka.common.schema import ZERO_UUID
from raftka.common.security import SECURITY_PROTOCOLS
from raftka.common.messages.admin import (
    CONFIG_OP_APPEND, CONFIG_OP_DELETE, CONFIG_OP_NAMES, CONFIG_OP_SET, CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_TOPIC,
)
from raftka.common.messages.admin import RESOURCE_TOPIC as RESOURCE_TYPE_TOPIC  # Kafka's int8, not the record's
from raftka.common.messages.admin import RESOURCE_BROKER as RESOURCE_TYPE_BROKER
from raftka.common.messages.admin import (CONFIG_TYPE_BOOLEAN, CONFIG_TYPE_DOUBLE, CONFIG_TYPE_LIST,
                                          CONFIG_TYPE_LONG, CONFIG_TYPE_STRING)
from raftka.common.meta_properties import read_cluster_id
from raftka.common.ratelog import RateLimitedLog
from raftka.common.errors import (
    ConfigError, InvalidPartitionsError, InvalidReplicaAssignmentError, InvalidReplicationFactorError,
    InvalidRequestError, InvalidTopicError, RaftkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)
from raftka.raft_meta.controller import elections, placement
from raftka.raft_meta.controller.acls import Acls
from raftka.raft_meta.controller.bootstrap import Bootstrap
from raftka.raft_meta.controller.leader_election import LeaderElection
from raftka.raft_meta.controller import reassignment
from raftka.raft_meta.controller.reassignment import Reassignments
from raftka.raft_meta.controller.scram_credentials import ScramCredentials
from raftka.raft_meta.controller import service as svc
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.state import metadata_record
from raftka.raft_meta.metadata.image import MetadataImage
from raftka.raft_meta.metadata.records import (
    RESOURCE_BROKER, RESOURCE_CLUSTER, RESOURCE_TOPIC, ConfigRecord, FenceBrokerRecord, MetadataRecord,
    PartitionChangeRecord, PartitionRecord, ProducerIdsRecord, RegisterBrokerRecord, RemoveTopicRecord, TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord, broker_resource_id, encode_entry,
)

log = logging.getLogger(__name__)

TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
TOPIC_NAME_CHARS_MAX = 249
PARTITIONS_MAX = 10_000
PRODUCER_ID_BLOCK_SIZE = 1000
ELECTION_CHECK_INTERVAL_MS = 200
# Fence on disconnect only for a connection that carried this many heartbeats in a row: a broker's
# persistent controller channel, not a caller that opens one connection per request.
DISCONNECT_HEARTBEATS_MIN = 2
TOPICS_PER_REQUEST_MAX = 10_000
DECISION_ATTEMPTS_MAX = 20  # optimistic retries when another commit changed what we decided on
# Partition changes per committed entry (an entry stays well under the Raft layer's 1 MiB).
PARTITION_CHANGES_PER_ENTRY_MAX = 2000


class QuorumController:
    """The active controller's handlers and duties, attached to one ControllerService."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.config = service.config
        self.node_id: int = self.config.node_id
        # The id this controller's log dirs were formatted with: a broker of another cluster
        # (its own meta.properties) is refused at registration, as Kafka's controller does.
        self.cluster_id: str = read_cluster_id(self.config["log.dirs"], self.node_id)
        self._refused = RateLimitedLog(log)  # a misconfigured broker retries its registration for a minute
        self.session_timeout_ms: int = self.config["broker.session.timeout.ms"]
        self.unclean_default = bool(self.config["unclean.leader.election.enable"])
        # false: leadership stays where failovers left it until ElectLeaders moves it (leader_election.py)
        self.auto_leader_rebalance = bool(self.config["auto.leader.rebalance.enable"])
        self.last_heartbeat: dict[int, float] = {}  # broker id -> monotonic seconds
        self.disconnect_grace_ms: int = self.config["broker.session.disconnect.grace.ms"]
        # broker id -> (connection of its last heartbeat, heartbeats in a row on that connection)
        self.heartbeat_connection: dict[int, tuple[int, int]] = {}
        self.disconnected_at: dict[int, float] = {}  # broker id -> monotonic time that connection closed
        self._disconnect_checks: set[asyncio.Task] = set()
        self.active_since: float | None = None
        self._checked_image: MetadataImage | None = None  # image of the last election pass with no work
        self._config_lock = asyncio.Lock()  # config changes decide on the image one request at a time
        service.handlers.update({
            svc.API_BROKER_REGISTRATION: self.broker_registration,
            svc.API_BROKER_HEARTBEAT: self.broker_heartbeat,
            svc.API_UNREGISTER_BROKER: self.unregister_broker,
            svc.API_CREATE_TOPICS: self.create_topics,
            svc.API_CREATE_PARTITIONS: self.create_partitions,
            svc.API_DELETE_TOPICS: self.delete_topics,
            svc.API_DESCRIBE_CONFIGS: self.describe_configs,
            svc.API_ALTER_CONFIGS: self.alter_configs,
            svc.API_INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            svc.API_ALTER_PARTITION: self.alter_partition,
            svc.API_ALLOCATE_PRODUCER_IDS: self.allocate_producer_ids,
        })
        self.scram_credentials = ScramCredentials(self)
        self.acls = Acls(self)
        self.leader_election = LeaderElection(self)
        self.reassignments = Reassignments(self)
        self._reassignments_checked: MetadataImage | None = None  # image of the last pass with none to finish
        self.bootstrap = Bootstrap(self)  # a corrupt bootstrap file stops the controller here
        service.before_commits = self.bootstrap.ensure
        service.background_factories.append(self.periodic_duties)
        service.connection_closed_listeners.append(self.connection_closed)

    @property
    def image(self) -> MetadataImage:
        """The committed image this controller has applied (replaced, never mutated)."""
        return self.service.state.metadata.image

    async def commit(self, records: list[MetadataRecord], *, timeout_ms: int | None = None) -> list[dict]:
        """Commit one atomic entry; its per-record results, or the typed error it was refused with.
        ``timeout_ms``: at most this long (default and cap: controller.quorum.request.timeout.ms)."""
        limit_ms = self.service.request_timeout_ms
        result = await self.service.raft.submit(metadata_record(encode_entry(records)),
                                                limit_ms if timeout_ms is None else max(1, min(timeout_ms, limit_ms)))
        if isinstance(result, dict) and "error" in result:
            raise errors.error_for(result["error"], result.get("message"))
        return result

    async def commit_elections(self, first: list[MetadataRecord], live: Iterable[int], *,
                               involving: Any = None, topics: Iterable[str] | None = None) -> None:
        """Commit ``first`` (e.g. a fence) with the partition changes it makes necessary, then
        any changes left over beyond one entry; recomputed from the image when a race refuses
        them. ``live`` is the set of live brokers after ``first``; ``topics`` (None: all) the
        topics to look at."""
        live = set(live)
        for _ in range(DECISION_ATTEMPTS_MAX):
            changes = list(elections.changes(self.image, live, self.unclean_default, involving=involving,
                                             preferred=self.auto_leader_rebalance,
                                             limit=PARTITION_CHANGES_PER_ENTRY_MAX, topics=topics))
            if not first and not changes:
                return
            try:
                await self.commit(first + changes)
            except errors.InvalidUpdateVersionError:
                continue  # a partition changed under us: decide again on the new image
            first = []
            if len(changes) < PARTITION_CHANGES_PER_ENTRY_MAX:
                return
        raise errors.RequestTimedOutError("partition elections kept racing with other changes; retry")

    # -- brokers ---------------------------------------------------------------------------

    async def broker_registration(self, version: int, body: dict) -> tuple[int, dict]:
        """BrokerRegistration (Kafka's v0-4) -> {broker_epoch}. ``cluster_id`` must be this
        cluster's (else INCONSISTENT_CLUSTER_ID: the broker's log dirs were formatted for another
        cluster). ``incarnation_id`` is a uuid new on every start of the broker: the same one
        again is a retry and answers the same epoch; another one while the registered
        incarnation is unfenced and heartbeating is DUPLICATE_BROKER_REGISTRATION. Listeners
        {name, host, port, security_protocol} become the registration's endpoints {name:
        "host:port"} and their protocols (an unknown protocol id is INVALID_REQUEST);
        ``features``, ``log_dirs`` and ``previous_broker_epoch`` are not used (Raftka has one
        metadata version and no log-directory ids)."""
        broker_id, incarnation = body["broker_id"], body["incarnation_id"]
        if body["cluster_id"] != self.cluster_id:
            message = (f"broker {broker_id} belongs to cluster {body['cluster_id']!r}, but this controller's "
                       f"cluster is {self.cluster_id!r} (check the broker's meta.properties in its log.dirs)")
            # Kafka's answer has no message field: the controller's log says which ids differ.
            self._refused.warning(f"cluster-id-{broker_id}", "registration refused: %s", message)
            return errors.INCONSISTENT_CLUSTER_ID, {"error_message": message}
        if broker_id < 0:
            raise InvalidRequestError(f"broker_id must be >= 0, got {broker_id}")
        if incarnation == ZERO_UUID:
            raise InvalidRequestError("incarnation_id must not be the zero uuid")
        endpoints: dict[str, str] = {}
        protocols: dict[str, int] = {}
        for listener in body["listeners"]:
            name, host, port = listener["name"], listener["host"], listener["port"]
            if not name or not host or not port or name in endpoints:
                raise InvalidRequestError(f"listener {listener}: needs a unique name, a host and a port")
            if listener["security_protocol"] not in SECURITY_PROTOCOLS.values():
                raise InvalidRequestError(f"listener {name}: security_protocol {listener['security_protocol']} is "
                                          f"not one of {sorted(SECURITY_PROTOCOLS.values())}")
            endpoints[name] = f"{host}:{port}"
            protocols[name] = listener["security_protocol"]
        if not endpoints:
            raise InvalidRequestError(f"broker {broker_id} registers no listener")
        rack = body.get("rack") or None  # Kafka: null; Raftka's image: None (no rack)
        current = self.image.brokers.get(broker_id)
        if (current is not None and current.incarnation_id != incarnation and not current.fenced
                and self._alive(broker_id)):
            return errors.DUPLICATE_BROKER_REGISTRATION, {
                "error_message": f"broker {broker_id} is registered by a live incarnation"}
        results = await self.commit([RegisterBrokerRecord(broker_id, incarnation, endpoints, rack, protocols)])
        self._heard_from(broker_id)
        return errors.NONE, {"broker_epoch": results[0]["broker_epoch"]}

    async def broker_heartbeat(self, version: int, body: dict) -> tuple[int, dict]:
        """BrokerHeartbeat (Kafka's v0-1) {broker_id, broker_epoch, current_metadata_offset,
        want_fence, want_shut_down} -> {is_caught_up, is_fenced, should_shut_down}. A caught-up
        broker (it has replayed its own registration) is unfenced; ``want_fence`` or
        ``want_shut_down`` fences it (its leaderships move in the same entry)."""
        broker_id, epoch = body["broker_id"], body["broker_epoch"]
        offset = body["current_metadata_offset"]
        broker = self.image.brokers.get(broker_id)
        if broker is None:
            return errors.BROKER_ID_NOT_REGISTERED, {"error_message": f"broker {broker_id} is not registered"}
        if broker.broker_epoch != epoch:
            return errors.STALE_BROKER_EPOCH, {"error_message": f"broker epoch {epoch} is stale"}
        self._heard_from(broker_id)
        self.service.observe(broker_id, offset + 1)  # DescribeQuorum's observers: its metadata-log progress
        caught_up = offset >= broker.broker_epoch  # it has replayed its own registration
        if body["want_fence"] or body["want_shut_down"]:
            if not broker.fenced:
                await self.fence(broker_id, epoch)
        elif broker.fenced and caught_up:
            live = set(self.image.live_broker_ids()) | {broker_id}
            # Offline partitions whose ISR kept this broker get it back as leader, in the same entry.
            await self.commit_elections([UnfenceBrokerRecord(broker_id, epoch)], live,
                                        involving=lambda p: p.leader == -1 and broker_id in p.isr)
        broker = self.image.brokers.get(broker_id)
        if broker is None:  # unregistered meanwhile
            return errors.BROKER_ID_NOT_REGISTERED, {"error_message": f"broker {broker_id} was unregistered"}
        return errors.NONE, {"is_caught_up": caught_up, "is_fenced": broker.fenced,
                             "should_shut_down": body["want_shut_down"] and broker.fenced}

    async def unregister_broker(self, version: int, body: dict) -> tuple[int, dict]:
        """UnregisterBroker (Kafka's v0) {broker_id}: removes the broker's registration, as Kafka
        does for a broker taken out of the cluster for good. In the same entry it leaves every
        ISR and loses every leadership (as a fence). BROKER_ID_NOT_REGISTERED when there is none.
        A broker still running registers again with a new incarnation (its heartbeats are then
        refused BROKER_ID_NOT_REGISTERED)."""
        broker_id = body["broker_id"]
        broker = self.image.brokers.get(broker_id)
        if broker is None:
            return errors.BROKER_ID_NOT_REGISTERED, {"error_message": f"broker {broker_id} is not registered"}
        live = set(self.image.live_broker_ids()) - {broker_id}
        await self.commit_elections([UnregisterBrokerRecord(broker_id, broker.broker_epoch)], live,
                                    involving=elections.involves(broker_id))
        for memory in (self.last_heartbeat, self.heartbeat_connection, self.disconnected_at):
            memory.pop(broker_id, None)
        return errors.NONE, {"error_message": None}

    async def fence(self, broker_id: int, epoch: int) -> None:
        """Fence a broker; in the same entry it leaves every ISR and loses every leadership."""
        live = set(self.image.live_broker_ids()) - {broker_id}
        await self.commit_elections([FenceBrokerRecord(broker_id, epoch)], live,
                                    involving=elections.involves(broker_id))

    def _heard_from(self, broker_id: int) -> None:
        """A registration or heartbeat of ``broker_id`` arrived (on this request's connection)."""
        self.last_heartbeat[broker_id] = time.monotonic()
        self.disconnected_at.pop(broker_id, None)
        connection = svc.REQUEST_CONNECTION.get()
        if connection is not None:
            previous, count = self.heartbeat_connection.get(broker_id, (None, 0))
            self.heartbeat_connection[broker_id] = (connection, count + 1 if previous == connection else 1)

    def connection_closed(self, connection_id: int) -> None:
        """The peer closed ``connection_id``: a broker whose last heartbeat came on it is fenced
        unless it heartbeats within ``broker.session.disconnect.grace.ms`` (module docstring)."""
        if self.disconnect_grace_ms < 0 or not self.service.is_active:
            return
        for broker_id in [b for b, (c, _) in self.heartbeat_connection.items() if c == connection_id]:
            _, count = self.heartbeat_connection.pop(broker_id)
            if count < DISCONNECT_HEARTBEATS_MIN:
                continue  # a one-shot connection per heartbeat (tools, tests): closing it says nothing
            since = self.disconnected_at[broker_id] = time.monotonic()
            task = asyncio.get_running_loop().create_task(self._fence_if_still_gone(broker_id, since))
            self._disconnect_checks.add(task)
            task.add_done_callback(self._disconnect_checks.discard)

    async def _fence_if_still_gone(self, broker_id: int, since: float) -> None:
        await asyncio.sleep(self.disconnect_grace_ms / 1000)
        # A heartbeat or registration since the close popped disconnected_at (last_heartbeat is
        # no witness: a newly active controller stamps it for every broker as grace).
        if self.disconnected_at.get(broker_id) != since or not self.service.is_active:
            return  # it heartbeat again (or closed a later connection, or we are no longer active)
        broker = self.image.brokers.get(broker_id)
        if broker is None or broker.fenced:
            return
        try:
            await self.fence(broker_id, broker.broker_epoch)
            self.disconnected_at.pop(broker_id, None)
            log.info("fenced broker %d: its heartbeat connection was closed and no heartbeat came for %d ms",
                     broker_id, self.disconnect_grace_ms)
        except RaftkaError as error:
            log.warning("fencing disconnected broker %d failed (the session timeout still applies): %s",
                        broker_id, error)

    def _alive(self, broker_id: int) -> bool:
        seen = self.last_heartbeat.get(broker_id)
        return seen is not None and (time.monotonic() - seen) * 1000 < self.session_timeout_ms

    async def periodic_duties(self) -> None:
        """Active controller only: fence silent brokers, then bring partitions to their
        election targets (see the module docstring)."""
        while True:
            await asyncio.sleep(ELECTION_CHECK_INTERVAL_MS / 1000)
            try:
                await self._periodic_pass()
            except Exception:  # a bug must not end the duties of the active controller
                log.exception("periodic controller duties failed; trying again")

    async def _periodic_pass(self) -> None:
        """One pass of the duties; does nothing unless this controller is active."""
        if not self.service.is_active:
            self.active_since = None
            self._checked_image = None
            self.heartbeat_connection.clear()  # connections to us while we were not active mean nothing
            self.disconnected_at.clear()
            return
        try:
            await self.bootstrap.ensure()  # before anything else this controller commits
        except RaftkaError as error:
            log.warning("committing the bootstrap records failed (trying again): %s", error)
            return
        now = time.monotonic()
        if self.active_since is None:
            self.active_since = now
            for broker_id in self.image.brokers:
                self.last_heartbeat[broker_id] = now  # grace for every broker
        for broker_id, broker in list(self.image.brokers.items()):
            if broker.fenced or self._alive(broker_id):
                continue
            try:
                await self.fence(broker_id, broker.broker_epoch)
                log.info("fenced broker %d: no heartbeat for %d ms", broker_id, self.session_timeout_ms)
            except RaftkaError as error:
                log.warning("fencing broker %d failed: %s", broker_id, error)
        await self._finish_reassignments()
        image, checked = self.image, self._checked_image
        if image is checked:
            return  # nothing committed since the last pass found nothing to do
        topics = None
        if checked is not None and checked.live_broker_ids() == image.live_broker_ids():
            # The checked image needed no election and the same brokers are live: only topics
            # changed since can need one (a walk of every partition per change cost O(P)).
            topics = set(MetadataDelta.between(checked, image).changed_topics)
        try:
            await self.commit_elections([], image.live_broker_ids(), topics=topics)
            if self.image is image:
                self._checked_image = image
        except RaftkaError as error:
            log.debug("partition elections: %s", error)

    async def _finish_reassignments(self) -> None:
        """Commit the end of every reassignment whose new replicas are all in the ISR
        (reassignment.py), looking only at topics changed since the last pass found none."""
        image, checked = self.image, self._reassignments_checked
        if image is checked:
            return
        topics = None if checked is None else set(MetadataDelta.between(checked, image).changed_topics)
        changes = list(reassignment.completions(image, topics))
        try:
            for start in range(0, len(changes), PARTITION_CHANGES_PER_ENTRY_MAX):
                await self.commit(changes[start:start + PARTITION_CHANGES_PER_ENTRY_MAX])
            if not changes:
                self._reassignments_checked = image
            else:
                log.info("finished the reassignment of %d partition(s): %s", len(changes),
                         ", ".join(f"{c.topic}-{c.partition}" for c in changes[:10]))
        except RaftkaError as error:  # a race (the partition moved on) or no quorum: the next pass decides again
            log.debug("finishing reassignments: %s", error)

    # -- topics ----------------------------------------------------------------------------

    async def create_topics(self, version: int, body: dict) -> tuple[int, dict]:
        """Kafka's CreateTopics (v7 shape; a broker forwards its client's request re-encoded at v7).

        Each topic is decided and committed on its own: one bad topic does not sink the others.
        The answer per topic: topic id, error, and from v5 on the partition count, replication
        factor and the topic's configs (as DescribeConfigs lists them). Replica assignments are
        refused (INVALID_REQUEST): the controller places replicas itself.
        """
        topics = body["topics"]
        if len(topics) > TOPICS_PER_REQUEST_MAX:
            raise InvalidRequestError(f"{len(topics)} topics in one request; at most {TOPICS_PER_REQUEST_MAX}")
        results = []
        led = placement.leader_counts(self.image)
        for topic in topics:
            name = topic["name"]
            try:
                record = self._topic_record(topic, led)
                if not body["validate_only"]:
                    await self.commit([record])
                    for replicas in record.partitions:
                        led[replicas[0]] = led.get(replicas[0], 0) + 1
                results.append({"name": name, "topic_id": record.topic_id, "error_code": errors.NONE,
                                "error_message": None, "num_partitions": len(record.partitions),
                                "replication_factor": len(record.partitions[0]),
                                "configs": [{"name": c["name"], "value": c["value"], "read_only": False,
                                             "config_source": c["config_source"], "is_sensitive": False}
                                            for c in _topic_configs(record.configs)]})
            except errors.NotControllerError:
                raise
            except RaftkaError as error:
                results.append({"name": name, "error_code": error.code, "error_message": error.message})
        return errors.NONE, {"topics": results}

    def _topic_record(self, topic: dict, led: dict[int, int]) -> TopicRecord:
        name = topic["name"]
        if not name:
            raise InvalidTopicError("topic name must not be empty")
        if name in (".", "..") or len(name) > TOPIC_NAME_CHARS_MAX or not TOPIC_NAME_RE.match(name):
            raise InvalidTopicError(f"topic name {name!r} is invalid: use at most {TOPIC_NAME_CHARS_MAX} "
                                    "of [a-zA-Z0-9._-], and not '.' or '..'")
        if topic["assignments"]:
            raise InvalidRequestError(f"topic {name!r}: replica assignments are not supported; "
                                      "give num_partitions and replication_factor")
        image = self.image
        if name in image.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        partitions = topic["num_partitions"]
        partitions = self.config["num.partitions"] if partitions == -1 else partitions
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise InvalidPartitionsError(f"num_partitions must be between 1 and {PARTITIONS_MAX}, got {partitions}")
        rf = topic["replication_factor"]
        rf = self.config["default.replication.factor"] if rf == -1 else rf
        live = [b for b in image.brokers.values() if not b.fenced]
        if rf < 1 or rf > len(live):
            raise InvalidReplicationFactorError(
                f"replication factor {rf} is invalid: must be between 1 and the {len(live)} unfenced broker(s)")
        try:
            # Kafka's [{name, value}]; the last of a repeated name wins, as in Kafka's map
            configs = TOPIC_CONFIGS.parse({c["name"]: c["value"] for c in topic["configs"]}, fill_defaults=False)
        except ConfigError as error:
            raise errors.InvalidConfigError(f"topic {name!r}: {error.message}") from None
        replicas = placement.place_replicas(live, led, partitions, rf)
        return TopicRecord(name=name, topic_id=uuid.uuid4().hex, partitions=tuple(replicas), configs=configs)

    async def create_partitions(self, version: int, body: dict) -> tuple[int, dict]:
        """Kafka's CreatePartitions (v3 shape; a broker forwards its client's request re-encoded at v3).

        Per topic, ``count`` is the new total (INVALID_PARTITIONS unless it is more than the topic
        has, and at most PARTITIONS_MAX). The new partitions take the topic's replication factor
        (its partition 0's) and are placed as a new topic's are (placement.py), or take
        ``assignments``: one replica list per new partition, each of that many distinct
        registered brokers (else INVALID_REPLICA_ASSIGNMENT, as Kafka checks them). A new
        partition starts with ISR = its unfenced replicas, leader = the first of them (the first
        replica when all are unfenced), epochs 0. Each topic is decided and committed on its own,
        as one entry of PartitionRecords; ``validate_only`` decides and commits nothing.
        ``timeout_ms`` > 0 bounds the whole request: a topic not committed by then answers
        REQUEST_TIMED_OUT (its partitions may still be added). A name given twice answers
        INVALID_REQUEST once, as Kafka's controller does.
        """
        topics = body["topics"]
        if len(topics) > TOPICS_PER_REQUEST_MAX:
            raise InvalidRequestError(f"{len(topics)} topics in one request; at most {TOPICS_PER_REQUEST_MAX}")
        timeout_ms = body["timeout_ms"]
        deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms > 0 else None
        counts = collections.Counter(t["name"] for t in topics)
        duplicates = {name for name, count in counts.items() if count > 1}
        results = [{"name": name, "error_code": errors.INVALID_REQUEST, "error_message": "Duplicate topic name."}
                   for name in sorted(duplicates)]
        for topic in topics:
            name = topic["name"]
            if name in duplicates:
                continue
            try:
                await self._create_partitions(topic, body["validate_only"], deadline)
                results.append({"name": name, "error_code": errors.NONE, "error_message": None})
            except errors.NotControllerError:
                raise
            except RaftkaError as error:
                results.append({"name": name, "error_code": error.code, "error_message": error.message})
        return errors.NONE, {"results": results}

    async def _create_partitions(self, topic: dict, validate_only: bool, deadline: float | None) -> None:
        """Decide one topic's new partitions and commit them, deciding again when the image moved
        on under the decision (another change of the topic committed first)."""
        for _ in range(DECISION_ATTEMPTS_MAX):
            records = self._partition_records(topic)
            if validate_only:
                return
            timeout_ms = None
            if deadline is not None:
                timeout_ms = int((deadline - time.monotonic()) * 1000)
                if timeout_ms <= 0:
                    raise errors.RequestTimedOutError(f"topic {topic['name']!r}: the request's timeout_ms passed "
                                                      "before its partitions were committed")
            try:
                await self.commit(records, timeout_ms=timeout_ms)
                return
            except (errors.InvalidUpdateVersionError, errors.UnknownTopicIdError):
                continue  # refused at replay: the topic changed (or went) meanwhile; decide again
        raise errors.RequestTimedOutError(f"topic {topic['name']!r}: adding partitions kept racing with other "
                                          "changes of the topic; retry")

    def _partition_records(self, topic: dict) -> list[PartitionRecord]:
        """The PartitionRecords of one CreatePartitions topic, decided on the current image."""
        name, count, assignments = topic["name"], topic["count"], topic["assignments"]
        image = self.image
        current = image.topics.get(name)
        if current is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        have = len(current.partitions)
        if count < have:
            raise InvalidPartitionsError(f"Topic currently has {have} partitions, which is higher than "
                                         f"the requested {count}.")
        if count == have:
            raise InvalidPartitionsError(f"Topic already has {have} partitions.")
        if count > PARTITIONS_MAX:
            raise InvalidPartitionsError(f"topic {name!r}: {count} partitions requested; at most {PARTITIONS_MAX} "
                                         "per topic")
        added = count - have
        rf = len(current.partitions[0].replicas)
        if assignments is None:
            live = [b for b in image.brokers.values() if not b.fenced]
            if rf > len(live):
                raise InvalidReplicationFactorError(f"Unable to replicate the partition {rf} time(s): only "
                                                    f"{len(live)} broker(s) are unfenced")
            placed = placement.place_replicas(live, placement.leader_counts(image), added, rf)
        else:
            if len(assignments) != added:
                raise InvalidReplicaAssignmentError(f"Attempted to add {added} additional partition(s), but "
                                                    f"{len(assignments)} assignment(s) were specified.")
            placed = [tuple(a["broker_ids"]) for a in assignments]
            for index, replicas in enumerate(placed, start=have):
                _check_assignment(image, index, replicas, rf)
        records = []
        for index, replicas in enumerate(placed, start=have):
            isr = tuple(b for b in replicas if image.is_live(b))
            if not isr:
                raise InvalidReplicaAssignmentError(f"All brokers specified in the manual partition assignment "
                                                    f"for partition {index} are fenced.")
            records.append(PartitionRecord(current.topic_id, index, replicas, isr, leader=isr[0]))
        return records

    async def delete_topics(self, version: int, body: dict) -> tuple[int, dict]:
        """Kafka's DeleteTopics (v6 shape: topics named by name or by topic id; a broker turns an
        older client's ``topic_names`` into that). Answered per topic, with its name and id."""
        by_id = {t.topic_id: n for n, t in self.image.topics.items()}
        results = []
        for wanted in body["topics"]:
            name, topic_id = wanted["name"], wanted["topic_id"]
            if name is None:
                name = by_id.get(topic_id)
                if name is None:
                    results.append({"name": None, "topic_id": topic_id, "error_code": errors.UNKNOWN_TOPIC_ID,
                                    "error_message": f"unknown topic id {topic_id}"})
                    continue
            topic = self.image.topics.get(name)
            if topic is None:
                results.append({"name": name, "topic_id": topic_id, "error_code": errors.UNKNOWN_TOPIC_OR_PARTITION,
                                "error_message": f"unknown topic {name!r}"})
                continue
            await self.commit([RemoveTopicRecord(name, topic.topic_id)])
            results.append({"name": name, "topic_id": topic.topic_id, "error_code": errors.NONE,
                            "error_message": None})
        return errors.NONE, {"responses": results}

    async def describe_configs(self, version: int, body: dict) -> tuple[int, dict]:
        """Kafka's DescribeConfigs (v4 shape): every key of a topic (or those of
        ``configuration_keys``), each value as Kafka writes it (a string), its source (the topic's
        override or the default) and its type. Topics are the only resources described here: a
        broker describes its own BROKER resource (broker/configs.py), as only it knows its
        server.properties."""
        out = []
        for resource in body["resources"]:
            name, kind = resource["resource_name"], resource["resource_type"]
            result: dict[str, Any] = {"resource_type": kind, "resource_name": name, "error_code": errors.NONE,
                                      "error_message": None, "configs": []}
            topic = self.image.topics.get(name) if kind == RESOURCE_TYPE_TOPIC else None
            if kind != RESOURCE_TYPE_TOPIC:
                result.update(error_code=errors.INVALID_REQUEST,
                              error_message=f"resource type {kind} of {name!r}: only topics ({RESOURCE_TYPE_TOPIC}) "
                                            "are described by a controller; ask a broker for a broker's configs")
            elif topic is None:
                result.update(error_code=errors.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"unknown topic {name!r}")
            else:
                keys = resource["configuration_keys"]
                result["configs"] = [c for c in _topic_configs(topic.configs) if keys is None or c["name"] in keys]
            out.append(result)
        return errors.NONE, {"results": out}

    async def alter_configs(self, version: int, body: dict) -> tuple[int, dict]:
        """Kafka's legacy AlterConfigs (v2 shape) for topics and brokers: the request names a
        resource's whole set of overrides, as in Kafka: keys left out (or given a null value) go
        back to their defaults. IncrementalAlterConfigs changes only the keys it names."""
        def replace(config_def: ConfigDef, overrides: dict[str, Any], configs: list[dict]) -> dict[str, Any]:
            names = [c["name"] for c in configs]
            if len(set(names)) != len(names):
                raise InvalidRequestError("a config key appears more than once")
            unknown = [n for n in names if n not in config_def]
            if unknown:
                raise ConfigError(unknown[0], "unknown configuration key")
            wanted = config_def.parse({c["name"]: c["value"] for c in configs if c["value"] is not None},
                                      fill_defaults=False)
            return {**{k: None for k in overrides if k not in wanted}, **wanted}
        return errors.NONE, {"responses": await self._alter_resources(body, replace)}

    async def incremental_alter_configs(self, version: int, body: dict) -> tuple[int, dict]:
        """Kafka's IncrementalAlterConfigs (v1 shape) for topics and brokers: each named key is
        SET, DELETEd (back to its default), or for a list-type key has items APPENDed or
        SUBTRACTed; keys left out keep their value."""
        return errors.NONE, {"responses": await self._alter_resources(body, incremental_changes)}

    def _config_resource(self, kind: int, name: str) -> tuple[str, dict[str, Any], ConfigDef]:
        """(record resource type, current overrides, the keys it takes) of an AlterConfigs
        resource: a topic (UNKNOWN_TOPIC_OR_PARTITION when there is none), the cluster's brokers
        (name "") or one broker (its id; registered or not, as Kafka lets a broker be configured
        before it starts). INVALID_REQUEST for another type or a broker name that is no id."""
        if kind == RESOURCE_TYPE_TOPIC:
            topic = self.image.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            return RESOURCE_TOPIC, dict(topic.configs), TOPIC_CONFIGS
        if kind == RESOURCE_TYPE_BROKER:
            if name == "":
                return RESOURCE_CLUSTER, dict(self.image.cluster_configs), BROKER_DYNAMIC_CONFIGS
            broker_id = broker_resource_id(name)
            if broker_id is None:
                raise InvalidRequestError(f"broker resource {name!r:.40}: name a broker by its id, or \"\" "
                                          "for the cluster-wide default")
            return RESOURCE_BROKER, dict(self.image.broker_configs.get(broker_id, {})), BROKER_DYNAMIC_CONFIGS
        raise InvalidRequestError(f"resource type {kind} of {name!r}: only topics ({RESOURCE_TYPE_TOPIC}) and "
                                  f"brokers ({RESOURCE_TYPE_BROKER}) are altered here")

    async def _alter_resources(self, body: dict, decide: Any) -> list[dict]:
        """Both AlterConfigs: ``decide(config_def, overrides, configs)`` turns a resource's current
        overrides and the request's configs into {key: typed value, or None to remove the
        override}. Each resource is answered on its own (INVALID_REQUEST for a resource type
        other than topic or broker, a bad broker name, a resource named twice or a broker key
        that cannot change at run time; UNKNOWN_TOPIC_OR_PARTITION; INVALID_CONFIG with the key
        and the problem); the accepted ones' changes commit as one entry, one ConfigRecord per
        resource whose overrides change. ``validate_only`` checks and commits nothing. Decisions
        are taken one request at a time (``_config_lock``): two concurrent APPENDs to one key
        both count."""
        resources = body["resources"]
        seen = [(r["resource_type"], r["resource_name"]) for r in resources]
        answers: list[dict] = []
        records: list[ConfigRecord] = []
        committed: list[dict] = []  # the answers of the resources in ``records``
        async with self._config_lock:
            for resource in resources:
                kind, name = resource["resource_type"], resource["resource_name"]
                answer = {"resource_type": kind, "resource_name": name, "error_code": errors.NONE,
                          "error_message": None}
                answers.append(answer)
                try:
                    if seen.count((kind, name)) > 1:
                        what = "broker" if kind == RESOURCE_TYPE_BROKER else "topic"
                        raise InvalidRequestError(f"{what} {name!r} appears more than once in the request")
                    record_type, overrides, config_def = self._config_resource(kind, name)
                    if config_def is BROKER_DYNAMIC_CONFIGS:
                        _refuse_static_broker_keys(name, resource["configs"])
                    # Only what changes: removing an absent override or setting the same value is no record.
                    changes = {k: v for k, v in decide(config_def, overrides, resource["configs"]).items()
                               if ((k in overrides) if v is None else overrides.get(k) != v)}
                except RaftkaError as error:
                    answer.update(error_code=error.code, error_message=error.message)
                    continue
                if changes and not body["validate_only"]:
                    records.append(ConfigRecord(record_type, name, changes))
                    committed.append(answer)
            if records:
                try:
                    await self.commit(records)
                except RaftkaError as error:
                    if error.retriable:  # NOT_CONTROLLER, REQUEST_TIMED_OUT: the whole request is retried
                        raise
                    for answer in committed:  # refused at replay or too large: nothing was applied
                        answer.update(error_code=error.code, error_message=error.message)
        return answers

    # -- partitions ------------------------------------------------------------------------

    async def alter_partition(self, version: int, body: dict) -> tuple[int, dict]:
        """AlterPartition (Kafka's v2-3): a partition leader asks for new ISRs, naming topics by
        id, with the leader epoch and partition epoch it holds (v3: each ISR member with its
        broker epoch). A stale broker epoch refuses the whole request (STALE_BROKER_EPOCH); each
        partition is answered {partition_index, error_code, leader_id, leader_epoch, isr,
        partition_epoch}, its fields the committed result. The partitions of one request are
        decided together and their changes committed as one entry (``_alter_all``). A retry of a
        change that committed finds the partition epoch moved on and is refused
        INVALID_UPDATE_VERSION, never applied twice."""
        broker_id = body["broker_id"]
        broker = self.image.brokers.get(broker_id)
        if broker is None or broker.broker_epoch != body["broker_epoch"]:
            return errors.STALE_BROKER_EPOCH, {"error_message": "stale or unknown broker epoch"}
        asks = []  # (topic id, partition request, [(member, member's broker epoch)]) in request order
        for topic in body["topics"]:
            for request in topic["partitions"]:
                if version >= 3:
                    members = [(m["broker_id"], m["broker_epoch"]) for m in request["new_isr_with_epochs"]]
                else:
                    members = [(b, -1) for b in request["new_isr"]]
                asks.append((topic["topic_id"], request, members))
        outcomes = iter(await self._alter_all(broker_id, asks))
        topics = []
        for topic in body["topics"]:
            answers = []
            for request in topic["partitions"]:
                code, answer = next(outcomes)
                answers.append({"partition_index": request["partition_index"], "error_code": code, **answer})
            topics.append({"topic_id": topic["topic_id"], "partitions": answers})
        return errors.NONE, {"topics": topics}

    async def _alter_all(self, broker_id: int, asks: list[tuple[str, dict, list[tuple[int, int]]]]
                         ) -> list[tuple[int, dict]]:
        """(error code, the answer's other fields) per ask. Every ask is decided on one image and
        the accepted changes go out as one entry (``PARTITION_CHANGES_PER_ENTRY_MAX`` per entry),
        so a leader's ISR changes after a restart cost one Raft commit, not one per partition.
        An entry refused at replay (another commit changed a partition meanwhile: the entry is
        atomic) is decided again on the new image."""
        outcomes: list[tuple[int, dict] | None] = [None] * len(asks)
        seen: set[tuple[str, int]] = set()
        pending = []
        for i, (topic_id, request, _) in enumerate(asks):
            key = (topic_id, request["partition_index"])
            if key in seen:
                outcomes[i] = (errors.INVALID_REQUEST, {})  # one change per partition and request
            else:
                seen.add(key)
                pending.append(i)
        refusals = 0
        while pending:
            image = self.image
            decided: list[tuple[int, PartitionChangeRecord]] = []
            for i in pending:
                record = self._alter_decision(image, broker_id, *asks[i])
                if isinstance(record, int):
                    outcomes[i] = (record, {})
                else:
                    decided.append((i, record))
            batch, rest = decided[:PARTITION_CHANGES_PER_ENTRY_MAX], decided[PARTITION_CHANGES_PER_ENTRY_MAX:]
            pending = [i for i, _ in rest]
            if not batch:
                break
            try:
                results = await self.commit([record for _, record in batch])
            except RaftkaError as error:
                if error.retriable:  # NOT_CONTROLLER, REQUEST_TIMED_OUT: the whole request is retried
                    raise
                refusals += 1
                if self.image is image or refusals >= DECISION_ATTEMPTS_MAX:
                    for i, _ in batch:  # refused, and not for a race: the error is each partition's answer
                        outcomes[i] = (error.code, {})
                else:
                    pending = [i for i, _ in batch] + pending  # decide again on the new image
                continue
            for (i, _), result in zip(batch, results):
                outcomes[i] = (errors.NONE, {"leader_id": result["leader"], "leader_epoch": result["leader_epoch"],
                                             "isr": result["isr"], "partition_epoch": result["partition_epoch"]})
        return [outcome or (errors.UNKNOWN_SERVER_ERROR, {}) for outcome in outcomes]

    def _alter_decision(self, image: MetadataImage, broker_id: int, topic_id: str, request: dict,
                        members: list[tuple[int, int]]) -> PartitionChangeRecord | int:
        """One partition of an AlterPartition decided on ``image``: its change, or the error
        code that refuses it."""
        index = request["partition_index"]
        name = image.topic_names_by_id.get(topic_id)
        if name is None:
            return errors.UNKNOWN_TOPIC_ID
        p = image.topics[name].partition(index)
        if p is None:
            return errors.UNKNOWN_TOPIC_OR_PARTITION
        if p.leader != broker_id:
            return errors.NOT_LEADER_OR_FOLLOWER
        if request["leader_epoch"] != p.leader_epoch:
            return errors.FENCED_LEADER_EPOCH
        if request["partition_epoch"] != p.partition_epoch:
            return errors.INVALID_UPDATE_VERSION
        if request["leader_recovery_state"] != 0:
            return errors.INVALID_REQUEST  # Raftka's leaders never recover from an unclean election
        new_isr = [b for b, _ in members]
        if not new_isr or len(set(new_isr)) != len(new_isr):
            return errors.INVALID_REQUEST  # at least one member, each once
        for member, member_epoch in members:
            registration = image.brokers.get(member)
            # Ineligible: not a replica, fenced, or (v3) restarted since the leader saw it in sync.
            if (member not in p.replicas or registration is None or registration.fenced
                    or member_epoch not in (-1, registration.broker_epoch)):
                return errors.INELIGIBLE_REPLICA
        leader = None
        if broker_id not in new_isr:
            # The leader resigns: its replica went offline (a corrupt log, broker/replica_manager.py).
            # The first remaining ISR member in replica order leads; the resigning replica is out
            # of the ISR until it has fetched everything again.
            leader = next(b for b in p.replicas if b in new_isr)
        return PartitionChangeRecord(name, topic_id, index, p.partition_epoch, leader, tuple(new_isr))

    # -- producer ids ----------------------------------------------------------------------

    async def _allocate_block(self, broker_id: int, broker_epoch: int, size: int) -> tuple[int, int]:
        for _ in range(DECISION_ATTEMPTS_MAX):  # concurrent requests race for the next id
            first = self.image.next_producer_id
            try:
                results = await self.commit([ProducerIdsRecord(broker_id, broker_epoch, first, size)])
            except errors.InvalidUpdateVersionError:
                continue
            return results[0]["first_id"], results[0]["size"]
        raise errors.RequestTimedOutError("producer id allocation kept racing; retry")

    async def allocate_producer_ids(self, version: int, body: dict) -> tuple[int, dict]:
        """AllocateProducerIds {broker_id, broker_epoch} -> {producer_id_start, producer_id_len}: a
        committed block of PRODUCER_ID_BLOCK_SIZE ids the broker hands out itself."""
        broker_id = body["broker_id"]
        broker = self.image.brokers.get(broker_id)
        if broker is None or broker.broker_epoch != body.get("broker_epoch"):
            return errors.STALE_BROKER_EPOCH, {"error_message": "stale or unknown broker epoch"}
        first, size = await self._allocate_block(broker_id, broker.broker_epoch, PRODUCER_ID_BLOCK_SIZE)
        return errors.NONE, {"producer_id_start": first, "producer_id_len": size}


def incremental_changes(config_def: ConfigDef, overrides: dict[str, Any], configs: list[dict]) -> dict[str, Any]:
    """IncrementalAlterConfigs' ``configs`` ({name, config_operation, value}) on a resource with
    ``overrides``: {key: typed value, or None to remove the override}. As Kafka: a key named twice,
    an unknown operation or a null value with other than DELETE is InvalidRequestError; an
    unknown key, APPEND or SUBTRACT on a key that is not a list, or a value the key's validator
    refuses is ConfigError (INVALID_CONFIG). APPEND and SUBTRACT start from the override, else the
    default; APPEND adds only items not there yet."""
    changes: dict[str, Any] = {}
    for config in configs:
        name, operation, value = config["name"], config["config_operation"], config["value"]
        if name in changes:
            raise InvalidRequestError(f"config key {name!r} appears more than once")
        if operation not in CONFIG_OP_NAMES:
            raise InvalidRequestError(f"{name}: unknown config_operation {operation} "
                                      "(0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)")
        key = config_def.keys.get(name)
        if key is None:
            raise ConfigError(name, "unknown configuration key")
        if operation == CONFIG_OP_DELETE:
            changes[name] = None
            continue
        if value is None:
            raise InvalidRequestError(f"{name}: a null value is only allowed with DELETE")
        if operation == CONFIG_OP_SET:
            changes[name] = key.parse(value)
            continue
        if key.type != "list":
            raise ConfigError(name, f"{CONFIG_OP_NAMES[operation]} is only for list configs; this is a {key.type}")
        items = key.parse(value)
        current = list(overrides.get(name, key.default) or [])
        if operation == CONFIG_OP_APPEND:
            changed = current
            for item in items:
                if item not in changed:
                    changed.append(item)
        else:
            changed = [item for item in current if item not in items]
        changes[name] = key.parse(changed)  # the key's validator sees the resulting list
    return changes


def _check_assignment(image: MetadataImage, index: int, replicas: tuple[int, ...], rf: int) -> None:
    """A manual replica list for new partition ``index``, checked as Kafka's controller does."""
    if not replicas:
        raise InvalidReplicaAssignmentError(f"partition {index}: the manual partition assignment includes "
                                            "an empty replica list.")
    for broker_id in replicas:
        if broker_id not in image.brokers:
            raise InvalidReplicaAssignmentError(f"partition {index}: the manual partition assignment includes "
                                                f"broker {broker_id}, but no such broker is registered.")
    if len(set(replicas)) != len(replicas):
        twice = next(b for b in replicas if replicas.count(b) > 1)
        raise InvalidReplicaAssignmentError(f"partition {index}: the manual partition assignment includes "
                                            f"the broker {twice} more than once.")
    if len(replicas) != rf:
        raise InvalidReplicaAssignmentError(f"partition {index}: the manual partition assignment has "
                                            f"{len(replicas)} replica(s), but the topic's partitions have {rf}.")


_config_text = config_text  # a config value as Kafka writes it ("true", "604800000", "a,b")


def _refuse_static_broker_keys(name: str, configs: list[dict]) -> None:
    """A broker key read once at start (server.properties) cannot be set at run time: INVALID_REQUEST
    naming it, as Kafka answers ("Cannot update these configs dynamically"). Keys no broker knows
    are left to the ConfigDef (INVALID_CONFIG, unknown configuration key)."""
    for config in configs:
        key = config["name"]
        if key not in BROKER_DYNAMIC_CONFIGS and (key in SERVER_CONFIGS or key.startswith(LISTENER_PREFIX)):
            where = f"broker {name}" if name else "the cluster-wide broker default"
            raise InvalidRequestError(
                f"{key}: cannot be updated dynamically ({where}): brokers read it from server.properties at "
                f"start (read-only); the keys that change at run time are {', '.join(BROKER_DYNAMIC_CONFIGS.names())}")


# Kafka's ConfigEntry.ConfigType numbers (DescribeConfigs v3+), by the value's Python type.
_CONFIG_TYPES = ((bool, CONFIG_TYPE_BOOLEAN), (int, CONFIG_TYPE_LONG), (float, CONFIG_TYPE_DOUBLE),
                 (str, CONFIG_TYPE_STRING), (list, CONFIG_TYPE_LIST), (tuple, CONFIG_TYPE_LIST))


def _config_type(value: Any) -> int:
    return next((number for kind, number in _CONFIG_TYPES if isinstance(value, kind)), 0)  # 0: unknown


def _topic_configs(overrides: dict[str, Any]) -> list[dict]:
    """Every topic config as DescribeConfigs lists it: the override, else the default."""
    out = []
    for key in TOPIC_CONFIGS.keys.values():
        value = overrides.get(key.name, key.default)
        out.append({"name": key.name, "value": _config_text(value), "read_only": False,
                    "config_source": CONFIG_SOURCE_TOPIC if key.name in overrides else CONFIG_SOURCE_DEFAULT,
                    "is_sensitive": False, "config_type": _config_type(value)})
    return out
