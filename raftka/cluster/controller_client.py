"""Blocking helpers to talk to controllers from tools, tests and the cluster API.

Requests go in Kafka's protocol: the broker-controller APIs (BrokerRegistration,
BrokerHeartbeat, AlterPartition, UnregisterBroker, AllocateProducerIds, DescribeQuorum) and the
admin APIs at the versions in ``KAFKA_VERSIONS``, any other at its newest declared version. The
answers are Kafka's bodies; the code returned with one is its whole-request error
(common/messages/controller.py ``answer_error``).
"""
from __future__ import annotations

import asyncio
import ssl as ssl_module
import time
from typing import Any, Final, NamedTuple

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import RaftkaError
from raftka.common.sasl import SaslClientSettings
from raftka.common.messages.controller import (
    DESCRIBE_QUORUM_BODY, NEWEST_VERSIONS, answer_error, node_listener, quorum_partition,
)

KAFKA_VERSIONS: Final[dict[int, int]] = {
    **NEWEST_VERSIONS,
    # the admin APIs a broker forwards, at the versions it forwards them (broker/controller_channel.py)
    ApiKey.CREATE_TOPICS: 7, ApiKey.DELETE_TOPICS: 6, ApiKey.DESCRIBE_CONFIGS: 4, ApiKey.ALTER_CONFIGS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1, ApiKey.ELECT_LEADERS: 2,
}
RAFT_LISTENER: Final = "RAFT"  # the listener name under which DescribeQuorum's nodes list the Raft port
CLIENT_ID: Final = "raftka-tool"


class Dial(NamedTuple):
    """How a tool dials the controllers' listener: its TLS context (SSL, SASL_SSL) and SASL login
    (SASL_*); the default is PLAINTEXT. ``dial_from_client_configs`` makes one from a client
    properties file's keywords (``--command-config``, a secure cluster's client.properties)."""
    ssl: "ssl_module.SSLContext | None" = None
    sasl: "SaslClientSettings | None" = None


PLAINTEXT_DIAL: Final = Dial()


def dial_from_client_configs(configs: dict[str, Any]) -> Dial:
    """A Dial from kafka-python's security keywords (``security_protocol``, ``ssl_cafile``,
    ``sasl_mechanism``, ...; raftka.client.properties.client_configs' output). ConfigError names
    a bad key, never the password."""
    from raftka.client.aio.security import SECURITY_DEFAULTS, dial_settings
    config = {**SECURITY_DEFAULTS, **{k: v for k, v in configs.items() if k in SECURITY_DEFAULTS}}
    return Dial(*dial_settings(config))


async def _call(address: str, api_key: int, body: Any, timeout_ms: int, dial: Dial = PLAINTEXT_DIAL) -> tuple[int, Any]:
    from raftka.common.transport import Connection
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_ms / 1000
    connection = await Connection.open(host, int(port), client_id=CLIENT_ID, connect_timeout_ms=timeout_ms,
                                       max_in_flight_requests=1, kafka_versions=KAFKA_VERSIONS,
                                       ssl=dial.ssl, sasl=dial.sasl)
    try:
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        _, out = await connection.request(api_key, body, timeout_ms=left_ms)
    finally:
        await connection.close()
    return answer_error(out), out


def call_controller(address: str, api_key: int, body: Any, *, timeout_ms: int = 5000,
                    dial: Dial = PLAINTEXT_DIAL) -> tuple[int, Any]:
    """One request to the controller at ``address`` on a fresh connection: (error_code, body).
    Network failures raise typed, retriable errors; a refused login SaslAuthenticationFailedError."""
    return asyncio.run(_call(address, api_key, body, timeout_ms, dial))


def describe_quorum(address: str, *, timeout_s: float = 5.0, dial: Dial = PLAINTEXT_DIAL) -> dict[str, Any]:
    """One controller's DescribeQuorum (v2) answer, read by :func:`quorum_view`."""
    code, answer = call_controller(address, ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_BODY,
                                   timeout_ms=int(timeout_s * 1000), dial=dial)
    if code != errors.NONE:
        raise errors.error_for(code, (answer or {}).get("error_message") or f"DescribeQuorum to {address} refused")
    return quorum_view(answer)


