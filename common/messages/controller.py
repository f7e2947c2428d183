"""The broker-controller family: what a KRaft broker sends the controller quorum (register,
heartbeat, ISR changes, producer-id blocks, unregistration) and the quorum's DescribeQuorum, in
Kafka's wire shape (common/schema.py, common/codec.py). Every version of these APIs is flexible.

Version ranges (from Kafka's lower bound up to the newest whose fields Raftka fills honestly):

- BrokerRegistration 0-4. v1's ``is_migrating_zk_broker`` is always False (no ZooKeeper); v2's
  ``log_dirs`` is an empty array (Raftka has no directory ids; a harmless default); v3's
  ``previous_broker_epoch`` is -1 when unknown; v4 adds no field (features whose minimum level is
  0 may be listed; Raftka lists only metadata.version). Stops before v5, the log-directory
  cordoning version (``cordoned_log_dirs``): Raftka has no log directories to cordon.
- BrokerHeartbeat 0-1. v1 adds only the tagged ``offline_log_dirs`` (empty: harmless). Stops
  before v2, which exists for cordoned log directories.
- AlterPartition 2-3. Kafka 4.0 dropped v0-1 (topic names); v2 names topics by id, which Raftka
  has; v3 sends each ISR member with its broker epoch, which Raftka has.
- UnregisterBroker 0, AllocateProducerIds 0: the only versions Kafka defines.
- FetchSnapshot 0-1 (a metadata-log follower behind the log start loads the snapshot the Fetch
  answer named, in chunks). v1 adds the tagged ``replica_directory_id`` (Raftka: the zero uuid)
  and the answer's tagged ``node_endpoints`` (Raftka lists none: a broker finds the active
  controller through its bootstrap controllers).
- DescribeQuorum 0-2. v1 adds fetch and caught-up timestamps; v2's additions (KIP-853) all have
  honest values without dynamic voters: null error messages, zero directory ids, and ``nodes``
  listing the static voters' listeners (or empty).
"""
from __future__ import annotations

from typing import Any, Final

from raftka.common.api import ApiKey
from raftka.common.errors import NOT_CONTROLLER
from raftka.common.messages.limits import LISTENERS_MAX, PARTITIONS_MAX, REPLICAS_MAX, TOPICS_MAX
from raftka.common.schema import ZERO_UUID, Array, Field, Message, Struct


FEATURES_MAX: Final = 100  # feature ranges one broker reports (Raftka: metadata.version alone)
LOG_DIRS_MAX: Final = 1_000  # log directory ids one broker lists (Raftka: none)


def _f(name: str, type_: object, default: object, versions: str = "0+", **options: object) -> Field:
    """A field with its value default (Kafka's, else the type's zero)."""
    return Field(name, type_, versions=versions, default=default, **options)  # type: ignore[arg-type]


def _throttle_and_error() -> tuple[Field, Field]:
    return _f("throttle_time_ms", "int32", 0), _f("error_code", "int16", 0)


# -- BrokerRegistration (62) ---------------------------------------------------------------------

BROKER_REGISTRATION_REQUEST: Final = Message(ApiKey.BROKER_REGISTRATION, "BrokerRegistrationRequest", "0-4", (
    _f("broker_id", "int32", 0),
    _f("cluster_id", "string", ""),
    _f("incarnation_id", "uuid", ZERO_UUID, about="new on every start of the broker process"),
    _f("listeners", Array(Struct("Listener", (
        _f("name", "string", ""),
        _f("host", "string", ""),
        _f("port", "uint16", 0),
        _f("security_protocol", "int16", 0, about="Kafka's SecurityProtocol id (0 PLAINTEXT)"),
    )), max_count=LISTENERS_MAX), []),
    _f("features", Array(Struct("Feature", (
        _f("name", "string", ""),
        _f("min_supported_version", "int16", 0),
        _f("max_supported_version", "int16", 0),
    )), max_count=FEATURES_MAX), []),
    _f("rack", "string", "", nullable_versions="0+"),
    _f("is_migrating_zk_broker", "bool", False, "1+", about="Raftka: always False"),
    _f("log_dirs", Array("uuid", max_count=LOG_DIRS_MAX), [], "2+", about="Raftka: empty, no directory ids"),
    _f("previous_broker_epoch", "int64", -1, "3+", about="the epoch before a clean shutdown, else -1"),
), flexible_versions="0+")

