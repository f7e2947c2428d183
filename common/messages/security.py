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
- DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) 1-3 (2+ flexible; Kafka 4 dropped v0,
  which had no pattern type): ACL bindings in the metadata log (common/acl.py has the numbers),
  decided on the active controller; brokers forward all three. kafka-python negotiates v3.
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

# -- DescribeAcls (29), CreateAcls (30), DeleteAcls (31) ----------------------------------------------

ACL_CREATIONS_MAX: Final = 10_000  # bindings one CreateAcls creates
ACL_FILTERS_MAX: Final = 1_000  # filters one DeleteAcls names
ACLS_LISTED_MAX: Final = 1_000_000  # bindings one answer lists (every ACL of a cluster)

_RESOURCE_TYPE_ABOUT: Final = "2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID (1 ANY: filters only)"
_PATTERN_TYPE_ABOUT: Final = "3 LITERAL, 4 PREFIXED (1 ANY, 2 MATCH: filters only)"
_OPERATION_ABOUT: Final = "2 ALL, 3 READ, 4 WRITE, ... 12 IDEMPOTENT_WRITE (1 ANY: filters only)"
_PERMISSION_ABOUT: Final = "2 DENY, 3 ALLOW (1 ANY: filters only)"


def _filter_fields() -> tuple[Field, ...]:
    return (
        Field("resource_type_filter", "int8", default=1, about=_RESOURCE_TYPE_ABOUT),
        Field("resource_name_filter", "string", nullable=True, default=None, about="null: any name"),
        Field("pattern_type_filter", "int8", versions="1+", default=3, about=_PATTERN_TYPE_ABOUT),
        Field("principal_filter", "string", nullable=True, default=None, about="null: any principal"),
        Field("host_filter", "string", nullable=True, default=None, about="null: any host"),
        Field("operation", "int8", default=1, about=_OPERATION_ABOUT),
        Field("permission_type", "int8", default=1, about=_PERMISSION_ABOUT),
    )


def _acl_fields() -> tuple[Field, ...]:
    return (
        Field("principal", "string", default="", about="User:<name> or User:*"),
        Field("host", "string", default="*", about="an IP address or *"),
        Field("operation", "int8", default=0, about=_OPERATION_ABOUT),
        Field("permission_type", "int8", default=0, about=_PERMISSION_ABOUT),
    )


DESCRIBE_ACLS_REQUEST: Final = Message(ApiKey.DESCRIBE_ACLS, "DescribeAclsRequest", "1-3", _filter_fields(),
                                       flexible_versions="2+")

DESCRIBE_ACLS_RESPONSE: Final = Message(ApiKey.DESCRIBE_ACLS, "DescribeAclsResponse", "1-3", (
    Field("throttle_time_ms", "int32", default=0),
    Field("error_code", "int16", default=0, about="INVALID_REQUEST for a filter no binding could match"),
    Field("error_message", "string", nullable=True, default=None),
    Field("resources", Array(Struct("DescribeAclsResource", (
        Field("resource_type", "int8", default=0, about=_RESOURCE_TYPE_ABOUT),
        Field("resource_name", "string", default=""),
        Field("pattern_type", "int8", versions="1+", default=3, about=_PATTERN_TYPE_ABOUT),
        Field("acls", Array(Struct("AclDescription", _acl_fields()), max_count=ACLS_LISTED_MAX), default=[]),
    )), max_count=ACLS_LISTED_MAX), default=[], about="every resource pattern with a binding the filter selects"),
), flexible_versions="2+")

CREATE_ACLS_REQUEST: Final = Message(ApiKey.CREATE_ACLS, "CreateAclsRequest", "1-3", (
    Field("creations", Array(Struct("AclCreation", (
        Field("resource_type", "int8", default=0, about=_RESOURCE_TYPE_ABOUT),
        Field("resource_name", "string", default=""),
        Field("resource_pattern_type", "int8", versions="1+", default=3, about=_PATTERN_TYPE_ABOUT),
        *_acl_fields(),
    )), max_count=ACL_CREATIONS_MAX), default=[]),
), flexible_versions="2+")

CREATE_ACLS_RESPONSE: Final = Message(ApiKey.CREATE_ACLS, "CreateAclsResponse", "1-3", (
    Field("throttle_time_ms", "int32", default=0),
    Field("results", Array(Struct("AclCreationResult", (
        Field("error_code", "int16", default=0, about="INVALID_REQUEST for a binding that cannot be"),
        Field("error_message", "string", nullable=True, default=None),
    )), max_count=ACL_CREATIONS_MAX), default=[], about="one per creation, in request order"),
), flexible_versions="2+")

DELETE_ACLS_REQUEST: Final = Message(ApiKey.DELETE_ACLS, "DeleteAclsRequest", "1-3", (
    Field("filters", Array(Struct("DeleteAclsFilter", _filter_fields()), max_count=ACL_FILTERS_MAX), default=[]),
), flexible_versions="2+")

DELETE_ACLS_RESPONSE: Final = Message(ApiKey.DELETE_ACLS, "DeleteAclsResponse", "1-3", (
    Field("throttle_time_ms", "int32", default=0),
    Field("filter_results", Array(Struct("DeleteAclsFilterResult", (
        Field("error_code", "int16", default=0, about="INVALID_REQUEST for a filter no binding could match"),
        Field("error_message", "string", nullable=True, default=None),
        Field("matching_acls", Array(Struct("DeleteAclsMatchingAcl", (
            Field("error_code", "int16", default=0),
            Field("error_message", "string", nullable=True, default=None),
            Field("resource_type", "int8", default=0, about=_RESOURCE_TYPE_ABOUT),
            Field("resource_name", "string", default=""),
            Field("pattern_type", "int8", versions="1+", default=3, about=_PATTERN_TYPE_ABOUT),
            *_acl_fields(),
        )), max_count=ACLS_LISTED_MAX), default=[], about="the bindings this filter deleted"),
    )), max_count=ACL_FILTERS_MAX), default=[], about="one per filter, in request order"),
), flexible_versions="2+")

REQUESTS: Final = (SASL_HANDSHAKE_REQUEST, SASL_AUTHENTICATE_REQUEST, DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
                   ALTER_USER_SCRAM_CREDENTIALS_REQUEST, DESCRIBE_ACLS_REQUEST, CREATE_ACLS_REQUEST,
                   DELETE_ACLS_REQUEST)
RESPONSES: Final = (SASL_HANDSHAKE_RESPONSE, SASL_AUTHENTICATE_RESPONSE, DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
                    ALTER_USER_SCRAM_CREDENTIALS_RESPONSE, DESCRIBE_ACLS_RESPONSE, CREATE_ACLS_RESPONSE,
                    DELETE_ACLS_RESPONSE)