def quorum_view(answer: dict) -> dict[str, Any]:
    """What a DescribeQuorum v2 answer says, flattened for tools:

    ``active`` (the answering controller is the active one: its partition has no error; any
    other answers NOT_LEADER_OR_FOLLOWER with its own view), ``leader_id`` (-1: none known),
    ``leader_epoch`` (the Raft term), ``high_watermark`` (the offset after the last committed
    metadata record), ``leader_endpoint`` (the leader's CONTROLLER listener, or None), ``voters``
    [{node_id, endpoint, raft_address, log_end_offset (None: unknown, which it is except on the
    active controller), lag (leader's log end offset - the voter's, or None),
    last_fetch_timestamp, last_caught_up_timestamp}] and ``observers`` (brokers following the
    metadata log) [{replica_id, log_end_offset (the next offset it wants), lag (high watermark -
    its log end offset: 0 when caught up), last_fetch_timestamp, last_caught_up_timestamp}].
    Offsets are exclusive (the offset after the last entry) on both sides of every lag;
    timestamps are ms since the epoch, -1 unknown (service.describe_quorum says when).
    """
    partition = quorum_partition(answer)
    if partition is None:
        raise errors.UnknownServerError("the DescribeQuorum answer does not describe __cluster_metadata-0")
    leader, high_watermark = partition["leader_id"], partition["high_watermark"]
    ends = {v["replica_id"]: (v["log_end_offset"] if v["log_end_offset"] >= 0 else None)
            for v in partition["current_voters"]}
    leader_end = ends.get(leader)
    voters = []
    for voter in partition["current_voters"]:
        node_id, end = voter["replica_id"], ends[voter["replica_id"]]
        voters.append({"node_id": node_id, "endpoint": node_listener(answer, node_id),
                       "raft_address": node_listener(answer, node_id, RAFT_LISTENER), "log_end_offset": end,
                       "lag": leader_end - end if leader_end is not None and end is not None else None,
                       "last_fetch_timestamp": voter["last_fetch_timestamp"],
                       "last_caught_up_timestamp": voter["last_caught_up_timestamp"]})
    # max(0, ...): the active controller may apply a record an instant after a broker fetched it elsewhere.
    observers = [{"replica_id": o["replica_id"], "log_end_offset": o["log_end_offset"],
                  "lag": max(0, high_watermark - o["log_end_offset"]),
                  "last_fetch_timestamp": o["last_fetch_timestamp"],
                  "last_caught_up_timestamp": o["last_caught_up_timestamp"]} for o in partition["observers"]]
    return {"active": partition["error_code"] == errors.NONE, "error_message": partition.get("error_message"),
            "leader_id": leader, "leader_epoch": partition["leader_epoch"], "high_watermark": high_watermark,
            "leader_endpoint": node_listener(answer, leader) if leader >= 0 else None,
            "voters": voters, "observers": observers}


def controller_request(bootstrap: str, api_key: int, body: Any, *, timeout_s: float = 10.0,
                       attempts_max: int = 20, dial: Dial = PLAINTEXT_DIAL) -> tuple[int, Any]:
    """Send a request to the active controller, following NOT_CONTROLLER answers.

    ``bootstrap`` is "host:port,..." of controllers' RPC listeners. Returns (error_code, body) of
    the active controller's answer, or of the last answer when every attempt failed. After a
    NOT_CONTROLLER answer, the controller that refused is asked for DescribeQuorum, whose
    ``nodes`` give the leader's listener.
    """
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    deadline = time.monotonic() + timeout_s
    last: tuple[int, Any] = (errors.NOT_CONTROLLER, {"error_message": "no controller answered"})
    target: str | None = None
    for attempt in range(attempts_max):
        address = target or addresses[attempt % len(addresses)]
        target = None
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            break
        try:
            code, out = call_controller(address, api_key, body, timeout_ms=min(remaining_ms, 5000), dial=dial)
        except RaftkaError as error:
            if not error.retriable:  # a refused login or TLS handshake: no other controller differs
                raise
            last = (error.code, {"error_message": error.message})
            time.sleep(0.05)
            continue
        if code != errors.NOT_CONTROLLER:
            return code, out
        last = (code, out)
        try:
            target = describe_quorum(address, timeout_s=min(remaining_ms, 5000) / 1000, dial=dial)["leader_endpoint"]
        except RaftkaError:
            target = None
        if not target:
            time.sleep(0.1)
    return last
