"""The Spark data source's pure parts, without a JVM or a cluster: option checking (clear errors
naming the option; Kafka's security options mapped by the client's rules, never showing a
password), the offsets' JSON form, maxOffsetsPerTrigger shares, minPartitions splits,
the Arrow schema, and the Java check."""
from __future__ import annotations

import os
import pickle
import random
import stat

import pytest

from raftka.client import TopicPartition
from raftka.spark import offsets as off
from raftka.spark.options import InvalidOptionError, ReadOptions, WriteOptions, parse_offsets_json
from raftka.spark.schema import arrow_schema, source_schema
from raftka.spark.session import JavaNotFoundError, require_java

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a,b"}
T = TopicPartition


def as_writer(options: dict) -> dict:
    """The same options for a writer, which takes no subscription (it would be refused as unknown)."""
    return {k: v for k, v in options.items() if k != "subscribe"}


def test_defaults_are_those_of_sparks_kafka_source():
    batch = ReadOptions.parse(BASE, streaming=False)
    assert batch.starting.kind == "earliest" and batch.ending and batch.ending.kind == "latest"
    assert batch.fail_on_data_loss and not batch.include_headers
    assert batch.subscription.topics == ("a", "b")
    stream = ReadOptions.parse(BASE, streaming=True)
    assert stream.starting.kind == "latest" and stream.ending is None


def test_option_names_are_case_insensitive_and_bootstrap_servers_has_two_spellings():
    opts = ReadOptions.parse({"bootstrap.servers": "h:1", "SUBSCRIBEPATTERN": "ev.*",
                              "StartingOffsets": "EARLIEST", "failondataloss": "False",
                              "includeHeaders": "true", "minPartitions": "4"}, streaming=True)
    assert opts.bootstrap_servers == "h:1" and opts.subscription.pattern == "ev.*"
    assert opts.starting.kind == "earliest" and not opts.fail_on_data_loss
    assert opts.include_headers and opts.min_partitions == 4


def test_per_partition_json_offsets_parse_with_string_partition_keys():
    parsed = parse_offsets_json("startingOffsets", '{"a": {"0": 23, "1": -2}, "b": {"0": -1}}')
    assert parsed == {T("a", 0): 23, T("a", 1): -2, T("b", 0): -1}


@pytest.mark.parametrize("raw, words", [
    ('{"a": {"0": 23', "valid JSON"),
    ('["a"]', "must be an object"),
    ('{"a": 5}', "map partition numbers"),
    ('{"a": {"x": 1}}', "not a partition number"),
    ('{"a": {"0": -3}}', "-2 (earliest)"),
    ('{"a": {"0": "10"}}', "integer"),
    ("yesterday", "neither earliest, latest nor valid JSON"),
])
def test_bad_json_offsets_name_the_option_and_the_problem(raw, words):
    with pytest.raises(InvalidOptionError) as info:
        ReadOptions.parse({**BASE, "startingOffsets": raw}, streaming=True)
    assert "startingOffsets" in str(info.value) and words in str(info.value)
    assert info.value.option == "startingOffsets"


