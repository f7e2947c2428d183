"""Brokers log in to each other with SASL (issue #22, inter-node links): Kafka's
``sasl.mechanism.inter.broker.protocol`` and ``listener.name.<listener>.<mechanism>.sasl.jaas.config``.

What it proves, from the cheapest to the dearest:

- Config: a SASL_* inter-broker listener without a mechanism, without the jaas entry for that
  listener and mechanism (the error says which mechanism one was given for), with another login
  module, with a Kafka PLAIN user list, or with a mechanism the listener does not enable is
  refused with a ConfigError naming the key; the password is in no message and no repr; a jaas
  entry the broker does not read is logged as such.
- The leader's rule: while brokers log in to each other, a replica Fetch is taken only on the
  inter-broker listener from a logged-in principal.
- A cluster (1 controller + 3 brokers, real processes) whose inter-broker listener is
  SASL_PLAINTEXT (SCRAM-SHA-512), started before the brokers' user exists: a topic made then is
  not replicated (its ISR shrinks to the leaders) and each follower logs the refused login once
  per leader; once the user is made over the PLAINTEXT listener, the followers log in by
  themselves, the ISR is full again, acks=all with min.insync.replicas=2 and RF 3 produces, and
  the brokers' sockets to each other go to SASL_PLAINTEXT ports only (/proc). A raw replica
  Fetch on the PLAINTEXT listener is answered CLUSTER_AUTHORIZATION_FAILED and logged; a
  consumer's Fetch there is served. A broker restarted with a wrong password stays out of the
  ISR, says so once a minute per leader, and is back in after a restart with the right one. No
  log line, /metrics or /health shows the password.
"""
from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from helpers import (FAST_CLUSTER_CONFIGS, broker_config, cluster_with_listeners, config_refused, peer_ports,
                     wait_for_topic)
from raftka.broker.replica_manager import ReplicaManager
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.authenticator import ANONYMOUS
from raftka.common.errors import ConfigError
from raftka.common.sasl import SaslClientSettings
from raftka.common.server_config import server_config
from raftka.common.transport import Connection

BROKER_PASSWORD = "br0ker-Secret-9f3a"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS_KEY = "listener.name.internal.scram-sha-512.sasl.jaas.config"


def _jaas(password: str = BROKER_PASSWORD, module: str = SCRAM_MODULE, user: str = "broker") -> str:
    return f'{module} required username="{user}" password="{password}";'


