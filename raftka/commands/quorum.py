"""`raftka quorum status`: the controller quorum, like kafka-metadata-quorum describe."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quorum", help="describe the controller quorum")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
