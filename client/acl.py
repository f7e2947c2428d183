"""ACLs in kafka-python's shapes: ``ACL``, ``ACLFilter``, ``ResourcePattern``,
``ResourcePatternFilter`` and the enums ``ResourceType``, ``ACLOperation``,
``ACLPermissionType``, ``ACLResourcePatternType`` (Kafka's numbers, common/acl.py).

A ``ResourcePattern`` names resources one ACL applies to (no ANY type, no ANY or MATCH pattern);
a ``ResourcePatternFilter`` selects patterns (ANY, MATCH allowed; ``resource_name`` None: any).
An ``ACL`` is concrete (no ANY operation or permission); an ``ACLFilter`` selects ACLs
(``principal`` / ``host`` None: any). Each refuses what it cannot hold with
IllegalArgumentError at construction, before anything is sent.
"""
from __future__ import annotations

import enum
from typing import Any

from raftka.client.errors import IllegalArgumentError
from raftka.common import acl as model


class ResourceType(enum.IntEnum):
    ANY = model.ResourceType.ANY
    TOPIC = model.ResourceType.TOPIC
    GROUP = model.ResourceType.GROUP
    CLUSTER = model.ResourceType.CLUSTER
    TRANSACTIONAL_ID = model.ResourceType.TRANSACTIONAL_ID


class ACLOperation(enum.IntEnum):
    ANY = model.AclOperation.ANY
    ALL = model.AclOperation.ALL
    READ = model.AclOperation.READ
    WRITE = model.AclOperation.WRITE
    CREATE = model.AclOperation.CREATE
    DELETE = model.AclOperation.DELETE
    ALTER = model.AclOperation.ALTER
    DESCRIBE = model.AclOperation.DESCRIBE
    CLUSTER_ACTION = model.AclOperation.CLUSTER_ACTION
    DESCRIBE_CONFIGS = model.AclOperation.DESCRIBE_CONFIGS
    ALTER_CONFIGS = model.AclOperation.ALTER_CONFIGS
    IDEMPOTENT_WRITE = model.AclOperation.IDEMPOTENT_WRITE


class ACLPermissionType(enum.IntEnum):
    ANY = model.AclPermissionType.ANY
    DENY = model.AclPermissionType.DENY
    ALLOW = model.AclPermissionType.ALLOW


class ACLResourcePatternType(enum.IntEnum):
    ANY = model.PatternType.ANY
    MATCH = model.PatternType.MATCH
    LITERAL = model.PatternType.LITERAL
    PREFIXED = model.PatternType.PREFIXED


def _member(cls: type[enum.IntEnum], value: Any, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        names = ", ".join(m.name for m in cls)
        raise IllegalArgumentError(f"{what} must be one of {names}, got {value!r:.40}") from None


class ResourcePatternFilter:
    """Selects resource patterns: ``resource_name`` None matches any name; pattern type ANY any
    pattern, MATCH the patterns that apply to the named resource."""

    def __init__(self, resource_type: ResourceType, resource_name: str | None,
                 pattern_type: ACLResourcePatternType) -> None:
        self.resource_type = _member(ResourceType, resource_type, "resource_type")
        self.resource_name = resource_name
        self.pattern_type = _member(ACLResourcePatternType, pattern_type, "pattern_type")

    def _key(self) -> tuple:
        return (self.resource_type, self.resource_name, self.pattern_type)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResourcePatternFilter) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} type={self.resource_type.name}, name={self.resource_name}, "
                f"pattern={self.pattern_type.name}>")


