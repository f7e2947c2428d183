"""The client as a kafka-python or aiokafka user expects it (#parity, issue 24).

Proves, against one controller and one broker on 127.0.0.1 (ports picked at run time, stopped by
PID at the end of the module):

- the keys kafka-python users pass that mean nothing here (``api_version``...) are accepted by
  every client alike, from the one table in client/aio/configs.py; an unknown key fails naming
  the closest known one; kafka-python's defaults are ours except where the table in
  docs/client.md says why;
- an unreachable bootstrap raises NoBrokersAvailable (a KafkaError, and the KafkaTimeoutError
  kafka-python 3 raises) from the constructors, naming the addresses and the connection error;
- ``metrics()`` gives kafka-python's ``{group: {name: value}}`` with figures that follow what
  the client did (records sent and consumed, commits, requests), and a Sensor computes Kafka's
  windowed rate, avg and max (checked with a fake clock);
- the asyncio classes have aiokafka's names: start/stop, send_and_wait, getone/getmany,
  ``async with`` and ``async for``.
"""
from __future__ import annotations

import asyncio
import math
import time
import uuid

import pytest

from raftka.client import (AdminClient, Consumer, KafkaError, KafkaTimeoutError, NewTopic, NoBrokersAvailable,
                           Producer, RecordMetadata, TopicPartition, aio)
from raftka.client.aio import configs as client_configs
from raftka.client.aio.admin import DEFAULTS as ADMIN_DEFAULTS
from raftka.client.aio.consumer import DEFAULTS as CONSUMER_DEFAULTS
from raftka.client.aio.producer import DEFAULTS as PRODUCER_DEFAULTS
from raftka.client.aio.metrics import MetricConfig, Sensor
from raftka.client.errors import ConfigError, IllegalStateError
from raftka.client.properties import client_configs as from_properties
from raftka.cluster import free_port_block
from helpers import wait_for_topic

pytestmark = pytest.mark.timeout(120)

CLIENTS = {"producer": aio.Producer, "consumer": aio.Consumer, "admin": aio.AdminClient}
DEFAULTS = {"producer": PRODUCER_DEFAULTS, "consumer": CONSUMER_DEFAULTS, "admin": ADMIN_DEFAULTS}


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("client-parity", controllers=1, brokers=1,
                                  configs={"group.initial.rebalance.delay.ms": 100})


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster)


def new_topic(admin: AdminClient, partitions: int = 2) -> str:
    name = f"parity-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1)])
    wait_for_topic(admin, name, partitions)
    return name


def dead_address() -> str:
    return f"127.0.0.1:{free_port_block(1)}"  # nothing listens there


# -- configs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(CLIENTS))
def test_every_client_accepts_the_keys_kafka_python_users_pass_that_mean_nothing_here(kind):
    # The producer refused api_version while the consumer took it; now one table serves all.
    # Any value: an ignored key is never looked at (a key the client uses is in its DEFAULTS).
    ignored = {key: object() for key in client_configs.IGNORED if key not in DEFAULTS[kind]}
    assert "api_version" in ignored and "api_version_auto_timeout_ms" in ignored
    client = CLIENTS[kind](bootstrap_servers="127.0.0.1:9", **ignored)
    assert not set(ignored) & set(client.config), f"the {kind} kept ignored keys"
    # The Kafka property names too (client.properties files, Spark's kafka.* options).
    assert from_properties({"api.version": "2.0.0", "reconnect.backoff.ms": "50"}, DEFAULTS[kind]) == {
        "api_version": "2.0.0", "reconnect_backoff_ms": "50"}


def test_the_producer_takes_api_version_and_keeps_max_in_flight_which_it_uses():
    p = aio.Producer(bootstrap_servers="127.0.0.1:9", api_version=(2, 0, 0), api_version_auto_timeout_ms=5000,
                     max_in_flight_requests_per_connection=3)
    assert p.config["max_in_flight_requests_per_connection"] == 3  # DEFAULTS win over IGNORED


@pytest.mark.parametrize("kind, key, hint", [
    ("producer", "lingr_ms", "linger_ms"),
    ("producer", "linger.ms", "linger_ms"),  # a Java property name passed as a keyword
    ("consumer", "auto_offset_rest", "auto_offset_reset"),
    ("consumer", "group.id", "group_id"),
    ("admin", "bootstrap_server", "bootstrap_servers"),
    ("admin", "request_timeout", "request_timeout_ms"),
])
def test_an_unknown_key_fails_naming_the_closest_known_key(kind, key, hint):
    with pytest.raises(ConfigError, match=f"{key}: unknown {kind} config.*did you mean '{hint}'"):
        CLIENTS[kind](bootstrap_servers="127.0.0.1:9", **{key: 1})


