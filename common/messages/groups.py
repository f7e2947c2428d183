"""The group coordinator's requests and responses: finding the coordinator, the classic group
protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), committed offsets (OffsetCommit,
OffsetFetch, OffsetDelete) and group administration (DescribeGroups, ListGroups, DeleteGroups).

Where each range stops, and why:

- FindCoordinator 0-4: v4 asks for many keys at once (``coordinator_keys``) and answers with
  ``coordinators[]`` instead of one coordinator; v5 only adds an error code for transactions
  (KIP-890) and v6 share-group keys (KIP-932), which Raftka does not serve.
- JoinGroup 0-9: Kafka 4.0 dropped v0-1 and then added them back in 4.0.1 / 4.1 (KAFKA-19444, for
  older librdkafka clients); Kafka's definition lists 0-9, so Raftka serves them all.
- SyncGroup 0-5, Heartbeat 0-4, LeaveGroup 0-5, DeleteGroups 0-2, OffsetDelete 0: every version.
- OffsetCommit 2-8: Kafka 4 starts at v2; v9+ belong to the new consumer protocol (KIP-848).
- OffsetFetch 1-8: Kafka 4 starts at v1; v8 asks for many groups at once (``groups[]``); v9+ are
  KIP-848's (member epochs, then topic ids).
- DescribeGroups 0-5: v6 only adds a per-group error message and GROUP_ID_NOT_FOUND (KIP-1043).
- ListGroups 0-4: v5 adds group types (KIP-848).

Fields that exist only in versions past these ranges are left out. Defaults are Kafka's (the type's
zero where Kafka names none). Kafka declares no tagged field in these messages; Raftka adds one,
a documented extension in a tag number Kafka does not use (``RAFTKA_TAG_MIN`` and up):

- HeartbeatRequest v4 ``max_wait_ms`` (tag 10000): how long the coordinator may hold the answer
  while the group stays Stable. It answers at once when a rebalance starts, so a member holding a
  heartbeat learns of it then, not a heartbeat interval later. A Kafka coordinator skips the tag,
  as it skips every tag it does not know, and answers at once; a client that never sends it (every
  third-party one) gets Kafka's immediate answer from Raftka too.
"""
from __future__ import annotations

from typing import Any, Final

from raftka.common.api import ApiKey
from raftka.common.messages.limits import (GROUPS_MAX, LEAVING_MEMBERS_MAX, MEMBER_BYTES_MAX, MEMBERS_MAX,
                                           PARTITIONS_MAX, PROTOCOLS_MAX, STATES_MAX, TOPICS_MAX)
from raftka.common.schema import ARRAY_COUNT_MAX, Array, Field, Message, Struct


_ZERO: Final[dict[str, Any]] = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "bool": False, "string": "",
                                "bytes": b""}
_UNSET: Final = object()


# Tag numbers from here on are Raftka's own extensions (module docstring). Kafka numbers its tags
# from 0 in each struct and has used a handful; a Kafka peer skips a tag it does not know.
RAFTKA_TAG_MIN: Final = 10_000


def _f(name: str, type_: Any, versions: str = "0+", default: Any = _UNSET, *, nullable_versions: str | None = None,
       max_length: int | None = None, about: str = "", **options: Any) -> Field:
    """A field whose default is Kafka's: ``default`` when given, else the type's zero ([] for arrays)."""
    if default is _UNSET:
        default = [] if isinstance(type_, Array) else _ZERO[type_]
    return Field(name, type_, versions, default=default, max_length=max_length, about=about,
                 nullable_versions=nullable_versions, **options)


def _throttle(versions: str) -> Field:
    return _f("throttle_time_ms", "int32", versions, about="how long the client was throttled for a quota")


def _error(versions: str = "0+") -> Field:
    return _f("error_code", "int16", versions, about="0, or the error of this entry")


def _group_instance_id(versions: str, default: Any = None, about: str = "static member id (KIP-345), or null"
                       ) -> Field:
    return _f("group_instance_id", "string", versions, default, nullable_versions=versions, about=about)


# -- FindCoordinator (10) -------------------------------------------------------------------------------

FIND_COORDINATOR_REQUEST: Final = Message(ApiKey.FIND_COORDINATOR, "FindCoordinatorRequest", "0-4", (
    _f("key", "string", "0-3", about="the group id (or transactional id) to locate"),
    _f("key_type", "int8", "1+", 0, about="0 group, 1 transaction"),
    _f("coordinator_keys", Array("string", max_count=GROUPS_MAX), "4+", about="the keys to locate, in one go"),
), flexible_versions="3+")