@pytest.mark.parametrize("extra, option, words", [
    ({"subscribe": None, "assign": None}, "subscribe", "exactly one"),
    ({"subscribePattern": "x.*"}, "subscribe", "exactly one"),
    ({"kafka.bootstrap.servers": None}, "kafka.bootstrap.servers", "required"),
    ({"startingOffsets": "latest"}, "startingOffsets", "not allowed"),
    ({"startingOffsets": '{"a": {"0": -1}}'}, "startingOffsets", "latest"),
    ({"endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets", "earliest"),
    ({"endingOffsets": "earliest"}, "endingOffsets", "not allowed"),
    ({"startingOffsets": "committed"}, "startingOffsets", "group.id"),
    ({"maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger", "streaming"),
    ({"minPartitions": "0"}, "minPartitions", "positive"),
    ({"failOnDataLoss": "maybe"}, "failOnDataLoss", "true or false"),
    ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "startingOffsets"),
    ({"kafka.no.such.config": "1"}, "kafka.no.such.config", "not a consumer config"),
])
def test_bad_batch_options_fail_with_a_message_naming_the_option(extra, option, words):
    opts = {k: v for k, v in {**BASE, **extra}.items() if v is not None}
    with pytest.raises(InvalidOptionError) as info:
        ReadOptions.parse(opts, streaming=False)
    assert info.value.option == option and words in str(info.value)


def test_streaming_refuses_ending_offsets_and_accepts_committed_with_a_group():
    with pytest.raises(InvalidOptionError, match="batch queries only"):
        ReadOptions.parse({**BASE, "endingOffsets": "latest"}, streaming=True)
    opts = ReadOptions.parse({**BASE, "startingOffsets": "committed", "group.id": "g1"}, streaming=True)
    assert opts.starting.kind == "committed" and opts.group_id == "g1"
    assert ReadOptions.parse({**BASE, "kafka.group.id": "g2"}, streaming=True).group_id == "g2"


def test_assign_and_pattern_subscriptions_are_checked():
    opts = ReadOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [1, 0, 1]}'}, streaming=False)
    assert opts.subscription.assign == (T("a", 0), T("a", 1))
    with pytest.raises(InvalidOptionError, match="assign"):
        ReadOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"a": ["x"]}'}, streaming=False)
    with pytest.raises(InvalidOptionError, match="regular expression"):
        ReadOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribePattern": "a("}, streaming=False)


def test_kafka_prefixed_client_configs_reach_the_client_as_keywords():
    opts = ReadOptions.parse({**BASE, "kafka.request.timeout.ms": "5000", "kafka.client.id": "me",
                              "kafka.check.crcs": "false"}, streaming=True)
    assert opts.consumer_configs == {"request_timeout_ms": 5000, "client_id": "me", "check_crcs": False}
    w = WriteOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.linger.ms": "20"})
    assert w.topic == "t" and w.producer_configs == {"linger_ms": 20}
    with pytest.raises(InvalidOptionError, match="idempotent"):
        WriteOptions.parse({"kafka.bootstrap.servers": "h:1", "kafka.enable.idempotence": "false"})


PASSWORD = "s3cret-Spark-Passw0rd"
SCRAM_JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{PASSWORD}";'
SASL_SSL = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": SCRAM_JAAS}


@pytest.fixture(scope="module")
def pem_files(tmp_path_factory) -> dict[str, str]:
    """A private CA's certificate (a truststore) and a client keystore whose key is encrypted."""
    from raftka.cluster.certs import CertificateAuthority, write_pem
    directory = tmp_path_factory.mktemp("spark-pem")
    ca = CertificateAuthority.create("raftka spark units CA", days=1)
    client = ca.issue("spark", days=1, key_password="key-Passw0rd")
    return {"ca": str(write_pem(directory / "ca.pem", ca.cert_pem)),
            "keystore": str(write_pem(directory / "client.pem", client.keystore_pem))}


def test_kafka_security_options_reach_reader_and_writer_as_the_clients_keywords(pem_files):
    options = {**BASE, "kafka.security.protocol": "sasl_ssl", "kafka.sasl.mechanism": "scram-sha-512",
               "kafka.sasl.jaas.config": SCRAM_JAAS, "kafka.ssl.truststore.location": pem_files["ca"],
               "kafka.ssl.truststore.type": "PEM", "kafka.ssl.keystore.location": pem_files["keystore"],
               "kafka.ssl.keystore.type": "PEM", "kafka.ssl.key.password": "key-Passw0rd",
               "kafka.ssl.endpoint.identification.algorithm": "", "kafka.client.id": "me"}
    expected = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD, "ssl_cafile": pem_files["ca"],
                "ssl_certfile": pem_files["keystore"], "ssl_keyfile": pem_files["keystore"],
                "ssl_password": "key-Passw0rd", "ssl_check_hostname": False, "client_id": "me"}
    read = ReadOptions.parse(options, streaming=True)
    assert read.consumer_configs == expected
    assert WriteOptions.parse({**as_writer(options), "topic": "t"}).producer_configs == expected
    # Readers and writers travel to Spark's Python workers pickled: the configs go with them.
    assert pickle.loads(pickle.dumps(read)).consumer_configs == expected
    # The driver's own consumers (partitions, offsets, group commits) connect the same way.
    from raftka.spark.metadata import ClusterView
    view = ClusterView(read.bootstrap_servers, read.consumer_configs)
    assert view.driver_configs()["security_protocol"] == "SASL_SSL"
    assert view.driver_configs()["sasl_plain_password"] == PASSWORD


