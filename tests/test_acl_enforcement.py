"""ACLs enforced in every broker API when ``authorizer.class.name`` is Kafka's StandardAuthorizer
(issue #22; broker/authorization.py).

- The mapping: every API a broker serves has a rule (the next API added must choose one); an API
  without one is refused; per-entry APIs answer each refused entry in its own error field and
  serve the others; Metadata and ListGroups leave out what the principal may not describe.
- A cluster (1 controller + 3 brokers) with a SASL_PLAINTEXT listener that is also the
  inter-broker one, ``super.users=User:admin;User:broker``: alice with WRITE on ``orders``
  produces and bob is refused TOPIC_AUTHORIZATION_FAILED; a consumer without READ on its group is
  refused GROUP_AUTHORIZATION_FAILED and reads once it has it; Metadata for every topic hides
  what alice may not describe; the super user does everything; the PLAINTEXT listener's
  User:ANONYMOUS is refused until an ACL names it.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from helpers import FAST_CLUSTER_CONFIGS, cluster_with_listeners, read_values, wait_for_topic
from raftka.broker import authorization
from raftka.broker.network import Request
from raftka.common import errors
from raftka.common.acl import AclIndex, AclOperation as Op, PatternType, ResourceType as Res, binding
from raftka.common.api import ApiKey
from raftka.common.authorizer import STANDARD_AUTHORIZER
from raftka.common.messages import BROKER_API

# -- the mapping (no cluster) ----------------------------------------------------------------------


def _gate(*bindings: Any, super_users: tuple[str, ...] = (), topics: tuple[str, ...] = ()) -> authorization.AclGate:
    view = SimpleNamespace(topics={name: SimpleNamespace(topic_id=name) for name in topics})
    gate = authorization.AclGate({"super.users": ";".join(super_users), "allow.everyone.if.no.acl.found": False},
                                 lambda: view)
    gate.on_metadata(AclIndex({str(i): b for i, b in enumerate(bindings)}) if bindings else AclIndex.EMPTY)
    return gate


def _allow(principal: str, operation: Op, resource_type: Res, name: str) -> Any:
    return binding(resource_type, name, PatternType.LITERAL, principal, "*", operation, 3)


def _request(api_key: int, version: int, body: dict, principal: str = "User:alice") -> Request:
    return Request(api_key, version, 1, "test", body, ("10.0.0.9", 5555), 1, principal=principal)


def _run(gate: authorization.AclGate, request: Request, answer: Any) -> tuple[Any, list[Any]]:
    """The gate's result and the bodies the handler was called with (``answer(body)`` answers)."""
    seen: list[Any] = []

    async def serve(part: Request) -> Any:
        seen.append(part.body)
        return errors.NONE, answer(part.body)
    return asyncio.run(gate.serve(request, serve)), seen


def test_every_api_the_broker_serves_has_a_rule_and_one_without_is_refused():
    assert authorization.served_without_rule(BROKER_API) == []
    assert authorization.served_without_rule([*BROKER_API, 9999]) == [9999]
    result, seen = _run(_gate(super_users=("User:alice",)), _request(9999, 0, {}), lambda body: {})
    assert seen == [] and result[0] == errors.CLUSTER_AUTHORIZATION_FAILED  # a super user too: no rule, no service


def test_the_authorizer_is_on_only_for_kafkas_standard_authorizer():
    assert authorization.enabled({"authorizer.class.name": STANDARD_AUTHORIZER})
    assert not authorization.enabled({"authorizer.class.name": ""})


def _produce_body(*topics: str) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
            "topic_data": [{"name": t, "partition_data": [{"index": 0, "records": b""}]} for t in topics]}


