"""Kafka's own clients against a real Raftka cluster, over Kafka's wire protocol.

What it proves: four independent implementations of Kafka's protocol (kafka-python, aiokafka,
confluent-kafka / librdkafka, kcat) can each run a topic's whole life on Raftka: create it (their
admin API; kcat has none, so Raftka's AdminClient), produce with acks=all, the idempotent producer,
keys, headers and each compression codec they offer, consume in a group of two members that
commit, restart the group and go on from the committed offsets, list and describe the group, and
delete the topic. Every record is counted exactly once: the test compares the multiset of
(key, value) read with the one sent, so a lost record and a duplicate both fail it.

How: one cluster (3 controllers + 3 brokers, replication factor 3, min.insync.replicas 2) for the
module. A group's records are produced only once both members hold partitions, so no record is
consumed before the group is stable and each member commits what it consumed before it polls
again; a restart that ignored the committed offsets would read the first phase again
(auto.offset.reset=earliest) and show up as duplicates. A codec missing from BROKER_CODECS (all
five are there now) would be a strict xfail; a codec a client cannot compress with (a missing optional package) is a skip naming the package.
kcat runs with librdkafka's debug output, which says when it sends a batch uncompressed because it
believes the broker cannot take the codec (KAFKA-18659). Raw Fetch requests check that a fetch
session is made on request and an unknown one gets KIP-227's error (kafka-python's consumers
fetch in sessions; librdkafka and aiokafka send sessionless fetches). The last test kills (kill -9) a partition's leader under a librdkafka idempotent producer and checks
that every acknowledged record is read back exactly once. Random choices come from ``SEED``
(printed on failure; set RAFTKA_COMPAT_SEED to replay).
"""
from __future__ import annotations

import asyncio
import collections
import os
import random
import shutil
import signal
import subprocess
import threading
import time
import uuid
from typing import Any, Callable, Iterable

import pytest

from helpers import FAST_CLUSTER_CONFIGS, wait_for_topic
from raftka.cluster import wait_until

# The clients are in pyproject's test extra; without one the module cannot say anything.
pytest.importorskip("kafka")
pytest.importorskip("aiokafka")
pytest.importorskip("confluent_kafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic as ANewTopic  # noqa: E402
from confluent_kafka import Consumer as CConsumer, KafkaException  # noqa: E402
from confluent_kafka import Producer as CProducer, TopicPartition as CTP  # noqa: E402
from confluent_kafka.admin import AdminClient as CAdminClient, NewTopic as CNewTopic  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from kafka import codec as kafka_codec  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic  # noqa: E402
from raftka.client import NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(150)

SEED = int(os.environ.get("RAFTKA_COMPAT_SEED", random.randrange(1 << 30)))

PARTITIONS = 4
REPLICATION = 3
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
PHASE_RECORDS = 30  # per phase of a group test: modest, the suite runs on 2 cores
CODEC_RECORDS = 10
HEADERS = [("trace", b"t-1"), ("origin", b"compat")]
WAIT_S = 30.0

# What the broker stores (common/records.py SUPPORTED_COMPRESSION): all five of Kafka's codecs.
BROKER_CODECS = {"none", "gzip", "snappy", "lz4", "zstd"}
ALL_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def codec_params(client_lacks: dict[str, str] | None = None) -> list[Any]:
    """One param per codec: a strict xfail where the broker refuses it, a skip where the client
    cannot compress with it (a missing optional package)."""
    params = []
    for codec in ALL_CODECS:
        marks = []
        if client_lacks and codec in client_lacks:
            marks.append(pytest.mark.skip(reason=client_lacks[codec]))
        elif codec not in BROKER_CODECS:
            marks.append(pytest.mark.xfail(
                strict=True, reason=f"the broker does not accept {codec} batches yet "
                                    "(common/records.py SUPPORTED_COMPRESSION is none and lz4)"))
        params.append(pytest.param(codec, marks=marks, id=codec))
    return params


@pytest.fixture(autouse=True)
def _print_seed():
    """The seed in every test's captured output, which pytest shows when the test fails."""
    print(f"RAFTKA_COMPAT_SEED={SEED}")


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """3 controllers + 3 brokers (real processes), stopped by PID at the end of the module."""
    return module_cluster_factory("compat", controllers=3, brokers=3, configs=FAST_CLUSTER_CONFIGS)


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster, request_timeout_ms=15_000)


