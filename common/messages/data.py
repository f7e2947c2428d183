"""The data path and discovery family: Produce, Fetch, ListOffsets, Metadata,
OffsetForLeaderEpoch, ApiVersions, InitProducerId and DescribeCluster, requests and responses,
declared after Kafka's message definitions at the versions Raftka serves.

Where each range stops, and why:

- Produce 3-10: Kafka 4 serves nothing below 3 (KIP-896); 11 and later assume the new
  transaction protocol (KIP-890: TRANSACTION_ABORTABLE, implicit AddPartitionsToTxn) and 13 names
  topics by id.
- Fetch 4-12: 4 is Kafka 4's floor; 13 and later name topics by topic id instead of by name.
- ListOffsets 1-6: 1 is Kafka 4's floor; v7 lets a client ask for timestamp -3 (the record
  with the largest timestamp, KIP-734), which the broker does not answer yet; 8 and later ask
  for tiered-storage offsets (-4, -5, remote waits) that Raftka has no counterpart for.
- Metadata 0-12: 0 is still served by Kafka 4; 13 adds a top-level error code for clients to
  rebootstrap on (KIP-1102). From 12 a request may name topics by id alone (Raftka has ids).
- OffsetForLeaderEpoch 2-4: Kafka 4's whole range.
- ApiVersions 0-3: 4 only changes what a broker may put in SupportedFeatures' min_version.
- InitProducerId 0-4: 5 and later assume the new transaction protocol (KIP-890) and 2PC (KIP-939).
- DescribeCluster 0-2: Kafka 4's whole range; 2 lists fenced brokers too when asked (KIP-1073).

Defaults are Kafka's (a field without one: its type's zero), so a field absent in a version
decodes to what Kafka would hand its handler. A tagged struct's default is the struct of its
fields' defaults, which Kafka never writes.
"""
from __future__ import annotations

from typing import Any, Final

from raftka.common.api import ApiKey
from raftka.common.messages.limits import PARTITIONS_MAX, REPLICAS_MAX, TOPICS_MAX
from raftka.common.schema import ZERO_UUID, Array, Field, Message, Struct

_INT_TYPES: Final = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32"})
_NO_OPERATIONS: Final = -2**31  # Kafka's "authorized operations not asked for"


def _zero(type_: Any) -> Any:
    """The value Kafka's generated code starts a field of this type with when it names no default."""
    if isinstance(type_, Array):
        return []
    if isinstance(type_, Struct):
        return {f.name: f.default for f in type_.fields}
    if type_ in _INT_TYPES:
        return 0
    return {"bool": False, "float64": 0.0, "string": "", "bytes": b"", "records": b"", "uuid": ZERO_UUID}[type_]


_KAFKA_ZERO: Final = object()


def _f(name: str, type_: Any, versions: str = "0+", default: Any = _KAFKA_ZERO, **options: Any) -> Field:
    """A field with Kafka's default, or its type's zero when Kafka names none."""
    return Field(name, type_, versions, default=_zero(type_) if default is _KAFKA_ZERO else default, **options)


def _tagged(name: str, type_: Any, versions: str, tag: int, default: Any = _KAFKA_ZERO, **options: Any) -> Field:
    """A tagged field, present from ``versions`` on and tagged in all of them."""
    return _f(name, type_, versions, default, tag=tag, tagged_versions=versions, **options)


def _topics(struct: Struct) -> Array:
    return Array(struct, max_count=TOPICS_MAX)


def _partitions(struct: Struct | str) -> Array:
    return Array(struct, max_count=PARTITIONS_MAX)


def _brokers(of: Struct | str) -> Array:
    """Broker ids, or brokers: a replica list's limit."""
    return Array(of, max_count=REPLICAS_MAX)


# Kafka reuses this struct by name in Produce (v10+) and Fetch (v12+) responses; the field that
# holds it exists only from there on, so its own fields are declared "0+".
LEADER_ID_AND_EPOCH: Final = Struct("LeaderIdAndEpoch", (
    _f("leader_id", "int32", default=-1, about="-1: leader unknown"),
    _f("leader_epoch", "int32", default=-1),
))


