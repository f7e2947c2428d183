"""The error table: every error code Raftka puts on the wire, with Kafka's numbers and names.

One row per error: code, name, retriable, invalid_metadata, and a default message. Each row gets
an exception class (``NotLeaderOrFollowerError`` for ``NOT_LEADER_OR_FOLLOWER``), all subclasses
of :class:`RaftkaError`. ``for_code(code)`` gives the class; ``error_for(code, ...)`` an instance.

``retriable`` means the same request may succeed if sent again later (perhaps to another
broker); ``invalid_metadata`` means the client should refresh its metadata before retrying.

Kafka's AlterPartition answers a stale partition epoch with INVALID_UPDATE_VERSION; docs/design.md
calls that situation "stale partition epoch", and Raftka keeps Kafka's name for the code.
"""
from __future__ import annotations

from typing import NamedTuple


class ErrorSpec(NamedTuple):
    code: int
    name: str
    retriable: bool
    invalid_metadata: bool
    message: str


# (code, name, retriable, invalid_metadata, message): numbers and names as Kafka's Errors.java.
_TABLE: tuple[tuple[int, str, bool, bool, str], ...] = (
    (-1, "UNKNOWN_SERVER_ERROR", False, False, "The server experienced an unexpected error when processing the request."),
    (0, "NONE", False, False, "No error."),
    (1, "OFFSET_OUT_OF_RANGE", False, False, "The requested offset is not within the range of offsets maintained by the server."),
    (2, "CORRUPT_MESSAGE", True, False, "The record batch failed its CRC check, exceeds its declared length, or is otherwise corrupt."),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, True, "This server does not host this topic-partition."),
    (4, "INVALID_FETCH_SIZE", False, False, "The requested fetch size is invalid."),
    (5, "LEADER_NOT_AVAILABLE", True, True, "There is no leader for this topic-partition as we are in the middle of a leadership election."),
    (6, "NOT_LEADER_OR_FOLLOWER", True, True, "This server is not the leader or a follower for this partition."),
    (7, "REQUEST_TIMED_OUT", True, False, "The request timed out."),
    (8, "BROKER_NOT_AVAILABLE", False, False, "The broker is not available."),
    (9, "REPLICA_NOT_AVAILABLE", True, True, "The replica is not available for the requested topic-partition."),
    (10, "MESSAGE_TOO_LARGE", False, False, "The request included a record batch larger than the max message size the server will accept."),
    (11, "STALE_CONTROLLER_EPOCH", False, False, "The controller moved to another broker."),
    (12, "OFFSET_METADATA_TOO_LARGE", False, False, "The metadata field of the offset request was too large."),
    (13, "NETWORK_EXCEPTION", True, True, "The server disconnected before a response was received."),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True, False, "The coordinator is loading and hence can't process requests."),
    (15, "COORDINATOR_NOT_AVAILABLE", True, False, "The coordinator is not available."),
    (16, "NOT_COORDINATOR", True, False, "This is not the correct coordinator."),
    (17, "INVALID_TOPIC_EXCEPTION", False, False, "The request attempted to perform an operation on an invalid topic."),
    (18, "RECORD_LIST_TOO_LARGE", False, False, "The request included a batch larger than the configured segment size on the server."),
    (19, "NOT_ENOUGH_REPLICAS", True, False, "Records are rejected since there are fewer in-sync replicas than required."),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, False, "Records are written to the log, but to fewer in-sync replicas than required."),
    (21, "INVALID_REQUIRED_ACKS", False, False, "Produce request specified an invalid value for required acks."),
    (22, "ILLEGAL_GENERATION", False, False, "Specified group generation id is not valid."),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False, False, "The group member's supported protocols are incompatible with those of existing members."),
    (24, "INVALID_GROUP_ID", False, False, "The configured groupId is invalid."),
    (25, "UNKNOWN_MEMBER_ID", False, False, "The coordinator is not aware of this member."),
    (26, "INVALID_SESSION_TIMEOUT", False, False, "The session timeout is not within the range allowed by the broker."),
    (27, "REBALANCE_IN_PROGRESS", False, False, "The group is rebalancing, so a rejoin is needed."),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False, False, "The committing offset data size is not valid."),
    (29, "TOPIC_AUTHORIZATION_FAILED", False, False, "The principal may not perform this operation on the topic."),
    (30, "GROUP_AUTHORIZATION_FAILED", False, False, "The principal may not perform this operation on the consumer group."),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False, False, "The principal may not perform this operation on the cluster."),
    (32, "INVALID_TIMESTAMP", False, False, "The timestamp of the message is out of acceptable range."),
    (33, "UNSUPPORTED_SASL_MECHANISM", False, False, "This listener does not offer the SASL mechanism asked for."),
    (34, "ILLEGAL_SASL_STATE", False, False, "The request does not fit where the connection is in its SASL exchange."),
    (35, "UNSUPPORTED_VERSION", False, False, "The version of API is not supported."),
    (36, "TOPIC_ALREADY_EXISTS", False, False, "Topic with this name already exists."),
    (37, "INVALID_PARTITIONS", False, False, "Number of partitions is below 1."),
    (38, "INVALID_REPLICATION_FACTOR", False, False, "Replication factor is below 1 or larger than the number of available brokers."),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, False, "Replica assignment is invalid."),
    (40, "INVALID_CONFIG", False, False, "Configuration is invalid."),
    (41, "NOT_CONTROLLER", True, False, "This is not the correct controller for this cluster."),
    (42, "INVALID_REQUEST", False, False, "The request is malformed or violates the protocol."),
    (44, "POLICY_VIOLATION", False, False, "Request parameters do not satisfy the configured policy."),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, False, "The broker received an out of order sequence number."),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, False, "The broker received a duplicate sequence number."),
    (47, "INVALID_PRODUCER_EPOCH", False, False, "Producer attempted to produce with an old epoch."),
    (49, "INVALID_PRODUCER_ID_MAPPING", False, False, "The producer attempted to use a producer id which is not currently assigned."),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, False, "The principal may not use this transactional id."),
    (54, "SECURITY_DISABLED", False, False, "No authorizer or SASL mechanism is configured for this."),
    (56, "KAFKA_STORAGE_ERROR", True, True, "Disk error when trying to access log file on the disk."),
    (58, "SASL_AUTHENTICATION_FAILED", False, False, "SASL authentication failed: unknown user, wrong password or a malformed exchange."),
    (59, "UNKNOWN_PRODUCER_ID", False, False, "The broker could not locate the producer metadata associated with the producer id."),
    (68, "NON_EMPTY_GROUP", False, False, "The group is not empty."),
    (69, "GROUP_ID_NOT_FOUND", False, False, "The group id does not exist."),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True, False, "The fetch session the request names does not exist on this broker; send a full fetch."),
    (71, "INVALID_FETCH_SESSION_EPOCH", True, False, "The fetch session epoch is not the one the broker expects next; send a full fetch."),
    (74, "FENCED_LEADER_EPOCH", True, True, "The leader epoch in the request is older than the epoch on the broker."),
    (75, "UNKNOWN_LEADER_EPOCH", True, True, "The leader epoch in the request is newer than the epoch on the broker."),
    (77, "STALE_BROKER_EPOCH", False, False, "Broker epoch has changed."),
    (78, "OFFSET_NOT_AVAILABLE", True, False, "The leader high watermark has not caught up from a recent leader election."),
    (79, "MEMBER_ID_REQUIRED", False, False, "The group member needs to have a valid member id before actually entering a consumer group."),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True, True, "The preferred leader was not available."),
    (82, "FENCED_INSTANCE_ID", False, False, "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id."),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True, True, "Eligible topic partition leaders are not available."),
    (84, "ELECTION_NOT_NEEDED", True, True, "Leader election not needed for topic partition."),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False, False, "No partition reassignment is in progress."),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False, False, "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."),
    (87, "INVALID_RECORD", False, False, "This record has failed the validation on broker and hence will be rejected."),
    (91, "RESOURCE_NOT_FOUND", False, False, "The request names a resource that does not exist."),
    (92, "DUPLICATE_RESOURCE", False, False, "The request names the same resource more than once."),
    (93, "UNACCEPTABLE_CREDENTIAL", False, False, "The credential does not meet the broker's criteria (e.g. too few iterations)."),
    (95, "INVALID_UPDATE_VERSION", False, False, "The given update version (partition epoch) was stale."),
    (98, "SNAPSHOT_NOT_FOUND", False, False, "Requested snapshot was not found."),
    (99, "POSITION_OUT_OF_RANGE", False, False, "Requested position is not greater than or equal to zero, and less than the size of the snapshot."),
    (100, "UNKNOWN_TOPIC_ID", True, True, "This server does not host this topic ID."),
    (101, "DUPLICATE_BROKER_REGISTRATION", False, False, "This broker ID is already in use by another live broker incarnation."),
    (102, "BROKER_ID_NOT_REGISTERED", False, False, "The given broker ID was not registered."),
    (103, "INCONSISTENT_TOPIC_ID", True, True, "The log's topic ID did not match the topic ID in the request."),
    (104, "INCONSISTENT_CLUSTER_ID", False, False, "The clusterId in the request does not match that found on the server."),
    (107, "INELIGIBLE_REPLICA", False, False, "The new ISR contains at least one ineligible replica."),
    (108, "NEW_LEADER_ELECTED", False, False, "The AlterPartition request successfully updated the partition state but the leader has changed."),
    (114, "MISMATCHED_ENDPOINT_TYPE", False, False, "The request was sent to an endpoint of the wrong type."),
)

