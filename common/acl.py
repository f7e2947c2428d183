"""Kafka's ACL model: bindings, filters and an index of bindings by resource.

Numbers and names are Kafka's (org.apache.kafka.common.acl / .resource), so they travel
unchanged in CreateAcls, DescribeAcls, DeleteAcls and the metadata log's AccessControlEntryRecord:

    ResourceType      ANY 1 (filters only), TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5
    PatternType       ANY 1, MATCH 2 (filters only), LITERAL 3, PREFIXED 4
    AclOperation      ANY 1 (filters only), ALL 2, READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7,
                      DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11,
                      IDEMPOTENT_WRITE 12
    AclPermissionType ANY 1 (filters only), DENY 2, ALLOW 3

An ``AclBinding`` is one rule: (resource type, resource name, pattern type) and (principal, host,
operation, permission). ``check_binding`` refuses what Kafka's controller refuses, with
InvalidRequestError naming the field: a filter-only value, an empty name, a CLUSTER resource not
named ``kafka-cluster``, a principal that is not ``User:<name>`` (``User:*``: every user), a host
that is neither an IP address nor ``*``.

An ``AclBindingFilter`` selects bindings (DescribeAcls, DeleteAcls): None or ANY matches
anything; pattern type MATCH selects the bindings that apply to the named resource (LITERAL of
that name or ``*``, PREFIXED whose prefix starts it), as Kafka's ResourcePatternFilter does.

``AclIndex`` is an immutable set of bindings by id, indexed for the authorizer (authorizer.py):
per resource type, literal bindings by name and prefixed bindings by prefix, with the set of
prefix lengths in use, so finding the bindings that apply to one resource costs one dict look-up
per distinct prefix length, not a scan.
"""
from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Iterable, Iterator, Mapping, TypeVar

from raftka.common import errors