def test_an_unknown_key_without_a_close_one_fails_without_a_guess():
    with pytest.raises(ConfigError, match=r"zzz_qqq: unknown consumer config$"):
        aio.Consumer(bootstrap_servers="127.0.0.1:9", zzz_qqq=1)


def test_a_refused_kafka_python_key_says_why_and_is_accepted_at_its_default():
    with pytest.raises(ConfigError, match="transactional_id: not supported.*transactions"):
        aio.Producer(bootstrap_servers="127.0.0.1:9", transactional_id="tx-1")
    with pytest.raises(ConfigError, match="proxy_url: not supported"):
        aio.AdminClient(bootstrap_servers="127.0.0.1:9", proxy_url="http://proxy:3128")
    aio.Producer(bootstrap_servers="127.0.0.1:9", transactional_id=None, ssl_crlfile=None)


# Where our default is not kafka-python's, and why (docs/client.md has the same list).
DIFFERENT_DEFAULTS = {
    "bootstrap_servers",  # "localhost" there; the same broker, port 9092 written out
    "client_id",  # kafka-python-<version> there; raftka-producer/-consumer/-admin here
    "acks",  # -1 there, "all" here: the same setting
    "retries",  # inf there; Kafka's Java default (2**31 - 1) here, bounded by delivery_timeout_ms
    "linger_ms",  # 0 there; 5 here, Kafka 4's Java default (fuller batches for 5 ms)
    "partitioner",  # an instance there; None (DefaultPartitioner, Kafka's murmur2) here
    "default_offset_commit_callback",  # a logging lambda there; None (errors logged) here
    "partition_assignment_strategy",  # range + roundrobin classes there; cooperative-sticky here
    "session_timeout_ms",  # 45000 there (Kafka 3's); 10000 here, Kafka 2's, for faster failover
    "bootstrap_timeout_ms",  # 30000 there; None here: request_timeout_ms, 30000 by default (below)
}


def test_kafka_python_defaults_are_ours_except_the_listed_differences():
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient
    pairs = [(kafka.KafkaProducer, "producer"), (kafka.KafkaConsumer, "consumer"), (KafkaAdminClient, "admin")]
    compared = 0
    for theirs, kind in pairs:
        ours = DEFAULTS[kind]
        for key, value in theirs.DEFAULT_CONFIG.items():
            known = key in ours or key in client_configs.IGNORED or key in client_configs.REFUSED
            assert known, f"kafka-python's {kind} key {key} is neither taken, ignored nor refused"
            if key in ours and key not in DIFFERENT_DEFAULTS:
                assert ours[key] == value, f"{kind} {key}: ours {ours[key]!r}, kafka-python's {value!r}"
                compared += 1
    assert compared > 40  # the comparison compared something
    for kind, ours in DEFAULTS.items():
        assert ours["bootstrap_timeout_ms"] is None and ours["request_timeout_ms"] == 30_000, kind


# -- bootstrap ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda servers: Producer(bootstrap_servers=servers, bootstrap_timeout_ms=800),
    lambda servers: Consumer("t", bootstrap_servers=servers, group_id="g", bootstrap_timeout_ms=800),
    lambda servers: AdminClient(bootstrap_servers=servers, bootstrap_timeout_ms=800),
], ids=["producer", "consumer", "admin"])
def test_an_unreachable_bootstrap_raises_no_brokers_available_from_the_constructor(make):
    first, second = dead_address(), dead_address()
    started = time.monotonic()
    with pytest.raises(NoBrokersAvailable) as info:
        make(f"{first},{second}")
    took = time.monotonic() - started
    assert 0.7 < took < 5, f"gave up after {took:.2f} s, not bootstrap_timeout_ms=800"
    message = str(info.value)
    assert first in message and second in message and "refused" in message.lower()
    assert "last error: None" not in message
    assert isinstance(info.value, KafkaError) and isinstance(info.value, KafkaTimeoutError)


