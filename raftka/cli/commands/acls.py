"""`raftka acls add|remove|list`: ACL bindings, with kafka-acls' flags, on the public AdminClient.

    raftka acls add --allow-principal User:alice --operation Read --operation Describe --topic orders
    raftka acls add --allow-principal User:bob --allow-host 10.0.0.7 --operation Write \\
        --topic logs- --resource-pattern-type prefixed
    raftka acls add --deny-principal User:mallory --operation All --group '*'
    raftka acls add --allow-principal User:svc --operation IdempotentWrite --cluster
    raftka acls remove --topic orders                      (every ACL of that LITERAL topic)
    raftka acls remove --allow-principal User:alice --operation Read --topic orders
    raftka acls list                                       (every ACL)
    raftka acls list --principal User:alice --topic orders --resource-pattern-type match

Every principal given gets every operation on every resource given, as kafka-acls does; a
principal's hosts are its --allow-host / --deny-host values (default ``*``). Operations are
Kafka's names in any case (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
DescribeConfigs, AlterConfigs, IdempotentWrite, All). ``--resource-pattern-type`` defaults to
literal; remove and list also take any and match. Remove without a principal removes every ACL of
the resources; without --operation, every operation.
"""
from __future__ import annotations

import argparse
from typing import Any

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, bootstrap_servers, command_configs,
                                         one_line_errors, print_table)

CREATE_PATTERN_TYPES = ("literal", "prefixed")
FILTER_PATTERN_TYPES = ("literal", "prefixed", "any", "match")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("acls", help="add, remove and list ACLs",
                                   description="Manage ACL bindings (CreateAcls, DeleteAcls, DescribeAcls) "
                                               "with kafka-acls' flags.")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="acls_command", metavar="ACTION")

    def action(name: str, help_text: str, pattern_types: tuple[str, ...]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        add_bootstrap_args(p)
        p.add_argument("--timeout-ms", type=int, default=30_000, help="request timeout")
        p.add_argument("--topic", action="append", default=[], metavar="TOPIC", help="a topic (repeatable)")
        p.add_argument("--group", action="append", default=[], metavar="GROUP", help="a consumer group (repeatable)")
        p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                       help="a transactional id (repeatable)")
        p.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
        p.add_argument("--resource-pattern-type", default="literal", type=str.lower, choices=pattern_types,
                       help=f"{', '.join(pattern_types)} (default literal)")
        return p

    def principals(p: argparse.ArgumentParser) -> None:
        p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME",
                       help="principal to allow (User:* for everyone; repeatable)")
        p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME",
                       help="principal to deny (repeatable)")
        p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                       help="IP address the allowed principals connect from (default *; repeatable)")
        p.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                       help="IP address the denied principals connect from (default *; repeatable)")
        p.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                       help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                            "AlterConfigs, IdempotentWrite or All (repeatable)")

    add = action("add", "add ACLs", CREATE_PATTERN_TYPES)
    principals(add)
    add.set_defaults(func=run_add)
    remove = action("remove", "remove the ACLs the flags select", FILTER_PATTERN_TYPES)
    principals(remove)
    remove.set_defaults(func=run_remove)
    listing = action("list", "list the ACLs the flags select (no resource: every resource)", FILTER_PATTERN_TYPES)
    listing.add_argument("--principal", action="append", default=[], metavar="User:NAME",
                         help="only this principal's ACLs (repeatable)")
    listing.set_defaults(func=run_list)


def _admin(args: argparse.Namespace) -> Any:
    from raftka.client import AdminClient
    return AdminClient(**{**command_configs(args, "admin"), "bootstrap_servers": bootstrap_servers(args),
                          "request_timeout_ms": args.timeout_ms, "client_id": "raftka-acls"})


def _operation(name: str) -> Any:
    from raftka.client import ACLOperation
    key = name.replace("-", "").replace("_", "").upper()
    for member in ACLOperation:
        if member is not ACLOperation.ANY and member.name.replace("_", "") == key:
            return member
    names = "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, " \
            "IdempotentWrite, All"
    raise CommandError(f"--operation {name!r}: not one of {names}")


def _operations(args: argparse.Namespace) -> list[Any]:
    return list(dict.fromkeys(_operation(name) for name in getattr(args, "operation", [])))


def _resources(args: argparse.Namespace) -> list[tuple[Any, str]]:
    from raftka.client import ResourceType
    from raftka.common.acl import CLUSTER_NAME
    found = [(ResourceType.TOPIC, name) for name in args.topic]
    found += [(ResourceType.GROUP, name) for name in args.group]
    found += [(ResourceType.TRANSACTIONAL_ID, name) for name in args.transactional_id]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    for _, name in found:
        if not name:
            raise CommandError("a resource name must not be empty")
    return found


