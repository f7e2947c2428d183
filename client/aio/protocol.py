"""The version of each API this client speaks in Kafka's wire protocol.

Every API listed goes out in Kafka's encoding at that version (common/transport.py encodes it from
the declarations in common/messages/); the client builds its bodies in that version's shape. An
API not listed yet still goes as a msgpack frame: #kafka-protocol moves them one at a time, and a
Raftka broker tells the two apart frame by frame.

Versions are the newest the Raftka broker serves whose shape this client builds; a Kafka broker
serves them too (all are within Kafka 4's ranges).
"""
from __future__ import annotations

from typing import Final

from raftka.common.api import ApiKey

KAFKA_VERSIONS: Final[dict[int, int]] = {
    ApiKey.PRODUCE: 10,  # v10: a NOT_LEADER answer names the new leader (KIP-951)
    ApiKey.FETCH: 12,  # sessionless (session_id 0); v13+ name topics by id
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 12,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 6,
    ApiKey.INIT_PRODUCER_ID: 4,
    # The group coordinator's APIs. FindCoordinator v3 (one key; v4 batches them); Heartbeat stays
    # a msgpack frame for now: the client's Heartbeat is held by the coordinator up to the
    # interval (Raftka's max_wait_ms), which Kafka's Heartbeat has no field for.
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 9,
    ApiKey.SYNC_GROUP: 5,
    ApiKey.LEAVE_GROUP: 5,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 7,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 4,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
}
