"""A cluster's files: each node's server.properties and meta.properties, the cluster's
``cluster.json`` (layout, configs, PIDs: what lets a later process attach) and the lock that
keeps two commands from starting or stopping one cluster at the same time."""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Iterator

from raftka.cluster.process import READY_TIMEOUT_S
from raftka.common.meta_properties import write_private_atomic as write_atomic

STATE_FILE = "cluster.json"
SECRET_FILE = "cluster.secret"  # the Raft port's secret, mode 600
STATE_VERSION = 1
LOCK_FILE = "cluster.lock"
META_PROPERTIES = "meta.properties"  # per log dir, as kafka-storage format writes it
# A holder may be starting a whole cluster, each node within READY_TIMEOUT_S.
LOCK_TIMEOUT_S = READY_TIMEOUT_S * 2


def new_cluster_id() -> str:
    """A random cluster id in Kafka's form (a UUID as 22 characters of URL-safe base64)."""
    import base64
    import uuid
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def read_properties(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def new_secret() -> str:
    """A random cluster secret for the Raft port (256 bits, URL-safe text)."""
    import secrets
    return secrets.token_urlsafe(32)


def write_properties(path: Path, values: dict[str, Any]) -> None:
    """A node's server.properties, readable by its owner only (mode 600): a config may hold a
    secret."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# written by raftka.cluster"] + [f"{k}={v}" for k, v in values.items()]
    write_atomic(path, "\n".join(lines) + "\n")


@contextlib.contextmanager
def state_lock(root: str | os.PathLike[str], timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold ``root/cluster.lock`` (flock) so two commands do not start or stop one cluster at
    the same time. TimeoutError after ``timeout_s``."""
    import fcntl
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"another raftka command holds {root / LOCK_FILE} "
                                       f"(waited {timeout_s:.0f} s)") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock
