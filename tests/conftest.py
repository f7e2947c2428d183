"""Shared fixtures. Keep additive: each fixture documents what it starts and how it stops it."""
from __future__ import annotations

import pytest


@pytest.fixture
def controller_cluster(tmp_path):
    """A started 3-voter controller quorum (real processes on 127.0.0.1, ports picked at run
    time); every process it started is stopped by PID in teardown. Use ``cluster_factory`` for
    other sizes or configs."""
    from raftka.cluster import ControllerCluster
    cluster = ControllerCluster.start(tmp_path / "cluster", voters=3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster_factory(tmp_path):
    """``cluster_factory(voters=3, configs=None, secret=None)`` -> a started ControllerCluster;
    all are stopped in teardown."""
    from raftka.cluster import ControllerCluster
    made = []

    def make(voters: int = 3, configs: dict | None = None, secret: str | None = None):
        cluster = ControllerCluster.start(tmp_path / f"cluster{len(made)}", voters=voters,
                                          configs=configs, secret=secret)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.close()


# Long runs stay out of a plain `pytest` (as scripts/test.sh does with -m): tests marked perf or
# soak are deselected unless the command line chooses markers itself (`pytest -m perf` runs them).
_EXCLUDED_BY_DEFAULT = ("perf", "soak")


def pytest_collection_modifyitems(config, items):
    if config.getoption("markexpr"):
        return
    kept, dropped = [], []
    for item in items:
        (dropped if any(item.get_closest_marker(m) for m in _EXCLUDED_BY_DEFAULT) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