class ResourceType(enum.IntEnum):
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(enum.IntEnum):
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(enum.IntEnum):
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME: Final = "kafka-cluster"  # the one name a CLUSTER resource has (Kafka's)
WILDCARD: Final = "*"  # a LITERAL name, a principal's name or a host that matches every one
USER_PREFIX: Final = "User:"
WILDCARD_PRINCIPAL: Final = "User:*"
RESOURCE_NAME_BYTES_MAX: Final = 1024  # a topic name is at most 249; group ids are longer in practice
PRINCIPAL_BYTES_MAX: Final = 1024
HOST_BYTES_MAX: Final = 256


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not (permission) do what (operation) to which
    resources (resource_type, resource_name, pattern_type)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def describe(self) -> str:
        """One line for messages and the CLI."""
        return (f"{self.permission.name} {self.principal} from {self.host} {self.operation.name} "
                f"{self.resource_type.name}:{self.pattern_type.name}:{self.resource_name}")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings; None (names, principal, host) and ANY (enums) match every value."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if not self._matches_pattern(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission == b.permission

    def _matches_pattern(self, b: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type is PatternType.MATCH:
            if name is None:
                return True
            if b.pattern_type is PatternType.LITERAL:
                return b.resource_name == name or b.resource_name == WILDCARD
            return name.startswith(b.resource_name)  # PREFIXED
        if self.pattern_type is not PatternType.ANY and self.pattern_type != b.pattern_type:
            return False
        return name is None or name == b.resource_name


E = TypeVar("E", bound=enum.IntEnum)


def _enum(cls: type[E], value: object, field: str, *, any_allowed: bool) -> E:
    member = next((m for m in cls if m.value == value and not isinstance(value, bool)), None)
    if member is None or (not any_allowed and member.name in ("ANY", "MATCH")):
        allowed = [f"{m.name} {m.value}" for m in cls if any_allowed or m.name not in ("ANY", "MATCH")]
        raise errors.InvalidRequestError(f"{field} {value!r:.20} is not one of {', '.join(allowed)}")
    return member


def check_principal(principal: object, field: str = "principal") -> str:
    if not isinstance(principal, str) or not principal.startswith(USER_PREFIX) or len(principal) == len(USER_PREFIX):
        raise errors.InvalidRequestError(f"{field} {principal!r:.80} must be User:<name> or User:*")
    if len(principal.encode()) > PRINCIPAL_BYTES_MAX:
        raise errors.InvalidRequestError(f"{field} is longer than {PRINCIPAL_BYTES_MAX} bytes")
    return principal


def check_host(host: object, field: str = "host") -> str:
    if host == WILDCARD:
        return WILDCARD
    try:
        if not isinstance(host, str) or len(host) > HOST_BYTES_MAX:
            raise ValueError
        ipaddress.ip_address(host)
    except ValueError:
        raise errors.InvalidRequestError(f"{field} {host!r:.80} must be an IP address or *") from None
    return host


def binding(resource_type: object, resource_name: object, pattern_type: object, principal: object,
            host: object, operation: object, permission: object) -> AclBinding:
    """A checked binding from wire values; InvalidRequestError naming the field at fault."""
    rtype = _enum(ResourceType, resource_type, "resource_type", any_allowed=False)
    ptype = _enum(PatternType, pattern_type, "pattern_type", any_allowed=False)
    if not isinstance(resource_name, str) or not resource_name:
        raise errors.InvalidRequestError("resource_name must not be empty")
    if len(resource_name.encode()) > RESOURCE_NAME_BYTES_MAX:
        raise errors.InvalidRequestError(f"resource_name is longer than {RESOURCE_NAME_BYTES_MAX} bytes")
    if rtype is ResourceType.CLUSTER and resource_name != CLUSTER_NAME:
        raise errors.InvalidRequestError(
            f"resource_name {resource_name!r:.80}: the only CLUSTER resource is {CLUSTER_NAME!r}")
    return AclBinding(rtype, resource_name, ptype, check_principal(principal), check_host(host),
                      _enum(AclOperation, operation, "operation", any_allowed=False),
                      _enum(AclPermissionType, permission, "permission_type", any_allowed=False))


def binding_filter(resource_type: object, resource_name: object, pattern_type: object, principal: object,
                   host: object, operation: object, permission: object) -> AclBindingFilter:
    """A checked filter from wire values (None: any); InvalidRequestError naming the field at fault."""
    if resource_name is not None and not isinstance(resource_name, str):
        raise errors.InvalidRequestError("resource_name_filter must be a string or null")
    return AclBindingFilter(_enum(ResourceType, resource_type, "resource_type_filter", any_allowed=True),
                            resource_name,
                            _enum(PatternType, pattern_type, "pattern_type_filter", any_allowed=True),
                            None if principal is None else check_principal(principal, "principal_filter"),
                            None if host is None else check_host(host, "host_filter"),
                            _enum(AclOperation, operation, "operation", any_allowed=True),
                            _enum(AclPermissionType, permission, "permission_type", any_allowed=True))


_NO_BINDINGS: Final[tuple[list[AclBinding], ...]] = ()
_LITERAL: Final = PatternType.LITERAL


class _TypeIndex:
    """The bindings of one resource type: literal by name, prefixed by prefix."""

    __slots__ = ("literal", "prefixed", "prefix_lengths")

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = {}
        self.prefixed: dict[str, list[AclBinding]] = {}
        self.prefix_lengths: tuple[int, ...] = ()


class AclIndex:
    """An immutable set of bindings by id (Kafka's ACL ids: uuids as 32 hex digits), indexed by
    resource for ``applicable``. Compares by its bindings. Build a changed one with ``updated``.
    The resource index and the binding -> id map are built on first use (a few ms for 10,000
    bindings), so a node that never asks never pays for them."""

    __slots__ = ("bindings", "_ids", "_by_type")
    EMPTY: "AclIndex"

    def __init__(self, bindings: Mapping[str, AclBinding] | None = None) -> None:
        self.bindings: Mapping[str, AclBinding] = MappingProxyType(dict(bindings or {}))
        self._ids: dict[AclBinding, str] | None = None
        self._by_type: dict[int, _TypeIndex] | None = None

    def _index(self) -> dict[int, _TypeIndex]:
        # Built at most once per index (two threads racing both build the same thing).
        by_type: dict[int, _TypeIndex] = {}
        for b in self.bindings.values():
            index = by_type.get(b.resource_type)
            if index is None:
                index = by_type[b.resource_type] = _TypeIndex()
            target = index.literal if b.pattern_type == _LITERAL else index.prefixed
            found = target.get(b.resource_name)
            if found is None:
                target[b.resource_name] = [b]
            else:
                found.append(b)
        for index in by_type.values():
            index.prefix_lengths = tuple(sorted({len(p) for p in index.prefixed}))
        self._by_type = by_type
        return by_type

    def __len__(self) -> int:
        return len(self.bindings)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AclIndex) and self.bindings == other.bindings

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AclIndex({len(self.bindings)} bindings)"

    def id_of(self, b: AclBinding) -> str | None:
        """The id of an identical binding, or None."""
        ids = self._ids
        if ids is None:
            ids = self._ids = {binding: acl_id for acl_id, binding in self.bindings.items()}
        return ids.get(b)

    def updated(self, changes: Mapping[str, AclBinding | None]) -> "AclIndex":
        """A new index with ``changes`` applied (id -> binding, or None: removed)."""
        merged = dict(self.bindings)
        for acl_id, b in changes.items():
            if b is None:
                merged.pop(acl_id, None)
            else:
                merged[acl_id] = b
        return AclIndex(merged)

    def matching(self, selector: AclBindingFilter) -> Iterator[tuple[str, AclBinding]]:
        """(id, binding) of every binding the filter selects, in id order."""
        for acl_id in sorted(self.bindings):
            b = self.bindings[acl_id]
            if selector.matches(b):
                yield acl_id, b

    def applicable(self, resource_type: ResourceType, name: str) -> Iterable[list[AclBinding]]:
        """Groups of the bindings that apply to one resource: literal of its name, literal ``*``,
        and prefixed whose prefix starts the name."""
        by_type = self._by_type
        if by_type is None:
            by_type = self._index()
        index = by_type.get(resource_type)
        if index is None:
            return _NO_BINDINGS
        groups = []
        found = index.literal.get(name)
        if found is not None:
            groups.append(found)
        if name != WILDCARD and (found := index.literal.get(WILDCARD)) is not None:
            groups.append(found)
        prefixed = index.prefixed
        size = len(name)
        for length in index.prefix_lengths:
            if length > size:
                break
            found = prefixed.get(name[:length])
            if found is not None:
                groups.append(found)
        return groups


AclIndex.EMPTY = AclIndex()
