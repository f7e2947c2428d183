"""ACLs: the model, the authorizer, the metadata records, the controller's three APIs, the admin
client, kafka-python's admin and `raftka acls`.

In one process: binding and filter checks (Kafka's numbers, INVALID_REQUEST naming the field),
filter matching (ANY, MATCH, exact), the authorizer's StandardAuthorizer semantics by example and
against a naive model that scans every binding (hypothesis), its cost per call with 10,000
bindings, AccessControlEntryRecord / RemoveAccessControlEntryRecord replay (idempotent), snapshots
and deltas that keep them, the config keys, and the active controller's decisions with a Raft
stand-in that commits at once.

Against a real cluster (1 controller, 3 brokers): create, describe with filters, delete with
filters through Raftka's admin client (forwarded by brokers), errors, kafka-python's admin, and
the CLI end to end.
"""
from __future__ import annotations

import asyncio
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.common import acl, errors
from raftka.common.acl import (AclBinding, AclBindingFilter, AclIndex, AclOperation, AclPermissionType, PatternType,
                               ResourceType)
from raftka.common.api import ApiKey
from raftka.common.authorizer import STANDARD_AUTHORIZER, Authorizer, parse_super_users
from raftka.common.codec import decoder, encoder
from raftka.common.messages import KAFKA_API
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage, image_from_bytes, image_to_bytes
from raftka.raft_meta.metadata.records import (AccessControlEntryRecord, RemoveAccessControlEntryRecord,
                                               decode_entry, encode_entry)

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def b(rtype=T, name="orders", pattern=LIT, principal="User:alice", host="*", op=Op.READ, permission=ALLOW):
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def index(*bindings):
    return AclIndex({f"{i:032x}": x for i, x in enumerate(bindings)})


# -- the model -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, word", [
    ((1, "t", 3, "User:a", "*", 3, 3), "resource_type"),           # ANY: filters only
    ((9, "t", 3, "User:a", "*", 3, 3), "resource_type"),
    ((2, "t", 1, "User:a", "*", 3, 3), "pattern_type"),            # ANY
    ((2, "t", 2, "User:a", "*", 3, 3), "pattern_type"),            # MATCH
    ((2, "t", 3, "User:a", "*", 1, 3), "operation"),
    ((2, "t", 3, "User:a", "*", 13, 3), "operation"),
    ((2, "t", 3, "User:a", "*", 3, 1), "permission_type"),
    ((2, "", 3, "User:a", "*", 3, 3), "resource_name"),
    ((4, "other", 3, "User:a", "*", 3, 3), "kafka-cluster"),
    ((2, "t", 3, "alice", "*", 3, 3), "principal"),
    ((2, "t", 3, "User:", "*", 3, 3), "principal"),
    ((2, "t", 3, "User:a", "example.com", 3, 3), "host"),
    ((2, "t", 3, "User:a", "", 3, 3), "host"),
])
def test_a_binding_kafka_refuses_is_invalid_request_naming_the_field(fields, word):
    with pytest.raises(errors.InvalidRequestError) as caught:
        acl.binding(*fields)
    assert word in caught.value.message


def test_a_valid_binding_carries_kafkas_enums():
    made = acl.binding(4, "kafka-cluster", 3, "User:*", "10.0.0.1", 12, 2)
    assert made == AclBinding(C, "kafka-cluster", LIT, "User:*", "10.0.0.1", Op.IDEMPOTENT_WRITE, DENY)
    assert acl.binding(2, "t", 4, "User:a", "::1", 2, 3).pattern_type is PRE
    with pytest.raises(errors.InvalidRequestError, match="operation"):
        acl.binding_filter(1, None, 1, None, None, 99, 1)
    with pytest.raises(errors.InvalidRequestError, match="principal_filter"):
        acl.binding_filter(1, None, 1, "nobody", None, 1, 1)


