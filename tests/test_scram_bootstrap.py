"""SCRAM users from the first start (issue #22), as Kafka's ``kafka-storage format --add-scram``.

Unit tests: the ``--add-scram`` parser (Kafka's syntax and its errors, never naming the
password), the bootstrap file (round trip, mode 600, no password bytes, a corrupt or foreign
file refused naming it), and the controller's ``Bootstrap.ensure`` (commits on an empty log
only, skips credentials the image holds, once per process). Then a real 1 controller + 3
brokers cluster formatted with an admin user: admin logs in over SASL_PLAINTEXT with no
AlterUserScramCredentials call at all, and a restarted controller commits nothing again.
"""
from __future__ import annotations

import asyncio
import stat
from pathlib import Path
from typing import Any

import pytest

from helpers import cluster_with_listeners
from raftka.cluster import ClusterError
from raftka.cluster.clusters import Cluster, parse_scram_users
from raftka.common import scram
from raftka.common.meta_properties import (BOOTSTRAP_FILE, BootstrapFileError, ScramSpecError, parse_add_scram,
                                           read_bootstrap, write_bootstrap)

PASSWORD = "admin-s3cret-Passw0rd"
ADMIN = f"SCRAM-SHA-256=[name=admin,password={PASSWORD},iterations=4096]"


# -- the --add-scram parser ------------------------------------------------------------------

def test_kafkas_syntax_makes_a_salted_credential_that_checks_the_password():
    name, credential = parse_add_scram("SCRAM-SHA-512=[name=alice,password=pw,iterations=4096,salt=pepper]")
    assert (name, credential.mechanism, credential.iterations, credential.salt) == (
        "alice", scram.SCRAM_SHA_512, 4096, b"pepper")
    assert credential == scram.new_credential(scram.SCRAM_SHA_512, "pw", 4096, b"pepper")
    name, credential = parse_add_scram('SCRAM-SHA-256=[name=bob,password="a,b=c"]')
    assert credential.iterations == scram.DEFAULT_ITERATIONS and len(credential.salt) == scram.SALT_BYTES
    assert credential == scram.new_credential(scram.SCRAM_SHA_256, "a,b=c", credential.iterations, credential.salt)


def test_a_password_file_gives_the_password(tmp_path):
    secret = tmp_path / "admin.password"
    secret.write_text(f"{PASSWORD}\n")
    _, credential = parse_add_scram(f"SCRAM-SHA-256=[name=admin,password-file={secret},salt=s]")
    assert credential == scram.new_credential(scram.SCRAM_SHA_256, PASSWORD, scram.DEFAULT_ITERATIONS, b"s")
    with pytest.raises(ScramSpecError, match="cannot read password-file"):
        parse_add_scram(f"SCRAM-SHA-256=[name=admin,password-file={tmp_path / 'missing'}]")


@pytest.mark.parametrize("spec, problem", [
    (f"SCRAM-SHA-1=[name=admin,password={PASSWORD}]", "unknown SCRAM mechanism"),
    (f"SCRAM-SHA-256=[password={PASSWORD}]", "name=USER is missing"),
    ("SCRAM-SHA-256=[name=admin]", "give password"),
    (f"SCRAM-SHA-256=[name=admin,password={PASSWORD},password-file=/x]", "give password"),
    (f"SCRAM-SHA-256=[name=admin,password={PASSWORD},iterations=100]", "iterations 100 outside"),
    (f"SCRAM-SHA-256=[name=admin,password={PASSWORD},iterations=99999]", "iterations 99999 outside"),
    (f"SCRAM-SHA-256=[name=admin,password={PASSWORD},iterations=many]", "must be a number"),
    (f"SCRAM-SHA-256=[name=admin,password={PASSWORD},colour=red]", "an entry other than KEY=VALUE"),
    (f"SCRAM-SHA-256=[name=admin,{PASSWORD}]", "an entry other than KEY=VALUE"),
    ("SCRAM-SHA-256=[name=admin,password=abc,admin-s3cret=Passw0rd]", "double-quote a value"),
    (f"name=admin,password={PASSWORD}", "MECHANISM=\\[name=USER"),
])
def test_a_bad_value_is_refused_without_naming_the_password(spec, problem):
    with pytest.raises(ScramSpecError, match=problem) as caught:
        parse_add_scram(spec)
    assert PASSWORD not in str(caught.value)


