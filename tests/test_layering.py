"""The layering in docs/architecture.md holds: no package imports one it must not.

Reads every module's import statements with `ast` (nothing is imported), so a forbidden import
fails here even on a code path no other test runs.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package -> the Raftka packages (or subpackages) it may import besides itself.
MAY_IMPORT = {
    "client": (),
    "storage": ("client.protocol",),
    "raft_meta": ("client.protocol",),
    "broker": ("storage", "raft_meta", "client.protocol"),
    "spark": ("client", "raftka.cluster"),
    # The harness starts its clusters through the cluster API behind `raftka cluster` (DESIGN.md:
    # chaos uses "the public client API and the raftka command"), never server internals.
    "chaos": ("client", "raftka.cluster"),
}
RAFTKA_PACKAGES = set(MAY_IMPORT) | {"raftka"}


def imported_names(tree: ast.AST):
    """Yield (line, [names]) per imported thing; any of the names being allowed is enough."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, [alias.name]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                # `from a import b`: b may be a submodule of a.
                yield node.lineno, [node.module, f"{node.module}.{alias.name}"]


def is_allowed(name: str, package: str) -> bool:
    top = name.split(".")[0]
    if top not in RAFTKA_PACKAGES or top == package:
        return True
    return any(name == rule or name.startswith(rule + ".") for rule in MAY_IMPORT[package])


def crossings(package: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, names in imported_names(tree):
            if not any(is_allowed(name, package) for name in names):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {names[-1]}")
    return found


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_package_imports_only_what_the_layering_allows(package):
    assert crossings(package) == []


def test_the_checker_catches_a_forbidden_import():
    tree = ast.parse("from broker.partition import Partition\nimport storage.log\n")
    bad = [names for _, names in imported_names(tree)
           if not any(is_allowed(name, "client") for name in names)]
    assert bad == [["broker.partition", "broker.partition.Partition"], ["storage.log"]]
    assert all(is_allowed(name, "broker") for names in bad for name in names)