# -- Produce (0) ------------------------------------------------------------------------------------

PRODUCE_REQUEST: Final = Message(ApiKey.PRODUCE, "ProduceRequest", "3-10", (
    _f("transactional_id", "string", "3+", None, nullable_versions="3+", about="null: not transactional"),
    _f("acks", "int16", about="0 none, 1 the leader, -1 the whole ISR"),
    _f("timeout_ms", "int32"),
    _f("topic_data", _topics(Struct("TopicProduceData", (
        _f("name", "string", "0-12"),
        _f("partition_data", _partitions(Struct("PartitionProduceData", (
            _f("index", "int32"),
            _f("records", "records", nullable_versions="0+", about="record batches, opaque here"),
        )))),
    )))),
), flexible_versions="9+")

NODE_ENDPOINT_V10: Final = Struct("NodeEndpoint", (
    _f("node_id", "int32", "10+"),
    _f("host", "string", "10+"),
    _f("port", "int32", "10+"),
    _f("rack", "string", "10+", None, nullable_versions="10+"),
))

PRODUCE_RESPONSE: Final = Message(ApiKey.PRODUCE, "ProduceResponse", "3-10", (
    _f("responses", _topics(Struct("TopicProduceResponse", (
        _f("name", "string", "0-12"),
        _f("partition_responses", _partitions(Struct("PartitionProduceResponse", (
            _f("index", "int32"),
            _f("error_code", "int16"),
            _f("base_offset", "int64"),
            _f("log_append_time_ms", "int64", "2+", -1, about="-1 unless the topic stamps LogAppendTime"),
            _f("log_start_offset", "int64", "5+", -1),
            _f("record_errors", Array(Struct("BatchIndexAndErrorMessage", (
                _f("batch_index", "int32", "8+"),
                _f("batch_index_error_message", "string", "8+", None, nullable_versions="8+"),
            ))), "8+", about="records that made the whole batch fail"),
            _f("error_message", "string", "8+", None, nullable_versions="8+"),
            _tagged("current_leader", LEADER_ID_AND_EPOCH, "10+", 0, about="where to produce next"),
        )))),
    )))),
    _f("throttle_time_ms", "int32", "1+", 0),
    _tagged("node_endpoints", _brokers(NODE_ENDPOINT_V10), "10+", 0,
            about="the leaders named in NOT_LEADER_OR_FOLLOWER answers"),
), flexible_versions="9+")


# -- Fetch (1) --------------------------------------------------------------------------------------

FETCH_REQUEST: Final = Message(ApiKey.FETCH, "FetchRequest", "4-12", (
    _tagged("cluster_id", "string", "12+", 0, None, nullable_versions="12+",
            about="a controller's fetcher names the cluster it expects"),
    _f("replica_id", "int32", "0-14", -1, about="-1 a consumer, else the fetching broker"),
    _f("max_wait_ms", "int32"),
    _f("min_bytes", "int32"),
    _f("max_bytes", "int32", "3+", 0x7FFFFFFF),
    _f("isolation_level", "int8", "4+", 0, about="0 read uncommitted, 1 read committed"),
    _f("session_id", "int32", "7+", 0, about="0: no fetch session"),
    _f("session_epoch", "int32", "7+", -1, about="-1: a full fetch, no session wanted"),
    _f("topics", _topics(Struct("FetchTopic", (
        _f("topic", "string", "0-12"),
        _f("partitions", _partitions(Struct("FetchPartition", (
            _f("partition", "int32"),
            _f("current_leader_epoch", "int32", "9+", -1),
            _f("fetch_offset", "int64"),
            _f("last_fetched_epoch", "int32", "12+", -1, about="for divergence checks"),
            _f("log_start_offset", "int64", "5+", -1, about="a follower's; -1 from a consumer"),
            _f("partition_max_bytes", "int32"),
        )))),
    )))),
    _f("forgotten_topics_data", _topics(Struct("ForgottenTopic", (
        _f("topic", "string", "7-12"),
        _f("partitions", _partitions("int32"), "7+"),
    ))), "7+", about="partitions an incremental fetch drops from its session"),
    _f("rack_id", "string", "11+", "", about="the consumer's rack, for reading from a follower"),
), flexible_versions="12+")