def test_filters_select_by_any_exact_and_match():
    lit, star, pre = b(name="orders"), b(name="*"), b(name="ord", pattern=PRE)
    other = b(name="orders-eu", rtype=G, principal="User:bob", op=Op.WRITE, permission=DENY)
    everything = [lit, star, pre, other]

    def selected(**kw):
        return [x for x in everything if AclBindingFilter(**kw).matches(x)]
    assert selected() == everything
    assert selected(resource_type=T, resource_name="orders") == [lit]  # ANY pattern: the exact name
    assert selected(resource_type=T, resource_name="orders", pattern_type=PatternType.MATCH) == [lit, star, pre]
    assert selected(resource_type=T, resource_name="x", pattern_type=PatternType.MATCH) == [star]
    assert selected(pattern_type=PRE) == [pre]
    assert selected(principal="User:bob") == [other] == selected(operation=Op.WRITE) == selected(permission=DENY)
    assert selected(host="10.0.0.1") == []  # a filter's host is exact: * in a binding is not a wildcard here


# -- the authorizer ------------------------------------------------------------------------------------

def test_deny_wins_and_patterns_principals_hosts_match_as_kafkas_standard_authorizer():
    acls = index(b(name="orders", op=Op.READ),
                 b(name="logs-", pattern=PRE, principal="User:*", op=Op.WRITE),
                 b(name="logs-secret", principal="User:bob", op=Op.ALL, permission=DENY),
                 b(rtype=G, name="*", principal="User:carol", host="10.0.0.9", op=Op.READ))
    auth = Authorizer(acls).authorize
    assert auth("User:alice", "1.2.3.4", Op.READ, T, "orders")
    assert not auth("User:bob", "1.2.3.4", Op.READ, T, "orders")  # the resource has ACLs, none for bob
    assert not auth("User:alice", "1.2.3.4", Op.WRITE, T, "orders")
    assert auth("User:anyone", "1.2.3.4", Op.WRITE, T, "logs-app")  # PREFIXED, User:*
    assert not auth("User:anyone", "1.2.3.4", Op.WRITE, T, "logs")  # shorter than the prefix
    assert auth("User:alice", "1.2.3.4", Op.WRITE, T, "logs-secret")
    assert not auth("User:bob", "1.2.3.4", Op.WRITE, T, "logs-secret")  # DENY ALL beats the prefix's ALLOW
    assert auth("User:carol", "10.0.0.9", Op.READ, G, "any-group")  # LITERAL *
    assert not auth("User:carol", "10.0.0.8", Op.READ, G, "any-group")  # another host
    assert not auth("User:alice", "1.2.3.4", Op.READ, X, "tx")  # no ACL names it: closed by default


def test_implied_operations_super_users_and_the_no_acl_default():
    acls = index(b(name="t", op=Op.WRITE), b(name="c", op=Op.ALTER_CONFIGS), b(name="a", op=Op.ALL),
                 b(name="d", op=Op.DESCRIBE), b(name="d", op=Op.READ, permission=DENY))
    auth = Authorizer(acls, super_users=parse_super_users("User:admin; User:ops"),
                      allow_everyone_if_no_acl_found=True).authorize
    assert auth("User:alice", "h", Op.DESCRIBE, T, "t")  # WRITE implies DESCRIBE
    assert not auth("User:alice", "h", Op.READ, T, "t")
    assert auth("User:alice", "h", Op.DESCRIBE_CONFIGS, T, "c") and not auth("User:alice", "h", Op.DESCRIBE, T, "c")
    assert all(auth("User:alice", "h", op, T, "a") for op in Op if op is not Op.ANY)  # ALL implies everything
    assert auth("User:alice", "h", Op.DESCRIBE, T, "d")  # a DENY of READ does not deny DESCRIBE
    assert not auth("User:alice", "h", Op.READ, T, "d")
    assert auth("User:admin", "h", Op.READ, T, "d") and auth("User:ops", "h", Op.ALTER, C, "kafka-cluster")
    assert auth("User:alice", "h", Op.READ, T, "unnamed")  # allow.everyone.if.no.acl.found
    assert not Authorizer(acls).authorize("User:alice", "h", Op.READ, T, "unnamed")