FIND_COORDINATOR_RESPONSE: Final = Message(ApiKey.FIND_COORDINATOR, "FindCoordinatorResponse", "0-4", (
    _throttle("1+"),
    _error("0-3"),
    _f("error_message", "string", "1-3", nullable_versions="1-3", about="the error in words, or null"),
    _f("node_id", "int32", "0-3", about="the coordinator's broker id"),
    _f("host", "string", "0-3", about="the coordinator's host"),
    _f("port", "int32", "0-3", about="the coordinator's port"),
    _f("coordinators", Array(Struct("Coordinator", (
        _f("key", "string", "4+", about="the key asked for"),
        _f("node_id", "int32", "4+", about="its coordinator's broker id"),
        _f("host", "string", "4+", about="its coordinator's host"),
        _f("port", "int32", "4+", about="its coordinator's port"),
        _error("4+"),
        _f("error_message", "string", "4+", nullable_versions="4+", about="the error in words, or null"),
    )), max_count=GROUPS_MAX), "4+", about="one answer per key asked for"),
), flexible_versions="3+")

# -- JoinGroup (11) ---------------------------------------------------------------------------------------

JOIN_GROUP_REQUEST: Final = Message(ApiKey.JOIN_GROUP, "JoinGroupRequest", "0-9", (
    _f("group_id", "string", about="the group to join"),
    _f("session_timeout_ms", "int32", about="a member silent this long is removed"),
    _f("rebalance_timeout_ms", "int32", "1+", -1, about="how long a rebalance waits for members; -1: the session "
                                                         "timeout (v0)"),
    _f("member_id", "string", about="the member's id; empty on its first join"),
    _group_instance_id("5+"),
    _f("protocol_type", "string", about="the kind of group, e.g. consumer"),
    _f("protocols", Array(Struct("JoinGroupRequestProtocol", (
        _f("name", "string", about="an assignor's name"),
        _f("metadata", "bytes", max_length=MEMBER_BYTES_MAX, about="the member's subscription for it"),
    )), max_count=PROTOCOLS_MAX), about="the assignors the member offers, preferred first"),
    _f("reason", "string", "8+", None, nullable_versions="8+", about="why the member joins, or null"),
), flexible_versions="6+")

JOIN_GROUP_RESPONSE: Final = Message(ApiKey.JOIN_GROUP, "JoinGroupResponse", "0-9", (
    _throttle("2+"),
    _error(),
    _f("generation_id", "int32", "0+", -1, about="the group's generation"),
    _f("protocol_type", "string", "7+", None, nullable_versions="7+", about="the group's kind, or null"),
    _f("protocol_name", "string", nullable_versions="7+", about="the chosen assignor (null from v7 on error)"),
    _f("leader", "string", about="the leader's member id"),
    _f("skip_assignment", "bool", "9+", False, about="the leader must not assign: the coordinator did"),
    _f("member_id", "string", about="this member's id"),
    _f("members", Array(Struct("JoinGroupResponseMember", (
        _f("member_id", "string", about="a member's id"),
        _group_instance_id("5+"),
        _f("metadata", "bytes", max_length=MEMBER_BYTES_MAX, about="its subscription for the chosen assignor"),
    )), max_count=MEMBERS_MAX), about="every member (to the leader only; empty for the others)"),
), flexible_versions="6+")

# -- Heartbeat (12) ---------------------------------------------------------------------------------------

HEARTBEAT_REQUEST: Final = Message(ApiKey.HEARTBEAT, "HeartbeatRequest", "0-4", (
    _f("group_id", "string", about="the member's group"),
    _f("generation_id", "int32", about="the generation the member is in"),
    _f("member_id", "string", about="the member's id"),
    _group_instance_id("3+"),
    # Raftka's extension (module docstring): 0, Kafka's behaviour, answers at once.
    _f("max_wait_ms", "int32", "4+", 0, tag=RAFTKA_TAG_MIN, tagged_versions="4+",
       about="Raftka: hold the answer up to this long while the group stays Stable (<= 0: at once)"),
), flexible_versions="4+")

HEARTBEAT_RESPONSE: Final = Message(ApiKey.HEARTBEAT, "HeartbeatResponse", "0-4", (
    _throttle("1+"),
    _error(),
), flexible_versions="4+")

# -- LeaveGroup (13) ---------------------------------------------------------------------------------------