FETCH_RESPONSE: Final = Message(ApiKey.FETCH, "FetchResponse", "4-12", (
    _f("throttle_time_ms", "int32", "1+"),
    _f("error_code", "int16", "7+", about="a fetch session's error"),
    _f("session_id", "int32", "7+", 0),
    _f("responses", _topics(Struct("FetchableTopicResponse", (
        _f("topic", "string", "0-12"),
        _f("partitions", _partitions(Struct("PartitionData", (
            _f("partition_index", "int32"),
            _f("error_code", "int16"),
            _f("high_watermark", "int64"),
            _f("last_stable_offset", "int64", "4+", -1),
            _f("log_start_offset", "int64", "5+", -1),
            _tagged("diverging_epoch", Struct("EpochEndOffset", (
                _f("epoch", "int32", "12+", -1),
                _f("end_offset", "int64", "12+", -1),
            )), "12+", 0, about="where a follower's log diverges from the leader's"),
            _tagged("current_leader", LEADER_ID_AND_EPOCH, "12+", 1),
            _tagged("snapshot_id", Struct("SnapshotId", (
                _f("end_offset", "int64", default=-1),
                _f("epoch", "int32", default=-1),
            )), "12+", 2, about="the snapshot a fetcher must load first"),
            _f("aborted_transactions", Array(Struct("AbortedTransaction", (
                _f("producer_id", "int64", "4+"),
                _f("first_offset", "int64", "4+"),
            ))), "4+", nullable_versions="4+"),
            _f("preferred_read_replica", "int32", "11+", -1),
            _f("records", "records", nullable_versions="0+"),
        )))),
    )))),
), flexible_versions="12+")


# -- ListOffsets (2) --------------------------------------------------------------------------------

LIST_OFFSETS_REQUEST: Final = Message(ApiKey.LIST_OFFSETS, "ListOffsetsRequest", "1-6", (
    _f("replica_id", "int32", about="-1 a consumer, else the asking broker"),
    _f("isolation_level", "int8", "2+"),
    _f("topics", _topics(Struct("ListOffsetsTopic", (
        _f("name", "string"),
        _f("partitions", _partitions(Struct("ListOffsetsPartition", (
            _f("partition_index", "int32"),
            _f("current_leader_epoch", "int32", "4+", -1),
            _f("timestamp", "int64", about="-1 latest, -2 earliest, -3 largest timestamp, else a time"),
        )))),
    )))),
), flexible_versions="6+")

LIST_OFFSETS_RESPONSE: Final = Message(ApiKey.LIST_OFFSETS, "ListOffsetsResponse", "1-6", (
    _f("throttle_time_ms", "int32", "2+"),
    _f("topics", _topics(Struct("ListOffsetsTopicResponse", (
        _f("name", "string"),
        _f("partitions", _partitions(Struct("ListOffsetsPartitionResponse", (
            _f("partition_index", "int32"),
            _f("error_code", "int16"),
            _f("timestamp", "int64", "1+", -1),
            _f("offset", "int64", "1+", -1),
            _f("leader_epoch", "int32", "4+", -1),
        )))),
    )))),
), flexible_versions="6+")


# -- Metadata (3) -----------------------------------------------------------------------------------

METADATA_REQUEST: Final = Message(ApiKey.METADATA, "MetadataRequest", "0-12", (
    _f("topics", _topics(Struct("MetadataRequestTopic", (
        _f("topic_id", "uuid", "10+"),
        _f("name", "string", nullable_versions="10+"),
    ))), nullable_versions="1+", about="v0: empty means all topics; v1+: null means all, empty none"),
    _f("allow_auto_topic_creation", "bool", "4+", True),
    _f("include_cluster_authorized_operations", "bool", "8-10"),
    _f("include_topic_authorized_operations", "bool", "8+"),
), flexible_versions="9+")