def test_without_bootstrap_timeout_ms_the_constructor_waits_request_timeout_ms():
    started = time.monotonic()
    with pytest.raises(NoBrokersAvailable, match="within 600 ms"):
        Producer(bootstrap_servers=dead_address(), request_timeout_ms=600)
    assert 0.5 < time.monotonic() - started < 5


def test_the_asyncio_start_raises_no_brokers_available_and_leaves_nothing_running():
    async def main() -> None:
        for cls in CLIENTS.values():
            client = cls(bootstrap_servers=dead_address(), bootstrap_timeout_ms=300)
            with pytest.raises(NoBrokersAvailable):
                await client.start()
            await client.close()
            with pytest.raises(NoBrokersAvailable):  # async with starts it the same way
                async with cls(bootstrap_servers=dead_address(), bootstrap_timeout_ms=300):
                    pass
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert not others, others
    asyncio.run(main())


def test_bootstrap_connected_is_true_while_connected_and_false_after_close(cluster):
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers)
    consumer = Consumer(bootstrap_servers=cluster.bootstrap_servers)
    admin = AdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        assert producer.bootstrap_connected() and consumer.bootstrap_connected() and admin.bootstrap_connected()
    finally:
        producer.close()
        consumer.close()
        admin.close()
    assert not producer.bootstrap_connected() and not consumer.bootstrap_connected()
    assert not admin.bootstrap_connected()


# -- metrics -----------------------------------------------------------------------------------

def test_a_sensor_gives_kafkas_windowed_rate_avg_and_max():
    now = [1000.0]
    sensor = Sensor(MetricConfig(num_samples=2, window_s=30.0), clock=lambda: now[0])
    assert sensor.rate == 0.0 and math.isnan(sensor.avg) and math.isnan(sensor.max)
    for value in (10, 20, 30):
        sensor.record(value)
    # A fresh sensor's elapsed time counts one whole window (num_samples - 1), as Kafka's Rate.
    assert sensor.rate == pytest.approx(60 / 30)
    assert sensor.avg == 20 and sensor.max == 30 and sensor.total == 60 and sensor.count == 3
    now[0] += 45  # a second sample
    sensor.record(60)
    assert sensor.rate == pytest.approx(120 / 45) and sensor.max == 60
    assert sensor.count_rate == pytest.approx(4 / 45)
    now[0] += 61  # the first sample is older than 2 windows: gone; totals stay
    assert sensor.max == 60 and sensor.avg == 60 and sensor.total == 120
    now[0] += 60
    assert math.isnan(sensor.max) and sensor.rate == 0.0 and sensor.total == 120


def test_producer_metrics_follow_what_was_sent(cluster, admin):
    topic = new_topic(admin)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0) as producer:
        for i in range(50):
            producer.send(topic, b"v%d" % i, key=b"%d" % i)
        assert producer.flush(timeout=30) == []
        m = producer.metrics()["producer-metrics"]
    assert m["record-error-total"] == 0
    assert m["record-send-total"] - m["record-retry-total"] == 50
    assert m["record-send-rate"] > 0
    assert 0 < m["batch-size-avg"] <= m["batch-size-max"]
    assert 1 <= m["records-per-request-avg"] <= 50
    assert 0 < m["request-latency-avg"] <= m["request-latency-max"]
    assert m["record-queue-time-max"] >= 0
    assert m["buffer-available-bytes"] == m["buffer-total-bytes"] == 33_554_432  # all released after flush
    assert m["requests-in-flight"] == 0
    assert m["connection-count"] >= 1 and m["request-total"] >= m["response-total"] > 0


