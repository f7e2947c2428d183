"""The cluster id a node's log dirs were formatted with (Kafka's ``meta.properties``).

``raftka cluster up`` writes ``meta.properties`` (``cluster.id``, ``node.id``) into every log dir
of every node, as ``kafka-storage format`` does. A broker sends the id in its BrokerRegistration
and answers it in Metadata and DescribeCluster; the active controller refuses a registration
naming another one (INCONSISTENT_CLUSTER_ID), so a broker never joins the wrong cluster.

The bootstrap file (Kafka's ``bootstrap.checkpoint``, in a controller's metadata dir, the first
of its log dirs): SCRAM credentials written at format time (``--add-scram``), which the first
controller to become active on an empty metadata log commits (raft_meta/controller/bootstrap.py),
so a cluster whose listeners all ask for a login has its first user. Text, mode 600:

    raftka-bootstrap version=1 crc32=<8 hex digits of the JSON line's UTF-8 bytes>
    {"scram": [{"name", "mechanism" (Kafka's number), "salt", "stored_key", "server_key"
               (base64), "iterations"}]}

It holds UserScramCredentialRecord bodies: salts and derived keys, never a password.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import re
import zlib
from pathlib import Path
from typing import Final

from raftka.common import scram
from raftka.common.errors import ConfigError

CLUSTER_ID: Final = "raftka"  # the id of a node none of whose log dirs was formatted
META_PROPERTIES: Final = "meta.properties"  # per log dir


def read_cluster_id(log_dirs: list[str] | str, node_id: int) -> str:
    """The cluster id the log dirs were formatted with.

    Every formatted dir must name the same cluster and this node; a dir of another cluster or
    node is a ConfigError (serving it would mix two clusters' data). Unformatted dirs are
    accepted: the id is then CLUSTER_ID.
    """
    if isinstance(log_dirs, str):
        log_dirs = [d.strip() for d in log_dirs.split(",") if d.strip()]
    found: dict[str, str] = {}
    for log_dir in log_dirs:
        path = Path(log_dir) / META_PROPERTIES
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        values = dict(line.split("=", 1) for line in text.splitlines()
                      if "=" in line and not line.lstrip().startswith("#"))
        stored_node = values.get("node.id", "").strip()
        if stored_node and stored_node != str(node_id):
            raise ConfigError("log.dirs", f"{log_dir} was formatted for node {stored_node}, "
                                          f"not node.id {node_id}")
        if values.get("cluster.id", "").strip():
            found[log_dir] = values["cluster.id"].strip()
    if len(set(found.values())) > 1:
        raise ConfigError("log.dirs", "the log dirs belong to different clusters: "
                          + ", ".join(f"{d} -> {c}" for d, c in found.items()))
    return next(iter(found.values()), CLUSTER_ID)


BOOTSTRAP_FILE: Final = "bootstrap.checkpoint"  # in the first log dir of a controller
BOOTSTRAP_VERSION: Final = 1
BOOTSTRAP_BYTES_MAX: Final = 16 * 1024 * 1024  # bounds what a controller reads at start
_BOOTSTRAP_HEADER = re.compile(r"raftka-bootstrap version=(\d+) crc32=([0-9a-f]{8})")
_SCRAM_SPEC = re.compile(r"\s*([A-Za-z0-9-]+)\s*=\s*\[(.*)\]\s*", re.DOTALL)
_KEY_BYTES = ("salt", "stored_key", "server_key")


class ScramSpecError(ValueError):
    """An ``--add-scram`` value Kafka's syntax does not allow; the message never holds the password."""


class BootstrapFileError(ConfigError):
    """A bootstrap file that cannot be read or was not written by ``write_bootstrap``; names it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__("log.dirs", f"bootstrap file {path}: {problem}")


def parse_add_scram(spec: str) -> tuple[str, scram.ScramCredential]:
    """(user, credential) of one ``--add-scram`` value in Kafka's syntax,
    ``SCRAM-SHA-256=[name=admin,password=admin-secret]``, with optional ``iterations=N``
    (default scram.DEFAULT_ITERATIONS), ``salt=...`` (its UTF-8 bytes, as Kafka takes it; default
    a fresh random one) and, instead of ``password``, ``password-file=PATH`` (its first line).
    A value may be double-quoted (``password="a,b"``). ScramSpecError otherwise."""
    match = _SCRAM_SPEC.fullmatch(spec)
    if match is None:
        raise ScramSpecError("--add-scram takes MECHANISM=[name=USER,password=PASSWORD,...], "
                             "e.g. SCRAM-SHA-256=[name=admin,password=admin-secret]")
    try:
        mechanism = scram.mechanism(match.group(1))
    except scram.ScramError as error:
        raise ScramSpecError(f"--add-scram: {error}") from None
    values: dict[str, str] = {}
    for item in _split_items(match.group(2)):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in ("name", "password", "password-file", "iterations", "salt"):
            # Not echoed: an unquoted comma in a password makes its tail such an entry.
            raise ScramSpecError("--add-scram: an entry other than KEY=VALUE with KEY name, password, "
                                 "password-file, iterations or salt (double-quote a value holding a comma)")
        if key in values:
            raise ScramSpecError(f"--add-scram: {key} given twice")
        values[key] = _unquote(value.strip())
    name = values.get("name")
    if not name:
        raise ScramSpecError("--add-scram: name=USER is missing")
    try:
        scram.check_user_name(name)
    except scram.ScramError as error:
        raise ScramSpecError(f"--add-scram: user {name!r:.80}: {error}") from None
    if ("password" in values) == ("password-file" in values):
        raise ScramSpecError(f"--add-scram: user {name!r}: give password=... or password-file=PATH (one of them)")
    password = values.get("password")
    if password is None:
        try:
            password = Path(values["password-file"]).read_text(encoding="utf-8").splitlines()[0]
        except (OSError, UnicodeError, IndexError) as error:
            problem = error.strerror if isinstance(error, OSError) else "no password in it"
            raise ScramSpecError(f"--add-scram: user {name!r}: cannot read password-file "
                                 f"{values['password-file']}: {problem}") from None
    if not password:
        raise ScramSpecError(f"--add-scram: user {name!r}: the password is empty")
    try:
        iterations = int(values.get("iterations", scram.DEFAULT_ITERATIONS))
    except ValueError:
        raise ScramSpecError(f"--add-scram: user {name!r}: iterations must be a number") from None
    salt = values["salt"].encode("utf-8") if "salt" in values else None
    try:
        return name, scram.new_credential(mechanism, password, scram.check_iterations(iterations), salt)
    except scram.ScramError as error:
        raise ScramSpecError(f"--add-scram: user {name!r}: {error}") from None


def _split_items(text: str) -> list[str]:
    """Split on commas outside double quotes."""
    items, current, quoted = [], [], False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return [item for item in items if item.strip()]


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def write_bootstrap(path: Path, credentials: list[tuple[str, scram.ScramCredential]]) -> None:
    """Write the bootstrap file (mode 600, atomically: a reader sees all of it or none)."""
    body = json.dumps({"scram": [
        {"name": name, "mechanism": c.mechanism.number, "iterations": c.iterations,
         **{key: base64.b64encode(getattr(c, key)).decode("ascii") for key in _KEY_BYTES}}
        for name, c in credentials]}, sort_keys=True)
    text = (f"raftka-bootstrap version={BOOTSTRAP_VERSION} crc32={zlib.crc32(body.encode('utf-8')):08x}\n"
            f"{body}\n")
    write_private_atomic(path, text)


def write_private_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``: a reader
    sees the old file or the new one, never half of one. Mode 600: only the owner may read it
    (a node's files name secrets, keys and credentials)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        os.fchmod(file.fileno(), 0o600)  # a leftover .tmp keeps its old mode otherwise
        file.write(text)
    os.replace(tmp, path)


def read_bootstrap(path: Path) -> list[tuple[str, scram.ScramCredential]]:
    """The credentials of a bootstrap file, [] when there is none; BootstrapFileError for a
    file that cannot be read, of another version, or whose checksum or contents are wrong."""
    try:
        if path.stat().st_size > BOOTSTRAP_BYTES_MAX:
            raise BootstrapFileError(path, f"larger than {BOOTSTRAP_BYTES_MAX} bytes")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeError) as error:
        raise BootstrapFileError(path, f"unreadable: {error}") from None
    header, _, rest = text.partition("\n")
    match = _BOOTSTRAP_HEADER.fullmatch(header)
    if match is None:
        raise BootstrapFileError(path, "not a bootstrap file (no raftka-bootstrap header line)")
    if int(match.group(1)) != BOOTSTRAP_VERSION:
        raise BootstrapFileError(path, f"version {match.group(1)}; this raftka reads version {BOOTSTRAP_VERSION}")
    body = rest.rstrip("\n")
    if f"{zlib.crc32(body.encode('utf-8')):08x}" != match.group(2):
        raise BootstrapFileError(path, "corrupt (checksum mismatch); format the storage again")
    try:
        return [_credential(entry) for entry in json.loads(body)["scram"]]
    except (ValueError, KeyError, TypeError, binascii.Error) as error:  # ScramError is a ValueError
        raise BootstrapFileError(path, f"corrupt ({type(error).__name__}: {error})") from None


def _credential(entry: dict) -> tuple[str, scram.ScramCredential]:
    mechanism = scram.mechanism(int(entry["mechanism"]))
    salt, stored, server = (base64.b64decode(entry[key], validate=True) for key in _KEY_BYTES)
    if len(stored) != mechanism.digest_bytes or len(server) != mechanism.digest_bytes or not salt:
        raise ValueError(f"user {entry['name']!r:.80}: keys or salt of the wrong length for {mechanism.name}")
    return (scram.check_user_name(entry["name"]),
            scram.ScramCredential(mechanism, salt, stored, server, scram.check_iterations(int(entry["iterations"]))))