@pytest.mark.parametrize("extra, option, words", [
    ({"kafka.security.protocol": "SASL_SLL"}, "kafka.security.protocol", "must be one of PLAINTEXT, SSL"),
    ({**SASL_SSL, "kafka.sasl.mechanism": "GSSAPI"}, "kafka.sasl.mechanism", "got 'GSSAPI'"),
    ({**SASL_SSL, "kafka.sasl.mechanism": None}, "kafka.sasl.mechanism", "none is set"),
    ({**SASL_SSL, "kafka.sasl.jaas.config": None}, "kafka.sasl.jaas.config", "is required"),
    ({**SASL_SSL, "kafka.security.protocol": None}, "kafka.security.protocol", "use SASL_SSL or SASL_PLAINTEXT"),
    ({"kafka.ssl.truststore.location": "x.pem"}, "kafka.security.protocol", "use SSL or SASL_SSL"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "no-such-ca.pem"},
     "kafka.ssl.truststore.location", "cannot read no-such-ca.pem"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS"}, "kafka.ssl.truststore.type",
     "only PEM files"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.endpoint.identification.algorithm": "http"},
     "kafka.ssl.endpoint.identification.algorithm", "https or empty"),
    ({**SASL_SSL, "kafka.sasl.jaas.config": "ScramLoginModule required;"}, "kafka.sasl.jaas.config",
     "is not one Raftka speaks"),
])
def test_bad_security_options_fail_naming_the_option(extra, option, words):
    opts = {k: v for k, v in {**BASE, **extra}.items() if v is not None}
    for parse in (lambda: ReadOptions.parse(opts, streaming=False), lambda: WriteOptions.parse(as_writer(opts))):
        with pytest.raises(InvalidOptionError) as info:
            parse()
        assert info.value.option == option and words in str(info.value)


@pytest.mark.parametrize("extra", [
    {"kafka.sasl.jaas.config": SCRAM_JAAS[:-1]},  # no ';'
    {"kafka.sasl.jaas.config": SCRAM_JAAS.replace('username="alice" ', "")},
    {"kafka.sasl.jaas.config": SCRAM_JAAS.replace(f'password="{PASSWORD}"', f"password={PASSWORD} x=")},
    {"kafka.sasl.jaas.config": SCRAM_JAAS.replace('"alice"', '"al\0ice"')},  # a NUL in the user name
    {"kafka.security.protocol": "SSL"},  # SASL options without a SASL protocol
    {"kafka.sasl.mechanism": "OAUTHBEARER"},
])
def test_no_message_and_no_repr_ever_shows_the_sasl_password(extra):
    opts = {**BASE, **SASL_SSL, **extra}
    with pytest.raises(InvalidOptionError) as info:
        ReadOptions.parse(opts, streaming=False)
    assert info.value.option.startswith("kafka.") and PASSWORD not in str(info.value)
    good = {**BASE, **SASL_SSL, "kafka.security.protocol": "SASL_PLAINTEXT"}
    from raftka.spark.reader import _settings
    read = ReadOptions.parse(good, streaming=False)
    assert read.consumer_configs["sasl_plain_password"] == PASSWORD
    for shown in (read, _settings(read), WriteOptions.parse(as_writer(good))):
        assert PASSWORD not in repr(shown) and PASSWORD not in str(shown)


