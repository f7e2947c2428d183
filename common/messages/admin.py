"""The admin family: creating and deleting topics, partitions and records, and describing and
changing configs, declared as Kafka's messages with the version ranges Raftka serves.

Version ranges are Kafka 4's, each up to the newest version Kafka defines today:

- CreateTopics (19) 2-7: Kafka 4 dropped 0-1; 5 turns flexible and returns the topic's configs,
  7 adds the topic id to the answer.
- DeleteTopics (20) 1-6: Kafka 4 dropped 0; 4 turns flexible, 5 adds an error message, 6 names
  topics by name or by id.
- CreatePartitions (37) 0-3: none dropped; 2 turns flexible, 3 only adds a throttling error.
- DeleteRecords (21) 0-2: none dropped; 2 turns flexible.
- DescribeConfigs (32) 1-4: Kafka 4 dropped 0 (so the v0-only ``is_default`` is left out); 3 adds
  the config type and documentation, 4 turns flexible.
- AlterConfigs (33) 0-2: none dropped; 2 turns flexible.
- IncrementalAlterConfigs (44) 0-1: none dropped; 1 turns flexible.

Configs and replica assignments are arrays of structs, as on Kafka's wire. ``resource_type`` is
Kafka's int8 (2: topic, 4: broker).
"""
from __future__ import annotations

from typing import Any, Final

from raftka.common.api import ApiKey
from raftka.common.messages.limits import CONFIGS_MAX, PARTITIONS_MAX, REPLICAS_MAX, TOPICS_MAX
from raftka.common.schema import ZERO_UUID, Array, Field, Message, Struct

# Values of the fields below (Kafka's ConfigResource.Type and DescribeConfigs' ConfigSource).
RESOURCE_TOPIC: Final = 2
RESOURCE_BROKER: Final = 4
CONFIG_SOURCE_TOPIC: Final = 1  # a topic's own override (DYNAMIC_TOPIC_CONFIG)
CONFIG_SOURCE_DEFAULT: Final = 5  # the default (DEFAULT_CONFIG)
# DescribeConfigs' config_type (Kafka's ConfigEntry.ConfigType), also how a metadata ConfigRecord
# says what type a value was written as.
CONFIG_TYPE_BOOLEAN: Final = 1
CONFIG_TYPE_STRING: Final = 2
CONFIG_TYPE_LONG: Final = 5
CONFIG_TYPE_DOUBLE: Final = 6
CONFIG_TYPE_LIST: Final = 7
# IncrementalAlterConfigs' config_operation (Kafka's AlterConfigOp.OpType). APPEND and SUBTRACT
# add or remove items of a list-type config; the others are for any config.
CONFIG_OP_SET: Final = 0
CONFIG_OP_DELETE: Final = 1
CONFIG_OP_APPEND: Final = 2
CONFIG_OP_SUBTRACT: Final = 3
CONFIG_OP_NAMES: Final = {CONFIG_OP_SET: "SET", CONFIG_OP_DELETE: "DELETE", CONFIG_OP_APPEND: "APPEND",
                          CONFIG_OP_SUBTRACT: "SUBTRACT"}

RESOURCES_MAX: Final = TOPICS_MAX  # config resources in one request: topics, plus a few brokers


def _f(name: str, type_: Any, default: Any, versions: str = "0+", **options: Any) -> Field:
    """A field with a value default (every field here has one)."""
    return Field(name, type_, versions=versions, default=default, **options)


def _text(name: str, versions: str = "0+", *, nulls: str | None = None, default: Any = "", about: str = "") -> Field:
    """A string; ``nulls``: Kafka's nullableVersions."""
    return Field(name, "string", versions=versions, default=default, nullable_versions=nulls, about=about)


def _throttle(versions: str = "0+") -> Field:
    return _f("throttle_time_ms", "int32", 0, versions, about="ms the client should wait (quota)")


def _error_message(versions: str = "0+", nulls: str = "0+", default: Any = None) -> Field:
    return _text("error_message", versions, nulls=nulls, default=default, about="null when no error")


_BROKER_IDS = _f("broker_ids", Array("int32", max_count=REPLICAS_MAX), [], about="replica placement")

# -- CreateTopics (19) -------------------------------------------------------------------------------

CREATE_TOPICS_REQUEST: Final = Message(ApiKey.CREATE_TOPICS, "CreateTopicsRequest", "2-7", (
    _f("topics", Array(Struct("CreatableTopic", (
        _text("name"),
        _f("num_partitions", "int32", 0, about="-1: the broker's default, or the assignments"),
        _f("replication_factor", "int16", 0, about="-1: the broker's default, or the assignments"),
        _f("assignments", Array(Struct("CreatableReplicaAssignment", (
            _f("partition_index", "int32", 0),
            _BROKER_IDS,
        )), max_count=PARTITIONS_MAX), [], about="empty: the controller places the replicas"),
        _f("configs", Array(Struct("CreatableTopicConfig", (
            _text("name"),
            _text("value", nulls="0+"),
        )), max_count=CONFIGS_MAX), [], about="topic-level overrides"),
    )), max_count=TOPICS_MAX), []),
    _f("timeout_ms", "int32", 60_000),
    _f("validate_only", "bool", False, "1+", about="check only, create nothing"),
), flexible_versions="5+")

