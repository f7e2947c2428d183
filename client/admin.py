"""The blocking admin client, shaped like kafka-python's KafkaAdminClient."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from raftka.client._sync import LoopThread
from raftka.client.acl import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                               ResourcePattern, ResourcePatternFilter, ResourceType)
from raftka.client.aio.admin import AdminClient as AioAdminClient
from raftka.client.aio.admin import (ElectionType, PartitionReassignment, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                     UserScramCredentialsDescription, UserScramCredentialUpsertion)
from raftka.common.errors import RaftkaError
from raftka.client.aio.group import GroupInformation
from raftka.client.structs import (ConfigEntry, ConfigResource, NewPartitions, NewTopic, OffsetAndMetadata,
                                   TopicPartition)


class AdminClient:
    """Create, delete, list and describe topics, add partitions, describe the cluster, describe and alter topic
    configs, list and describe consumer groups, their offsets and lag, delete groups and offsets, set, remove and
    describe users' SCRAM credentials, create, describe and delete ACLs.
    Arguments: ``bootstrap_servers``, ``client_id``, ``request_timeout_ms``, ``retry_backoff_ms``, the
    security keys (client/aio/security.py) and those every client takes (client/aio/configs.py). The
    constructor fetches metadata from a bootstrap server first, as kafka-python's does:
    NoBrokersAvailable when none answers within ``bootstrap_timeout_ms``."""

    def __init__(self, **configs: Any) -> None:
        self._io = LoopThread("raftka-admin-io")
        try:
            self._aio = self._io.run(_make(configs))
        except BaseException:
            self._io.stop()
            raise

    def create_topics(self, new_topics: Sequence[NewTopic], timeout_ms: int | None = None,
                      validate_only: bool = False, raise_errors: bool = True) -> dict[str, RaftkaError | None]:
        """Create topics; raises the first error (TopicAlreadyExistsError, ...) unless
        ``raise_errors=False``, which returns {name: None or error}."""
        return self._io.run(self._aio.create_topics(new_topics, timeout_ms, validate_only, raise_errors))

    def delete_topics(self, topics: Sequence[str], timeout_ms: int | None = None,
                      raise_errors: bool = True) -> dict[str, RaftkaError | None]:
        """Delete topics; raises the first error unless ``raise_errors=False``."""
        return self._io.run(self._aio.delete_topics(topics, timeout_ms, raise_errors))

    def create_partitions(self, topic_partitions: dict[str, NewPartitions | int], timeout_ms: int | None = None,
                          validate_only: bool = False, raise_errors: bool = True) -> dict[str, RaftkaError | None]:
        """Add partitions to topics: {topic: NewPartitions(total_count, new_assignments=None)} (or
        {topic: total_count}); raises the first error (InvalidPartitionsError, ...) unless
        ``raise_errors=False``, which returns {topic: None or error}."""
        return self._io.run(self._aio.create_partitions(topic_partitions, timeout_ms, validate_only, raise_errors))

    def perform_leader_election(self, election_type: "ElectionType | int" = ElectionType.PREFERRED,
                                topic_partitions: Any = None, timeout_ms: int | None = None,
                                raise_errors: bool = True) -> dict[Any, RaftkaError | None]:
        """Elect partition leaders (ElectLeaders): ElectionType.PREFERRED or UNCLEAN, for
        ``topic_partitions`` (TopicPartitions; None: all). {TopicPartition: None or error};
        raises the first error but ElectionNotNeededError unless ``raise_errors=False``."""
        return self._io.run(self._aio.perform_leader_election(election_type, topic_partitions, timeout_ms,
                                                              raise_errors))

    def alter_partition_reassignments(self, reassignments: dict[Any, Sequence[int] | None],
                                      timeout_ms: int | None = None,
                                      raise_errors: bool = True) -> dict[Any, RaftkaError | None]:
        """Move partitions to other brokers: {TopicPartition: target replicas, or None to cancel}
        (AlterPartitionReassignments); raises the first error unless ``raise_errors=False``."""
        return self._io.run(self._aio.alter_partition_reassignments(reassignments, timeout_ms, raise_errors))

    def list_partition_reassignments(self, partitions: Any = None,
                                     timeout_ms: int | None = None) -> dict[Any, PartitionReassignment]:
        """{TopicPartition: PartitionReassignment(replicas, adding_replicas, removing_replicas)} of
        the reassignments under way (of ``partitions``; None: all)."""
        return self._io.run(self._aio.list_partition_reassignments(partitions, timeout_ms))

    def list_topics(self) -> list[str]:
        """Every topic name, sorted."""
        return self._io.run(self._aio.list_topics())

    def describe_topics(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Partitions with leader, leader epoch, replicas and ISR, per topic."""
        return self._io.run(self._aio.describe_topics(topics))

    def describe_cluster(self) -> dict[str, Any]:
        """Cluster id, active controller id, brokers (with their fenced state)."""
        return self._io.run(self._aio.describe_cluster())

    def describe_configs(self, config_resources: Iterable[ConfigResource | str],
                         include_synonyms: bool = False) -> dict[str, dict[str, ConfigEntry]]:
        """{resource name: {key: ConfigEntry(name, value, is_default, source, is_sensitive,
        read_only, synonyms)}} for topic names or ConfigResources (topics, brokers by id, "" for
        the cluster-wide broker default); ``include_synonyms``: each broker key's fallbacks too."""
        return self._io.run(self._aio.describe_configs(list(config_resources), include_synonyms=include_synonyms))

    def alter_configs(self, config_resources: Iterable[ConfigResource], raise_errors: bool = True,
                      validate_only: bool = False) -> dict[str, RaftkaError | None]:
        """Kafka's AlterConfigs: each resource's ``configs`` REPLACES its whole set of overrides
        (a key left out goes back to its default, as kafka-python's alter_configs does with a Kafka
        broker). For a partial change use incremental_alter_configs. Broker resources take only
        the dynamic broker configs. {resource name: None or error}."""
        return self._io.run(self._aio.alter_configs(list(config_resources), None, raise_errors, validate_only))

    def incremental_alter_configs(self, config_resources: Iterable[ConfigResource], raise_errors: bool = True,
                                  validate_only: bool = False) -> dict[str, RaftkaError | None]:
        """Kafka's IncrementalAlterConfigs: apply each resource's ``incremental_configs``
        (AlterConfigOp(name, value, AlterConfigOpType.SET / DELETE / APPEND / SUBTRACT)); keys not
        named keep their value. {resource name: None or error}; raises the first error unless
        ``raise_errors=False``; ``validate_only``: checked, nothing changed."""
        return self._io.run(self._aio.incremental_alter_configs(list(config_resources), None, raise_errors,
                                                                validate_only))

    def list_consumer_groups(self, broker_ids: Iterable[int] | None = None,
                             states: Iterable[str] | None = None) -> list[tuple[str, str]]:
        """[(group_id, protocol_type)] of every group (only those in ``states`` when given)."""
        return self._io.run(self._aio.list_consumer_groups(broker_ids, states))

    def describe_consumer_groups(self, group_ids: Iterable[str], group_coordinator_id: int | None = None,
                                 include_authorized_operations: bool = False) -> list[GroupInformation]:
        """Per group: state, assignor, members with decoded subscriptions and assignments."""
        return self._io.run(self._aio.describe_consumer_groups(list(group_ids)))

    def list_consumer_group_offsets(self, group_id: str, group_coordinator_id: int | None = None,
                                    partitions: Iterable[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """{TopicPartition: OffsetAndMetadata} the group committed."""
        return self._io.run(self._aio.list_consumer_group_offsets(
            group_id, partitions=list(partitions) if partitions is not None else None))

    def alter_consumer_group_offsets(self, group_id: str, offsets: dict[TopicPartition, Any]) -> None:
        """Set committed offsets of a group without members (NonEmptyGroupError otherwise)."""
        return self._io.run(self._aio.alter_consumer_group_offsets(group_id, offsets))

    def delete_consumer_groups(self, group_ids: Iterable[str], group_coordinator_id: int | None = None
                               ) -> list[tuple[str, RaftkaError | None]]:
        """Delete groups without members, with their offsets: [(group_id, None or error)]."""
        return self._io.run(self._aio.delete_consumer_groups(list(group_ids)))

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                                      ) -> dict[TopicPartition, RaftkaError | None]:
        """Delete a group's committed offsets: {TopicPartition: None or error
        (GroupSubscribedToTopicError)}; raises GroupIdNotFoundError, NonEmptyGroupError."""
        return self._io.run(self._aio.delete_consumer_group_offsets(group_id, list(partitions)))

    def list_offsets(self, topic_partitions: dict[TopicPartition, Any]) -> dict[TopicPartition, int]:
        """{tp: "latest" | "earliest" | timestamp} -> {tp: offset}."""
        return self._io.run(self._aio.list_offsets(topic_partitions))

    def delete_records(self, records_to_delete: dict[TopicPartition, int], timeout_ms: int | None = None
                       ) -> dict[TopicPartition, dict[str, int]]:
        """Delete the records before each offset (-1: the high watermark): {tp: {"low_watermark",
        ...}} once every in-sync replica has; raises the first partition's typed error."""
        return self._io.run(self._aio.delete_records(records_to_delete, timeout_ms))

    def describe_consumer_group_lag(self, group_id: str) -> list[dict[str, Any]]:
        """Per partition: committed offset, log end offset (high watermark), lag, owner."""
        return self._io.run(self._aio.describe_consumer_group_lag(group_id))

    def alter_user_scram_credentials(
            self, alterations: Sequence[UserScramCredentialUpsertion | UserScramCredentialDeletion],
            timeout_ms: int | None = None, raise_errors: bool = True) -> dict[str, RaftkaError | None]:
        """Set (UserScramCredentialUpsertion) and remove (UserScramCredentialDeletion) users'
        SCRAM credentials: {user: None or error}; raises the first error unless
        ``raise_errors=False``. The password is salted and hashed here: it never goes over the wire."""
        return self._io.run(self._aio.alter_user_scram_credentials(alterations, timeout_ms, raise_errors))

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None, timeout_ms: int | None = None,
                                        raise_errors: bool = True
                                        ) -> dict[str, UserScramCredentialsDescription | RaftkaError]:
        """{user: UserScramCredentialsDescription(user, [ScramCredentialInfo(mechanism,
        iterations)])} of ``users`` (None: every user with a credential); a named user without
        one raises ResourceNotFoundError unless ``raise_errors=False``."""
        return self._io.run(self._aio.describe_user_scram_credentials(users, timeout_ms, raise_errors))

    def create_acls(self, acls: Sequence[ACL], timeout_ms: int | None = None) -> dict[str, list[Any]]:
        """Create ACLs: {"succeeded": [ACL], "failed": [(ACL, error)]}; an existing ACL succeeds."""
        return self._io.run(self._aio.create_acls(acls, timeout_ms))

    def describe_acls(self, acl_filter: ACLFilter, timeout_ms: int | None = None) -> tuple[list[ACL], None]:
        """(the ACLs ``acl_filter`` selects, None) as kafka-python returns them; errors are raised."""
        return self._io.run(self._aio.describe_acls(acl_filter, timeout_ms))

    def delete_acls(self, acl_filters: Sequence[ACLFilter], timeout_ms: int | None = None
                    ) -> list[tuple[ACLFilter, list[ACL], RaftkaError | None]]:
        """Delete what each filter selects: [(filter, [deleted ACL], None or error)], in filter order."""
        return self._io.run(self._aio.delete_acls(acl_filters, timeout_ms))

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """kafka-python's shape and Kafka's names: ``{"admin-client-metrics": {"request-total":
        ..., "request-latency-avg": ..., "connection-count": ...}}``, as measured."""
        return self._io.run(_on_loop(self._aio.metrics))

    def bootstrap_connected(self) -> bool:
        """True while connected to a broker (kafka-python's name)."""
        if not self._io.alive:
            return False
        return self._io.run(_on_loop(self._aio.bootstrap_connected))

    def close(self) -> None:
        """Close connections and the I/O thread. Safe to call twice."""
        if not self._io.alive:
            return
        try:
            self._io.run(self._aio.close(), 30)
        finally:
            self._io.stop()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


async def _on_loop(fn: Any) -> Any:
    return fn()  # a plain call, made on the I/O thread that owns what it reads


async def _make(configs: dict[str, Any]) -> AioAdminClient:
    admin = AioAdminClient(**configs)
    try:
        await admin.start()  # NoBrokersAvailable from the constructor, as kafka-python's
    except BaseException:
        await admin.close()
        raise
    return admin


__all__ = ["AdminClient", "ACL", "ACLFilter", "ACLOperation", "ACLPermissionType", "ACLResourcePatternType",
           "ElectionType", "PartitionReassignment", "ResourcePattern", "ResourcePatternFilter", "ResourceType", "ScramCredentialInfo", "ScramMechanism", "UserScramCredentialDeletion",
           "UserScramCredentialsDescription", "UserScramCredentialUpsertion"]