def _naive(bindings, super_users, allow_if_none, principal, host, op, rtype, name):
    """Kafka's rules read straight off, scanning every binding."""
    if principal in super_users:
        return True
    applies = [x for x in bindings if x.resource_type == rtype and (
        (x.pattern_type == LIT and x.resource_name in (name, "*")) or
        (x.pattern_type == PRE and name.startswith(x.resource_name)))]
    if not applies:
        return allow_if_none
    mine = [x for x in applies if x.principal in (principal, "User:*") and x.host in (host, "*")]
    if any(x.permission == DENY and x.operation in (op, Op.ALL) for x in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
               Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}.get(op, set())
    return any(x.permission == ALLOW and x.operation in ({op, Op.ALL} | implied) for x in mine)


NAMES = st.sampled_from(["a", "ab", "abc", "b", "ba", "*", "abd"])
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*"])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
OPERATIONS = st.sampled_from([op for op in Op if op is not Op.ANY])
BINDINGS = st.builds(AclBinding, st.sampled_from([T, G]), NAMES, st.sampled_from([LIT, PRE]), PRINCIPALS, HOSTS,
                     OPERATIONS, st.sampled_from([ALLOW, DENY]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bindings=st.lists(BINDINGS, max_size=12), allow_if_none=st.booleans(),
       principal=st.sampled_from(["User:alice", "User:bob", "User:admin"]),
       host=st.sampled_from(["10.0.0.1", "10.0.0.2"]), op=OPERATIONS, rtype=st.sampled_from([T, G]),
       name=st.sampled_from(["a", "ab", "abc", "abcd", "b", "bab", "*", "x"]))
def test_the_authorizer_agrees_with_a_naive_scan_of_every_binding(bindings, allow_if_none, principal, host, op,
                                                                   rtype, name):
    bindings = list(dict.fromkeys(bindings))
    authorizer = Authorizer(index(*bindings), super_users={"User:admin"}, allow_everyone_if_no_acl_found=allow_if_none)
    assert authorizer.authorize(principal, host, op, rtype, name) == \
        _naive(bindings, {"User:admin"}, allow_if_none, principal, host, op, rtype, name)


def test_a_decision_with_ten_thousand_bindings_costs_microseconds():
    rng = random.Random(22)
    bindings = []
    for i in range(10_000):
        pattern = PRE if i % 10 == 0 else LIT
        name = f"team{i % 100}-" if pattern is PRE else f"team{i % 100}-topic{i}"
        bindings.append(b(name=name, pattern=pattern, principal=f"User:u{i % 500}", op=rng.choice([Op.READ, Op.WRITE])))
    authorizer = Authorizer(index(*bindings))
    calls = [(f"User:u{rng.randrange(500)}", "10.0.0.1", Op.READ, T,
              f"team{rng.randrange(100)}-topic{rng.randrange(10_000)}") for _ in range(20_000)]
    started = time.perf_counter()
    for call in calls:
        authorizer.authorize(*call)
    per_call_us = (time.perf_counter() - started) / len(calls) * 1e6
    print(f"authorize: {per_call_us:.2f} us per call with 10,000 bindings")
    assert per_call_us < 50  # ~2 us here; a scan of every binding would be ~1,000 us


# -- metadata records, snapshots, deltas ---------------------------------------------------------------

ID1, ID2, ID3 = "1" * 32, "2" * 32, "3" * 32


def replayed(*records, image=MetadataImage.EMPTY):
    delta = MetadataDelta(image)
    return delta, [delta.replay(record, 10 + i) for i, record in enumerate(records)]


def test_acl_records_round_trip_and_replay_idempotently():
    alice, bob = b(), b(principal="User:bob", name="p-", pattern=PRE, host="::1", op=Op.ALL, permission=DENY)
    records = [AccessControlEntryRecord(ID1, alice), AccessControlEntryRecord(ID2, bob),
               RemoveAccessControlEntryRecord(ID3)]
    assert decode_entry(encode_entry(records)) == records
    delta, results = replayed(*records, AccessControlEntryRecord(ID1, alice),  # a retried commit
                              AccessControlEntryRecord(ID3, alice))  # the same binding under a new id
    assert all(r == {} for r in results) and delta.acls_changed
    image = delta.apply()
    assert dict(image.acls.bindings) == {ID1: alice, ID2: bob}
    later, results = replayed(RemoveAccessControlEntryRecord(ID1), RemoveAccessControlEntryRecord(ID1), image=image)
    assert results == [{}, {}] and dict(later.apply().acls.bindings) == {ID2: bob}
    untouched = replayed(RemoveAccessControlEntryRecord(ID3), image=image)[0].apply()
    assert untouched.acls is image.acls  # no ACL change: the index is shared, not rebuilt


def test_replay_refuses_a_bad_binding_or_an_id_holding_another_and_changes_nothing():
    image = replayed(AccessControlEntryRecord(ID1, b()))[0].apply()
    for record in (AccessControlEntryRecord(ID2, b(principal="alice")),
                   AccessControlEntryRecord(ID1, b(op=Op.WRITE))):
        delta, [result] = replayed(record, image=image)
        assert result["error"] == errors.INVALID_REQUEST and not delta.acls_changed
    bad = AccessControlEntryRecord(ID2, b(principal="alice")).SCHEMA
    assert bad.name == "AccessControlEntryRecord" and bad.api_key == 18


def test_snapshots_keep_every_acl_and_a_delta_between_images_sees_the_change():
    cluster_action = b(rtype=C, name="kafka-cluster", op=Op.CLUSTER_ACTION)
    image = replayed(AccessControlEntryRecord(ID2, b(name="z")), AccessControlEntryRecord(ID1, cluster_action))[0].apply()
    restored = image_from_bytes(image_to_bytes(image))
    assert restored == image and restored.acls.bindings == image.acls.bindings
    assert Authorizer(restored.acls).authorize("User:alice", "h", Op.CLUSTER_ACTION, C, "kafka-cluster")
    assert MetadataDelta.between(MetadataImage.EMPTY, restored).acls_changed
    assert not MetadataDelta.between(image, restored).acls_changed


def test_the_config_keys():
    from raftka.common.errors import ConfigError
    from raftka.common.server_config import SERVER_CONFIGS
    keys = SERVER_CONFIGS.keys
    assert keys["authorizer.class.name"].default == "" and keys["allow.everyone.if.no.acl.found"].default is False
    assert keys["authorizer.class.name"].validator(STANDARD_AUTHORIZER) is None
    assert STANDARD_AUTHORIZER in keys["authorizer.class.name"].validator("kafka.security.authorizer.AclAuthorizer")
    assert "User:<name>" in keys["super.users"].validator("admin")
    assert parse_super_users("User:a;User:b ; ") == {"User:a", "User:b"}
    with pytest.raises(ConfigError, match="super.users"):
        parse_super_users("User:a,User:b")
    from raftka.common.server_config import server_config
    base = {"process.roles": "controller", "node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9301",
            "listeners": "CONTROLLER://127.0.0.1:9401", "log.dirs": "unused", "controller.quorum.secret": "s"}
    config = server_config({**base, "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:root",
                            "allow.everyone.if.no.acl.found": "true"})
    authorizer = Authorizer.from_config(config, index(b(name="t")))
    assert authorizer.super_users == {"User:root"} and authorizer.allow_everyone_if_no_acl_found
    assert not authorizer.authorize("User:bob", "h", Op.READ, T, "t")  # named by an ACL, not bob's
    assert authorizer.authorize("User:bob", "h", Op.READ, T, "u")  # named by none: open
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        server_config({**base, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})


# -- the active controller's decisions ---------------------------------------------------------------

def handle(service, api_key, body, version=3):
    """``body`` through the codec both ways at ``version``, as behind the real listener."""
    request, response = KAFKA_API[api_key]
    body = decoder(request, version)(encoder(request, version)(body))
    code, out = asyncio.run(service.handle(api_key, version, body))
    if code != errors.NONE:
        return code, out
    return code, decoder(response, version)(encoder(response, version)(out))


def creation(rtype=2, name="orders", pattern=3, principal="User:alice", host="*", op=3, permission=3):
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern, "principal": principal,
            "host": host, "operation": op, "permission_type": permission}


