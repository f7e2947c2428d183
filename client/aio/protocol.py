"""The version of each API this client speaks in Kafka's wire protocol.

Every API the client sends is listed: it goes out in Kafka's encoding at that version
(common/transport.py encodes it from the declarations in common/messages/), and the client builds
its bodies in that version's shape (an API not listed would go at the newest declared version);
tests/test_client_protocol_versions.py holds every api key the client uses to this table.

Versions are the newest the Raftka broker serves whose shape this client builds; a Kafka broker
serves them too (all are within Kafka 4's ranges). One Raftka extension rides along: Heartbeat v4's
tagged ``max_wait_ms`` (common/messages/groups.py), which a Kafka coordinator skips.
"""
from __future__ import annotations

from typing import Final

from raftka.common.api import ApiKey

KAFKA_VERSIONS: Final[dict[int, int]] = {
    ApiKey.PRODUCE: 10,  # v10: a NOT_LEADER answer names the new leader (KIP-951)
    ApiKey.FETCH: 12,  # in fetch sessions (client/aio/fetcher.py); v13+ name topics by id
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 12,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,  # a consumer's position check after a leader change (replica_id -1)
    ApiKey.DESCRIBE_CLUSTER: 2,  # v2: fenced brokers too, with is_fenced (KIP-1073)
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.INIT_PRODUCER_ID: 4,
    # The group coordinator's APIs. FindCoordinator v3 (one key; v4 batches them). Heartbeat v4 is
    # flexible, so it carries the tagged max_wait_ms the coordinator holds the answer for.
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 9,
    ApiKey.SYNC_GROUP: 5,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 5,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 7,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 4,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.OFFSET_DELETE: 0,  # Kafka's only version
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,  # Kafka's only version
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,  # Kafka's only version
    ApiKey.DESCRIBE_ACLS: 3,  # v2+ flexible; v3 is Kafka's newest (what a USER resource needs)
    ApiKey.CREATE_ACLS: 3,
    ApiKey.DELETE_ACLS: 3,
}
