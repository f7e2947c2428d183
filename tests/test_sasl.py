"""SASL PLAIN and SCRAM (common/sasl.py) and the SASL gate of the shared server
(common/authenticator.py, common/server.py), with the client side of common/transport.py.

The mechanisms are checked against RFC 7677's SCRAM-SHA-256 example (user "user", password
"pencil") message by message, RFC 5802's example for the parsing, and malformed messages of every
kind, each a SaslAuthenticationFailedError with a clear message, never another exception. Then a
real Server on 127.0.0.1 with SASL settings and a dict-backed credential lookup: Raftka's
Connection authenticates with each mechanism, the handler sees the principal, a request before
authentication closes the connection, and a failed exchange is answered and closed. Last,
kafka-python authenticates against such a server and gets a Metadata answer (the wire format as
a third party speaks it).
"""
from __future__ import annotations

import asyncio
import base64
import logging
import socket
import struct
import threading
from typing import Any

import pytest

from raftka.common import errors, sasl, scram
from raftka.common.api import ApiKey
from raftka.common.authenticator import ANONYMOUS
from raftka.common.codec import encoder
from raftka.common.errors import (ConfigError, NetworkExceptionError, SaslAuthenticationFailedError,
                                  UnsupportedSaslMechanismError)
from raftka.common.messages import KAFKA_API
from raftka.common.server import Request, Response, Server
from raftka.common.transport import Connection, decode_kafka_response

HOST = "127.0.0.1"
SHA256, SHA512 = scram.SCRAM_SHA_256, scram.SCRAM_SHA_512
ITERATIONS = scram.ITERATIONS_MIN  # the fastest Kafka allows

# RFC 7677, section 3
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


class Credentials:
    """A dict-backed credential_lookup, as the broker's metadata image will give one."""

    def __init__(self) -> None:
        self.by_user: dict[tuple[str, str], scram.ScramCredential] = {}

    def add(self, user: str, password: str, mech: scram.ScramMechanism = SHA256,
            salt: bytes | None = None, iterations: int = ITERATIONS) -> None:
        self.by_user[(user, mech.name)] = scram.new_credential(mech, password, iterations, salt)

    def __call__(self, user: str, mech: scram.ScramMechanism) -> scram.ScramCredential | None:
        return self.by_user.get((user, mech.name))


@pytest.fixture
def rfc_credentials() -> Credentials:
    credentials = Credentials()
    credentials.add("user", "pencil", SHA256, RFC_SALT, 4096)
    return credentials


@pytest.fixture
def rfc_server_nonce(monkeypatch):
    monkeypatch.setattr(sasl, "new_nonce", lambda: RFC_SERVER_NONCE)


def exchange(client: sasl.SaslClient, server: sasl.SaslServer) -> None:
    """Run a whole exchange in memory (raises what either side raises)."""
    message: bytes | None = client.initial()
    while message is not None:
        message = client.evaluate(server.evaluate(message))
    assert client.complete and server.complete


# -- SCRAM against the RFC vectors ----------------------------------------------------------------

