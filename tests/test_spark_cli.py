"""`raftka spark sink`'s login, without a JVM: the Kafka client properties of --command-config (or
of the cluster directory's client.properties) become the query's ``kafka.*`` options as they are
and the AdminClient's keywords; a property the query cannot take fails before Spark starts, in
one line that never holds the password; the chaos harness hands the sink the file, not the
password. The login files are a real secure cluster kit's (raftka/cluster/secure.py), and
``sink_options`` is called directly on arguments parsed by the real `raftka` parser.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from raftka.chaos.spark_sink import SparkSink
from raftka.cli import build_parser
from raftka.cli.commands._common import CommandError
from raftka.cli.commands.spark import sink_options
from raftka.cluster import project_env, python_argv
from raftka.cluster.secure import MECHANISM, SecureKit

pytestmark = pytest.mark.timeout(120)


def sink_args(*extra: str) -> object:
    return build_parser().parse_args(["spark", "sink", "--topic", "events", "--output", "/nowhere", *extra])


@pytest.fixture
def kit(tmp_path: Path) -> SecureKit:
    return SecureKit.create(tmp_path / "cluster")


def test_the_properties_become_kafka_options_and_the_admin_clients_login(kit, tmp_path):
    path = tmp_path / "spark.properties"
    # bootstrap.servers is the address's business (--bootstrap-server / --dir); client.id passes on
    path.write_text(kit.client_properties_path.read_text(encoding="utf-8")
                    + "bootstrap.servers=10.0.0.1:9092\nclient.id=sink-7\n", encoding="utf-8")
    options, admin = sink_options(sink_args("--bootstrap-server", "127.0.0.1:9092", "--command-config", str(path)))
    assert options == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": MECHANISM,
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  f'username="admin" password="{kit.admin_password}";',
        "kafka.ssl.truststore.location": str(kit.ca_path), "kafka.client.id": "sink-7"}
    assert admin == {**kit.client_configs(), "client_id": "sink-7"}
    # No file: no login, on either side.
    assert sink_options(sink_args("--bootstrap-server", "127.0.0.1:9092", "--dir", str(kit.root))) == ({}, {})


def test_the_cluster_directorys_client_properties_is_picked_up_without_a_bootstrap_server(kit):
    options, admin = sink_options(sink_args("--dir", str(kit.root)))
    assert options["kafka.sasl.jaas.config"].endswith(f'password="{kit.admin_password}";')
    assert admin["sasl_plain_password"] == kit.admin_password and admin["ssl_cafile"] == str(kit.ca_path)


def test_a_property_the_query_cannot_take_fails_before_spark_in_one_line_without_the_password(kit, tmp_path):
    path = tmp_path / "plaintext.properties"
    # SASL settings on a PLAINTEXT connection: the client would silently skip the login
    path.write_text(kit.client_properties_path.read_text(encoding="utf-8").replace("SASL_SSL", "PLAINTEXT")
                    .replace("ssl.truststore.location", "#"), encoding="utf-8")
    with pytest.raises(CommandError) as raised:
        sink_options(sink_args("--bootstrap-server", "127.0.0.1:9092", "--command-config", str(path)))
    message = str(raised.value)
    assert str(path) in message and "kafka.security.protocol" in message and kit.admin_password not in message
    # The command itself: exit 1, one error line, nothing started (its output directory is not made).
    output = tmp_path / "out"
    run = subprocess.run(python_argv("-m", "raftka", "spark", "sink", "--bootstrap-server", "127.0.0.1:9",
                                     "--command-config", str(path), "--topic", "events", "--output", str(output)),
                         capture_output=True, text=True, env=project_env(), timeout=90)
    assert run.returncode == 1, run.stdout + run.stderr
    errors = run.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: --command-config") and "kafka.security.protocol" in errors[0]
    assert kit.admin_password not in run.stdout + run.stderr
    assert not output.exists()


def test_the_chaos_harness_hands_the_sink_the_file_and_the_sink_reads_the_login_from_it(kit, tmp_path):
    sink = SparkSink(tmp_path / "spark", "127.0.0.1:9092", "events", max_seconds=60,
                     command_config=kit.client_properties_path)
    argv = sink.command()
    assert not any(kit.admin_password in arg for arg in argv), "the password is in the sink's argv"
    # The same argv, parsed by the real parser, gives the sink the login from the file.
    args = build_parser().parse_args(argv[argv.index("spark"):])
    assert args.command_config == str(kit.client_properties_path)
    options, admin = sink_options(args)
    assert kit.admin_password in options["kafka.sasl.jaas.config"] and admin["sasl_plain_password"] == kit.admin_password
