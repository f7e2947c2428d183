"""Raftka's client pins the version of every API it sends: each one it names is in KAFKA_VERSIONS.

The client builds each body in one version's shape. The transport (common/transport.py) sends an
API at the version the connection's ``kafka_versions`` lists, else at the newest version declared
in common/messages/; so an API the client uses but client/aio/protocol.py forgets would go out at
whatever version is declared newest, whose shape moves as the declarations grow. This reads every
module of client/ and checks each api key it names (``ApiKey.X`` or one of cluster.py's ``API_X``
constants) against the table, and that each version is one the declarations serve.
"""
from __future__ import annotations

import ast
from pathlib import Path

from raftka.client.aio import cluster
from raftka.client.aio.protocol import KAFKA_VERSIONS
from raftka.common.api import ApiKey
from raftka.common.messages import KAFKA_API

CLIENT = Path(__file__).resolve().parent.parent / "client"


def api_keys_named_in_client() -> dict[int, set[str]]:
    """{api key: the files naming it} over client/**.py."""
    constants = {name: value for name, value in vars(cluster).items() if name.startswith("API_")}
    found: dict[int, set[str]] = {}
    for path in sorted(CLIENT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            key = None
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ApiKey":
                key = int(ApiKey[node.attr])
            elif isinstance(node, ast.Name) and node.id in constants:
                key = constants[node.id]
            if key is not None:
                found.setdefault(key, set()).add(path.name)
    return found


def test_every_api_the_client_names_goes_out_at_a_pinned_version():
    named = api_keys_named_in_client()
    assert ApiKey.HEARTBEAT in named and ApiKey.OFFSET_FOR_LEADER_EPOCH in named  # the scan sees them
    missing = {ApiKey(k).name: sorted(files) for k, files in named.items() if k not in KAFKA_VERSIONS}
    assert not missing, f"sent at whatever version is declared newest: {missing}"


def test_every_listed_version_is_declared():
    for key, version in KAFKA_VERSIONS.items():
        request, response = KAFKA_API[key]
        assert version in request.versions() and version in response.versions(), ApiKey(key).name
