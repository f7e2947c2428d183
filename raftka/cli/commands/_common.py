"""Shared by the console tools (`raftka cluster`, `topics`, `produce`, `consume`, `groups`,
`quorum`, `dump-log`): finding the cluster's brokers or controllers, turning operating errors
into one line, small parsers.

Not a command itself (the leading underscore keeps raftka/cli/__init__.py from registering it).
"""
from __future__ import annotations

import argparse
import functools
import os
import socket
import sys
from typing import Any, Callable

ENV_DIR = "RAFTKA_DIR"  # overrides the default cluster directory (./.raftka)
CONNECT_TIMEOUT_S = 3.0
CLIENT_PROPERTIES = "client.properties"  # a local cluster's client settings, picked up by every command


class CommandError(Exception):
    """An operating error a tool reports as one line (``error: ...``) and exit code 1."""


def default_dir() -> str:
    from raftka.cluster import DEFAULT_DIR
    return os.environ.get(ENV_DIR) or DEFAULT_DIR


def add_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=None, metavar="DIR",
                        help=f"the local cluster's directory (default ${ENV_DIR} or ./.raftka)")


def add_bootstrap_args(parser: argparse.ArgumentParser, *, command_config: bool = True) -> None:
    """--bootstrap-server HOST:PORT[,...], --dir (where the local cluster is found when no
    bootstrap server is given) and, for commands whose clients take it, --command-config FILE."""
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                        help="brokers to connect to (default: the local cluster in --dir)")
    add_dir_arg(parser)
    if command_config:
        add_command_config_arg(parser)


def add_command_config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--command-config", metavar="FILE",
                        help="Kafka client properties (security.protocol, ssl.*, sasl.*, client.id, ...) "
                             f"for every connection the command opens (default: {CLIENT_PROPERTIES} in --dir "
                             "when it exists and no --bootstrap-server is given)")


def command_configs(args: argparse.Namespace, role: str) -> dict[str, Any]:
    """The client keywords of ``--command-config`` (Kafka's client properties file), or of the
    local cluster's client.properties when neither it nor --bootstrap-server is given; ``role``
    is "producer", "consumer" or "admin" (each takes its own keys). CommandError for a file that
    cannot be read or a key the client cannot take."""
    from raftka.client.properties import client_configs
    from raftka.common.errors import ConfigError
    path = _command_config_path(args)
    if path is None:
        return {}
    properties = _read_properties(path, "--command-config")
    try:
        return client_configs(properties, _client_defaults(role))
    except ConfigError as error:
        raise CommandError(f"--command-config {path}: {error.message}") from None


def _command_config_path(args: argparse.Namespace) -> str | None:
    path = getattr(args, "command_config", None)
    if path is None and not getattr(args, "bootstrap_server", None):
        local = os.path.join(cluster_dir(args), CLIENT_PROPERTIES)
        path = local if os.path.exists(local) else None
    return path


def _read_properties(path: str, flag: str) -> dict[str, str]:
    """The Kafka properties file ``path`` without bootstrap.servers (--bootstrap-server / --dir
    say where); CommandError naming ``flag`` when it cannot be read."""
    from raftka.common.server_config import parse_properties
    try:
        with open(path, encoding="utf-8") as file:
            properties = parse_properties(file.read())
    except OSError as error:
        raise CommandError(f"{flag} {path}: {error.strerror or error}") from None
    properties.pop("bootstrap.servers", None)
    return properties


def add_client_property_args(parser: argparse.ArgumentParser, role: str) -> None:
    """The console producer's and consumer's own names (``role`` "producer" or "consumer"):
    ``--producer.config FILE`` (what --command-config is to the other tools) and
    ``--producer-property KEY=VALUE``, repeatable, over the file's keys."""
    parser.add_argument(f"--{role}.config", dest="client_config", metavar="FILE",
                        help=f"Kafka {role} properties file (Kafka's name for --command-config; not both)")
    parser.add_argument(f"--{role}-property", dest="client_property", action="append", metavar="KEY=VALUE",
                        help=f"a {role} config by Kafka's name (or kafka-python's), over the file's; repeatable")