def test_the_scram_client_sends_rfc_7677s_messages_and_accepts_its_server_signature():
    client = sasl.ScramClient(SHA256, "user", "pencil", nonce=RFC_NONCE)
    assert client.initial() == RFC_CLIENT_FIRST
    assert client.evaluate(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.evaluate(RFC_SERVER_FINAL) is None and client.complete


def test_the_scram_server_answers_rfc_7677s_messages(rfc_credentials, rfc_server_nonce):
    server = sasl.ScramServer(SHA256, rfc_credentials)
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.user == "user"


def test_rfc_5802s_client_first_message_parses_into_its_parts():
    first = sasl.parse_client_first(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL", "SCRAM-SHA-1")
    assert (first.gs2_header, first.user, first.nonce, first.bare) == (
        "n,,", "user", "fyko+d2lbbFgONRv9qkxdawL", "n=user,r=fyko+d2lbbFgONRv9qkxdawL")
    assert first.extensions == {}


@pytest.mark.parametrize("mech", [SHA256, SHA512], ids=lambda m: m.name)
def test_a_scram_exchange_succeeds_with_each_mechanism_and_escaped_user_names(mech):
    credentials = Credentials()
    user = "al=ice,ops"
    credentials.add(user, "s3cret", mech)
    client = sasl.ScramClient(mech, user, "s3cret")
    assert b"n=al=3Dice=2Cops," in client.initial()
    server = sasl.ScramServer(mech, credentials)
    exchange(client, server)
    assert server.user == user


def test_a_finished_exchange_takes_no_further_message(rfc_credentials):
    plain = sasl.PlainServer(rfc_credentials)
    plain.evaluate(b"\0user\0pencil")
    scram_server = sasl.ScramServer(SHA256, rfc_credentials)
    exchange(sasl.ScramClient(SHA256, "user", "pencil"), scram_server)
    for server in (plain, scram_server):
        with pytest.raises(errors.IllegalSaslStateError):
            server.evaluate(b"\0user\0pencil")


def test_user_names_escape_and_unescape_both_ways_and_a_stray_equals_sign_is_refused():
    assert sasl.escape_user("a=b,c") == "a=3Db=2Cc"
    assert sasl.unescape_user("a=3Db=2Cc") == "a=b,c"
    for bad in ("a=b", "a=", "a=2", "a,b"):
        with pytest.raises(ValueError):
            sasl.unescape_user(bad)


def test_kafkas_extensions_are_accepted_but_tokenauth_is_refused(rfc_credentials):
    server = sasl.ScramServer(SHA256, rfc_credentials)
    assert server.evaluate(RFC_CLIENT_FIRST + b",traceid=abc").startswith(b"r=" + RFC_NONCE.encode())
    with pytest.raises(SaslAuthenticationFailedError, match="tokenauth"):
        sasl.ScramServer(SHA256, rfc_credentials).evaluate(RFC_CLIENT_FIRST + b",tokenauth=true")


# -- SCRAM failures ---------------------------------------------------------------------------------

@pytest.mark.parametrize("message", [
    b"", b"\xff\xfe", b"y,,n=user,r=abc", b"p=tls-unique,,n=user,r=abc", b"n,,r=abc,n=user",
    b"n,,n=user", b"n,,n=us=er,r=abc", b"n,,n=user,r=", b"n,,n=user,r=a\x01b", b"n,,n=user,r=abc,x",
    b"n,,n=user,r=abc,m=must", b"n,z,n=user,r=abc", b"n,a=bob,n=user,r=abc", b"n,,n=user,r=" + b"x" * 300,
    b"n,,n=" + b"u" * (sasl.SASL_MESSAGE_BYTES_MAX + 1) + b",r=abc",
], ids=lambda m: repr(m[:24]))
def test_a_malformed_client_first_message_fails_clearly(rfc_credentials, message):
    with pytest.raises(SaslAuthenticationFailedError, match="SCRAM-SHA-256") as failure:
        sasl.ScramServer(SHA256, rfc_credentials).evaluate(message)
    assert "Traceback" not in failure.value.message


def _after_first(credentials: Credentials) -> sasl.ScramServer:
    server = sasl.ScramServer(SHA256, credentials)
    server.evaluate(RFC_CLIENT_FIRST)
    return server


@pytest.mark.parametrize("message, why", [
    (b"", "not an attribute|no proof"),
    (b"c=biws,r=" + RFC_NONCE.encode() + RFC_SERVER_NONCE.encode(), "no proof"),
    (RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), "gs2 header"),
    (RFC_CLIENT_FINAL.replace(b"c=biws", b"c=!!"), "base64"),
    (RFC_CLIENT_FINAL.replace(b"hvYD", b"hvYE"), "nonce"),  # the server's nonce altered
    (RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=*Hzb"), "base64"),
    (RFC_CLIENT_FINAL.split(b",p=")[0] + b",p=AAAA", "proof of 3 bytes"),
    (RFC_CLIENT_FINAL.replace(b"r=", b"x="), "r= missing"),
    (b"\xc3\x28", "UTF-8"),
], ids=lambda v: repr(v)[:30])
def test_a_malformed_or_altered_client_final_message_fails_clearly(rfc_credentials, rfc_server_nonce, message, why):
    with pytest.raises(SaslAuthenticationFailedError, match=why):
        _after_first(rfc_credentials).evaluate(message)


def test_a_replayed_client_final_message_fails_on_a_new_exchange(rfc_credentials, rfc_server_nonce, monkeypatch):
    # Recorded from one exchange (RFC 7677's), sent again in another: the server's nonce differs.
    monkeypatch.setattr(sasl, "new_nonce", lambda: "other-server-nonce")
    with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
        _after_first(rfc_credentials).evaluate(RFC_CLIENT_FINAL)


def test_a_wrong_password_and_an_unknown_user_fail_alike(rfc_credentials):
    messages = []
    for user, password in (("user", "wrong"), ("nobody", "pencil")):
        client = sasl.ScramClient(SHA256, user, password)
        server = sasl.ScramServer(SHA256, rfc_credentials)
        server_first = server.evaluate(client.initial())
        assert b",i=" in server_first and b",s=" in server_first  # an unknown user gets a salt too
        with pytest.raises(SaslAuthenticationFailedError) as failure:
            server.evaluate(client.evaluate(server_first))
        messages.append(failure.value.message)
        assert not server.complete and server.user is None
    assert messages[0] == messages[1] == sasl.invalid_credentials("SCRAM-SHA-256")


def test_an_unknown_user_gets_the_same_salt_every_time_so_names_cannot_be_probed(rfc_credentials):
    def salt_of(user: str) -> bytes:
        answer = sasl.ScramServer(SHA256, rfc_credentials).evaluate(f"n,,n={user},r=abc".encode())
        return answer.split(b",s=")[1].split(b",")[0]
    assert salt_of("ghost") == salt_of("ghost") != salt_of("phantom")


def test_the_scram_client_refuses_a_bad_server(rfc_credentials):
    def client() -> sasl.ScramClient:
        return sasl.ScramClient(SHA256, "user", "pencil", nonce=RFC_NONCE)
    cases = [
        (RFC_SERVER_FIRST.replace(b"r=rOpr", b"r=xOpr"), "nonce"),  # does not extend the client's
        (b"r=" + RFC_NONCE.encode() + b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),  # nothing added
        (RFC_SERVER_FIRST.replace(b"i=4096", b"i=1"), "iterations"),  # below Kafka's minimum
        (RFC_SERVER_FIRST.replace(b"i=4096", b"i=x"), "iteration"),
        (b"e=other-error", "refused"),
        (b"garbage", "not an attribute"),
    ]
    for challenge, why in cases:
        with pytest.raises(SaslAuthenticationFailedError, match=why):
            client().evaluate(challenge)
    signed = client()
    signed.evaluate(RFC_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationFailedError, match="signature"):
        signed.evaluate(b"v=" + base64.b64encode(b"\0" * 32))
    refused = client()
    refused.evaluate(RFC_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationFailedError, match="invalid-proof"):
        refused.evaluate(b"e=invalid-proof")


# -- PLAIN --------------------------------------------------------------------------------------------

def test_plain_is_checked_against_the_scram_credential_of_either_mechanism():
    credentials = Credentials()
    credentials.add("alice", "a-pass", SHA256)
    credentials.add("bob", "b-pass", SHA512)
    for user, password in (("alice", "a-pass"), ("bob", "b-pass")):
        server = sasl.PlainServer(credentials)
        exchange(sasl.PlainClient(user, password), server)
        assert server.user == user
    server = sasl.PlainServer(credentials)
    assert server.evaluate(b"alice\0alice\0a-pass") == b"" and server.user == "alice"  # authzid = authcid


@pytest.mark.parametrize("message, why", [
    (b"\0alice\0wrong", "invalid user name or password"),
    (b"\0nobody\0a-pass", "invalid user name or password"),
    (b"bob\0alice\0a-pass", "authorization id"),
    (b"\0alice", "NUL"),
    (b"\0alice\0a-pass\0more", "NUL"),
    (b"\0\0a-pass", "user name and a password"),
    (b"\0alice\0", "user name and a password"),
    (b"\0al\xffice\0a-pass", "UTF-8"),
    (b"\0" + b"a" * sasl.SASL_MESSAGE_BYTES_MAX + b"\0x", "over"),
], ids=lambda v: repr(v)[:30])
def test_plain_refuses_bad_credentials_and_malformed_messages(message, why):
    credentials = Credentials()
    credentials.add("alice", "a-pass")
    with pytest.raises(SaslAuthenticationFailedError, match=why) as failure:
        sasl.PlainServer(credentials).evaluate(message)
    assert b"a-pass" not in failure.value.message.encode()


# -- settings -------------------------------------------------------------------------------------------

def test_client_settings_need_a_mechanism_a_user_and_a_password_and_hide_the_password():
    config = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "scram-sha-512",
              "sasl_plain_username": "alice", "sasl_plain_password": "hunter2"}
    settings = sasl.client_settings(config)
    assert settings is not None and settings.mechanism == "SCRAM-SHA-512"
    assert "hunter2" not in repr(settings) and "alice" in repr(settings)
    assert sasl.client_settings({**config, "security_protocol": "SSL"}) is None
    for key, value in (("sasl_mechanism", "GSSAPI"), ("sasl_plain_username", ""),
                       ("sasl_plain_password", None)):
        with pytest.raises(ConfigError, match=key) as failure:
            sasl.client_settings({**config, key: value})
        assert "hunter2" not in str(failure.value)


def test_server_settings_refuse_an_unknown_mechanism():
    with pytest.raises(ConfigError, match="GSSAPI"):
        sasl.SaslServerSettings(("PLAIN", "GSSAPI"), Credentials())
    with pytest.raises(ConfigError, match="no mechanism"):
        sasl.SaslServerSettings((), Credentials())
    assert sasl.SaslServerSettings(("plain", "PLAIN"), Credentials()).mechanisms == ("PLAIN",)


# -- a Server with SASL ---------------------------------------------------------------------------------

METADATA_API = {ApiKey.METADATA: KAFKA_API[ApiKey.METADATA], ApiKey.API_VERSIONS: KAFKA_API[ApiKey.API_VERSIONS]}


class MetadataHandler:
    """Answers Metadata with this server as its one broker; records each request's principal."""

    def __init__(self) -> None:
        self.principals: list[str] = []
        self.port = 0

    async def __call__(self, request: Request) -> Response:
        self.principals.append(request.principal)
        topics = [{"error_code": 0, "name": topic["name"], "topic_id": "1" * 32,
                   "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1,
                                   "replica_nodes": [1], "isr_nodes": [1]}]}
                  for topic in request.body.get("topics") or []]
        return Response(errors.NONE, {"brokers": [{"node_id": 1, "host": HOST, "port": self.port}],
                                      "cluster_id": "sasl-test", "controller_id": 1, "topics": topics})


