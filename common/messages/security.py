"""The security family: SASL authentication, declared as Kafka's messages with the version ranges
Raftka serves (common/sasl.py runs the exchange; common/authenticator.py gates a connection on it).

- SaslHandshake (17) 1 only: the client names its mechanism and the broker lists the ones it
  enables. v0 sent the mechanism's tokens as raw frames after it; v1 moved them into
  SaslAuthenticate, which is what kafka-python, librdkafka and the Java client send, so v0 is not
  offered.
- SaslAuthenticate (36) 0-2: one round of the mechanism's exchange each (``auth_bytes`` both
  ways); 1 adds ``session_lifetime_ms`` to the answer (0: the broker never asks for a
  re-authentication), 2 turns flexible.
- DescribeUserScramCredentials (50) 0 and AlterUserScramCredentials (51) 0: the users with SCRAM
  credentials (mechanism and iterations only, never a salt or a key), and setting or removing a
  user's credential for one mechanism. An upsertion carries the salted password, never the
  password; the controller turns it into StoredKey and ServerKey (common/scram.py) before anything
  is committed. Brokers forward both to the active controller.
"""
from __future__ import annotations

from typing import Final

from raftka.common.api import ApiKey
from raftka.common.schema import Array, Field, Message, Struct

# A mechanism's name on the wire (Kafka's are at most 20 characters: SCRAM-SHA-512).
MECHANISM_NAME_BYTES_MAX: Final = 64
MECHANISMS_MAX: Final = 16  # mechanisms one broker lists
# One SASL message (PLAIN's or a SCRAM round): a few hundred bytes in practice; the bound leaves
# room for a user name of scram.USER_NAME_BYTES_MAX bytes escaped three times over, plus nonces.
AUTH_BYTES_MAX: Final = 8192
SCRAM_USERS_MAX: Final = 10_000  # users (or credential changes) one SCRAM credentials request names
SCRAM_CREDENTIALS_PER_USER_MAX: Final = 16  # a user has one per mechanism (there are 2)

SASL_HANDSHAKE_REQUEST: Final = Message(ApiKey.SASL_HANDSHAKE, "SaslHandshakeRequest", "1", (
    Field("mechanism", "string", max_length=MECHANISM_NAME_BYTES_MAX,
          about="the SASL mechanism the client wants (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
))

SASL_HANDSHAKE_RESPONSE: Final = Message(ApiKey.SASL_HANDSHAKE, "SaslHandshakeResponse", "1", (
    Field("error_code", "int16", default=0, about="UNSUPPORTED_SASL_MECHANISM when it is not enabled"),
    Field("mechanisms", Array("string", max_count=MECHANISMS_MAX, max_length=MECHANISM_NAME_BYTES_MAX),
          default=[], about="the mechanisms this listener enables"),
))

SASL_AUTHENTICATE_REQUEST: Final = Message(ApiKey.SASL_AUTHENTICATE, "SaslAuthenticateRequest", "0-2", (
    Field("auth_bytes", "bytes", max_length=AUTH_BYTES_MAX, about="the mechanism's next client message"),
), flexible_versions="2+")

SASL_AUTHENTICATE_RESPONSE: Final = Message(ApiKey.SASL_AUTHENTICATE, "SaslAuthenticateResponse", "0-2", (
    Field("error_code", "int16", default=0, about="SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE"),
    Field("error_message", "string", nullable=True, default=None, about="null when no error"),
    Field("auth_bytes", "bytes", default=b"", max_length=AUTH_BYTES_MAX,
          about="the mechanism's next server message"),
    Field("session_lifetime_ms", "int64", versions="1+", default=0,
          about="0: the session never needs re-authenticating"),
), flexible_versions="2+")

# -- DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) ----------------------------

_SCRAM_MECHANISM = Field("mechanism", "int8", default=0, about="1 SCRAM-SHA-256, 2 SCRAM-SHA-512")

DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST: Final = Message(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentialsRequest", "0", (
        Field("users", Array(Struct("UserName", (Field("name", "string", default=""),)), max_count=SCRAM_USERS_MAX),
              nullable=True, default=None, about="null or empty: every user with a credential"),
    ), flexible_versions="0+")

DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE: Final = Message(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentialsResponse", "0", (
        Field("throttle_time_ms", "int32", default=0),
        Field("error_code", "int16", default=0, about="the request's own error (per-user errors are below)"),
        Field("error_message", "string", nullable=True, default=None),
        Field("results", Array(Struct("DescribeUserScramCredentialsResult", (
            Field("user", "string", default=""),
            Field("error_code", "int16", default=0, about="RESOURCE_NOT_FOUND: the user has no credential"),
            Field("error_message", "string", nullable=True, default=None),
            Field("credential_infos", Array(Struct("CredentialInfo", (
                _SCRAM_MECHANISM,
                Field("iterations", "int32", default=0),
            )), max_count=SCRAM_CREDENTIALS_PER_USER_MAX), default=[]),
        )), max_count=SCRAM_USERS_MAX), default=[]),
    ), flexible_versions="0+")

ALTER_USER_SCRAM_CREDENTIALS_REQUEST: Final = Message(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentialsRequest", "0", (
        Field("deletions", Array(Struct("ScramCredentialDeletion", (
            Field("name", "string", default=""),
            _SCRAM_MECHANISM,
        )), max_count=SCRAM_USERS_MAX), default=[]),
        Field("upsertions", Array(Struct("ScramCredentialUpsertion", (
            Field("name", "string", default=""),
            _SCRAM_MECHANISM,
            Field("iterations", "int32", default=0, about="4,096 to 16,384"),
            Field("salt", "bytes", default=b"", about="a random salt the client chose"),
            Field("salted_password", "bytes", default=b"",
                  about="PBKDF2 of the password with that salt and iterations (never the password)"),
        )), max_count=SCRAM_USERS_MAX), default=[]),
    ), flexible_versions="0+")

ALTER_USER_SCRAM_CREDENTIALS_RESPONSE: Final = Message(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentialsResponse", "0", (
        Field("throttle_time_ms", "int32", default=0),
        Field("results", Array(Struct("AlterUserScramCredentialsResult", (
            Field("user", "string", default=""),
            Field("error_code", "int16", default=0),
            Field("error_message", "string", nullable=True, default=None),
        )), max_count=SCRAM_USERS_MAX), default=[]),
    ), flexible_versions="0+")

REQUESTS: Final = (SASL_HANDSHAKE_REQUEST, SASL_AUTHENTICATE_REQUEST, DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
                   ALTER_USER_SCRAM_CREDENTIALS_REQUEST)
RESPONSES: Final = (SASL_HANDSHAKE_RESPONSE, SASL_AUTHENTICATE_RESPONSE, DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
                    ALTER_USER_SCRAM_CREDENTIALS_RESPONSE)
