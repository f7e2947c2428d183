"""SCRAM credentials in the metadata log, their two admin APIs, the admin client and `raftka users`.

In one process: the UserScramCredentialRecord / RemoveUserScramCredentialRecord replay (idempotent,
refusing a credential SCRAM cannot use), snapshots and deltas that keep them, the broker's view
that a SASL server looks credentials up in, and the active controller's decisions (Kafka's error
for each bad alteration, users deciding independently, nothing but salt, keys and iterations
committed), with a Raft stand-in that commits at once.

Against a real cluster (3 controllers, 3 brokers): users created with both mechanisms through the
admin client and described (mechanisms and iterations only), one deleted, each of Kafka's errors;
the credentials survive a restart of every controller from snapshots and reach an observer of
the metadata log (what a broker follows) with keys that check the password; no file under the
cluster's directory holds the password or the salted password; confluent-kafka's AdminClient
calls both APIs; `raftka users` end to end.
"""
from __future__ import annotations

import asyncio
import gzip
import os
from pathlib import Path

import pytest

from raftka.common import errors, scram
from raftka.common.api import ApiKey
from raftka.common.codec import decoder, encoder
from raftka.common.messages import KAFKA_API
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage, image_from_bytes, image_to_bytes
from raftka.raft_meta.metadata.records import (RemoveUserScramCredentialRecord, UserScramCredentialRecord,
                                               decode_entry, encode_entry)

SHA256, SHA512 = scram.SCRAM_SHA_256, scram.SCRAM_SHA_512


def credential(mechanism=SHA256, password="pw", iterations=4096, salt=b"salt-bytes"):
    return scram.new_credential(mechanism, password, iterations, salt)


def replayed(*records, image=MetadataImage.EMPTY):
    delta = MetadataDelta(image)
    results = [delta.replay(record, 10 + i) for i, record in enumerate(records)]
    return delta, results


# -- records, replay, snapshots, deltas ------------------------------------------------------------

def test_credential_records_round_trip_and_their_repr_shows_no_salt_or_key():
    c = credential(SHA512, iterations=8192)
    records = [UserScramCredentialRecord("alice", c), RemoveUserScramCredentialRecord("bob", SHA256)]
    assert decode_entry(encode_entry(records)) == records
    text = repr(records) + repr(replayed(*records)[0].apply())
    for secret in (c.salt, c.stored_key, c.server_key):
        assert repr(secret)[2:-1] not in text and secret.hex() not in text
    assert "SCRAM-SHA-512" in text and "8192" in text


def test_an_upsert_sets_one_mechanism_and_a_removal_takes_it_away_both_idempotent():
    a256, a512 = credential(SHA256), credential(SHA512, iterations=16384)
    delta, results = replayed(UserScramCredentialRecord("alice", a256), UserScramCredentialRecord("alice", a512))
    assert results == [{}, {}]
    image = delta.apply()
    assert image.scram_credential("alice", SHA256) == a256 and image.scram_credential("alice", SHA512) == a512
    assert image.scram_credential("alice-2", SHA256) is None
    assert image.scram_credential_infos() == {"alice": [(SHA256, 4096), (SHA512, 16384)]}
    again, results = replayed(UserScramCredentialRecord("alice", a256), image=image)  # a retried commit
    assert results == [{}] and again.is_empty() and not again.changed_scram_users
    delta, _ = replayed(RemoveUserScramCredentialRecord("alice", SHA256), RemoveUserScramCredentialRecord("bob", SHA256),
                        image=image)
    after = delta.apply()
    assert delta.changed_scram_users == {"alice"}
    assert after.scram_credential("alice", SHA256) is None and after.scram_credential_infos() == {"alice": [(SHA512, 16384)]}
    gone = replayed(RemoveUserScramCredentialRecord("alice", SHA512), image=after)[0].apply()
    assert gone.scram_credentials == {} and gone.scram_credential_infos() == {}
    replaced = replayed(UserScramCredentialRecord("alice", credential(SHA512, "new")), image=after)[0].apply()
    assert replaced.scram_credential("alice", SHA512) == credential(SHA512, "new")