def run(coro: Any, timeout_s: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


async def start_server(credentials: Credentials, mechanisms=sasl.MECHANISMS) -> tuple[Server, MetadataHandler]:
    handler = MetadataHandler()
    server = Server(handler, kafka_api=METADATA_API, name="sasl-test",
                    sasl=sasl.SaslServerSettings(tuple(mechanisms), credentials))
    await server.start(HOST, 0)
    handler.port = server.port
    return server, handler


def _credentials() -> Credentials:
    credentials = Credentials()
    credentials.add("alice", "a-pass", SHA256)
    credentials.add("alice", "a-pass", SHA512)
    return credentials


@pytest.mark.parametrize("mechanism", sasl.MECHANISMS)
def test_a_connection_authenticates_with_each_mechanism_and_the_handler_sees_its_principal(mechanism):
    async def scenario() -> None:
        server, handler = await start_server(_credentials())
        try:
            conn = await Connection.open(HOST, server.port, sasl=sasl.SaslClientSettings(mechanism, "alice", "a-pass"))
            try:
                _, answer = await conn.request(ApiKey.METADATA, {"topics": []})
                assert answer["cluster_id"] == "sasl-test"
            finally:
                await conn.close()
            assert handler.principals == ["User:alice"]
        finally:
            await server.close()
    run(scenario())


def test_a_wrong_password_is_refused_with_the_brokers_message_and_the_connection_closed(caplog):
    async def scenario() -> None:
        server, handler = await start_server(_credentials())
        try:
            for mechanism in sasl.MECHANISMS:
                with pytest.raises(SaslAuthenticationFailedError, match=f"{mechanism} failed: invalid") as failure:
                    await Connection.open(HOST, server.port,
                                          sasl=sasl.SaslClientSettings(mechanism, "alice", "not-the-pass"))
                assert not failure.value.retriable
            assert server.metrics.connections_closed_unauthenticated == 3
            assert handler.principals == []
        finally:
            await server.close()
    with caplog.at_level(logging.DEBUG):
        run(scenario())
    assert "not-the-pass" not in caplog.text and "a-pass" not in caplog.text
    assert "'alice'" in caplog.text  # the failure's log line names the user


def test_a_request_before_authentication_closes_the_connection():
    async def scenario() -> None:
        server, handler = await start_server(_credentials())
        try:
            conn = await Connection.open(HOST, server.port)
            try:
                _, versions = await conn.request(ApiKey.API_VERSIONS, {})  # allowed before
                assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= {k["api_key"] for k in versions["api_keys"]}
                with pytest.raises(NetworkExceptionError):
                    await conn.request(ApiKey.METADATA, {"topics": []})
            finally:
                await conn.close()
            assert handler.principals == [] and server.metrics.connections_closed_unauthenticated == 1
        finally:
            await server.close()
    run(scenario())


def test_a_mechanism_not_enabled_is_answered_with_the_enabled_ones():
    async def scenario() -> None:
        server, _ = await start_server(_credentials(), mechanisms=("SCRAM-SHA-512",))
        try:
            with pytest.raises(UnsupportedSaslMechanismError, match="enables SCRAM-SHA-512"):
                await Connection.open(HOST, server.port, sasl=sasl.SaslClientSettings("PLAIN", "alice", "a-pass"))
        finally:
            await server.close()
    run(scenario())


def test_sasl_requests_out_of_order_are_answered_illegal_sasl_state():
    async def scenario() -> None:
        server, handler = await start_server(_credentials())
        try:
            # SaslAuthenticate before SaslHandshake: answered, then closed.
            conn = await Connection.open(HOST, server.port)
            _, answer = await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": b"\0alice\0a-pass"})
            assert answer["error_code"] == errors.ILLEGAL_SASL_STATE
            with pytest.raises(NetworkExceptionError):
                await conn.request(ApiKey.API_VERSIONS, {})
            await conn.close()
            # After success: answered, and the connection goes on.
            conn = await Connection.open(HOST, server.port, sasl=sasl.SaslClientSettings("PLAIN", "alice", "a-pass"))
            _, answer = await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"}, 1)
            assert answer["error_code"] == errors.ILLEGAL_SASL_STATE
            _, answer = await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": b"\0alice\0a-pass"})
            assert answer["error_code"] == errors.ILLEGAL_SASL_STATE
            await conn.request(ApiKey.METADATA, {"topics": []})
            await conn.close()
            assert handler.principals == ["User:alice"]
        finally:
            await server.close()
    run(scenario())


def test_a_credential_lookup_that_fails_fails_that_exchange_only():
    def broken(user: str, mech: scram.ScramMechanism) -> None:
        raise RuntimeError("metadata image not loaded")

    async def scenario() -> None:
        server, handler = await start_server(broken)  # type: ignore[arg-type]
        try:
            with pytest.raises(errors.UnknownServerError, match="could not check"):
                await Connection.open(HOST, server.port, sasl=sasl.SaslClientSettings("PLAIN", "alice", "a-pass"))
            assert server.connection_count == 0 or await _until_no_connections(server)
        finally:
            await server.close()
    run(scenario())


async def _until_no_connections(server: Server) -> bool:
    for _ in range(200):
        if server.connection_count == 0:
            return True
        await asyncio.sleep(0.01)
    return False


def test_a_server_without_sasl_gives_every_request_the_anonymous_principal():
    async def scenario() -> None:
        handler = MetadataHandler()
        server = await Server(handler, kafka_api=METADATA_API).start(HOST, 0)
        try:
            conn = await Connection.open(HOST, server.port)
            await conn.request(ApiKey.METADATA, {"topics": []})
            await conn.close()
            assert handler.principals == [ANONYMOUS]
            assert ApiKey.SASL_HANDSHAKE not in server.kafka_api  # not a SASL listener
        finally:
            await server.close()
    run(scenario())


def test_pipelined_requests_meet_the_state_the_exchange_before_them_left():
    """A client that writes its requests without waiting for answers: the listener reads each
    one only once the SASL answer before it is ready. Behind a successful PLAIN exchange (the
    password hashed off the event loop), Metadata is served as the user; behind a bare
    handshake it closes the connection."""
    async def scenario() -> None:
        server, handler = await start_server(_credentials())
        try:
            handshake = _frame(ApiKey.SASL_HANDSHAKE, 1, 1, {"mechanism": "PLAIN"})
            metadata = _frame(ApiKey.METADATA, 12, 3, {"topics": []})
            login = _frame(ApiKey.SASL_AUTHENTICATE, 2, 2, {"auth_bytes": b"\0alice\0a-pass"})
            answers, _ = await asyncio.to_thread(
                _exchange_raw, server.port, handshake + login + metadata,
                [(ApiKey.SASL_HANDSHAKE, 1), (ApiKey.SASL_AUTHENTICATE, 2), (ApiKey.METADATA, 12)])
            assert [(c, a.get("error_code", 0)) for c, a in answers] == [(1, 0), (2, 0), (3, 0)]
            assert answers[2][1]["cluster_id"] == "sasl-test"
            assert handler.principals == ["User:alice"]
            answers, after = await asyncio.to_thread(_exchange_raw, server.port, handshake + metadata,
                                                     [(ApiKey.SASL_HANDSHAKE, 1)], until_closed=True)
            assert [(c, a["error_code"]) for c, a in answers] == [(1, 0)] and after == b""  # closed, unanswered
            assert handler.principals == ["User:alice"]
        finally:
            await server.close()
    run(scenario())


def _exchange_raw(port: int, data: bytes, expected: list[tuple[int, int]],
                  until_closed: bool = False) -> tuple[list[tuple[int, dict]], bytes]:
    """Write ``data`` at once and read the ``expected`` answers ((api key, version) each); with
    ``until_closed``, then read until the server closes: (answers, bytes after them)."""
    answers: list[tuple[int, dict]] = []
    received = b""
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.sendall(data)
        while len(answers) < len(expected):
            while len(received) < 4 or len(received) < 4 + struct.unpack_from(">I", received)[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    return answers, received
                received += chunk
            length = struct.unpack_from(">I", received)[0]
            answers.append(decode_kafka_response(received[4:4 + length], *expected[len(answers)]))
            received = received[4 + length:]
        while until_closed and (chunk := sock.recv(65536)):
            received += chunk
    return answers, received


def _frame(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    request = KAFKA_API[api_key][0]
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    if request.flexible(version):
        header += b"\0"
    payload = header + encoder(request, version)(body)
    return struct.pack(">I", len(payload)) + payload


def test_sasl_ssl_authenticates_inside_tls(tmp_path):
    from raftka.common import security

    from raftka.cluster.certs import CertificateAuthority, write_pem
    ca = CertificateAuthority.create("sasl test CA", days=1)
    issued = ca.issue("sasl-test", (HOST,), days=1)
    cafile = str(write_pem(tmp_path / "ca.pem", ca.cert_pem))
    keystore = str(write_pem(tmp_path / "broker.pem", issued.keystore_pem))

    async def scenario() -> None:
        handler = MetadataHandler()
        server = Server(handler, kafka_api=METADATA_API,
                        sasl=sasl.SaslServerSettings(("SCRAM-SHA-256",), _credentials()))
        await server.start(HOST, 0, ssl=security.server_ssl_context(certfile=keystore))
        try:
            conn = await Connection.open(HOST, server.port, ssl=security.client_ssl_context(cafile=cafile),
                                         sasl=sasl.SaslClientSettings("SCRAM-SHA-256", "alice", "a-pass"))
            await conn.request(ApiKey.METADATA, {"topics": []})
            await conn.close()
            assert handler.principals == ["User:alice"]
        finally:
            await server.close()
    run(scenario())


# -- Raftka's clients ------------------------------------------------------------------------------------

def _client_keys(server: Server, password: str) -> dict[str, Any]:
    return {"bootstrap_servers": f"{HOST}:{server.port}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice", "sasl_plain_password": password}


def test_a_producer_with_the_sasl_keys_authenticates_and_a_wrong_password_fails_at_once():
    from raftka.client.aio.producer import Producer

    async def scenario() -> None:
        server, handler = await start_server(_credentials())
        try:
            producer = Producer(**_client_keys(server, "a-pass"))
            await producer.start()
            try:
                assert await producer.partitions_for("orders") == {0}
            finally:
                await producer.close()
            assert handler.principals and set(handler.principals) == {"User:alice"}
            producer = Producer(**_client_keys(server, "wrong"), max_block_ms=30_000)
            await producer.start()
            started = asyncio.get_running_loop().time()
            try:
                with pytest.raises(SaslAuthenticationFailedError, match="SCRAM-SHA-512 failed") as failure:
                    await producer.partitions_for("orders")
                assert "wrong" not in str(failure.value)
                # Raised as soon as the brokers refused, not after max_block_ms of retries.
                assert asyncio.get_running_loop().time() - started < 10
            finally:
                await producer.close()
        finally:
            await server.close()
    run(scenario())


def test_the_clients_check_their_sasl_keys_and_never_show_the_password():
    from raftka.client.aio.admin import AdminClient
    from raftka.client.aio.consumer import Consumer
    from raftka.client.aio.producer import Producer

    keys = {"bootstrap_servers": "127.0.0.1:1", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "hunter2"}
    for client in (Producer, Consumer, AdminClient):
        with pytest.raises(ConfigError, match="sasl_mechanism"):
            client(**{**keys, "sasl_mechanism": "GSSAPI"})
        with pytest.raises(ConfigError, match="sasl_plain_password") as failure:
            client(**{**keys, "sasl_plain_password": None})
        with pytest.raises(ConfigError, match="security_protocol") as failure:
            client(**{**keys, "security_protocol": "PLAINTEXT"})  # SASL keys that would be ignored
        assert "hunter2" not in str(failure.value)
        factory = client(**keys).config["connection_factory"]
        assert "hunter2" not in repr(factory)


# -- kafka-python against it -------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", sasl.MECHANISMS)
def test_kafka_python_authenticates_and_gets_metadata(mechanism):
    """kafka-python's own SASL code (ApiVersions, SaslHandshake v1, SaslAuthenticate) against the
    server, then a Metadata request: the declarations match Kafka's wire format."""
    kafka = pytest.importorskip("kafka")
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)
        holder["server"], holder["handler"] = loop.run_until_complete(start_server(_credentials()))
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        admin = kafka.KafkaAdminClient(
            bootstrap_servers=f"{HOST}:{holder['server'].port}", security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism, sasl_plain_username="alice", sasl_plain_password="a-pass",
            request_timeout_ms=10_000)
        try:
            assert admin.describe_cluster()["cluster_id"] == "sasl-test"
        finally:
            admin.close()
        assert set(holder["handler"].principals) == {"User:alice"}
    finally:
        asyncio.run_coroutine_threadsafe(holder["server"].close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
