"""SASL mechanisms as small state machines, server side and client side: PLAIN (RFC 4616) and
SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka speaks them; and Kafka's
``sasl.jaas.config`` (:func:`parse_jaas_config`: a client's properties, a broker's own login).

Each side is fed the peer's messages one at a time and answers the next one; no I/O here (the
exchange travels in SaslAuthenticate, common/authenticator.py on a server, :func:`authenticate`
on a client connection).

PLAIN, one client message and an empty answer::

    [authzid] NUL authcid NUL passwd        authzid empty or the authcid itself

A broker keeps no password: PLAIN is checked against the user's SCRAM credential (either
mechanism): the password is salted with the stored salt and iteration count and its StoredKey
compared with the stored one.

SCRAM (Kafka's profile of RFC 5802: no channel binding, so the gs2 header is ``n,,``)::

    client-first   n,,n=<user>,r=<client nonce>[,<extension>=<value>...]
    server-first   r=<client nonce><server nonce>,s=<salt, base64>,i=<iterations>
    client-final   c=biws,r=<client nonce><server nonce>,p=<ClientProof, base64>
    server-final   v=<ServerSignature, base64>     (or e=<error>)

User names escape ``=`` as ``=3D`` and ``,`` as ``=2C``. Kafka's ``tokenauth`` extension
(delegation tokens) is refused; other extensions are ignored.

Failures are :class:`SaslAuthenticationFailedError` with a message that names no secret; bad
credentials, an unknown user included, all get the same message (:func:`invalid_credentials`),
and an unknown user costs the same work as a wrong password (a dummy credential, with a salt
stable per user name), so user names cannot be probed. Every comparison of a secret is
constant-time (hmac.compare_digest).
"""
from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Final, Protocol

from raftka.common import errors, scram, security
from raftka.common.api import ApiKey
from raftka.common.errors import ConfigError, IllegalSaslStateError, SaslAuthenticationFailedError
from raftka.common.messages.security import AUTH_BYTES_MAX
from raftka.common.scram import ScramCredential, ScramError, ScramMechanism

PLAIN: Final = "PLAIN"
MECHANISMS: Final = (PLAIN, scram.SCRAM_SHA_256.name, scram.SCRAM_SHA_512.name)
SASL_MESSAGE_BYTES_MAX: Final = AUTH_BYTES_MAX  # one message either way
NONCE_BYTES: Final = 24  # random bytes of each side's nonce (32 printable characters)
NONCE_CHARS_MAX: Final = 256  # a peer's nonce part we accept
# The versions a client sends (pinned: a body's shape must not move as declarations grow).
HANDSHAKE_VERSION: Final = 1  # SaslHandshake v1: the tokens travel in SaslAuthenticate
AUTHENTICATE_VERSION: Final = 2  # SaslAuthenticate v2 (flexible), Kafka 2.4+
ROUNDS_MAX: Final = 4  # SaslAuthenticate rounds a client goes through (SCRAM needs 2)

CredentialLookup = Callable[[str, ScramMechanism], "ScramCredential | None"]


def invalid_credentials(mechanism: str) -> str:
    """The one message every credential failure gets (unknown user and wrong password alike)."""
    return f"authentication with SASL mechanism {mechanism} failed: invalid user name or password"


def _malformed(mechanism: str, what: str) -> SaslAuthenticationFailedError:
    return SaslAuthenticationFailedError(f"authentication with SASL mechanism {mechanism} failed: {what}")


def _text(mechanism: str, message: bytes, what: str) -> str:
    if len(message) > SASL_MESSAGE_BYTES_MAX:
        raise _malformed(mechanism, f"{what} of {len(message)} bytes, over {SASL_MESSAGE_BYTES_MAX}")
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed(mechanism, f"{what} is not UTF-8") from None


# -- SCRAM message parts ----------------------------------------------------------------------------