def acl_filter(rtype=1, name=None, pattern=1, principal=None, host=None, op=1, permission=1):
    return {"resource_type_filter": rtype, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": principal, "host_filter": host, "operation": op, "permission_type": permission}


@pytest.fixture
def controller():
    from test_controller_decisions import controller as make
    quorum, raft = make()
    return quorum, raft


def test_creations_succeed_or_fail_one_by_one_and_duplicates_are_stored_once(controller):
    quorum, raft = controller
    _, answer = handle(quorum.service, ApiKey.CREATE_ACLS, {"creations": [
        creation(), creation(op=1), creation(), creation(name="o-", pattern=4, host="10.1.2.3"),
        creation(principal="bob"), creation(rtype=4, name="c")]})
    codes = [r["error_code"] for r in answer["results"]]
    assert codes == [0, errors.INVALID_REQUEST, 0, 0, errors.INVALID_REQUEST, errors.INVALID_REQUEST]
    assert "operation" in answer["results"][1]["error_message"]
    assert len(quorum.image.acls) == 2
    entries = len(raft.entries)
    _, again = handle(quorum.service, ApiKey.CREATE_ACLS, {"creations": [creation()]}, version=1)
    assert again["results"] == [{"error_code": 0, "error_message": None}] and len(raft.entries) == entries


def test_describe_groups_by_resource_and_delete_returns_what_each_filter_matched(controller):
    quorum, _ = controller
    handle(quorum.service, ApiKey.CREATE_ACLS, {"creations": [
        creation(), creation(op=4), creation(principal="User:bob"), creation(name="o", pattern=4),
        creation(rtype=3, name="g")]})
    _, described = handle(quorum.service, ApiKey.DESCRIBE_ACLS, acl_filter(rtype=2, name="orders", pattern=2))
    assert [(r["resource_name"], r["pattern_type"], len(r["acls"])) for r in described["resources"]] == \
        [("o", 4, 1), ("orders", 3, 3)]
    _, described = handle(quorum.service, ApiKey.DESCRIBE_ACLS, acl_filter(principal="User:bob"), version=1)
    assert [a["principal"] for r in described["resources"] for a in r["acls"]] == ["User:bob"]
    code, bad = handle(quorum.service, ApiKey.DESCRIBE_ACLS, acl_filter(rtype=7))
    assert errors.INVALID_REQUEST in (code, bad.get("error_code")) and "resource_type_filter" in bad["error_message"]
    _, deleted = handle(quorum.service, ApiKey.DELETE_ACLS, {"filters": [
        acl_filter(rtype=2, name="orders", pattern=3, op=3), acl_filter(rtype=2), acl_filter(host="bad host")]})
    first, second, third = deleted["filter_results"]
    assert {(m["principal"], m["operation"]) for m in first["matching_acls"]} == {("User:alice", 3), ("User:bob", 3)}
    assert [(m["resource_name"], m["operation"]) for m in second["matching_acls"]] in (
        [("orders", 4), ("o", 3)], [("o", 3), ("orders", 4)])  # not listed twice
    assert third["error_code"] == errors.INVALID_REQUEST and "host_filter" in third["error_message"]
    assert [x.resource_type for x in quorum.image.acls.bindings.values()] == [G]


def test_a_controller_that_is_not_active_says_not_controller_in_every_entry(controller):
    quorum, raft = controller
    raft.is_leader = False
    from raftka.common.messages.controller import answer_error
    _, created = handle(quorum.service, ApiKey.CREATE_ACLS, {"creations": [creation(), creation(op=1)]})
    assert [r["error_code"] for r in created["results"]] == [errors.NOT_CONTROLLER] * 2
    _, deleted = handle(quorum.service, ApiKey.DELETE_ACLS, {"filters": [acl_filter()]})
    assert deleted["filter_results"][0]["error_code"] == errors.NOT_CONTROLLER
    assert answer_error(created) == answer_error(deleted) == errors.NOT_CONTROLLER and not raft.entries


# -- a real cluster ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("acls", controllers=1, brokers=3, subdir=".raftka")


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster, request_timeout_ms=30_000)


