"""`raftka configs describe|alter`: Kafka's kafka-configs for topics and brokers, on the public AdminClient.

    raftka configs describe --entity-type brokers --entity-name 1          (its dynamic configs)
    raftka configs describe --entity-type brokers --entity-name 1 --all    (every key, with its source)
    raftka configs describe --entity-type brokers --entity-default         (the cluster-wide ones)
    raftka configs alter --entity-type brokers --entity-default --add-config min.insync.replicas=2
    raftka configs alter --entity-type brokers --entity-name 1 --delete-config min.insync.replicas
    raftka configs --alter --entity-type topics --entity-name orders --add-config retention.ms=3600000

The action is a word (`describe`, `alter`) or kafka-configs' flag (`--describe`, `--alter`).
Describing prints kafka-configs' lines (``key=value sensitive=... synonyms={SOURCE:key=value, ...}``),
the overrides only unless ``--all``; a secret's value is never shown (``null``). Altering sends
IncrementalAlterConfigs, as kafka-configs does: keys not named keep their value. A broker takes
only its dynamic configs (docs/operations.md, "Broker configs"); any other key is refused with
the reason.
"""
from __future__ import annotations

import argparse
from typing import Any

from raftka.cli.commands._common import CommandError, add_bootstrap_args, bootstrap_servers, command_configs, \
    one_line_errors

ENTITY_TYPES = ("topics", "brokers")
ACTIONS = ("describe", "alter")
# The sources an entity's own overrides come with: what describe shows without --all (kafka-configs).
OVERRIDE_SOURCES = {"topics": ("DYNAMIC_TOPIC_CONFIG",), "brokers": ("DYNAMIC_BROKER_CONFIG",)}
DEFAULT_SOURCES = ("DYNAMIC_DEFAULT_BROKER_CONFIG",)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "configs", help="describe and alter topic and broker configs",
        description="Describe and alter the configs of topics and brokers (Kafka's kafka-configs: "
                    "DescribeConfigs, IncrementalAlterConfigs).")
    parser.add_argument("action", nargs="?", choices=ACTIONS, metavar="ACTION", help="describe or alter")
    parser.add_argument("--describe", dest="describe_flag", action="store_true",
                        help="kafka-configs' spelling of describe")
    parser.add_argument("--alter", dest="alter_flag", action="store_true", help="kafka-configs' spelling of alter")
    parser.add_argument("--entity-type", required=True, choices=ENTITY_TYPES, help="topics or brokers")
    parser.add_argument("--entity-name", metavar="NAME", help="the topic, or the broker id")
    parser.add_argument("--entity-default", action="store_true",
                        help="brokers: the cluster-wide default (every broker without its own override)")
    parser.add_argument("--add-config", action="append", metavar="K=V[,K2=V2]",
                        help="alter: set these keys (a list value in brackets: k=[a,b]); repeatable")
    parser.add_argument("--delete-config", action="append", metavar="K[,K2]",
                        help="alter: remove these overrides (back to the next source); repeatable")
    parser.add_argument("--all", action="store_true", help="describe: every key, not only the overrides")
    add_bootstrap_args(parser)
    parser.add_argument("--timeout-ms", type=int, default=30_000, help="request timeout")
    parser.set_defaults(func=run)


def parse_add_config(items: list[str] | None) -> dict[str, str]:
    """kafka-configs' --add-config: ``k=v,k2=[a,b]`` (commas inside brackets belong to the value,
    which goes as ``a,b``); CommandError for an item without '='."""
    out: dict[str, str] = {}
    for item in items or []:
        parts, depth, current = [], 0, ""
        for char in item:
            depth += (char == "[") - (char == "]")
            if char == "," and depth == 0:
                parts.append(current)
                current = ""
            else:
                current += char
        parts.append(current)
        for part in parts:
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise CommandError(f"--add-config {part!r}: expected KEY=VALUE")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out[key.strip()] = value
    return out


def _action(args: argparse.Namespace) -> str:
    chosen = {name for name, given in (("describe", args.describe_flag), ("alter", args.alter_flag)) if given}
    if args.action:
        chosen.add(args.action)
    if len(chosen) != 1:
        raise CommandError("configs: give one action: describe or alter (or --describe / --alter)")
    return chosen.pop()


