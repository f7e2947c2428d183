"""What each msgpack request body looks like (retired by #kafka-protocol for messages/): one declaration per API, in the shape of Kafka's message
definitions (common/schema.py explains the types, defaults and limits; docs/protocol.md the APIs).

Only the fields Raftka serves and reads are declared; names are Kafka's in snake_case, and Kafka's
type names are used where Kafka has the field. Where Raftka's body differs from Kafka's today
(``configs`` is a map, DescribeConfigs' ``resource_type`` may be the name ``"topic"``, a
controller's Fetch follows the metadata log), the declaration says so: those are what
#kafka-protocol changes. The broker-controller APIs (BrokerRegistration, BrokerHeartbeat,
AlterPartition, AllocateProducerIds, DescribeQuorum) travel in Kafka's protocol only
(common/messages/controller.py). Every API is at version 0 (``valid_versions="0"``); fields are
``"0+"`` so later versions only add fields.

Defaults are those the handlers used before the boundary check existed, so a valid request means
what it meant; ``ABSENT`` marks a default that depends on the server's configuration (or on
absence itself) and stays the handler's.

``BROKER_REQUESTS`` is what a broker's listener accepts (it checks the bodies it forwards to the
controller too); ``CONTROLLER_REQUESTS`` what a controller's listener accepts. Both are checked
before any handler runs.
"""
from __future__ import annotations

from typing import Final

from raftka.common.api import ApiKey
from raftka.common.schema import ABSENT, REQUIRED, Array, Field, Message, Registry, Struct

# Raftka's limits, each with its reason.
TOPICS_MAX: Final = 100_000  # topics named in one request (a cluster holds far fewer)
PARTITIONS_MAX: Final = 10_000  # partitions of one topic in one request (the controller's limit per topic)
GROUPS_MAX: Final = 10_000  # group ids in one DescribeGroups / DeleteGroups
MEMBERS_MAX: Final = 100_000  # assignments in one SyncGroup (one per member)
LEAVING_MEMBERS_MAX: Final = 1_000  # members in one LeaveGroup
PROTOCOLS_MAX: Final = 100  # assignors one member offers in a JoinGroup
STATES_MAX: Final = 16  # ListGroups states (there are 5)
# Bytes a group member may put in its subscription or assignment (the coordinator stores them in
# one __consumer_offsets record, itself bounded by the frame).
MEMBER_BYTES_MAX: Final = 1 << 20


def _f(name: str, type_: object, default: object = ABSENT, *, nullable: bool = False, **limits: object) -> Field:
    return Field(name, type_, nullable=nullable, default=default, **limits)  # type: ignore[arg-type]


def _req(name: str, type_: object, **limits: object) -> Field:
    return Field(name, type_, default=REQUIRED, **limits)  # type: ignore[arg-type]


def _v0(api_key: ApiKey, name: str, *fields: Field, about: str = "") -> Message:
    return Message(int(api_key), name, "0", tuple(fields), about)


# -- broker APIs ---------------------------------------------------------------------------------