@pytest.mark.timeout(300)
def test_the_admin_client_creates_describes_and_deletes_acls_through_any_broker(cluster, admin):
    from raftka.client import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                               IllegalArgumentError, ResourcePattern, ResourcePatternFilter, ResourceType)
    from raftka.client.errors import InvalidRequestError
    orders = ResourcePattern(ResourceType.TOPIC, "orders")
    prefix = ResourcePattern(ResourceType.TOPIC, "ord", ACLResourcePatternType.PREFIXED)
    wanted = [ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW, orders),
              ACL("User:bob", "10.0.0.1", ACLOperation.WRITE, ACLPermissionType.DENY, orders),
              ACL("User:*", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW, prefix),
              ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                  ResourcePattern(ResourceType.GROUP, "readers"))]
    bad = ACL("alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW, orders)
    result = admin.create_acls(wanted + [bad])
    assert result["succeeded"] == wanted
    [(failed, error)] = result["failed"]
    assert failed is bad and isinstance(error, InvalidRequestError) and "principal" in error.message
    with pytest.raises(IllegalArgumentError):
        ACL("User:a", "*", ACLOperation.ANY, ACLPermissionType.ALLOW, orders)

    def described(**kw):
        pattern = ResourcePatternFilter(kw.pop("rtype", ResourceType.ANY), kw.pop("name", None),
                                        kw.pop("pattern", ACLResourcePatternType.ANY))
        found, error = admin.describe_acls(ACLFilter(kw.get("principal"), None, kw.get("op", ACLOperation.ANY),
                                                     ACLPermissionType.ANY, pattern))
        assert error is None
        return found
    assert sorted(map(repr, described())) == sorted(map(repr, wanted))
    assert set(described(rtype=ResourceType.TOPIC, name="orders", pattern=ACLResourcePatternType.MATCH)) == \
        set(wanted[:3])
    assert described(principal="User:bob") == [wanted[1]]
    assert described(rtype=ResourceType.GROUP) == [wanted[3]]
    with pytest.raises(InvalidRequestError, match="principal_filter"):
        described(principal="nobody")

    deleted = admin.delete_acls([ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                           ResourcePatternFilter(ResourceType.TOPIC, "orders",
                                                                 ACLResourcePatternType.LITERAL)),
                                 ACLFilter("User:nobody", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                           ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))])
    assert set(deleted[0][1]) == set(wanted[:2]) and deleted[0][2] is None and deleted[1][1:] == ([], None)
    assert set(described()) == {wanted[2], wanted[3]}
    admin.delete_acls([ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                 ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))])
    assert described() == []


