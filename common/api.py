"""API keys, names and versions of Raftka's wire protocol (docs/protocol.md).

Numbers and names are Kafka's. Every API is at version 0 today; ``SUPPORTED_API_VERSIONS`` is
what a server built on :class:`raftka.common.server.Server` accepts by default, and
:func:`api_versions_body` builds the ApiVersions (18) answer for the keys a server serves.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Final, Iterable, Mapping


class ApiKey(IntEnum):
    """Kafka's api keys, as Raftka uses them."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    ALLOCATE_PRODUCER_IDS = 67


# Kafka's display names (as in its ApiKeys enum), for logs and metrics labels.
API_NAMES: Final[dict[int, str]] = {
    ApiKey.PRODUCE: "Produce",
    ApiKey.FETCH: "Fetch",
    ApiKey.LIST_OFFSETS: "ListOffsets",
    ApiKey.METADATA: "Metadata",
    ApiKey.OFFSET_COMMIT: "OffsetCommit",
    ApiKey.OFFSET_FETCH: "OffsetFetch",
    ApiKey.FIND_COORDINATOR: "FindCoordinator",
    ApiKey.JOIN_GROUP: "JoinGroup",
    ApiKey.HEARTBEAT: "Heartbeat",
    ApiKey.LEAVE_GROUP: "LeaveGroup",
    ApiKey.SYNC_GROUP: "SyncGroup",
    ApiKey.DESCRIBE_GROUPS: "DescribeGroups",
    ApiKey.LIST_GROUPS: "ListGroups",
    ApiKey.API_VERSIONS: "ApiVersions",
    ApiKey.CREATE_TOPICS: "CreateTopics",
    ApiKey.DELETE_TOPICS: "DeleteTopics",
    ApiKey.DELETE_RECORDS: "DeleteRecords",
    ApiKey.INIT_PRODUCER_ID: "InitProducerId",
    ApiKey.OFFSET_FOR_LEADER_EPOCH: "OffsetsForLeaderEpoch",
    ApiKey.DESCRIBE_CONFIGS: "DescribeConfigs",
    ApiKey.ALTER_CONFIGS: "AlterConfigs",
    ApiKey.CREATE_PARTITIONS: "CreatePartitions",
    ApiKey.DELETE_GROUPS: "DeleteGroups",
    ApiKey.INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
    ApiKey.OFFSET_DELETE: "OffsetDelete",
    ApiKey.DESCRIBE_QUORUM: "DescribeQuorum",
    ApiKey.ALTER_PARTITION: "AlterPartition",
    ApiKey.FETCH_SNAPSHOT: "FetchSnapshot",
    ApiKey.DESCRIBE_CLUSTER: "DescribeCluster",
    ApiKey.BROKER_REGISTRATION: "BrokerRegistration",
    ApiKey.BROKER_HEARTBEAT: "BrokerHeartbeat",
    ApiKey.UNREGISTER_BROKER: "UnregisterBroker",
    ApiKey.ALLOCATE_PRODUCER_IDS: "AllocateProducerIds",
}

# api key -> (min_version, max_version) accepted by default: everything at version 0.
SUPPORTED_API_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {int(key): (0, 0) for key in ApiKey}

# Which APIs each role answers (docs/protocol.md, docs/controller.md), for ApiVersions answers.
CONTROLLER_API_KEYS: Final[frozenset[int]] = frozenset({
    ApiKey.FETCH, ApiKey.METADATA, ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS, ApiKey.INIT_PRODUCER_ID, ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS,
    ApiKey.DESCRIBE_QUORUM, ApiKey.ALTER_PARTITION, ApiKey.FETCH_SNAPSHOT, ApiKey.BROKER_REGISTRATION,
    ApiKey.BROKER_HEARTBEAT, ApiKey.UNREGISTER_BROKER, ApiKey.ALLOCATE_PRODUCER_IDS,
})
BROKER_API_KEYS: Final[frozenset[int]] = frozenset(
    int(key) for key in ApiKey
    if key not in (ApiKey.DESCRIBE_QUORUM, ApiKey.ALTER_PARTITION, ApiKey.FETCH_SNAPSHOT, ApiKey.BROKER_REGISTRATION,
                   ApiKey.BROKER_HEARTBEAT, ApiKey.UNREGISTER_BROKER, ApiKey.ALLOCATE_PRODUCER_IDS))


def api_name(api_key: int) -> str:
    """Kafka's name for an api key, or ``ApiKey(<n>)`` for one Raftka does not know."""
    return API_NAMES.get(api_key, f"ApiKey({api_key})")


def api_versions_body(keys: Iterable[int] | Mapping[int, tuple[int, int]]) -> dict:
    """The ApiVersions (18) response body listing ``keys``.

    ``keys`` is either api keys (each at the versions in SUPPORTED_API_VERSIONS, else 0..0) or a
    mapping ``api_key -> (min_version, max_version)``. Sorted by api key.
    """
    if isinstance(keys, Mapping):
        versions = {int(k): (int(v[0]), int(v[1])) for k, v in keys.items()}
    else:
        versions = {int(k): SUPPORTED_API_VERSIONS.get(int(k), (0, 0)) for k in keys}
    return {"api_keys": [{"api_key": key, "min_version": low, "max_version": high}
                         for key, (low, high) in sorted(versions.items())]}