def _produce_answer(body: dict) -> dict:
    return {"responses": [{"name": t["name"], "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 7}]} for t in body["topic_data"]]}


def test_produce_writes_the_allowed_topics_and_refuses_each_other_one_in_its_own_entry():
    gate = _gate(_allow("User:alice", Op.WRITE, Res.TOPIC, "orders"))
    (code, answer), seen = _run(gate, _request(ApiKey.PRODUCE, 9, _produce_body("orders", "payroll")), _produce_answer)
    assert [t["name"] for t in seen[0]["topic_data"]] == ["orders"]
    by_name = {t["name"]: t["partition_responses"][0] for t in answer["responses"]}
    assert by_name["orders"]["error_code"] == errors.NONE
    assert by_name["payroll"]["error_code"] == errors.TOPIC_AUTHORIZATION_FAILED and by_name["payroll"]["index"] == 0
    # Nothing allowed: the handler still answers (an empty request), every entry refused.
    (code, answer), _ = _run(gate, _request(ApiKey.PRODUCE, 9, _produce_body("payroll"), "User:bob"), _produce_answer)
    assert [t["partition_responses"][0]["error_code"] for t in answer["responses"]] == [errors.TOPIC_AUTHORIZATION_FAILED]


def test_a_replica_fetch_needs_cluster_action_and_a_consumer_fetch_read_on_each_topic():
    gate = _gate(_allow("User:broker", Op.CLUSTER_ACTION, Res.CLUSTER, "kafka-cluster"),
                 _allow("User:alice", Op.READ, Res.TOPIC, "orders"))
    body = {"replica_id": 2, "topics": [{"topic": "orders", "partitions": [{"partition": 0}]}]}
    result, seen = _run(gate, _request(ApiKey.FETCH, 12, body), lambda b: {"responses": []})
    assert result[0] == errors.CLUSTER_AUTHORIZATION_FAILED and not seen
    result, seen = _run(gate, _request(ApiKey.FETCH, 12, body, "User:broker"), lambda b: {"responses": []})
    assert result[0] == errors.NONE and seen
    consumer = {**body, "replica_id": -1}
    (code, answer), _ = _run(gate, _request(ApiKey.FETCH, 12, consumer, "User:bob"), lambda b: {"responses": []})
    assert answer["responses"][0]["partitions"][0]["error_code"] == errors.TOPIC_AUTHORIZATION_FAILED


def test_metadata_hides_topics_the_principal_may_not_describe_and_refuses_named_ones():
    gate = _gate(_allow("User:alice", Op.WRITE, Res.TOPIC, "orders"))  # WRITE implies DESCRIBE

    def answer(body: dict) -> dict:
        return {"topics": [{"name": n, "error_code": 0, "partitions": [{"partition_index": 0}]}
                           for n in ("orders", "payroll")]}
    (code, every), _ = _run(gate, _request(ApiKey.METADATA, 12, {"topics": None}), answer)
    assert [t["name"] for t in every["topics"]] == ["orders"]
    (code, named), _ = _run(gate, _request(ApiKey.METADATA, 12, {"topics": [{"name": "payroll"}]}), answer)
    payroll = [t for t in named["topics"] if t["name"] == "payroll"][0]
    assert payroll["error_code"] == errors.TOPIC_AUTHORIZATION_FAILED and payroll["partitions"] == []


def test_group_apis_need_read_on_the_group_and_list_groups_shows_only_describable_ones():
    gate = _gate(_allow("User:alice", Op.READ, Res.GROUP, "g"))
    for api_key in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP):
        ok, _ = _run(gate, _request(api_key, 0, {"group_id": "g"}), lambda b: {})
        refused, _ = _run(gate, _request(api_key, 0, {"group_id": "other"}), lambda b: {})
        assert (ok[0], refused[0]) == (errors.NONE, errors.GROUP_AUTHORIZATION_FAILED), api_key
    (code, listed), _ = _run(gate, _request(ApiKey.LIST_GROUPS, 4, {"states_filter": []}),
                             lambda b: {"groups": [{"group_id": "g"}, {"group_id": "other"}]})
    assert [g["group_id"] for g in listed["groups"]] == ["g"]
    (code, described), seen = _run(gate, _request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g", "other"]}),
                                   lambda b: {"groups": [{"group_id": g, "error_code": 0} for g in b["groups"]]})
    assert seen[0]["groups"] == ["g"]
    assert {g["group_id"]: g["error_code"] for g in described["groups"]} == {
        "g": errors.NONE, "other": errors.GROUP_AUTHORIZATION_FAILED}


def test_admin_apis_check_on_the_cluster_or_per_resource():
    gate = _gate(_allow("User:ops", Op.CREATE, Res.TOPIC, "logs"), _allow("User:ops", Op.ALTER, Res.CLUSTER,
                                                                          "kafka-cluster"))
    create = {"timeout_ms": 1000, "validate_only": False, "topics": [
        {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
        for n in ("logs", "payroll")]}
    (code, answer), seen = _run(gate, _request(ApiKey.CREATE_TOPICS, 7, create, "User:ops"),
                                lambda b: {"topics": [{"name": t["name"], "error_code": 0} for t in b["topics"]]})
    assert [t["name"] for t in seen[0]["topics"]] == ["logs"]
    assert {t["name"]: t["error_code"] for t in answer["topics"]} == {"logs": 0, "payroll": errors.TOPIC_AUTHORIZATION_FAILED}
    for api_key in (ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.DESCRIBE_ACLS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_CLUSTER):
        allowed, _ = _run(gate, _request(api_key, 0, {}, "User:ops"), lambda b: {})  # ALTER implies DESCRIBE
        refused, _ = _run(gate, _request(api_key, 0, {}, "User:bob"), lambda b: {})
        assert (allowed[0], refused[0]) == (errors.NONE, errors.CLUSTER_AUTHORIZATION_FAILED), api_key
    configs = {"include_synonyms": False, "include_documentation": False, "resources": [
        {"resource_type": 2, "resource_name": "logs", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "1", "configuration_keys": None}]}
    (code, answer), seen = _run(gate, _request(ApiKey.DESCRIBE_CONFIGS, 4, configs, "User:ops"),
                                lambda b: {"results": []})
    assert seen[0]["resources"] == [] and sorted(r["error_code"] for r in answer["results"]) == [
        errors.TOPIC_AUTHORIZATION_FAILED, errors.CLUSTER_AUTHORIZATION_FAILED]


def test_an_idempotent_producer_needs_idempotent_write_on_the_cluster_or_write_on_a_topic():
    body = {"transactional_id": None, "transaction_timeout_ms": 1000, "producer_id": -1, "producer_epoch": -1}
    gate = _gate(_allow("User:alice", Op.WRITE, Res.TOPIC, "orders"),
                 _allow("User:carol", Op.IDEMPOTENT_WRITE, Res.CLUSTER, "kafka-cluster"), topics=("orders",))
    for principal, expected in (("User:alice", errors.NONE), ("User:carol", errors.NONE),
                                ("User:bob", errors.CLUSTER_AUTHORIZATION_FAILED)):
        result, _ = _run(gate, _request(ApiKey.INIT_PRODUCER_ID, 4, body, principal), lambda b: {"producer_id": 1})
        assert result[0] == expected, principal


def test_a_refusal_is_logged_once_a_minute_per_cause(caplog):
    import logging
    gate = _gate(_allow("User:alice", Op.READ, Res.GROUP, "g"))
    with caplog.at_level(logging.INFO, logger="raftka.broker.authorization"):
        for _ in range(5):
            _run(gate, _request(ApiKey.HEARTBEAT, 0, {"group_id": f"never-{id(caplog)}"}, "User:mallory"), lambda b: {})
    lines = [r.getMessage() for r in caplog.records if "User:mallory" in r.getMessage()]
    assert len(lines) == 1 and "READ on GROUP" in lines[0] and "10.0.0.9" in lines[0], lines


# -- a cluster --------------------------------------------------------------------------------------

WAIT_S = 40.0
SASL = "SASL_PLAINTEXT"
PASSWORDS = {"admin": "admin-Secret-1", "alice": "alice-Secret-2", "bob": "bob-Secret-3", "broker": "broker-Secret-4"}
JAAS = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
        f'password="{PASSWORDS["broker"]}";')


def _make_users_on_the_controller(cluster: Any) -> None:
    """Bootstrap: the users are made on the controller's RPC port (private), as no principal can
    yet log in to be a super user on a broker."""
    from raftka.client.aio.admin import _upsertion_body
    from raftka.client import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from raftka.common.transport import Connection
    host, port = cluster.controller_address(cluster.controller_ids[0])
    body = {"deletions": [], "upsertions": [_upsertion_body(UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password)) for user, password in PASSWORDS.items()]}

    async def send() -> tuple[int, dict]:
        conn = await Connection.open(host, port, kafka_versions={ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0})
        try:
            return await conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body, timeout_ms=10_000)
        finally:
            await conn.close()
    code, answer = asyncio.run(send())
    assert code == errors.NONE and all(r["error_code"] == errors.NONE for r in answer["results"]), answer


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    broker_configs = {"inter.broker.listener.name": SASL, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                      f"listener.name.{SASL.lower()}.scram-sha-512.sasl.jaas.config": JAAS,
                      "replica.fetch.backoff.ms": 200, "authorizer.class.name": STANDARD_AUTHORIZER,
                      "super.users": "User:admin;User:broker"}
    made = cluster_with_listeners(SASL).start(tmp_path_factory.mktemp("acl-enforcement"), controllers=1, brokers=3,
                                              configs=FAST_CLUSTER_CONFIGS, broker_configs=broker_configs)
    try:
        _make_users_on_the_controller(made)
        yield made
    finally:
        made.close()