METADATA_RESPONSE: Final = Message(ApiKey.METADATA, "MetadataResponse", "0-12", (
    _f("throttle_time_ms", "int32", "3+"),
    _f("brokers", _brokers(Struct("MetadataResponseBroker", (
        _f("node_id", "int32"),
        _f("host", "string"),
        _f("port", "int32"),
        _f("rack", "string", "1+", None, nullable_versions="1+"),
    )))),
    _f("cluster_id", "string", "2+", None, nullable_versions="2+"),
    _f("controller_id", "int32", "1+", -1),
    _f("topics", _topics(Struct("MetadataResponseTopic", (
        _f("error_code", "int16"),
        _f("name", "string", nullable_versions="12+"),
        _f("topic_id", "uuid", "10+"),
        _f("is_internal", "bool", "1+", False),
        _f("partitions", _partitions(Struct("MetadataResponsePartition", (
            _f("error_code", "int16"),
            _f("partition_index", "int32"),
            _f("leader_id", "int32"),
            _f("leader_epoch", "int32", "7+", -1),
            _f("replica_nodes", _brokers("int32")),
            _f("isr_nodes", _brokers("int32")),
            _f("offline_replicas", _brokers("int32"), "5+"),
        )))),
        _f("topic_authorized_operations", "int32", "8+", _NO_OPERATIONS, about="a bit per ACL operation"),
    )))),
    _f("cluster_authorized_operations", "int32", "8-10", _NO_OPERATIONS),
), flexible_versions="9+")


# -- OffsetForLeaderEpoch (23) ----------------------------------------------------------------------

OFFSET_FOR_LEADER_EPOCH_REQUEST: Final = Message(
    ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpochRequest", "2-4", (
        _f("replica_id", "int32", "3+", -2, about="-2 a debugging consumer, -1 a consumer, else a follower"),
        _f("topics", _topics(Struct("OffsetForLeaderTopic", (
            _f("topic", "string"),
            _f("partitions", _partitions(Struct("OffsetForLeaderPartition", (
                _f("partition", "int32"),
                _f("current_leader_epoch", "int32", "2+", -1),
                _f("leader_epoch", "int32", about="the epoch whose end offset is asked for"),
            )))),
        )))),
    ), flexible_versions="4+")

OFFSET_FOR_LEADER_EPOCH_RESPONSE: Final = Message(
    ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpochResponse", "2-4", (
        _f("throttle_time_ms", "int32", "2+"),
        _f("topics", _topics(Struct("OffsetForLeaderTopicResult", (
            _f("topic", "string"),
            _f("partitions", _partitions(Struct("EpochEndOffset", (
                _f("error_code", "int16"),
                _f("partition", "int32"),
                _f("leader_epoch", "int32", "1+", -1),
                _f("end_offset", "int64", default=-1),
            )))),
        )))),
    ), flexible_versions="4+")


# -- ApiVersions (18) -------------------------------------------------------------------------------

API_VERSIONS_REQUEST: Final = Message(ApiKey.API_VERSIONS, "ApiVersionsRequest", "0-3", (
    _f("client_software_name", "string", "3+"),
    _f("client_software_version", "string", "3+"),
), flexible_versions="3+")

API_VERSIONS_RESPONSE: Final = Message(ApiKey.API_VERSIONS, "ApiVersionsResponse", "0-3", (
    _f("error_code", "int16"),
    _f("api_keys", Array(Struct("ApiVersion", (
        _f("api_key", "int16"),
        _f("min_version", "int16"),
        _f("max_version", "int16"),
    )))),
    _f("throttle_time_ms", "int32", "1+"),
    _tagged("supported_features", Array(Struct("SupportedFeatureKey", (
        _f("name", "string", "3+"),
        _f("min_version", "int16", "3+"),
        _f("max_version", "int16", "3+"),
    ))), "3+", 0),
    _tagged("finalized_features_epoch", "int64", "3+", 1, -1),
    _tagged("finalized_features", Array(Struct("FinalizedFeatureKey", (
        _f("name", "string", "3+"),
        _f("max_version_level", "int16", "3+"),
        _f("min_version_level", "int16", "3+"),
    ))), "3+", 2),
    _tagged("zk_migration_ready", "bool", "3+", 3, False),
), flexible_versions="3+")