LEAVE_GROUP_REQUEST: Final = Message(ApiKey.LEAVE_GROUP, "LeaveGroupRequest", "0-5", (
    _f("group_id", "string", about="the group to leave"),
    _f("member_id", "string", "0-2", about="the one member leaving (before v3)"),
    _f("members", Array(Struct("MemberIdentity", (
        _f("member_id", "string", "3+", about="a leaving member's id"),
        _group_instance_id("3+"),
        _f("reason", "string", "5+", None, nullable_versions="5+", about="why it leaves, or null"),
    )), max_count=LEAVING_MEMBERS_MAX), "3+", about="the members leaving (v3+)"),
), flexible_versions="4+")

LEAVE_GROUP_RESPONSE: Final = Message(ApiKey.LEAVE_GROUP, "LeaveGroupResponse", "0-5", (
    _throttle("1+"),
    _error(),
    _f("members", Array(Struct("MemberResponse", (
        _f("member_id", "string", "3+", about="a leaving member's id"),
        _group_instance_id("3+", "", about="its static id, or null"),
        _error("3+"),
    )), max_count=LEAVING_MEMBERS_MAX), "3+", about="one answer per member (v3+)"),
), flexible_versions="4+")

# -- SyncGroup (14) ----------------------------------------------------------------------------------------

SYNC_GROUP_REQUEST: Final = Message(ApiKey.SYNC_GROUP, "SyncGroupRequest", "0-5", (
    _f("group_id", "string", about="the member's group"),
    _f("generation_id", "int32", about="the generation the member joined"),
    _f("member_id", "string", about="the member's id"),
    _group_instance_id("3+"),
    _f("protocol_type", "string", "5+", None, nullable_versions="5+", about="the group's kind, checked, or null"),
    _f("protocol_name", "string", "5+", None, nullable_versions="5+", about="the chosen assignor, checked, or null"),
    _f("assignments", Array(Struct("SyncGroupRequestAssignment", (
        _f("member_id", "string", about="a member's id"),
        _f("assignment", "bytes", max_length=MEMBER_BYTES_MAX, about="what it is assigned"),
    )), max_count=MEMBERS_MAX), about="the leader's assignment of every member; empty from the others"),
), flexible_versions="4+")

SYNC_GROUP_RESPONSE: Final = Message(ApiKey.SYNC_GROUP, "SyncGroupResponse", "0-5", (
    _throttle("1+"),
    _error(),
    _f("protocol_type", "string", "5+", None, nullable_versions="5+", about="the group's kind, or null"),
    _f("protocol_name", "string", "5+", None, nullable_versions="5+", about="the chosen assignor, or null"),
    _f("assignment", "bytes", max_length=MEMBER_BYTES_MAX, about="this member's assignment"),
), flexible_versions="4+")

# -- OffsetCommit (8) ---------------------------------------------------------------------------------------

OFFSET_COMMIT_REQUEST: Final = Message(ApiKey.OFFSET_COMMIT, "OffsetCommitRequest", "2-8", (
    _f("group_id", "string", about="the group committing"),
    _f("generation_id_or_member_epoch", "int32", "1+", -1, about="the committer's generation; -1: not a member"),
    _f("member_id", "string", "1+", about="the committer's member id; empty: not a member"),
    _group_instance_id("7+"),
    _f("retention_time_ms", "int64", "2-4", -1, about="how long to keep the offsets; -1: the broker's setting"),
    _f("topics", Array(Struct("OffsetCommitRequestTopic", (
        _f("name", "string", "0-9", about="the topic"),
        _f("partitions", Array(Struct("OffsetCommitRequestPartition", (
            _f("partition_index", "int32", about="the partition"),
            _f("committed_offset", "int64", about="the offset to commit"),
            _f("committed_leader_epoch", "int32", "6+", -1, about="the leader epoch of that offset; -1: unknown"),
            _f("committed_metadata", "string", nullable_versions="0+", about="the client's note, or null"),
        )), max_count=PARTITIONS_MAX), about="the partitions committed"),
    )), max_count=TOPICS_MAX), about="the topics committed"),
), flexible_versions="8+")

OFFSET_COMMIT_RESPONSE: Final = Message(ApiKey.OFFSET_COMMIT, "OffsetCommitResponse", "2-8", (
    _throttle("3+"),
    _f("topics", Array(Struct("OffsetCommitResponseTopic", (
        _f("name", "string", "0-9", about="the topic"),
        _f("partitions", Array(Struct("OffsetCommitResponsePartition", (
            _f("partition_index", "int32", about="the partition"),
            _error(),
        )), max_count=PARTITIONS_MAX), about="one answer per partition"),
    )), max_count=TOPICS_MAX), about="one answer per topic"),
), flexible_versions="8+")

# -- OffsetFetch (9) ------------------------------------------------------------------------------------------

