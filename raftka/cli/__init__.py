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
from typing import Sequence

# Order shown in --help. A module in raftka/cli/commands/ that is not named here is shown after
# these, so adding a command is adding its module.
COMMAND_ORDER = (
    "server",
    "quorum",
    "cluster",
    "topics",
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftka",
        description="Raftka: a Kafka-style event streaming platform in Python.",
    )
    from raftka import __version__
    parser.add_argument("--version", action="version", version=f"raftka {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(f"raftka.cli.commands.{name}").register(subparsers)
    return parser


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