@pytest.mark.parametrize("bad", [
    UserScramCredentialRecord("alice", scram.ScramCredential(SHA256, b"s", b"k" * 32, b"k" * 32, 100)),
    UserScramCredentialRecord("alice", scram.ScramCredential(SHA256, b"", b"k" * 32, b"k" * 32, 4096)),
    UserScramCredentialRecord("alice", scram.ScramCredential(SHA512, b"s", b"k" * 32, b"k" * 32, 4096)),
    UserScramCredentialRecord("", credential()),
], ids=["too-few-iterations", "empty-salt", "keys-of-the-wrong-size", "empty-name"])
def test_replay_refuses_a_credential_scram_cannot_use_and_changes_nothing(bad):
    delta, [result] = replayed(bad)
    assert result["error"] == errors.UNACCEPTABLE_CREDENTIAL and delta.is_empty()


def test_snapshots_keep_every_credential_and_a_delta_between_images_names_the_users_that_changed():
    records = [UserScramCredentialRecord(user, credential(m, user)) for user in ("bob", "alice") for m in (SHA512, SHA256)]
    image = replayed(*records)[0].apply()
    data = image_to_bytes(image)
    restored = image_from_bytes(data)
    assert restored == image and image_to_bytes(restored) == data
    assert restored.scram_credential("bob", SHA512) == credential(SHA512, "bob")
    later = replayed(RemoveUserScramCredentialRecord("bob", SHA256), image=restored)[0].apply()
    assert MetadataDelta.between(restored, later).changed_scram_users == {"bob"}
    assert MetadataDelta.between(MetadataImage.EMPTY, later).changed_scram_users == {"alice", "bob"}


def test_the_brokers_view_looks_credentials_up_in_the_committed_image():
    from raftka.broker.metadata import EMPTY, _view_of
    c = credential(SHA512)
    delta, _ = replayed(UserScramCredentialRecord("alice", c))
    view = _view_of(delta.apply(), 11, {}, EMPTY, delta)
    assert view.scram_credential("alice", SHA512) == c
    assert view.scram_credential("alice", SHA256) is None and EMPTY.scram_credential("alice", SHA512) is None


# -- the active controller's decisions ---------------------------------------------------------------

def handle(service, api_key, body):
    """``body`` through the codec both ways, as behind the real listener."""
    request, response = KAFKA_API[api_key]
    body = decoder(request, 0)(encoder(request, 0)(body))
    code, out = asyncio.run(service.handle(api_key, 0, body))
    assert code == errors.NONE
    return decoder(response, 0)(encoder(response, 0)(out))


def upsertion(name, mechanism=1, iterations=4096, password="pw", salt=b"0123456789abcdef", salted=None):
    mech = scram.MECHANISMS_BY_NUMBER.get(mechanism, SHA256)
    if salted is None:
        bounded = min(max(iterations, scram.ITERATIONS_MIN), scram.ITERATIONS_MAX)
        salted = scram.salted_password(mech, password, salt, bounded)
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": salted}


def codes(answer):
    return {r["user"]: r["error_code"] for r in answer["results"]}


@pytest.fixture
def controller():
    from test_controller_decisions import controller as make
    quorum, raft = make()
    return quorum.service, raft


