"""IncrementalAlterConfigs and AlterConfigs end to end: a real cluster (1 controller, 1 broker)
changed by confluent-kafka's AdminClient.incremental_alter_configs, Raftka's AdminClient and
`raftka topics alter`, each checked by describing the topic's configs afterwards.

What it proves: an incremental change touches only the keys it names (SET, DELETE; APPEND and
SUBTRACT on a key that is not a list are INVALID_CONFIG, as Kafka answers), while AlterConfigs,
from kafka-python's KafkaAdminClient.alter_configs as from Raftka's, replaces the topic's whole
set of overrides: a key it leaves out goes back to its default.
"""
from __future__ import annotations

import uuid

import pytest

from helpers import wait_for_topic
from raftka.client import AlterConfigOp, AlterConfigOpType, ConfigResource, NewTopic
from raftka.client.errors import ConfigError, InvalidConfigError, InvalidRequestError

pytest.importorskip("kafka")
pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient as CAdminClient, AlterConfigOpType as COp  # noqa: E402
from confluent_kafka.admin import ConfigEntry as CConfigEntry, ConfigResource as CConfigResource  # noqa: E402
from confluent_kafka.admin import ResourceType as CResourceType  # noqa: E402
from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType, KafkaAdminClient  # noqa: E402

from test_cli_tools import ok, one_line_error, tool  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("incremental-configs", controllers=1, brokers=1, subdir=".raftka")


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster)


def new_topic(admin, **configs: str) -> str:
    name = f"c-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1, topic_configs=configs)])
    wait_for_topic(admin, name, 1)
    return name


def overrides(admin, topic: str) -> dict[str, str]:
    """The topic's overrides as DescribeConfigs lists them (the keys not at their default)."""
    return {k: e.value for k, e in admin.describe_configs([topic])[topic].items() if not e.is_default}


def test_confluent_kafka_sets_and_deletes_only_the_keys_it_names(cluster, admin):
    topic = new_topic(admin, **{"retention.ms": "86400000"})
    client = CAdminClient({"bootstrap.servers": cluster.bootstrap_servers})

    def alter(*entries: CConfigEntry) -> None:
        resource = CConfigResource(CResourceType.TOPIC, topic, incremental_configs=list(entries))
        for future in client.incremental_alter_configs([resource]).values():
            future.result(timeout=30)

    alter(CConfigEntry("segment.ms", "3600000", incremental_operation=COp.SET),
          CConfigEntry("flush.ms", "5000", incremental_operation=COp.SET))
    assert overrides(admin, topic) == {"retention.ms": "86400000", "segment.ms": "3600000", "flush.ms": "5000"}
    alter(CConfigEntry("flush.ms", None, incremental_operation=COp.DELETE))
    assert overrides(admin, topic) == {"retention.ms": "86400000", "segment.ms": "3600000"}
    for entry, words in [(CConfigEntry("no.such.key", "1", incremental_operation=COp.SET), "unknown"),
                         (CConfigEntry("retention.ms", "x", incremental_operation=COp.SET), "retention.ms"),
                         (CConfigEntry("retention.ms", "1", incremental_operation=COp.APPEND), "APPEND")]:
        with pytest.raises(KafkaException) as raised:
            alter(entry)
        error = raised.value.args[0]
        assert error.code() == KafkaError.INVALID_CONFIG and words in error.str()
    assert overrides(admin, topic) == {"retention.ms": "86400000", "segment.ms": "3600000"}


def test_raftka_admin_incremental_alter_configs_with_typed_ops(admin):
    topic = new_topic(admin, **{"retention.ms": "86400000", "segment.ms": "3600000"})
    assert admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[
        AlterConfigOp("flush.messages", 100), AlterConfigOp("segment.ms", op_type=AlterConfigOpType.DELETE),
    ])]) == {topic: None}
    assert overrides(admin, topic) == {"retention.ms": "86400000", "flush.messages": "100"}
    with pytest.raises(InvalidConfigError, match="min.insync.replicas: must be >= 1"):
        admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[
            AlterConfigOp("min.insync.replicas", 0)])])
    results = admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[
        AlterConfigOp("retention.ms", "1"), AlterConfigOp("retention.ms", op_type=AlterConfigOpType.DELETE)])],
        raise_errors=False)
    assert isinstance(results[topic], InvalidRequestError)  # one key twice, as Kafka refuses it
    with pytest.raises(ConfigError, match="op_type"):  # refused before anything is sent
        admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[
            AlterConfigOp("retention.ms", "1", 7)])])
    assert overrides(admin, topic) == {"retention.ms": "86400000", "flush.messages": "100"}


def test_the_cli_alter_keeps_the_overrides_it_does_not_name(cluster, admin):
    topic = new_topic(admin, **{"retention.ms": "86400000", "segment.ms": "3600000"})
    out = ok(tool(cluster, "topics", "alter", topic, "--add-config", "flush.ms=7000", "--delete-config",
                  "segment.ms"))
    assert out.strip() == f"Updated config of topic {topic}: flush.ms=7000, -segment.ms."
    assert overrides(admin, topic) == {"retention.ms": "86400000", "flush.ms": "7000"}
    one_line_error(tool(cluster, "topics", "alter", topic, "--add-config", "flush.ms=soon"), "flush.ms")


def test_kafka_python_alters_over_either_api_and_alter_configs_replaces_the_whole_set(cluster, admin):
    """kafka-python 3 uses IncrementalAlterConfigs once ApiVersions lists it; over AlterConfigs
    (incremental=False) it sends the topic's other overrides along, and reset_configs sends every
    override but the ones to reset: those go back to their default only because AlterConfigs
    replaces the whole set, as on a Kafka broker."""
    topic = new_topic(admin, **{"retention.ms": "86400000", "segment.ms": "3600000"})
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)

    def resource(configs):
        return KConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)
    try:
        client.alter_configs([resource({"flush.ms": "9000"})])
        assert overrides(admin, topic) == {"retention.ms": "86400000", "segment.ms": "3600000", "flush.ms": "9000"}
        client.alter_configs([resource({"flush.ms": "8000"})], incremental=False)
        assert overrides(admin, topic) == {"retention.ms": "86400000", "segment.ms": "3600000", "flush.ms": "8000"}
        client.reset_configs([resource(["retention.ms"])], incremental=False)
        assert overrides(admin, topic) == {"segment.ms": "3600000", "flush.ms": "8000"}
        assert admin.describe_configs([topic])[topic]["retention.ms"].value == "604800000"
        client.reset_configs([resource(["segment.ms"])])  # IncrementalAlterConfigs' DELETE
        assert overrides(admin, topic) == {"flush.ms": "8000"}
    finally:
        client.close()
    # Raftka's alter_configs is Kafka's AlterConfigs too: flush.ms, left out, is reset.
    assert admin.alter_configs([ConfigResource("topic", topic, {"segment.ms": 60_000})]) == {topic: None}
    assert overrides(admin, topic) == {"segment.ms": "60000"}