def _as(cluster: Any, user: str) -> dict[str, Any]:
    return {"bootstrap_servers": cluster.bootstrap(SASL), "security_protocol": SASL, "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]}


def _wait(what: str, ok: Any) -> Any:
    from raftka.cluster import wait_until
    return wait_until(ok, WAIT_S, what=what)


def _acl(principal: str, operation: Any, resource_type: Any, name: str) -> Any:
    from raftka.client.acl import ACL, ACLPermissionType, ResourcePattern
    return ACL(principal, "*", operation, ACLPermissionType.ALLOW, ResourcePattern(resource_type, name))


@pytest.fixture(scope="module")
def topics(cluster) -> dict[str, str]:
    """``orders`` (alice may write and read it) and ``payroll`` (no ACL), made by the super user."""
    from raftka.client import AdminClient, NewTopic
    from raftka.client.acl import ACLOperation, ResourceType
    from raftka.common.errors import SaslAuthenticationFailedError
    names = {"orders": f"orders-{uuid.uuid4().hex[:6]}", "payroll": f"payroll-{uuid.uuid4().hex[:6]}"}

    def admin_ready() -> bool:
        try:
            with AdminClient(**_as(cluster, "admin"), request_timeout_ms=10_000) as admin:
                return bool(admin.describe_cluster()["brokers"])
        except SaslAuthenticationFailedError:
            return False
    _wait("the admin's login", admin_ready)
    with AdminClient(**_as(cluster, "admin")) as admin:
        admin.create_topics([NewTopic(n, 1, 3) for n in names.values()])
        for name in names.values():
            wait_for_topic(admin, name, 1)
        made = admin.create_acls([_acl("User:alice", ACLOperation.WRITE, ResourceType.TOPIC, names["orders"]),
                                  _acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, names["orders"])])
        assert not made["failed"], made
    return names


