"""Helpers shared by test modules that run real clusters (import as ``from helpers import ...``;
the tests folder is on sys.path, as for ``from test_broker import ...``)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from raftka.cluster import wait_until

TOPIC_WAIT_S = 15.0  # a loaded 2-core box: brokers may take seconds to replay a new topic


def wait_for_topic(admin: Any, name: str, partitions: int | None = None,
                   timeout_s: float = TOPIC_WAIT_S) -> list[dict[str, Any]]:
    """Wait until ``admin`` (an AdminClient) describes topic ``name`` with ``partitions``
    partitions (None: any number), each with a leader; returns them. Brokers learn of a new topic
    from the metadata log a moment after CreateTopics answers. TimeoutError naming the topic
    (and the last error, e.g. UNKNOWN_TOPIC_OR_PARTITION) after ``timeout_s``."""
    def ready() -> list[dict[str, Any]] | None:
        found = admin.describe_topics([name])[0]["partitions"]
        if found and all(p["leader"] >= 0 for p in found) and partitions in (None, len(found)):
            return found
        return None
    return wait_until(ready, timeout_s, what=f"topic {name} with a leader for each of "
                                             f"{partitions if partitions is not None else 'its'} partitions")


def cluster_with_listeners(*names: str) -> Any:
    """A Cluster class whose brokers each listen, beside PLAINTEXT, on one more port per listener
    name in ``names`` (e.g. "SSL", "SASL_SSL"; their protocols come from Kafka's default
    listener.security.protocol.map): ``ports[name][broker id]`` and ``bootstrap(name)``."""
    from raftka.cluster import Cluster
    from raftka.cluster.ports import free_ports

    class ListenersCluster(Cluster):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.ports = {name: dict(zip(self.broker_ids, free_ports(len(self.broker_ids)))) for name in names}

        def config_values(self, node_id: int) -> dict[str, Any]:
            values = super().config_values(node_id)
            if node_id in self.broker_ids:
                values["listeners"] += "".join(f",{name}://127.0.0.1:{self.ports[name][node_id]}" for name in names)
            return values

        def bootstrap(self, name: str) -> str:
            return ",".join(f"127.0.0.1:{port}" for port in self.ports[name].values())

    return ListenersCluster


# Brokers fenced, ISRs shrunk and groups rebalanced within seconds: for tests of real clusters
# that kill processes or run consumer groups.
FAST_CLUSTER_CONFIGS = {
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 250,
    "replica.lag.time.max.ms": 2000,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 100,
    "group.min.session.timeout.ms": 500,
}


def peer_ports(pid: int) -> set[int]:
    """Remote ports of the established TCP connections of process ``pid`` (/proc): which
    listeners a broker dialled."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[9] in inodes and fields[3] == "01":  # 01: ESTABLISHED
            ports.add(int(fields[2].rpartition(":")[2], 16))
    return ports


def read_values(consumer: Any, count: int) -> set[bytes]:
    """The values of the records ``consumer`` (a Raftka Consumer) yields until it has ``count``
    different ones, or its consumer_timeout_ms passes; closes it."""
    seen: set[bytes] = set()
    try:
        for record in consumer:
            seen.add(record.value)
            if len(seen) == count:
                break
    finally:
        consumer.close()
    return seen


def third_party_round_trip(topic: str, kafka_python: dict[str, Any], confluent: dict[str, Any],
                           wait_s: float = 30.0, records: int = 10) -> None:
    """kafka-python and confluent-kafka each produce ``records`` values to ``topic`` with
    acks=all, then each reads all of both in a group of its own. ``kafka_python``: KafkaProducer /
    KafkaConsumer keywords (bootstrap_servers and security); ``confluent``: librdkafka properties
    (bootstrap.servers and security). AssertionError naming what was missing."""
    import time

    import confluent_kafka
    import kafka
    producer = kafka.KafkaProducer(acks="all", **kafka_python)
    for i in range(records):
        producer.send(topic, f"kp{i}".encode())
    producer.flush(wait_s)
    producer.close()
    cproducer = confluent_kafka.Producer({**confluent, "acks": "all"})
    delivered: list[Any] = []
    for i in range(records):
        cproducer.produce(topic, f"ck{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert cproducer.flush(wait_s) == 0 and delivered == [None] * records, delivered
    want = {f"kp{i}".encode() for i in range(records)} | {f"ck{i}".encode() for i in range(records)}
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", group_id=f"kp-{topic}",
                                   consumer_timeout_ms=int(wait_s * 1000), **kafka_python)
    seen: set[bytes] = set()
    for record in consumer:  # until every record is in, or consumer_timeout_ms without one
        seen.add(record.value)
        if seen == want:
            break
    consumer.close()
    assert seen == want, f"kafka-python read {len(seen)} of {len(want)}"
    cconsumer = confluent_kafka.Consumer({**confluent, "group.id": f"ck-{topic}", "auto.offset.reset": "earliest"})
    cconsumer.subscribe([topic])
    seen = set()
    deadline = time.monotonic() + wait_s
    while seen != want and time.monotonic() < deadline:
        message = cconsumer.poll(1.0)
        if message is not None and message.error() is None:
            seen.add(message.value())
    cconsumer.close()
    assert seen == want, f"confluent-kafka read {len(seen)} of {len(want)}"


# -- server configs in tests of config errors ---------------------------------------------------

def broker_config(**values: Any) -> dict[str, Any]:
    """A broker-only node's server.properties values (its controllers and log dir never used:
    for tests of config loading), with ``values`` on top; a value of None removes the key."""
    base = {"process.roles": "broker", "node.id": "4", "controller.quorum.voters": "1@127.0.0.1:9000",
            "controller.quorum.bootstrap.servers": "127.0.0.1:9001", "log.dirs": "/tmp/raftka-config-unused",
            "listeners": "PLAINTEXT://127.0.0.1:0"}
    base.update(values)
    return {k: v for k, v in base.items() if v is not None}


def config_refused(values: dict[str, Any], *hidden: str) -> Any:
    """The ConfigError ``server_config(values)`` raises (AssertionError if none), checked to show
    none of ``hidden`` (passwords)."""
    from raftka.common.errors import ConfigError
    from raftka.common.server_config import server_config
    try:
        server_config(values)
    except ConfigError as error:
        assert not any(secret in str(error) for secret in hidden), error
        return error
    raise AssertionError("the config was accepted")


def smoke_and_soak(smoke_examples: int, soak_examples: int, *given_args: Any, **given_kwargs: Any) -> Any:
    """A Hypothesis property test run twice over: with ``smoke_examples`` examples in the default
    suite and ``soak_examples`` under ``-m soak`` (test ids ``[N-examples]``). ``given_args`` and
    ``given_kwargs`` are @given's strategies; decorate the test body, which takes the drawn values
    (marks such as skipif go above this decorator)."""
    import pytest
    from hypothesis import HealthCheck, given, settings

    def decorate(body: Any) -> Any:
        def test(examples: int) -> None:
            settings(deadline=None, max_examples=examples,
                     suppress_health_check=[HealthCheck.too_slow])(given(*given_args, **given_kwargs)(body))()
        # pytest collects it under the body's name; no functools.wraps: pytest would then read the
        # body's parameters as fixtures.
        test.__name__, test.__qualname__, test.__doc__ = body.__name__, body.__qualname__, body.__doc__
        test.__module__ = body.__module__
        return pytest.mark.parametrize("examples", [
            pytest.param(smoke_examples, id=f"{smoke_examples}-examples"),
            pytest.param(soak_examples, id=f"{soak_examples}-examples", marks=pytest.mark.soak)])(test)
    return decorate