CREATE_TOPICS_RESPONSE: Final = Message(ApiKey.CREATE_TOPICS, "CreateTopicsResponse", "2-7", (
    _throttle("2+"),
    _f("topics", Array(Struct("CreatableTopicResult", (
        _text("name"),
        _f("topic_id", "uuid", ZERO_UUID, "7+"),
        _f("error_code", "int16", 0),
        _error_message("1+", default=""),
        _f("topic_config_error_code", "int16", 0, "5+", tag=0, tagged_versions="5+",
           about="why the configs are missing from the answer"),
        _f("num_partitions", "int32", -1, "5+"),
        _f("replication_factor", "int16", -1, "5+"),
        _f("configs", Array(Struct("CreatableTopicConfigs", (
            _text("name", "5+"),
            _text("value", "5+", nulls="5+"),
            _f("read_only", "bool", False, "5+"),
            _f("config_source", "int8", -1, "5+"),
            _f("is_sensitive", "bool", False, "5+"),
        )), max_count=CONFIGS_MAX), [], "5+", nullable_versions="5+", about="the created topic's configs"),
    )), max_count=TOPICS_MAX), []),
), flexible_versions="5+")

# -- DeleteTopics (20) -------------------------------------------------------------------------------

DELETE_TOPICS_REQUEST: Final = Message(ApiKey.DELETE_TOPICS, "DeleteTopicsRequest", "1-6", (
    _f("topics", Array(Struct("DeleteTopicState", (
        _text("name", "6+", nulls="6+", default=None, about="null: named by topic_id"),
        _f("topic_id", "uuid", ZERO_UUID, "6+", about="zero: named by name"),
    )), max_count=TOPICS_MAX), [], "6+"),
    _f("topic_names", Array("string", max_count=TOPICS_MAX), [], "0-5"),
    _f("timeout_ms", "int32", 0),
), flexible_versions="4+")

DELETE_TOPICS_RESPONSE: Final = Message(ApiKey.DELETE_TOPICS, "DeleteTopicsResponse", "1-6", (
    _throttle("1+"),
    _f("responses", Array(Struct("DeletableTopicResult", (
        _text("name", nulls="6+"),
        _f("topic_id", "uuid", ZERO_UUID, "6+"),
        _f("error_code", "int16", 0),
        _error_message("5+", "5+"),
    )), max_count=TOPICS_MAX), []),
), flexible_versions="4+")

# -- CreatePartitions (37) ---------------------------------------------------------------------------

CREATE_PARTITIONS_REQUEST: Final = Message(ApiKey.CREATE_PARTITIONS, "CreatePartitionsRequest", "0-3", (
    _f("topics", Array(Struct("CreatePartitionsTopic", (
        _text("name"),
        _f("count", "int32", 0, about="the partition count wanted in all"),
        _f("assignments", Array(Struct("CreatePartitionsAssignment", (_BROKER_IDS,)), max_count=PARTITIONS_MAX),
           [], nullable_versions="0+", about="one per new partition; null: the controller places them"),
    )), max_count=TOPICS_MAX), []),
    _f("timeout_ms", "int32", 0),
    _f("validate_only", "bool", False),
), flexible_versions="2+")

CREATE_PARTITIONS_RESPONSE: Final = Message(ApiKey.CREATE_PARTITIONS, "CreatePartitionsResponse", "0-3", (
    _throttle(),
    _f("results", Array(Struct("CreatePartitionsTopicResult", (
        _text("name"),
        _f("error_code", "int16", 0),
        _error_message(),
    )), max_count=TOPICS_MAX), []),
), flexible_versions="2+")

# -- DeleteRecords (21) ------------------------------------------------------------------------------