def _produce(cluster: Any, user: str, topic: str) -> None:
    from raftka.client import Producer
    with Producer(**_as(cluster, user), acks="all", max_block_ms=10_000) as producer:
        producer.send(topic, b"v", key=b"k").get(WAIT_S)


def test_alice_writes_her_topic_and_bob_is_refused_topic_authorization_failed(cluster, topics):
    from raftka.common.errors import TopicAuthorizationFailedError

    def alice_writes() -> bool:
        try:
            _produce(cluster, "alice", topics["orders"])
            return True
        except TopicAuthorizationFailedError:  # the brokers have not replayed the ACL yet
            return False
    _wait("alice's first produce", alice_writes)
    with pytest.raises(TopicAuthorizationFailedError):
        _produce(cluster, "bob", topics["orders"])
    with pytest.raises(TopicAuthorizationFailedError):
        _produce(cluster, "alice", topics["payroll"])


def test_metadata_for_every_topic_shows_alice_only_what_she_may_describe(cluster, topics):
    from raftka.client import AdminClient
    with AdminClient(**_as(cluster, "alice")) as alice:
        listed = set(alice.list_topics())
    assert topics["orders"] in listed and topics["payroll"] not in listed and "__consumer_offsets" not in listed
    with AdminClient(**_as(cluster, "admin")) as admin:
        assert {topics["orders"], topics["payroll"]} <= set(admin.list_topics())


def test_a_consumer_needs_read_on_its_group(cluster, topics):
    from raftka.client import AdminClient, Consumer
    from raftka.client.acl import ACLOperation, ResourceType
    from raftka.common.errors import GroupAuthorizationFailedError
    group = f"g-{uuid.uuid4().hex[:6]}"
    _wait("a record in orders", lambda: _produce(cluster, "alice", topics["orders"]) or True)
    consumer = Consumer(topics["orders"], **_as(cluster, "alice"), group_id=group, auto_offset_reset="earliest")
    try:
        with pytest.raises(GroupAuthorizationFailedError):  # not retried: Kafka's consumer raises it too
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=1000)
    finally:
        consumer.close()
    with AdminClient(**_as(cluster, "admin")) as admin:
        admin.create_acls([_acl("User:alice", ACLOperation.READ, ResourceType.GROUP, group)])

    def reads() -> bool:
        reader = Consumer(topics["orders"], **_as(cluster, "alice"), group_id=group, auto_offset_reset="earliest",
                          consumer_timeout_ms=15_000)
        try:
            return bool(read_values(reader, 1))
        except GroupAuthorizationFailedError:
            return False
        finally:
            reader.close()
    _wait("alice reading in her group", reads)