OFFSET_FETCH_REQUEST: Final = Message(ApiKey.OFFSET_FETCH, "OffsetFetchRequest", "1-8", (
    _f("group_id", "string", "0-7", about="the group (before v8)"),
    _f("topics", Array(Struct("OffsetFetchRequestTopic", (
        _f("name", "string", "0-7", about="the topic"),
        _f("partition_indexes", Array("int32", max_count=PARTITIONS_MAX), "0-7", about="its partitions"),
    )), max_count=TOPICS_MAX), "0-7", nullable_versions="2-7", about="the topics; null (v2+): every topic"),
    _f("groups", Array(Struct("OffsetFetchRequestGroup", (
        _f("group_id", "string", "8+", about="a group"),
        _f("topics", Array(Struct("OffsetFetchRequestTopics", (
            _f("name", "string", "8-9", about="the topic"),
            _f("partition_indexes", Array("int32", max_count=PARTITIONS_MAX), "8+", about="its partitions"),
        )), max_count=TOPICS_MAX), "8+", nullable_versions="8+", about="its topics; null: every topic"),
    )), max_count=GROUPS_MAX), "8+", about="the groups asked for (v8+)"),
    _f("require_stable", "bool", "7+", False, about="wait out pending transactional commits (KIP-447)"),
), flexible_versions="6+")

OFFSET_FETCH_RESPONSE: Final = Message(ApiKey.OFFSET_FETCH, "OffsetFetchResponse", "1-8", (
    _throttle("3+"),
    _f("topics", Array(Struct("OffsetFetchResponseTopic", (
        _f("name", "string", "0-7", about="the topic"),
        _f("partitions", Array(Struct("OffsetFetchResponsePartition", (
            _f("partition_index", "int32", "0-7", about="the partition"),
            _f("committed_offset", "int64", "0-7", about="the committed offset; -1: none"),
            _f("committed_leader_epoch", "int32", "5-7", -1, about="its leader epoch; -1: unknown"),
            _f("metadata", "string", "0-7", nullable_versions="0-7", about="the client's note, or null"),
            _error("0-7"),
        )), max_count=PARTITIONS_MAX), "0-7", about="one answer per partition"),
    )), max_count=TOPICS_MAX), "0-7", about="one answer per topic (before v8)"),
    _f("error_code", "int16", "2-7", 0, about="the group's error (v2-7)"),
    _f("groups", Array(Struct("OffsetFetchResponseGroup", (
        _f("group_id", "string", "8+", about="the group"),
        _f("topics", Array(Struct("OffsetFetchResponseTopics", (
            _f("name", "string", "8-9", about="the topic"),
            _f("partitions", Array(Struct("OffsetFetchResponsePartitions", (
                _f("partition_index", "int32", "8+", about="the partition"),
                _f("committed_offset", "int64", "8+", about="the committed offset; -1: none"),
                _f("committed_leader_epoch", "int32", "8+", -1, about="its leader epoch; -1: unknown"),
                _f("metadata", "string", "8+", nullable_versions="8+", about="the client's note, or null"),
                _error("8+"),
            )), max_count=PARTITIONS_MAX), "8+", about="one answer per partition"),
        )), max_count=TOPICS_MAX), "8+", about="one answer per topic"),
        _f("error_code", "int16", "8+", 0, about="the group's error"),
    )), max_count=GROUPS_MAX), "8+", about="one answer per group (v8+)"),
), flexible_versions="6+")

# -- DescribeGroups (15) ------------------------------------------------------------------------------------

DESCRIBE_GROUPS_REQUEST: Final = Message(ApiKey.DESCRIBE_GROUPS, "DescribeGroupsRequest", "0-5", (
    _f("groups", Array("string", max_count=GROUPS_MAX), about="the groups to describe"),
    _f("include_authorized_operations", "bool", "3+", about="answer with the caller's allowed operations"),
), flexible_versions="5+")

DESCRIBE_GROUPS_RESPONSE: Final = Message(ApiKey.DESCRIBE_GROUPS, "DescribeGroupsResponse", "0-5", (
    _throttle("1+"),
    _f("groups", Array(Struct("DescribedGroup", (
        _error(),
        _f("group_id", "string", about="the group"),
        _f("group_state", "string", about="its state, e.g. Stable; empty if unknown"),
        _f("protocol_type", "string", about="its kind, e.g. consumer"),
        _f("protocol_data", "string", about="its chosen assignor (when Stable)"),
        _f("members", Array(Struct("DescribedGroupMember", (
            _f("member_id", "string", about="a member's id"),
            _group_instance_id("4+"),
            _f("client_id", "string", about="its client id"),
            _f("client_host", "string", about="its client's host"),
            _f("member_metadata", "bytes", max_length=MEMBER_BYTES_MAX, about="its subscription (when Stable)"),
            _f("member_assignment", "bytes", max_length=MEMBER_BYTES_MAX, about="its assignment (when Stable)"),
        )), max_count=MEMBERS_MAX), about="its members"),
        _f("authorized_operations", "int32", "3+", -2**31, about="a bit per allowed operation; -2^31: not asked"),
    )), max_count=GROUPS_MAX), about="one answer per group"),
), flexible_versions="5+")

