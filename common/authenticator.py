"""The SASL gate of one server connection (common/server.py calls it; the mechanisms are
common/sasl.py).

States, and what moves a connection between them (Kafka's SaslServerAuthenticator)::

    HANDSHAKE      -- SaslHandshake, mechanism enabled -->      AUTHENTICATE
    HANDSHAKE      -- SaslHandshake, mechanism not enabled -->  FAILED (UNSUPPORTED_SASL_MECHANISM)
    AUTHENTICATE   -- SaslAuthenticate, the exchange goes on --> AUTHENTICATE
    AUTHENTICATE   -- SaslAuthenticate, the exchange succeeds --> COMPLETE (principal User:<name>)
    AUTHENTICATE   -- SaslAuthenticate, refused -->             FAILED (SASL_AUTHENTICATION_FAILED)
    HANDSHAKE      -- SaslAuthenticate -->                      FAILED (ILLEGAL_SASL_STATE)
    AUTHENTICATE   -- SaslHandshake -->                         FAILED (ILLEGAL_SASL_STATE)
    COMPLETE       -- SaslHandshake or SaslAuthenticate -->     COMPLETE (ILLEGAL_SASL_STATE answered)

Before COMPLETE only ApiVersions, SaslHandshake and SaslAuthenticate are served: any other request
closes the connection unanswered, as Kafka does. A FAILED connection is closed once its answer is
written. A connection reads its next request only after a SASL answer is ready, so the state a
request meets is the one every earlier request left.
"""
from __future__ import annotations

import asyncio
import enum
import logging
from typing import Any, Final

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import RaftkaError
from raftka.common.ratelog import RateLimitedLog
from raftka.common.sasl import PLAIN, SaslServer, SaslServerSettings

log = logging.getLogger(__name__)

ANONYMOUS: Final = "User:ANONYMOUS"  # the principal of a connection that does not authenticate
SASL_API_KEYS: Final = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
ALLOWED_BEFORE_AUTHENTICATION: Final = SASL_API_KEYS | {ApiKey.API_VERSIONS}
SESSION_LIFETIME_MS: Final = 0  # no re-authentication (Kafka's connections.max.reauth.ms unset)
# PLAIN derives a salted password (PBKDF2, some ms): off the event loop, so other connections
# are not held while one authenticates.
_IN_THREAD: Final = frozenset({PLAIN})

# Failures are rate limited (a client can repeat them at will): one line per minute per cause.
_failures = RateLimitedLog(log)


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


class Authenticator:
    """One connection's SASL state (see the module doc)."""

    __slots__ = ("settings", "peer", "state", "principal", "_server", "_listener")

    def __init__(self, settings: SaslServerSettings, peer: Any, listener: str = "server") -> None:
        self.settings = settings
        self.peer = peer
        self.state = State.HANDSHAKE
        self.principal: str | None = None  # User:<name> once COMPLETE
        self._server: SaslServer | None = None
        self._listener = listener

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def failed(self) -> bool:
        return self.state is State.FAILED

    def allows(self, api_key: int) -> bool:
        """May a request to ``api_key`` be served now (else the connection is closed)."""
        return self.state is State.COMPLETE or api_key in ALLOWED_BEFORE_AUTHENTICATION

    async def answer(self, api_key: int, body: Any) -> dict[str, Any]:
        """The answer to a SaslHandshake or SaslAuthenticate, moving the state on."""
        if api_key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(body["mechanism"])
        return await self._authenticate(body["auth_bytes"])

    def _handshake(self, mechanism: str) -> dict[str, Any]:
        enabled = list(self.settings.mechanisms)
        if self.state is not State.HANDSHAKE:
            self._fail_unless_complete()
            return {"error_code": errors.ILLEGAL_SASL_STATE, "mechanisms": enabled}
        if mechanism not in enabled:
            self.state = State.FAILED
            _failures.log(logging.INFO, "sasl-mechanism", "%s: SASL mechanism %r from %s is not enabled "
                          "(enabled: %s)", self._listener, mechanism[:64], self.peer, ", ".join(enabled))
            return {"error_code": errors.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}
        self._server = self.settings.server(mechanism)
        self.state = State.AUTHENTICATE
        return {"error_code": errors.NONE, "mechanisms": enabled}

    async def _authenticate(self, message: bytes) -> dict[str, Any]:
        server = self._server
        if self.state is not State.AUTHENTICATE or server is None:
            where = "after it succeeded" if self.complete else "before a SaslHandshake"
            self._fail_unless_complete()
            return _authenticate_answer(errors.ILLEGAL_SASL_STATE, f"SaslAuthenticate {where}")
        try:
            if server.mechanism in _IN_THREAD:
                challenge = await asyncio.to_thread(server.evaluate, bytes(message))
            else:
                challenge = server.evaluate(bytes(message))
        except RaftkaError as error:
            self.state = State.FAILED
            _failures.log(logging.INFO, "sasl-failed", "%s: SASL %s authentication from %s failed (user %r): %s",
                          self._listener, server.mechanism, self.peer, _shown(server.claimed_user), error.message)
            return _authenticate_answer(error.code, error.message)
        except Exception as error:  # the credential lookup's bug: this exchange fails, the listener goes on
            self.state = State.FAILED
            _failures.log(logging.ERROR, "sasl-error", "%s: SASL %s authentication from %s (user %r) could not "
                          "be checked: %r", self._listener, server.mechanism, self.peer,
                          _shown(server.claimed_user), error)
            return _authenticate_answer(errors.UNKNOWN_SERVER_ERROR, "the broker could not check the "
                                        "credentials; see its log")
        if server.complete:
            self.state = State.COMPLETE
            self.principal = f"User:{server.user}"
            log.debug("%s: %s authenticated as %s with SASL %s", self._listener, self.peer,
                      self.principal, server.mechanism)
        return _authenticate_answer(errors.NONE, None, challenge)

    def _fail_unless_complete(self) -> None:
        if self.state is not State.COMPLETE:
            self.state = State.FAILED


def _authenticate_answer(code: int, message: str | None, auth_bytes: bytes = b"") -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "auth_bytes": auth_bytes,
            "session_lifetime_ms": SESSION_LIFETIME_MS}


def _shown(user: str | None) -> str | None:
    """A claimed user name as a log line shows it (cut: a client chooses it)."""
    return None if user is None else user[:256]