def escape_user(name: str) -> str:
    """A user name as SCRAM's saslname (RFC 5802 5.1: ``=`` -> ``=3D``, ``,`` -> ``=2C``)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_user(saslname: str) -> str:
    """The user name of a saslname; ValueError for an ``=`` that is not ``=2C`` or ``=3D``."""
    out: list[str] = []
    i = 0
    while i < len(saslname):
        c = saslname[i]
        if c == "=":
            code = saslname[i + 1:i + 3]
            if code not in ("2C", "3D"):
                raise ValueError("a user name with an '=' that is not =2C or =3D")
            out.append("," if code == "2C" else "=")
            i += 3
        elif c == ",":
            raise ValueError("a user name with an unescaped ','")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _is_nonce(text: str) -> bool:
    """RFC 5802's printable: ASCII 0x21-0x7E except ','."""
    return bool(text) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in text)


def new_nonce() -> str:
    return base64.b64encode(os.urandom(NONCE_BYTES)).decode("ascii")


def _attributes(text: str, names: str, mechanism: str, what: str) -> list[tuple[str, str]]:
    """``a=x,b=y`` split into pairs, the first ones named by the letters of ``names`` in that
    order (the rest are extensions, whose names may be longer: Kafka's ``tokenauth``)."""
    pairs: list[tuple[str, str]] = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.isascii() or not key.isalnum():
            raise _malformed(mechanism, f"{what}: {part[:16]!r} is not an attribute")
        pairs.append((key, value))
    for i, name in enumerate(names):
        if i >= len(pairs) or pairs[i][0] != name:
            raise _malformed(mechanism, f"{what}: attribute {name}= missing or out of place")
    return pairs


