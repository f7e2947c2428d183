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


# -- one cluster per test module --------------------------------------------------------------
# Starting real processes costs seconds, so a module starts its cluster once and its tests share
# it. Each module keeps its own shape in a small `cluster` fixture built from this factory:
#
#     @pytest.fixture(scope="module")
#     def cluster(module_cluster_factory):
#         """1 controller + 3 brokers, stopped by PID at the end of the module."""
#         return module_cluster_factory("groups", controllers=1, brokers=3, configs=FAST)

@pytest.fixture(scope="module")
def module_cluster_factory(tmp_path_factory):
    """``module_cluster_factory(name, controllers=3, brokers=3, configs=None, *, subdir=None,
    **start_kwargs)`` -> a started ``raftka.cluster.Cluster`` (``Cluster.start``: returns once
    every broker is ready) in a fresh temporary directory named after ``name`` (or in ``subdir``
    under it, e.g. ".raftka" where the CLI looks). Every process of every cluster it started is
    stopped by PID (``Cluster.close``) when the module ends."""
    from raftka.cluster import Cluster
    made = []

    def make(name: str, controllers: int = 3, brokers: int = 3, configs: dict | None = None, *,
             subdir: str | None = None, **start_kwargs):
        root = tmp_path_factory.mktemp(name)
        cluster = Cluster.start(root / subdir if subdir else root, controllers=controllers,
                                brokers=brokers, configs=configs, **start_kwargs)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in reversed(made):
            cluster.close()


@pytest.fixture(scope="module")
def module_admin_factory():
    """``module_admin_factory(cluster, request_timeout_ms=10_000)`` -> an ``AdminClient`` bound to
    ``cluster``'s brokers, shared by the module's tests; every one it opened is closed when the
    module ends. Request it after the cluster fixture so the admins close before the cluster
    stops (pytest tears fixtures down in reverse order)."""
    from raftka.client import AdminClient
    opened = []

    def make(cluster, request_timeout_ms: int = 10_000):
        admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=request_timeout_ms)
        opened.append(admin)
        return admin

    try:
        yield make
    finally:
        for admin in reversed(opened):
            admin.close()


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


# -- one SparkSession per run ------------------------------------------------------------------

def java_missing_reason() -> str | None:
    """Why Spark tests cannot run here (no Java 17+), or None; scripts/test.sh sets
    RAFTKA_HAVE_JAVA=1 when it found Java itself."""
    import os
    if os.environ.get("RAFTKA_HAVE_JAVA") == "1":
        return None
    from raftka.spark.session import JavaNotFoundError, require_java
    try:
        require_java()
    except JavaNotFoundError as error:
        return f"Spark tests need Java 17+: {error}"
    return None


@pytest.fixture(scope="session")
def spark():
    """A local SparkSession (local[2]) shared by every Spark test module of the run: one JVM
    start (~20 s); stopped at the end of the run. Skips when there is no Java 17+."""
    reason = java_missing_reason()
    if reason:
        pytest.skip(reason)
    from raftka.spark.session import local_session
    session = local_session("raftka-tests", conf={"spark.ui.showConsoleProgress": "false"})
    try:
        yield session
    finally:
        session.stop()