def test_a_wrong_ssl_key_password_is_named_and_never_shown(pem_files):
    opts = {**BASE, "kafka.security.protocol": "SSL", "kafka.ssl.keystore.location": pem_files["keystore"],
            "kafka.ssl.key.password": "not-the-key-Passw0rd"}
    with pytest.raises(InvalidOptionError) as info:
        WriteOptions.parse(as_writer(opts))
    assert info.value.option == "kafka.ssl.key.password" and "does not decrypt" in str(info.value)
    assert "not-the-key-Passw0rd" not in str(info.value)


def test_java_keystore_passwords_are_refused_with_the_reason():
    for name, reason in (("kafka.ssl.truststore.password", "a PEM truststore has no password"),
                         ("kafka.ssl.keystore.password", "use ssl.key.password")):
        for parse in (lambda o: ReadOptions.parse(o, streaming=True), lambda o: WriteOptions.parse(as_writer(o))):
            with pytest.raises(InvalidOptionError) as info:
                parse({**BASE, "kafka.security.protocol": "SSL", name: "changeit"})
            assert info.value.option == name and "not supported" in str(info.value) and reason in str(info.value)
            assert "changeit" not in str(info.value)


def test_offsets_json_round_trips_through_string_keys():
    offsets = {T("b", 10): 5, T("a", 2): 7, T("a", 0): 0}
    as_json = off.to_json(offsets)
    assert list(as_json) == ["a", "b"] and as_json["a"] == {"0": 0, "2": 7}
    assert off.from_json(as_json) == offsets
    assert off.from_json({}) == {} and off.from_json(None) == {}


def test_rate_limit_reads_exactly_the_limit_in_proportion_to_what_is_waiting():
    start = {T("a", 0): 0, T("a", 1): 100, T("a", 2): 50}
    latest = {T("a", 0): 600, T("a", 1): 400, T("a", 2): 50}
    end = off.rate_limit(start, latest, 90)
    taken = {tp: end[tp] - start[tp] for tp in start}
    assert sum(taken.values()) == 90
    assert taken == {T("a", 0): 60, T("a", 1): 30, T("a", 2): 0}
    assert off.rate_limit(start, latest, 10_000) == latest  # under the limit: everything


def test_rate_limit_never_overshoots_and_always_progresses_random_cases():
    rng = random.Random(1234)
    for _ in range(500):
        n = rng.randint(1, 6)
        start = {T("t", i): rng.randint(0, 1000) for i in range(n)}
        latest = {tp: s + rng.choice([0, 1, 2, rng.randint(0, 5000)]) for tp, s in start.items()}
        limit = rng.randint(1, 3000)
        end = off.rate_limit(start, latest, limit)
        waiting = sum(latest[tp] - start[tp] for tp in start)
        taken = sum(end[tp] - start[tp] for tp in start)
        assert taken == min(limit, waiting), (start, latest, limit, end)
        assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


def test_rate_limit_keeps_new_partitions_at_their_given_offset():
    end = off.rate_limit({T("a", 0): 0}, {T("a", 0): 100, T("a", 1): 7}, 10)
    assert end == {T("a", 0): 10, T("a", 1): 7}


def test_min_partitions_splits_large_ranges_into_contiguous_pieces():
    ranges = [off.OffsetRange("a", 0, 0, 900), off.OffsetRange("a", 1, 10, 110), off.OffsetRange("a", 2, 5, 5)]
    split = off.split_ranges(ranges, 10)
    assert len(split) >= 10
    for p in (0, 1):
        pieces = [r for r in split if r.partition == p]
        assert pieces[0].start == ranges[p].start and pieces[-1].end == ranges[p].end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
    assert not [r for r in split if r.partition == 2]  # empty ranges make no task
    assert len([r for r in split if r.partition == 0]) > len([r for r in split if r.partition == 1])
    assert off.split_ranges(ranges, None) == ranges[:2]
    assert off.split_ranges([off.OffsetRange("a", 0, 0, 3)], 10) == [
        off.OffsetRange("a", 0, i, i + 1) for i in range(3)]  # never an empty piece


