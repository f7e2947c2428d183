"""A controller's listener speaks Kafka's wire protocol (real controller processes)."""
from __future__ import annotations

import asyncio

from raftka.common.api import ApiKey
from raftka.common.messages import CONTROLLER_ONLY_KEYS
from raftka.common.transport import Connection


async def _api_versions(host: str, port: int) -> tuple[int, dict]:
    connection = await Connection.open(host, port, client_id="test", kafka_versions={ApiKey.API_VERSIONS: 3})
    try:
        return await connection.request(ApiKey.API_VERSIONS, {"client_software_name": "test",
                                                              "client_software_version": "0"},
                                        api_version=3, timeout_ms=5000)
    finally:
        await connection.close()


def test_a_controller_answers_kafkas_api_versions_with_the_apis_it_serves(controller_cluster):
    node = next(iter(controller_cluster.nodes))
    code, body = asyncio.run(_api_versions(*controller_cluster.controller_address(node)))
    assert code == 0 and body["error_code"] == 0
    served = {entry["api_key"] for entry in body["api_keys"]}
    assert {ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION, ApiKey.UNREGISTER_BROKER,
            ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.DESCRIBE_QUORUM} <= served <= set(CONTROLLER_ONLY_KEYS) | {
        ApiKey.API_VERSIONS, ApiKey.FETCH, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
        ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.FETCH_SNAPSHOT,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_ACLS,
        ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS}
    # A controller serves no client API: Produce, Metadata, InitProducerId are a broker's.
    assert not {ApiKey.PRODUCE, ApiKey.METADATA, ApiKey.INIT_PRODUCER_ID} & served
