"""Broker config resources end to end (issue #24): DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs on Kafka's BROKER resource, and `raftka configs`.

What it proves, and how:
- without a cluster: a broker describes its own resource with Kafka's sources (server.properties
  STATIC_BROKER_CONFIG, DEFAULT_CONFIG, the dynamic overrides above them) and never a secret
  (ssl.keystore.key, ssl.key.password, a listener's jaas login, the quorum secret: null and
  is_sensitive); another broker's id is INVALID_REQUEST; the ACL rule asks DESCRIBE_CONFIGS /
  ALTER_CONFIGS on the cluster for a broker resource;
- on a real cluster (1 controller, brokers 2 and 3, each with a secret in its server.properties):
  a cluster-wide override reaches both brokers as DYNAMIC_DEFAULT_BROKER_CONFIG, a per-broker one
  beats it on that broker only (the synonyms list the precedence), deleting it falls back; the
  per-broker min.insync.replicas really changes what acks=all accepts on that broker's
  partitions; a static key is refused INVALID_REQUEST and an unknown one INVALID_CONFIG, each
  naming the key; validate_only changes nothing; kafka-python's admin client describes a broker
  without the secret on the wire; `raftka configs` describes and alters topics and brokers and
  reports a refusal in one line.
"""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from helpers import broker_config, wait_for_topic
from raftka.broker import configs as broker_configs
from raftka.client import (AlterConfigOp, AlterConfigOpType, ConfigResource, ConfigResourceType, NewTopic,
                           Producer)
from raftka.client.errors import ConfigError, InvalidConfigError, InvalidRequestError
from raftka.cluster import wait_until
from raftka.common import errors
from raftka.common.acl import AclOperation as Op, ResourceType as Res
from raftka.common.api import ApiKey
from raftka.common.configs import LONG_MAX, ConfigSource
from raftka.common.server_config import server_config

from test_acl_enforcement import _allow, _gate, _request, _run  # noqa: E402
from test_cli_tools import ok, one_line_error, tool  # noqa: E402

pytestmark = pytest.mark.timeout(240)

SECRET = "hunter2-" + uuid.uuid4().hex  # in every broker's server.properties; must never come out
KEY_PEM = "-----BEGIN PRIVATE KEY-----\nMIIEv" + uuid.uuid4().hex + "\n-----END PRIVATE KEY-----"
PROPAGATION_S = 15.0  # brokers apply a committed config change from the metadata log a moment later


# -- one broker's answer, no cluster ----------------------------------------------------------------