def test_the_cluster_kit_refuses_one_user_and_mechanism_twice():
    with pytest.raises(ClusterError, match="two SCRAM-SHA-256 credentials"):
        parse_scram_users([ADMIN, "SCRAM-SHA-256=[name=admin,password=other,iterations=4096]"])
    assert [n for n, _ in parse_scram_users([ADMIN, "SCRAM-SHA-512=[name=admin,password=x,iterations=4096]"])] == [
        "admin", "admin"]


# -- the bootstrap file ----------------------------------------------------------------------

def test_the_bootstrap_file_round_trips_with_mode_600_and_no_password(tmp_path):
    users = parse_scram_users([ADMIN, "SCRAM-SHA-512=[name=alice,password=alice-pw,iterations=4096]"])
    path = tmp_path / BOOTSTRAP_FILE
    write_bootstrap(path, users)
    assert read_bootstrap(path) == users
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert PASSWORD.encode() not in path.read_bytes() and b"alice-pw" not in path.read_bytes()
    assert read_bootstrap(tmp_path / "none") == []


@pytest.mark.parametrize("damage, problem", [
    (lambda text: text.replace('"iterations": 4096', '"iterations": 4097'), "checksum mismatch"),
    (lambda text: text.replace("version=1", "version=7"), "version 7"),
    (lambda text: "hello\n" + text, "no raftka-bootstrap header"),
    (lambda text: text[:80], "checksum mismatch"),  # cut short
])
def test_a_damaged_bootstrap_file_is_refused_naming_it(tmp_path, damage, problem):
    path = tmp_path / BOOTSTRAP_FILE
    write_bootstrap(path, parse_scram_users([ADMIN]))
    path.write_text(damage(path.read_text()))
    with pytest.raises(BootstrapFileError, match=problem) as caught:
        read_bootstrap(path)
    assert str(path) in str(caught.value)


# -- the controller commits them once --------------------------------------------------------

class _FakeController:
    """What Bootstrap uses of a QuorumController: config, image, commit, service.raft.submit."""

    def __init__(self, log_dir: Path, image: Any) -> None:
        class Config(dict):
            node_id = 1
            controller_listener = ("127.0.0.1", 9998)
        self.config = Config({"log.dirs": [str(log_dir)]})
        self.image = image
        self.committed: list[list[Any]] = []
        self.barriers = 0
        controller = self

        class Raft:
            async def submit(self, record: bytes, timeout_ms: int) -> None:
                controller.barriers += 1

        class Service:
            config = self.config
            raft = Raft()
            request_timeout_ms = 2000
        self.service = Service()

    async def commit(self, records: list[Any]) -> None:
        self.committed.append(records)


def _image(offset: int, credentials: list[tuple[str, scram.ScramCredential]] = ()) -> Any:
    from raftka.raft_meta.metadata.delta import MetadataDelta
    from raftka.raft_meta.metadata.image import MetadataImage
    from raftka.raft_meta.metadata.records import UserScramCredentialRecord
    delta = MetadataDelta(MetadataImage.EMPTY)
    for name, credential in credentials:
        delta.replay(UserScramCredentialRecord(name, credential), offset)
    delta.offset = offset
    return delta.apply()


def test_the_bootstrap_records_are_committed_on_an_empty_log_only_and_once(tmp_path):
    from raftka.raft_meta.controller.bootstrap import Bootstrap
    users = parse_scram_users([ADMIN, "SCRAM-SHA-512=[name=alice,password=alice-pw,iterations=4096]"])
    write_bootstrap(tmp_path / BOOTSTRAP_FILE, users)
    empty = _FakeController(tmp_path, _image(0))
    bootstrap = Bootstrap(empty)
    asyncio.run(bootstrap.ensure())
    asyncio.run(bootstrap.ensure())  # once per process
    assert [[(r.name, r.credential) for r in records] for records in empty.committed] == [users]
    assert empty.barriers == 1
    # A log with records (a restart, a re-election, a user deleted since) gets nothing.
    used = _FakeController(tmp_path, _image(7, users[:1]))
    asyncio.run(Bootstrap(used).ensure())
    assert used.committed == [] and used.barriers == 1


def test_a_corrupt_bootstrap_file_stops_the_controller_naming_it(tmp_path):
    from raftka.raft_meta.controller.bootstrap import Bootstrap
    (tmp_path / BOOTSTRAP_FILE).write_text("raftka-bootstrap version=1 crc32=00000000\n{}\n")
    with pytest.raises(BootstrapFileError, match=f"{tmp_path / BOOTSTRAP_FILE}.*checksum"):
        Bootstrap(_FakeController(tmp_path, _image(0)))
    no_file = _FakeController(tmp_path / "other", _image(0))
    assert Bootstrap(no_file).done  # nothing to commit: no barrier, no wait