def test_schema_is_sparks_kafka_schema_and_arrow_batches_match_it():
    from pyspark.sql.pandas.types import to_arrow_schema
    for headers in (False, True):
        spark_schema = source_schema(headers)
        assert spark_schema.simpleString() == (
            "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
            "timestamp:timestamp,timestampType:int"
            + (",headers:array<struct<key:string,value:binary>>" if headers else "") + ">")
        assert to_arrow_schema(spark_schema, timezone="UTC").equals(arrow_schema(headers))
        assert spark_schema.fieldNames()[-1] == ("headers" if headers else "timestampType")


def test_missing_java_gives_a_clear_error(tmp_path):
    with pytest.raises(JavaNotFoundError, match="Java was not found.*openjdk-17"):
        require_java({"PATH": str(tmp_path)})


def test_old_java_gives_a_clear_error(tmp_path):
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho \'openjdk version "1.8.0_392"\' >&2\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(JavaNotFoundError, match="Java 8.*17 or newer"):
        require_java({"JAVA_HOME": str(tmp_path), "PATH": os.defpath})


def test_spark_demo_without_java_prints_one_line_and_exits_1(tmp_path):
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java there
    run = subprocess.run([sys.executable, "-m", "raftka", "spark", "demo", "--bootstrap-server", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 1
    assert run.stderr.startswith("error: Java was not found") and run.stderr.count("\n") == 1
    assert "Traceback" not in run.stderr


# -- unknown options, spark-sql-kafka's timestamp offsets and trigger options (#24) --

@pytest.mark.parametrize("name, words", [
    ("typo.option", "is not an option of the raftka batch reader; known: kafka.bootstrap.servers"),
    ("startingOffset", "did you mean startingOffsets?"),
    ("STARTINGTIMESTAMPS", "did you mean startingTimestamp?"),
    ("path", "reads and writes topics, not paths"),
    ("fetchOffset.numRetries", "is not supported: the client retries"),
    ("topic", "known: "),  # a writer's option
])
def test_an_unknown_or_misspelt_reader_option_fails_naming_the_known_ones(name, words):
    for streaming in (False, True):
        with pytest.raises(InvalidOptionError) as info:
            ReadOptions.parse({**BASE, name: "1"}, streaming=streaming)
        assert info.value.option == name.lower() and words.replace("batch", "streaming" if streaming else "batch") \
            in str(info.value)
    if not name.startswith(("path", "fetch")):
        assert "startingOffsetsByTimestamp, startingTimestamp" in str(info.value)


def test_writers_refuse_unknown_options_and_a_streaming_writer_accepts_what_spark_adds():
    spark_added = {"checkpointlocation": "/ck", "queryname": "q1"}  # as writeStream hands them over
    assert WriteOptions.parse({"kafka.bootstrap.servers": "h:1", **spark_added}, streaming=True).topic is None
    for options, streaming, bad in (({**spark_added}, False, "checkpointlocation"),
                                    ({"subscribe": "a"}, True, "subscribe"),
                                    ({"topics": "a"}, False, "topics")):
        with pytest.raises(InvalidOptionError) as info:
            WriteOptions.parse({"kafka.bootstrap.servers": "h:1", **options}, streaming=streaming)
        assert info.value.option == bad
        assert "known: kafka.bootstrap.servers, bootstrap.servers, topic" in str(info.value)
    with pytest.raises(InvalidOptionError, match="did you mean topic"):
        WriteOptions.parse({"kafka.bootstrap.servers": "h:1", "topci": "t"})


def test_starting_timestamp_wins_over_offsets_by_timestamp_which_wins_over_starting_offsets():
    per_partition = '{"a": {"0": 1000, "1": 2000}, "b": {"0": 0}}'
    everything = {**BASE, "startingTimestamp": " 1700000000000 ", "startingOffsetsByTimestamp": per_partition,
                  "startingOffsets": "committed"}  # committed without a group: not the one used
    for streaming in (False, True):
        spec = ReadOptions.parse(everything, streaming=streaming).starting
        assert (spec.kind, spec.option, spec.timestamp, spec.no_match) == ("timestamp", "startingTimestamp",
                                                                           1_700_000_000_000, "error")
        spec = ReadOptions.parse({**everything, "startingTimestamp": None}, streaming=streaming).starting
        assert spec.option == "startingOffsetsByTimestamp" and spec.timestamp is None
        assert spec.timestamps == {T("a", 0): 1000, T("a", 1): 2000, T("b", 0): 0}
    spec = ReadOptions.parse({**BASE, "startingTimestamp": "5", "startingOffsetsByTimestampStrategy": "LATEST"},
                             streaming=True).starting
    assert spec.no_match == "latest"
    batch = ReadOptions.parse({**BASE, "endingTimestamp": "9", "endingOffsetsByTimestamp": '{"a": {"0": 1}}',
                               "endingOffsets": '{"a": {"0": 5}}'}, streaming=False)
    assert (batch.ending.option, batch.ending.timestamp, batch.ending.no_match) == ("endingTimestamp", 9, "latest")
    batch = ReadOptions.parse({**BASE, "endingOffsetsByTimestamp": '{"a": {"0": 1}}'}, streaming=False)
    assert batch.ending.option == "endingOffsetsByTimestamp" and batch.ending.timestamps == {T("a", 0): 1}
    assert batch.starting.kind == "earliest"  # ending options leave the start alone


@pytest.mark.parametrize("extra, streaming, option, words", [
    ({"startingTimestamp": "yesterday"}, True, "startingTimestamp", "milliseconds since the epoch"),
    ({"startingTimestamp": "-1"}, False, "startingTimestamp", "integer >= 0"),
    ({"startingOffsetsByTimestamp": '{"a": {"0": -1}}'}, True, "startingOffsetsByTimestamp", "integer >= 0"),
    ({"startingOffsetsByTimestamp": '{"a": {"0": true}}'}, True, "startingOffsetsByTimestamp", "got True"),
    ({"startingOffsetsByTimestamp": '{"a": {"0": 1'}, True, "startingOffsetsByTimestamp", "valid JSON"),
    ({"startingOffsetsByTimestamp": '{"a": {"x": 1}}'}, False, "startingOffsetsByTimestamp", "not a partition"),
    ({"startingOffsetsByTimestamp": "earliest"}, False, "startingOffsetsByTimestamp", "valid JSON"),
    ({"startingTimestamp": "1", "startingOffsetsByTimestampStrategy": "earliest"}, True,
     "startingOffsetsByTimestampStrategy", "error or latest"),
    ({"endingTimestamp": "1"}, True, "endingTimestamp", "batch queries only"),
    ({"endingOffsetsByTimestamp": '{"a": {"0": 1}}'}, True, "endingOffsetsByTimestamp", "batch queries only"),
    ({"endingTimestamp": "1.5"}, False, "endingTimestamp", "integer >= 0"),
    ({"minOffsetsPerTrigger": "10"}, False, "minOffsetsPerTrigger", "streaming queries only"),
    ({"minOffsetsPerTrigger": "0"}, True, "minOffsetsPerTrigger", "positive"),
    ({"minOffsetsPerTrigger": "200", "maxOffsetsPerTrigger": "100"}, True, "minOffsetsPerTrigger",
     "higher than maxOffsetsPerTrigger 100"),
    ({"maxTriggerDelay": "5s"}, True, "maxTriggerDelay", "no effect without minOffsetsPerTrigger"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "5 weeks"}, True, "maxTriggerDelay", "like 15m"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "-5s"}, True, "maxTriggerDelay", "like 15m"),
    ({"groupIdPrefix": " "}, True, "groupIdPrefix", "must not be empty"),
])
def test_bad_timestamp_and_trigger_options_fail_naming_the_option(extra, streaming, option, words):
    with pytest.raises(InvalidOptionError) as info:
        ReadOptions.parse({**BASE, **extra}, streaming=streaming)
    assert info.value.option == option and words in str(info.value)


