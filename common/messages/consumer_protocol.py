"""Kafka's consumer protocol: the bytes members of a ``protocol_type = "consumer"`` group exchange
through the coordinator, declared as Kafka declares them (ConsumerProtocolSubscription.json and
ConsumerProtocolAssignment.json, both "data" messages: no api key, so not in KAFKA_API).

- ConsumerProtocolSubscription 0-3: a JoinGroup protocol's ``metadata``. v1 adds
  ``owned_partitions`` (KIP-429, cooperative rebalancing), v2 ``generation_id`` (owned partitions
  from an older generation are stale), v3 ``rack_id`` (KIP-881, rack-aware assignment).
- ConsumerProtocolAssignment 0-3: a member's ``assignment`` in SyncGroup; every version has the
  same layout (its versions follow the subscription's).

On the wire each is an int16 version, then the body at that version (never flexible). The
coordinator never reads them; the group leader's assignor does, so a kafka-python, librdkafka or
Java consumer and a Raftka consumer can share one group.

Reading is Kafka's (ConsumerProtocol.deserialize*): a version above the newest known is read with
the newest known layout and what follows is ignored (newer versions only append fields); a
negative version, or bytes that do not fit the layout, raise :class:`ConsumerProtocolError`
naming the field. :func:`encode_versioned` / :func:`decode_versioned` serve any such
version-prefixed data message (the group coordinator's ``__consumer_offsets`` records too).
"""
from __future__ import annotations

import struct
from typing import Any, Final

from raftka.common.codec import CodecError, decoder, encoder
from raftka.common.messages.limits import MEMBER_BYTES_MAX, PARTITIONS_MAX, TOPICS_MAX
from raftka.common.schema import Array, Field, Message, Struct

_VERSION: Final = struct.Struct(">h")
# Data messages carry no api key; -1 marks "not an API" (as the request and response headers do).
DATA_MESSAGE_KEY: Final = -1


def _topic_partitions(name: str, versions: str, about: str) -> Field:
    """Kafka's ``[]TopicPartition``: a topic and its partition indexes."""
    return Field(name, Array(Struct("TopicPartition", (
        Field("topic", "string", versions, about="the topic name"),
        Field("partitions", Array("int32", max_count=PARTITIONS_MAX), versions, about="its partition indexes"),
    )), max_count=TOPICS_MAX), versions, default=[], about=about)


CONSUMER_PROTOCOL_SUBSCRIPTION: Final = Message(DATA_MESSAGE_KEY, "ConsumerProtocolSubscription", "0-3", (
    Field("topics", Array("string", max_count=TOPICS_MAX), about="the topics the member wants to consume"),
    Field("user_data", "bytes", nullable=True, default=None, max_length=MEMBER_BYTES_MAX,
          about="the assignor's own data, handed back to it on the leader"),
    _topic_partitions("owned_partitions", "1+", "the partitions the member owns now"),
    Field("generation_id", "int32", "2+", default=-1,
          about="the generation in which it got them (-1: none); an older claim is stale"),
    Field("rack_id", "string", "3+", default=None, nullable_versions="3+", about="the member's rack, or null"),
))

CONSUMER_PROTOCOL_ASSIGNMENT: Final = Message(DATA_MESSAGE_KEY, "ConsumerProtocolAssignment", "0-3", (
    _topic_partitions("assigned_partitions", "0+", "the partitions assigned to this member"),
    Field("user_data", "bytes", nullable=True, default=None, max_length=MEMBER_BYTES_MAX,
          about="the assignor's own data"),
))


class ConsumerProtocolError(CodecError, ValueError):  # type: ignore[misc, valid-type]
    """Bytes that are not a consumer protocol subscription or assignment; the message says which,
    the version and the field (``.field``). A ValueError too: callers that skip an unreadable
    member catch that."""


def encode_versioned(message: Message, version: int, body: dict[str, Any]) -> bytes:
    """The int16 ``version``, then ``body`` encoded at it (CodecError naming a bad field)."""
    return _VERSION.pack(version) + encoder(message, version)(body)


def decode_versioned(message: Message, data: Any) -> tuple[int, dict[str, Any]]:
    """(version, body) of version-prefixed ``data``: a version above the newest is read with the
    newest layout, bytes after it ignored; CodecError for a negative version or bad bytes."""
    if len(data) < _VERSION.size:
        raise CodecError(f"{message.name}: truncated: {len(data)} byte(s), the version takes {_VERSION.size}")
    version, = _VERSION.unpack_from(data)
    newest = message.versions()[-1]
    if version < message.versions()[0]:
        raise CodecError(f"{message.name}: unsupported version {version} (known: {message.valid_versions})")
    if version > newest:
        return version, decoder(message, newest, allow_trailing=True)(memoryview(data)[_VERSION.size:])
    return version, decoder(message, version)(memoryview(data)[_VERSION.size:])


def _decode(message: Message, data: Any) -> tuple[int, dict[str, Any]]:
    try:
        return decode_versioned(message, data)
    except CodecError as bad:
        error = ConsumerProtocolError(f"unreadable {bad.message}")
        error.field = getattr(bad, "field", "")  # type: ignore[attr-defined]
        raise error from None


def decode_subscription(data: Any) -> tuple[int, dict[str, Any]]:
    """(version, body) of a JoinGroup protocol's metadata; ConsumerProtocolError when unreadable."""
    return _decode(CONSUMER_PROTOCOL_SUBSCRIPTION, data)


def decode_assignment(data: Any) -> tuple[int, dict[str, Any]]:
    """(version, body) of a SyncGroup assignment; ConsumerProtocolError when unreadable."""
    return _decode(CONSUMER_PROTOCOL_ASSIGNMENT, data)


__all__ = ["CONSUMER_PROTOCOL_ASSIGNMENT", "CONSUMER_PROTOCOL_SUBSCRIPTION", "ConsumerProtocolError",
           "decode_assignment", "decode_subscription", "decode_versioned", "encode_versioned"]
