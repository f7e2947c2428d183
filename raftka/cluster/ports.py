"""Ports for local processes: free ones chosen at run time, or consecutive from a base port.

Chosen ports lie below 32768, outside Linux's ephemeral range, so a port we picked is not taken
by an outgoing connection before its process binds it.
"""
from __future__ import annotations

import random
import socket
import threading

from raftka.cluster.errors import ClusterError

PORT_MIN = 20000
PORT_MAX = 32000  # exclusive; below the ephemeral range (32768+)
PORT_ATTEMPTS_MAX = 500

_ports_lock = threading.Lock()
_ports_given: set[int] = set()


def free_ports(count: int, *, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct TCP ports in [PORT_MIN, PORT_MAX) that are free right now on 127.0.0.1.

    Ports handed out earlier in this process are not handed out again, so two clusters in one
    test run do not collide even before their processes bind.
    """
    rng = rng or random.Random()
    ports: list[int] = []
    with _ports_lock:
        for _ in range(PORT_ATTEMPTS_MAX):
            if len(ports) == count:
                break
            port = rng.randrange(PORT_MIN, PORT_MAX)
            if port in _ports_given or port in ports:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            ports.append(port)
        if len(ports) < count:
            raise RuntimeError(f"found only {len(ports)} of {count} free ports after {PORT_ATTEMPTS_MAX} tries")
        _ports_given.update(ports)
    return ports


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``port``. SO_REUSEADDR as our servers set it, so a port
    whose last connection lingers in TIME_WAIT counts as free (the server will bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port_block(count: int, *, rng: random.Random | None = None) -> int:
    """The first of ``count`` consecutive free ports in [PORT_MIN, PORT_MAX), none handed out
    before by this process (for ``base_port`` in tests)."""
    rng = rng or random.Random()
    with _ports_lock:
        for _ in range(PORT_ATTEMPTS_MAX):
            base = rng.randrange(PORT_MIN, PORT_MAX - count)
            block = range(base, base + count)
            if any(p in _ports_given for p in block) or not all(port_is_free(p) for p in block):
                continue
            _ports_given.update(block)
            return base
    raise RuntimeError(f"found no block of {count} free ports after {PORT_ATTEMPTS_MAX} tries")


class PortPlan:
    """Where a cluster's ports come from: consecutive ports from ``base_port`` in the order they
    are taken (a layout users can predict), or, without a base port, free ports chosen now."""

    def __init__(self, base_port: int | None = None) -> None:
        if base_port is not None and not 1 <= base_port <= 65535:
            raise ClusterError(f"base port {base_port} is not a TCP port (1-65535)")
        self.base_port = base_port
        self._next = base_port

    def take(self, count: int) -> list[int]:
        if self._next is None:
            return free_ports(count)
        ports = list(range(self._next, self._next + count))
        self._next += count
        if ports and ports[-1] > 65535:
            raise ClusterError(f"base port {self.base_port} leaves too few ports below 65536")
        return ports
