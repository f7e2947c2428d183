"""The `raftka` Spark data source against a secure cluster (issue #22), with the credentials as
`kafka.`-prefixed options, as spark-sql-kafka takes them.

A cluster of 1 controller + 1 broker (real processes on 127.0.0.1); the broker listens on
PLAINTEXT (inter-broker, topic creation) and SASL_SSL (SCRAM-SHA-256, a certificate from a CA
made here), with the SCRAM user alice from the first start. One SparkSession (local[2]). What it
shows, every Spark connection going to the SASL_SSL port only:

- a batch read with kafka.security.protocol=SASL_SSL, kafka.sasl.mechanism, kafka.sasl.jaas.config
  and kafka.ssl.truststore.location returns exactly the records a producer wrote over SASL_SSL;
- the writer writes a DataFrame over SASL_SSL, and a consumer over SASL_SSL reads it back;
- a wrong password fails a read and a write at once (not after a timeout) with a message that
  names SASL authentication and not the password.

Skipped (with the reason) when Java 17+ is missing.
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from helpers import cluster_with_listeners, wait_for_topic
from raftka.cluster.certs import CertificateAuthority, write_pem

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

PASSWORD = "alice-Spark-s3cret"
WRONG_PASSWORD = "not-alices-Passw0rd"
MECHANISM = "SCRAM-SHA-256"
RECORDS = 300
WAIT_S = 30.0
FAIL_FAST_S = 60.0  # a refused login ends the query well before the write's max.block.ms (set to 120 s)


def jaas(password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{password}";'


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory) -> tuple[str, str]:
    """(the CA's certificate: the clients' truststore, the broker's keystore)."""
    directory: Path = tmp_path_factory.mktemp("spark-pki")
    ca = CertificateAuthority.create("raftka spark test CA", days=1)
    broker = ca.issue("broker", ("127.0.0.1", "localhost"), days=1)
    return (str(write_pem(directory / "ca.pem", ca.cert_pem)),
            str(write_pem(directory / "broker.pem", broker.keystore_pem)))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, ca_file):
    """Stopped by PID at the end of the module."""
    broker_configs = {"ssl.keystore.location": ca_file[1],
                      "listener.name.sasl_ssl.sasl.enabled.mechanisms": MECHANISM}
    made = cluster_with_listeners("SASL_SSL").start(
        tmp_path_factory.mktemp("spark-sasl"), controllers=1, brokers=1, broker_configs=broker_configs,
        add_scram=[f"{MECHANISM}=[name=alice,password={PASSWORD},iterations=4096]"])
    try:
        yield made
    finally:
        made.close()


def spark_options(cluster: Any, truststore: str, password: str = PASSWORD) -> dict[str, str]:
    """What a spark-sql-kafka user writes for a SASL_SSL cluster."""
    return {"kafka.bootstrap.servers": cluster.bootstrap("SASL_SSL"), "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": MECHANISM, "kafka.sasl.jaas.config": jaas(password),
            "kafka.ssl.truststore.location": truststore}


def client_configs(cluster: Any, truststore: str) -> dict[str, Any]:
    """The same for Raftka's own client (checking Spark's work without Spark)."""
    return {"bootstrap_servers": cluster.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
            "sasl_mechanism": MECHANISM, "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD,
            "ssl_cafile": truststore}


def new_topic(cluster: Any, partitions: int = 2) -> str:
    from raftka.client import AdminClient, NewTopic
    name = f"secure-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:  # PLAINTEXT: no ACLs here
        admin.create_topics([NewTopic(name, partitions, 1)])
        wait_for_topic(admin, name, partitions)
    return name


def read_back(cluster: Any, truststore: str, topic: str, count: int) -> list[tuple[int, bytes | None, bytes]]:
    """(partition, key, value) of the first ``count`` records of ``topic``, read over SASL_SSL."""
    from raftka.client import Consumer, TopicPartition
    consumer = Consumer(auto_offset_reset="earliest", **client_configs(cluster, truststore))
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        out: list[tuple[int, bytes | None, bytes]] = []
        deadline = time.monotonic() + WAIT_S
        while len(out) < count:
            assert time.monotonic() < deadline, f"read {len(out)} of {count} records back"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend((r.partition, r.key, r.value) for r in records)
        return out
    finally:
        consumer.close()


def test_a_batch_read_over_sasl_ssl_returns_what_was_produced_over_sasl_ssl(spark, cluster, ca_file):
    from raftka.client import Producer
    topic = new_topic(cluster)
    with Producer(acks="all", **client_configs(cluster, ca_file[0])) as producer:
        futures = [producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(RECORDS)]
        metadata = [f.get(WAIT_S) for f in futures]
    sent = sorted((m.partition, m.offset, f"k{i}".encode(), f"v{i}".encode()) for i, m in enumerate(metadata))
    rows = spark.read.format("raftka").options(**spark_options(cluster, ca_file[0])).option("subscribe", topic) \
        .load().collect()
    assert sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows) == sent


def test_the_writer_writes_a_dataframe_over_sasl_ssl(spark, cluster, ca_file):
    topic = new_topic(cluster)
    rows = [(f"k{i}", f"w{i}") for i in range(RECORDS)]
    spark.createDataFrame(rows, "key string, value string").write.format("raftka") \
        .options(**spark_options(cluster, ca_file[0])).option("topic", topic).mode("append").save()
    got = read_back(cluster, ca_file[0], topic, RECORDS)
    assert sorted((k, v) for _, k, v in got) == sorted((k.encode(), v.encode()) for k, v in rows)


def test_a_wrong_password_fails_a_read_and_a_write_at_once_naming_sasl_authentication(spark, cluster, ca_file):
    topic = new_topic(cluster, partitions=1)
    wrong = spark_options(cluster, ca_file[0], WRONG_PASSWORD)
    started = time.monotonic()
    with pytest.raises(Exception) as read_failure:
        spark.read.format("raftka").options(**wrong).option("subscribe", topic).load().collect()
    read_s = time.monotonic() - started
    started = time.monotonic()
    with pytest.raises(Exception) as write_failure:
        spark.createDataFrame([("x",)], "value string").write.format("raftka").options(**wrong) \
            .option("topic", topic).option("kafka.max.block.ms", "120000").mode("append").save()
    write_s = time.monotonic() - started
    for failure, took in ((read_failure, read_s), (write_failure, write_s)):
        message = str(failure.value)
        assert "SaslAuthenticationFailedError" in message, message[-2000:]
        assert f"authentication with SASL mechanism {MECHANISM} failed" in message, message[-2000:]
        assert WRONG_PASSWORD not in message and PASSWORD not in message
        assert took < FAIL_FAST_S, f"failed after {took:.0f} s, not at once"
