"""Client-side errors, on top of the wire error table (common/errors.py, re-exported).

Errors the client raises without a broker having said so (a timeout it measured, a position it
cannot find, a closed client) subclass the table's class with the closest meaning, so
``except RequestTimedOutError`` also catches a client-side timeout.
"""
from __future__ import annotations

from raftka.common.errors import *  # noqa: F401,F403  (the one error table, re-exported)
from raftka.common.errors import (OffsetOutOfRangeError, RaftkaError, RequestTimedOutError,
                                    for_code, error_for)

__all__ = ["KafkaTimeoutError", "NoBrokersAvailable", "NoOffsetForPartitionError", "IllegalStateError",
           "KafkaClosedError", "IllegalArgumentError", "SerializationError", "RaftkaError", "for_code", "error_for"]


class KafkaTimeoutError(RequestTimedOutError):  # type: ignore[misc, valid-type]
    """The client gave up waiting: ``max_block_ms`` (metadata, ``buffer_memory``),
    ``request_timeout_ms`` or ``delivery_timeout_ms`` ran out. The message says which."""


class NoBrokersAvailable(KafkaTimeoutError):
    """No bootstrap server answered Metadata within ``bootstrap_timeout_ms``; the constructors
    raise it. kafka-python 2's name; a KafkaTimeoutError as well, which is what kafka-python 3
    raises there, so either ``except`` works. The message names the addresses tried and the
    last connection error."""

    name = "NO_BROKERS_AVAILABLE"
    invalid_metadata = True


class NoOffsetForPartitionError(OffsetOutOfRangeError):  # type: ignore[misc, valid-type]
    """A partition has no valid position and ``auto_offset_reset='none'`` forbids choosing one."""


class IllegalStateError(RaftkaError):
    """The call does not fit the client's state (closed, not assigned, groups not available)."""

    name = "ILLEGAL_STATE"


class KafkaClosedError(IllegalStateError):
    """The client was closed; pending and new work fails with this."""

    name = "CLIENT_CLOSED"


class IllegalArgumentError(RaftkaError, ValueError):
    """An argument the client refuses before sending anything (kafka-python's name), e.g. an ACL
    with operation ANY."""

    name = "ILLEGAL_ARGUMENT"


class SerializationError(RaftkaError):
    """A key/value serializer or deserializer raised; the original error is ``__cause__``."""

    name = "SERIALIZATION_ERROR"

# kafka-python's base name, so ``except KafkaError`` reads the same.
KafkaError = RaftkaError
__all__.append("KafkaError")