def _entries(args: argparse.Namespace) -> list[tuple[Any, str, str]]:
    """(permission, principal, host) of every principal given, crossed with its hosts."""
    from raftka.client import ACLPermissionType
    out = []
    for permission, principals, hosts in ((ACLPermissionType.ALLOW, args.allow_principal, args.allow_host),
                                          (ACLPermissionType.DENY, args.deny_principal, args.deny_host)):
        if hosts and not principals:
            raise CommandError(f"--{permission.name.lower()}-host needs --{permission.name.lower()}-principal")
        out += [(permission, principal, host) for principal in principals for host in hosts or ["*"]]
    return out


def _line(entry: Any) -> list[str]:
    p = entry.resource_pattern
    return [p.resource_type.name, p.pattern_type.name, p.resource_name, entry.principal, entry.host,
            entry.operation.name, entry.permission_type.name]


HEADER = ["RESOURCE_TYPE", "PATTERN", "NAME", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]


@one_line_errors
def run_add(args: argparse.Namespace) -> int:
    from raftka.client import ACL, ACLResourcePatternType, ResourcePattern
    resources, entries, operations = _resources(args), _entries(args), _operations(args)
    if not resources:
        raise CommandError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not entries:
        raise CommandError("name a principal: --allow-principal or --deny-principal")
    if not operations:
        raise CommandError("name an operation: --operation")
    pattern = ACLResourcePatternType[args.resource_pattern_type.upper()]
    acls = [ACL(principal, host, operation, permission, ResourcePattern(rtype, name, pattern))
            for rtype, name in resources for permission, principal, host in entries for operation in operations]
    with _admin(args) as admin:
        result = admin.create_acls(acls)
    if result["failed"]:
        entry, error = result["failed"][0]
        raise CommandError(f"{' '.join(_line(entry))}: {error.message} ({error.name})"
                           + (f"; {len(result['succeeded'])} other ACLs were added" if result["succeeded"] else ""))
    print(f"Added {len(acls)} ACL{'s' if len(acls) != 1 else ''} (an ACL already there is kept as it was):")
    print_table([HEADER] + [_line(entry) for entry in acls])
    return 0


def _filters(args: argparse.Namespace, principals: list[tuple[Any, str | None, str | None]]) -> list[Any]:
    from raftka.client import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                               ResourcePatternFilter, ResourceType)
    resources = _resources(args)
    pattern = ACLResourcePatternType[args.resource_pattern_type.upper()]
    patterns = [ResourcePatternFilter(rtype, name, pattern) for rtype, name in resources] or \
        [ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)]
    operations = _operations(args) or [ACLOperation.ANY]
    return [ACLFilter(principal, host, operation, permission, p)
            for p in patterns for permission, principal, host in principals or [(ACLPermissionType.ANY, None, None)]
            for operation in operations]


@one_line_errors
def run_remove(args: argparse.Namespace) -> int:
    if not _resources(args):
        raise CommandError("name a resource: --topic, --group, --transactional-id or --cluster")
    # A principal without --allow-host / --deny-host: its ACLs from every host.
    principals = [(permission, principal, host if host != "*" or _host_given(args, permission) else None)
                  for permission, principal, host in _entries(args)]
    with _admin(args) as admin:
        results = admin.delete_acls(_filters(args, principals))
    removed = [entry for _, matched, error in results for entry in matched]
    errors = [error for _, _, error in results if error is not None]
    if errors:
        raise CommandError(f"{errors[0].message} ({errors[0].name})")
    print(f"Removed {len(removed)} ACL{'s' if len(removed) != 1 else ''}" + (":" if removed else "."))
    if removed:
        print_table([HEADER] + [_line(entry) for entry in removed])
    return 0


def _host_given(args: argparse.Namespace, permission: Any) -> bool:
    return bool(args.allow_host if permission.name == "ALLOW" else args.deny_host)


@one_line_errors
def run_list(args: argparse.Namespace) -> int:
    from raftka.client import ACLPermissionType
    principals = [(ACLPermissionType.ANY, principal, None) for principal in args.principal]
    found: dict[Any, Any] = {}
    with _admin(args) as admin:
        for acl_filter in _filters(args, principals):
            for entry in admin.describe_acls(acl_filter)[0]:
                found[tuple(_line(entry))] = entry
    if found:
        print_table([HEADER] + [list(line) for line in sorted(found)])
    return 0
