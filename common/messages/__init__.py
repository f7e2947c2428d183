"""Kafka's requests and responses, declared once as data with their version ranges (common/schema.py
explains the declarations, common/codec.py compiles them into encoders and decoders).

One module per family: ``data`` (Produce, Fetch, ListOffsets, Metadata, ...), ``groups`` (the
group coordinator's APIs), ``admin`` (topics and configs), ``controller`` (the broker-controller
APIs), ``security`` (SASL, SCRAM credentials, ACLs), ``operations`` (leader elections, replica moves). Each declares ``REQUESTS`` and ``RESPONSES``, tuples of Messages;
names, field order, types, versions, defaults and tags follow Kafka's published message
definitions, and ``valid_versions`` is the range Raftka serves (docs/protocol.md is generated from
these).
"""
from __future__ import annotations

from typing import Final

from raftka.common.messages import admin, controller, data, groups, operations, security
from raftka.common.schema import Message

FAMILIES: Final = (data, groups, admin, controller, security, operations)


def _pairs() -> dict[int, tuple[Message, Message]]:
    pairs: dict[int, tuple[Message, Message]] = {}
    for family in FAMILIES:
        responses = {m.api_key: m for m in family.RESPONSES}
        for request in family.REQUESTS:
            pairs[request.api_key] = (request, responses[request.api_key])
    return pairs


# api key -> (request, response) declarations
KAFKA_API: Final[dict[int, tuple[Message, Message]]] = _pairs()
# What a broker's listener serves in Kafka's protocol (the controller's APIs it does not).
CONTROLLER_ONLY_KEYS: Final = frozenset({55, 56, 59, 62, 63, 64, 67})
BROKER_API: Final = {k: v for k, v in KAFKA_API.items() if k not in CONTROLLER_ONLY_KEYS}
# Requests decoded without refusing bytes after the body (Kafka's brokers never check for them):
# librdkafka ends AlterUserScramCredentials with a second empty tagged-field section.
TRAILING_BYTES_ALLOWED: Final = frozenset({51})
