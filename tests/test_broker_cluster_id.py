"""Brokers answer the cluster id their log dirs were formatted with (meta.properties), and refuse
log dirs of another cluster or node."""
from __future__ import annotations

import pytest

from raftka.common.meta_properties import CLUSTER_ID, read_cluster_id
from raftka.client import AdminClient
from raftka.common.errors import ConfigError
from raftka.cluster import Cluster


def write_meta(directory, cluster_id: str, node_id: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "meta.properties").write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")


def test_the_formatted_cluster_id_is_read_and_unformatted_dirs_get_the_default(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    write_meta(a, "Xk3pQ9vWRZe4mV1bL0aTgA", 4)
    assert read_cluster_id(f"{a},{b}", 4) == "Xk3pQ9vWRZe4mV1bL0aTgA"
    assert read_cluster_id([str(b)], 4) == CLUSTER_ID


def test_log_dirs_of_another_cluster_or_node_are_refused_naming_the_dir(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_meta(a, "cluster-one", 4)
    write_meta(b, "cluster-two", 4)
    with pytest.raises(ConfigError, match="different clusters") as caught:
        read_cluster_id([str(a), str(b)], 4)
    assert caught.value.key == "log.dirs"
    with pytest.raises(ConfigError, match=r"formatted for node 4, not node.id 5"):
        read_cluster_id([str(a)], 5)


def test_a_formatted_cluster_answers_its_cluster_id(tmp_path):
    with Cluster.start(tmp_path, controllers=1, brokers=1) as cluster:
        admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=10_000)
        try:
            assert admin.describe_cluster()["cluster_id"] == cluster.cluster_id != CLUSTER_ID
        finally:
            admin.close()