def _broker(**extra: Any) -> dict[str, Any]:
    return broker_config(**{"listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
                            "inter.broker.listener.name": "INTERNAL",
                            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512", JAAS_KEY: _jaas(), **extra})


def _refused(values: dict[str, Any]) -> ConfigError:
    return config_refused(values, BROKER_PASSWORD)


# -- config --------------------------------------------------------------------------------------

def test_a_sasl_inter_broker_listener_gives_the_brokers_own_login_and_hides_the_password():
    config = server_config(_broker())
    login = config.inter_broker_sasl()
    assert login == SaslClientSettings("SCRAM-SHA-512", "broker", BROKER_PASSWORD)
    assert BROKER_PASSWORD not in repr(login) and BROKER_PASSWORD not in repr(config)
    # Kafka writes the mechanism in upper case; lower case is read the same.
    assert server_config(_broker(**{"sasl.mechanism.inter.broker.protocol": "scram-sha-512"})).inter_broker_sasl() == login
    plaintext = server_config(_broker(**{"inter.broker.listener.name": "PLAINTEXT", JAAS_KEY: None}))
    assert plaintext.inter_broker_sasl() is None


def test_a_sasl_inter_broker_listener_without_a_mechanism_is_refused_naming_the_key():
    error = _refused(_broker(**{"sasl.mechanism.inter.broker.protocol": None}))
    assert error.key == "sasl.mechanism.inter.broker.protocol"
    assert "INTERNAL is SASL_PLAINTEXT" in error.message and "GSSAPI" in error.message
    assert _refused(_broker(**{"sasl.mechanism.inter.broker.protocol": "GSSAPI"})).key == \
        "sasl.mechanism.inter.broker.protocol"


def test_a_missing_jaas_entry_for_the_listener_and_mechanism_is_refused_naming_the_one_given():
    error = _refused(_broker(**{JAAS_KEY: None}))
    assert error.key == JAAS_KEY and SCRAM_MODULE in error.message
    other = _refused(_broker(**{JAAS_KEY: None, "listener.name.internal.scram-sha-256.sasl.jaas.config": _jaas()}))
    assert other.key == JAAS_KEY and "one is given for scram-sha-256, not scram-sha-512" in other.message
    # An entry for another listener is not the inter-broker one's.
    elsewhere = _refused(_broker(**{JAAS_KEY: None, "listener.name.plaintext.scram-sha-512.sasl.jaas.config": _jaas()}))
    assert elsewhere.key == JAAS_KEY


@pytest.mark.parametrize("jaas, words", [
    (_jaas(module=PLAIN_MODULE), f"SCRAM-SHA-512 logs in with {SCRAM_MODULE}"),
    (_jaas(module="com.sun.security.auth.module.Krb5LoginModule"), "is not one Raftka speaks"),
    (f'{SCRAM_MODULE} required username="broker";', "needs the username and password"),
    (f'{SCRAM_MODULE} required password="{BROKER_PASSWORD}";', "needs the username and password"),
    (f'{SCRAM_MODULE} required username="broker" password="{BROKER_PASSWORD}"', "must end with ';'"),
    (f'{SCRAM_MODULE} optional username="broker" password="{BROKER_PASSWORD}";', "must be 'required'"),
    (f'{SCRAM_MODULE} required username="broker" password="{BROKER_PASSWORD}" user_alice="{BROKER_PASSWORD}";',
     "a broker keeps no user list"),
])
def test_a_bad_jaas_entry_is_refused_and_no_message_shows_the_password(jaas, words):
    error = _refused(_broker(**{JAAS_KEY: jaas}))
    assert error.key == JAAS_KEY and words in error.message


def test_the_mechanism_must_be_enabled_on_the_inter_broker_listener_and_known_in_the_key():
    error = _refused(_broker(**{"listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-256"}))
    assert error.key == "sasl.mechanism.inter.broker.protocol" and "not enabled" in error.message
    unknown = _refused(_broker(**{"listener.name.internal.gssapi.sasl.jaas.config": _jaas()}))
    assert unknown.key == "listener.name.internal.gssapi.sasl.jaas.config"
    nowhere = _refused(_broker(**{"listener.name.external.scram-sha-512.sasl.jaas.config": _jaas()}))
    assert nowhere.key == "listener.name.external.scram-sha-512.sasl.jaas.config" and "no listener" in nowhere.message


def test_a_jaas_entry_the_broker_does_not_read_is_logged_without_its_password(caplog):
    unread = "listener.name.plaintext.scram-sha-256.sasl.jaas.config"
    with caplog.at_level(logging.WARNING, logger="raftka.common.server_config"):
        server_config(_broker(**{unread: _jaas()}))
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith(f"{unread} is not read") for line in lines), lines
    assert not any(JAAS_KEY in line or BROKER_PASSWORD in line for line in lines)


def test_a_replica_fetch_is_taken_only_on_the_inter_broker_listener_logged_in():
    login = SaslClientSettings("SCRAM-SHA-512", "broker", BROKER_PASSWORD)
    manager = SimpleNamespace(peer_sasl=login, inter_broker_listener="INTERNAL")
    refusal = ReplicaManager.replica_fetch_refusal
    assert refusal(manager, 5, "INTERNAL", "User:broker") is None
    assert "PLAINTEXT as User:ANONYMOUS" in refusal(manager, 5, "PLAINTEXT", ANONYMOUS)
    assert refusal(manager, 5, "SASL_SSL", "User:alice") is not None  # a client listener, logged in or not
    assert refusal(manager, 5, "INTERNAL", ANONYMOUS) is not None
    # Brokers that do not log in to each other take replica Fetches as before.
    assert refusal(SimpleNamespace(peer_sasl=None, inter_broker_listener="PLAINTEXT"), 5, "SSL", ANONYMOUS) is None


def test_a_refused_login_backs_off_like_a_refused_connect_then_succeeds_once_the_user_exists():
    from raftka.broker.network import PeerConnection
    from raftka.common.errors import NetworkExceptionError, SaslAuthenticationFailedError
    from test_sasl import SHA512, Credentials, start_server

    async def scenario() -> None:
        credentials = Credentials()
        server, handler = await start_server(credentials)
        login = SaslClientSettings("SCRAM-SHA-512", "broker", BROKER_PASSWORD)
        peer = PeerConnection(f"127.0.0.1:{server.port}", client_id="broker-9-fetcher", max_frame_bytes=1 << 20,
                              reconnect_backoff_ms=200, reconnect_backoff_max_ms=200, sasl=login)
        try:
            with pytest.raises(SaslAuthenticationFailedError) as refused:
                await peer.request(ApiKey.METADATA, {"topics": []}, timeout_ms=5000)
            assert BROKER_PASSWORD not in str(refused.value)
            # The next login waits out the backoff: a request that cannot wait that long fails at once.
            with pytest.raises(NetworkExceptionError, match="reconnecting after 1 failure"):
                await peer.request(ApiKey.METADATA, {"topics": []}, timeout_ms=50)
            credentials.add("broker", BROKER_PASSWORD, SHA512)  # the user is made later
            code, _ = await peer.request(ApiKey.METADATA, {"topics": []}, timeout_ms=5000)
            assert code == errors.NONE and handler.principals == ["User:broker"]
        finally:
            await peer.close()
            await server.close()
    asyncio.run(asyncio.wait_for(scenario(), 30))


# -- a cluster whose brokers replicate over SASL_PLAINTEXT ---------------------------------------

WAIT_S = 40.0
RECORDS = 30
SASL = "SASL_PLAINTEXT"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """1 controller + 3 brokers; the brokers' user does not exist when they start. Stopped by
    PID at the end of the module."""
    broker_configs = {"inter.broker.listener.name": SASL, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                      f"listener.name.{SASL.lower()}.scram-sha-512.sasl.jaas.config": _jaas(),
                      "replica.fetch.backoff.ms": 200}
    made = cluster_with_listeners(SASL).start(tmp_path_factory.mktemp("inter-broker-sasl"), controllers=1, brokers=3,
                                              configs=FAST_CLUSTER_CONFIGS, broker_configs=broker_configs)
    try:
        yield made
    finally:
        made.close()


def _partitions(admin: Any, topic: str) -> list[dict[str, Any]]:
    return admin.describe_topics([topic])[0]["partitions"]


def _refusal_lines(cluster: Any, broker_id: int) -> list[str]:
    return [line for line in cluster.processes[broker_id].lines if "refused this broker" in line]


def _create_broker_user(cluster: Any, password: str = BROKER_PASSWORD) -> None:
    from raftka.client import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password)])