@pytest.mark.timeout(120)
def test_kafka_python_creates_describes_and_deletes_acls(cluster):
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter, ResourceType)
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30_000)
    try:
        entry = ACL("User:kp", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED))
        result = client.create_acls([entry])
        assert result["succeeded"] == [entry] and not result["failed"]
        every = ACLFilter("User:kp", None, ACLOperation.ANY, ACLPermissionType.ANY,
                          ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
        found, _ = client.describe_acls(every)
        assert found == [entry]
        [(_, matched, error)] = client.delete_acls([every])
        assert matched == [entry] and error.errno == 0
        assert client.describe_acls(every)[0] == []
    finally:
        client.close()


@pytest.mark.timeout(180)
def test_raftka_acls_add_list_remove_and_its_errors_are_one_line(cluster):
    from test_cli_tools import ok, one_line_error, tool
    out = ok(tool(cluster, "acls", "add", "--allow-principal", "User:cli", "--allow-principal", "User:cli2",
                  "--operation", "Read", "--operation", "describe", "--topic", "cli-t", "--group", "cli-g"))
    assert out.startswith("Added 8 ACLs")
    ok(tool(cluster, "acls", "add", "--deny-principal", "User:cli", "--deny-host", "10.9.9.9", "--operation",
            "IdempotentWrite", "--cluster"))
    ok(tool(cluster, "acls", "add", "--allow-principal", "User:cli", "--operation", "All", "--topic", "cli-",
            "--resource-pattern-type", "prefixed"))
    listed = ok(tool(cluster, "acls", "list", "--principal", "User:cli")).splitlines()
    assert listed[0].split() == ["RESOURCE_TYPE", "PATTERN", "NAME", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
    rows = {tuple(line.split()) for line in listed[1:]}
    assert ("CLUSTER", "LITERAL", "kafka-cluster", "User:cli", "10.9.9.9", "IDEMPOTENT_WRITE", "DENY") in rows
    assert ("TOPIC", "PREFIXED", "cli-", "User:cli", "*", "ALL", "ALLOW") in rows and len(rows) == 6
    matched = ok(tool(cluster, "acls", "list", "--topic", "cli-t", "--resource-pattern-type", "match"))
    assert "cli-\t" not in matched and " cli- " in matched and "User:cli2" in matched
    removed = ok(tool(cluster, "acls", "remove", "--allow-principal", "User:cli2", "--topic", "cli-t"))
    assert removed.startswith("Removed 2 ACLs") and "User:cli2" in removed
    assert "User:cli2" not in ok(tool(cluster, "acls", "list", "--topic", "cli-t"))
    assert ok(tool(cluster, "acls", "remove", "--topic", "nothing-here")).strip() == "Removed 0 ACLs."
    one_line_error(tool(cluster, "acls", "add", "--allow-principal", "cli", "--operation", "Read", "--topic", "t"),
                   "principal", "INVALID_REQUEST")
    one_line_error(tool(cluster, "acls", "add", "--allow-principal", "User:x", "--operation", "Fly", "--topic", "t"),
                   "Fly")
    one_line_error(tool(cluster, "acls", "add", "--allow-principal", "User:x", "--operation", "Read"), "resource")
    one_line_error(tool(cluster, "acls", "add", "--allow-principal", "User:x", "--allow-host", "host.example",
                        "--operation", "Read", "--topic", "t"), "host")


@pytest.mark.timeout(120)
def test_confluent_kafka_creates_describes_and_deletes_acls(cluster):
    from confluent_kafka.admin import (AclBinding as CkBinding, AclBindingFilter as CkFilter, AclOperation,
                                       AclPermissionType as CkPermission, AdminClient, ResourcePatternType,
                                       ResourceType as CkResourceType)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    entry = CkBinding(CkResourceType.TOPIC, "ck-topic", ResourcePatternType.LITERAL, "User:ck", "*",
                      AclOperation.READ, CkPermission.ALLOW)
    assert client.create_acls([entry])[entry].result(timeout=30) is None
    every = CkFilter(CkResourceType.ANY, None, ResourcePatternType.ANY, "User:ck", None, AclOperation.ANY,
                     CkPermission.ANY)
    assert client.describe_acls(every).result(timeout=30) == [entry]
    assert client.delete_acls([every])[every].result(timeout=30) == [entry]
    assert client.describe_acls(every).result(timeout=30) == []