# -- ListGroups (16) ------------------------------------------------------------------------------------------

LIST_GROUPS_REQUEST: Final = Message(ApiKey.LIST_GROUPS, "ListGroupsRequest", "0-4", (
    _f("states_filter", Array("string", max_count=STATES_MAX), "4+", about="only groups in these states; empty: all"),
), flexible_versions="3+")

LIST_GROUPS_RESPONSE: Final = Message(ApiKey.LIST_GROUPS, "ListGroupsResponse", "0-4", (
    _throttle("1+"),
    _error(),
    # Every group the coordinator holds: not a count a client chose, so the schema's general cap.
    _f("groups", Array(Struct("ListedGroup", (
        _f("group_id", "string", about="the group"),
        _f("protocol_type", "string", about="its kind, e.g. consumer"),
        _f("group_state", "string", "4+", about="its state"),
    )), max_count=ARRAY_COUNT_MAX), about="the coordinator's groups"),
), flexible_versions="3+")

# -- DeleteGroups (42) ------------------------------------------------------------------------------------------

DELETE_GROUPS_REQUEST: Final = Message(ApiKey.DELETE_GROUPS, "DeleteGroupsRequest", "0-2", (
    _f("groups_names", Array("string", max_count=GROUPS_MAX), about="the groups to delete"),
), flexible_versions="2+")

DELETE_GROUPS_RESPONSE: Final = Message(ApiKey.DELETE_GROUPS, "DeleteGroupsResponse", "0-2", (
    _throttle("0+"),
    _f("results", Array(Struct("DeletableGroupResult", (
        _f("group_id", "string", about="the group"),
        _error(),
    )), max_count=GROUPS_MAX), about="one answer per group"),
), flexible_versions="2+")

# -- OffsetDelete (47) ------------------------------------------------------------------------------------------

OFFSET_DELETE_REQUEST: Final = Message(ApiKey.OFFSET_DELETE, "OffsetDeleteRequest", "0", (
    _f("group_id", "string", about="the group"),
    _f("topics", Array(Struct("OffsetDeleteRequestTopic", (
        _f("name", "string", about="the topic"),
        _f("partitions", Array(Struct("OffsetDeleteRequestPartition", (
            _f("partition_index", "int32", about="a partition whose committed offset goes"),
        )), max_count=PARTITIONS_MAX), about="its partitions"),
    )), max_count=TOPICS_MAX), about="the topics"),
), flexible_versions="none")

OFFSET_DELETE_RESPONSE: Final = Message(ApiKey.OFFSET_DELETE, "OffsetDeleteResponse", "0", (
    _error(),
    _throttle("0+"),
    _f("topics", Array(Struct("OffsetDeleteResponseTopic", (
        _f("name", "string", about="the topic"),
        _f("partitions", Array(Struct("OffsetDeleteResponsePartition", (
            _f("partition_index", "int32", about="the partition"),
            _error(),
        )), max_count=PARTITIONS_MAX), about="one answer per partition"),
    )), max_count=TOPICS_MAX), about="one answer per topic"),
), flexible_versions="none")

REQUESTS: Final = (
    FIND_COORDINATOR_REQUEST, JOIN_GROUP_REQUEST, HEARTBEAT_REQUEST, LEAVE_GROUP_REQUEST, SYNC_GROUP_REQUEST,
    OFFSET_COMMIT_REQUEST, OFFSET_FETCH_REQUEST, DESCRIBE_GROUPS_REQUEST, LIST_GROUPS_REQUEST,
    DELETE_GROUPS_REQUEST, OFFSET_DELETE_REQUEST,
)
RESPONSES: Final = (
    FIND_COORDINATOR_RESPONSE, JOIN_GROUP_RESPONSE, HEARTBEAT_RESPONSE, LEAVE_GROUP_RESPONSE, SYNC_GROUP_RESPONSE,
    OFFSET_COMMIT_RESPONSE, OFFSET_FETCH_RESPONSE, DESCRIBE_GROUPS_RESPONSE, LIST_GROUPS_RESPONSE,
    DELETE_GROUPS_RESPONSE, OFFSET_DELETE_RESPONSE,
)