def _b64decode(mechanism: str, value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise _malformed(mechanism, f"{what} is not base64") from None


@dataclass(frozen=True)
class ClientFirst:
    """A parsed SCRAM client-first message."""
    gs2_header: str
    user: str
    nonce: str
    bare: str  # the message without its gs2 header (part of AuthMessage)
    extensions: dict[str, str]


def parse_client_first(message: bytes, mechanism: str) -> ClientFirst:
    text = _text(mechanism, message, "client-first message")
    # gs2 header: "n" (no channel binding), an optional authzid, then the bare message.
    if not text.startswith("n,"):
        raise _malformed(mechanism, "client-first message: channel binding is not supported (want 'n,,')")
    end = text.find(",", 2)
    if end < 0:
        raise _malformed(mechanism, "client-first message: no gs2 header")
    authzid = text[2:end]
    if authzid and not authzid.startswith("a="):
        raise _malformed(mechanism, "client-first message: bad authorization id")
    gs2_header, bare = text[:end + 1], text[end + 1:]
    pairs = _attributes(bare, "nr", mechanism, "client-first message")
    try:
        user = unescape_user(pairs[0][1])
        authz = unescape_user(authzid[2:]) if authzid else ""
    except ValueError as error:
        raise _malformed(mechanism, f"client-first message: {error}") from None
    nonce = pairs[1][1]
    if not _is_nonce(nonce) or len(nonce) > NONCE_CHARS_MAX:
        raise _malformed(mechanism, f"client-first message: a nonce must be 1 to {NONCE_CHARS_MAX} "
                                    "printable characters")
    if authz and authz != user:
        raise _malformed(mechanism, "an authorization id other than the user name")
    extensions = dict(pairs[2:])
    if "m" in extensions:
        raise _malformed(mechanism, "client-first message: mandatory extension m= is not supported")
    return ClientFirst(gs2_header, user, nonce, bare, extensions)


# -- server side ------------------------------------------------------------------------------------

class SaslServer(Protocol):
    """One connection's server side of a mechanism: ``evaluate`` the client's next message and
    answer the next challenge; ``complete`` and ``user`` once it succeeded; ``claimed_user``
    as soon as the client named one (for log lines). Raises SaslAuthenticationFailedError (the
    client is told its message)."""
    mechanism: str
    complete: bool
    user: str | None
    claimed_user: str | None

    def evaluate(self, message: bytes) -> bytes: ...


class _DummyCredentials:
    """Stand-ins for users who do not exist, so a lookup of an unknown name costs what a known
    one does: a salt stable per name (a fresh one each time would tell the names apart) from a
    key of this process."""

    def __init__(self) -> None:
        self._key = os.urandom(32)

    def credential(self, user: str, mech: ScramMechanism) -> ScramCredential:
        salt = hmac.new(self._key, f"{mech.name}\0{user}".encode(), "sha256").digest()
        keys = hmac.new(self._key, b"keys\0" + salt, mech.hash_name).digest()
        return ScramCredential(mech, salt, scram.hash_digest(mech, keys), keys, scram.DEFAULT_ITERATIONS)


_DUMMIES: Final = _DummyCredentials()


def _lookup(lookup: CredentialLookup, user: str, mech: ScramMechanism) -> ScramCredential | None:
    """The user's credential, None for a user (or a name) that has none."""
    try:
        scram.check_user_name(user)
    except ScramError:
        return None
    return lookup(user, mech)


class PlainServer:
    """PLAIN (RFC 4616), checked against the user's SCRAM credential."""

    mechanism = PLAIN

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self.complete = False
        self.user: str | None = None
        self.claimed_user: str | None = None

    def evaluate(self, message: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslStateError("PLAIN takes one message")
        parts = _text(PLAIN, message, "PLAIN message").split("\0")
        if len(parts) != 3:
            raise _malformed(PLAIN, "a PLAIN message is [authzid] NUL user NUL password")
        authzid, user, password = parts
        self.claimed_user = user
        if not user or not password:
            raise _malformed(PLAIN, "a PLAIN message needs a user name and a password")
        if authzid and authzid != user:
            raise _malformed(PLAIN, "an authorization id other than the user name")
        credential = None
        for mech in (scram.SCRAM_SHA_256, scram.SCRAM_SHA_512):
            credential = _lookup(self._lookup, user, mech)
            if credential is not None:
                break
        known = credential is not None
        if credential is None:
            credential = _DUMMIES.credential(user, scram.SCRAM_SHA_256)
        mech = credential.mechanism
        salted = scram.salted_password(mech, password, credential.salt, credential.iterations)
        candidate = scram.stored_key(mech, scram.client_key(mech, salted))
        if not (hmac.compare_digest(candidate, credential.stored_key) and known):
            raise SaslAuthenticationFailedError(invalid_credentials(PLAIN))
        self.user, self.complete = user, True
        return b""


class ScramServer:
    """SCRAM-SHA-256 / SCRAM-SHA-512, server side: client-first -> server-first, client-final ->
    server-final."""

    def __init__(self, mech: ScramMechanism, lookup: CredentialLookup) -> None:
        self.mechanism = mech.name
        self._mech = mech
        self._lookup = lookup
        self.complete = False
        self.user: str | None = None
        self.claimed_user: str | None = None
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._known = False

    def evaluate(self, message: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslStateError(f"{self.mechanism} exchange already complete")
        if self._first is None:
            return self._client_first(message)
        return self._client_final(message)

    def _client_first(self, message: bytes) -> bytes:
        first = parse_client_first(message, self.mechanism)
        self.claimed_user = first.user
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise _malformed(self.mechanism, "delegation tokens (tokenauth) are not supported")
        credential = _lookup(self._lookup, first.user, self._mech)
        self._known = credential is not None
        self._credential = credential or _DUMMIES.credential(first.user, self._mech)
        self._first = first
        self._nonce = first.nonce + new_nonce()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(self._credential.salt).decode()},"
                              f"i={self._credential.iterations}")
        return self._server_first.encode()

    def _client_final(self, message: bytes) -> bytes:
        mech, first, credential = self._mech, self._first, self._credential
        assert first is not None and credential is not None
        text = _text(self.mechanism, message, "client-final message")
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise _malformed(self.mechanism, "client-final message: no proof (p=)")
        pairs = _attributes(without_proof, "cr", self.mechanism, "client-final message")
        channel = _b64decode(self.mechanism, pairs[0][1], "client-final message: c=")
        if not hmac.compare_digest(channel, first.gs2_header.encode()):
            raise _malformed(self.mechanism, "client-final message: c= does not repeat the gs2 header")
        if not hmac.compare_digest(pairs[1][1].encode(), self._nonce.encode()):
            raise _malformed(self.mechanism, "client-final message: the nonce is not the one of this exchange")
        proof = _b64decode(self.mechanism, proof_text, "client-final message: p=")
        if len(proof) != mech.digest_bytes:
            raise _malformed(self.mechanism, f"client-final message: a proof of {len(proof)} bytes")
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        signature = scram.hmac_digest(mech, credential.stored_key, auth_message)
        key_of_client = bytes(a ^ b for a, b in zip(proof, signature))
        if not (hmac.compare_digest(scram.stored_key(mech, key_of_client), credential.stored_key)
                and self._known):
            raise SaslAuthenticationFailedError(invalid_credentials(self.mechanism))
        self.user, self.complete = first.user, True
        server_signature = scram.hmac_digest(mech, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


@dataclass(frozen=True)
class SaslServerSettings:
    """What a listener needs to authenticate with SASL: the mechanisms it enables (Kafka's
    ``sasl.enabled.mechanisms``) and where SCRAM credentials come from (the broker's metadata
    image: ``credential_lookup(user, mechanism)``, None for a user without one)."""
    mechanisms: tuple[str, ...]
    credential_lookup: CredentialLookup = field(repr=False)

    def __post_init__(self) -> None:
        names = tuple(m.strip().upper() for m in self.mechanisms)
        if not names:
            raise ConfigError("sasl.enabled.mechanisms", "no mechanism enabled")
        for name in names:
            if name not in MECHANISMS:
                raise ConfigError("sasl.enabled.mechanisms",
                                  f"unknown mechanism {name!r}: use {', '.join(MECHANISMS)}")
        object.__setattr__(self, "mechanisms", tuple(dict.fromkeys(names)))

    def server(self, mechanism: str) -> SaslServer:
        """A fresh server side of ``mechanism`` (one of ``mechanisms``)."""
        if mechanism == PLAIN:
            return PlainServer(self.credential_lookup)
        return ScramServer(scram.mechanism(mechanism), self.credential_lookup)


# -- client side ------------------------------------------------------------------------------------

class SaslClient(Protocol):
    """One connection's client side of a mechanism: ``initial`` is the first message; each
    answer goes to ``evaluate``, which returns the next message or None when done (raises
    SaslAuthenticationFailedError when the server's answer is wrong)."""
    mechanism: str
    complete: bool

    def initial(self) -> bytes: ...

    def evaluate(self, challenge: bytes) -> bytes | None: ...


class PlainClient:
    mechanism = PLAIN

    def __init__(self, user: str, password: str) -> None:
        self._user, self._password = user, password
        self.complete = False

    def initial(self) -> bytes:
        return f"\0{self._user}\0{self._password}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        self.complete = True
        return None


class ScramClient:
    """SCRAM-SHA-256 / SCRAM-SHA-512, client side. ``nonce`` is for tests (RFC vectors)."""

    def __init__(self, mech: ScramMechanism, user: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mech.name
        self._mech = mech
        self._user, self._password = user, password
        self._nonce = nonce or new_nonce()
        self._bare = f"n={escape_user(user)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self.complete = False

    def initial(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._server_signature is None:
            return self._server_first(challenge)
        self._server_final(challenge)
        return None

    def _server_first(self, challenge: bytes) -> bytes:
        name, mech = self.mechanism, self._mech
        text = _text(name, challenge, "server-first message")
        if text.startswith("e="):
            raise _malformed(name, f"the server refused: {text[2:200]}")
        pairs = _attributes(text, "rsi", name, "server-first message")
        nonce, salt_text, iterations_text = (value for _, value in pairs[:3])
        if (not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or not _is_nonce(nonce)
                or len(nonce) > 2 * NONCE_CHARS_MAX):
            raise _malformed(name, "server-first message: the nonce does not extend the client's")
        salt = _b64decode(name, salt_text, "server-first message: s=")
        if not iterations_text.isdigit() or not salt:
            raise _malformed(name, "server-first message: bad salt or iteration count")
        try:
            salted = scram.salted_password(mech, self._password, salt, int(iterations_text))
        except ScramError as error:  # iterations outside Kafka's bounds: refused, never computed
            raise _malformed(name, f"server-first message: {error}") from None
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        key_of_client = scram.client_key(mech, salted)
        signature = scram.hmac_digest(mech, scram.stored_key(mech, key_of_client), auth_message)
        proof = bytes(a ^ b for a, b in zip(key_of_client, signature))
        self._server_signature = scram.hmac_digest(mech, scram.server_key(mech, salted), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _server_final(self, challenge: bytes) -> None:
        name = self.mechanism
        text = _text(name, challenge, "server-final message")
        if text.startswith("e="):
            raise _malformed(name, f"the server refused: {text[2:200]}")
        pairs = _attributes(text, "v", name, "server-final message")
        signature = _b64decode(name, pairs[0][1], "server-final message: v=")
        assert self._server_signature is not None
        if not hmac.compare_digest(signature, self._server_signature):
            raise _malformed(name, "the server's signature is wrong: it does not hold this user's credential")
        self.complete = True


@dataclass(frozen=True)
class SaslClientSettings:
    """A client's SASL settings (kafka-python's ``sasl_mechanism``, ``sasl_plain_username``,
    ``sasl_plain_password``; the last two serve SCRAM too). The password stays out of repr()."""
    mechanism: str
    username: str
    password: str = field(repr=False)

    def client(self) -> SaslClient:
        if self.mechanism == PLAIN:
            return PlainClient(self.username, self.password)
        return ScramClient(scram.mechanism(self.mechanism), self.username, self.password)


# -- Kafka's sasl.jaas.config ------------------------------------------------------------------------

PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
LOGIN_MODULES: Final = (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE)
JAAS_CONFIG_BYTES_MAX: Final = 4096
_JAAS_OPTION = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def login_module_of(mechanism: str) -> str:
    """The JAAS login module Kafka configures ``mechanism`` with."""
    return PLAIN_LOGIN_MODULE if mechanism == PLAIN else SCRAM_LOGIN_MODULE


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> dict[str, str]:
    """The options of one login module entry (``Module required key="value" ...;``). ConfigError
    naming ``key`` for anything else; the message never repeats a value (it may be a password)."""
    return _parse_jaas(text, key)[1]


def _parse_jaas(text: str, key: str) -> tuple[str, dict[str, str]]:
    """(login module, options) of a sasl.jaas.config value (parse_jaas_config)."""
    if len(text) > JAAS_CONFIG_BYTES_MAX:
        raise ConfigError(key, f"longer than {JAAS_CONFIG_BYTES_MAX} characters")
    body = text.strip()
    if not body.endswith(";"):
        raise ConfigError(key, "must end with ';'")
    parts = body[:-1].strip().split(None, 2)
    if len(parts) < 2:
        raise ConfigError(key, "expected '<LoginModule class> required key=\"value\" ...;'")
    module, flag = parts[0], parts[1]
    if module not in LOGIN_MODULES:
        raise ConfigError(key, f"login module {module!r} is not one Raftka speaks "
                               f"(use {' or '.join(LOGIN_MODULES)})")
    if flag != "required":
        raise ConfigError(key, f"the login module's flag must be 'required', got {flag!r}")
    rest = parts[2] if len(parts) > 2 else ""
    options: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        if not rest[pos:].strip():
            break
        match = _JAAS_OPTION.match(rest, pos)
        if match is None:
            raise ConfigError(key, f"cannot read the options from character {pos + 1} on")
        quoted, bare = match.group(2), match.group(3)
        options[match.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        pos = match.end()
    return module, options


def jaas_client_settings(mechanism: str, text: str, key: str) -> SaslClientSettings:
    """A broker's own login (``listener.name.<listener>.<mechanism>.sasl.jaas.config``) as client
    settings: the login module of ``mechanism`` with ``username`` and ``password``. ConfigError
    naming ``key``, never the password. ``user_<name>`` options (a Kafka broker's PLAIN user
    list) are refused: brokers check logins against the SCRAM credentials in the metadata log."""
    module, options = _parse_jaas(text, key)
    wanted = login_module_of(mechanism)
    if module != wanted:
        raise ConfigError(key, f"{mechanism} logs in with {wanted}, not {module}")
    listed = sorted(name for name in options if name.startswith("user_"))
    if listed:
        raise ConfigError(key, f"{listed[0]}: a broker keeps no user list; users log in with the SCRAM "
                               "credentials in the metadata log (raftka users create)")
    username, password = options.get("username"), options.get("password")
    if not username or not password:
        raise ConfigError(key, "needs the username and password this broker logs in to other brokers with")
    if "\0" in username or "\0" in password:
        raise ConfigError(key, "a user name or password may not hold NUL")
    return SaslClientSettings(mechanism, username, password)


def client_settings(config: dict[str, Any]) -> SaslClientSettings | None:
    """The SASL settings of a client config (None unless ``security_protocol`` is SASL_*);
    ConfigError naming the key that is missing or wrong (never its value when it is the
    password)."""
    if not security.uses_sasl(str(config.get("security_protocol") or security.PLAINTEXT).upper()):
        return None
    mechanism = str(config.get("sasl_mechanism") or "").upper()
    if mechanism not in MECHANISMS:
        raise ConfigError("sasl_mechanism", f"must be one of {', '.join(MECHANISMS)}, got "
                                            f"{config.get('sasl_mechanism')!r}")
    username, password = config.get("sasl_plain_username"), config.get("sasl_plain_password")
    if not isinstance(username, str) or not username:
        raise ConfigError("sasl_plain_username", f"{mechanism} needs a user name")
    if not isinstance(password, str) or not password:
        raise ConfigError("sasl_plain_password", f"{mechanism} needs a password (a non-empty string)")
    if "\0" in username or "\0" in password:
        raise ConfigError("sasl_plain_username", "a user name or password may not hold NUL")
    return SaslClientSettings(mechanism, username, password)


class _Requester(Protocol):
    async def request(self, api_key: int, body: Any, api_version: int | None = None, *,
                      timeout_ms: int | None = None) -> tuple[int, Any]: ...


async def authenticate(connection: _Requester, settings: SaslClientSettings, address: str) -> None:
    """Run the SASL exchange on a new connection before anything else: SaslHandshake v1, then
    SaslAuthenticate rounds. SaslAuthenticationFailedError (not retriable) with the broker's
    message when it refuses; UnsupportedSaslMechanismError when the listener does not enable the
    mechanism."""
    _, answer = await connection.request(ApiKey.SASL_HANDSHAKE, {"mechanism": settings.mechanism},
                                         HANDSHAKE_VERSION)
    if answer["error_code"] == errors.UNSUPPORTED_SASL_MECHANISM:
        raise errors.error_for(answer["error_code"], f"{address} does not enable SASL mechanism "
                               f"{settings.mechanism} (it enables {', '.join(answer['mechanisms']) or 'none'})")
    if answer["error_code"] != errors.NONE:
        raise errors.error_for(answer["error_code"], f"{address} refused the SaslHandshake")
    client = settings.client()
    message: bytes | None = client.initial()
    for _ in range(ROUNDS_MAX):
        if message is None:
            break
        _, answer = await connection.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": message},
                                             AUTHENTICATE_VERSION)
        if answer["error_code"] != errors.NONE:
            raise errors.error_for(answer["error_code"], f"{address}: {answer['error_message'] or 'refused'}")
        message = client.evaluate(answer["auth_bytes"])
    if not client.complete:
        raise SaslAuthenticationFailedError(f"{address}: the {settings.mechanism} exchange did not complete")
