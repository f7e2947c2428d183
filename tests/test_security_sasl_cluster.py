"""SASL on a broker's listeners (issue #22): SCRAM users made through the admin API log in over
SASL_SSL and SASL_PLAINTEXT with Raftka's client, kafka-python and confluent-kafka.

A cluster of 1 controller + 3 brokers (real processes), each broker listening on PLAINTEXT (the
inter-broker listener; ACLs do not exist yet, so users are made there), SASL_SSL (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) and SASL_PLAINTEXT (SCRAM only: PLAIN would send the password in
the clear). What it shows:

- a user made with AlterUserScramCredentials produces with acks=all over SASL_SSL
  (SCRAM-SHA-512) and reads back in a group over SASL_PLAINTEXT (SCRAM-SHA-256), with Raftka's
  client; PLAIN over SASL_SSL checks the same password against the stored SCRAM credential;
- a wrong password and an unknown user get the same SASL_AUTHENTICATION_FAILED, at once (not
  after max_block_ms), and the message names no password; PLAIN on SASL_PLAINTEXT is
  UNSUPPORTED_SASL_MECHANISM;
- a request before logging in closes the connection, unanswered, and the broker serves on;
- Metadata over SASL_SSL lists the brokers' SASL_SSL endpoints;
- kafka-python (SCRAM-SHA-256) and confluent-kafka (SCRAM-SHA-512) produce and consume over
  SASL_SSL; confluent-kafka with a wrong password is refused;
- a deleted credential logs in no more.
"""
from __future__ import annotations

import socket
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from helpers import (FAST_CLUSTER_CONFIGS, cluster_with_listeners, read_values, third_party_round_trip,
                     wait_for_topic)
from raftka.cluster.certs import CertificateAuthority, write_pem
from raftka.common.api import ApiKey

PASSWORD = "alice-s3cret-Passw0rd"
WAIT_S = 30.0
RECORDS = 30


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    directory: Path = tmp_path_factory.mktemp("sasl-pki")
    ca = CertificateAuthority.create("raftka sasl test CA", days=1)
    broker = ca.issue("broker", ("127.0.0.1", "localhost"), days=1)
    return {"ca": str(write_pem(directory / "ca.pem", ca.cert_pem)),
            "broker": str(write_pem(directory / "broker.pem", broker.keystore_pem))}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, pki):
    """Stopped by PID at the end of the module."""
    broker_configs = {"ssl.keystore.location": pki["broker"],
                      "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"}
    made = cluster_with_listeners("SASL_SSL", "SASL_PLAINTEXT").start(
        tmp_path_factory.mktemp("sasl"), controllers=1, brokers=3, configs=FAST_CLUSTER_CONFIGS, broker_configs=broker_configs)
    try:
        from raftka.client import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
        with AdminClient(bootstrap_servers=made.bootstrap_servers) as admin:
            admin.alter_user_scram_credentials([
                UserScramCredentialUpsertion("alice", ScramCredentialInfo(mechanism, 4096), PASSWORD)
                for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)])
        yield made
    finally:
        made.close()


def _sasl(cluster: Any, pki: dict[str, str], listener: str, mechanism: str, password: str = PASSWORD,
          user: str = "alice") -> dict[str, Any]:
    configs = {"bootstrap_servers": cluster.bootstrap(listener), "security_protocol": listener,
               "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
    if listener == "SASL_SSL":
        configs["ssl_cafile"] = pki["ca"]
    return configs


def _logged_in(configs: dict[str, Any]) -> bool:
    """Whether a fresh admin client with ``configs`` can ask the cluster something."""
    from raftka.client import AdminClient
    with AdminClient(**configs, request_timeout_ms=10_000) as admin:
        return bool(admin.describe_cluster()["brokers"])


def _wait_logged_in(configs: dict[str, Any]) -> None:
    """Brokers learn of a new credential from the metadata log a moment after it commits."""
    from raftka.cluster import wait_until
    from raftka.common.errors import SaslAuthenticationFailedError

    def ok() -> bool:
        try:
            return _logged_in(configs)
        except SaslAuthenticationFailedError:
            return False
    wait_until(ok, WAIT_S, what="a login with the new credential")


def test_a_scram_user_produces_over_sasl_ssl_and_consumes_over_sasl_plaintext(cluster, pki):
    from raftka.client import AdminClient, Consumer, NewTopic, Producer
    _wait_logged_in(_sasl(cluster, pki, "SASL_SSL", "SCRAM-SHA-512"))
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    with AdminClient(**_sasl(cluster, pki, "SASL_SSL", "SCRAM-SHA-512")) as admin:
        admin.create_topics([NewTopic(topic, 3, 3, topic_configs={"min.insync.replicas": "2"})])
        wait_for_topic(admin, topic, 3)
    with Producer(acks="all", **_sasl(cluster, pki, "SASL_SSL", "SCRAM-SHA-512")) as producer:
        futures = [producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(RECORDS)]
        assert len([f.get(WAIT_S) for f in futures]) == RECORDS
    consumer = Consumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", consumer_timeout_ms=15_000,
                        **_sasl(cluster, pki, "SASL_PLAINTEXT", "SCRAM-SHA-256"))
    assert read_values(consumer, RECORDS) == {f"v{i}".encode() for i in range(RECORDS)}
    # PLAIN (offered on SASL_SSL only) checks the password against the stored SCRAM credential.
    assert _logged_in(_sasl(cluster, pki, "SASL_SSL", "PLAIN"))


