"""The controller listener secured, and `raftka cluster up --secure` (issue #22).

What it proves:

- Config: a SASL_* controller listener needs ``sasl.mechanism.controller.protocol`` and the
  controller listener's jaas entry on a broker (the errors name the key, never the password); a
  broker-only node takes ``listener.name.controller.*`` keys without listening there; TLS on the
  controller listener loads its keystore at start.
- The controller's ACL rules: every API the controller listener serves has one (a new API
  without a rule fails here); CLUSTER_ACTION allows all, DESCRIBE only the describing APIs.
- A cluster made by `raftka cluster up --secure` (1 controller + 2 brokers, real processes):
  it says what it made; client.properties and the key files are private (0600, 0700) and no
  password shows in cluster.json, a config's world-readable file, stdout or a log line; every
  `raftka` command run with --dir logs in as admin by itself (topics, produce, consume, users,
  acls, cluster status); `raftka quorum status` takes the same file as --command-config.
- The fence attack of issue #22's "Why" fails: a forged BrokerHeartbeat (want_fence) for a live
  broker sent to the controller in plain TCP, over TLS without a login, or logged in as a user
  without CLUSTER_ACTION is refused (the last with CLUSTER_AUTHORIZATION_FAILED), and logged; so
  is a phantom BrokerRegistration and an AlterUserScramCredentials; the broker stays unfenced
  and its partitions keep their leader.
- kafka-python and confluent-kafka produce and consume over SASL_SSL as admin; a plaintext
  client is refused.
"""
from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import broker_config, config_refused, third_party_round_trip, wait_for_topic
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import ConfigError
from raftka.common.server_config import server_config

WAIT_S = 30.0
BROKER_PASSWORD = "ctl-Br0ker-pass-71c"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
CONTROLLER_JAAS = "listener.name.controller.scram-sha-512.sasl.jaas.config"
MALLORY_PASSWORD = "mallory-pass-3e9d"


# -- config ----------------------------------------------------------------------------------------

def _broker(**extra: Any) -> dict[str, Any]:
    return broker_config(**{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                            "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
                            CONTROLLER_JAAS: f'{SCRAM_MODULE} required username="broker" password="{BROKER_PASSWORD}";',
                            **extra})


def _refused(values: dict[str, Any]) -> ConfigError:
    return config_refused(values, BROKER_PASSWORD)


def test_a_broker_logs_in_to_a_sasl_controller_listener_it_does_not_listen_on():
    config = server_config(_broker())
    login = config.controller_sasl()
    assert (login.mechanism, login.username, login.password) == ("SCRAM-SHA-512", "broker", BROKER_PASSWORD)
    assert config.controller_ssl_context() is None and config.unread_logins() == []
    assert config.inter_broker_sasl() is None  # the PLAINTEXT inter-broker listener: no login there


def test_a_sasl_controller_listener_needs_the_mechanism_and_the_login_and_names_the_key():
    assert _refused(_broker(**{"sasl.mechanism.controller.protocol": None})).key == "sasl.mechanism.controller.protocol"
    error = _refused(_broker(**{CONTROLLER_JAAS: None}))
    assert error.key == CONTROLLER_JAAS and "the controllers" in error.message
    error = _refused(_broker(**{"listener.name.controller.sasl.enabled.mechanisms": "SCRAM-SHA-256"}))
    assert error.key == "sasl.mechanism.controller.protocol" and "not enabled" in error.message


