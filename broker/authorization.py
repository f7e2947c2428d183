"""ACL enforcement on a broker's APIs: Kafka's operation and resource per API, and the check.

With ``authorizer.class.name`` set to Kafka's StandardAuthorizer, ``AclGate.serve`` stands in
front of every request a broker's listeners pass on (``BrokerServer._listener_handler``): the
principal is ``Request.principal``, the host the peer's address, the ACLs those of the broker's
metadata image (``AclGate.on_metadata`` hands each new view's index to the one Authorizer: no
rebuild per request). ``RULES`` holds one rule per API, Kafka's mapping ("Operations and
Resources on Protocols"); each answers in Kafka's shape:

- a whole-request refusal (JoinGroup without READ on its group, CreateAcls without ALTER on the
  cluster) is the API's error answer (common/messages/error_answers.py), as any error for a whole
  request is;
- an API with an entry per topic, group or resource (Produce, Fetch, DescribeGroups, CreateTopics,
  ...) is served for the entries allowed and answers each refused one with its own error
  (TOPIC_AUTHORIZATION_FAILED, ...), the entry's identity copied;
- Metadata for every topic, ListGroups and OffsetFetch for every topic leave out what the
  principal may not describe.

An API without a rule is refused (CLUSTER_AUTHORIZATION_FAILED), never served by omission:
tests/test_acl_enforcement.py lists the served API keys and fails on one without a rule.
A refusal is logged at INFO at most once a minute per (principal, operation, resource).
"""
from __future__ import annotations

import copy
import logging
from typing import Any, Awaitable, Callable, Final, Iterable

from raftka.common import errors
from raftka.common.acl import CLUSTER_NAME, AclIndex, AclOperation as Op, ResourceType as Res
from raftka.common.api import ApiKey
from raftka.common.authorizer import Authorizer, enabled  # noqa: F401  (enabled: the brokers' switch too)
from raftka.common.messages import BROKER_API
from raftka.common.messages.error_answers import error_answer
from raftka.common.ratelog import RateLimitedLog
from raftka.broker.network import Request

log = logging.getLogger(__name__)
denied_log = RateLimitedLog(log)