@pytest.fixture(scope="module")
def replicated(cluster) -> str:
    """A topic (3 partitions, RF 3, min.insync.replicas 2) made before the brokers' user exists,
    then the user: the followers catch up by themselves. Returns the topic."""
    from raftka.client import AdminClient, NewTopic
    from raftka.cluster import wait_until
    topic = f"ib-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(topic, 3, 3, topic_configs={"min.insync.replicas": "2"})])
        wait_for_topic(admin, topic, 3)
        # No follower can log in: after replica.lag.time.max.ms each leader is its ISR alone.
        wait_until(lambda: all(p["isr"] == [p["leader"]] for p in _partitions(admin, topic)), WAIT_S,
                   what="every ISR shrunk to its leader while followers cannot log in")
        for broker_id in cluster.broker_ids:
            assert _refusal_lines(cluster, broker_id), cluster.processes[broker_id].output()
        _create_broker_user(cluster)
        wait_until(lambda: all(len(p["isr"]) == 3 for p in _partitions(admin, topic)), WAIT_S,
                   what="the full ISR once the brokers' user exists")
    return topic


def test_replication_waits_for_the_brokers_user_then_catches_up_and_acks_all_produces(cluster, replicated):
    from raftka.client import Consumer, Producer
    from helpers import read_values
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
        futures = [producer.send(replicated, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(RECORDS)]
        assert len([f.get(WAIT_S) for f in futures]) == RECORDS
    consumer = Consumer(replicated, bootstrap_servers=cluster.bootstrap_servers, group_id=f"g-{replicated}",
                        auto_offset_reset="earliest", consumer_timeout_ms=15_000)
    assert read_values(consumer, RECORDS) == {f"v{i}".encode() for i in range(RECORDS)}
    # Each follower said so once per leader, not once per fetch round (backoff 200 ms, ~10 s).
    for broker_id in cluster.broker_ids:
        lines = _refusal_lines(cluster, broker_id)
        leaders = {line.partition("leader ")[2].split()[0] for line in lines}
        assert len(lines) == len(leaders) <= 2, lines


def test_brokers_dial_each_other_on_the_sasl_listener_only(cluster, replicated):
    plaintext = {cluster.nodes[b].broker_port for b in cluster.broker_ids}
    for broker_id in cluster.broker_ids:
        peers = peer_ports(cluster.processes[broker_id].popen.pid)
        assert not peers & plaintext, (broker_id, peers)
        others = {cluster.ports[SASL][b] for b in cluster.broker_ids if b != broker_id}
        assert peers & others, (broker_id, peers)  # it follows both other brokers (RF 3, 3 leaders)


def _fetch(port: int, topic: str, replica_id: int) -> dict:
    body = {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p in range(3)]}]}

    async def one() -> dict:
        conn = await Connection.open("127.0.0.1", port, kafka_versions={ApiKey.FETCH: 12}, connect_timeout_ms=5000)
        try:
            return (await conn.request(ApiKey.FETCH, body, timeout_ms=10_000))[1]
        finally:
            await conn.close()
    return asyncio.run(one())