def test_trigger_options_parse_with_sparks_time_strings_and_defaults():
    parse = lambda **o: ReadOptions.parse({**BASE, **o}, streaming=True)  # noqa: E731
    assert parse().min_offsets_per_trigger is None and parse().max_trigger_delay_ms == 15 * 60_000
    for raw, ms in (("250", 250), ("250ms", 250), ("30s", 30_000), ("2m", 120_000), ("2min", 120_000),
                    ("1h", 3_600_000), ("1d", 86_400_000), (" 10 S ", 10_000), ("1500us", 1)):
        assert parse(minOffsetsPerTrigger="7", maxTriggerDelay=raw).max_trigger_delay_ms == ms, raw
    both = parse(minOffsetsPerTrigger="100", maxOffsetsPerTrigger="100")
    assert (both.min_offsets_per_trigger, both.max_offsets_per_trigger) == (100, 100)


def test_group_id_prefix_is_kept_and_ignored_when_group_id_is_set():
    assert ReadOptions.parse({**BASE, "groupIdPrefix": "etl"}, streaming=False).group_id_prefix == "etl"
    with_group = ReadOptions.parse({**BASE, "groupIdPrefix": "etl", "kafka.group.id": "g"}, streaming=True)
    assert with_group.group_id_prefix is None and with_group.group_id == "g"