def test_a_controller_listener_left_out_of_the_map_is_plaintext_and_keys_must_name_a_listener():
    config = server_config(_broker(**{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT", CONTROLLER_JAAS: None}))
    assert config.security_protocol("CONTROLLER") == "PLAINTEXT" and config.controller_sasl() is None
    with pytest.raises(ConfigError, match="no listener named other"):
        server_config(_broker(**{"listener.name.other.ssl.keystore.location": "x"}))


def test_a_tls_controller_listener_loads_its_keystore_at_start(tmp_path):
    values = {"process.roles": "controller", "node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9000",
              "controller.quorum.secret": "s" * 32, "log.dirs": str(tmp_path),
              "listeners": "CONTROLLER://127.0.0.1:9001", "listener.security.protocol.map": "CONTROLLER:SSL"}
    with pytest.raises(ConfigError) as caught:
        server_config(values)
    assert caught.value.key == "ssl.keystore.location"


# -- the controller's ACL rules -------------------------------------------------------------------

def test_every_controller_api_has_a_rule_and_cluster_action_allows_all():
    from raftka.common.acl import AclBinding, AclIndex, AclOperation, AclPermissionType, PatternType, ResourceType
    from raftka.raft_meta.controller.authorization import CLUSTER_OPERATION, ControllerGate
    from raftka.raft_meta.controller.service import CONTROLLER_APIS
    assert sorted(CONTROLLER_APIS - set(CLUSTER_OPERATION)) == []

    def binding(principal: str, operation: AclOperation) -> AclBinding:
        return AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, principal, "*", operation,
                          AclPermissionType.ALLOW)
    acls = AclIndex({"1": binding("User:broker", AclOperation.CLUSTER_ACTION),
                     "2": binding("User:ops", AclOperation.DESCRIBE)})
    gate = ControllerGate({"super.users": "User:admin", "allow.everyone.if.no.acl.found": False}, lambda: acls)
    for api_key in CONTROLLER_APIS:
        assert gate.refusal(api_key, "User:broker", "127.0.0.1") is None
        assert gate.refusal(api_key, "User:admin", "127.0.0.1") is None
        assert gate.refusal(api_key, "User:ANONYMOUS", "127.0.0.1") is not None
    assert gate.refusal(ApiKey.DESCRIBE_QUORUM, "User:ops", "10.0.0.1") is None
    refusal = gate.refusal(ApiKey.BROKER_HEARTBEAT, "User:ops", "10.0.0.1")
    assert refusal is not None and "CLUSTER_ACTION" in refusal and "BrokerHeartbeat" in refusal
    assert gate.refusal(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "User:ops", "10.0.0.1") is not None


# -- a secure cluster from `raftka cluster up --secure` ------------------------------------------

def _raftka(*argv: str, stdin: str | None = None, timeout_s: float = 90.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftka", *argv], input=stdin, capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    from raftka.cluster import Cluster
    root = tmp_path_factory.mktemp("secure") / "cluster"
    up = _raftka("cluster", "up", "--secure", "--dir", str(root), "--controllers", "1", "--brokers", "2",
                 "--base-port", "0", "--config", "broker.session.timeout.ms=3000",
                 "--config", "broker.heartbeat.interval.ms=300")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        cluster = Cluster.open(root)
        yield cluster, up
    finally:
        _raftka("cluster", "down", "--dir", str(root))


def _admin(cluster: Any) -> Any:
    from raftka.client import AdminClient
    return AdminClient(bootstrap_servers=cluster.bootstrap_servers, **cluster.client_configs)


def test_cluster_up_secure_says_what_it_made_and_keeps_its_secrets_private(secure):
    cluster, up = secure
    kit = cluster.security
    assert kit is not None and "SASL_SSL" in up.stdout and str(kit.client_properties_path) in up.stdout
    assert "PLAINTEXT listeners" not in up.stdout + up.stderr
    assert stat.S_IMODE(kit.client_properties_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(kit.directory.stat().st_mode) == 0o700
    for path in kit.directory.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    secrets = (kit.admin_password, kit.broker_password)
    shown = [up.stdout, up.stderr, (cluster.root / "cluster.json").read_text()]
    shown += [p.read_text(errors="replace") for p in cluster.root.glob("*/server.log")]
    for text in shown:
        assert not any(secret in text for secret in secrets)
    for path in cluster.root.glob("*/server.properties"):  # it holds the broker's login: owner only
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads((cluster.root / "cluster.json").read_text())["secure"] is True


def test_every_raftka_command_in_the_directory_logs_in_as_admin(secure):
    cluster, _ = secure
    d = str(cluster.root)
    made = _raftka("topics", "create", "cli-orders", "--partitions", "2", "--replication-factor", "2", "--dir", d)
    assert made.returncode == 0, made.stderr
    produced = _raftka("produce", "cli-orders", "--dir", d, stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _raftka("consume", "cli-orders", "--from-beginning", "--max-messages", "3", "--timeout-ms", "20000",
                       "--dir", d)
    assert consumed.returncode == 0 and sorted(consumed.stdout.split()[:3]) == ["one", "three", "two"], consumed
    status = _raftka("cluster", "status", "--dir", d)
    assert status.returncode == 0 and status.stdout.count("unfenced") == 2, status.stdout
    quorum = _raftka("quorum", "status", "--bootstrap-controller", cluster.bootstrap_controllers,
                     "--command-config", str(cluster.security.client_properties_path))
    assert quorum.returncode == 0 and "CurrentObservers:  [2, 3]" in quorum.stdout, quorum.stdout + quorum.stderr
    anonymous = _raftka("quorum", "status", "--bootstrap-controller", cluster.bootstrap_controllers)
    assert anonymous.returncode != 0 and "Traceback" not in anonymous.stderr


def _heartbeat_body(cluster: Any, broker_id: int) -> dict[str, Any]:
    """A forged BrokerHeartbeat asking to fence ``broker_id``, with its current epoch (the
    attacker of the issue read it from the controller; here the test reads it as admin)."""
    return {"broker_id": broker_id, "broker_epoch": _broker_epoch(cluster, broker_id), "current_metadata_offset": 10**6,
            "want_fence": True, "want_shut_down": False}


def _broker_epoch(cluster: Any, broker_id: int) -> int:
    return _registration(cluster, broker_id).broker_epoch


def _registration(cluster: Any, broker_id: int) -> Any:
    """The broker's registration in the committed metadata, fetched from the controller as admin."""
    from raftka.cluster.controller_client import dial_from_client_configs
    from raftka.raft_meta.metadata.fetcher import MetadataFetcher

    async def read() -> Any:
        dial = dial_from_client_configs(cluster.client_configs)
        fetcher = MetadataFetcher([cluster.bootstrap_controllers], max_wait_ms=0, ssl=dial.ssl, sasl=dial.sasl)
        try:
            while not fetcher.caught_up:
                await fetcher.fetch_once()
            return fetcher.loader.image.brokers[broker_id]
        finally:
            await fetcher.close()
    return asyncio.run(read())


def test_a_registration_keeps_each_listeners_protocol_through_the_log_and_a_snapshot():
    from raftka.raft_meta.metadata.delta import MetadataDelta
    from raftka.raft_meta.metadata.image import MetadataImage, image_from_bytes, image_to_bytes
    from raftka.raft_meta.metadata.records import RegisterBrokerRecord, decode_entry, encode_entry
    record = RegisterBrokerRecord(4, "4" * 32, {"INTERNAL": "h:1", "PLAINTEXT": "h:2"}, None, {"INTERNAL": 1})
    [decoded] = decode_entry(encode_entry([record]))
    delta = MetadataDelta(MetadataImage.EMPTY)
    assert "error" not in delta.replay(decoded, 1)
    image = delta.apply()
    broker = image.brokers[4]
    assert (broker.security_protocol("INTERNAL"), broker.security_protocol("PLAINTEXT")) == (1, 0)  # SSL, not by name
    assert image_from_bytes(image_to_bytes(image)).brokers[4] == broker
    with pytest.raises(Exception, match="security protocol"):
        encode_entry([RegisterBrokerRecord(4, "4" * 32, {"INTERNAL": "h:1"}, None, {"INTERNAL": 7})])


def test_the_registration_keeps_each_listeners_security_protocol(secure):
    cluster, _ = secure
    registration = _registration(cluster, cluster.broker_ids[-1])
    assert registration.security_protocol("SASL_SSL") == 3


async def _send(cluster: Any, api_key: int, body: dict, *, tls: bool, login: Any = None) -> tuple[int, Any]:
    from raftka.common import security
    from raftka.common.transport import Connection
    host, port = cluster.controller_address(cluster.controller_ids[0])
    context = security.client_ssl_context(str(cluster.security.ca_path)) if tls else None
    connection = await Connection.open(host, port, ssl=context, sasl=login, connect_timeout_ms=5000)
    try:
        return await connection.request(api_key, body, timeout_ms=5000)
    finally:
        await connection.close()


def _make_mallory(cluster: Any) -> Any:
    from raftka.client import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from raftka.common.sasl import SaslClientSettings
    with _admin(cluster) as admin:
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "mallory", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512), MALLORY_PASSWORD)])
    return SaslClientSettings("SCRAM-SHA-512", "mallory", MALLORY_PASSWORD)


def test_the_fence_attack_fails_on_every_path_and_is_logged(secure):
    from raftka.client import NewTopic
    from raftka.cluster import wait_until
    from raftka.common.errors import RaftkaError
    cluster, _ = secure
    victim = cluster.broker_ids[0]
    with _admin(cluster) as admin:
        admin.create_topics([NewTopic("fence-target", 2, 2)])
        wait_for_topic(admin, "fence-target", 2)
    body = _heartbeat_body(cluster, victim)
    mallory = _make_mallory(cluster)
    wait_until(lambda: _logs_in(cluster, mallory), WAIT_S, what="mallory's credential reached the controller")
    started = time.monotonic()
    refusals = []
    while time.monotonic() - started < 3.0:  # the attacker sent five a second
        for tls, login in ((False, None), (True, None)):
            with pytest.raises(RaftkaError):  # closed: plaintext on TLS, or a request before logging in
                asyncio.run(_send(cluster, ApiKey.BROKER_HEARTBEAT, body, tls=tls, login=login))
        code, answer = asyncio.run(_send(cluster, ApiKey.BROKER_HEARTBEAT, body, tls=True, login=mallory))
        refusals.append(answer["error_code"])
        time.sleep(0.2)
    assert set(refusals) == {errors.CLUSTER_AUTHORIZATION_FAILED}
    phantom = {"broker_id": 99, "cluster_id": cluster.cluster_id, "incarnation_id": "0" * 32,
               "listeners": [{"name": "SASL_SSL", "host": "127.0.0.1", "port": 1, "security_protocol": 3}],
               "rack": None}
    _, answer = asyncio.run(_send(cluster, ApiKey.BROKER_REGISTRATION, phantom, tls=True, login=mallory))
    assert answer["error_code"] == errors.CLUSTER_AUTHORIZATION_FAILED
    upsert = {"deletions": [], "upsertions": [{"name": "mallory2", "mechanism": 2, "iterations": 4096,
                                               "salt": b"s" * 16, "salted_password": b"p" * 64}]}
    _, answer = asyncio.run(_send(cluster, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, upsert, tls=True, login=mallory))
    assert [r["error_code"] for r in answer["results"]] == [errors.CLUSTER_AUTHORIZATION_FAILED]
    with _admin(cluster) as admin:
        brokers = {b["node_id"]: b for b in admin.describe_cluster()["brokers"]}
        assert 99 not in brokers and not brokers[victim].get("fenced")
        assert all(p["leader"] >= 0 for p in wait_for_topic(admin, "fence-target", 2))
    log = (cluster.nodes[cluster.controller_ids[0]].log_path).read_text(errors="replace")
    assert "refused BrokerHeartbeat from User:mallory" in log
    assert "before SASL authentication" in log
    assert log.count("refused BrokerHeartbeat from User:mallory") <= 2  # once a minute, not per request


def _logs_in(cluster: Any, login: Any) -> bool:
    from raftka.common.errors import SaslAuthenticationFailedError
    try:
        asyncio.run(_send(cluster, ApiKey.DESCRIBE_QUORUM, {"topics": [{"topic_name": "__cluster_metadata",
                                                                         "partitions": [{"partition_index": 0}]}]},
                          tls=True, login=login))
        return True
    except SaslAuthenticationFailedError:
        return False


def test_third_party_clients_use_the_secure_cluster_with_the_admin_login(secure):
    from raftka.client import NewTopic
    cluster, _ = secure
    kit = cluster.security
    with _admin(cluster) as admin:
        admin.create_topics([NewTopic("compat-secure", 1, 2)])
        wait_for_topic(admin, "compat-secure", 1)
    kafka_python = {"bootstrap_servers": cluster.bootstrap_servers, "security_protocol": "SASL_SSL",
                    "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin",
                    "sasl_plain_password": kit.admin_password, "ssl_cafile": str(kit.ca_path)}
    confluent = {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SASL_SSL",
                 "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "admin", "sasl.password": kit.admin_password,
                 "ssl.ca.location": str(kit.ca_path)}
    third_party_round_trip("compat-secure", kafka_python, confluent, wait_s=WAIT_S)


def test_a_plaintext_client_gets_nothing_from_a_secure_cluster(secure):
    from raftka.client import AdminClient
    from raftka.common.errors import RaftkaError
    cluster, _ = secure
    with pytest.raises(RaftkaError):
        with AdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=3000) as admin:
            admin.list_topics()
