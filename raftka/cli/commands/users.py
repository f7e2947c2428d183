"""`raftka users create|delete|list`: SCRAM users (Kafka's kafka-configs --entity-type users
--alter --add-config 'SCRAM-SHA-256=[...]'), on the public AdminClient.

    raftka users create alice --mechanism SCRAM-SHA-256 --password-file alice.txt
    printf '%s' "$PASSWORD" | raftka users create alice --password-file -
    raftka users delete alice                      (every mechanism it has)
    raftka users delete alice --mechanism SCRAM-SHA-512
    raftka users list

The password is read from a file (or stdin with ``-``), never from the command line, where other
users of the machine could read it; one trailing newline is dropped. The admin client salts and
hashes it: only the salted password goes to the cluster, and the cluster keeps only the salt, the
iteration count and the two keys SCRAM derives from it.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from raftka.cli.commands._common import (CommandError, add_bootstrap_args, bootstrap_servers, command_configs,
                                         one_line_errors)

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORD_BYTES_MAX = 1024  # a password file longer than this is not a password file


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("users", help="create, delete and list SCRAM users",
                                   description="Manage users' SCRAM credentials (AlterUserScramCredentials, "
                                               "DescribeUserScramCredentials).")
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(dest="users_command", metavar="ACTION")

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        add_bootstrap_args(p)
        p.add_argument("--timeout-ms", type=int, default=30_000, help="request timeout")
        return p

    create = action("create", "set a user's credential for one mechanism (creates the user)")
    create.add_argument("name", metavar="USER")
    create.add_argument("--mechanism", default="SCRAM-SHA-256", type=str.upper, choices=MECHANISMS,
                        help="SCRAM mechanism (default SCRAM-SHA-256)")
    create.add_argument("--password-file", required=True, metavar="FILE",
                        help="file holding the password ('-': stdin); one trailing newline is dropped")
    create.add_argument("--iterations", type=int, default=None,
                        help="PBKDF2 iterations, 4096 to 16384 (default 8192)")
    create.set_defaults(func=run_create)

    delete = action("delete", "remove a user's credentials")
    delete.add_argument("name", metavar="USER")
    delete.add_argument("--mechanism", type=str.upper, choices=MECHANISMS,
                        help="only this mechanism's credential (default: every one the user has)")
    delete.set_defaults(func=run_delete)

    listing = action("list", "users with their mechanisms and iterations (never a salt or a key)")
    listing.set_defaults(func=run_list)


def _admin(args: argparse.Namespace) -> Any:
    from raftka.client import AdminClient
    return AdminClient(**{**command_configs(args, "admin"), "bootstrap_servers": bootstrap_servers(args),
                          "request_timeout_ms": args.timeout_ms, "client_id": "raftka-users"})


def read_password(path: str) -> str:
    """The password in ``path`` ('-': stdin), without one trailing newline; CommandError for an
    empty, overlong or non-UTF-8 one."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(PASSWORD_BYTES_MAX + 2)
        else:
            with open(path, "rb") as file:
                data = file.read(PASSWORD_BYTES_MAX + 2)
    except OSError as error:
        raise CommandError(f"--password-file {path}: {error.strerror or error}") from None
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    where = "stdin" if path == "-" else path
    if not data:
        raise CommandError(f"--password-file {where}: the password is empty")
    if len(data) > PASSWORD_BYTES_MAX:
        raise CommandError(f"--password-file {where}: a password has at most {PASSWORD_BYTES_MAX} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CommandError(f"--password-file {where}: the password is not UTF-8 text") from None


@one_line_errors
def run_create(args: argparse.Namespace) -> int:
    from raftka.client import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from raftka.common.scram import DEFAULT_ITERATIONS
    password = read_password(args.password_file)
    mechanism = ScramMechanism[args.mechanism.replace("-", "_")]
    iterations = DEFAULT_ITERATIONS if args.iterations is None else args.iterations
    with _admin(args) as admin:
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            args.name, ScramCredentialInfo(mechanism, iterations), password)])
    print(f"Set the {args.mechanism} credential of user {args.name} ({iterations} iterations).")
    return 0


@one_line_errors
def run_delete(args: argparse.Namespace) -> int:
    from raftka.client import ScramMechanism, UserScramCredentialDeletion
    from raftka.client.errors import ResourceNotFoundError
    with _admin(args) as admin:
        if args.mechanism is not None:
            mechanisms = [ScramMechanism[args.mechanism.replace("-", "_")]]
        else:
            try:
                described = admin.describe_user_scram_credentials([args.name])[args.name]
            except ResourceNotFoundError:
                raise CommandError(f"user {args.name!r} has no SCRAM credential (RESOURCE_NOT_FOUND)") from None
            mechanisms = [info.mechanism for info in described.scram_credential_infos]
        for mechanism in mechanisms:  # one request each: a request names a user once
            admin.alter_user_scram_credentials([UserScramCredentialDeletion(args.name, mechanism)])
    names = ", ".join(m.name.replace("_", "-") for m in mechanisms)
    print(f"Deleted the {names} credential{'s' if len(mechanisms) > 1 else ''} of user {args.name}.")
    return 0


@one_line_errors
def run_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        described = admin.describe_user_scram_credentials()
    for user, description in sorted(described.items()):
        shown = ", ".join(f"{info.mechanism.name.replace('_', '-')} (iterations {info.iterations})"
                          for info in description.scram_credential_infos)
        print(f"{user}\t{shown}")
    return 0