SPECS: dict[int, ErrorSpec] = {row[0]: ErrorSpec(*row) for row in _TABLE}
CODES: dict[str, int] = {spec.name: spec.code for spec in SPECS.values()}


class RaftkaError(Exception):
    """Base of every error Raftka raises for a wire error code or an operating error.

    Carries the numeric ``code``, Kafka's ``name``, ``retriable`` and ``invalid_metadata``, and,
    where known, the ``topic`` and ``partition`` it concerns.
    """

    code: int = CODES["UNKNOWN_SERVER_ERROR"]
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False
    invalid_metadata: bool = False
    default_message: str = SPECS[-1].message

    def __init__(self, message: str | None = None, *, topic: str | None = None,
                 partition: int | None = None) -> None:
        self.message = message or self.default_message
        self.topic = topic
        self.partition = partition
        where = ""
        if topic is not None:
            where = f" [{topic}" + (f"-{partition}" if partition is not None else "") + "]"
        super().__init__(f"{self.name}{where}: {self.message}")


def _class_name(name: str) -> str:
    camel = "".join(part.capitalize() for part in name.split("_"))
    return camel if camel.endswith(("Error", "Exception")) else camel + "Error"


_CLASSES: dict[int, type[RaftkaError]] = {}
for _spec in SPECS.values():
    if _spec.code == -1:
        _cls: type[RaftkaError] = type("UnknownServerError", (RaftkaError,), {"__doc__": _spec.message})
    else:
        _cls = type(_class_name(_spec.name), (RaftkaError,), {
            "__doc__": _spec.message,
            "code": _spec.code,
            "name": _spec.name,
            "retriable": _spec.retriable,
            "invalid_metadata": _spec.invalid_metadata,
            "default_message": _spec.message,
        })
    _cls.__module__ = __name__
    _CLASSES[_spec.code] = _cls
    globals()[_cls.__name__] = _cls
