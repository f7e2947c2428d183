"""TLS listeners and clients (issue #22): Kafka's listener.security.protocol.map and ssl.* keys.

What it proves, from the cheapest to the dearest:

- Config: a listener without a security protocol, an SSL listener without a keystore, a file
  that cannot be read, an encrypted key without (or with a wrong) password, a TLS version below
  1.2, a listener.name.<name>.* key for no listener, an inter-broker listener the broker does
  not have, and TLS on the controller listener are refused with a ConfigError naming the key;
  the password never appears in a message. Configs written before #22 load unchanged.
- One in-process Server on TLS: a client trusting the CA is served; a plaintext client and
  garbage each cost one closed connection and one log line per minute, and the good client on
  the same listener is served on; a client trusting another CA gets SslAuthenticationError (a
  NetworkExceptionError, not a traceback), and so does a certificate naming another host unless
  host names are not checked; ssl.client.auth=required refuses a client without a certificate
  and serves one with a certificate of the CA. Each on asyncio's loop and on uvloop.
- A cluster of 1 controller + 3 brokers (real processes; three brokers so that RF 3 shows every
  follower replicating over SSL) with an SSL listener beside PLAINTEXT and
  inter.broker.listener.name=SSL: Raftka's client produces with acks=all and consumes in a group
  over SSL; followers hold the full ISR and the brokers' sockets to each other go to SSL ports
  only (read from /proc); Metadata over SSL lists SSL endpoints and over PLAINTEXT lists
  PLAINTEXT ones; raw plaintext bytes on the SSL port are refused and the broker serves on;
  kafka-python and confluent-kafka produce and consume over SSL.
- The same cluster against clients configured wrong: kafka-python, confluent-kafka and Raftka's
  client speaking PLAINTEXT to the SSL port, and each of them trusting another CA, fail within
  their own short timeouts with no metadata, with the error saying why where the client exposes
  one (certificate verify failed; a connection the broker closed); the brokers keep no socket of
  theirs (/proc) and serve SSL clients on.

Certificates: a CA, a broker certificate (SAN 127.0.0.1 and localhost, for server and client
use: brokers show it to each other) and a client certificate are made per module with
``cryptography``; nothing is committed.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import (BestAvailableEncryption, Encoding, PrivateFormat,
                                                          load_pem_private_key)

from helpers import FAST_CLUSTER_CONFIGS, cluster_with_listeners, peer_ports, read_values, third_party_round_trip
from raftka.cluster.certs import CertificateAuthority, write_pem
from raftka.common import event_loop
from raftka.common.api import ApiKey
from raftka.common.event_loop import EVENT_LOOP_ENV, EVENT_LOOPS
from raftka.common.errors import ConfigError, NetworkExceptionError
from raftka.common.messages import KAFKA_API
from raftka.common.security import SslAuthenticationError, client_ssl_context, server_ssl_context
from raftka.common.server import Server
from raftka.common.server_config import server_config
from raftka.common.transport import Connection

KEY_PASSWORD = "correct horse battery staple"
API_VERSIONS_BODY = {"client_software_name": "tls-test", "client_software_version": "1"}


# -- certificates ------------------------------------------------------------------------------

def make_pki(directory: Path) -> dict[str, str]:
    """PEM files (raftka/cluster/certs.py): ``ca`` (and ``other_ca``) certificates; ``broker``
    (key + chain, the form of ssl.keystore.location), ``broker_encrypted`` (its key encrypted
    with KEY_PASSWORD), ``broker_chain``/``broker_key`` (apart), ``client_cert``/``client_key``
    and ``client`` (both), ``stranger`` (key + chain from the other CA), ``elsewhere`` (the CA's,
    for another host)."""
    out: dict[str, str] = {}

    def write(name: str, data: bytes) -> None:
        out[name] = str(write_pem(directory / f"{name}.pem", data))

    cas = {name: CertificateAuthority.create(f"raftka test {name}", days=1) for name in ("ca", "other_ca")}
    for name, ca in cas.items():
        write(name, ca.cert_pem)
    for leaf, ca_name, hosts in (("broker", "ca", ("127.0.0.1", "localhost")), ("client", "ca", ()),
                                 ("stranger", "other_ca", ("127.0.0.1", "localhost")),
                                 ("elsewhere", "ca", ("broker9.example.com",))):
        issued = cas[ca_name].issue(leaf, hosts, days=1)
        write(leaf, issued.keystore_pem)
        write(f"{leaf}_chain", issued.chain_pem)
        write(f"{leaf}_key", issued.key_pem)
        if leaf == "broker":
            encrypted = load_pem_private_key(issued.key_pem, None).private_bytes(
                Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(KEY_PASSWORD.encode()))
            write("broker_encrypted", encrypted + issued.chain_pem)
        if leaf == "client":
            write("client_cert", issued.chain_pem.split(b"-----END CERTIFICATE-----")[0]
                  + b"-----END CERTIFICATE-----\n")
    return out


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    return make_pki(tmp_path_factory.mktemp("pki"))


# -- config --------------------------------------------------------------------------------------

def _broker(**extra: Any) -> dict[str, Any]:
    values = {"process.roles": "broker", "node.id": "4", "controller.quorum.voters": "1@127.0.0.1:9000",
              "controller.quorum.bootstrap.servers": "127.0.0.1:9001", "log.dirs": "/tmp/raftka-tls-unused",
              "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,HTTP://127.0.0.1:0"}
    values.update({k.replace("__", "."): v for k, v in extra.items()})
    return values


def _refused(values: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        server_config(values)
    return caught.value


def test_a_config_written_before_security_loads_with_every_listener_plaintext():
    config = server_config(_broker(listeners="PLAINTEXT://127.0.0.1:0,HTTP://127.0.0.1:0"))
    assert config.client_listeners == ["PLAINTEXT"]
    assert config.security_protocol("PLAINTEXT") == "PLAINTEXT"
    assert config.inter_broker_ssl_context() is None
    combined = server_config({**_broker(listeners="CONTROLLER://127.0.0.1:9001,PLAINTEXT://127.0.0.1:0"),
                              "process.roles": "broker,controller", "node.id": "1",
                              "controller.quorum.secret": "s"})
    assert combined.client_listeners == ["PLAINTEXT"]


def test_an_ssl_listener_without_a_keystore_is_refused_naming_the_key():
    error = _refused(_broker())
    assert error.key == "ssl.keystore.location" and "listener SSL is SSL" in error.message


def test_an_unreadable_keystore_or_truststore_is_refused_naming_the_key(pki, tmp_path):
    missing = str(tmp_path / "nope.pem")
    error = _refused(_broker(ssl__keystore__location=missing))
    assert error.key == "ssl.keystore.location" and "cannot read" in error.message
    error = _refused(_broker(ssl__keystore__location=pki["broker"], ssl__client__auth="required",
                             ssl__truststore__location=missing))
    assert error.key == "ssl.truststore.location"
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    error = _refused(_broker(ssl__keystore__location=str(not_pem)))
    assert error.key == "ssl.keystore.location" and "cannot load" in error.message


def test_client_auth_without_a_truststore_is_refused(pki):
    error = _refused(_broker(ssl__keystore__location=pki["broker"], ssl__client__auth="required"))
    assert error.key == "ssl.truststore.location"
    assert _refused(_broker(ssl__keystore__location=pki["broker"], ssl__client__auth="maybe")).key == "ssl.client.auth"


def test_an_encrypted_key_needs_its_password_and_no_message_shows_one(pki):
    error = _refused(_broker(ssl__keystore__location=pki["broker_encrypted"]))
    assert error.key == "ssl.key.password" and "encrypted" in error.message
    error = _refused(_broker(ssl__keystore__location=pki["broker_encrypted"], ssl__key__password="wrong-password"))
    assert error.key == "ssl.key.password" and "wrong-password" not in str(error)
    config = server_config(_broker(ssl__keystore__location=pki["broker_encrypted"], ssl__key__password=KEY_PASSWORD))
    assert isinstance(config.server_ssl_context("SSL"), ssl.SSLContext)


def test_a_listener_missing_from_the_protocol_map_is_refused():
    error = _refused(_broker(listeners="PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                             listener__security__protocol__map="PLAINTEXT:PLAINTEXT"))
    assert error.key == "listener.security.protocol.map" and "INTERNAL" in error.message
    error = _refused(_broker(listener__security__protocol__map="PLAINTEXT:PLAINTEXT,SSL:TLS"))
    assert error.key == "listener.security.protocol.map" and "unknown security protocol" in error.message


def test_tls_below_1_2_is_refused_and_a_tls_controller_listener_needs_its_keystore(pki):
    error = _refused(_broker(ssl__keystore__location=pki["broker"], ssl__enabled__protocols="TLSv1.1,TLSv1.2"))
    assert error.key == "ssl.enabled.protocols"
    combined = {**_broker(listeners="CONTROLLER://127.0.0.1:9001,PLAINTEXT://127.0.0.1:0"),
                "process.roles": "broker,controller", "node.id": "1", "controller.quorum.secret": "s",
                "listener.security.protocol.map": "CONTROLLER:SSL,PLAINTEXT:PLAINTEXT"}
    assert _refused(combined).key == "ssl.keystore.location"  # loaded at start, not at the first handshake
    config = server_config({**combined, "ssl.keystore.location": pki["broker"], "ssl.truststore.location": pki["ca"]})
    assert config.controller_ssl_context() is not None  # the broker half dials its controllers over TLS too


def test_the_inter_broker_listener_must_be_one_of_the_brokers_listeners(pki):
    error = _refused(_broker(listeners="PLAINTEXT://127.0.0.1:0", inter__broker__listener__name="SSL"))
    assert error.key == "inter.broker.listener.name"
    # A broker needs no PLAINTEXT listener: TLS only, followers included.
    config = server_config(_broker(listeners="SSL://127.0.0.1:0", inter__broker__listener__name="SSL",
                                   ssl__keystore__location=pki["broker"], ssl__truststore__location=pki["ca"]))
    assert config.client_listeners == ["SSL"]
    peer = config.inter_broker_ssl_context()
    assert peer is not None and peer.check_hostname and peer.verify_mode == ssl.CERT_REQUIRED
    no_host_check = server_config(_broker(listeners="SSL://127.0.0.1:0", inter__broker__listener__name="SSL",
                                          ssl__keystore__location=pki["broker"],
                                          ssl__endpoint__identification__algorithm=""))
    assert not no_host_check.inter_broker_ssl_context().check_hostname


def test_per_listener_ssl_keys_override_the_plain_ones_and_name_themselves_in_errors(pki, tmp_path):
    values = _broker(listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
                     listener__security__protocol__map="PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
                     ssl__keystore__location=pki["broker"])
    values["listener.name.mtls.ssl.client.auth"] = "required"
    values["listener.name.mtls.ssl.truststore.location"] = pki["ca"]
    config = server_config(values)
    assert config.listener_value("MTLS", "ssl.client.auth") == "required"
    assert config.listener_value("SSL", "ssl.client.auth") == "none"
    assert config.server_ssl_context("MTLS").verify_mode == ssl.CERT_REQUIRED
    assert config.server_ssl_context("SSL").verify_mode == ssl.CERT_NONE
    values["listener.name.mtls.ssl.truststore.location"] = str(tmp_path / "missing.pem")
    assert _refused(values).key == "listener.name.mtls.ssl.truststore.location"
    values["listener.name.mtls.ssl.truststore.location"] = pki["ca"]
    values["listener.name.nosuch.ssl.client.auth"] = "required"
    assert _refused(values).key == "listener.name.nosuch.ssl.client.auth"
    del values["listener.name.nosuch.ssl.client.auth"]
    values["listener.name.mtls.log.dirs"] = "/tmp"
    assert _refused(values).key == "listener.name.mtls.log.dirs"


def test_a_keystore_given_as_pem_text_works_like_a_file(pki):
    config = server_config(_broker(ssl__keystore__certificate__chain=Path(pki["broker_chain"]).read_text(),
                                   ssl__keystore__key=Path(pki["broker_key"]).read_text()))
    assert isinstance(config.server_ssl_context("SSL"), ssl.SSLContext)
    error = _refused(_broker(ssl__keystore__key=Path(pki["broker_key"]).read_text()))
    assert error.key == "ssl.keystore.certificate.chain"


def test_client_ssl_keys_are_checked_when_the_client_is_made(pki, tmp_path):
    from raftka.client.aio.producer import producer_config
    config = producer_config({"security_protocol": "SSL", "ssl_cafile": pki["ca"]})
    assert config["connection_factory"] is not None
    with pytest.raises(ConfigError) as caught:
        producer_config({"security_protocol": "SSL", "ssl_cafile": str(tmp_path / "missing.pem")})
    assert caught.value.key == "ssl_cafile"
    with pytest.raises(ConfigError) as caught:
        producer_config({"ssl_cafile": pki["ca"]})  # TLS settings on a plaintext client: refused
    assert caught.value.key == "security_protocol"
    with pytest.raises(ConfigError) as caught:
        producer_config({"security_protocol": "TLS"})
    assert caught.value.key == "security_protocol"
    with pytest.raises(ConfigError) as caught:
        producer_config({"security_protocol": "SSL", "ssl_certfile": pki["client_cert"],
                         "ssl_keyfile": pki["broker_encrypted"], "ssl_password": "not-it"})
    assert caught.value.key == "ssl_password" and "not-it" not in str(caught.value)


# -- one Server over TLS -----------------------------------------------------------------------

@pytest.fixture(params=EVENT_LOOPS)
def run(request, monkeypatch):
    """Runs a coroutine on each event loop a Raftka process may use (uvloop reads a client's
    first bytes at once: the TLS handshake must get them)."""
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv(EVENT_LOOP_ENV, request.param)
    return event_loop.run


async def _tls_server(context: ssl.SSLContext, **limits: Any) -> Server:
    async def never(request):  # ApiVersions is the server's own answer
        raise AssertionError(request)
    server = Server(never, kafka_api={ApiKey.API_VERSIONS: KAFKA_API[ApiKey.API_VERSIONS]}, name="tls-test",
                    **limits)
    return await server.start("127.0.0.1", 0, ssl=context)


async def _api_versions(port: int, context: ssl.SSLContext | None) -> dict:
    conn = await Connection.open("127.0.0.1", port, ssl=context, connect_timeout_ms=5000)
    try:
        code, body = await conn.request(ApiKey.API_VERSIONS, API_VERSIONS_BODY, timeout_ms=5000)
        assert code == 0
        return body
    finally:
        await conn.close()


def test_a_tls_listener_serves_trusting_clients_and_closes_plaintext_and_garbage_quietly(run, pki, caplog):
    async def main() -> None:
        server = await _tls_server(server_ssl_context(certfile=pki["broker"]))
        trusting = client_ssl_context(pki["ca"])
        try:
            assert (await _api_versions(server.port, trusting))["api_keys"]
            kept = await Connection.open("127.0.0.1", server.port, ssl=trusting)  # open across the bad ones
            frame = struct.pack(">ihhi", 0, ApiKey.API_VERSIONS, 0, 1)  # a plaintext Kafka request
            for payload in (struct.pack(">i", len(frame)) + frame, os.urandom(300), b"GET / HTTP/1.1\r\n\r\n"):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(payload)
                answer = await asyncio.wait_for(reader.read(), 5)  # returns once the server closed it
                assert answer == b"" or answer[:1] == b"\x15", answer  # nothing, or a TLS alert record
                writer.close()
            await _wait(lambda: server.metrics.connections_closed_tls_handshake == 3)
            code, _ = await kept.request(ApiKey.API_VERSIONS, API_VERSIONS_BODY, timeout_ms=5000)
            assert code == 0
            await kept.close()
            assert (await _api_versions(server.port, trusting))["api_keys"]
        finally:
            await server.close()

    with caplog.at_level(logging.DEBUG):
        run(main())
    lines = [r for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]  # rate limited: one line per minute
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a bad client"


def test_a_plaintext_client_that_sends_nothing_is_closed_by_the_handshake_timeout(run, pki):
    async def main() -> None:
        server = await _tls_server(server_ssl_context(certfile=pki["broker"]), first_byte_timeout_ms=300)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed after 300 ms, not 5 s
            writer.close()
            assert server.metrics.connections_closed_tls_handshake == 1 and server.connection_count == 0
        finally:
            await server.close()
    run(main())


def test_a_client_trusting_another_ca_gets_a_typed_connection_error(run, pki):
    async def main() -> None:
        server = await _tls_server(server_ssl_context(certfile=pki["broker"]))
        try:
            with pytest.raises(SslAuthenticationError) as caught:
                await _api_versions(server.port, client_ssl_context(pki["other_ca"]))
            assert isinstance(caught.value, NetworkExceptionError) and not caught.value.retriable
            assert "certificate" in caught.value.message and f"127.0.0.1:{server.port}" in caught.value.message
        finally:
            await server.close()
    run(main())


def test_a_certificate_for_another_host_is_refused_unless_host_names_are_not_checked(run, pki):
    async def main() -> None:
        server = await _tls_server(server_ssl_context(certfile=pki["elsewhere"]))
        try:
            with pytest.raises(SslAuthenticationError) as caught:
                await _api_versions(server.port, client_ssl_context(pki["ca"]))  # ssl_check_hostname=True
            assert "127.0.0.1" in caught.value.message
            body = await _api_versions(server.port, client_ssl_context(pki["ca"], check_hostname=False))
            assert body["api_keys"]  # the certificate still had to chain to the CA
        finally:
            await server.close()
    run(main())


def test_client_auth_required_refuses_a_client_without_a_certificate(run, pki):
    async def main() -> None:
        server = await _tls_server(server_ssl_context(certfile=pki["broker"], cafile=pki["ca"],
                                                      client_auth="required"))
        try:
            with pytest.raises(NetworkExceptionError):  # TLS 1.3: refused right after the handshake
                await _api_versions(server.port, client_ssl_context(pki["ca"]))
            with pytest.raises(NetworkExceptionError):  # a certificate of another CA
                await _api_versions(server.port, client_ssl_context(pki["ca"], pki["stranger"]))
            body = await _api_versions(server.port, client_ssl_context(pki["ca"], pki["client_cert"],
                                                                       pki["client_key"]))
            assert body["api_keys"]
        finally:
            await server.close()
    run(main())


async def _wait(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


# -- a 1+3 cluster with an SSL listener beside PLAINTEXT -----------------------------------------

WAIT_S = 30.0
RECORDS = 40
# Bootstrap, metadata and message timeouts of the clients configured wrong: a refused client
# fails in seconds, not after its defaults (30 s to bootstrap in kafka-python, 300 s per message
# in librdkafka).
REFUSED_CLIENT_TIMEOUT_MS = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, pki):
    """1 controller + 3 brokers (real processes; TLS is the brokers' business, one controller
    is enough); brokers replicate over SSL (inter.broker.listener.name=SSL) and show their
    certificate to each other (listener.name.ssl.ssl.client.auth=requested); stopped by PID at
    the end of the module."""
    broker_configs = {"ssl.keystore.location": pki["broker"], "ssl.truststore.location": pki["ca"],
                      "inter.broker.listener.name": "SSL", "listener.name.ssl.ssl.client.auth": "requested"}
    made = cluster_with_listeners("SSL").start(tmp_path_factory.mktemp("tls"), controllers=1, brokers=3,
                                               configs=FAST_CLUSTER_CONFIGS, broker_configs=broker_configs)
    try:
        yield made
    finally:
        made.close()


def _ssl(pki: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"security_protocol": "SSL", "ssl_cafile": pki["ca"], **extra}


def _raw_request(port: int, api_key: int, body: dict, context: ssl.SSLContext | None) -> dict:
    async def one() -> dict:
        conn = await Connection.open("127.0.0.1", port, ssl=context, connect_timeout_ms=5000)
        try:
            return (await conn.request(api_key, body, timeout_ms=10_000))[1]
        finally:
            await conn.close()
    return asyncio.run(one())


def test_raftka_clients_produce_with_acks_all_and_consume_over_ssl_and_followers_replicate_over_ssl(cluster, pki):
    from raftka.client import AdminClient, Consumer, NewTopic, Producer
    from helpers import wait_for_topic
    from raftka.cluster import wait_until
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(bootstrap_servers=cluster.bootstrap("SSL"), **_ssl(pki))
    try:
        admin.create_topics([NewTopic(topic, 3, 3, topic_configs={"min.insync.replicas": "2"})])
        wait_for_topic(admin, topic, 3)
        producer = Producer(bootstrap_servers=cluster.bootstrap("SSL"), acks="all", **_ssl(pki))
        try:
            futures = [producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(RECORDS)]
            offsets = [f.get(WAIT_S) for f in futures]
        finally:
            producer.close()
        assert len(offsets) == RECORDS
        # Every follower caught up over SSL: the ISR is full again (min.insync.replicas=2 and
        # acks=all would have refused the writes with one replica alone).
        wait_until(lambda: all(len(p["isr"]) == 3 for p in admin.describe_topics([topic])[0]["partitions"]),
                   WAIT_S, what="a full ISR on every partition")
    finally:
        admin.close()
    consumer = Consumer(topic, bootstrap_servers=cluster.bootstrap("SSL"), group_id=f"g-{topic}",
                        auto_offset_reset="earliest", consumer_timeout_ms=15_000, **_ssl(pki))
    assert read_values(consumer, RECORDS) == {f"v{i}".encode() for i in range(RECORDS)}
    # Brokers talk to each other on SSL ports only (their PLAINTEXT ports serve clients).
    plaintext = {cluster.nodes[b].broker_port for b in cluster.broker_ids}
    dialled = set()
    for broker_id in cluster.broker_ids:
        peers = peer_ports(cluster.processes[broker_id].popen.pid)
        assert not peers & plaintext, (broker_id, peers)
        dialled |= peers & {cluster.ports["SSL"][b] for b in cluster.broker_ids if b != broker_id}
    assert len(dialled) >= 2, dialled  # followers of leaders on two brokers at least (6 partitions, RF 3)


def test_metadata_and_find_coordinator_answer_with_the_endpoints_of_the_listener_asked(cluster, pki):
    trusting = client_ssl_context(pki["ca"])
    first = cluster.broker_ids[0]
    over_ssl = _raw_request(cluster.ports["SSL"][first], ApiKey.METADATA, {"topics": None}, trusting)
    assert {(b["node_id"], b["port"]) for b in over_ssl["brokers"]} == set(cluster.ports["SSL"].items())
    over_plaintext = _raw_request(cluster.nodes[first].broker_port, ApiKey.METADATA, {"topics": None}, None)
    assert {(b["node_id"], b["port"]) for b in over_plaintext["brokers"]} == {
        (b, cluster.nodes[b].broker_port) for b in cluster.broker_ids}
    from raftka.cluster import wait_until

    def coordinator() -> dict | None:
        answer = _raw_request(cluster.ports["SSL"][first], ApiKey.FIND_COORDINATOR,
                              {"key": "tls-group", "key_type": 0, "coordinator_keys": ["tls-group"]}, trusting)
        found = (answer.get("coordinators") or [answer])[0]
        return found if found["error_code"] == 0 else None
    found = wait_until(coordinator, WAIT_S, what="a coordinator for tls-group")
    assert found["port"] == cluster.ports["SSL"][found["node_id"]]


def test_plaintext_bytes_on_the_ssl_port_are_refused_and_the_broker_serves_on(cluster, pki):
    port = cluster.ports["SSL"][cluster.broker_ids[1]]
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 7, -1)
    # A plaintext Kafka frame, and a whole TLS handshake record (200 bytes) holding no
    # ClientHello: both are refused at once. (A record header announcing more bytes than come
    # would wait for connections.first.byte.timeout.ms, 10 s by default: random lengths made
    # this test take 10 s more in about one run of four; the in-process tests cover that timeout.)
    for payload in (struct.pack(">i", len(frame)) + frame, b"\x16\x03\x01\x00\xc8" + bytes(range(200))):
        with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
            raw.sendall(payload)
            answer = raw.recv(1024)
            assert answer == b"" or answer[:1] == b"\x15", answer  # closed, or a TLS alert
    answer = _raw_request(port, ApiKey.METADATA, {"topics": None}, client_ssl_context(pki["ca"]))
    assert len(answer["brokers"]) == 3


def test_a_client_trusting_another_ca_is_refused_with_a_connection_error_saying_why(cluster, pki):
    from raftka.client import Producer
    started = time.monotonic()
    producer = Producer(bootstrap_servers=cluster.bootstrap("SSL"), max_block_ms=20_000,
                        security_protocol="SSL", ssl_cafile=pki["other_ca"])
    try:
        with pytest.raises(SslAuthenticationError) as caught:  # a NetworkExceptionError, not retried
            producer.send("tls-refused", b"x").get(30)
    finally:
        producer.close()
    assert "certificate" in caught.value.message, caught.value
    assert time.monotonic() - started < 10, "failed at once, not after max_block_ms"


def test_kafka_python_and_confluent_kafka_produce_and_consume_over_ssl(cluster, pki):
    pytest.importorskip("kafka")
    pytest.importorskip("confluent_kafka")
    from raftka.client import AdminClient, NewTopic
    from helpers import wait_for_topic
    topic = f"tls-compat-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap_servers=cluster.bootstrap("SSL"), **_ssl(pki)) as admin:
        admin.create_topics([NewTopic(topic, 2, 3)])
        wait_for_topic(admin, topic, 2)
    third_party_round_trip(
        topic, {"bootstrap_servers": cluster.bootstrap("SSL"), "security_protocol": "SSL", "ssl_cafile": pki["ca"]},
        {"bootstrap.servers": cluster.bootstrap("SSL"), "security.protocol": "SSL", "ssl.ca.location": pki["ca"]},
        WAIT_S)


# -- third-party clients configured wrong ------------------------------------------------------

_TCP_LISTEN = "0A"  # /proc/net/tcp state


def _tcp_sockets(pid: int) -> list[tuple[int, int, str]]:
    """(local port, remote port, state) of each IPv4 TCP socket process ``pid`` holds (/proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[9] in inodes:
            found.append((int(fields[1].rpartition(":")[2], 16), int(fields[2].rpartition(":")[2], 16), fields[3]))
    return found


def _client_sockets_on_ssl_ports(cluster) -> dict[int, list[tuple[int, str]]]:
    """Per broker, the (remote port, state) of each socket it holds on its SSL port whose other
    end no process of the cluster holds: a client's, not a follower's. A connection the broker
    failed to close after a refused handshake stays here (ESTABLISHED, or CLOSE_WAIT once the
    client hung up)."""
    held = {node: _tcp_sockets(process.popen.pid) for node, process in cluster.processes.items()}
    cluster_ports = {local for sockets in held.values() for local, _, _ in sockets}
    found = {}
    for broker_id in cluster.broker_ids:
        clients = [(remote, state) for local, remote, state in held[broker_id]
                   if local == cluster.ports["SSL"][broker_id] and state != _TCP_LISTEN
                   and remote not in cluster_ports]
        if clients:
            found[broker_id] = clients
    return found


def _assert_brokers_unharmed(cluster) -> None:
    from raftka.cluster import wait_until
    assert all(cluster.alive(b) for b in cluster.broker_ids)
    # Read until none is left: a follower's connection opened between two reads of /proc can
    # look like a client's for a moment; a leaked one stays.
    wait_until(lambda: not _client_sockets_on_ssl_ports(cluster), WAIT_S,
               what="no socket of a refused client left on a broker's SSL port")


LIBRDKAFKA_LOGGER = "librdkafka"  # confluent-kafka's log lines, for caplog


def _confluent_refused(confluent: Any, configs: dict[str, Any]) -> tuple[Any, list[Any], Any]:
    """A confluent-kafka producer with ``configs`` asks for metadata and sends one message;
    returns the list_topics error, what error_cb reported and the delivery error. Its log
    lines go to the LIBRDKAFKA_LOGGER logger."""
    errors: list[Any] = []
    delivered: list[Any] = []
    producer = confluent.Producer({**configs, "error_cb": errors.append, "logger": logging.getLogger(LIBRDKAFKA_LOGGER),
                                   "message.timeout.ms": REFUSED_CLIENT_TIMEOUT_MS})
    try:
        producer.produce("tls-refused", b"never", on_delivery=lambda err, msg: delivered.append(err))
        with pytest.raises(confluent.KafkaException) as caught:
            producer.list_topics(timeout=REFUSED_CLIENT_TIMEOUT_MS / 1000)
        assert producer.flush(REFUSED_CLIENT_TIMEOUT_MS / 1000 + 5) == 0  # the message expired...
        assert len(delivered) == 1 and delivered[0] is not None, delivered  # ...undelivered
    finally:
        producer.close()
    return caught.value.args[0], errors, delivered[0]


def test_kafka_python_confluent_kafka_and_raftka_in_plaintext_on_the_ssl_port_fail_within_seconds_and_the_broker_serves_on(
        cluster, pki, caplog):
    """Each client speaks plaintext Kafka to the SSL listener. The broker reads its first
    bytes as a broken TLS handshake and closes the connection, so each client fails in its
    own short timeout with no metadata; then no socket of theirs is left on a broker and the
    same libraries, configured for SSL, produce and consume."""
    kafka = pytest.importorskip("kafka")
    confluent = pytest.importorskip("confluent_kafka")
    from raftka.client import AdminClient, NewTopic, Producer
    from raftka.client.errors import KafkaTimeoutError
    from helpers import wait_for_topic
    bootstrap = cluster.bootstrap("SSL")

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="kafka"):
        with pytest.raises(kafka.errors.KafkaTimeoutError):  # bootstraps in the constructor
            kafka.KafkaProducer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=REFUSED_CLIENT_TIMEOUT_MS)
    assert time.monotonic() - started < 10
    # The broker hung up on the first bytes; the client did not sit waiting for an answer.
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("kafka")]
    assert any("socket disconnected" in line for line in logged), logged[-5:]

    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger=LIBRDKAFKA_LOGGER):
        metadata_error, _, delivery_error = _confluent_refused(confluent, {"bootstrap.servers": bootstrap})
    assert time.monotonic() - started < 15
    assert metadata_error.code() == confluent.KafkaError._TRANSPORT, metadata_error  # no broker usable
    assert delivery_error.code() == confluent.KafkaError._MSG_TIMED_OUT, delivery_error
    logged = [r.getMessage() for r in caplog.records if r.name == LIBRDKAFKA_LOGGER]
    assert any("connection closed by peer" in line for line in logged), logged[-5:]

    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError):  # NoBrokersAvailable, as kafka-python's constructor
        Producer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=REFUSED_CLIENT_TIMEOUT_MS)
    assert time.monotonic() - started < 10

    _assert_brokers_unharmed(cluster)
    topic = f"tls-after-plaintext-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap_servers=bootstrap, **_ssl(pki)) as admin:
        admin.create_topics([NewTopic(topic, 2, 3)])
        wait_for_topic(admin, topic, 2)
    third_party_round_trip(
        topic, {"bootstrap_servers": bootstrap, "security_protocol": "SSL", "ssl_cafile": pki["ca"]},
        {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": pki["ca"]}, WAIT_S, records=5)


def test_kafka_python_and_confluent_kafka_trusting_another_ca_are_refused_saying_certificate_verify_failed(
        cluster, pki, caplog):
    """The brokers' certificate does not chain to the CA the client trusts: the client ends
    the handshake, gets no metadata, and says why where it can (kafka-python in its log,
    confluent-kafka in error_cb); the brokers keep no socket of theirs and serve on. (Raftka's
    client: test_a_client_trusting_another_ca_is_refused_with_a_connection_error_saying_why.)"""
    kafka = pytest.importorskip("kafka")
    confluent = pytest.importorskip("confluent_kafka")
    bootstrap = cluster.bootstrap("SSL")

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="kafka"):
        with pytest.raises(kafka.errors.KafkaTimeoutError):
            kafka.KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=pki["other_ca"],
                                bootstrap_timeout_ms=REFUSED_CLIENT_TIMEOUT_MS)
    assert time.monotonic() - started < 10
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("kafka")]
    assert any("CERTIFICATE_VERIFY_FAILED" in line for line in logged), logged[-5:]

    started = time.monotonic()
    metadata_error, errors, _ = _confluent_refused(
        confluent, {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": pki["other_ca"]})
    assert time.monotonic() - started < 15
    assert metadata_error.code() == confluent.KafkaError._TRANSPORT, metadata_error
    assert any(e.code() == confluent.KafkaError._SSL and "certificate verify failed" in e.str() for e in errors), [
        e.str() for e in errors]

    _assert_brokers_unharmed(cluster)
    answer = _raw_request(cluster.ports["SSL"][cluster.broker_ids[0]], ApiKey.METADATA, {"topics": None},
                          client_ssl_context(pki["ca"]))
    assert len(answer["brokers"]) == 3