def test_the_super_user_does_everything_and_alice_cannot_administer(cluster, topics):
    from raftka.client import AdminClient, NewTopic
    from raftka.client.acl import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                                   ResourcePatternFilter, ResourceType)
    from raftka.common.errors import ClusterAuthorizationFailedError
    name = f"admin-{uuid.uuid4().hex[:6]}"
    every_acl = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                          ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
    with AdminClient(**_as(cluster, "admin")) as admin:
        admin.create_topics([NewTopic(name, 1, 3)])
        wait_for_topic(admin, name, 1)
        assert name in admin.describe_configs([name])
        assert admin.describe_cluster()["brokers"]
        assert len(admin.describe_acls(every_acl)[0]) >= 2
        assert "alice" in admin.describe_user_scram_credentials()
        admin.delete_topics([name])
    _produce(cluster, "admin", topics["payroll"])
    with AdminClient(**_as(cluster, "alice")) as alice:
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.describe_acls(every_acl)
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.describe_cluster()


def test_the_plaintext_listeners_anonymous_principal_is_refused_until_an_acl_names_it(cluster, topics):
    from raftka.client import AdminClient, Producer
    from raftka.client.acl import ACLOperation, ResourceType
    from raftka.common.errors import TopicAuthorizationFailedError
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as anonymous:
        assert topics["orders"] not in set(anonymous.list_topics())
    with pytest.raises(TopicAuthorizationFailedError):
        with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", max_block_ms=10_000) as producer:
            producer.send(topics["payroll"], b"v").get(WAIT_S)
    with AdminClient(**_as(cluster, "admin")) as admin:
        admin.create_acls([_acl("User:ANONYMOUS", ACLOperation.WRITE, ResourceType.TOPIC, topics["payroll"])])

    def writes() -> bool:
        try:
            with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", max_block_ms=10_000) as producer:
                producer.send(topics["payroll"], b"v").get(WAIT_S)
            return True
        except TopicAuthorizationFailedError:
            return False
    _wait("User:ANONYMOUS writing once an ACL names it", writes)


def test_kafka_python_gets_its_own_topic_authorization_failed_error(cluster, topics):
    kafka = pytest.importorskip("kafka")
    import kafka.errors
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap(SASL), security_protocol=SASL,
                                   sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="bob",
                                   sasl_plain_password=PASSWORDS["bob"], max_block_ms=10_000)
    try:
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            producer.send(topics["orders"], b"v").get(timeout=WAIT_S)
    finally:
        producer.close(timeout=5)


def test_kafka_python_and_confluent_kafka_consumers_without_the_group_acl_get_group_authorization_failed(cluster,
                                                                                                         topics):
    kafka = pytest.importorskip("kafka")
    confluent_kafka = pytest.importorskip("confluent_kafka")
    import kafka.errors
    group = f"g3p-{uuid.uuid4().hex[:6]}"  # alice may read the topic, not this group
    consumer = kafka.KafkaConsumer(topics["orders"], bootstrap_servers=cluster.bootstrap(SASL), group_id=group,
                                   security_protocol=SASL, sasl_mechanism="SCRAM-SHA-512",
                                   sasl_plain_username="alice", sasl_plain_password=PASSWORDS["alice"],
                                   auto_offset_reset="earliest")
    try:
        with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=1000)
    finally:
        consumer.close()
    cconsumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap(SASL), "group.id": group, "security.protocol": SASL,
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORDS["alice"],
        "auto.offset.reset": "earliest"})
    try:
        cconsumer.subscribe([topics["orders"]])
        codes = set()
        deadline = time.monotonic() + WAIT_S
        while confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED not in codes and time.monotonic() < deadline:
            message = cconsumer.poll(1.0)
            if message is not None and message.error() is not None:
                codes.add(message.error().code())
        assert confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED in codes, codes
    finally:
        cconsumer.close()