def client_role_configs(args: argparse.Namespace, role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the keywords of the ``role`` client, those of the admin client the command also opens),
    from ``--command-config`` or ``--<role>.config`` FILE and then ``--<role>-property KEY=VALUE``
    over it, as Kafka's console tools merge them. Every key is checked against the ``role``
    client (CommandError naming the key and where it came from); the admin gets the keys it
    takes (security, timeouts), not the role's own (linger.ms, max.poll.records, ...)."""
    from raftka.client.properties import client_configs
    from raftka.common.errors import ConfigError
    file_flag = f"--{role}.config"
    if args.client_config is not None and args.command_config is not None:
        raise CommandError(f"give --command-config or {file_flag}, not both (the same file)")
    flag, path = ((file_flag, args.client_config) if args.client_config is not None
                  else ("--command-config", _command_config_path(args)))
    properties = _read_properties(path, flag) if path is not None else {}
    named: dict[str, str] = {}
    for item in args.client_property or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--{role}-property {item!r}: expected KEY=VALUE")
        named[key.strip()] = value.strip()
    named.pop("bootstrap.servers", None)
    try:
        configs = client_configs({**properties, **named}, _client_defaults(role))
    except ConfigError as error:
        where = f"--{role}-property" if error.key in named else f"{flag} {path}"
        raise CommandError(f"{where}: {error.message}") from None
    from raftka.client.aio.configs import IGNORED
    admin_keys = set(_client_defaults("admin")) | set(IGNORED)
    return configs, {k: v for k, v in configs.items() if k in admin_keys}


def _client_defaults(role: str) -> dict[str, Any]:
    if role == "producer":
        from raftka.client.aio.producer import DEFAULTS
    elif role == "consumer":
        from raftka.client.aio.consumer import DEFAULTS
    else:
        from raftka.client.aio.admin import DEFAULTS
    return DEFAULTS


def cluster_dir(args: argparse.Namespace) -> str:
    return args.dir or default_dir()


def bootstrap_servers(args: argparse.Namespace) -> str:
    """The brokers to talk to: ``--bootstrap-server`` if given (at least one must accept a TCP
    connection), else the running local cluster in ``--dir``. CommandError otherwise."""
    if args.bootstrap_server:
        servers = _host_ports(args.bootstrap_server, "--bootstrap-server")
        problems = []
        for server in servers:
            host, _, port = server.rpartition(":")
            try:
                socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
                return ",".join(servers)
            except OSError as error:
                problems.append(f"{server}: {error.strerror or error}")
        raise CommandError(f"no broker reachable at {args.bootstrap_server} ({'; '.join(problems)})")
    from raftka.cluster import local_bootstrap_servers
    return local_bootstrap_servers(cluster_dir(args))


def add_bootstrap_controller_args(parser: argparse.ArgumentParser) -> None:
    """--bootstrap-controller HOST:PORT[,...], --dir (where the local cluster's controllers are
    found when it is not given) and --command-config FILE (the controller listener's login)."""
    parser.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]",
                        help="controllers' RPC listeners (CONTROLLER://, not the Raft port), tried in turn "
                             "(default: the local cluster in --dir)")
    add_dir_arg(parser)
    add_command_config_arg(parser)


def _host_ports(text: str, flag: str) -> list[str]:
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    if not addresses:
        raise CommandError(f"{flag} is empty")
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise CommandError(f"{flag} {address!r} is not HOST:PORT")
    return addresses


def bootstrap_controllers(args: argparse.Namespace) -> list[str]:
    """The controllers' RPC listeners to try, in order: ``--bootstrap-controller`` (a comma
    list), else those of the local cluster in ``--dir``. CommandError or NoClusterError otherwise."""
    if args.bootstrap_controller:
        return _host_ports(args.bootstrap_controller, "--bootstrap-controller")
    from raftka.cluster import Cluster
    cluster = Cluster.open(cluster_dir(args))
    addresses = [a for a in cluster.bootstrap_controllers.split(",") if a]
    if not addresses:
        raise CommandError(f"the cluster in {cluster.root} has no controller listener")
    return addresses