PRODUCE = _v0(
    ApiKey.PRODUCE, "ProduceRequest",
    _f("transactional_id", "string", nullable=True),
    _f("acks", "int16", -1, about="-1 all, 0 none, 1 leader; others: INVALID_REQUIRED_ACKS"),
    _f("timeout_ms", "int32", 30_000, min=0),
    _req("topic_data", Array(Struct("TopicProduceData", (
        _req("name", "string"),
        _f("partition_data", Array(Struct("PartitionProduceData", (
            _req("index", "int32"),
            _f("records", "records", nullable=True, about="RecordBatch v2, opaque here"),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX)),
)

FETCH = _v0(
    ApiKey.FETCH, "FetchRequest",
    _f("replica_id", "int32", -1, about="-1 a consumer, else the fetching broker"),
    _f("max_wait_ms", "int32", 0),
    _f("min_bytes", "int32", 1),
    _f("max_bytes", "int32", about="absent: fetch.max.bytes"),
    _f("isolation_level", "int8", 0),
    _f("topics", Array(Struct("FetchTopic", (
        _req("topic", "string"),
        _f("partitions", Array(Struct("FetchPartition", (
            _req("partition", "int32"),
            _f("current_leader_epoch", "int32", -1, nullable=True),
            _f("fetch_offset", "int64", 0),
            _f("last_fetched_epoch", "int32", -1),
            _f("log_start_offset", "int64", -1),
            _f("partition_max_bytes", "int32", 1 << 20),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
)

LIST_OFFSETS = _v0(
    ApiKey.LIST_OFFSETS, "ListOffsetsRequest",
    _f("replica_id", "int32"),
    _f("isolation_level", "int8"),
    _f("topics", Array(Struct("ListOffsetsTopic", (
        _req("name", "string"),
        _f("partitions", Array(Struct("ListOffsetsPartition", (
            _req("partition_index", "int32"),
            _f("current_leader_epoch", "int32", nullable=True),
            _f("timestamp", "int64", -1, about="-1 latest (the high watermark), -2 earliest"),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
)

METADATA = _v0(
    ApiKey.METADATA, "MetadataRequest",
    _f("topics", Array("string", max_count=TOPICS_MAX), nullable=True, about="null: every topic"),
    _f("allow_auto_topic_creation", "bool"),
)

OFFSET_COMMIT = _v0(
    ApiKey.OFFSET_COMMIT, "OffsetCommitRequest",
    _req("group_id", "string"),
    _f("generation_id", "int32", -1),
    _f("member_id", "string", "", nullable=True),
    _f("group_instance_id", "string", nullable=True),
    _req("topics", Array(Struct("OffsetCommitRequestTopic", (
        _req("name", "string"),
        _f("partitions", Array(Struct("OffsetCommitRequestPartition", (
            _req("partition_index", "int32"),
            _f("committed_offset", "int64", about="absent or < 0: INVALID_COMMIT_OFFSET_SIZE"),
            _f("committed_leader_epoch", "int32", -1),
            _f("committed_metadata", "string", nullable=True),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX)),
)

OFFSET_FETCH = _v0(
    ApiKey.OFFSET_FETCH, "OffsetFetchRequest",
    _req("group_id", "string"),
    _f("topics", Array(Struct("OffsetFetchRequestTopic", (
        _req("name", "string"),
        _f("partition_indexes", Array("int32", max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), nullable=True, about="null: every committed partition"),
)

FIND_COORDINATOR = _v0(
    ApiKey.FIND_COORDINATOR, "FindCoordinatorRequest",
    _req("key", "string", about="the group id"),
    _f("key_type", "int8", 0, about="0: group (the only kind)"),
)

JOIN_GROUP = _v0(
    ApiKey.JOIN_GROUP, "JoinGroupRequest",
    _req("group_id", "string"),
    _req("session_timeout_ms", "int32"),
    _f("rebalance_timeout_ms", "int32", -1),
    _f("member_id", "string", "", nullable=True),
    _f("group_instance_id", "string", nullable=True),
    _f("protocol_type", "string", about="absent: INCONSISTENT_GROUP_PROTOCOL"),
    _req("protocols", Array(Struct("JoinGroupRequestProtocol", (
        _req("name", "string"),
        _f("metadata", "bytes", nullable=True, max_length=MEMBER_BYTES_MAX),
    )), max_count=PROTOCOLS_MAX)),
    _f("reason", "string", nullable=True),
)

HEARTBEAT = _v0(
    ApiKey.HEARTBEAT, "HeartbeatRequest",
    _req("group_id", "string"),
    _f("generation_id", "int32"),
    _f("member_id", "string", "", nullable=True),
    _f("group_instance_id", "string", nullable=True),
    _f("max_wait_ms", "int32", 0, nullable=True, min=0, about="Raftka: hold the answer up to this long"),
)

LEAVE_GROUP = _v0(
    ApiKey.LEAVE_GROUP, "LeaveGroupRequest",
    _req("group_id", "string"),
    _f("member_id", "string", nullable=True, about="without members: this one member leaves"),
    _f("members", Array(Struct("MemberIdentity", (
        _f("member_id", "string", nullable=True),
        _f("group_instance_id", "string", nullable=True),
        _f("reason", "string", nullable=True),
    )), max_count=LEAVING_MEMBERS_MAX), nullable=True),
)

SYNC_GROUP = _v0(
    ApiKey.SYNC_GROUP, "SyncGroupRequest",
    _req("group_id", "string"),
    _f("generation_id", "int32"),
    _f("member_id", "string", "", nullable=True),
    _f("group_instance_id", "string", nullable=True),
    _f("protocol_type", "string", nullable=True),
    _f("protocol_name", "string", nullable=True),
    _f("assignments", Array(Struct("SyncGroupRequestAssignment", (
        _req("member_id", "string"),
        _f("assignment", "bytes", nullable=True, max_length=MEMBER_BYTES_MAX),
    )), max_count=MEMBERS_MAX), nullable=True),
)

DESCRIBE_GROUPS = _v0(
    ApiKey.DESCRIBE_GROUPS, "DescribeGroupsRequest",
    _req("groups", Array("string", max_count=GROUPS_MAX)),
)

LIST_GROUPS = _v0(
    ApiKey.LIST_GROUPS, "ListGroupsRequest",
    _f("states_filter", Array("string", max_count=STATES_MAX), nullable=True),
)

DELETE_GROUPS = _v0(
    ApiKey.DELETE_GROUPS, "DeleteGroupsRequest",
    _req("groups_names", Array("string", max_count=GROUPS_MAX)),
)

API_VERSIONS = _v0(ApiKey.API_VERSIONS, "ApiVersionsRequest")

INIT_PRODUCER_ID = _v0(
    ApiKey.INIT_PRODUCER_ID, "InitProducerIdRequest",
    _f("transactional_id", "string", nullable=True),
    _f("transaction_timeout_ms", "int32"),
)

OFFSET_FOR_LEADER_EPOCH = _v0(
    ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpochRequest",
    _f("replica_id", "int32"),
    _f("topics", Array(Struct("OffsetForLeaderTopic", (
        _req("topic", "string"),
        _f("partitions", Array(Struct("OffsetForLeaderPartition", (
            _req("partition", "int32"),
            _f("current_leader_epoch", "int32", nullable=True),
            _f("leader_epoch", "int32", -1),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
)

DESCRIBE_CLUSTER = _v0(ApiKey.DESCRIBE_CLUSTER, "DescribeClusterRequest")

BROKER_REQUESTS: Final = Registry({m.api_key: m for m in (
    PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP,
    HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, API_VERSIONS,
    INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CLUSTER)})

CONTROLLER_REQUESTS: Final = Registry({m.api_key: m for m in (
    METADATA, API_VERSIONS, INIT_PRODUCER_ID)})


# -- responses of a broker's client APIs --------------------------------------------------------
# Declared for #kafka-protocol's codec; today only the tests check answers against them
# (tests/test_protocol_declarations.py). Body of an answer whose frame error code is NONE; a
# whole-request error's body is {error_message}. ``_out`` fields are always present, ``_opt`` ones
# only sometimes (an error's message, an error answer's leader).


def _out(name: str, type_: object, *, nullable: bool = False) -> Field:
    return Field(name, type_, nullable=nullable, default=REQUIRED)  # type: ignore[arg-type]


def _opt(name: str, type_: object, *, nullable: bool = True) -> Field:
    return Field(name, type_, nullable=nullable, default=ABSENT)  # type: ignore[arg-type]


_LEADER = Struct("LeaderIdAndEpoch", (_out("leader_id", "int32"), _out("leader_epoch", "int32")))
_ERROR_MESSAGE = _opt("error_message", "string")

PRODUCE_RESPONSE = _v0(
    ApiKey.PRODUCE, "ProduceResponse",
    _out("responses", Array(Struct("TopicProduceResponse", (
        _out("name", "string"),
        _out("partition_responses", Array(Struct("PartitionProduceResponse", (
            _out("index", "int32"), _out("error_code", "int16"), _ERROR_MESSAGE,
            _out("base_offset", "int64"), _out("log_append_time_ms", "int64"), _out("log_start_offset", "int64"),
            _opt("current_leader", _LEADER),
        )))),
    )))),
    _out("throttle_time_ms", "int32"),
)

FETCH_RESPONSE = _v0(
    ApiKey.FETCH, "FetchResponse",
    _opt("throttle_time_ms", "int32", nullable=False),
    _out("responses", Array(Struct("FetchableTopicResponse", (
        _out("topic", "string"),
        _out("partitions", Array(Struct("PartitionData", (
            _out("partition_index", "int32"), _out("error_code", "int16"), _ERROR_MESSAGE,
            _out("high_watermark", "int64"), _out("last_stable_offset", "int64"), _out("log_start_offset", "int64"),
            _out("diverging_epoch", Struct("EpochEndOffset", (_out("epoch", "int32"), _out("end_offset", "int64"))),
                 nullable=True),
            _out("current_leader", _LEADER, nullable=True),
            _out("records", "records"),
        )))),
    )))),
)

LIST_OFFSETS_RESPONSE = _v0(
    ApiKey.LIST_OFFSETS, "ListOffsetsResponse",
    _out("topics", Array(Struct("ListOffsetsTopicResponse", (
        _out("name", "string"),
        _out("partitions", Array(Struct("ListOffsetsPartitionResponse", (
            _out("partition_index", "int32"), _out("error_code", "int16"), _ERROR_MESSAGE,
            _out("timestamp", "int64"), _out("offset", "int64"), _out("leader_epoch", "int32"),
            _opt("current_leader", _LEADER),
        )))),
    )))),
)

METADATA_RESPONSE = _v0(
    ApiKey.METADATA, "MetadataResponse",
    _out("cluster_id", "string", nullable=True),
    _out("controller_id", "int32"),
    _out("brokers", Array(Struct("MetadataResponseBroker", (
        _out("node_id", "int32"), _out("host", "string"), _out("port", "int32"),
        _out("rack", "string", nullable=True),
    )))),
    _out("topics", Array(Struct("MetadataResponseTopic", (
        _out("error_code", "int16"), _out("name", "string"), _out("topic_id", "uuid", nullable=True),
        _out("partitions", Array(Struct("MetadataResponsePartition", (
            _out("error_code", "int16"), _out("partition_index", "int32"), _out("leader_id", "int32"),
            _out("leader_epoch", "int32"), _out("replica_nodes", Array("int32")), _out("isr_nodes", Array("int32")),
            _out("offline_replicas", Array("int32")),
        )))),
    )))),
)

OFFSET_FOR_LEADER_EPOCH_RESPONSE = _v0(
    ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpochResponse",
    _out("topics", Array(Struct("OffsetForLeaderTopicResult", (
        _out("topic", "string"),
        _out("partitions", Array(Struct("EpochEndOffset", (
            _out("partition", "int32"), _out("error_code", "int16"), _ERROR_MESSAGE,
            _out("leader_epoch", "int32"), _out("end_offset", "int64"),
        )))),
    )))),
)

API_VERSIONS_RESPONSE = _v0(
    ApiKey.API_VERSIONS, "ApiVersionsResponse",
    _out("api_keys", Array(Struct("ApiVersion", (
        _out("api_key", "int16"), _out("min_version", "int16"), _out("max_version", "int16"),
    )))),
)

INIT_PRODUCER_ID_RESPONSE = _v0(
    ApiKey.INIT_PRODUCER_ID, "InitProducerIdResponse",
    _out("producer_id", "int64"), _out("producer_epoch", "int16"),
)

DESCRIBE_CLUSTER_RESPONSE = _v0(
    ApiKey.DESCRIBE_CLUSTER, "DescribeClusterResponse",
    _out("cluster_id", "string"), _out("controller_id", "int32"),
    _out("brokers", Array(Struct("DescribeClusterBroker", (
        _out("broker_id", "int32"), _out("host", "string"), _out("port", "int32"),
        _out("rack", "string", nullable=True), _out("fenced", "bool"),
    )))),
)

FIND_COORDINATOR_RESPONSE = _v0(
    ApiKey.FIND_COORDINATOR, "FindCoordinatorResponse",
    _out("error_code", "int16"), _ERROR_MESSAGE,
    _out("node_id", "int32"), _out("host", "string"), _out("port", "int32"),
)

HEARTBEAT_RESPONSE = _v0(ApiKey.HEARTBEAT, "HeartbeatResponse", _out("error_code", "int16"), _ERROR_MESSAGE)

OFFSET_COMMIT_RESPONSE = _v0(
    ApiKey.OFFSET_COMMIT, "OffsetCommitResponse",
    _out("topics", Array(Struct("OffsetCommitResponseTopic", (
        _out("name", "string"),
        _out("partitions", Array(Struct("OffsetCommitResponsePartition", (
            _out("partition_index", "int32"), _out("error_code", "int16"),
        )))),
    )))),
)

OFFSET_FETCH_RESPONSE = _v0(
    ApiKey.OFFSET_FETCH, "OffsetFetchResponse",
    _out("error_code", "int16"), _ERROR_MESSAGE,
    _out("topics", Array(Struct("OffsetFetchResponseTopic", (
        _out("name", "string"),
        _out("partitions", Array(Struct("OffsetFetchResponsePartition", (
            _out("partition_index", "int32"), _out("committed_offset", "int64"),
            _out("committed_leader_epoch", "int32"), _out("metadata", "string", nullable=True),
            _out("error_code", "int16"),
        )))),
    )))),
)

BROKER_RESPONSES: Final = Registry({m.api_key: m for m in (
    PRODUCE_RESPONSE, FETCH_RESPONSE, LIST_OFFSETS_RESPONSE, METADATA_RESPONSE, OFFSET_FOR_LEADER_EPOCH_RESPONSE,
    API_VERSIONS_RESPONSE, INIT_PRODUCER_ID_RESPONSE, DESCRIBE_CLUSTER_RESPONSE, FIND_COORDINATOR_RESPONSE,
    HEARTBEAT_RESPONSE, OFFSET_COMMIT_RESPONSE, OFFSET_FETCH_RESPONSE)})

__all__ = ["BROKER_REQUESTS", "BROKER_RESPONSES", "CONTROLLER_REQUESTS"]