def test_an_unauthenticated_replica_fetch_is_refused_and_logged_and_a_consumer_fetch_is_served(cluster, replicated):
    broker_id = cluster.broker_ids[0]
    port = cluster.nodes[broker_id].broker_port
    posing = cluster.broker_ids[1]  # a real replica's id: the attack claims to be a follower
    for _ in range(3):
        answer = _fetch(port, replicated, posing)
        assert answer["error_code"] == errors.CLUSTER_AUTHORIZATION_FAILED, answer
        assert not any(p["records"] for t in answer["responses"] for p in t["partitions"])
    consumer = _fetch(port, replicated, -1)
    assert consumer["error_code"] == errors.NONE
    assert [p["error_code"] for t in consumer["responses"] for p in t["partitions"]]
    lines = [line for line in cluster.processes[broker_id].lines if "refused a replica Fetch" in line]
    assert len(lines) == 1, lines  # three refusals, one line a minute
    assert f"replica_id {posing}" in lines[0] and "listener PLAINTEXT as User:ANONYMOUS" in lines[0]


def test_a_wrong_broker_password_keeps_the_follower_out_of_the_isr_and_is_logged_once_per_leader(
        cluster, replicated):
    from raftka.client import AdminClient
    from raftka.cluster import wait_until
    victim = cluster.broker_ids[2]
    key = f"listener.name.{SASL.lower()}.scram-sha-512.sasl.jaas.config"
    cluster.nodes[victim].extra[key] = _jaas("not-the-broker-password")
    try:
        cluster.restart(victim)
        with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            wait_until(lambda: all(victim not in p["isr"] for p in _partitions(admin, replicated)), WAIT_S,
                       what=f"broker {victim} out of every ISR")
            time.sleep(3)  # several fetch rounds and logins more
            assert all(victim not in p["isr"] for p in _partitions(admin, replicated))
        lines = _refusal_lines(cluster, victim)
        leaders = [line.partition("leader ")[2].split()[0] for line in lines]
        assert lines and len(leaders) == len(set(leaders)), lines
        assert all("invalid user name or password" in line for line in lines), lines
    finally:
        cluster.nodes[victim].extra[key] = _jaas()
        cluster.restart(victim)
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        wait_until(lambda: all(len(p["isr"]) == 3 for p in _partitions(admin, replicated)), WAIT_S,
                   what=f"broker {victim} back in every ISR with the right password")


def test_no_log_line_metrics_or_health_shows_the_brokers_password(cluster, replicated):
    for broker_id in cluster.broker_ids:
        log = cluster.nodes[broker_id].log_path.read_text(errors="replace")  # every incarnation's
        assert "ready" in log and BROKER_PASSWORD not in log and "not-the-broker-password" not in log
        for path in ("/metrics", "/health"):
            with urllib.request.urlopen(f"http://{cluster.http_address(broker_id)}{path}", timeout=10) as reply:
                assert BROKER_PASSWORD not in reply.read().decode("utf-8", "replace")
