"""The cluster id a node's log dirs were formatted with (Kafka's ``meta.properties``).

``raftka cluster up`` writes ``meta.properties`` (``cluster.id``, ``node.id``) into every log dir
of every node, as ``kafka-storage format`` does. A broker sends the id in its BrokerRegistration
and answers it in Metadata and DescribeCluster; the active controller refuses a registration
naming another one (INCONSISTENT_CLUSTER_ID), so a broker never joins the wrong cluster.
"""
from __future__ import annotations

from pathlib import Path
from typing import Final

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