del _spec, _cls

UnknownServerError = _CLASSES[-1]
OffsetOutOfRangeError = _CLASSES[1]
CorruptMessageError = _CLASSES[2]
UnknownTopicOrPartitionError = _CLASSES[3]
LeaderNotAvailableError = _CLASSES[5]
NotLeaderOrFollowerError = _CLASSES[6]
RequestTimedOutError = _CLASSES[7]
MessageTooLargeError = _CLASSES[10]
NetworkExceptionError = _CLASSES[13]
InvalidTopicError = _CLASSES[17]
NotEnoughReplicasError = _CLASSES[19]
NotEnoughReplicasAfterAppendError = _CLASSES[20]
UnsupportedVersionError = _CLASSES[35]
TopicAlreadyExistsError = _CLASSES[36]
InvalidPartitionsError = _CLASSES[37]
InvalidReplicationFactorError = _CLASSES[38]
InvalidConfigError = _CLASSES[40]
NotControllerError = _CLASSES[41]
InvalidRequestError = _CLASSES[42]
OutOfOrderSequenceNumberError = _CLASSES[45]
DuplicateSequenceNumberError = _CLASSES[46]
KafkaStorageError = _CLASSES[56]
FencedLeaderEpochError = _CLASSES[74]
InvalidUpdateVersionError = _CLASSES[95]


class CorruptRecordError(CorruptMessageError):  # type: ignore[misc, valid-type]
    """A record batch failed validation; carries the stored and the computed CRC when known."""

    def __init__(self, message: str, *, stored_crc: int | None = None,
                 computed_crc: int | None = None, topic: str | None = None,
                 partition: int | None = None) -> None:
        self.stored_crc = stored_crc
        self.computed_crc = computed_crc
        if stored_crc is not None and computed_crc is not None:
            message = f"{message} (stored crc {stored_crc:#010x}, computed {computed_crc:#010x})"
        super().__init__(message, topic=topic, partition=partition)


class ConfigError(InvalidConfigError):  # type: ignore[misc, valid-type]
    """A configuration value is missing, of the wrong type or out of range; names the key."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        super().__init__(f"{key}: {problem}")


class FrameError(InvalidRequestError):  # type: ignore[misc, valid-type]
    """Bytes on a connection that are not a valid Kafka frame (a length over the limit, a first
    byte no Kafka request starts with, an api key or version not declared, a body that does not
    decode as declared).

    The connection that sent them is closed; nobody else is affected.
    """


def for_code(code: int) -> type[RaftkaError]:
    """The exception class for a wire error code (UnknownServerError for codes we do not know)."""
    return _CLASSES.get(code, UnknownServerError)


def error_for(code: int, message: str | None = None, *, topic: str | None = None,
              partition: int | None = None) -> RaftkaError:
    """An exception instance for a wire error code."""
    return for_code(code)(message, topic=topic, partition=partition)


def name_of(code: int) -> str:
    spec = SPECS.get(code)
    return spec.name if spec else f"UNKNOWN_ERROR_{code}"


# Module-level constants, e.g. errors.NOT_LEADER_OR_FOLLOWER == 6, for servers building responses.
NONE = 0
globals().update(CODES)

# The same codes as an IntEnum, for code that prefers ErrorCode.NOT_LEADER_OR_FOLLOWER.
from enum import IntEnum  # noqa: E402

ErrorCode = IntEnum("ErrorCode", {spec.name: spec.code for spec in SPECS.values()})