def test_users_of_one_request_succeed_or_fail_independently_with_kafkas_errors(controller):
    service, raft = controller
    handle(service, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"upsertions": [upsertion("old", 2)]})
    answer = handle(service, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {
        "deletions": [{"name": "twice", "mechanism": 2}, {"name": "missing", "mechanism": 1}],
        "upsertions": [upsertion("alice"), upsertion("bob", 2, 16384), upsertion("twice", 2),
                       upsertion("both", 1), upsertion("both", 2), upsertion("half", 1),
                       upsertion("half", 2, iterations=4095),
                       upsertion("few", iterations=4095), upsertion("many", iterations=16385),
                       upsertion("short", salted=b"x" * 31), upsertion("nosalt", salt=b""),
                       upsertion("mech", mechanism=3), upsertion(""), upsertion("old", 2, 8192)]})
    assert codes(answer) == {
        "twice": errors.DUPLICATE_RESOURCE, "missing": errors.RESOURCE_NOT_FOUND, "alice": errors.NONE,
        "bob": errors.NONE, "both": errors.NONE, "half": errors.UNACCEPTABLE_CREDENTIAL,
        "few": errors.UNACCEPTABLE_CREDENTIAL, "many": errors.UNACCEPTABLE_CREDENTIAL,
        "short": errors.UNACCEPTABLE_CREDENTIAL, "nosalt": errors.UNACCEPTABLE_CREDENTIAL,
        "mech": errors.UNSUPPORTED_SASL_MECHANISM, "": errors.INVALID_REQUEST, "old": errors.NONE}
    assert all(r["error_message"] for r in answer["results"] if r["error_code"])
    image = service.state.metadata.image
    # both mechanisms of one user in one request; a user with one bad change gets none of them
    assert image.scram_credential_infos() == {"alice": [(SHA256, 4096)], "bob": [(SHA512, 16384)],
                                              "both": [(SHA256, 4096), (SHA512, 4096)],
                                              "old": [(SHA512, 8192)]}
    # What was committed checks the password, and holds neither it nor the salted password.
    stored = image.scram_credential("alice", SHA256)
    salted = scram.salted_password(SHA256, "pw", b"0123456789abcdef", 4096)
    assert stored == scram.credential_from_salted(SHA256, b"0123456789abcdef", salted, 4096)
    committed = encode_entry([r for entry in raft.entries for r in entry])
    assert stored.stored_key in committed and salted not in committed and b"pw" not in committed