DELETE_RECORDS_REQUEST: Final = Message(ApiKey.DELETE_RECORDS, "DeleteRecordsRequest", "0-2", (
    _f("topics", Array(Struct("DeleteRecordsTopic", (
        _text("name"),
        _f("partitions", Array(Struct("DeleteRecordsPartition", (
            _f("partition_index", "int32", 0),
            _f("offset", "int64", 0, about="records before it go; -1: the high watermark"),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
    _f("timeout_ms", "int32", 0),
), flexible_versions="2+")

DELETE_RECORDS_RESPONSE: Final = Message(ApiKey.DELETE_RECORDS, "DeleteRecordsResponse", "0-2", (
    _throttle(),
    _f("topics", Array(Struct("DeleteRecordsTopicResult", (
        _text("name"),
        _f("partitions", Array(Struct("DeleteRecordsPartitionResult", (
            _f("partition_index", "int32", 0),
            _f("low_watermark", "int64", 0, about="the log start offset after the deletion"),
            _f("error_code", "int16", 0),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
), flexible_versions="2+")

# -- DescribeConfigs (32) ----------------------------------------------------------------------------

DESCRIBE_CONFIGS_REQUEST: Final = Message(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigsRequest", "1-4", (
    _f("resources", Array(Struct("DescribeConfigsResource", (
        _f("resource_type", "int8", 0, about="2: topic, 4: broker"),
        _text("resource_name"),
        _f("configuration_keys", Array("string", max_count=CONFIGS_MAX), [], nullable_versions="0+",
           about="null: every key"),
    )), max_count=RESOURCES_MAX), []),
    _f("include_synonyms", "bool", False, "1+"),
    _f("include_documentation", "bool", False, "3+"),
), flexible_versions="4+")

DESCRIBE_CONFIGS_RESPONSE: Final = Message(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigsResponse", "1-4", (
    _throttle(),
    _f("results", Array(Struct("DescribeConfigsResult", (
        _f("error_code", "int16", 0),
        _error_message(default=""),
        _f("resource_type", "int8", 0),
        _text("resource_name"),
        _f("configs", Array(Struct("DescribeConfigsResourceResult", (
            _text("name"),
            _text("value", nulls="0+"),
            _f("read_only", "bool", False),
            _f("config_source", "int8", -1, "1+", about="where the value comes from (1: a topic override, ...)"),
            _f("is_sensitive", "bool", False, about="true: value is null"),
            _f("synonyms", Array(Struct("DescribeConfigsSynonym", (
                _text("name", "1+"),
                _text("value", "1+", nulls="0+"),
                _f("source", "int8", 0, "1+"),
            )), max_count=CONFIGS_MAX), [], "1+", about="the values this key falls back to, in order"),
            _f("config_type", "int8", 0, "3+", about="0 unknown, 1 boolean, 2 string, 3 int, ..."),
            _text("documentation", "3+", nulls="0+"),
        )), max_count=CONFIGS_MAX), []),
    )), max_count=RESOURCES_MAX), []),
), flexible_versions="4+")

# -- AlterConfigs (33) and IncrementalAlterConfigs (44) ----------------------------------------------

ALTER_CONFIGS_REQUEST: Final = Message(ApiKey.ALTER_CONFIGS, "AlterConfigsRequest", "0-2", (
    _f("resources", Array(Struct("AlterConfigsResource", (
        _f("resource_type", "int8", 0, about="2: topic, 4: broker"),
        _text("resource_name"),
        _f("configs", Array(Struct("AlterableConfig", (
            _text("name"),
            _text("value", nulls="0+", about="the resource's whole set: keys left out revert"),
        )), max_count=CONFIGS_MAX), []),
    )), max_count=RESOURCES_MAX), []),
    _f("validate_only", "bool", False),
), flexible_versions="2+")

# Both answers have the one shape: a result per resource.
_ALTER_CONFIGS_RESULTS = _f("responses", Array(Struct("AlterConfigsResourceResponse", (
    _f("error_code", "int16", 0),
    _error_message(default=""),
    _f("resource_type", "int8", 0),
    _text("resource_name"),
)), max_count=RESOURCES_MAX), [])

ALTER_CONFIGS_RESPONSE: Final = Message(ApiKey.ALTER_CONFIGS, "AlterConfigsResponse", "0-2", (
    _throttle(), _ALTER_CONFIGS_RESULTS,
), flexible_versions="2+")

INCREMENTAL_ALTER_CONFIGS_REQUEST: Final = Message(
    ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigsRequest", "0-1", (
        _f("resources", Array(Struct("AlterConfigsResource", (
            _f("resource_type", "int8", 0, about="2: topic, 4: broker"),
            _text("resource_name"),
            _f("configs", Array(Struct("AlterableConfig", (
                _text("name"),
                _f("config_operation", "int8", 0, about="0 set, 1 delete, 2 append, 3 subtract"),
                _text("value", nulls="0+"),
            )), max_count=CONFIGS_MAX), []),
        )), max_count=RESOURCES_MAX), []),
        _f("validate_only", "bool", False),
    ), flexible_versions="1+")

INCREMENTAL_ALTER_CONFIGS_RESPONSE: Final = Message(
    ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigsResponse", "0-1", (
        _throttle(), _ALTER_CONFIGS_RESULTS,
    ), flexible_versions="1+")

REQUESTS: Final = (CREATE_TOPICS_REQUEST, DELETE_TOPICS_REQUEST, DELETE_RECORDS_REQUEST, DESCRIBE_CONFIGS_REQUEST,
                   ALTER_CONFIGS_REQUEST, CREATE_PARTITIONS_REQUEST, INCREMENTAL_ALTER_CONFIGS_REQUEST)
RESPONSES: Final = (CREATE_TOPICS_RESPONSE, DELETE_TOPICS_RESPONSE, DELETE_RECORDS_RESPONSE,
                    DESCRIBE_CONFIGS_RESPONSE, ALTER_CONFIGS_RESPONSE, CREATE_PARTITIONS_RESPONSE,
                    INCREMENTAL_ALTER_CONFIGS_RESPONSE)