BROKER_REGISTRATION_RESPONSE: Final = Message(ApiKey.BROKER_REGISTRATION, "BrokerRegistrationResponse", "0-4", (
    *_throttle_and_error(),
    _f("broker_epoch", "int64", -1, about="the epoch given to this registration, -1 if none"),
), flexible_versions="0+")

# -- BrokerHeartbeat (63) ------------------------------------------------------------------------

BROKER_HEARTBEAT_REQUEST: Final = Message(ApiKey.BROKER_HEARTBEAT, "BrokerHeartbeatRequest", "0-1", (
    _f("broker_id", "int32", 0),
    _f("broker_epoch", "int64", -1),
    _f("current_metadata_offset", "int64", 0, about="the highest metadata offset the broker has applied"),
    _f("want_fence", "bool", False),
    _f("want_shut_down", "bool", False),
    _f("offline_log_dirs", Array("uuid", max_count=LOG_DIRS_MAX), [], "1+", tag=0, tagged_versions="1+"),
), flexible_versions="0+")

BROKER_HEARTBEAT_RESPONSE: Final = Message(ApiKey.BROKER_HEARTBEAT, "BrokerHeartbeatResponse", "0-1", (
    *_throttle_and_error(),
    _f("is_caught_up", "bool", False, about="the broker has nearly caught up with the metadata log"),
    _f("is_fenced", "bool", True),
    _f("should_shut_down", "bool", False),
), flexible_versions="0+")

# -- AlterPartition (56) -------------------------------------------------------------------------

