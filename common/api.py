"""API keys and names of Raftka's wire protocol, Kafka's (docs/protocol.md).

Numbers and names are Kafka's. The versions of each API are in its declaration
(common/messages/); a server's ApiVersions answer is built from those (common/server.py).
"""
from __future__ import annotations

from enum import IntEnum
from typing import Final


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
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
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
    ApiKey.SASL_HANDSHAKE: "SaslHandshake",
    ApiKey.API_VERSIONS: "ApiVersions",
    ApiKey.CREATE_TOPICS: "CreateTopics",
    ApiKey.DELETE_TOPICS: "DeleteTopics",
    ApiKey.DELETE_RECORDS: "DeleteRecords",
    ApiKey.INIT_PRODUCER_ID: "InitProducerId",
    ApiKey.OFFSET_FOR_LEADER_EPOCH: "OffsetsForLeaderEpoch",
    ApiKey.DESCRIBE_ACLS: "DescribeAcls",
    ApiKey.CREATE_ACLS: "CreateAcls",
    ApiKey.DELETE_ACLS: "DeleteAcls",
    ApiKey.DESCRIBE_CONFIGS: "DescribeConfigs",
    ApiKey.ALTER_CONFIGS: "AlterConfigs",
    ApiKey.SASL_AUTHENTICATE: "SaslAuthenticate",
    ApiKey.CREATE_PARTITIONS: "CreatePartitions",
    ApiKey.DELETE_GROUPS: "DeleteGroups",
    ApiKey.ELECT_LEADERS: "ElectLeaders",
    ApiKey.INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignments",
    ApiKey.LIST_PARTITION_REASSIGNMENTS: "ListPartitionReassignments",
    ApiKey.OFFSET_DELETE: "OffsetDelete",
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: "DescribeUserScramCredentials",
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: "AlterUserScramCredentials",
    ApiKey.DESCRIBE_QUORUM: "DescribeQuorum",
    ApiKey.ALTER_PARTITION: "AlterPartition",
    ApiKey.FETCH_SNAPSHOT: "FetchSnapshot",
    ApiKey.DESCRIBE_CLUSTER: "DescribeCluster",
    ApiKey.BROKER_REGISTRATION: "BrokerRegistration",
    ApiKey.BROKER_HEARTBEAT: "BrokerHeartbeat",
    ApiKey.UNREGISTER_BROKER: "UnregisterBroker",
    ApiKey.ALLOCATE_PRODUCER_IDS: "AllocateProducerIds",
}

def api_name(api_key: int) -> str:
    """Kafka's name for an api key, or ``ApiKey(<n>)`` for one Raftka does not know."""
    return API_NAMES.get(api_key, f"ApiKey({api_key})")