# -- InitProducerId (22) ----------------------------------------------------------------------------

INIT_PRODUCER_ID_REQUEST: Final = Message(ApiKey.INIT_PRODUCER_ID, "InitProducerIdRequest", "0-4", (
    _f("transactional_id", "string", nullable_versions="0+", about="null: an idempotent producer"),
    _f("transaction_timeout_ms", "int32"),
    _f("producer_id", "int64", "3+", -1, about="the id to resume after INVALID_PRODUCER_EPOCH, else -1"),
    _f("producer_epoch", "int16", "3+", -1),
), flexible_versions="2+")

INIT_PRODUCER_ID_RESPONSE: Final = Message(ApiKey.INIT_PRODUCER_ID, "InitProducerIdResponse", "0-4", (
    _f("throttle_time_ms", "int32"),
    _f("error_code", "int16"),
    _f("producer_id", "int64", default=-1),
    _f("producer_epoch", "int16"),
), flexible_versions="2+")


# -- DescribeCluster (60) ---------------------------------------------------------------------------

DESCRIBE_CLUSTER_REQUEST: Final = Message(ApiKey.DESCRIBE_CLUSTER, "DescribeClusterRequest", "0-2", (
    _f("include_cluster_authorized_operations", "bool"),
    _f("endpoint_type", "int8", "1+", 1, about="1 brokers, 2 controllers"),
    _f("include_fenced_brokers", "bool", "2+", about="list fenced brokers too (with is_fenced)"),
), flexible_versions="0+")

DESCRIBE_CLUSTER_RESPONSE: Final = Message(ApiKey.DESCRIBE_CLUSTER, "DescribeClusterResponse", "0-2", (
    _f("throttle_time_ms", "int32"),
    _f("error_code", "int16"),
    _f("error_message", "string", default=None, nullable_versions="0+"),
    _f("endpoint_type", "int8", "1+", 1),
    _f("cluster_id", "string"),
    _f("controller_id", "int32", default=-1),
    _f("brokers", _brokers(Struct("DescribeClusterBroker", (
        _f("broker_id", "int32"),
        _f("host", "string"),
        _f("port", "int32"),
        _f("rack", "string", default=None, nullable_versions="0+"),
        _f("is_fenced", "bool", "2+"),
    )))),
    _f("cluster_authorized_operations", "int32", default=_NO_OPERATIONS),
), flexible_versions="0+")


REQUESTS: Final = (PRODUCE_REQUEST, FETCH_REQUEST, LIST_OFFSETS_REQUEST, METADATA_REQUEST,
                   OFFSET_FOR_LEADER_EPOCH_REQUEST, API_VERSIONS_REQUEST, INIT_PRODUCER_ID_REQUEST,
                   DESCRIBE_CLUSTER_REQUEST)
RESPONSES: Final = (PRODUCE_RESPONSE, FETCH_RESPONSE, LIST_OFFSETS_RESPONSE, METADATA_RESPONSE,
                    OFFSET_FOR_LEADER_EPOCH_RESPONSE, API_VERSIONS_RESPONSE, INIT_PRODUCER_ID_RESPONSE,
                    DESCRIBE_CLUSTER_RESPONSE)

__all__ = ["API_VERSIONS_REQUEST", "API_VERSIONS_RESPONSE", "DESCRIBE_CLUSTER_REQUEST", "DESCRIBE_CLUSTER_RESPONSE",
           "FETCH_REQUEST", "FETCH_RESPONSE", "INIT_PRODUCER_ID_REQUEST", "INIT_PRODUCER_ID_RESPONSE",
           "LEADER_ID_AND_EPOCH", "LIST_OFFSETS_REQUEST", "LIST_OFFSETS_RESPONSE", "METADATA_REQUEST",
           "METADATA_RESPONSE", "OFFSET_FOR_LEADER_EPOCH_REQUEST", "OFFSET_FOR_LEADER_EPOCH_RESPONSE",
           "PRODUCE_REQUEST", "PRODUCE_RESPONSE", "REQUESTS", "RESPONSES"]