class ResourcePattern(ResourcePatternFilter):
    """The resources one ACL applies to: a LITERAL name (``*``: every one) or a PREFIXED one."""

    def __init__(self, resource_type: ResourceType, resource_name: str,
                 pattern_type: ACLResourcePatternType = ACLResourcePatternType.LITERAL) -> None:
        super().__init__(resource_type, resource_name, pattern_type)
        if self.resource_type is ResourceType.ANY:
            raise IllegalArgumentError("a ResourcePattern's resource_type cannot be ANY")
        if self.pattern_type in (ACLResourcePatternType.ANY, ACLResourcePatternType.MATCH):
            raise IllegalArgumentError(f"a ResourcePattern's pattern_type cannot be {self.pattern_type.name}")
        if not isinstance(resource_name, str) or not resource_name:
            raise IllegalArgumentError("a ResourcePattern needs a resource_name")


class ACLFilter:
    """Selects ACLs: ``principal`` / ``host`` None and ANY operation or permission match all."""

    def __init__(self, principal: str | None, host: str | None, operation: ACLOperation,
                 permission_type: ACLPermissionType, resource_pattern: ResourcePatternFilter) -> None:
        self.principal = principal
        self.host = host
        self.operation = _member(ACLOperation, operation, "operation")
        self.permission_type = _member(ACLPermissionType, permission_type, "permission_type")
        if not isinstance(resource_pattern, ResourcePatternFilter):
            raise IllegalArgumentError("resource_pattern must be a ResourcePatternFilter")
        self.resource_pattern = resource_pattern

    def _key(self) -> tuple:
        return (self.principal, self.host, self.operation, self.permission_type, self.resource_pattern)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ACLFilter) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, type={self.permission_type.name}, "
                f"resource={self.resource_pattern}>")


class ACL(ACLFilter):
    """One ACL: ``principal`` (User:<name> or User:*) from ``host`` (an IP address or ``*``) is
    allowed or denied ``operation`` on ``resource_pattern``."""

    def __init__(self, principal: str, host: str, operation: ACLOperation, permission_type: ACLPermissionType,
                 resource_pattern: ResourcePattern) -> None:
        super().__init__(principal, host, operation, permission_type, resource_pattern)
        if self.operation is ACLOperation.ANY:
            raise IllegalArgumentError("an ACL's operation cannot be ANY")
        if self.permission_type is ACLPermissionType.ANY:
            raise IllegalArgumentError("an ACL's permission_type cannot be ANY")
        if not isinstance(resource_pattern, ResourcePattern):
            raise IllegalArgumentError("an ACL's resource_pattern must be a ResourcePattern")


def creation_body(entry: ACL) -> dict[str, Any]:
    """One CreateAcls creation."""
    if not isinstance(entry, ACL):
        raise IllegalArgumentError(f"create_acls takes ACL objects, not {type(entry).__name__}")
    p = entry.resource_pattern
    return {"resource_type": int(p.resource_type), "resource_name": p.resource_name,
            "resource_pattern_type": int(p.pattern_type), "principal": entry.principal, "host": entry.host,
            "operation": int(entry.operation), "permission_type": int(entry.permission_type)}


def filter_body(entry: ACLFilter) -> dict[str, Any]:
    """One DescribeAcls / DeleteAcls filter."""
    if not isinstance(entry, ACLFilter):
        raise IllegalArgumentError(f"give ACLFilter objects, not {type(entry).__name__}")
    p = entry.resource_pattern
    return {"resource_type_filter": int(p.resource_type), "resource_name_filter": p.resource_name,
            "pattern_type_filter": int(p.pattern_type), "principal_filter": entry.principal,
            "host_filter": entry.host, "operation": int(entry.operation),
            "permission_type": int(entry.permission_type)}


def acl_of(resource_type: int, resource_name: str, pattern_type: int, described: dict[str, Any]) -> ACL:
    """An ACL from an answer's resource fields and its acl entry."""
    return ACL(described["principal"], described["host"], ACLOperation(described["operation"]),
               ACLPermissionType(described["permission_type"]),
               ResourcePattern(ResourceType(resource_type), resource_name, ACLResourcePatternType(pattern_type)))


__all__ = ["ACL", "ACLFilter", "ACLOperation", "ACLPermissionType", "ACLResourcePatternType", "ResourcePattern",
           "ResourcePatternFilter", "ResourceType"]