Serve = Callable[[Request], Awaitable[Any]]
# Answered by the transport itself (common/server.py, common/authenticator.py), before any rule.
TRANSPORT_APIS: Final = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# DescribeConfigs / AlterConfigs resource types (Kafka's ConfigResource.Type).
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8
FIND_COORDINATOR_GROUP, FIND_COORDINATOR_TRANSACTION = 0, 1
_DENIED_CODE: Final = {Res.TOPIC: errors.TOPIC_AUTHORIZATION_FAILED, Res.GROUP: errors.GROUP_AUTHORIZATION_FAILED,
                       Res.CLUSTER: errors.CLUSTER_AUTHORIZATION_FAILED,
                       Res.TRANSACTIONAL_ID: errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


class Check:
    """One request's decisions: ``allowed(op, type, name)`` logs what it refuses."""

    __slots__ = ("authorizer", "principal", "host")

    def __init__(self, authorizer: Authorizer, request: Request) -> None:
        self.authorizer = authorizer
        self.principal = request.principal
        self.host = request.peer[0] if request.peer else ""

    def allowed(self, operation: Op, resource_type: Res, name: str, *, quiet: bool = False) -> bool:
        if self.authorizer.authorize(self.principal, self.host, operation, resource_type, name):
            return True
        if not quiet:
            denied_log.log(logging.INFO, f"{self.principal}|{operation.name}|{resource_type.name}:{name}",
                           "denied %s %s on %s %r from %s", self.principal, operation.name, resource_type.name,
                           name, self.host)
        return False

    def cluster(self, operation: Op, *, quiet: bool = False) -> bool:
        return self.allowed(operation, Res.CLUSTER, CLUSTER_NAME, quiet=quiet)


def refuse(code: int, what: str) -> tuple[int, dict]:
    return code, {"error_message": f"not authorized: {what}"}


def _with_body(request: Request, body: dict) -> Request:
    out = copy.copy(request)
    out.body = body
    return out


async def split(check: Check, request: Request, serve: Serve, field: str,
                decide: Callable[[Any], "int | None"], body: dict | None = None) -> Any:
    """Serve the entries of ``body[field]`` that ``decide`` allows (None) and answer the others
    with the error code it gives, each in its own answer entry (identity copied)."""
    body = request.body if body is None else body
    entries = body.get(field)
    if not entries:
        return await serve(request if body is request.body else _with_body(request, body))
    allowed: list = []
    denied: dict[int, list] = {}
    for entry in entries:
        code = decide(entry)
        if code is None:
            allowed.append(entry)
        else:
            denied.setdefault(code, []).append(entry)
    if not denied:
        return await serve(request if body is request.body else _with_body(request, body))
    result = await serve(_with_body(request, {**body, field: allowed}))
    if result is None or result[0] != errors.NONE:
        return result
    answer = dict(result[1])
    request_message, response_message = BROKER_API[request.api_key]
    for code, refused in denied.items():
        filled = error_answer(request_message, response_message, request.api_version, {**body, field: refused}, code,
                              "not authorized")
        for key, value in filled.items():
            if isinstance(value, list) and value:
                answer[key] = list(answer.get(key) or ()) + value
    return result[0], answer


def _by_topic(check: Check, operation: Op, key: str = "name") -> Callable[[Any], "int | None"]:
    def decide(entry: Any) -> "int | None":
        name = entry if isinstance(entry, str) else entry.get(key)
        if name is None or check.allowed(operation, Res.TOPIC, name):
            return None
        return errors.TOPIC_AUTHORIZATION_FAILED
    return decide


def _group(check: Check, operation: Op, group_id: str | None) -> bool:
    return check.allowed(operation, Res.GROUP, group_id or "")


# -- the rules, one per API (Kafka's mapping) -----------------------------------------------------

async def produce(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """WRITE on each topic; a transactional producer also WRITE on its transactional id."""
    transactional_id = request.body.get("transactional_id")
    if transactional_id is not None and not check.allowed(Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
        return refuse(errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, f"WRITE on transactional id {transactional_id!r}")
    return await split(check, request, serve, "topic_data", _by_topic(check, Op.WRITE))


async def init_producer_id(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """Transactional: WRITE on the transactional id. Idempotent: IDEMPOTENT_WRITE on the cluster, or
    WRITE on a topic (Kafka 3 accepts either; here: a topic that exists)."""
    transactional_id = request.body.get("transactional_id")
    if transactional_id is not None:
        if check.allowed(Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
            return await serve(request)
        return refuse(errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, f"WRITE on transactional id {transactional_id!r}")
    if check.cluster(Op.IDEMPOTENT_WRITE, quiet=True) or any(
            check.allowed(Op.WRITE, Res.TOPIC, name, quiet=True) for name in view.topics):
        return await serve(request)
    check.cluster(Op.IDEMPOTENT_WRITE)  # logs the refusal
    return refuse(errors.CLUSTER_AUTHORIZATION_FAILED, "IDEMPOTENT_WRITE on the cluster (or WRITE on a topic)")


async def fetch(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """A follower: CLUSTER_ACTION on the cluster. A consumer: READ on each topic."""
    if request.body["replica_id"] >= 0:
        if check.cluster(Op.CLUSTER_ACTION):
            return await serve(request)
        return refuse(errors.CLUSTER_AUTHORIZATION_FAILED, "CLUSTER_ACTION on the cluster (a replica Fetch)")
    return await split(check, request, serve, "topics", _by_topic(check, Op.READ, "topic"))


async def list_offsets(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    return await split(check, request, serve, "topics", _by_topic(check, Op.DESCRIBE))


async def offset_for_leader_epoch(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """A follower: CLUSTER_ACTION on the cluster; a consumer: DESCRIBE on each topic."""
    if request.body.get("replica_id", -1) >= 0:
        if check.cluster(Op.CLUSTER_ACTION):
            return await serve(request)
        return refuse(errors.CLUSTER_AUTHORIZATION_FAILED, "CLUSTER_ACTION on the cluster")
    return await split(check, request, serve, "topics", _by_topic(check, Op.DESCRIBE, "topic"))


async def delete_records(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    return await split(check, request, serve, "topics", _by_topic(check, Op.DELETE))


async def metadata(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """Every topic: only those the principal may DESCRIBE. Named ones it may not: answered
    TOPIC_AUTHORIZATION_FAILED, whether they exist or not (no existence leaks). Brokers never
    create topics on a Metadata request, so CREATE is not asked."""
    result = await serve(request)
    if result is None or result[0] != errors.NONE:
        return result
    every = request.body.get("topics") is None
    topics = []
    for topic in result[1]["topics"]:
        if topic.get("name") is not None and not check.allowed(Op.DESCRIBE, Res.TOPIC, topic["name"], quiet=every):
            if every:
                continue
            topic = {**topic, "error_code": errors.TOPIC_AUTHORIZATION_FAILED, "partitions": [], "is_internal": False}
        topics.append(topic)
    return result[0], {**result[1], "topics": topics}


async def describe_cluster(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    if check.cluster(Op.DESCRIBE):
        return await serve(request)
    return refuse(errors.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE on the cluster")


def _on_cluster(operation: Op) -> Callable[..., Awaitable[Any]]:
    """A rule for an API that acts on the cluster as a whole (ACLs, SCRAM credentials)."""
    async def rule(check: Check, request: Request, serve: Serve, view: Any) -> Any:
        if check.cluster(operation):
            return await serve(request)
        return refuse(errors.CLUSTER_AUTHORIZATION_FAILED, f"{operation.name} on the cluster")
    rule.__name__ = f"{operation.name.lower()}_on_cluster"
    return rule


def _on_group(operation: Op) -> Callable[..., Awaitable[Any]]:
    """A rule for a group API naming one group (``group_id``)."""
    async def rule(check: Check, request: Request, serve: Serve, view: Any) -> Any:
        group_id = request.body.get("group_id")
        if _group(check, operation, group_id):
            return await serve(request)
        return refuse(errors.GROUP_AUTHORIZATION_FAILED, f"{operation.name} on group {group_id!r}")
    rule.__name__ = f"{operation.name.lower()}_on_group"
    return rule


async def find_coordinator(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """DESCRIBE on the group (or the transactional id) whose coordinator is asked for."""
    transaction = request.body.get("key_type") == FIND_COORDINATOR_TRANSACTION
    resource = Res.TRANSACTIONAL_ID if transaction else Res.GROUP

    def decide(key: Any) -> "int | None":
        return None if check.allowed(Op.DESCRIBE, resource, key or "") else _DENIED_CODE[resource]
    if request.body.get("coordinator_keys"):  # v4+
        return await split(check, request, serve, "coordinator_keys", decide)
    code = decide(request.body.get("key"))
    if code is None:
        return await serve(request)
    return refuse(code, f"DESCRIBE on {resource.name} {request.body.get('key')!r}")


async def offset_commit(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """READ on the group, and READ on each topic."""
    group_id = request.body.get("group_id")
    if not _group(check, Op.READ, group_id):
        return refuse(errors.GROUP_AUTHORIZATION_FAILED, f"READ on group {group_id!r}")
    return await split(check, request, serve, "topics", _by_topic(check, Op.READ))


def _hide_offsets(check: Check, topics: list | None, every: bool) -> list | None:
    """OffsetFetch answer topics: without DESCRIBE, left out (every topic asked) or each partition
    TOPIC_AUTHORIZATION_FAILED."""
    if topics is None:
        return None
    out = []
    for topic in topics:
        if check.allowed(Op.DESCRIBE, Res.TOPIC, topic["name"], quiet=every):
            out.append(topic)
        elif not every:
            out.append({**topic, "partitions": [{**p, "committed_offset": -1, "metadata": None,
                                                 "error_code": errors.TOPIC_AUTHORIZATION_FAILED}
                                                for p in topic["partitions"]]})
    return out


async def offset_fetch(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """DESCRIBE on the group (each group, v8+), and DESCRIBE on each topic."""
    body = request.body
    if body.get("groups"):  # v8+: one answer entry per group
        groups_asked = {g["group_id"]: g.get("topics") is None for g in body["groups"]}
        result = await split(check, request, serve, "groups",
                             lambda g: None if _group(check, Op.DESCRIBE, g["group_id"])
                             else errors.GROUP_AUTHORIZATION_FAILED)
        if result is None or result[0] != errors.NONE:
            return result
        groups = [g if g.get("error_code") == errors.GROUP_AUTHORIZATION_FAILED
                  else {**g, "topics": _hide_offsets(check, g.get("topics"), groups_asked.get(g["group_id"], False))}
                  for g in result[1].get("groups") or ()]
        return result[0], {**result[1], "groups": groups}
    group_id = body.get("group_id")
    if not _group(check, Op.DESCRIBE, group_id):
        return refuse(errors.GROUP_AUTHORIZATION_FAILED, f"DESCRIBE on group {group_id!r}")
    result = await serve(request)
    if result is None or result[0] != errors.NONE:
        return result
    return result[0], {**result[1], "topics": _hide_offsets(check, result[1].get("topics"), body.get("topics") is None)}


async def describe_groups(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    return await split(check, request, serve, "groups",
                       lambda g: None if _group(check, Op.DESCRIBE, g) else errors.GROUP_AUTHORIZATION_FAILED)


async def list_groups(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """Every group with DESCRIBE on the cluster; else the groups the principal may DESCRIBE."""
    result = await serve(request)
    if result is None or result[0] != errors.NONE or check.cluster(Op.DESCRIBE, quiet=True):
        return result
    groups = [g for g in result[1].get("groups") or () if _group_quiet(check, g["group_id"])]
    return result[0], {**result[1], "groups": groups}


def _group_quiet(check: Check, group_id: str) -> bool:
    return check.allowed(Op.DESCRIBE, Res.GROUP, group_id, quiet=True)


async def delete_groups(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    return await split(check, request, serve, "groups_names",
                       lambda g: None if _group(check, Op.DELETE, g) else errors.GROUP_AUTHORIZATION_FAILED)


async def offset_delete(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """DELETE on the group, READ on each topic."""
    group_id = request.body.get("group_id")
    if not _group(check, Op.DELETE, group_id):
        return refuse(errors.GROUP_AUTHORIZATION_FAILED, f"DELETE on group {group_id!r}")
    return await split(check, request, serve, "topics", _by_topic(check, Op.READ))


async def create_topics(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """CREATE on the cluster, else CREATE on each topic."""
    if check.cluster(Op.CREATE, quiet=True):
        return await serve(request)
    return await split(check, request, serve, "topics", _by_topic(check, Op.CREATE))


def _topic_name_by_id(view: Any, topic_id: Any) -> str | None:
    for name, topic in view.topics.items():
        if topic.topic_id == topic_id:
            return name
    return None


async def delete_topics(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """DELETE on each topic (named, or by id: the name this broker's metadata gives it)."""
    def decide(entry: Any) -> "int | None":
        name = entry if isinstance(entry, str) else entry.get("name")
        if name is None:
            name = _topic_name_by_id(view, entry.get("topic_id"))
            if name is None:  # unknown id: the controller answers UNKNOWN_TOPIC_ID
                return None
        return None if check.allowed(Op.DELETE, Res.TOPIC, name) else errors.TOPIC_AUTHORIZATION_FAILED
    field = "topic_names" if request.body.get("topic_names") else "topics"
    return await split(check, request, serve, field, decide)


async def create_partitions(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    return await split(check, request, serve, "topics", _by_topic(check, Op.ALTER))


def _on_config_resources(operation: Op) -> Callable[..., Awaitable[Any]]:
    """DescribeConfigs (DESCRIBE_CONFIGS), AlterConfigs and IncrementalAlterConfigs
    (ALTER_CONFIGS): a topic resource on the topic, a broker (or broker logger) on the cluster."""
    async def rule(check: Check, request: Request, serve: Serve, view: Any) -> Any:
        def decide(resource: dict) -> "int | None":
            kind = resource.get("resource_type")
            if kind == CONFIG_TOPIC:
                ok = check.allowed(operation, Res.TOPIC, resource.get("resource_name") or "")
                return None if ok else errors.TOPIC_AUTHORIZATION_FAILED
            if kind in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
                return None if check.cluster(operation) else errors.CLUSTER_AUTHORIZATION_FAILED
            return None  # a type the controller refuses itself (INVALID_REQUEST)
        return await split(check, request, serve, "resources", decide)
    rule.__name__ = f"{operation.name.lower()}_on_config_resources"
    return rule


Rule = Callable[[Check, Request, Serve, Any], Awaitable[Any]]
# Kafka's operation and resource per API ("Operations and Resources on Protocols").
RULES: Final[dict[int, Rule]] = {
    ApiKey.PRODUCE: produce,
    ApiKey.INIT_PRODUCER_ID: init_producer_id,
    ApiKey.FETCH: fetch,
    ApiKey.LIST_OFFSETS: list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    ApiKey.METADATA: metadata,
    ApiKey.FIND_COORDINATOR: find_coordinator,
    ApiKey.JOIN_GROUP: _on_group(Op.READ),
    ApiKey.SYNC_GROUP: _on_group(Op.READ),
    ApiKey.HEARTBEAT: _on_group(Op.READ),
    ApiKey.LEAVE_GROUP: _on_group(Op.READ),
    ApiKey.OFFSET_COMMIT: offset_commit,
    ApiKey.OFFSET_FETCH: offset_fetch,
    ApiKey.DESCRIBE_GROUPS: describe_groups,
    ApiKey.LIST_GROUPS: list_groups,
    ApiKey.DELETE_GROUPS: delete_groups,
    ApiKey.OFFSET_DELETE: offset_delete,
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.CREATE_PARTITIONS: create_partitions,
    ApiKey.DELETE_RECORDS: delete_records,
    ApiKey.DESCRIBE_CONFIGS: _on_config_resources(Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CONFIGS: _on_config_resources(Op.ALTER_CONFIGS),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _on_config_resources(Op.ALTER_CONFIGS),
    ApiKey.DESCRIBE_CLUSTER: describe_cluster,
    ApiKey.CREATE_ACLS: _on_cluster(Op.ALTER),
    ApiKey.DELETE_ACLS: _on_cluster(Op.ALTER),
    ApiKey.DESCRIBE_ACLS: _on_cluster(Op.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _on_cluster(Op.ALTER),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _on_cluster(Op.DESCRIBE),
    ApiKey.ELECT_LEADERS: _on_cluster(Op.ALTER),  # Kafka: ALTER on the cluster
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _on_cluster(Op.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _on_cluster(Op.DESCRIBE),
}


async def unmapped(check: Check, request: Request, serve: Serve, view: Any) -> Any:
    """An API served without a rule yet: refused while the authorizer is on."""
    return refuse(errors.CLUSTER_AUTHORIZATION_FAILED, f"api key {request.api_key} has no ACL rule on this broker")


class AclGate:
    """The broker's authorizer and the per-API rules in front of its handlers."""

    def __init__(self, config: Any, view: Callable[[], Any], *,
                 on_refused: Callable[[int], None] | None = None) -> None:
        self.authorizer = Authorizer.from_config(config)
        self._view = view
        self._on_refused = on_refused  # a request answered without reaching its handler

    def on_metadata(self, acls: AclIndex) -> None:
        """A new metadata view: its ACL index (the same object until an ACL changes)."""
        self.authorizer.acls = acls

    async def serve(self, request: Request, serve: Serve) -> Any:
        """``serve(request)`` (or a part of it) as the ACLs allow; else Kafka's refusal."""
        rule = RULES.get(request.api_key, unmapped)
        served = False

        async def call(part: Request) -> Any:
            nonlocal served
            served = True
            return await serve(part)
        result = await rule(Check(self.authorizer, request), request, call, self._view())
        if not served and self._on_refused is not None:
            self._on_refused(request.api_key)
        return result


def served_without_rule(api_keys: Iterable[int]) -> list[int]:
    """The API keys of ``api_keys`` that have no rule (the transport's own aside)."""
    return sorted(k for k in api_keys if k not in RULES and k not in TRANSPORT_APIS)
