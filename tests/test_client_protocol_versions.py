"""Raftka's client sends nothing as a msgpack frame: every API it names is in KAFKA_VERSIONS.

The transport (common/transport.py) sends an API in Kafka's encoding only when the connection's
``kafka_versions`` lists it, and falls back to a msgpack frame otherwise; so an API the client uses
but client/aio/protocol.py forgets would silently go out as msgpack, which a Kafka broker cannot
read. This reads every module of client/ and checks each api key it names (``ApiKey.X`` or one of
cluster.py's ``API_X`` constants) against the table, and that each version is one the
declarations (common/messages/) serve.
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


def test_every_api_the_client_names_goes_out_in_kafkas_encoding():
    named = api_keys_named_in_client()
    assert ApiKey.HEARTBEAT in named and ApiKey.OFFSET_FOR_LEADER_EPOCH in named  # the scan sees them
    missing = {ApiKey(k).name: sorted(files) for k, files in named.items() if k not in KAFKA_VERSIONS}
    assert not missing, f"sent as msgpack frames: {missing}"


def test_every_listed_version_is_declared():
    for key, version in KAFKA_VERSIONS.items():
        request, response = KAFKA_API[key]
        assert version in request.versions() and version in response.versions(), ApiKey(key).name