@pytest.mark.parametrize("user, password", [("alice", "not-the-password"), ("mallory", PASSWORD)])
def test_a_wrong_password_and_an_unknown_user_are_refused_alike_and_at_once(cluster, pki, user, password):
    from raftka.client import Producer
    from raftka.common.errors import SaslAuthenticationFailedError
    _wait_logged_in(_sasl(cluster, pki, "SASL_SSL", "SCRAM-SHA-256"))
    started = time.monotonic()
    producer = Producer(max_block_ms=20_000, **_sasl(cluster, pki, "SASL_SSL", "SCRAM-SHA-256", password, user))
    try:
        with pytest.raises(SaslAuthenticationFailedError) as caught:
            producer.send("sasl-refused", b"x").get(30)
    finally:
        producer.close()
    assert caught.value.code == 58  # SASL_AUTHENTICATION_FAILED
    assert "invalid user name or password" in caught.value.message and password not in caught.value.message
    assert time.monotonic() - started < 10, "failed at once, not after max_block_ms"


def test_plain_is_not_offered_where_it_would_send_the_password_in_the_clear(cluster, pki):
    from raftka.common.errors import UnsupportedSaslMechanismError
    with pytest.raises(UnsupportedSaslMechanismError):
        _logged_in(_sasl(cluster, pki, "SASL_PLAINTEXT", "PLAIN"))


def test_a_request_before_logging_in_closes_the_connection_and_the_broker_serves_on(cluster, pki):
    port = cluster.ports["SASL_PLAINTEXT"][cluster.broker_ids[0]]
    header = struct.pack(">hhih", ApiKey.METADATA, 12, 7, -1) + b"\x00"  # header v2: no tags
    body = b"\x00" + b"\x00\x00" + b"\x00"  # topics: null (compact), no auto-create, no auth ops, no tags
    frame = header + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(struct.pack(">i", len(frame)) + frame)
        assert raw.recv(1024) == b"", "answered before authentication"
    assert _logged_in(_sasl(cluster, pki, "SASL_PLAINTEXT", "SCRAM-SHA-256"))


def test_metadata_over_sasl_ssl_lists_the_sasl_ssl_endpoints(cluster, pki):
    from raftka.client import AdminClient
    with AdminClient(**_sasl(cluster, pki, "SASL_SSL", "SCRAM-SHA-512")) as admin:
        brokers = admin.describe_cluster()["brokers"]
    assert {b["node_id"]: b["port"] for b in brokers} == cluster.ports["SASL_SSL"]


def test_kafka_python_and_confluent_kafka_log_in_with_scram_over_sasl_ssl(cluster, pki):
    pytest.importorskip("kafka")
    confluent = pytest.importorskip("confluent_kafka")
    from raftka.client import AdminClient, NewTopic
    _wait_logged_in(_sasl(cluster, pki, "SASL_SSL", "SCRAM-SHA-512"))
    topic = f"sasl-compat-{uuid.uuid4().hex[:8]}"
    with AdminClient(**_sasl(cluster, pki, "SASL_SSL", "SCRAM-SHA-512")) as admin:
        admin.create_topics([NewTopic(topic, 2, 3)])
        wait_for_topic(admin, topic, 2)
    kp_security = {"security_protocol": "SASL_SSL", "ssl_cafile": pki["ca"], "sasl_mechanism": "SCRAM-SHA-256",
                   "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD}
    ck_security = {"bootstrap.servers": cluster.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
                   "ssl.ca.location": pki["ca"], "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                   "sasl.password": PASSWORD}
    third_party_round_trip(topic, {"bootstrap_servers": cluster.bootstrap("SASL_SSL"), **kp_security}, ck_security,
                           WAIT_S)
    # A wrong password: librdkafka reports the authentication error and delivers nothing.
    errors: list[Any] = []
    refused = confluent.Producer({**ck_security, "sasl.password": "wrong", "error_cb": errors.append,
                                  "message.timeout.ms": 5000})
    refused.produce(topic, b"never")
    refused.flush(10)
    assert any(e.code() == confluent.KafkaError._AUTHENTICATION for e in errors), errors


def test_a_deleted_credential_logs_in_no_more(cluster, pki):
    from raftka.client import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion
    from raftka.client import UserScramCredentialUpsertion
    from raftka.cluster import wait_until
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "bob-password")])
        bob = _sasl(cluster, pki, "SASL_PLAINTEXT", "SCRAM-SHA-256", "bob-password", "bob")
        _wait_logged_in(bob)
        admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)])
    from raftka.common.errors import SaslAuthenticationFailedError

    def refused() -> bool:
        try:
            _logged_in(bob)
            return False
        except SaslAuthenticationFailedError:
            return True
    wait_until(refused, WAIT_S, what="bob's login refused after his credential was deleted")