def test_hold_back_waits_for_the_minimum_until_the_delay_passes():
    assert not off.hold_back(0, 100, None, 60_000)  # the first trigger never waits
    assert off.hold_back(99, 100, 10.0, 60_000)
    assert not off.hold_back(100, 100, 10.0, 60_000)
    assert not off.hold_back(0, 100, 60_000.0, 60_000)  # delay passed: go with what there is


class FakeView:
    """A ClusterView's answers from dictionaries: partitions, log start offsets, high watermarks
    and the offsets ListOffsets finds for timestamps (records' timestamps are ``times``)."""

    def __init__(self, start: dict, high: dict, times: dict | None = None) -> None:
        self.start, self.high, self.times = start, high, times or {}
        self.group_id = None
        self.asked_times: dict = {}

    def partitions(self, subscription, missing_ok=False):
        return sorted(self.high)

    def earliest(self, tps):
        return {tp: self.start[tp] for tp in tps}

    def latest(self, tps):
        return {tp: self.high[tp] for tp in tps}

    def offsets_for_times(self, wanted):
        self.asked_times.update(wanted)
        out = {}
        for tp, ts in wanted.items():
            later = [o for o, t in enumerate(self.times.get(tp, [])) if t >= ts and o < self.high[tp]]
            out[tp] = later[0] if later else None
        return out


