"""The benchmark's confluent-kafka (librdkafka) drivers against a real Raftka cluster."""
from __future__ import annotations

import pytest

pytest.importorskip("confluent_kafka")
from raftka.bench import peers  # noqa: E402


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("bench-librdkafka", controllers=1, brokers=1)


def test_librdkafka_produces_every_record_and_reads_them_all_back(cluster):
    produced = peers.librdkafka_produce(cluster.bootstrap_servers, "bench-rd", 500, 100)
    assert produced["records"] == 500 and produced["records_per_s"] > 0
    # The producer's first record (sent before the clock starts) is in the topic too.
    consumed = peers.librdkafka_consume(cluster.bootstrap_servers, "bench-rd", 501)
    assert consumed["records"] == 501


def test_a_consume_that_finds_too_few_records_fails_instead_of_reporting_a_rate(cluster, monkeypatch):
    monkeypatch.setattr(peers, "LIBRDKAFKA_IDLE_TIMEOUT_S", 3.0)
    peers.librdkafka_produce(cluster.bootstrap_servers, "bench-short", 10, 10)
    with pytest.raises(RuntimeError, match="nothing consumed"):
        peers.librdkafka_consume(cluster.bootstrap_servers, "bench-short", 1000)