def controller_dial(args: argparse.Namespace) -> Any:
    """How to dial the controllers: the security keys of ``--command-config`` (as
    kafka-metadata-quorum --command-config), else the local cluster's login when the controllers
    come from ``--dir`` (a secure cluster's admin), else PLAINTEXT."""
    from raftka.cluster.controller_client import PLAINTEXT_DIAL, dial_from_client_configs
    from raftka.common.errors import ConfigError
    if args.command_config:
        try:
            return dial_from_client_configs(command_configs(args, "admin"))
        except ConfigError as error:
            raise CommandError(f"--command-config {args.command_config}: {error.message}") from None
    if not args.bootstrap_controller:
        from raftka.cluster import Cluster
        configs = Cluster.open(cluster_dir(args)).client_configs
        return dial_from_client_configs(configs) if configs else PLAINTEXT_DIAL
    return PLAINTEXT_DIAL


JSON_FILE_BYTES_MAX = 64 * 1024 * 1024  # a plan or offsets file of the admin commands


def read_json_file(path: str, flag: str) -> Any:
    """The JSON document in ``path`` (a kafka-* tool's plan or offsets file); CommandError naming
    ``flag`` for a file that cannot be read, is larger than JSON_FILE_BYTES_MAX or is not JSON."""
    import json
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read(JSON_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise CommandError(f"{flag} {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise CommandError(f"{flag} {path}: not UTF-8 text") from None
    if len(text) > JSON_FILE_BYTES_MAX:
        raise CommandError(f"{flag} {path}: larger than {JSON_FILE_BYTES_MAX} bytes")
    try:
        return json.loads(text)
    except ValueError as error:
        raise CommandError(f"{flag} {path}: not JSON ({error})") from None


def parse_key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    """["k=v", "a=b,c=d"] -> {"k": "v", "a": "b", "c": "d"}; CommandError for an item without '='."""
    out: dict[str, str] = {}
    for item in items or []:
        for part in item.split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise CommandError(f"{flag} {part!r}: expected KEY=VALUE")
            out[key.strip()] = value.strip()
    return out


def describe_error(error: BaseException) -> str:
    """One line for an operating error."""
    from raftka.common.errors import RaftkaError
    if isinstance(error, RaftkaError):
        return f"{error.message} ({error.name})" if error.message else error.name
    if isinstance(error, OSError):
        text = error.strerror or str(error)
        return text + (f": {error.filename}" if getattr(error, "filename", None) else "")
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def one_line_errors(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a command: operating errors (CommandError, the cluster API's ClusterError, any
    RaftkaError, OSError, TimeoutError) print ``error: <one line>`` on stderr and return 1;
    Ctrl-C returns 130; a closed stdout (``| head``) ends quietly."""
    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        from raftka.common.errors import RaftkaError
        from raftka.cluster import ClusterError
        try:
            return int(func(args) or 0)
        except BrokenPipeError:
            _silence_stdout()
            return 0
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except (CommandError, ClusterError, RaftkaError, OSError, TimeoutError) as error:
            print(f"error: {describe_error(error)}", file=sys.stderr)
            return 1
    return run


def _silence_stdout() -> None:
    # Python flushes stdout at exit; with the reader gone that raises again: point it at /dev/null.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def say(message: str) -> None:
    """Progress and notes go to stderr, so stdout stays the command's result."""
    print(message, file=sys.stderr, flush=True)


def print_table(rows: list[list[Any]], out: Any = None) -> None:
    """Left-aligned columns, two spaces apart."""
    out = out or sys.stdout
    text = [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in text) for i in range(len(text[0]))]
    for row in text:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip(), file=out)
