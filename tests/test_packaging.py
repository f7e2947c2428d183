"""The package installs as one top-level name, `raftka`, and a plain install stays light.

Builds the wheel the way `pip install .` does (isolated build, no dependencies fetched) and reads
what it would install; imports the client in a fresh interpreter and checks what came with it.
"""
from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pyspark", "pyarrow", "matplotlib", "toxiproxy", "pandas", "numpy")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0 and "Could not find a version that satisfies" in run.stderr:
        pytest.skip(f"the build backend could not be fetched: {run.stderr.strip().splitlines()[-1]}")
    assert run.returncode == 0, run.stderr
    (built,) = out.glob("raftka-*.whl")
    return built


def test_the_wheel_installs_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"raftka"}
    for module in ("raftka/client/__init__.py", "raftka/client/aio/__init__.py", "raftka/common/records.py",
                   "raftka/storage/log.py", "raftka/broker/server.py", "raftka/raft_meta/raft.py",
                   "raftka/chaos/runner.py", "raftka/spark/source.py", "raftka/py.typed"):
        assert module in names


def test_every_source_package_is_in_the_wheel(wheel):
    """A subpackage folder left out of pyproject's explicit `packages` list would be missing."""
    names = set(zipfile.ZipFile(wheel).namelist())
    mapping = pyproject()["tool"]["setuptools"]["package-dir"]
    missing = []
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.relative_to(ROOT / folder)
            inside = package.replace(".", "/") + "/" + rel.as_posix()
            if inside not in names:
                missing.append(str(init.relative_to(ROOT)))
    assert missing == []


def test_a_plain_install_asks_for_no_spark_plotting_or_chaos_client():
    project = pyproject()["project"]
    core = " ".join(project["dependencies"]).lower()
    assert not [heavy for heavy in HEAVY if heavy in core]
    extras = project["optional-dependencies"]
    assert {"spark", "chaos", "bench", "test"} <= set(extras)
    for requirement in project["dependencies"] + [r for group in extras.values() for r in group
                                                  if not r.startswith("raftka[")]:
        assert ">=" in requirement and "<" in requirement, f"{requirement}: a lower bound and a tested upper major"


def test_importing_the_client_and_the_servers_imports_nothing_heavy():
    code = ("import sys, raftka.client, raftka.client.aio, raftka.broker.server, "
            "raftka.raft_meta.controller.server, raftka.cli\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_one_wire_protocol_kafkas_so_msgpack_is_neither_a_dependency_nor_imported():
    assert not [r for r in pyproject()["project"]["dependencies"] if r.lower().startswith("msgpack")]
    code = ("import sys, raftka.client, raftka.client.aio, raftka.broker.server, "
            "raftka.raft_meta.controller.server, raftka.cli, raftka.cluster\n"
            "print('msgpack' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"


def test_a_client_module_in_the_working_directory_does_not_shadow_raftka_client(tmp_path):
    (tmp_path / "client.py").write_text("raise ImportError('the user module was imported')\n")
    run = subprocess.run([sys.executable, "-c", "from raftka.client import Producer, Consumer, AdminClient, "
                          "NewTopic, TopicPartition; import raftka.client.aio"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