def _config(**extra: str):
    return server_config(broker_config(**{"ssl.key.password": SECRET, "ssl.keystore.key": KEY_PEM,
                                          "log.retention.ms": "3600000",
                                          "listener.name.plaintext.scram-sha-256.sasl.jaas.config":
                                              'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                              f'username="broker" password="{SECRET}";', **extra}))


def _view(cluster: dict | None = None, own: dict | None = None, broker_id: int = 4):
    return SimpleNamespace(cluster_configs=cluster or {}, broker_configs={broker_id: own} if own else {})


def _describe(config, view, name: str = "4", **options):
    resource = {"resource_type": 4, "resource_name": name, "configuration_keys": options.pop("keys", None)}
    return broker_configs.describe(config, view, resource, **options)


def test_a_broker_describes_each_key_with_kafkas_source_and_never_a_secret():
    result = _describe(_config(), _view(), include_synonyms=True, include_documentation=True)
    assert result["error_code"] == errors.NONE
    entries = {c["name"]: c for c in result["configs"]}
    assert SECRET not in repr(result) and "MIIEv" not in repr(result)
    assert entries["log.retention.ms"] | {"synonyms": None} == {
        "name": "log.retention.ms", "value": "3600000", "read_only": True,
        "config_source": ConfigSource.STATIC_BROKER_CONFIG, "is_sensitive": False, "synonyms": None,
        "config_type": 5, "documentation": entries["log.retention.ms"]["documentation"]}
    assert [(s["source"], s["value"]) for s in entries["log.retention.ms"]["synonyms"]] == [
        (ConfigSource.STATIC_BROKER_CONFIG, "3600000"), (ConfigSource.DEFAULT_CONFIG, "604800000")]
    assert (entries["num.partitions"]["value"], entries["num.partitions"]["config_source"]) == (
        "1", ConfigSource.DEFAULT_CONFIG)
    for secret in ("ssl.key.password", "ssl.keystore.key", "controller.quorum.secret",
                   "listener.name.plaintext.scram-sha-256.sasl.jaas.config"):
        entry = entries[secret]
        assert entry["is_sensitive"] and entry["value"] is None, secret
        assert all(s["value"] is None for s in entry["synonyms"]), secret
    assert entries["ssl.key.password"]["config_source"] == ConfigSource.STATIC_BROKER_CONFIG
    # What changes at run time is not read-only; the throttles default to Kafka's "no limit".
    assert {n for n, c in entries.items() if not c["read_only"]} == {
        "min.insync.replicas", "leader.replication.throttled.rate", "follower.replication.throttled.rate"}
    assert entries["leader.replication.throttled.rate"]["value"] == str(LONG_MAX)


def test_a_brokers_own_override_beats_the_cluster_default_which_beats_server_properties():
    config = _config(**{"min.insync.replicas": "2"})
    [entry] = _describe(config, _view({"min.insync.replicas": 3}, {"min.insync.replicas": 4}),
                        include_synonyms=True, keys=["min.insync.replicas"])["configs"]
    assert (entry["value"], entry["config_source"]) == ("4", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s["source"], s["value"]) for s in entry["synonyms"]] == [
        (ConfigSource.DYNAMIC_BROKER_CONFIG, "4"), (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, "3"),
        (ConfigSource.STATIC_BROKER_CONFIG, "2"), (ConfigSource.DEFAULT_CONFIG, "1")]
    # Another broker's override is not ours; the cluster resource lists only the cluster-wide ones.
    [entry] = _describe(config, _view({"min.insync.replicas": 3}, {"min.insync.replicas": 4}, broker_id=5),
                        keys=["min.insync.replicas"])["configs"]
    assert (entry["value"], entry["config_source"], entry["synonyms"]) == (
        "3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, [])
    default = _describe(config, _view({"min.insync.replicas": 3}), name="")
    assert [(c["name"], c["value"], c["config_source"]) for c in default["configs"]] == [
        ("min.insync.replicas", "3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]


def test_a_brokers_answer_encodes_at_every_describe_configs_version_a_client_may_use():
    from raftka.common.codec import decoder, encoder
    from raftka.common.messages import KAFKA_API
    result = _describe(_config(), _view({"min.insync.replicas": 2}), include_synonyms=True, include_documentation=True)
    answer = KAFKA_API[ApiKey.DESCRIBE_CONFIGS][1]
    for version in answer.versions():
        decoded = decoder(answer, version)(encoder(answer, version)({"results": [result]}))
        configs = {c["name"]: c for c in decoded["results"][0]["configs"]}
        assert configs["min.insync.replicas"]["value"] == "2", version
        assert configs["ssl.key.password"]["value"] is None and configs["ssl.key.password"]["is_sensitive"]


def test_another_brokers_id_is_invalid_request():
    result = _describe(_config(), _view(), name="5")
    assert result["error_code"] == errors.INVALID_REQUEST and "expected 4" in result["error_message"]
    assert result["configs"] == []


def test_broker_resources_need_describe_configs_or_alter_configs_on_the_cluster():
    gate = _gate(_allow("User:ops", Op.DESCRIBE_CONFIGS, Res.CLUSTER, "kafka-cluster"),
                 _allow("User:admin", Op.ALTER_CONFIGS, Res.CLUSTER, "kafka-cluster"))
    config, view = _config(), _view()

    def answer(body: dict) -> dict:
        return {"results": [broker_configs.describe(config, view, r) for r in body["resources"]]}
    describe = {"include_synonyms": False, "include_documentation": False,
                "resources": [{"resource_type": 4, "resource_name": "4", "configuration_keys": None}]}
    for principal, code in (("User:ops", errors.NONE), ("User:admin", errors.NONE),  # ALTER_ implies DESCRIBE_
                            ("User:bob", errors.CLUSTER_AUTHORIZATION_FAILED)):
        (_, out), _ = _run(gate, _request(ApiKey.DESCRIBE_CONFIGS, 4, describe, principal), answer)
        assert [r["error_code"] for r in out["results"]] == [code], principal
        assert SECRET not in repr(out)
    alter = {"validate_only": False, "resources": [{"resource_type": 4, "resource_name": "", "configs": [
        {"name": "min.insync.replicas", "config_operation": 0, "value": "2"}]}]}
    for principal, code in (("User:admin", errors.NONE), ("User:ops", errors.CLUSTER_AUTHORIZATION_FAILED)):
        (_, out), _ = _run(gate, _request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter, principal),
                           lambda b: {"responses": [{"resource_type": 4, "resource_name": "", "error_code": 0}
                                                    for _ in b["resources"]]})
        assert [r["error_code"] for r in out["responses"]] == [code], principal


def test_config_resource_takes_the_enum_or_the_names_in_any_case():
    assert ConfigResource("Broker", 2) == ConfigResource(ConfigResourceType.BROKER, "2")
    assert ConfigResource("TOPIC", "t").resource_type is ConfigResourceType.TOPIC
    with pytest.raises(ValueError, match="'topic' or 'broker'"):
        ConfigResource("group", "g")


# -- a real cluster -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """1 controller + brokers 2 and 3, each with a secret and a static key in server.properties."""
    return module_cluster_factory("broker-configs", controllers=1, brokers=2, subdir=".raftka",
                                  configs={"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500},
                                  broker_configs={"ssl.key.password": SECRET, "log.retention.ms": 3_600_000})


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster)


def entry(admin, broker: str, key: str):
    return admin.describe_configs([ConfigResource("broker", broker)], include_synonyms=True)[broker][key]


def set_broker(admin, name: str, **values):
    ops = [AlterConfigOp(k.replace("_", "."), v, AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
           for k, v in values.items()]
    assert admin.incremental_alter_configs([ConfigResource("broker", name, incremental_configs=ops)]) == {name: None}


def wait_for(admin, broker: str, key: str, value: str | None, source: str):
    return wait_until(lambda: (e := entry(admin, broker, key)).value == value and e.source == source and e,
                      PROPAGATION_S, what=f"broker {broker}: {key}={value} from {source}")


def test_a_live_broker_describes_its_static_keys_and_masks_its_secret(cluster, admin):
    configs = admin.describe_configs([ConfigResource("broker", "2")], include_synonyms=True)["2"]
    assert configs["node.id"].value == "2" and configs["node.id"].source == "STATIC_BROKER_CONFIG"
    assert configs["node.id"].read_only
    assert (configs["log.retention.ms"].value, configs["log.retention.ms"].source) == (
        "3600000", "STATIC_BROKER_CONFIG")
    assert (configs["offsets.retention.minutes"].value, configs["offsets.retention.minutes"].source) == (
        "10080", "DEFAULT_CONFIG")
    secret = configs["ssl.key.password"]
    assert secret.is_sensitive and secret.value is None and secret.synonyms == (
        ("ssl.key.password", None, "STATIC_BROKER_CONFIG"),)
    assert SECRET not in repr(configs)
    assert not configs["min.insync.replicas"].read_only


def test_cluster_default_and_per_broker_overrides_keep_kafkas_precedence(cluster, admin):
    set_broker(admin, "", leader_replication_throttled_rate="2000000")
    for broker in ("2", "3"):
        wait_for(admin, broker, "leader.replication.throttled.rate", "2000000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    set_broker(admin, "3", leader_replication_throttled_rate="1000000")
    found = wait_for(admin, "3", "leader.replication.throttled.rate", "1000000", "DYNAMIC_BROKER_CONFIG")
    assert [(source, value) for _, value, source in found.synonyms] == [
        ("DYNAMIC_BROKER_CONFIG", "1000000"), ("DYNAMIC_DEFAULT_BROKER_CONFIG", "2000000"),
        ("DEFAULT_CONFIG", str(LONG_MAX))]
    assert entry(admin, "2", "leader.replication.throttled.rate").value == "2000000"
    default = admin.describe_configs([ConfigResource("broker", "")])[""]
    assert {k: (e.value, e.source) for k, e in default.items()} == {
        "leader.replication.throttled.rate": ("2000000", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
    set_broker(admin, "3", leader_replication_throttled_rate=None)
    wait_for(admin, "3", "leader.replication.throttled.rate", "2000000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    set_broker(admin, "", leader_replication_throttled_rate=None)
    for broker in ("2", "3"):
        wait_for(admin, broker, "leader.replication.throttled.rate", str(LONG_MAX), "DEFAULT_CONFIG")


def test_a_per_broker_min_insync_replicas_changes_what_acks_all_accepts_on_that_broker(cluster, admin):
    topic = f"misr-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 2)])
    [partition] = wait_for_topic(admin, topic, 1)
    leader = str(partition["leader"])
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", delivery_timeout_ms=3000,
                        request_timeout_ms=2000, linger_ms=0)
    try:
        producer.send(topic, b"before").get(timeout=30)
        set_broker(admin, leader, min_insync_replicas="3")  # more than the partition's two replicas
        wait_for(admin, leader, "min.insync.replicas", "3", "DYNAMIC_BROKER_CONFIG")
        with pytest.raises(errors.RaftkaError) as refused:
            producer.send(topic, b"refused").get(timeout=30)
        assert refused.value.code in (errors.NOT_ENOUGH_REPLICAS, errors.REQUEST_TIMED_OUT), refused.value
        set_broker(admin, leader, min_insync_replicas=None)
        wait_for(admin, leader, "min.insync.replicas", "1", "DEFAULT_CONFIG")
        wait_until(lambda: _sent(producer, topic), PROPAGATION_S, what="acks=all accepted again")
    finally:
        producer.close()


def _sent(producer, topic: str) -> bool:
    try:
        producer.send(topic, b"after").get(timeout=10)
        return True
    except errors.RaftkaError:
        return False


def test_static_unknown_and_bad_keys_are_refused_naming_the_key(cluster, admin):
    def refused(name: str, key: str, value: str | None, error: type) -> str:
        with pytest.raises(error) as caught:
            admin.incremental_alter_configs([ConfigResource("broker", name, incremental_configs=[
                AlterConfigOp(key, value)])])
        assert key in caught.value.message, caught.value.message
        return caught.value.message
    assert "cannot be updated dynamically" in refused("2", "log.retention.ms", "1", InvalidRequestError)
    assert "cannot be updated dynamically" in refused("", "num.partitions", "3", InvalidRequestError)
    assert "unknown" in refused("2", "no.such.key", "1", InvalidConfigError)
    assert ">= 1" in refused("2", "min.insync.replicas", "0", InvalidConfigError)
    with pytest.raises(InvalidRequestError, match="by its id"):
        admin.incremental_alter_configs([ConfigResource("broker", "b2", incremental_configs=[
            AlterConfigOp("min.insync.replicas", "2")])])
    # Legacy AlterConfigs: the same rules.
    results = admin.alter_configs([ConfigResource("broker", "2", {"log.dirs": "/elsewhere"})], raise_errors=False)
    assert results["2"].code == errors.INVALID_REQUEST and "log.dirs" in results["2"].message
    assert entry(admin, "2", "log.retention.ms").value == "3600000"


def test_validate_only_checks_and_changes_nothing(cluster, admin):
    op = AlterConfigOp("follower.replication.throttled.rate", "5000")
    assert admin.incremental_alter_configs([ConfigResource("broker", "2", incremental_configs=[op])],
                                           validate_only=True) == {"2": None}
    with pytest.raises(InvalidConfigError):
        admin.incremental_alter_configs([ConfigResource("broker", "2", incremental_configs=[
            AlterConfigOp("follower.replication.throttled.rate", "-5")])], validate_only=True)
    # A real change committed after it: once broker 2 shows it, it would show the first one too.
    set_broker(admin, "2", leader_replication_throttled_rate="7000")
    wait_for(admin, "2", "leader.replication.throttled.rate", "7000", "DYNAMIC_BROKER_CONFIG")
    assert entry(admin, "2", "follower.replication.throttled.rate").source == "DEFAULT_CONFIG"
    set_broker(admin, "2", leader_replication_throttled_rate=None)


def test_kafka_python_describes_a_broker_without_its_secret_on_the_wire(cluster):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType as KType
    client = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=10_000)
    try:
        described = client.describe_configs([KConfigResource(KType.BROKER, "3")], config_filter="all")
    finally:
        client.close()
    [by_name] = [names["3"] for names in described.values()]
    secret = by_name["ssl.key.password"]
    assert by_name["node.id"]["value"] == "3"
    assert (secret["value"], secret["is_sensitive"], secret["config_source"]) == (None, True, "STATIC_BROKER_CONFIG")
    assert SECRET not in repr(described)


def test_raftka_configs_describes_and_alters_brokers_and_topics(cluster, admin):
    out = ok(tool(cluster, "configs", "alter", "--entity-type", "brokers", "--entity-default",
                  "--add-config", "follower.replication.throttled.rate=4096"))
    assert out.strip() == "Completed updating default config for brokers in the cluster."
    wait_for(admin, "2", "follower.replication.throttled.rate", "4096", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    out = ok(tool(cluster, "configs", "--describe", "--entity-type", "brokers", "--entity-default"))
    assert out.splitlines() == ["Default configs for brokers in the cluster are:",
                                "  follower.replication.throttled.rate=4096 sensitive=false "
                                "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:follower.replication.throttled.rate=4096}"]
    ok(tool(cluster, "configs", "alter", "--entity-type", "brokers", "--entity-name", "2",
            "--add-config", "follower.replication.throttled.rate=1024"))
    wait_for(admin, "2", "follower.replication.throttled.rate", "1024", "DYNAMIC_BROKER_CONFIG")
    out = ok(tool(cluster, "configs", "describe", "--entity-type", "brokers", "--entity-name", "2"))
    assert out.splitlines() == [
        "Dynamic configs for broker 2 are:",
        "  follower.replication.throttled.rate=1024 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "follower.replication.throttled.rate=1024, DYNAMIC_DEFAULT_BROKER_CONFIG:"
        f"follower.replication.throttled.rate=4096, DEFAULT_CONFIG:follower.replication.throttled.rate={LONG_MAX}}}"]
    every_broker = ok(tool(cluster, "configs", "describe", "--entity-type", "brokers")).splitlines()
    assert [line for line in every_broker if not line.startswith("  ")] == [
        "Dynamic configs for broker 2 are:", "Dynamic configs for broker 3 are:",
        "Default configs for brokers in the cluster are:"]
    everything = ok(tool(cluster, "configs", "describe", "--entity-type", "brokers", "--entity-name", "2", "--all"))
    assert everything.startswith("All configs for broker 2 are:\n")
    assert "  ssl.key.password=null sensitive=true synonyms={STATIC_BROKER_CONFIG:ssl.key.password=null}" in everything
    assert "  node.id=2 sensitive=false" in everything and SECRET not in everything
    ok(tool(cluster, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "2",
            "--delete-config", "follower.replication.throttled.rate"))
    ok(tool(cluster, "configs", "alter", "--entity-type", "brokers", "--entity-default",
            "--delete-config", "follower.replication.throttled.rate"))
    wait_for(admin, "2", "follower.replication.throttled.rate", str(LONG_MAX), "DEFAULT_CONFIG")
    one_line_error(tool(cluster, "configs", "alter", "--entity-type", "brokers", "--entity-name", "2",
                        "--add-config", "log.dirs=/elsewhere"), "log.dirs", "dynamically", "INVALID_REQUEST")
    one_line_error(tool(cluster, "configs", "alter", "--entity-type", "brokers", "--entity-name", "2",
                        "--add-config", "no.such.key=1"), "no.such.key", "INVALID_CONFIG")
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])
    wait_for_topic(admin, topic, 1)
    out = ok(tool(cluster, "configs", "alter", "--entity-type", "topics", "--entity-name", topic,
                  "--add-config", "retention.ms=60000,cleanup.policy=[delete]"))
    assert out.strip() == f"Completed updating config for topic {topic}."
    out = ok(tool(cluster, "configs", "describe", "--entity-type", "topics", "--entity-name", topic))
    assert out.splitlines() == [f"Dynamic configs for topic {topic} are:",
                                "  cleanup.policy=delete sensitive=false synonyms={}",
                                "  retention.ms=60000 sensitive=false synonyms={}"]
    one_line_error(tool(cluster, "configs", "describe", "--entity-type", "topics", "--entity-name", "nope-" + topic),
                   "UNKNOWN_TOPIC_OR_PARTITION")
    one_line_error(tool(cluster, "configs", "alter", "--entity-type", "topics", "--entity-default",
                        "--add-config", "retention.ms=1"), "--entity-default")


def test_config_resource_types_other_than_topic_and_broker_are_refused_by_the_client(admin):
    with pytest.raises(ConfigError, match="'topic' or 'broker'"):
        admin.describe_configs([SimpleNamespace(resource_type="group", name="g")])