def test_consumer_metrics_follow_what_was_fetched_consumed_and_committed(cluster, admin):
    topic = new_topic(admin, 2)
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for i in range(30):
            producer.send(topic, b"%d" % i, key=b"%d" % i)
        producer.flush(timeout=30)
    consumer = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=f"g-{topic}",
                        auto_offset_reset="earliest", enable_auto_commit=False, heartbeat_interval_ms=200,
                        consumer_timeout_ms=5000)
    try:
        got = [record for _, record in zip(range(30), consumer)]
        assert len(got) == 30
        consumer.commit()
        deadline = time.monotonic() + 10
        while consumer.metrics()["consumer-coordinator-metrics"]["heartbeat-total"] < 1:
            assert time.monotonic() < deadline, "no heartbeat answered in 10 s"
            consumer.poll(100)
        m = consumer.metrics()
    finally:
        consumer.close()
    fetch = m["consumer-fetch-manager-metrics"]
    assert fetch["records-consumed-total"] == 30 and fetch["records-consumed-rate"] > 0
    assert fetch["fetch-total"] >= 1 and fetch["bytes-consumed-total"] > 0
    assert 0 < fetch["fetch-size-avg"] <= fetch["fetch-size-max"]
    assert fetch["fetch-latency-avg"] > 0 and fetch["fetch-latency-max"] >= fetch["fetch-latency-avg"]
    assert fetch["records-lag-max"] >= 0 and fetch["records-per-request-avg"] > 0
    group = m["consumer-coordinator-metrics"]
    assert group["assigned-partitions"] == 2
    assert group["join-total"] >= 1 and group["sync-total"] >= 1 and group["rebalance-total"] >= 1
    assert group["commit-total"] == 1 and group["commit-latency-avg"] > 0
    assert group["last-heartbeat-seconds-ago"] >= 0 and group["last-rebalance-seconds-ago"] >= 0
    assert m["consumer-metrics"]["request-total"] > 0


def test_a_consumer_without_a_group_has_no_coordinator_metrics(cluster):
    with Consumer(bootstrap_servers=cluster.bootstrap_servers) as consumer:
        assert set(consumer.metrics()) == {"consumer-metrics", "consumer-fetch-manager-metrics"}


def test_admin_metrics_count_its_requests(cluster):
    with AdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        before = admin.metrics()["admin-client-metrics"]["request-total"]
        admin.list_topics()
        admin.describe_cluster()
        m = admin.metrics()["admin-client-metrics"]
    assert m["request-total"] >= before + 2
    assert 0 < m["request-latency-avg"] <= m["request-latency-max"]


# -- aiokafka's names --------------------------------------------------------------------------

def test_the_asyncio_classes_answer_to_aiokafkas_names(cluster, admin):
    topic = new_topic(admin, 2)
    servers = cluster.bootstrap_servers

    async def main() -> None:
        async with aio.AIOKafkaProducer(bootstrap_servers=servers) as producer:
            meta = await producer.send_and_wait(topic, b"first", key=b"k", partition=0)
            assert isinstance(meta, RecordMetadata) and meta.partition == 0 and meta.offset == 0
            future = await producer.send(topic, b"second", partition=1)
            assert (await future).offset == 0
            for i in range(8):
                await producer.send_and_wait(topic, b"%d" % i, partition=i % 2)
            assert producer.bootstrap_connected()
            assert producer.metrics()["producer-metrics"]["record-send-total"] >= 10

        consumer = aio.AIOKafkaConsumer(topic, bootstrap_servers=servers, auto_offset_reset="earliest",
                                        consumer_timeout_ms=3000)
        await consumer.start()
        try:
            p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
            first = await consumer.getone()
            assert first is not None
            batch: dict = {}
            deadline = time.monotonic() + 10
            while not batch.get(p1) and time.monotonic() < deadline:
                batch = await consumer.getmany(p1, timeout_ms=1000, max_records=3)
                assert set(batch) <= {p1}, "getmany(p1) returned another partition's records"
            assert 1 <= len(batch[p1]) <= 3 and all(r.partition == 1 for r in batch[p1])
            with pytest.raises(IllegalStateError):
                await consumer.getmany(TopicPartition(topic, 7))
            rest = [r async for r in consumer]  # ends after consumer_timeout_ms without a record
            values = [first.value] + [r.value for r in batch[p1]] + [r.value for r in rest]
            assert sorted(values) == sorted([b"first", b"second"] + [b"%d" % i for i in range(8)])
            assert await consumer.position(p0) == 5 and await consumer.position(p1) == 5
        finally:
            await consumer.stop()

        async with aio.AIOKafkaAdminClient(bootstrap_servers=servers) as client:
            assert topic in await client.list_topics()
            assert client.metrics()["admin-client-metrics"]["request-total"] >= 2

        async with aio.Consumer(bootstrap_servers=servers, auto_offset_reset="earliest") as again:
            again.assign([TopicPartition(topic, 0)])
            many = await again.getmany(timeout_ms=5000, max_records=2)
            assert sum(len(records) for records in many.values()) == 2
        with pytest.raises(Exception, match="closed"):
            await again.getmany(timeout_ms=0)
    asyncio.run(main())