def test_describe_shows_mechanisms_and_iterations_and_names_unknown_and_repeated_users(controller):
    service, _ = controller
    handle(service, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"upsertions": [upsertion("alice", 1), upsertion("bob", 2)]})
    handle(service, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"upsertions": [upsertion("alice", 2, 8192)]})
    everyone = handle(service, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None})
    assert everyone["error_code"] == 0 and [(r["user"], r["credential_infos"]) for r in everyone["results"]] == [
        ("alice", [{"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 8192}]),
        ("bob", [{"mechanism": 2, "iterations": 4096}])]
    assert handle(service, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": []})["results"] == everyone["results"]
    some = handle(service, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                  {"users": [{"name": "bob"}, {"name": "nobody"}, {"name": "alice"}, {"name": "alice"}]})
    assert codes(some) == {"bob": errors.NONE, "nobody": errors.RESOURCE_NOT_FOUND,
                           "alice": errors.DUPLICATE_RESOURCE}
    handle(service, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [{"name": "bob", "mechanism": 2}]})
    assert codes(handle(service, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": [{"name": "bob"}]})) == {
        "bob": errors.RESOURCE_NOT_FOUND}


def test_a_controller_that_is_not_active_says_not_controller_in_every_users_result(controller):
    service, raft = controller
    raft.is_leader = False
    answer = handle(service, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                    {"deletions": [{"name": "a", "mechanism": 1}], "upsertions": [upsertion("b")]})
    assert codes(answer) == {"a": errors.NOT_CONTROLLER, "b": errors.NOT_CONTROLLER} and not raft.entries
    from raftka.common.messages.controller import answer_error
    assert answer_error(answer) == errors.NOT_CONTROLLER  # what sends a broker on to the active controller


def test_the_admin_client_sends_a_salted_password_and_never_shows_the_password():
    from raftka.client import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from raftka.client.aio.admin import _upsertion_body
    upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), "hunter2")
    assert "hunter2" not in repr(upsert)
    first, second = _upsertion_body(upsert), _upsertion_body(upsert)
    assert first["salt"] != second["salt"] and len(first["salt"]) == scram.SALT_BYTES  # a fresh salt each time
    assert first["salted_password"] == scram.salted_password(SHA512, "hunter2", first["salt"], 4096)
    assert b"hunter2" not in encoder(KAFKA_API[ApiKey.ALTER_USER_SCRAM_CREDENTIALS][0], 0)({"upsertions": [first]})


# -- a real cluster -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """3 controllers + 3 brokers; a few hundred bytes of records make every controller snapshot."""
    return module_cluster_factory("scram", controllers=3, brokers=3, subdir=".raftka",
                                  configs={"metadata.log.max.record.bytes.between.snapshots": 300})


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster, request_timeout_ms=30_000)


PASSWORD = "correct horse battery staple"
SALT = bytes(range(32))


@pytest.mark.timeout(300)
def test_users_are_created_described_deleted_and_survive_a_restart_of_every_controller(cluster, admin):
    from raftka.client import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                               UserScramCredentialUpsertion)
    from raftka.client.errors import (DuplicateResourceError, InvalidRequestError, ResourceNotFoundError,
                                      UnacceptableCredentialError, UnsupportedSaslMechanismError)
    from raftka.cluster import wait_until
    sha256, sha512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
    assert admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(sha256, 4096), PASSWORD, salt=SALT),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(sha512, 16384), PASSWORD.encode()),
    ]) == {"alice": None, "bob": None}
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("alice", ScramCredentialInfo(sha512), PASSWORD)])
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", ScramCredentialInfo(sha256), "x")])
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", sha256)])
    described = admin.describe_user_scram_credentials()
    assert {user: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for user, d in described.items()} == {
        "alice": [(sha256, 4096), (sha512, 8192)], "bob": [(sha512, 16384)]}
    with pytest.raises(ResourceNotFoundError):
        admin.describe_user_scram_credentials(["carol"])
    results = admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("carol", sha256),
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(sha256, 1000), PASSWORD),
        UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.UNKNOWN), PASSWORD),
        UserScramCredentialUpsertion("", ScramCredentialInfo(sha256), PASSWORD),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(sha512), PASSWORD),
        UserScramCredentialDeletion("bob", sha512),
        UserScramCredentialUpsertion("frank", ScramCredentialInfo(sha256), PASSWORD)], raise_errors=False)
    assert {user: type(error) for user, error in results.items()} == {
        "carol": ResourceNotFoundError, "dave": UnacceptableCredentialError, "erin": UnsupportedSaslMechanismError,
        "": InvalidRequestError, "bob": DuplicateResourceError, "frank": type(None)}
    assert admin.describe_user_scram_credentials(["bob"])["bob"].scram_credential_infos == [
        ScramCredentialInfo(sha512, 16384)]  # its refused changes left it as it was

    # Every controller snapshots; then all restart from their snapshots.
    def snapshots():
        return all(list(cluster.nodes[n].data_dir.rglob("raft.snapshot")) for n in cluster.controller_ids)
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("frank", sha256)])
    wait_until(snapshots, 30, what="a metadata snapshot on every controller")
    for node_id in cluster.controller_ids:
        cluster.kill(node_id)
    for node_id in cluster.controller_ids:
        cluster.launch(node_id)
    for node_id in cluster.controller_ids:
        cluster.wait_ready(node_id)
    cluster.wait_for_leader(timeout_s=30)
    after = wait_until(lambda: _described(admin), 60, what="DescribeUserScramCredentials after the restart")
    assert after == {"alice": [(sha256, 4096), (sha512, 8192)], "bob": [(sha512, 16384)]}

    # An observer of the metadata log (as a broker follows it) starting from offset 0 loads the
    # restarted controllers' snapshot, and has keys that check the password.
    fetcher = asyncio.run(_observer(cluster))
    assert fetcher.snapshots_loaded == 1
    image = fetcher.image
    stored = image.scram_credential("alice", SHA256)
    expected = scram.new_credential(SHA256, PASSWORD, 4096, SALT)
    assert stored == expected and image.scram_credential("carol", SHA256) is None

    # No file of any node holds the password or the salted password; the stored key is there.
    # pysyncobj gzips its snapshots (read inside them too) and pickles journal entries at
    # protocol 2, where bytes travel as the UTF-8 of their latin-1 reading: look for both forms.
    def forms(value: bytes) -> tuple[bytes, bytes]:
        return value, value.decode("latin-1").encode("utf-8")
    salted = scram.salted_password(SHA256, PASSWORD, SALT, 4096)
    found_key = False
    for path in Path(cluster.root).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            if data[:2] == b"\x1f\x8b":
                data += gzip.decompress(data)
            assert not any(form in data for form in (*forms(PASSWORD.encode()), *forms(salted))), path
            found_key = found_key or any(form in data for form in forms(expected.stored_key))
    assert found_key, "the grep found no stored key: it would not find a password either"