def _entity(args: argparse.Namespace, *, required: bool) -> str | None:
    """The resource name: the entity name, "" for --entity-default, None for every entity."""
    if args.entity_default and args.entity_name is not None:
        raise CommandError("configs: give --entity-name or --entity-default, not both")
    if args.entity_default:
        if args.entity_type != "brokers":
            raise CommandError("configs: --entity-default is for --entity-type brokers (the cluster-wide default)")
        return ""
    if args.entity_name is None:
        if required:
            raise CommandError(f"configs alter: name the entity (--entity-name NAME"
                               f"{' or --entity-default' if args.entity_type == 'brokers' else ''})")
        return None
    name = args.entity_name.strip()
    if args.entity_type == "brokers" and not name.isdigit():
        raise CommandError(f"configs: --entity-name {args.entity_name!r}: a broker is named by its id")
    if not name:
        raise CommandError("configs: --entity-name is empty")
    return name


def _admin(args: argparse.Namespace) -> Any:
    from raftka.client import AdminClient
    return AdminClient(**{**command_configs(args, "admin"), "bootstrap_servers": bootstrap_servers(args),
                          "request_timeout_ms": args.timeout_ms, "client_id": "raftka-configs"})


@one_line_errors
def run(args: argparse.Namespace) -> int:
    action = _action(args)
    if action == "describe":
        if args.add_config or args.delete_config:
            raise CommandError("configs describe: --add-config and --delete-config are for alter")
        return _describe(args, _entity(args, required=False))
    if args.all:
        raise CommandError("configs alter: --all is for describe")
    return _alter(args, _entity(args, required=True))


def _resource_type(args: argparse.Namespace) -> str:
    return "broker" if args.entity_type == "brokers" else "topic"


def _describe(args: argparse.Namespace, name: str | None) -> int:
    from raftka.client import ConfigResource
    kind = _resource_type(args)
    with _admin(args) as admin:
        if name is not None:
            names = [name]
        elif kind == "topic":
            names = admin.list_topics()
        else:  # every live broker, then the cluster-wide default, as kafka-configs lists them
            names = [str(b["node_id"]) for b in admin.describe_cluster()["brokers"] if not b["fenced"]] + [""]
        for one in names:
            [entries] = admin.describe_configs([ConfigResource(kind, one)], include_synonyms=True).values()
            _print_entries(args, kind, one, entries)
    return 0


def _print_entries(args: argparse.Namespace, kind: str, name: str, entries: dict[str, Any]) -> None:
    if name == "":
        print("Default configs for brokers in the cluster are:")
        shown = DEFAULT_SOURCES
    else:
        print(f"{'All' if args.all else 'Dynamic'} configs for {kind} {name} are:")
        shown = OVERRIDE_SOURCES[args.entity_type]
    for key, entry in sorted(entries.items()):
        if not args.all and name != "" and entry.source not in shown:
            continue
        synonyms = ", ".join(f"{source}:{synonym}={_text(value)}" for synonym, value, source in entry.synonyms)
        print(f"  {key}={_text(entry.value)} sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}")


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


def _alter(args: argparse.Namespace, name: str) -> int:
    from raftka.client import AlterConfigOp, AlterConfigOpType, ConfigResource
    changes: dict[str, str | None] = dict(parse_add_config(args.add_config))
    for item in args.delete_config or []:
        for key in (k.strip() for k in item.split(",")):
            if key:
                if key in changes:
                    raise CommandError(f"configs alter: {key} is both added and deleted")
                changes[key] = None
    if not changes:
        raise CommandError("configs alter: nothing to change (give --add-config K=V or --delete-config K)")
    kind = _resource_type(args)
    ops = [AlterConfigOp(k, v, AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
           for k, v in changes.items()]
    with _admin(args) as admin:
        admin.incremental_alter_configs([ConfigResource(kind, name, incremental_configs=ops)])
    if name == "":
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {kind} {name}.")
    return 0
