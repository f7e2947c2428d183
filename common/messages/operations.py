"""Moving partitions and their leaders, declared as Kafka's messages with the version ranges
Raftka serves (the controller decides them: raft_meta/controller/leader_election.py and
reassignment.py; brokers forward them):

- ElectLeaders (43) 0-2: 1 adds the election type (0 preferred, 1 unclean) and a top-level
  error, 2 turns flexible.
- AlterPartitionReassignments (45) 0 and ListPartitionReassignments (46) 0 (KIP-455), flexible;
  Kafka 4's v1 of AlterPartitionReassignments (allow_replication_factor_change) is not served.

Defaults are Kafka's: a nullable string or array without an explicit null default defaults to
"" or []; senders that mean null (every partition, cancel) say so.
"""
from __future__ import annotations

from typing import Final

from raftka.common.api import ApiKey
from raftka.common.messages.admin import _error_message, _f, _text, _throttle
from raftka.common.messages.limits import PARTITIONS_MAX, REPLICAS_MAX, TOPICS_MAX
from raftka.common.schema import Array, Message, Struct

# -- ElectLeaders (43) -------------------------------------------------------------------------------

ELECT_LEADERS_REQUEST: Final = Message(ApiKey.ELECT_LEADERS, "ElectLeadersRequest", "0-2", (
    _f("election_type", "int8", 0, "1+", about="0: the preferred replica; 1: unclean (a live replica if no ISR member)"),
    _f("topic_partitions", Array(Struct("ElectLeadersTopicPartitions", (
        _text("topic"),
        _f("partition_id", Array("int32", max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), [], nullable_versions="0+", about="null: every partition"),
    _f("timeout_ms", "int32", 60_000),
), flexible_versions="2+")

ELECT_LEADERS_RESPONSE: Final = Message(ApiKey.ELECT_LEADERS, "ElectLeadersResponse", "0-2", (
    _throttle(),
    _f("error_code", "int16", 0, "1+"),
    _f("replica_election_results", Array(Struct("ReplicaElectionResult", (
        _text("topic"),
        _f("partition_result", Array(Struct("PartitionResult", (
            _f("partition_id", "int32", 0),
            _f("error_code", "int16", 0),
            _error_message(default=""),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
), flexible_versions="2+")

# -- AlterPartitionReassignments (45), ListPartitionReassignments (46) -------------------------------

_REPLICA_IDS = Array("int32", max_count=REPLICAS_MAX)

ALTER_PARTITION_REASSIGNMENTS_REQUEST: Final = Message(
    ApiKey.ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignmentsRequest", "0", (
        _f("timeout_ms", "int32", 60_000),
        _f("topics", Array(Struct("ReassignableTopic", (
            _text("name"),
            _f("partitions", Array(Struct("ReassignablePartition", (
                _f("partition_index", "int32", 0),
                _f("replicas", _REPLICA_IDS, [], nullable_versions="0+",
                   about="the replicas to move to; null cancels the partition's reassignment"),
            )), max_count=PARTITIONS_MAX), []),
        )), max_count=TOPICS_MAX), []),
    ), flexible_versions="0+")

ALTER_PARTITION_REASSIGNMENTS_RESPONSE: Final = Message(
    ApiKey.ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignmentsResponse", "0", (
        _throttle(),
        _f("error_code", "int16", 0),
        _error_message(default=""),
        _f("responses", Array(Struct("ReassignableTopicResponse", (
            _text("name"),
            _f("partitions", Array(Struct("ReassignablePartitionResponse", (
                _f("partition_index", "int32", 0),
                _f("error_code", "int16", 0),
                _error_message(default=""),
            )), max_count=PARTITIONS_MAX), []),
        )), max_count=TOPICS_MAX), []),
    ), flexible_versions="0+")

LIST_PARTITION_REASSIGNMENTS_REQUEST: Final = Message(
    ApiKey.LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignmentsRequest", "0", (
        _f("timeout_ms", "int32", 60_000),
        _f("topics", Array(Struct("ListPartitionReassignmentsTopics", (
            _text("name"),
            _f("partition_indexes", Array("int32", max_count=PARTITIONS_MAX), []),
        )), max_count=TOPICS_MAX), [], nullable_versions="0+", about="null: every reassignment under way"),
    ), flexible_versions="0+")

LIST_PARTITION_REASSIGNMENTS_RESPONSE: Final = Message(
    ApiKey.LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignmentsResponse", "0", (
        _throttle(),
        _f("error_code", "int16", 0),
        _error_message(default=""),
        _f("topics", Array(Struct("OngoingTopicReassignment", (
            _text("name"),
            _f("partitions", Array(Struct("OngoingPartitionReassignment", (
                _f("partition_index", "int32", 0),
                _f("replicas", _REPLICA_IDS, []),
                _f("adding_replicas", _REPLICA_IDS, []),
                _f("removing_replicas", _REPLICA_IDS, []),
            )), max_count=PARTITIONS_MAX), []),
        )), max_count=TOPICS_MAX), []),
    ), flexible_versions="0+")

REQUESTS: Final = (ELECT_LEADERS_REQUEST, ALTER_PARTITION_REASSIGNMENTS_REQUEST, LIST_PARTITION_REASSIGNMENTS_REQUEST)
RESPONSES: Final = (ELECT_LEADERS_RESPONSE, ALTER_PARTITION_REASSIGNMENTS_RESPONSE, LIST_PARTITION_REASSIGNMENTS_RESPONSE)