ALTER_PARTITION_REQUEST: Final = Message(ApiKey.ALTER_PARTITION, "AlterPartitionRequest", "2-3", (
    _f("broker_id", "int32", 0, about="the partition leader asking"),
    _f("broker_epoch", "int64", -1),
    _f("topics", Array(Struct("TopicData", (
        _f("topic_id", "uuid", ZERO_UUID, "2+"),
        _f("partitions", Array(Struct("PartitionData", (
            _f("partition_index", "int32", 0),
            _f("leader_epoch", "int32", 0),
            _f("new_isr", Array("int32", max_count=REPLICAS_MAX), [], "0-2"),
            _f("new_isr_with_epochs", Array(Struct("BrokerState", (
                _f("broker_id", "int32", 0, "3+"),
                _f("broker_epoch", "int64", -1, "3+"),
            )), max_count=REPLICAS_MAX), [], "3+"),
            _f("leader_recovery_state", "int8", 0, "1+", about="1 recovering from an unclean election, else 0"),
            _f("partition_epoch", "int32", 0, about="the partition epoch the leader expects"),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
), flexible_versions="0+")

ALTER_PARTITION_RESPONSE: Final = Message(ApiKey.ALTER_PARTITION, "AlterPartitionResponse", "2-3", (
    *_throttle_and_error(),
    _f("topics", Array(Struct("TopicData", (
        _f("topic_id", "uuid", ZERO_UUID, "2+"),
        _f("partitions", Array(Struct("PartitionData", (
            _f("partition_index", "int32", 0),
            _f("error_code", "int16", 0),
            _f("leader_id", "int32", 0),
            _f("leader_epoch", "int32", 0),
            _f("isr", Array("int32", max_count=REPLICAS_MAX), []),
            _f("leader_recovery_state", "int8", 0, "1+"),
            _f("partition_epoch", "int32", 0),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
), flexible_versions="0+")

# -- UnregisterBroker (64) -----------------------------------------------------------------------

UNREGISTER_BROKER_REQUEST: Final = Message(ApiKey.UNREGISTER_BROKER, "UnregisterBrokerRequest", "0", (
    _f("broker_id", "int32", 0, about="the broker to remove from the cluster"),
), flexible_versions="0+")

UNREGISTER_BROKER_RESPONSE: Final = Message(ApiKey.UNREGISTER_BROKER, "UnregisterBrokerResponse", "0", (
    *_throttle_and_error(),
    _f("error_message", "string", "", nullable_versions="0+"),
), flexible_versions="0+")

# -- AllocateProducerIds (67) --------------------------------------------------------------------

ALLOCATE_PRODUCER_IDS_REQUEST: Final = Message(ApiKey.ALLOCATE_PRODUCER_IDS, "AllocateProducerIdsRequest", "0", (
    _f("broker_id", "int32", 0),
    _f("broker_epoch", "int64", -1),
), flexible_versions="0+")

ALLOCATE_PRODUCER_IDS_RESPONSE: Final = Message(ApiKey.ALLOCATE_PRODUCER_IDS, "AllocateProducerIdsResponse", "0", (
    *_throttle_and_error(),
    _f("producer_id_start", "int64", 0, about="the first id of the block"),
    _f("producer_id_len", "int32", 0, about="how many ids the block holds"),
), flexible_versions="0+")

# -- DescribeQuorum (55) -------------------------------------------------------------------------

DESCRIBE_QUORUM_REQUEST: Final = Message(ApiKey.DESCRIBE_QUORUM, "DescribeQuorumRequest", "0-2", (
    _f("topics", Array(Struct("TopicData", (
        _f("topic_name", "string", "", about='Raftka: "__cluster_metadata"'),
        _f("partitions", Array(Struct("PartitionData", (
            _f("partition_index", "int32", 0),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
), flexible_versions="0+")

REPLICA_STATE: Final = Struct("ReplicaState", (
    _f("replica_id", "int32", 0),
    _f("replica_directory_id", "uuid", ZERO_UUID, "2+", about="Raftka: the zero uuid"),
    _f("log_end_offset", "int64", 0, about="-1 when unknown"),
    _f("last_fetch_timestamp", "int64", -1, "1+"),
    _f("last_caught_up_timestamp", "int64", -1, "1+"),
))

DESCRIBE_QUORUM_RESPONSE: Final = Message(ApiKey.DESCRIBE_QUORUM, "DescribeQuorumResponse", "0-2", (
    _f("error_code", "int16", 0),
    _f("error_message", "string", "", "2+", nullable_versions="2+"),
    _f("topics", Array(Struct("TopicData", (
        _f("topic_name", "string", ""),
        _f("partitions", Array(Struct("PartitionData", (
            _f("partition_index", "int32", 0),
            _f("error_code", "int16", 0),
            _f("error_message", "string", "", "2+", nullable_versions="2+"),
            _f("leader_id", "int32", 0, about="-1 when unknown"),
            _f("leader_epoch", "int32", 0),
            _f("high_watermark", "int64", 0),
            _f("current_voters", Array(REPLICA_STATE, max_count=REPLICAS_MAX), []),
            _f("observers", Array(REPLICA_STATE, max_count=REPLICAS_MAX), []),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
    _f("nodes", Array(Struct("Node", (
        _f("node_id", "int32", 0, "2+"),
        _f("listeners", Array(Struct("Listener", (
            _f("name", "string", "", "2+"),
            _f("host", "string", "", "2+"),
            _f("port", "uint16", 0, "2+"),
        )), max_count=LISTENERS_MAX), [], "2+"),
    )), max_count=REPLICAS_MAX), [], "2+"),
), flexible_versions="0+")

# -- FetchSnapshot (59) --------------------------------------------------------------------------

SNAPSHOT_ID: Final = Struct("SnapshotId", (
    _f("end_offset", "int64", 0, about="the offset right after the snapshot's last record"),
    _f("epoch", "int32", 0),
))

FETCH_SNAPSHOT_REQUEST: Final = Message(ApiKey.FETCH_SNAPSHOT, "FetchSnapshotRequest", "0-1", (
    _f("cluster_id", "string", None, nullable_versions="0+", tag=0, tagged_versions="0+"),
    _f("replica_id", "int32", -1, about="the fetching broker (an observer of the metadata log)"),
    _f("max_bytes", "int32", 0x7FFFFFFF, about="bytes of snapshot data in the answer, at most"),
    _f("topics", Array(Struct("TopicSnapshot", (
        _f("name", "string", "", about='Raftka: "__cluster_metadata"'),
        _f("partitions", Array(Struct("PartitionSnapshot", (
            _f("partition", "int32", 0),
            _f("current_leader_epoch", "int32", 0, about="-1 when unknown"),
            _f("snapshot_id", SNAPSHOT_ID, {"end_offset": 0, "epoch": 0}),
            _f("position", "int64", 0, about="the byte of the snapshot to start from"),
            _f("replica_directory_id", "uuid", ZERO_UUID, "1+", tag=0, tagged_versions="1+",
               about="Raftka: the zero uuid"),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
), flexible_versions="0+")

FETCH_SNAPSHOT_RESPONSE: Final = Message(ApiKey.FETCH_SNAPSHOT, "FetchSnapshotResponse", "0-1", (
    *_throttle_and_error(),
    _f("topics", Array(Struct("TopicSnapshot", (
        _f("name", "string", ""),
        _f("partitions", Array(Struct("PartitionSnapshot", (
            _f("index", "int32", 0),
            _f("error_code", "int16", 0),
            _f("snapshot_id", SNAPSHOT_ID, {"end_offset": 0, "epoch": 0}),
            _f("current_leader", Struct("LeaderIdAndEpoch", (
                _f("leader_id", "int32", 0, about="-1 when unknown"),
                _f("leader_epoch", "int32", 0),
            )), {"leader_id": 0, "leader_epoch": 0}, tag=0, tagged_versions="0+"),
            _f("size", "int64", 0, about="bytes of the whole snapshot"),
            _f("position", "int64", 0, about="where in the snapshot unaligned_records starts"),
            _f("unaligned_records", "records", b"", about="a chunk of the snapshot's bytes"),
        )), max_count=PARTITIONS_MAX), []),
    )), max_count=TOPICS_MAX), []),
    _f("node_endpoints", Array(Struct("NodeEndpoint", (
        _f("node_id", "int32", 0, "1+"),
        _f("host", "string", "", "1+"),
        _f("port", "uint16", 0, "1+"),
    )), max_count=REPLICAS_MAX), [], "1+", tag=0, tagged_versions="1+", about="Raftka: empty"),
), flexible_versions="0+")

# -- reading DescribeQuorum (brokers and tools find the active controller with it) ------------------

METADATA_TOPIC: Final = "__cluster_metadata"  # KRaft's metadata log: the one partition DescribeQuorum names
CONTROLLER_LISTENER: Final = "CONTROLLER"  # the listener of ``nodes`` where controller requests go
DESCRIBE_QUORUM_BODY: Final = {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}


def quorum_partition(answer: dict) -> dict | None:
    """The ``__cluster_metadata``-0 entry of a decoded DescribeQuorum answer, or None."""
    for topic in answer.get("topics") or []:
        if topic.get("topic_name") == METADATA_TOPIC:
            for partition in topic.get("partitions") or []:
                if partition.get("partition_index") == 0:
                    return partition
    return None


def node_listener(answer: dict, node_id: int, name: str = CONTROLLER_LISTENER) -> str | None:
    """"host:port" of node ``node_id``'s listener ``name`` in a DescribeQuorum v2 answer, or None."""
    for node in answer.get("nodes") or []:
        if node.get("node_id") == node_id:
            for listener in node.get("listeners") or []:
                if listener.get("name") == name:
                    return f"{listener['host']}:{listener['port']}"
    return None


REQUESTS: Final = (
    BROKER_REGISTRATION_REQUEST, BROKER_HEARTBEAT_REQUEST, ALTER_PARTITION_REQUEST, UNREGISTER_BROKER_REQUEST,
    ALLOCATE_PRODUCER_IDS_REQUEST, DESCRIBE_QUORUM_REQUEST, FETCH_SNAPSHOT_REQUEST,
)
RESPONSES: Final = (
    BROKER_REGISTRATION_RESPONSE, BROKER_HEARTBEAT_RESPONSE, ALTER_PARTITION_RESPONSE, UNREGISTER_BROKER_RESPONSE,
    ALLOCATE_PRODUCER_IDS_RESPONSE, DESCRIBE_QUORUM_RESPONSE, FETCH_SNAPSHOT_RESPONSE,
)
# api key -> the version Raftka's broker and tools send each broker-controller API at (its newest).
NEWEST_VERSIONS: Final[dict[int, int]] = {m.api_key: m.versions()[-1] for m in (
    BROKER_REGISTRATION_REQUEST, BROKER_HEARTBEAT_REQUEST, ALTER_PARTITION_REQUEST, UNREGISTER_BROKER_REQUEST,
    ALLOCATE_PRODUCER_IDS_REQUEST, DESCRIBE_QUORUM_REQUEST)}


def answer_error(body: Any) -> int:
    """The error of a Kafka answer that stands for the whole request: the top-level
    ``error_code``, else NOT_CONTROLLER when any entry carries it (an answer without a top-level
    error field spreads a whole-request error into its entries), else NONE (0)."""
    if not isinstance(body, dict):
        return 0
    code = body.get("error_code")
    if code:
        return code
    return NOT_CONTROLLER if _carries(body, NOT_CONTROLLER) else 0


def _carries(value: Any, code: int) -> bool:
    if isinstance(value, dict):
        return value.get("error_code") == code or any(_carries(v, code) for v in value.values()
                                                         if isinstance(v, (dict, list)))
    if isinstance(value, list):
        return any(_carries(v, code) for v in value)
    return False
