"""The local-cluster kit's operating errors: the first line of each message is meant for the user."""
from __future__ import annotations


class ClusterError(RuntimeError):
    """An operating error of the cluster API (no cluster in the directory, a port in use, a node
    that exited before it was ready). The first line of the message is meant for the user."""


class NoClusterError(ClusterError):
    """The directory holds no cluster state file (nothing was ever started there)."""


class PortInUseError(ClusterError):
    """A port a node must listen on is taken by another process."""

    def __init__(self, port: int, what: str) -> None:
        self.port = port
        super().__init__(f"port {port} is in use ({what} needs it); stop whatever listens there or "
                         f"pick other ports (--base-port)")


class NodeExitedError(ClusterError):
    """A process exited before printing the line waited for; the message ends with its last
    output lines."""