def test_add_scram_is_refused_for_an_existing_cluster(tmp_path):
    (tmp_path / "cluster.json").write_text("{}")
    with pytest.raises(ClusterError, match="--add-scram applies when a cluster is formatted"):
        Cluster.up(tmp_path, add_scram=[ADMIN])


def test_storage_format_writes_meta_and_the_bootstrap_file_once(tmp_path, capsys):
    from raftka.cli import main
    secret = tmp_path / "secret"
    secret.write_text("quorum-secret\n")
    secret.chmod(0o600)
    config = tmp_path / "server.properties"
    config.write_text(f"process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:19999\n"
                      f"listeners=CONTROLLER://127.0.0.1:19998\nlog.dirs={tmp_path / 'a'},{tmp_path / 'b'}\n"
                      f"controller.quorum.secret.file={secret}\n")
    argv = ["storage", "format", "--config", str(config), "--cluster-id", "c1"]
    assert main([*argv, "--add-scram", ADMIN]) == 0
    assert read_bootstrap(tmp_path / "a" / BOOTSTRAP_FILE)[0][0] == "admin"
    assert not (tmp_path / "b" / BOOTSTRAP_FILE).exists()
    assert "cluster.id=c1" in (tmp_path / "b" / "meta.properties").read_text()
    assert main(argv) == 1  # formatted already
    assert main([*argv, "--ignore-formatted"]) == 0
    assert main(["storage", "format", "--config", str(config), "--cluster-id", "c2", "--ignore-formatted"]) == 1
    err = capsys.readouterr().err
    assert "already formatted (cluster c1, node 1)" in err and PASSWORD not in err


# -- a real cluster --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """1 controller + 3 brokers formatted with admin; stopped by PID at the end of the module."""
    made = cluster_with_listeners("SASL_PLAINTEXT").start(
        tmp_path_factory.mktemp("scram-bootstrap"), controllers=1, brokers=3, add_scram=[ADMIN])
    try:
        yield made
    finally:
        made.close()


def _admin_configs(cluster: Any, password: str = PASSWORD) -> dict[str, Any]:
    return {"bootstrap_servers": cluster.bootstrap("SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "admin", "sasl_plain_password": password,
            "request_timeout_ms": 10_000}


def _infos(admin: Any) -> dict[str, list[tuple[int, int]]]:
    return {user: [(int(i.mechanism), i.iterations) for i in d.scram_credential_infos]
            for user, d in admin.describe_user_scram_credentials().items()}


def test_the_format_time_admin_logs_in_with_no_alter_call(cluster):
    from raftka.client import AdminClient
    from raftka.common.errors import SaslAuthenticationFailedError
    controller = cluster.controller_ids[0]
    bootstrap_file = cluster.log_dirs(controller)[0] / BOOTSTRAP_FILE
    assert stat.S_IMODE(bootstrap_file.stat().st_mode) == 0o600 and PASSWORD.encode() not in bootstrap_file.read_bytes()
    assert not any((cluster.log_dirs(b)[0] / BOOTSTRAP_FILE).exists() for b in cluster.broker_ids)
    # Every broker was ready (caught up with the metadata log) before start() returned.
    with AdminClient(**_admin_configs(cluster)) as admin:
        assert admin.describe_cluster()["brokers"]
        assert _infos(admin) == {"admin": [(1, 4096)]}
    with pytest.raises(SaslAuthenticationFailedError):
        with AdminClient(**_admin_configs(cluster, "wrong")) as admin:
            admin.describe_cluster()
    assert cluster.processes[controller].alive()


def test_a_restarted_controller_commits_nothing_again(cluster):
    from raftka.client import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    controller = cluster.controller_ids[0]
    with AdminClient(**_admin_configs(cluster)) as admin:  # admin changes its own credential
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "admin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), PASSWORD)])
        assert _infos(admin) == {"admin": [(1, 8192)]}
    cluster.restart(controller)
    cluster.wait_for_leader(timeout_s=30)
    with AdminClient(**_admin_configs(cluster)) as admin:
        # The bootstrap's 4,096-iteration credential did not come back over the changed one.
        assert _infos(admin) == {"admin": [(1, 8192)]}
    log_text = cluster.nodes[controller].log_path.read_text(errors="replace")
    assert log_text.count("bootstrap SCRAM credential") == 1
