"""`raftka` console entry point: one command, subcommands for every role and tool.

Each subcommand is a module in `raftka/cli/commands/` with `register(subparsers)`, which adds its
parser and sets `func` to a callable taking the parsed arguments and returning an exit code.
Modules import heavy dependencies inside `func`, so `raftka --help` stays fast.

Operating errors (a RaftkaError, a refused connection, a missing file) print one line on stderr
and exit 1; only a bug shows a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Sequence

# Order shown in --help. A module in raftka/cli/commands/ that is not named here is shown after
# these, so adding a command is adding its module.
COMMAND_ORDER = (
    "server",
    "quorum",
    "cluster",
    "topics",
    "configs",
    "leader_election",
    "reassign",
    "delete_records",
    "produce",
    "consume",
    "groups",
    "users",
    "acls",
    "storage",
    "dump_log",
    "chaos",
    "spark",
    "perf",
)


def command_modules() -> list[str]:
    """Names of the modules in raftka/cli/commands/, in --help order."""
    import pkgutil
    from raftka.cli import commands
    present = {info.name for info in pkgutil.iter_modules(commands.__path__)
               if not info.name.startswith("_")}
    return [name for name in COMMAND_ORDER if name in present] + sorted(present - set(COMMAND_ORDER))


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose subcommands refuse a flag they do not know themselves, so the
    error shows that subcommand's usage (`raftka groups describe: error: unrecognized arguments`)
    rather than the top-level one argparse would print. ``add_subparsers`` makes its
    subcommands of the parser's own class, so every level is one of these."""

    def __init__(self, *args: Any, top: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.top = top  # the top level leaves unknown arguments to parse_args, which reports them

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and not self.top:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        top=True,
        prog="raftka",
        description="Raftka: a Kafka-style event streaming platform in Python.",
    )
    from raftka import __version__
    parser.add_argument("--version", action="version", version=f"raftka {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(f"raftka.cli.commands.{name}").register(subparsers)
    return parser


def flag_reference(parser: argparse.ArgumentParser | None = None) -> list[str]:
    """One markdown line per command and subcommand: its arguments and flags, as the argparse
    definitions give them (optional ones in brackets). docs/cli.md keeps these lines, and
    tests/test_cli_parity.py checks that they are still what the parsers say."""
    parser = parser or build_parser()
    lines: list[str] = []

    def walk(current: argparse.ArgumentParser, path: str) -> None:
        formatter = current._get_formatter()
        words = []
        children: list[tuple[str, argparse.ArgumentParser]] = []
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                seen: set[int] = set()
                for name, child in action.choices.items():
                    if id(child) not in seen:  # an alias names the same parser again
                        seen.add(id(child))
                        children.append((name, child))
                continue
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if action.option_strings:
                flag = max(action.option_strings, key=len)
                word = flag if action.nargs == 0 else f"{flag} {formatter._format_args(action, action.dest.upper())}"
                words.append(f"`{word}`" if action.required else f"`[{word}]`")
            else:
                words.append(f"`{formatter._format_args(action, action.dest.upper())}`")
        if path != parser.prog and (words or not children):
            lines.append(f"- `{path}` " + " ".join(words) if words else f"- `{path}`")
        for name, child in children:
            walk(child, f"{path} {name}")

    walk(parser, parser.prog)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    from raftka.common.errors import RaftkaError
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RaftkaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (OSError, TimeoutError) as error:
        print(f"error: {error.strerror or error if isinstance(error, OSError) else error}"
              + (f": {error.filename}" if getattr(error, "filename", None) else ""), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
