"""The asyncio admin client: topics, configs, the cluster's brokers, consumer groups.

CreateTopics, CreatePartitions, DeleteTopics, DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs go to any broker, which forwards them to the active controller
(docs/protocol.md), except DescribeConfigs of a broker resource, which goes to that broker;
NOT_CONTROLLER and lost connections are retried on another broker within
``request_timeout_ms``. Group requests go to the group's coordinator (FindCoordinator);
ListGroups to every broker (each knows the groups it coordinates). A coordinator that moved or
is loading is retried within ``request_timeout_ms``.

SCRAM credentials (DescribeUserScramCredentials, AlterUserScramCredentials) take
confluent-kafka's shapes: ``UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism,
iterations), password, salt=None)`` and ``UserScramCredentialDeletion(user, mechanism)``. The
client salts and hashes the password itself (PBKDF2, common/scram.py, with a fresh random salt
unless one is given): only the salted password goes over the wire, and the controllers keep only
what SCRAM needs to check a proof.

ACLs (CreateAcls, DescribeAcls, DeleteAcls) take kafka-python's shapes (client/acl.py: ACL,
ACLFilter, ResourcePattern, ResourcePatternFilter); brokers forward them to the active controller.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import asyncio
import enum
import os
import time
from dataclasses import dataclass, field

from raftka.client.aio.cluster import (API_ALTER_CONFIGS, API_CREATE_TOPICS, API_DELETE_TOPICS,
                                API_DESCRIBE_CLUSTER, API_DESCRIBE_CONFIGS, Cluster)
from raftka.common.messages.admin import CONFIG_SOURCE_DEFAULT, RESOURCE_TOPIC
from raftka.client.aio.fetcher import list_offsets
from raftka.client.aio.subscription_state import EARLIEST, LATEST
from raftka.client.aio.group import PROTOCOL_TYPE, GroupInformation, MemberInformation, find_coordinator
from raftka.client.acl import ACL, ACLFilter, acl_of
from raftka.client.acl import creation_body as acl_creation_body
from raftka.client.acl import filter_body as acl_filter_body
from raftka.client.assignors import decode_assignment, decode_subscription
from raftka.client.aio.configs import CLIENT_DEFAULTS, check_config
from raftka.client.aio.metrics import metric_config, sensor_metrics
from raftka.client.aio.security import SECURITY_DEFAULTS, apply_security
from raftka.client.errors import ConfigError, KafkaTimeoutError
from raftka.common import errors, scram
from raftka.common.api import ApiKey
from raftka.common.errors import RaftkaError
from raftka.common.configs import ConfigSource
from raftka.client.structs import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigResourceType, NewPartitions,
                                   NewTopic, OffsetAndMetadata, TopicPartition)

DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": "localhost:9092",
    "client_id": None,
    "request_timeout_ms": 30_000,
    "retry_backoff_ms": 100,
    "metadata_max_age_ms": 300_000,
    "connection_factory": None,
    **SECURITY_DEFAULTS,
    **CLIENT_DEFAULTS,
}
_RETRIABLE_CODES = tuple(code for code, spec in errors.SPECS.items() if spec.retriable)
_COORDINATOR_RETRY = {errors.NOT_COORDINATOR, errors.COORDINATOR_NOT_AVAILABLE, errors.COORDINATOR_LOAD_IN_PROGRESS}
OFFSET_SPECS = {"latest": LATEST, "earliest": EARLIEST}
ENDPOINT_TYPE_BROKERS = 1  # DescribeCluster: describe the brokers (2, the controllers, is a controller's answer)


@dataclass(frozen=True)
class PartitionReassignment:
    """A reassignment under way (Kafka's PartitionReassignment): the partition's replicas now,
    those being added (catching up) and those to be removed once they have."""

    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


class ElectionType(enum.IntEnum):
    """ElectLeaders' election type, numbered as Kafka (and confluent-kafka) number them."""

    PREFERRED = 0  # the first replica, if it is live and in the ISR
    UNCLEAN = 1  # a partition without a leader: a live replica even outside the ISR (may lose records)


class ScramMechanism(enum.IntEnum):
    """A SASL/SCRAM mechanism, numbered as Kafka (and confluent-kafka) number them."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


@dataclass(frozen=True)
class ScramCredentialInfo:
    """A credential's mechanism and PBKDF2 iteration count (4,096 to 16,384)."""

    mechanism: ScramMechanism
    iterations: int = scram.DEFAULT_ITERATIONS


@dataclass(frozen=True)
class UserScramCredentialsDescription:
    """A user's SCRAM credentials as DescribeUserScramCredentials shows them: never a salt or a key."""

    user: str
    scram_credential_infos: list[ScramCredentialInfo]


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s credential for one mechanism from ``password`` (str, or UTF-8 bytes).
    ``salt``: None picks a fresh random one (what you want). Neither shows in the repr."""

    user: str
    scram_credential_info: ScramCredentialInfo
    password: str | bytes = field(repr=False)
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    """Remove ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: ScramMechanism


def _mechanism_number(mechanism: "ScramMechanism | scram.ScramMechanism | str | int") -> int:
    """Kafka's number of a mechanism given as ScramMechanism, its SASL name or its number; 0 when
    unknown (the controller answers UNSUPPORTED_SASL_MECHANISM)."""
    if isinstance(mechanism, scram.ScramMechanism):
        return mechanism.number
    if isinstance(mechanism, str):
        found = scram.MECHANISMS.get(mechanism.upper().replace("_", "-"))
        return found.number if found is not None else ScramMechanism.UNKNOWN
    return int(mechanism)


def _upsertion_body(upsertion: UserScramCredentialUpsertion) -> dict[str, Any]:
    """The wire entry: the salted password, derived here (the password never leaves the client).
    Iterations out of bounds or an unknown mechanism go as they are, for the controller to refuse."""
    info = upsertion.scram_credential_info
    number = _mechanism_number(info.mechanism)
    salt = os.urandom(scram.SALT_BYTES) if upsertion.salt is None else bytes(upsertion.salt)
    password = upsertion.password
    if isinstance(password, (bytes, bytearray)):
        password = bytes(password).decode("utf-8")
    salted = b""
    mechanism = scram.MECHANISMS_BY_NUMBER.get(number)
    if mechanism is not None and scram.ITERATIONS_MIN <= info.iterations <= scram.ITERATIONS_MAX:
        salted = scram.salted_password(mechanism, password, salt, info.iterations)
    return {"name": upsertion.user, "mechanism": number, "iterations": info.iterations, "salt": salt,
            "salted_password": salted}


def _raise_or_collect(results: dict[str, RaftkaError | None], raise_errors: bool) -> dict[str, RaftkaError | None]:
    if raise_errors:
        for error in results.values():
            if error is not None:
                raise error
    return results


def _config_results(answer: dict[str, Any]) -> dict[str, RaftkaError | None]:
    """{resource name: None or its error} of an AlterConfigs or IncrementalAlterConfigs answer."""
    return {r["resource_name"]: (errors.error_for(r["error_code"], r.get("error_message"), topic=r["resource_name"])
                                 if r.get("error_code") else None)
            for r in answer.get("responses") or []}


def _source_name(number: Any) -> str:
    try:
        return ConfigSource(number).name
    except ValueError:
        return ConfigSource.UNKNOWN.name


def _config_entry(c: dict[str, Any]) -> ConfigEntry:
    """A ConfigEntry of a DescribeConfigs answer's config."""
    return ConfigEntry(c["name"], _config_value(c.get("value")), c.get("config_source") == CONFIG_SOURCE_DEFAULT,
                       _source_name(c.get("config_source")), bool(c.get("is_sensitive")), bool(c.get("read_only")),
                       tuple((s["name"], s.get("value"), _source_name(s.get("source")))
                             for s in c.get("synonyms") or ()))


def _config_value(value: Any) -> Any:
    """A config value as Kafka writes it: a string (booleans lower-case, lists comma-separated)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_config_value(v) for v in value)
    return str(value)


class AdminClient:
    """asyncio admin client; the blocking ``client.AdminClient`` wraps it."""

    def __init__(self, **configs: Any) -> None:
        # The keys every client ignores or refuses alike: client/aio/configs.py.
        self.config = check_config("admin", configs, DEFAULTS)
        mc = metric_config(self.config)
        apply_security(self.config)
        c = self.config
        self.cluster = Cluster(c["bootstrap_servers"], client_id=c["client_id"] or "raftka-admin",
                               request_timeout_ms=c["request_timeout_ms"],
                               retry_backoff_ms=c["retry_backoff_ms"],
                               metadata_max_age_ms=c["metadata_max_age_ms"],
                               connection_factory=c["connection_factory"], metric_config=mc)
        self._bootstrapped = False

    async def start(self) -> None:
        """Start the metadata task and fetch metadata from a bootstrap server, as aiokafka's
        ``start()`` (and kafka-python's constructor) does: NoBrokersAvailable when none answers
        within ``bootstrap_timeout_ms``."""
        self.cluster.start()
        if not self._bootstrapped:
            await self.cluster.connect_bootstrap(self.config["bootstrap_timeout_ms"])
            self._bootstrapped = True

    async def close(self) -> None:
        """Close every connection."""
        await self.cluster.close()

    async def __aenter__(self) -> "AdminClient":
        try:
            await self.start()
        except BaseException:  # __aexit__ does not run when __aenter__ raises: stop the tasks here
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def bootstrap_connected(self) -> bool:
        """True while connected to a broker (kafka-python's name)."""
        return self.cluster.bootstrap_connected()

    def metrics(self) -> dict[str, dict[str, float]]:
        """kafka-python's shape, Kafka's names: ``{"admin-client-metrics": {name: value}}``:
        connections, requests and their latency, as measured (client/aio/metrics.py)."""
        out = self.cluster.metrics()
        out.update(sensor_metrics("request-latency", self.cluster.latency_sensor, "avg", "max"))
        return {"admin-client-metrics": out}

    async def _call(self, api_key: int, body: dict[str, Any], timeout_ms: int | None, *,
                    read_only: bool = False) -> dict[str, Any]:
        # NOT_CONTROLLER means nothing was applied: always safe to send again. A read may also
        # be retried after any other retriable answer; a write that timed out may have happened,
        # so that outcome goes back to the caller.
        retry = _RETRIABLE_CODES if read_only else (errors.NOT_CONTROLLER,)
        code, answer = await self.cluster.request_any(api_key, body, timeout_ms=timeout_ms, retry_codes=retry)
        if code != errors.NONE:
            raise errors.error_for(code, (answer or {}).get("error_message") if isinstance(answer, dict) else None)
        return answer or {}

    async def create_topics(self, new_topics: Sequence[NewTopic], timeout_ms: int | None = None,
                            validate_only: bool = False, raise_errors: bool = True
                            ) -> dict[str, RaftkaError | None]:
        """Create topics. Returns {name: None or the error}; with ``raise_errors`` (default) the
        first error is raised instead (e.g. TopicAlreadyExistsError, InvalidConfigError)."""
        body = {"topics": [{"name": t.name, "num_partitions": t.num_partitions,
                            "replication_factor": t.replication_factor,
                            "configs": [{"name": k, "value": _config_value(v)}
                                        for k, v in (t.topic_configs or {}).items()]}
                           for t in new_topics], "validate_only": validate_only,
                "timeout_ms": timeout_ms or self.config["request_timeout_ms"]}
        answer = await self._call(API_CREATE_TOPICS, body, timeout_ms)
        results: dict[str, RaftkaError | None] = {}
        for t in answer.get("topics") or []:
            code = t.get("error_code", 0) or 0
            results[t["name"]] = (errors.error_for(code, t.get("error_message"), topic=t["name"])
                                  if code else None)
        if not validate_only:
            self.cluster.add_topics(results)
        return _raise_or_collect(results, raise_errors)

    async def delete_topics(self, topics: Sequence[str], timeout_ms: int | None = None,
                            raise_errors: bool = True) -> dict[str, RaftkaError | None]:
        """Delete topics; {name: None or error}, or raise the first error (raise_errors)."""
        answer = await self._call(API_DELETE_TOPICS, {"topics": [{"name": t} for t in topics],
                                                      "timeout_ms": timeout_ms or self.config["request_timeout_ms"]},
                                  timeout_ms)
        results: dict[str, RaftkaError | None] = {}
        for t in answer.get("responses") or []:
            code = t.get("error_code", 0) or 0
            results[t["name"]] = (errors.error_for(code, t.get("error_message"), topic=t["name"])
                                  if code else None)
        return _raise_or_collect(results, raise_errors)

    async def create_partitions(self, topic_partitions: dict[str, NewPartitions | int], timeout_ms: int | None = None,
                                validate_only: bool = False, raise_errors: bool = True
                                ) -> dict[str, RaftkaError | None]:
        """Add partitions to existing topics (CreatePartitions, kafka-python's shape): {topic:
        NewPartitions(total_count, new_assignments=None)} or {topic: total_count}; ``total_count``
        is the new partition count in all, ``new_assignments`` one replica list per added
        partition (None: the controller places them). Returns {topic: None or the error}; with
        ``raise_errors`` (default) the first error is raised instead: InvalidPartitionsError for a
        count not above the current one, InvalidReplicaAssignmentError, UnknownTopicOrPartitionError.
        Producers and consumers see the new partitions at their next metadata refresh."""
        topics = []
        for name, wanted in topic_partitions.items():
            new = NewPartitions(wanted) if isinstance(wanted, int) and not isinstance(wanted, bool) else wanted
            if not isinstance(new, NewPartitions):
                raise TypeError(f"topic {name!r}: give NewPartitions(total_count, new_assignments) or a total "
                                f"count, not {type(wanted).__name__}")
            assignments = (None if new.new_assignments is None
                           else [{"broker_ids": list(replicas)} for replicas in new.new_assignments])
            topics.append({"name": name, "count": new.total_count, "assignments": assignments})
        body = {"topics": topics, "timeout_ms": timeout_ms or self.config["request_timeout_ms"],
                "validate_only": validate_only}
        answer = await self._call(ApiKey.CREATE_PARTITIONS, body, timeout_ms)
        results: dict[str, RaftkaError | None] = {}
        for t in answer.get("results") or []:
            code = t.get("error_code", 0) or 0
            results[t["name"]] = (errors.error_for(code, t.get("error_message"), topic=t["name"])
                                  if code else None)
        return _raise_or_collect(results, raise_errors)

    async def perform_leader_election(self, election_type: "ElectionType | int" = ElectionType.PREFERRED,
                                      topic_partitions: Iterable[TopicPartition] | None = None,
                                      timeout_ms: int | None = None, raise_errors: bool = True
                                      ) -> dict[TopicPartition, RaftkaError | None]:
        """Elect partition leaders (ElectLeaders; kafka-python's name, kafka-leader-election's
        election types): ``ElectionType.PREFERRED`` moves leadership to each partition's first
        replica when it is live and in the ISR; ``UNCLEAN`` elects a leader for a partition that
        has none, outside the ISR if need be (acknowledged records may be lost).
        ``topic_partitions`` None: every partition (the answer then leaves out those that needed
        no election). Returns {TopicPartition: None or its error}; with ``raise_errors`` (default)
        the first error other than ElectionNotNeededError is raised instead."""
        election_type = ElectionType(election_type)
        wanted = None
        if topic_partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in topic_partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            wanted = [{"topic": topic, "partition_id": ids} for topic, ids in by_topic.items()]
        body = {"election_type": int(election_type), "topic_partitions": wanted,
                "timeout_ms": timeout_ms or self.config["request_timeout_ms"]}
        answer = await self._call(ApiKey.ELECT_LEADERS, body, timeout_ms)
        results: dict[TopicPartition, RaftkaError | None] = {}
        for topic in answer.get("replica_election_results") or []:
            for p in topic.get("partition_result") or []:
                code = p.get("error_code", 0) or 0
                results[TopicPartition(topic["topic"], p["partition_id"])] = (
                    errors.error_for(code, p.get("error_message"), topic=topic["topic"]) if code else None)
        if raise_errors:
            for error in results.values():
                if error is not None and error.code != errors.ELECTION_NOT_NEEDED:
                    raise error
        return results

    async def alter_partition_reassignments(self, reassignments: dict[TopicPartition, Sequence[int] | None],
                                            timeout_ms: int | None = None, raise_errors: bool = True
                                            ) -> dict[TopicPartition, RaftkaError | None]:
        """Move partitions to other brokers (AlterPartitionReassignments, KIP-455; Kafka's Java
        name): {TopicPartition: the target replica list, first the preferred leader, or None to
        cancel the partition's reassignment}. Returns once the controller has started them (the
        new replicas then catch up; ``list_partition_reassignments`` shows those under way):
        {TopicPartition: None or its error}, the first error raised with ``raise_errors``
        (InvalidReplicaAssignmentError, UnknownTopicOrPartitionError, NoReassignmentInProgressError)."""
        by_topic: dict[str, list[dict]] = {}
        for tp, replicas in reassignments.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "replicas": None if replicas is None else [int(b) for b in replicas]})
        body = {"timeout_ms": timeout_ms or self.config["request_timeout_ms"],
                "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}
        answer = await self._call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, body, timeout_ms)
        results: dict[TopicPartition, RaftkaError | None] = {}
        for topic in answer.get("responses") or []:
            for p in topic.get("partitions") or []:
                code = p.get("error_code", 0) or 0
                results[TopicPartition(topic["name"], p["partition_index"])] = (
                    errors.error_for(code, p.get("error_message"), topic=topic["name"]) if code else None)
        return _raise_or_collect(results, raise_errors)  # type: ignore[arg-type]

    async def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None,
                                           timeout_ms: int | None = None) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments under way (ListPartitionReassignments), of ``partitions`` (None: all)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [{"name": name, "partition_indexes": indexes} for name, indexes in by_topic.items()]
        answer = await self._call(ApiKey.LIST_PARTITION_REASSIGNMENTS,
                                  {"timeout_ms": timeout_ms or self.config["request_timeout_ms"], "topics": topics},
                                  timeout_ms)
        return {TopicPartition(t["name"], p["partition_index"]):
                PartitionReassignment(list(p["replicas"]), list(p["adding_replicas"]), list(p["removing_replicas"]))
                for t in answer.get("topics") or [] for p in t.get("partitions") or []}

    async def list_topics(self) -> list[str]:
        """Names of every topic, sorted."""
        meta = await self.cluster.refresh_metadata(topics=None)
        return sorted(name for name, info in meta.topics.items() if info.error_code == errors.NONE)

    async def describe_topics(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Per topic: {topic, topic_id, error_code, partitions: [{partition, leader, leader_epoch,
        replicas, isr, offline_replicas}]} (every topic when ``topics`` is None)."""
        names = None if topics is None else list(topics)
        meta = await self.cluster.refresh_metadata(topics=names)
        out = []
        for name in (names if names is not None else sorted(meta.topics)):
            info = meta.topics.get(name)
            if info is None:
                out.append({"topic": name, "topic_id": None,
                            "error_code": errors.UNKNOWN_TOPIC_OR_PARTITION, "partitions": []})
                continue
            out.append({"topic": name, "topic_id": info.topic_id, "error_code": info.error_code,
                        "partitions": [{"partition": p.partition, "leader": p.leader,
                                        "leader_epoch": p.leader_epoch, "replicas": list(p.replicas),
                                        "isr": list(p.isr), "offline_replicas": list(p.offline_replicas)}
                                       for _, p in sorted(info.partitions.items())]})
        return out

    async def describe_cluster(self) -> dict[str, Any]:
        """{cluster_id, controller_id, brokers: [{node_id, host, port, rack, fenced}]}: every
        registered broker, fenced ones included (DescribeCluster v2). ``controller_id`` means
        what Kafka's brokers answer: a live broker, the one that takes controller requests (any
        broker forwards them to the active controller); the active controller itself is the
        quorum's leader, which DescribeQuorum to a controller names."""
        answer = await self._call(API_DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                         "endpoint_type": ENDPOINT_TYPE_BROKERS,
                                                         "include_fenced_brokers": True}, None, read_only=True)
        code = answer.get("error_code", 0) or 0
        if code:
            raise errors.error_for(code, answer.get("error_message"))
        brokers = [{"node_id": b["broker_id"], "host": b["host"], "port": b["port"], "rack": b["rack"],
                    "fenced": b["is_fenced"]} for b in answer["brokers"]]
        return {"cluster_id": answer["cluster_id"], "controller_id": answer["controller_id"],
                "brokers": sorted(brokers, key=lambda b: b["node_id"])}

    @staticmethod
    def _resources(resources: Iterable[ConfigResource | str]) -> list[ConfigResource]:
        """ConfigResources of a list of them, of topic names, or of look-alikes (kafka-python's
        ConfigResource); ConfigError for a resource type other than topic or broker."""
        out = []
        for r in resources:
            if isinstance(r, str):
                r = ConfigResource(ConfigResourceType.TOPIC, r)
            elif not isinstance(r, ConfigResource):
                try:
                    r = ConfigResource(getattr(r.resource_type, "name", r.resource_type), r.name,
                                       getattr(r, "configs", None), getattr(r, "incremental_configs", ()) or ())
                except ValueError as error:
                    raise ConfigError("resource_type", str(error)) from None
            out.append(r)
        return out

    async def describe_configs(self, config_resources: Iterable[ConfigResource | str],
                               timeout_ms: int | None = None, include_synonyms: bool = False
                               ) -> dict[str, dict[str, ConfigEntry]]:
        """{resource name: {key: ConfigEntry(name, value, is_default, source, is_sensitive,
        read_only, synonyms)}}; raises a resource's error. Values are strings, as Kafka's
        AdminClient gives them (``"3600000"``, ``"true"``); a sensitive one is None. A broker
        resource ("1") is asked of that broker, which alone knows its server.properties (Kafka
        does the same); topics and the cluster-wide broker default ("") of any broker. Results
        are keyed by name alone: ask for a topic and a broker of the same name in two calls."""
        resources = self._resources(config_resources)
        by_target: dict[int | None, list[ConfigResource]] = {}  # broker id, or None: any broker
        for r in resources:
            target = int(r.name) if r.resource_type == ConfigResourceType.BROKER and r.name.isdigit() else None
            by_target.setdefault(target, []).append(r)
        out: dict[str, dict[str, ConfigEntry]] = {}
        for target, group in by_target.items():
            body = {"resources": [{"resource_type": int(r.resource_type), "resource_name": r.name,
                                   "configuration_keys": None} for r in group],
                    "include_synonyms": include_synonyms, "include_documentation": False}
            if target is None:
                answer = await self._call(API_DESCRIBE_CONFIGS, body, timeout_ms, read_only=True)
            else:
                answer = await self._call_broker(target, API_DESCRIBE_CONFIGS, body, timeout_ms)
            for r in answer.get("results") or []:
                code = r.get("error_code", 0) or 0
                topic = r.get("resource_name") if r.get("resource_type") == RESOURCE_TOPIC else None
                if code:
                    raise errors.error_for(code, r.get("error_message"), topic=topic)
                out[r["resource_name"]] = {c["name"]: _config_entry(c) for c in r.get("configs") or []}
        return out

    async def _call_broker(self, broker_id: int, api_key: int, body: dict[str, Any],
                           timeout_ms: int | None) -> dict[str, Any]:
        """One request to broker ``broker_id`` (its address from fresh metadata when unknown)."""
        if self.cluster.address_of(broker_id) is None:
            await self.cluster.refresh_metadata(topics=[], timeout_ms=timeout_ms)
            if self.cluster.address_of(broker_id) is None:
                raise errors.BrokerNotAvailableError(f"broker {broker_id} is not a live broker of the cluster")
        code, answer = await self.cluster.request(broker_id, api_key, body, timeout_ms=timeout_ms)
        if code != errors.NONE:
            raise errors.error_for(code, (answer or {}).get("error_message") if isinstance(answer, dict) else None)
        return answer or {}

    async def alter_configs(self, config_resources: Iterable[ConfigResource],
                            timeout_ms: int | None = None, raise_errors: bool = True, validate_only: bool = False
                            ) -> dict[str, RaftkaError | None]:
        """Kafka's AlterConfigs: each resource's ``configs`` becomes its WHOLE set of overrides;
        a key left out (or given None) goes back to its default, as with kafka-python and Kafka's
        tools. To change only some keys, use incremental_alter_configs. A broker resource takes
        only the dynamic broker configs (min.insync.replicas, leader.replication.throttled.rate,
        follower.replication.throttled.rate), for one broker ("1") or cluster-wide ("").
        ``validate_only``: checked, nothing changed. {resource name: None or error}."""
        body = {"resources": [{"resource_type": int(r.resource_type), "resource_name": r.name,
                               "configs": [{"name": k, "value": _config_value(v)}
                                           for k, v in (r.configs or {}).items()]}
                              for r in self._resources(config_resources)], "validate_only": validate_only}
        return _raise_or_collect(_config_results(await self._call(API_ALTER_CONFIGS, body, timeout_ms)),
                                 raise_errors)

    async def incremental_alter_configs(self, config_resources: Iterable[ConfigResource],
                                        timeout_ms: int | None = None, raise_errors: bool = True,
                                        validate_only: bool = False) -> dict[str, RaftkaError | None]:
        """Kafka's IncrementalAlterConfigs: apply each resource's ``incremental_configs``
        (AlterConfigOp: SET, DELETE, and APPEND / SUBTRACT for list configs); keys not named
        keep their value. Each resource's changes apply all or none; broker resources as in
        alter_configs. ``validate_only``: checked, nothing changed. {resource name: None or error}."""
        resources = []
        for r in self._resources(config_resources):
            configs = []
            for op in r.incremental_configs:
                try:
                    op_type = AlterConfigOpType(op.op_type)
                except ValueError:
                    raise ConfigError(op.name, f"op_type must be one of {[t.name for t in AlterConfigOpType]}, "
                                               f"got {op.op_type!r}") from None
                configs.append({"name": op.name, "config_operation": int(op_type),
                                "value": _config_value(op.value)})
            resources.append({"resource_type": int(r.resource_type), "resource_name": r.name, "configs": configs})
        answer = await self._call(ApiKey.INCREMENTAL_ALTER_CONFIGS,
                                  {"resources": resources, "validate_only": validate_only}, timeout_ms)
        return _raise_or_collect(_config_results(answer), raise_errors)

    # -- consumer groups -------------------------------------------------------------------------

    async def _group_request(self, group_id: str, api_key: int, body: dict[str, Any],
                             timeout_ms: int | None = None, *, error_of: Any = None) -> dict[str, Any]:
        """One request to ``group_id``'s coordinator, retried while it moves or loads.
        ``error_of(answer)`` finds the group-level error code in the answer."""
        timeout_ms = timeout_ms or self.config["request_timeout_ms"]
        deadline = time.monotonic() + timeout_ms / 1000
        last: RaftkaError | None = None
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise KafkaTimeoutError(f"the coordinator of group {group_id!r} did not answer within "
                                        f"{timeout_ms} ms (last error: {last})")
            try:
                _node, host, port = await find_coordinator(self.cluster, group_id, left_ms)
                code, answer = await self.cluster.request_address((host, port), api_key, body, timeout_ms=left_ms)
            except RaftkaError as error:
                if not error.retriable:
                    raise
                last = error
                await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)
                continue
            if code != errors.NONE:
                raise errors.error_for(code, (answer or {}).get("error_message"))
            answer = answer or {}
            code = (error_of or (lambda a: a.get("error_code", 0)))(answer) or 0
            if code in _COORDINATOR_RETRY:
                last = errors.error_for(code)
                await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)
                continue
            return answer

    async def list_consumer_groups(self, broker_ids: Iterable[int] | None = None,
                                   states: Iterable[str] | None = None) -> list[tuple[str, str]]:
        """[(group_id, protocol_type)] of every group, asking every broker (or ``broker_ids``);
        ``states`` keeps only groups in those states (Stable, Empty, PreparingRebalance, ...)."""
        meta = await self.cluster.refresh_metadata(topics=[])
        nodes = sorted(meta.brokers) if broker_ids is None else list(broker_ids)
        body = {"states_filter": list(states or [])}
        found: dict[str, str] = {}
        for node in nodes:
            deadline = time.monotonic() + self.config["request_timeout_ms"] / 1000
            while True:
                code, answer = await self.cluster.request(node, ApiKey.LIST_GROUPS, body)
                if code != errors.NONE:
                    raise errors.error_for(code, (answer or {}).get("error_message"))
                if answer.get("error_code") == errors.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
                    await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)
                    continue
                break
            for g in answer.get("groups") or []:
                found[g["group_id"]] = g.get("protocol_type") or ""
        return sorted(found.items())

    async def describe_consumer_groups(self, group_ids: Iterable[str], group_coordinator_id: int | None = None,
                                       include_authorized_operations: bool = False) -> list[GroupInformation]:
        """GroupInformation per group: state, protocol (assignor), members with their decoded
        subscription and assignment. A group that does not exist is shown as Dead."""
        out = []
        for group_id in group_ids:
            answer = await self._group_request(group_id, ApiKey.DESCRIBE_GROUPS, {"groups": [group_id]},
                                               error_of=lambda a: (a.get("groups") or [{}])[0].get("error_code"))
            g = (answer.get("groups") or [{}])[0]
            consumer = g.get("protocol_type") == PROTOCOL_TYPE
            members = []
            for m in g.get("members") or []:
                metadata, assignment = bytes(m.get("member_metadata") or b""), bytes(m.get("member_assignment") or b"")
                if consumer:
                    try:
                        metadata = decode_subscription(metadata, m.get("group_instance_id")) if metadata else None
                        assignment = decode_assignment(assignment)
                    except ValueError:
                        pass  # shown raw
                members.append(MemberInformation(m["member_id"], m.get("client_id") or "", m.get("client_host") or "",
                                                 metadata, assignment, m.get("group_instance_id")))
            out.append(GroupInformation(g.get("error_code", 0), group_id, g.get("group_state") or "",
                                        g.get("protocol_type") or "", g.get("protocol_data") or "", members, None,
                                        -1, g.get("generation_id", -1)))
        return out

    async def list_consumer_group_offsets(self, group_id: str, group_coordinator_id: int | None = None,
                                          partitions: Iterable[TopicPartition] | None = None
                                          ) -> dict[TopicPartition, OffsetAndMetadata]:
        """{TopicPartition: OffsetAndMetadata} of what ``group_id`` committed (all partitions, or
        only ``partitions``; those without a committed offset are left out)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp[0], []).append(tp[1])
            topics = [{"name": t, "partition_indexes": p} for t, p in by_topic.items()]
        answer = await self._group_request(group_id, ApiKey.OFFSET_FETCH, {"group_id": group_id, "topics": topics})
        out = {}
        for t in answer.get("topics") or []:
            for p in t.get("partitions") or []:
                if p.get("committed_offset", -1) >= 0:
                    out[TopicPartition(t["name"], p["partition_index"])] = OffsetAndMetadata(
                        p["committed_offset"], p.get("metadata") or "", p.get("committed_leader_epoch", -1))
        return out

    async def alter_consumer_group_offsets(self, group_id: str, offsets: dict[TopicPartition, Any]) -> None:
        """Set committed offsets of a group without members (Kafka's alterConsumerGroupOffsets);
        NonEmptyGroupError while it has members."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, value in offsets.items():
            o = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
            topics.setdefault(tp[0], []).append({"partition_index": tp[1], "committed_offset": o.offset,
                                                 "committed_leader_epoch": o.leader_epoch,
                                                 "committed_metadata": o.metadata})
        body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}

        def first_error(answer: dict[str, Any]) -> int:
            return next((p["error_code"] for t in answer.get("topics") or [] for p in t.get("partitions") or []
                         if p.get("error_code")), 0)
        answer = await self._group_request(group_id, ApiKey.OFFSET_COMMIT, body, error_of=first_error)
        code = first_error(answer)
        if code in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.REBALANCE_IN_PROGRESS):
            raise errors.for_code(errors.NON_EMPTY_GROUP)(
                f"group {group_id!r} has active members; its offsets can be changed only while it is empty "
                "(stop its consumers first)")
        if code:
            raise errors.error_for(code, f"altering the offsets of group {group_id!r}")

    async def delete_consumer_groups(self, group_ids: Iterable[str], group_coordinator_id: int | None = None
                                     ) -> list[tuple[str, RaftkaError | None]]:
        """Delete groups without members, with their offsets: [(group_id, None or the error:
        NonEmptyGroupError, GroupIdNotFoundError)]."""
        out = []
        for group_id in group_ids:
            answer = await self._group_request(group_id, ApiKey.DELETE_GROUPS, {"groups_names": [group_id]},
                                               error_of=lambda a: (a.get("results") or [{}])[0].get("error_code"))
            code = (answer.get("results") or [{}])[0].get("error_code", 0)
            out.append((group_id, errors.error_for(code, f"group {group_id!r}") if code else None))
        return out

    async def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                                            ) -> dict[TopicPartition, RaftkaError | None]:
        """Delete committed offsets of a group (OffsetDelete, Kafka's deleteConsumerGroupOffsets):
        {TopicPartition: None or the error}, GroupSubscribedToTopicError for a topic a member of
        the group subscribes to. Raises the group's error: GroupIdNotFoundError, NonEmptyGroupError
        (a group with members that is not a consumer group)."""
        by_topic: dict[str, list[dict[str, int]]] = {}
        for tp in partitions:
            by_topic.setdefault(tp[0], []).append({"partition_index": tp[1]})
        if not by_topic:
            return {}
        body = {"group_id": group_id, "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()]}

        def retry_code(answer: dict[str, Any]) -> int:
            # Deleting again is harmless: a write the coordinator lost is retried like a moved group.
            return answer.get("error_code") or next(
                (p["error_code"] for t in answer.get("topics") or [] for p in t.get("partitions") or []
                 if p.get("error_code") in _COORDINATOR_RETRY), 0)
        answer = await self._group_request(group_id, ApiKey.OFFSET_DELETE, body, error_of=retry_code)
        code = answer.get("error_code", 0)
        if code:
            raise errors.error_for(code, f"deleting offsets of group {group_id!r}")
        out: dict[TopicPartition, RaftkaError | None] = {}
        for t in answer.get("topics") or []:
            for p in t.get("partitions") or []:
                code = p.get("error_code", 0)
                out[TopicPartition(t["name"], p["partition_index"])] = (
                    errors.error_for(code, f"group {group_id!r}", topic=t["name"], partition=p["partition_index"])
                    if code else None)
        return out

    async def list_offsets(self, topic_partitions: dict[TopicPartition, Any]) -> dict[TopicPartition, int]:
        """Offsets by spec ({tp: "latest" | "earliest" | timestamp ms}, Kafka's listOffsets):
        latest is the high watermark, earliest the log start; a timestamp gives the first offset
        at or after it (-1 when none)."""
        query = {}
        for tp, spec in topic_partitions.items():
            value = OFFSET_SPECS.get(spec, spec) if isinstance(spec, str) else spec
            if not isinstance(value, int):
                raise ValueError(f"offset spec for {tp} must be 'latest', 'earliest' or a timestamp, got {spec!r}")
            query[TopicPartition(*tp)] = value
        found = await list_offsets(self.cluster, query, self.config["request_timeout_ms"],
                                   self.config["retry_backoff_ms"])
        return {tp: offset for tp, (offset, _ts) in found.items()}

    async def delete_records(self, records_to_delete: dict[TopicPartition, int], timeout_ms: int | None = None
                             ) -> dict[TopicPartition, dict[str, int]]:
        """DeleteRecords (kafka-python's shape): {tp: offset} -> {tp: {"partition_index",
        "low_watermark", "error_code"}} once every in-sync replica has deleted the records before
        ``offset`` (-1: the high watermark). Each partition goes to its leader; a moved leader is
        followed until ``timeout_ms``. Raises the first partition's typed error."""
        timeout_ms = self.config["request_timeout_ms"] if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        left = {TopicPartition(*tp): offset for tp, offset in records_to_delete.items()}
        for topic in {tp.topic for tp in left}:
            await self.cluster.partitions_for(topic, timeout_ms)
        done: dict[TopicPartition, dict[str, int]] = {}
        while left:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise KafkaTimeoutError(f"DeleteRecords not answered within {timeout_ms} ms for "
                                        f"{', '.join(f'{tp.topic}-{tp.partition}' for tp in sorted(left))}")
            by_leader: dict[int, dict[str, list[dict[str, int]]]] = {}
            for tp, offset in left.items():
                leader = self.cluster.metadata.leader_for(tp)
                if leader is not None:
                    by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(
                        {"partition_index": tp.partition, "offset": offset})
            answers = await asyncio.gather(*(
                self.cluster.request(node, ApiKey.DELETE_RECORDS, {
                    "timeout_ms": left_ms, "topics": [{"name": t, "partitions": p} for t, p in topics.items()]},
                    timeout_ms=left_ms) for node, topics in by_leader.items()), return_exceptions=True)
            for answer in answers:
                if isinstance(answer, RaftkaError) and answer.retriable:
                    continue  # its partitions stay in ``left``
                if isinstance(answer, BaseException):
                    raise answer
                for topic in answer[1].get("topics") or []:
                    for part in topic["partitions"]:
                        tp = TopicPartition(topic["name"], part["partition_index"])
                        code = part["error_code"]
                        if code in (errors.NOT_LEADER_OR_FOLLOWER, errors.LEADER_NOT_AVAILABLE):
                            continue
                        if code != errors.NONE:
                            raise errors.error_for(code, f"deleting records of {tp.topic}-{tp.partition}",
                                                   topic=tp.topic, partition=tp.partition)
                        done[tp] = part
                        left.pop(tp, None)
            if left:
                self.cluster.request_update()
                await asyncio.sleep(self.config["retry_backoff_ms"] / 1000)
        return done

    async def alter_user_scram_credentials(
            self, alterations: Sequence[UserScramCredentialUpsertion | UserScramCredentialDeletion],
            timeout_ms: int | None = None, raise_errors: bool = True) -> dict[str, RaftkaError | None]:
        """Set and remove users' SCRAM credentials (AlterUserScramCredentials): {user: None or the
        error}; with ``raise_errors`` (default) the first error is raised instead. A user may be
        named once per call (DuplicateResourceError for all its alterations otherwise); users
        succeed or fail independently. Errors: UnacceptableCredentialError (iterations outside
        4,096..16,384, empty salt), UnsupportedSaslMechanismError, ResourceNotFoundError
        (deleting a credential that is not there), InvalidRequestError (an empty user name)."""
        deletions, upsertions = [], []
        for alteration in alterations:
            if isinstance(alteration, UserScramCredentialUpsertion):
                upsertions.append(_upsertion_body(alteration))
            elif isinstance(alteration, UserScramCredentialDeletion):
                deletions.append({"name": alteration.user, "mechanism": _mechanism_number(alteration.mechanism)})
            else:
                raise TypeError(f"give UserScramCredentialUpsertion or UserScramCredentialDeletion, "
                                f"not {type(alteration).__name__}")
        answer = await self._call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                                  {"deletions": deletions, "upsertions": upsertions}, timeout_ms)
        results: dict[str, RaftkaError | None] = {}
        for r in answer.get("results") or []:
            code = r.get("error_code", 0) or 0
            results[r["user"]] = errors.error_for(code, r.get("error_message")) if code else None
        for alteration in alterations:  # an answer that failed as a whole lists no user
            if alteration.user not in results:
                results[alteration.user] = errors.error_for(
                    errors.UNKNOWN_SERVER_ERROR, f"no result for user {alteration.user!r}: the request failed as a "
                                                 "whole (it may still have taken effect)")
        return _raise_or_collect(results, raise_errors)

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None,
                                              timeout_ms: int | None = None, raise_errors: bool = True
                                              ) -> dict[str, UserScramCredentialsDescription | RaftkaError]:
        """Users' SCRAM mechanisms and iterations (DescribeUserScramCredentials; never a salt or a
        key): {user: UserScramCredentialsDescription}, every user with a credential when
        ``users`` is None. A named user without a credential is ResourceNotFoundError, raised
        unless ``raise_errors=False``, which puts the error in its place."""
        names = None if users is None else list(users)
        answer = await self._call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                                  {"users": None if names is None else [{"name": n} for n in names]},
                                  timeout_ms, read_only=True)
        if answer.get("error_code"):
            raise errors.error_for(answer["error_code"], answer.get("error_message"))
        out: dict[str, UserScramCredentialsDescription | RaftkaError] = {}
        for r in answer.get("results") or []:
            code = r.get("error_code", 0) or 0
            if code:
                error = errors.error_for(code, r.get("error_message"))
                if raise_errors:
                    raise error
                out[r["user"]] = error
                continue
            infos = [ScramCredentialInfo(_known_mechanism(c["mechanism"]), c["iterations"])
                     for c in r.get("credential_infos") or []]
            out[r["user"]] = UserScramCredentialsDescription(r["user"], infos)
        return out

    async def create_acls(self, acls: Sequence[ACL], timeout_ms: int | None = None
                          ) -> dict[str, list[Any]]:
        """Create ACLs (CreateAcls): ``{"succeeded": [ACL], "failed": [(ACL, error)]}`` (kafka-python's
        shape, with each failure beside its ACL). An ACL that exists already succeeds. Errors:
        InvalidRequestError naming the field (a principal that is not User:<name>, a host that
        is not an IP address or *, a CLUSTER not named kafka-cluster)."""
        creations = [acl_creation_body(entry) for entry in acls]
        answer = await self._call(ApiKey.CREATE_ACLS, {"creations": creations}, timeout_ms)
        results = answer.get("results") or []
        out: dict[str, list[Any]] = {"succeeded": [], "failed": []}
        for index, entry in enumerate(acls):
            if index >= len(results):  # an answer that failed as a whole
                out["failed"].append((entry, errors.error_for(errors.UNKNOWN_SERVER_ERROR, "no result for this ACL")))
                continue
            code = results[index].get("error_code", 0) or 0
            if code:
                out["failed"].append((entry, errors.error_for(code, results[index].get("error_message"))))
            else:
                out["succeeded"].append(entry)
        return out

    async def describe_acls(self, acl_filter: ACLFilter, timeout_ms: int | None = None) -> tuple[list[ACL], None]:
        """The ACLs ``acl_filter`` selects (DescribeAcls), as kafka-python returns them:
        ``(acls, None)``; an error (InvalidRequestError for a malformed filter) is raised."""
        answer = await self._call(ApiKey.DESCRIBE_ACLS, acl_filter_body(acl_filter), timeout_ms, read_only=True)
        if answer.get("error_code"):
            raise errors.error_for(answer["error_code"], answer.get("error_message"))
        return [acl_of(r["resource_type"], r["resource_name"], r.get("pattern_type", 3), a)
                for r in answer.get("resources") or [] for a in r.get("acls") or []], None

    async def delete_acls(self, acl_filters: Sequence[ACLFilter], timeout_ms: int | None = None
                          ) -> list[tuple[ACLFilter, list[ACL], RaftkaError | None]]:
        """Delete the ACLs each filter selects (DeleteAcls): per filter, in order,
        ``(filter, [deleted ACL], None or the error)`` (an ACL two filters select is listed under
        the first)."""
        bodies = [acl_filter_body(f) for f in acl_filters]
        answer = await self._call(ApiKey.DELETE_ACLS, {"filters": bodies}, timeout_ms)
        results = answer.get("filter_results") or []
        out: list[tuple[ACLFilter, list[ACL], RaftkaError | None]] = []
        for index, acl_filter in enumerate(acl_filters):
            if index >= len(results):
                out.append((acl_filter, [], errors.error_for(errors.UNKNOWN_SERVER_ERROR, "no result for this filter")))
                continue
            r = results[index]
            code = r.get("error_code", 0) or 0
            matched = [acl_of(m["resource_type"], m["resource_name"], m.get("pattern_type", 3), m)
                       for m in r.get("matching_acls") or []]
            out.append((acl_filter, matched, errors.error_for(code, r.get("error_message")) if code else None))
        return out

    async def describe_consumer_group_lag(self, group_id: str) -> list[dict[str, Any]]:
        """Per partition the group owns or committed: {topic, partition, committed_offset (-1:
        none), log_end_offset (the high watermark), lag (None without a commit), member_id,
        client_id, host}: kafka-consumer-groups --describe as data."""
        info = (await self.describe_consumer_groups([group_id]))[0]
        committed = await self.list_consumer_group_offsets(group_id)
        owner: dict[TopicPartition, MemberInformation] = {}
        for m in info.members:
            for tp in getattr(m.member_assignment, "partitions", None) or []:
                owner[tp] = m
        tps = sorted(set(committed) | set(owner))
        ends = await self.list_offsets({tp: "latest" for tp in tps}) if tps else {}
        rows = []
        for tp in tps:
            c = committed.get(tp)
            end = ends.get(tp, -1)
            m = owner.get(tp)
            rows.append({"topic": tp.topic, "partition": tp.partition, "committed_offset": c.offset if c else -1,
                         "log_end_offset": end, "lag": max(0, end - c.offset) if c is not None and end >= 0 else None,
                         "member_id": m.member_id if m else None, "client_id": m.client_id if m else None,
                         "host": m.client_host if m else None})
        return rows


def _known_mechanism(number: int) -> ScramMechanism:
    try:
        return ScramMechanism(number)
    except ValueError:
        return ScramMechanism.UNKNOWN
