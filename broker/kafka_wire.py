"""What a broker does differently for a request that came in Kafka's wire protocol.

The handlers (broker/server.py, broker/group/) take and give the bodies their declarations
describe (common/messages/); most of Kafka's versions of an API only add fields, which the
decoder fills with their defaults and the encoder leaves out. What remains is here, one small
function per API and direction, keyed by api key:

- ``REQUEST_SHIMS``: version semantics of a request (Metadata v0's empty topic list means every
  topic; DeleteTopics before v6 names its topics where v6, which the broker forwards to the
  controller, does not; DescribeCluster's endpoint type).
- ``HANDLER_WRAPPERS``: later versions that batch what a handler answers one at a time
  (FindCoordinator v4's keys, OffsetFetch v8's groups).
- ``ANSWER_SHIMS``: what Kafka's answer at a version needs and the handler's does not say (the
  fenced brokers DescribeCluster v2 asks for, and a live broker as its ``controller_id``, as a
  KRaft broker answers; JoinGroup's null protocol name before v7; a tagged struct's "none").

A request shim takes ``(version, body)``, an answer shim ``(version, request body, answer)``;
both return the new body, may raise a RaftkaError for what Raftka does not serve (answered as
the error of every entry, common/messages/error_answers.py), and do no I/O.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Final

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.schema import ZERO_UUID

ENDPOINT_TYPE_BROKERS: Final = 1  # DescribeCluster's endpoint type of a broker (2: controllers)


Shim = Callable[[int, Any], Any]  # (version, request body) -> the handler's body
AnswerShim = Callable[[int, Any, Any], Any]  # (version, request body, answer) -> Kafka's answer


def _metadata_request(version: int, body: dict) -> dict:
    if version == 0 and not body["topics"]:
        return {**body, "topics": None}  # every topic: v0 said so with an empty list, v1+ with null
    return body


def _describe_cluster_request(version: int, body: dict) -> dict:
    # A broker describes brokers; the controllers (endpoint type 2) are described by a controller.
    if body["endpoint_type"] != ENDPOINT_TYPE_BROKERS:
        raise errors.MismatchedEndpointTypeError(
            f"endpoint type {body['endpoint_type']} asked of a broker: it describes brokers "
            f"({ENDPOINT_TYPE_BROKERS}); ask a controller for the controllers")
    return body


def _describe_cluster_answer(version: int, request: dict, body: dict) -> dict:
    # Kafka lists the unfenced brokers, and the fenced ones too (with is_fenced) when v2+ asks.
    brokers = []
    for broker in body["brokers"]:
        broker["is_fenced"] = broker.pop("fenced")
        if request["include_fenced_brokers"] or not broker["is_fenced"]:
            brokers.append(broker)
    body["brokers"] = brokers
    # controller_id as in Metadata: a live broker, where a client sends what "the controller" does.
    live = [b["broker_id"] for b in brokers if not b["is_fenced"]]
    body["controller_id"] = min(live) if live else -1
    body["endpoint_type"] = ENDPOINT_TYPE_BROKERS
    return body


def _delete_topics_request(version: int, body: dict) -> dict:
    """v1-5 name topics in ``topic_names``, v6 in ``topics`` (by name or id): the controller is
    asked at v6 (broker/controller_channel.py), so older names move there."""
    if version >= 6:
        return body
    return {"topics": [{"name": name, "topic_id": ZERO_UUID} for name in body["topic_names"]],
            "timeout_ms": body["timeout_ms"]}


def _fetch_answer(version: int, request: dict, body: dict) -> dict:
    # Kafka's tagged structs have no null: "none" is the field left out (its default).
    for topic in body["responses"]:
        for partition in topic["partitions"]:
            if partition.get("diverging_epoch", 0) is None:
                del partition["diverging_epoch"]
            if partition.get("current_leader", 0) is None:
                del partition["current_leader"]
    return body


def _produce_answer(version: int, request: dict, body: dict) -> dict:
    for topic in body["responses"]:
        for partition in topic["partition_responses"]:
            if partition.get("current_leader", 0) is None:
                del partition["current_leader"]
    return body


def _join_group_answer(version: int, request: dict, body: dict) -> dict:
    # The coordinator says "no protocol chosen" with null (its answers on error, e.g. the v4+
    # MEMBER_ID_REQUIRED that hands out a member id); Kafka's protocol_name is nullable from v7
    # only, and before that an error answer carries the empty string.
    if version < 7 and body.get("protocol_name") is None:
        body["protocol_name"] = ""
    return body


# -- APIs whose later versions batch what a handler answers one at a time ---------------------------

Handler = Callable[[dict], Awaitable[Any]]


async def _find_coordinator(handler: Handler, version: int, body: dict) -> Any:
    if version < 4:
        return await handler(body)
    coordinators = []
    for key in body["coordinator_keys"]:  # v4: one answer per key (KIP-699)
        code, answer = await handler({"key": key, "key_type": body["key_type"]})
        coordinators.append({"key": key, **answer} if code == errors.NONE else
                            {"key": key, "error_code": code, "error_message": (answer or {}).get("error_message"),
                             "node_id": -1, "host": "", "port": -1})
    return errors.NONE, {"coordinators": coordinators}


async def _offset_fetch(handler: Handler, version: int, body: dict) -> Any:
    if version < 8:
        return await handler(body)
    groups = []
    for group in body["groups"]:  # v8: one answer per group (KIP-709)
        code, answer = await handler({"group_id": group["group_id"], "topics": group["topics"],
                                      "require_stable": body["require_stable"]})
        if code != errors.NONE:
            answer = {"error_code": code, "topics": []}
        groups.append({"group_id": group["group_id"], "topics": answer.get("topics", []),
                       "error_code": answer.get("error_code", errors.NONE)})
    return errors.NONE, {"groups": groups}


HANDLER_WRAPPERS: Final[dict[int, Callable[[Handler, int, dict], Awaitable[Any]]]] = {
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.OFFSET_FETCH: _offset_fetch,
}


REQUEST_SHIMS: Final[dict[int, Shim]] = {
    ApiKey.DESCRIBE_CLUSTER: _describe_cluster_request,
    ApiKey.METADATA: _metadata_request,
    ApiKey.DELETE_TOPICS: _delete_topics_request,
}

ANSWER_SHIMS: Final[dict[int, AnswerShim]] = {
    ApiKey.PRODUCE: _produce_answer,
    ApiKey.FETCH: _fetch_answer,
    ApiKey.DESCRIBE_CLUSTER: _describe_cluster_answer,
    ApiKey.JOIN_GROUP: _join_group_answer,
}

__all__ = ["ANSWER_SHIMS", "HANDLER_WRAPPERS", "REQUEST_SHIMS"]
