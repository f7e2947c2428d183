"""The layering in docs/design.md holds: no room imports one it must not, nothing imports a
Raftka package outside the ``raftka`` namespace, and the import graph has no circle.

Reads every module's import statements with `ast` (nothing is imported), so a forbidden import
fails here even on a code path no other test runs. A "room" is a source folder (or a package
of the ``raftka/`` folder) and its import name:
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# room -> its source folder
ROOMS = {
    "raftka.common": "common",
    "raftka.client": "client",
    "raftka.storage": "storage",
    "raftka.raft_meta.metadata": "raft_meta/metadata",
    "raftka.raft_meta": "raft_meta",
    "raftka.broker": "broker",
    "raftka.cluster": "raftka/cluster",
    "raftka.chaos": "chaos",
    "raftka.spark": "spark",
    "raftka.bench": "raftka/bench",
    "raftka.cli": "raftka/cli",
}

# room -> the rooms it may import besides itself (bottom to top). common is the shared layer:
# wire protocol, record batches, errors, configs, the transport and the server.
MAY_IMPORT = {
    "raftka.common": (),
    "raftka.client": ("raftka.common",),
    "raftka.storage": ("raftka.common",),
    "raftka.raft_meta.metadata": ("raftka.common",),
    "raftka.raft_meta": ("raftka.common", "raftka.raft_meta.metadata"),
    "raftka.broker": ("raftka.common", "raftka.storage", "raftka.raft_meta.metadata"),
    # The local-cluster kit starts server processes (by command line, never by import) and
    # waits for them with the client.
    "raftka.cluster": ("raftka.common", "raftka.client"),
    # Outside the servers: the public client API and the cluster kit only.
    "raftka.chaos": ("raftka.common", "raftka.client", "raftka.cluster"),
    "raftka.spark": ("raftka.common", "raftka.client", "raftka.cluster"),
    "raftka.bench": ("raftka.common", "raftka.client", "raftka.cluster", "raftka.storage",
                     "raftka.raft_meta.metadata"),
    # The command line is the top: each command imports what it runs, lazily.
    "raftka.cli": tuple(ROOMS),
}
OLD_TOP_LEVEL = {"client", "common", "storage", "raft_meta", "broker", "chaos", "spark", "scripts", "bench"}


def room_of(module: str) -> str | None:
    """The room a module name belongs to (the longest room prefix), or None (not Raftka's)."""
    best = None
    for room in ROOMS:
        if (module == room or module.startswith(room + ".")) and (best is None or len(room) > len(best)):
            best = room
    return best


def module_name(path: Path) -> str:
    """Import name of a source file, through the folder -> room mapping."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    for room, folder in sorted(ROOMS.items(), key=lambda item: -len(item[1])):
        folder_parts = folder.split("/")
        if parts[:len(folder_parts)] == folder_parts:
            return ".".join([room, *parts[len(folder_parts):]])
    return ".".join(["raftka", *parts[1:]]) if parts[0] == "raftka" else ".".join(parts)


def imported_names(tree: ast.AST, module: str = ""):
    """Yield (line, [names]) per imported thing; any of the names being allowed is enough."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, [alias.name]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                # `from a import b`: b may be a submodule of a.
                yield node.lineno, [node.module, f"{node.module}.{alias.name}"]


def is_allowed(name: str, room: str) -> bool:
    target = room_of(name)
    if target is None or target == room:
        return True
    return target in MAY_IMPORT[room]


def source_files() -> list[Path]:
    files = []
    for folder in sorted(set(ROOMS.values()) | {"raftka"}):
        files.extend(sorted((ROOT / folder).rglob("*.py")))
    return sorted(set(files))


def crossings(room: str) -> list[str]:
    found = []
    for path in source_files():
        module = module_name(path)
        if room_of(module) != room:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, names in imported_names(tree):
            if not any(is_allowed(name, room) for name in names):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {names[-1]}")
    return found


@pytest.mark.parametrize("room", sorted(MAY_IMPORT))
def test_room_imports_only_what_the_layering_allows(room):
    assert crossings(room) == []


def test_every_source_file_belongs_to_a_room():
    strays = [str(p.relative_to(ROOT)) for p in source_files()
              if room_of(module_name(p)) is None and p.parent != ROOT / "raftka"]
    assert strays == []


def test_nothing_imports_a_raftka_package_outside_the_raftka_namespace():
    """`from client import ...` would find whatever `client` comes first on sys.path."""
    found = []
    for path in [*source_files(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, names in imported_names(tree):
            if names[0].split(".")[0] in OLD_TOP_LEVEL:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {names[0]}")
    assert found == []


def import_graph() -> dict[str, set[str]]:
    """room -> rooms its modules import (module-level and lazy imports alike)."""
    graph: dict[str, set[str]] = {room: set() for room in ROOMS}
    for path in source_files():
        room = room_of(module_name(path))
        if room is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for _, names in imported_names(tree):
            target = room_of(names[0])
            if target is not None and target != room:
                graph[room].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of the graph as [a, b, ..., a], or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_the_import_graph_of_the_rooms_has_no_circle():
    assert find_cycle(import_graph()) == []


def test_the_checkers_catch_a_forbidden_import_and_a_circle():
    tree = ast.parse("from raftka.broker.partition import Partition\nimport raftka.storage.log\n")
    bad = [names for _, names in imported_names(tree)
           if not any(is_allowed(name, "raftka.client") for name in names)]
    assert bad == [["raftka.broker.partition", "raftka.broker.partition.Partition"], ["raftka.storage.log"]]
    assert all(is_allowed(name, "raftka.broker") for names in bad for name in names)
    assert not is_allowed("raftka.raft_meta.controller.rpc", "raftka.broker")
    assert is_allowed("raftka.raft_meta.metadata.image", "raftka.broker")
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


# -- the drawing in docs/architecture.md ------------------------------------------------------
# Rooms by layer, bottom first: an import may only point to a lower layer. The drawing is made
# from the imports found in the code (import_graph), so it shows what is, not what is allowed.
LAYERS = (
    ("raftka.common",),
    ("raftka.client", "raftka.storage", "raftka.raft_meta.metadata"),
    ("raftka.raft_meta", "raftka.broker", "raftka.cluster"),
    ("raftka.chaos", "raftka.spark", "raftka.bench"),
    ("raftka.cli",),
)
DRAWING_BEGIN = "<!-- import graph: generated by `python tests/test_layering.py`; a test checks it -->"
DRAWING_END = "<!-- end of import graph -->"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def layer_of(room: str) -> int:
    return next(i for i, rooms in enumerate(LAYERS) if room in rooms)


def drawing(graph: dict[str, set[str]]) -> str:
    """The graph as a Mermaid flowchart, top layer first, each arrow importer --> imported."""
    node = {room: room.removeprefix("raftka.").replace(".", "_") for room in ROOMS}
    lines = [DRAWING_BEGIN, "```mermaid", "flowchart TD"]
    for depth, rooms in reversed(list(enumerate(LAYERS))):
        lines.append(f"    subgraph L{depth}[\"layer {depth}\"]")
        lines.extend(f"        {node[room]}[\"{room}\"]" for room in rooms)
        lines.append("    end")
    for room in sorted(graph, key=lambda r: (-layer_of(r), r)):
        for target in sorted(graph[room], key=lambda r: (-layer_of(r), r)):
            lines.append(f"    {node[room]} --> {node[target]}")
    lines += ["```", DRAWING_END]
    return "\n".join(lines)


def drawn_in_architecture() -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start, end = text.find(DRAWING_BEGIN), text.find(DRAWING_END)
    return text[start:end + len(DRAWING_END)] if start >= 0 and end > start else ""


def test_every_room_has_a_layer_and_every_import_points_down():
    assert sorted(r for rooms in LAYERS for r in rooms) == sorted(ROOMS)
    upward = [f"{room} -> {target}" for room, targets in import_graph().items() for target in targets
              if layer_of(target) >= layer_of(room)]
    assert upward == []


def test_the_drawing_in_architecture_md_is_the_import_graph_of_today():
    assert drawn_in_architecture() == drawing(import_graph()), \
        "docs/architecture.md's import graph is stale: run `python tests/test_layering.py` and paste its output"


def test_the_drawing_shows_every_import_and_an_upward_import_is_caught():
    graph = {room: set() for room in ROOMS}
    graph["raftka.cli"].add("raftka.broker")
    assert "    cli --> broker" in drawing(graph).splitlines()
    graph["raftka.storage"].add("raftka.broker")  # an arrow back up
    assert any(layer_of(t) >= layer_of(r) for r, ts in graph.items() for t in ts)


if __name__ == "__main__":
    print(drawing(import_graph()))