@pytest.fixture
def rng(request):
    return random.Random(f"{SEED}-{request.node.name}")


def topic_name(client: str) -> str:
    return f"compat-{client}-{uuid.uuid4().hex[:8]}"


def records(prefix: str, count: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs; keys repeat (8 distinct) so partitions get several records per key."""
    return [(b"k%d" % (i % 8), b"%s-%d" % (prefix.encode(), i)) for i in range(start, start + count)]


def assert_exactly_once(sent: Iterable[tuple[bytes, bytes]], read: Iterable[tuple[bytes, bytes]]) -> None:
    sent_c, read_c = collections.Counter(sent), collections.Counter(read)
    lost = sent_c - read_c
    extra = read_c - sent_c
    assert not lost and not extra, f"lost {sorted(lost.items())[:10]}, duplicated or unexpected " \
                                   f"{sorted(extra.items())[:10]} (seed {SEED})"


def wait_group_members(admin, group: str, members: int, partitions: int) -> None:
    """Until Raftka's admin describes ``group`` as Stable with ``members`` members that hold all
    ``partitions`` partitions between them."""
    def ready() -> bool:
        found = admin.describe_consumer_groups([group])[0]
        return found.state == "Stable" and len(found.members) == members
    wait_until(ready, WAIT_S, what=f"group {group} Stable with {members} members")


# -- kafka-python -----------------------------------------------------------------------------------


KAFKA_PYTHON_LACKS = {}
if not kafka_codec.has_snappy():
    KAFKA_PYTHON_LACKS["snappy"] = "kafka-python needs python-snappy for snappy (not installed)"
if not kafka_codec.has_zstd():
    KAFKA_PYTHON_LACKS["zstd"] = "kafka-python needs zstandard for zstd (not installed)"
if not kafka_codec.has_lz4():
    KAFKA_PYTHON_LACKS["lz4"] = "kafka-python needs lz4 for lz4 (not installed)"


def kp_producer(cluster, **extra) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", enable_idempotence=True,
                         linger_ms=5, request_timeout_ms=10_000, delivery_timeout_ms=20_000, **extra)


def kp_produce(cluster, topic: str, pairs, codec: str = "none") -> None:
    producer = kp_producer(cluster, compression_type=None if codec == "none" else codec)
    try:
        futures = [producer.send(topic, value=v, key=k, headers=HEADERS) for k, v in pairs]
        producer.flush(timeout=30)
        for future in futures:
            future.get(timeout=1)
    finally:
        producer.close(timeout=5)


def kp_consumer(cluster, group: str | None, **extra) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                         request_timeout_ms=10_000, fetch_max_wait_ms=100, **extra)


def kp_group_phase(cluster, topic: str, group: str, pairs, produce: Callable[[], None],
                   describe: Callable[[], None] | None = None) -> list[tuple[bytes, bytes]]:
    """Two members join, each polling in its own thread (kafka-python joins inside poll(), so one
    thread polling both would hold a member's JoinGroup while the other never rejoins); once both
    hold partitions, ``produce`` runs; each member commits after every poll that returned records,
    until ``len(pairs)`` records are read; both close."""
    members = [kp_consumer(cluster, group, max_poll_interval_ms=10_000) for _ in range(2)]
    read: list[tuple[bytes, bytes]] = []
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[BaseException] = []

    def run(member: KafkaConsumer) -> None:
        try:
            member.subscribe([topic])
            while not stop.is_set():
                got = member.poll(timeout_ms=100)
                for batch in got.values():
                    for record in batch:
                        assert [(h, bytes(v)) for h, v in record.headers] == HEADERS
                        with lock:
                            read.append((record.key, record.value))
                if got:
                    member.commit()
        except BaseException as error:  # reported by the main thread
            failures.append(error)
        finally:
            member.close(autocommit=False)

    threads = [threading.Thread(target=run, args=(m,), daemon=True) for m in members]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: failures or (all(m.assignment() for m in members)
                                        and sum(len(m.assignment()) for m in members) == PARTITIONS),
                   WAIT_S, what="both members hold partitions")
        assert not failures, failures
        if describe is not None:
            describe()
        produce()
        wait_until(lambda: failures or len(read) >= len(pairs), WAIT_S, what=f"{len(pairs)} records read")
        time.sleep(0.3)  # a duplicate would show up here
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
    assert not failures, failures
    return list(read)


def test_kafka_python_runs_a_topic_life_with_a_group_of_two_that_restarts(cluster, admin):
    topic, group = topic_name("kp"), f"g-kp-{uuid.uuid4().hex[:6]}"
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=15_000)
    try:
        kadmin.create_topics([KNewTopic(topic, PARTITIONS, REPLICATION, topic_configs=TOPIC_CONFIGS)])
        wait_for_topic(admin, topic, PARTITIONS)
        first, second = records("a", PHASE_RECORDS), records("b", PHASE_RECORDS, PHASE_RECORDS)

        def describe() -> None:
            listed = [g["group_id"] if isinstance(g, dict) else g[0] for g in kadmin.list_groups()]
            assert group in listed
            described = kadmin.describe_groups([group])[group]
            assert described["group_state"] == "Stable", described
            assert len(described["members"]) == 2, described

        read = kp_group_phase(cluster, topic, group, first, lambda: kp_produce(cluster, topic, first), describe)
        assert_exactly_once(first, read)
        committed = kadmin.list_group_offsets({group: None})[group]
        assert sum(o.offset for o in committed.values()) == PHASE_RECORDS, committed
        read2 = kp_group_phase(cluster, topic, group, second, lambda: kp_produce(cluster, topic, second))
        assert_exactly_once(second, read2)  # from the committed offsets: nothing of the first phase again
        kadmin.delete_topics([topic])
        wait_until(lambda: topic not in kadmin.list_topics(), WAIT_S, what=f"{topic} deleted")
    finally:
        kadmin.close()


def kp_read_all(cluster, topic: str, count: int) -> list[tuple[bytes, bytes]]:
    consumer = kp_consumer(cluster, None)
    try:
        consumer.subscribe([topic])
        read: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + WAIT_S
        while len(read) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                read.extend((r.key, r.value) for r in batch)
        for batch in consumer.poll(timeout_ms=200).values():
            read.extend((r.key, r.value) for r in batch)
        return read
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", codec_params(KAFKA_PYTHON_LACKS))
def test_kafka_python_produces_and_reads_back_with_codec(cluster, admin, codec):
    topic = topic_name(f"kp-{codec}")
    admin.create_topics([NewTopic(topic, 2, REPLICATION)])
    wait_for_topic(admin, topic, 2)
    pairs = records(codec, CODEC_RECORDS)
    kp_produce(cluster, topic, pairs, codec)
    assert_exactly_once(pairs, kp_read_all(cluster, topic, len(pairs)))


def test_raftka_and_kafka_python_put_the_same_key_in_the_same_partition(cluster, admin, rng):
    from raftka.client import Producer
    topic = topic_name("murmur")
    admin.create_topics([NewTopic(topic, 7, REPLICATION)])
    wait_for_topic(admin, topic, 7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 24))) for _ in range(40)]
    with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=2) as ours:
        mine = [ours.send(topic, b"raftka", key=k) for k in keys]
        ours.flush(timeout=30)
        raftka_partitions = [f.get(timeout=10).partition for f in mine]
    theirs = kp_producer(cluster)
    try:
        futures = [theirs.send(topic, value=b"kp", key=k) for k in keys]
        theirs.flush(timeout=30)
        kp_partitions = [f.get(timeout=1).partition for f in futures]
    finally:
        theirs.close(timeout=5)
    assert raftka_partitions == kp_partitions, f"keys {keys} (seed {SEED})"
    assert len(set(kp_partitions)) > 1


# -- aiokafka ---------------------------------------------------------------------------------------



async def aio_produce(cluster, topic: str, pairs, codec: str = "none") -> None:
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", enable_idempotence=True,
                                linger_ms=5, request_timeout_ms=10_000,
                                compression_type=None if codec == "none" else codec)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=k, headers=HEADERS) for k, v in pairs]
        await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
    finally:
        await producer.stop()


def aio_consumer(cluster, group: str | None) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                            heartbeat_interval_ms=500, request_timeout_ms=10_000, fetch_max_wait_ms=100)


async def aio_group_phase(cluster, topic: str, group: str, pairs, produce, describe=None):
    members = [aio_consumer(cluster, group) for _ in range(2)]
    read: list[tuple[bytes, bytes]] = []
    try:
        for member in members:
            await member.start()
            member.subscribe([topic])

        async def poll_all() -> None:
            for member in members:
                got = await member.getmany(timeout_ms=100)
                for batch in got.values():
                    for record in batch:
                        assert list(record.headers) == HEADERS
                        read.append((record.key, record.value))
                if got:
                    await member.commit()

        deadline = time.monotonic() + WAIT_S
        while not all(m.assignment() for m in members) or \
                sum(len(m.assignment()) for m in members) != PARTITIONS:
            assert time.monotonic() < deadline, "the group never gave both members partitions"
            await poll_all()
        if describe is not None:
            await describe()
        await produce()
        while len(read) < len(pairs) and time.monotonic() < deadline + WAIT_S:
            await poll_all()
        await poll_all()
    finally:
        for member in members:
            await member.stop()
    return read


def test_aiokafka_runs_a_topic_life_with_a_group_of_two_that_restarts(cluster, admin):
    topic, group = topic_name("aio"), f"g-aio-{uuid.uuid4().hex[:6]}"
    first, second = records("a", PHASE_RECORDS), records("b", PHASE_RECORDS, PHASE_RECORDS)

    async def main() -> None:
        aadmin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=15_000)
        await aadmin.start()
        try:
            await aadmin.create_topics([ANewTopic(topic, PARTITIONS, REPLICATION, topic_configs=TOPIC_CONFIGS)])
            await asyncio.to_thread(wait_for_topic, admin, topic, PARTITIONS)

            async def describe() -> None:
                listed = [g[0] if isinstance(g, tuple) else g for g in await aadmin.list_consumer_groups()]
                assert group in listed
                described = await aadmin.describe_consumer_groups([group])
                groups = described[0].groups if hasattr(described[0], "groups") else described
                found = [g for g in groups if g[1] == group]
                assert found and found[0][2] == "Stable" and len(found[0][5]) == 2, found

            read = await aio_group_phase(cluster, topic, group, first, lambda: aio_produce(cluster, topic, first),
                                         describe)
            assert_exactly_once(first, read)
            read2 = await aio_group_phase(cluster, topic, group, second,
                                          lambda: aio_produce(cluster, topic, second))
            assert_exactly_once(second, read2)
            await aadmin.delete_topics([topic])
        finally:
            await aadmin.close()

    asyncio.run(main())
    wait_until(lambda: topic not in admin.list_topics(), WAIT_S, what=f"{topic} deleted")


@pytest.mark.parametrize("codec", codec_params())
def test_aiokafka_produces_and_reads_back_with_codec(cluster, admin, codec):
    topic = topic_name(f"aio-{codec}")
    admin.create_topics([NewTopic(topic, 2, REPLICATION)])
    wait_for_topic(admin, topic, 2)
    pairs = records(codec, CODEC_RECORDS)

    async def main() -> list[tuple[bytes, bytes]]:
        await aio_produce(cluster, topic, pairs, codec)
        consumer = aio_consumer(cluster, None)
        await consumer.start()
        try:
            consumer.subscribe([topic])
            read: list[tuple[bytes, bytes]] = []
            deadline = time.monotonic() + WAIT_S
            while len(read) < len(pairs) and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    read.extend((r.key, r.value) for r in batch)
            return read
        finally:
            await consumer.stop()

    assert_exactly_once(pairs, asyncio.run(main()))


# -- confluent-kafka (librdkafka) -------------------------------------------------------------------



def ck_conf(cluster, **extra) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap_servers, "socket.timeout.ms": 10_000,
            "topic.metadata.refresh.interval.ms": 2000, **extra}


def ck_produce(cluster, topic: str, pairs, codec: str = "none") -> None:
    producer = CProducer(ck_conf(cluster, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                            "compression.type": codec, "message.timeout.ms": 20_000}))
    failures: list[Any] = []
    for key, value in pairs:
        producer.produce(topic, value=value, key=key, headers=HEADERS,
                         on_delivery=lambda err, msg: err is not None and failures.append(err))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not failures, failures


def ck_consumer(cluster, group: str) -> CConsumer:
    return CConsumer(ck_conf(cluster, **{"group.id": group, "auto.offset.reset": "earliest",
                                        "enable.auto.commit": False, "session.timeout.ms": 6000,
                                        "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 100}))


def ck_group_phase(cluster, topic: str, group: str, pairs, produce, describe=None):
    members = [ck_consumer(cluster, group) for _ in range(2)]
    read: list[tuple[bytes, bytes]] = []
    try:
        for member in members:
            member.subscribe([topic])

        def poll_all() -> None:
            for member in members:
                got = member.consume(num_messages=100, timeout=0.1)
                real = [m for m in got if m.error() is None]
                for message in got:
                    if message.error() is not None and not message.error().code() == -191:  # _PARTITION_EOF
                        raise KafkaException(message.error())
                for message in real:
                    assert message.headers() == HEADERS
                    read.append((message.key(), message.value()))
                if real:
                    member.commit(asynchronous=False)

        deadline = time.monotonic() + WAIT_S
        while not all(m.assignment() for m in members) or \
                sum(len(m.assignment()) for m in members) != PARTITIONS:
            assert time.monotonic() < deadline, "the group never gave both members partitions"
            poll_all()
        if describe is not None:
            describe()
        produce()
        while len(read) < len(pairs) and time.monotonic() < deadline + WAIT_S:
            poll_all()
        poll_all()
    finally:
        for member in members:
            member.close()
    return read


def test_confluent_kafka_runs_a_topic_life_with_a_group_of_two_that_restarts(cluster, admin):
    topic, group = topic_name("ck"), f"g-ck-{uuid.uuid4().hex[:6]}"
    first, second = records("a", PHASE_RECORDS), records("b", PHASE_RECORDS, PHASE_RECORDS)
    cadmin = CAdminClient(ck_conf(cluster))
    futures = cadmin.create_topics([CNewTopic(topic, PARTITIONS, REPLICATION, config=TOPIC_CONFIGS)])
    futures[topic].result(timeout=WAIT_S)
    wait_for_topic(admin, topic, PARTITIONS)

    def describe() -> None:
        listed = cadmin.list_consumer_groups(request_timeout=15).result(timeout=WAIT_S)
        assert group in [g.group_id for g in listed.valid], listed.errors
        described = cadmin.describe_consumer_groups([group], request_timeout=15)[group].result(timeout=WAIT_S)
        assert described.group_id == group and len(described.members) == 2
        assert str(described.state).endswith("STABLE"), described.state

    read = ck_group_phase(cluster, topic, group, first, lambda: ck_produce(cluster, topic, first), describe)
    assert_exactly_once(first, read)
    read2 = ck_group_phase(cluster, topic, group, second, lambda: ck_produce(cluster, topic, second))
    assert_exactly_once(second, read2)
    cadmin.delete_topics([topic])[topic].result(timeout=WAIT_S)
    wait_until(lambda: topic not in admin.list_topics(), WAIT_S, what=f"{topic} deleted")


def ck_read_to_end(cluster, topic: str, partitions: int) -> list[tuple[bytes | None, bytes]]:
    """Every record of ``topic`` up to each partition's high watermark (assigned, no group)."""
    consumer = CConsumer(ck_conf(cluster, **{"group.id": f"reader-{uuid.uuid4().hex[:6]}",
                                            "enable.auto.commit": False, "fetch.wait.max.ms": 100}))
    try:
        ends = {p: consumer.get_watermark_offsets(CTP(topic, p), timeout=15)[1] for p in range(partitions)}
        consumer.assign([CTP(topic, p, 0) for p in range(partitions)])
        positions = {p: 0 for p in range(partitions)}
        read: list[tuple[bytes | None, bytes]] = []
        deadline = time.monotonic() + WAIT_S
        while any(positions[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"read {positions} of {ends}"
            for message in consumer.consume(num_messages=500, timeout=0.2):
                if message.error() is None:
                    read.append((message.key(), message.value()))
                    positions[message.partition()] = message.offset() + 1
        return read
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", codec_params())
def test_confluent_kafka_produces_and_reads_back_with_codec(cluster, admin, codec):
    topic = topic_name(f"ck-{codec}")
    admin.create_topics([NewTopic(topic, 2, REPLICATION)])
    wait_for_topic(admin, topic, 2)
    pairs = records(codec, CODEC_RECORDS)
    ck_produce(cluster, topic, pairs, codec)
    assert_exactly_once(pairs, ck_read_to_end(cluster, topic, 2))


# -- kcat (librdkafka's command line) ---------------------------------------------------------------

KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/test.sh installs it "
                                                     "with apt-get install kcat)")
KCAT_FORMAT = "%k\t%s\t%h\n"
KCAT_HEADER_TEXT = ",".join(f"{k}={v.decode()}" for k, v in HEADERS)


def kcat_produce(cluster, topic: str, pairs, codec: str = "none") -> None:
    args = [KCAT, "-P", "-b", cluster.bootstrap_servers, "-t", topic, "-K", ":", "-z", codec, "-d", "msg",
            "-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=5",
            "-X", "message.timeout.ms=20000"]
    for key, value in HEADERS:
        args += ["-H", f"{key}={value.decode()}"]
    stdin = b"".join(k + b":" + v + b"\n" for k, v in pairs)
    done = subprocess.run(args, input=stdin, capture_output=True, timeout=WAIT_S)
    assert done.returncode == 0 and b"fail" not in done.stderr.lower(), done.stderr.decode()[-3000:]
    # librdkafka sends a batch uncompressed, without an error, when it believes the broker cannot
    # take the codec (KAFKA-18659); the debug line says so.
    assert b"not compressing batch" not in done.stderr, done.stderr.decode()[-3000:]


class KcatMember:
    """One ``kcat -G`` process (librdkafka's balanced consumer); its lines are read by a thread.
    SIGTERM makes kcat close the consumer, which commits the offsets it stored."""

    def __init__(self, cluster, group: str, topic: str) -> None:
        self.lines: list[bytes] = []
        self.process = subprocess.Popen(
            [KCAT, "-b", cluster.bootstrap_servers, "-G", group, "-f", KCAT_FORMAT, "-u",
             "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000",
             "-X", "heartbeat.interval.ms=500", "-X", "fetch.wait.max.ms=100",
             "-X", "auto.commit.interval.ms=500", topic],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip(b"\n"))

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join(timeout=5)
        return self.process.stderr.read().decode(errors="replace")


def kcat_group_phase(cluster, admin, topic: str, group: str, pairs) -> list[tuple[bytes, bytes]]:
    members = [KcatMember(cluster, group, topic) for _ in range(2)]
    stderr = []
    try:
        wait_group_members(admin, group, 2, PARTITIONS)
        kcat_produce(cluster, topic, pairs)
        wait_until(lambda: sum(len(m.lines) for m in members) >= len(pairs), WAIT_S,
                   what=f"kcat members read {len(pairs)} records")
        time.sleep(1.0)  # the auto commit (500 ms) and any duplicate have time to happen
    finally:
        stderr = [m.stop() for m in members]
    read = []
    for member in members:
        for line in member.lines:
            key, value, headers = line.split(b"\t")
            assert headers.decode() == KCAT_HEADER_TEXT, (line, stderr)
            read.append((key, value))
    return read


@needs_kcat
def test_kcat_runs_a_topic_life_with_a_balanced_group_of_two_that_restarts(cluster, admin):
    topic, group = topic_name("kcat"), f"g-kcat-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, REPLICATION, topic_configs=TOPIC_CONFIGS)])
    wait_for_topic(admin, topic, PARTITIONS)
    listing = subprocess.run([KCAT, "-b", cluster.bootstrap_servers, "-L", "-t", topic], capture_output=True,
                             timeout=WAIT_S, text=True)
    assert f'topic "{topic}" with {PARTITIONS} partitions' in listing.stdout, listing.stdout + listing.stderr
    first, second = records("a", PHASE_RECORDS), records("b", PHASE_RECORDS, PHASE_RECORDS)
    assert_exactly_once(first, kcat_group_phase(cluster, admin, topic, group, first))
    assert group in [g for g, _protocol_type in admin.list_consumer_groups()]
    assert_exactly_once(second, kcat_group_phase(cluster, admin, topic, group, second))
    admin.delete_topics([topic])
    wait_until(lambda: topic not in admin.list_topics(), WAIT_S, what=f"{topic} deleted")


@needs_kcat
@pytest.mark.parametrize("codec", codec_params())
def test_kcat_produces_and_reads_back_with_codec(cluster, admin, codec):
    topic = topic_name(f"kcat-{codec}")
    admin.create_topics([NewTopic(topic, 2, REPLICATION)])
    wait_for_topic(admin, topic, 2)
    pairs = records(codec, CODEC_RECORDS)
    kcat_produce(cluster, topic, pairs, codec)
    done = subprocess.run([KCAT, "-C", "-b", cluster.bootstrap_servers, "-t", topic, "-o", "beginning", "-e",
                           "-f", KCAT_FORMAT], capture_output=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr.decode()
    read = [tuple(line.split(b"\t")[:2]) for line in done.stdout.splitlines()]
    assert_exactly_once(pairs, read)


# -- fetch sessions (KIP-227): made on request; an unknown one gets Kafka's error --------------

def raw_kafka_request(address: str, api_key: int, version: int, body: dict) -> dict:
    """One request in Kafka's protocol on a fresh socket, its answer decoded (Raftka's declarations)."""
    import socket
    import struct
    from raftka.common.codec import (decode_response_header, decoder, encode_request_header, encoder,
                                     request_header_version, response_header_version)
    from raftka.common.messages import KAFKA_API
    request_message, response_message = KAFKA_API[api_key]
    header = encode_request_header({"api_key": api_key, "api_version": version, "correlation_id": 7,
                                    "client_id": "compat"}, request_header_version(request_message, version))
    payload = header + encoder(request_message, version)(body)
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection"
            data += chunk
    answer = memoryview(data)[4:]
    response_header, position = decode_response_header(answer, response_header_version(response_message, version))
    assert response_header["correlation_id"] == 7
    return decoder(response_message, version)(answer[position:])


@pytest.mark.parametrize("session_id, epoch, code, new_session", [
    pytest.param(0, -1, 0, False, id="sessionless"),
    pytest.param(0, 0, 0, True, id="asks-for-a-session"),
    pytest.param(12345, -1, 0, False, id="full-fetch-closing-an-unknown-session"),
    pytest.param(12345, 1, 70, False, id="incremental-unknown-session"),
    pytest.param(0, 3, 70, False, id="incremental-without-session"),
])
def test_a_fetch_session_is_made_on_request_and_an_unknown_one_gets_kafkas_error(cluster, admin, session_id, epoch,
                                                                                 code, new_session):
    from raftka.common.api import ApiKey
    topic = topic_name("session")
    admin.create_topics([NewTopic(topic, 1, REPLICATION)])
    leader = wait_for_topic(admin, topic, 1)[0]["leader"]
    body = {"replica_id": -1, "max_wait_ms": 10, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    answer = raw_kafka_request(cluster.broker_address(leader), ApiKey.FETCH, 12, body)
    assert answer["error_code"] == code and (answer["session_id"] > 0) == new_session, answer
    if code:
        assert answer["responses"] == []
    else:
        [partition] = answer["responses"][0]["partitions"]
        assert partition["error_code"] == 0 and partition["high_watermark"] == 0, answer


# -- a leader killed under an idempotent producer (last: it leaves a broker down) ------------------

def test_confluent_idempotent_producer_loses_and_doubles_nothing_acknowledged_when_the_leader_dies(
        cluster, admin, rng):
    topic = topic_name("kill")
    admin.create_topics([NewTopic(topic, 1, REPLICATION, topic_configs=TOPIC_CONFIGS)])
    leader = wait_for_topic(admin, topic, 1)[0]["leader"]
    kill_after = rng.randrange(50, 250)  # acknowledged records before the kill
    total = 800
    producer = CProducer(ck_conf(cluster, **{"enable.idempotence": True, "acks": "all", "linger.ms": 2,
                                            "message.timeout.ms": 60_000, "retry.backoff.ms": 100}))
    acked: list[bytes] = []
    failed: list[tuple[bytes, str]] = []

    def delivered(err, msg) -> None:
        (acked.append(msg.value()) if err is None else failed.append((msg.value(), str(err))))

    sent = set()
    killed: list[int] = []  # acknowledged when the leader died

    def killer() -> None:
        # From another thread while sending goes on, so records are in flight at the kill.
        wait_until(lambda: len(acked) >= kill_after, WAIT_S, what=f"{kill_after} records acknowledged")
        killed.append(len(acked))
        cluster.kill(leader)

    kill_thread = threading.Thread(target=killer, daemon=True)
    kill_thread.start()
    for i in range(total):
        value = b"v-%d" % i
        sent.add(value)
        while True:
            try:
                producer.produce(topic, value=value, key=b"k%d" % (i % 5), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        time.sleep(0.002)
    kill_thread.join(timeout=WAIT_S)
    assert killed, f"the leader was not killed: only {len(acked)} acknowledged; failures {failed[:5]}"
    acked_before_kill = killed[0]
    assert producer.flush(90) == 0
    read = ck_read_to_end(cluster, topic, 1)
    values = collections.Counter(v for _k, v in read)
    doubled = {v: n for v, n in values.items() if n > 1}
    lost = [v for v in acked if v not in values]
    assert not doubled, f"duplicated {sorted(doubled)[:10]} (seed {SEED}, killed {leader} after {kill_after})"
    assert not lost, f"acknowledged but lost {lost[:10]} (seed {SEED}, killed {leader} after {kill_after})"
    assert set(values) <= sent
    new_leader = wait_for_topic(admin, topic, 1)[0]["leader"]
    assert new_leader != leader, "the killed broker still leads the partition"
    # The new leader took writes: more was acknowledged than before the kill, nothing failed.
    assert len(acked) > acked_before_kill and not failed, \
        f"{acked_before_kill} acknowledged before the kill, {len(acked)} in all; failures {failed[:5]}"
    print(f"killed leader {leader} at {acked_before_kill} acknowledged (of {total} sent), "
          f"new leader {new_leader}, {len(acked)} acknowledged, {len(read)} read")