def test_timestamps_resolve_to_the_first_offset_at_or_after_them_and_no_match_follows_the_strategy():
    from raftka.spark.reader import resolve_offsets
    a0, a1 = T("a", 0), T("a", 1)
    view = FakeView({a0: 0, a1: 0}, {a0: 4, a1: 3}, {a0: [10, 20, 30, 40], a1: [5, 6, 7]})
    spec = ReadOptions.parse({**BASE, "subscribe": "a", "startingTimestamp": "20"}, streaming=True).starting
    with pytest.raises(InvalidOptionError) as info:  # a1 has no record at or after 20: strategy error
        resolve_offsets("startingOffsets", spec, [a0, a1], view)
    assert info.value.option == "startingTimestamp" and "20 in a-1" in str(info.value)
    assert "startingOffsetsByTimestampStrategy=latest" in str(info.value)
    latest = ReadOptions.parse({**BASE, "subscribe": "a", "startingTimestamp": "20",
                                "startingOffsetsByTimestampStrategy": "latest"}, streaming=True).starting
    assert resolve_offsets("startingOffsets", latest, [a0, a1], view) == {a0: 1, a1: 3}
    per = ReadOptions.parse({**BASE, "subscribe": "a", "startingOffsetsByTimestamp": '{"a": {"0": 31, "1": 0}}'},
                            streaming=False).starting
    assert resolve_offsets("startingOffsets", per, [a0, a1], view) == {a0: 3, a1: 0}
    assert view.asked_times == {a0: 31, a1: 0}
    ending = ReadOptions.parse({**BASE, "subscribe": "a", "endingTimestamp": "7"}, streaming=False).ending
    assert resolve_offsets("endingOffsets", ending, [a0, a1], view) == {a0: 0, a1: 2}
    ending = ReadOptions.parse({**BASE, "subscribe": "a", "endingTimestamp": "1000"}, streaming=False).ending
    assert resolve_offsets("endingOffsets", ending, [a0, a1], view) == {a0: 4, a1: 3}  # no match: latest


def test_per_partition_timestamps_must_name_every_subscribed_partition_and_only_those():
    from raftka.spark.reader import resolve_offsets
    a0, a1 = T("a", 0), T("a", 1)
    view = FakeView({a0: 0, a1: 0}, {a0: 1, a1: 1}, {a0: [1], a1: [1]})
    for raw, words in (('{"a": {"0": 1}}', "every subscribed partition; missing: a-1"),
                       ('{"a": {"0": 1, "1": 1, "2": 1}}', "not subscribed or do not exist: a-2")):
        spec = ReadOptions.parse({**BASE, "subscribe": "a", "startingOffsetsByTimestamp": raw}, streaming=True).starting
        with pytest.raises(InvalidOptionError, match=words) as info:
            resolve_offsets("startingOffsets", spec, [a0, a1], view)
        assert info.value.option == "startingOffsetsByTimestamp"


def test_min_offsets_per_trigger_holds_batches_back_until_enough_records_or_the_delay(monkeypatch):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows
    from raftka.spark import reader as reader_module
    from raftka.spark.reader import RaftkaStreamReader
    a0 = T("a", 0)
    clock = [1000.0]
    monkeypatch.setattr(reader_module.time, "monotonic", lambda: clock[0])
    options = ReadOptions.parse({**BASE, "subscribe": "a", "minOffsetsPerTrigger": "50", "maxTriggerDelay": "10s"},
                                streaming=True)
    stream = RaftkaStreamReader(options)
    view = FakeView({a0: 0}, {a0: 5})
    stream._view_ = view
    limit = stream.getDefaultReadLimit()
    assert limit == ReadMinRows(50)
    start = {"a": {"0": 0}}
    assert stream.latestOffset(start, limit) == {"a": {"0": 5}}  # the first trigger goes ahead
    start = {"a": {"0": 5}}
    view.high[a0] = 40  # 35 waiting < 50
    clock[0] += 9.9
    assert stream.latestOffset(start, limit) == start  # held back: Spark runs no batch
    assert stream.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 40}}  # Trigger.Once reads all
    view.high[a0] = 55  # 50 waiting: enough
    assert stream.latestOffset(start, limit) == {"a": {"0": 55}}
    start = {"a": {"0": 55}}
    view.high[a0] = 56
    clock[0] += 10.0  # maxTriggerDelay since the last batch: one record is enough
    assert stream.latestOffset(start, limit) == {"a": {"0": 56}}
    both = RaftkaStreamReader(ReadOptions.parse({**BASE, "subscribe": "a", "minOffsetsPerTrigger": "5",
                                                 "maxOffsetsPerTrigger": "8"}, streaming=True))
    both._view_ = FakeView({a0: 0}, {a0: 100})
    assert both.latestOffset({"a": {"0": 0}}, both.getDefaultReadLimit()) == {"a": {"0": 8}}  # max caps