def test_confluent_kafka_sets_describes_and_deletes_credentials(cluster):
    """librdkafka ends its AlterUserScramCredentials with one byte more than the declaration
    (a second empty tagged-field section), which Kafka's brokers never look at; Raftka reads past
    it for this request only."""
    ck = pytest.importorskip("confluent_kafka.admin")
    from confluent_kafka import KafkaError, KafkaException
    client = ck.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    sha512 = ck.ScramMechanism.SCRAM_SHA_512
    futures = client.alter_user_scram_credentials([ck.UserScramCredentialUpsertion(
        "librdkafka-user", ck.ScramCredentialInfo(sha512, 10000), b"pw")])
    assert [f.result(timeout=30) for f in futures.values()] == [None]
    described = client.describe_user_scram_credentials(["librdkafka-user"])["librdkafka-user"].result(timeout=30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [(sha512, 10000)]
    futures = client.alter_user_scram_credentials([ck.UserScramCredentialDeletion("librdkafka-user", sha512),
                                                   ck.UserScramCredentialDeletion("nobody", sha512)])
    futures["librdkafka-user"].result(timeout=30)
    with pytest.raises(KafkaException) as raised:
        futures["nobody"].result(timeout=30)
    assert raised.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    assert "librdkafka-user" not in client.describe_user_scram_credentials().result(timeout=30)


def _described(admin):
    from raftka.client.errors import RaftkaError
    try:
        described = admin.describe_user_scram_credentials()
    except RaftkaError:
        return None
    return {user: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for user, d in described.items()}


async def _observer(cluster):
    from raftka.raft_meta.metadata.fetcher import MetadataFetcher
    fetcher = MetadataFetcher(cluster.bootstrap_controllers.split(","), max_wait_ms=0)
    try:
        await fetcher.fetch_once()
    finally:
        await fetcher.close()
    return fetcher


def test_raftka_users_create_list_delete_and_its_errors_are_one_line(cluster, tmp_path):
    from test_cli_tools import ok, one_line_error, tool
    secret = tmp_path / "password.txt"
    secret.write_text("s3cret-pass\n")
    out = ok(tool(cluster, "users", "create", "cli-user", "--password-file", str(secret)))
    assert out.strip() == "Set the SCRAM-SHA-256 credential of user cli-user (8192 iterations)."
    ok(tool(cluster, "users", "create", "cli-user", "--mechanism", "scram-sha-512", "--iterations", "4096",
            "--password-file", "-", stdin="from-stdin"))
    listed = ok(tool(cluster, "users", "list"))
    assert "cli-user\tSCRAM-SHA-256 (iterations 8192), SCRAM-SHA-512 (iterations 4096)" in listed.splitlines()
    assert "s3cret" not in listed
    ok(tool(cluster, "users", "delete", "cli-user", "--mechanism", "SCRAM-SHA-512"))
    assert "cli-user\tSCRAM-SHA-256 (iterations 8192)" in ok(tool(cluster, "users", "list")).splitlines()
    assert ok(tool(cluster, "users", "delete", "cli-user")).strip() == \
        "Deleted the SCRAM-SHA-256 credential of user cli-user."
    assert "cli-user" not in ok(tool(cluster, "users", "list"))
    one_line_error(tool(cluster, "users", "delete", "cli-user"), "cli-user", "RESOURCE_NOT_FOUND")
    one_line_error(tool(cluster, "users", "delete", "cli-user", "--mechanism", "SCRAM-SHA-256"), "RESOURCE_NOT_FOUND")
    one_line_error(tool(cluster, "users", "create", "x", "--iterations", "100", "--password-file", str(secret)),
                   "UNACCEPTABLE_CREDENTIAL")
    one_line_error(tool(cluster, "users", "create", "x", "--password-file", str(tmp_path / "none")), "none")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    one_line_error(tool(cluster, "users", "create", "x", "--password-file", str(empty)), "empty")
    assert os.path.getsize(secret)  # the tools read the file; they never wrote it
