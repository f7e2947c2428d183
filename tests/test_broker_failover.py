"""Replication under faults, with real processes (3 controllers + 3 brokers, RF 3, min ISR 2):
kill -9 of a partition leader loses no acks=all write; a SIGSTOP'd follower leaves the ISR and
acks=all goes on with two, and is refused with one; a former leader holding records nobody else
has truncates them by leader epoch when it comes back (and shows what acks=1 can lose)."""
from __future__ import annotations

import time

import pytest

from raftka.common import errors
from raftka.common.errors import RaftkaError
from raftka.cluster import Cluster
from test_broker import (
    FAST, batch, create_topic, fetch, http_get, partition_metadata, produce, read_all, request, wait_for_partition,
)

RETRIABLE = {errors.NOT_LEADER_OR_FOLLOWER, errors.LEADER_NOT_AVAILABLE, errors.REQUEST_TIMED_OUT,
             errors.NOT_ENOUGH_REPLICAS, errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, errors.FENCED_LEADER_EPOCH,
             errors.UNKNOWN_TOPIC_OR_PARTITION, errors.NETWORK_EXCEPTION}


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    """3 controllers + 3 brokers for this module's fault tests, stopped by PID at the end."""
    return module_cluster_factory("failover", controllers=3, brokers=3, configs=FAST)


def current_leader(cluster: Cluster, topic: str) -> int | None:
    for broker in cluster.broker_ids:
        if not cluster.alive(broker):
            continue
        try:
            p = partition_metadata(cluster.broker_address(broker), topic)
        except RaftkaError:
            continue
        if p is not None and p["leader_id"] >= 0 and cluster.alive(p["leader_id"]):
            return p["leader_id"]
    return None


def produce_until_acked(cluster: Cluster, topic: str, value: bytes, timeout_s: float = 30.0) -> int:
    """acks=all with retries on retriable errors, following the leader; the acknowledged offset."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader = current_leader(cluster, topic)
        if leader is not None:
            try:
                answer = produce(cluster.broker_address(leader), topic, batch([value]), timeout_ms=3000)
            except RaftkaError:
                answer = {"error_code": errors.NETWORK_EXCEPTION}
            if answer["error_code"] == errors.NONE:
                return answer["base_offset"]
            assert answer["error_code"] in RETRIABLE, answer
        time.sleep(0.05)
    raise TimeoutError(f"{value!r} not acknowledged within {timeout_s} s")


def restore(cluster: Cluster, topic: str | None = None) -> None:
    """Every broker running again (and the topic's ISR full) for the next test."""
    for broker in cluster.broker_ids:
        if not cluster.alive(broker):
            cluster.restart(broker)
    if topic is not None:
        wait_for_partition(cluster, topic, 0, lambda p: len(p["isr_nodes"]) == 3, timeout_s=30)


def test_acks_all_writes_survive_kill_9_of_the_partition_leader(cluster):
    create_topic(cluster, "durable")
    acked: dict[bytes, int] = {}
    for i in range(20):
        value = b"before-%d" % i
        acked[value] = produce_until_acked(cluster, "durable", value)
    old_leader = current_leader(cluster, "durable")
    killed_at = time.monotonic()
    cluster.kill(old_leader)
    first = b"after-0"
    acked[first] = produce_until_acked(cluster, "durable", first)
    failover_s = time.monotonic() - killed_at
    for i in range(1, 20):
        value = b"after-%d" % i
        acked[value] = produce_until_acked(cluster, "durable", value)
    new_leader = current_leader(cluster, "durable")
    assert new_leader != old_leader
    read = dict((value, offset) for offset, value in read_all(cluster.broker_address(new_leader), "durable"))
    lost = [v for v in acked if v not in read]
    assert not lost, f"acknowledged writes lost: {lost}"
    assert all(read[v] == offset for v, offset in acked.items())  # at the offsets we were told
    print(f"\nkill -9 of the leader -> next acks=all write acknowledged: {failover_s:.2f} s "
          f"(broker.session.timeout.ms={FAST['broker.session.timeout.ms']})")
    restore(cluster, "durable")
    # The restarted broker caught up: once it leads again (preferred leader), it serves everything.
    wait_for_partition(cluster, "durable", 0, lambda p: p["leader_id"] == old_leader, timeout_s=30)
    assert [v for _, v in read_all(cluster.broker_address(old_leader), "durable")] == \
        [v for _, v in sorted((o, v) for v, o in read.items())]


def test_a_paused_follower_leaves_the_isr_and_acks_all_needs_min_insync_replicas(cluster):
    restore(cluster)
    create_topic(cluster, "isr")
    leader = current_leader(cluster, "isr")
    address = cluster.broker_address(leader)
    first, second = [b for b in cluster.broker_ids if b != leader]
    assert produce(address, "isr", batch([b"three"]))["error_code"] == errors.NONE
    cluster.pause(first)
    try:
        # Until the ISR shrinks, acks=all cannot complete: a short timeout answers REQUEST_TIMED_OUT.
        timed_out = produce(address, "isr", batch([b"in-doubt"]), timeout_ms=300)
        assert timed_out["error_code"] == errors.REQUEST_TIMED_OUT, timed_out
        wait_for_partition(cluster, "isr", 0, lambda p: first not in p["isr_nodes"], among=[leader, second])
        assert produce(address, "isr", batch([b"two"]))["error_code"] == errors.NONE
        cluster.pause(second)
        try:
            wait_for_partition(cluster, "isr", 0, lambda p: p["isr_nodes"] == [leader], among=[leader])
            end_before = len(read_all(address, "isr"))
            refused = produce(address, "isr", batch([b"one"]))
            assert refused["error_code"] == errors.NOT_ENOUGH_REPLICAS, refused
            assert produce(address, "isr", batch([b"acks-1"]), acks=1)["error_code"] == errors.NONE
            assert [v for _, v in read_all(address, "isr")][end_before:] == [b"acks-1"]  # "one" never appended
            _, metrics = http_get(cluster.http_address(leader), "/metrics")
            assert 'raftka_broker_under_replicated_partitions{node="%d"} 0' % leader not in metrics
        finally:
            cluster.resume(second)
    finally:
        cluster.resume(first)
    wait_for_partition(cluster, "isr", 0, lambda p: len(p["isr_nodes"]) == 3, timeout_s=30)
    assert produce(address, "isr", batch([b"three-again"]))["error_code"] == errors.NONE


def test_a_former_leader_truncates_records_nobody_else_has_by_leader_epoch(cluster):
    """The leader takes acks=1 writes while its followers are paused, then dies: the new leader
    never had them (acks=1 lost them, as documented), and the old leader, back as a follower,
    truncates them using the new leader's epoch history, then copies the new leader's records."""
    restore(cluster)
    create_topic(cluster, "diverge", configs={"min.insync.replicas": "1"})
    old = current_leader(cluster, "diverge")
    followers = [b for b in cluster.broker_ids if b != old]
    assert produce(cluster.broker_address(old), "diverge", batch([b"common"]))["error_code"] == errors.NONE
    wait_for_partition(cluster, "diverge", 0, lambda p: len(p["isr_nodes"]) == 3)
    for broker in followers:
        cluster.pause(broker)
    try:
        for value in (b"only-old-1", b"only-old-2", b"only-old-3"):
            answer = produce(cluster.broker_address(old), "diverge", batch([value]), acks=1)
            assert answer["error_code"] == errors.NONE
        cluster.kill(old)
    finally:
        for broker in followers:
            cluster.resume(broker)
    acked = [b"new-%d" % i for i in range(3)]
    for value in acked:
        produce_until_acked(cluster, "diverge", value)
    new = current_leader(cluster, "diverge")
    assert new in followers
    epoch = partition_metadata(cluster.broker_address(new), "diverge")["leader_epoch"]
    stale = fetch(cluster.broker_address(new), "diverge", 0, current_leader_epoch=epoch - 1)
    assert stale["error_code"] == errors.FENCED_LEADER_EPOCH  # a fetcher still on the old epoch is refused
    assert stale["current_leader"] == {"leader_id": new, "leader_epoch": epoch}
    committed = [v for _, v in read_all(cluster.broker_address(new), "diverge")]
    # A follower's fetch already waiting at the old leader may have carried the first acks=1
    # record before the pause took hold; the later ones never left the old leader.
    assert committed[0] == b"common" and committed[-3:] == acked and b"only-old-3" not in committed
    cluster.restart(old)
    wait_for_partition(cluster, "diverge", 0, lambda p: p["leader_id"] == old and len(p["isr_nodes"]) == 3,
                       timeout_s=30)
    values = [v for _, v in read_all(cluster.broker_address(old), "diverge")]
    assert values == committed  # what only the old leader had is gone; nothing committed is
    _, metrics = http_get(cluster.http_address(old), "/metrics")
    assert 'raftka_broker_truncations_total{node="%d"} 0' % old not in metrics


def idempotent_batch(producer_id: int, sequence: int, value: bytes) -> bytes:
    from raftka.common.records import BatchBuilder
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    builder.append(int(time.time() * 1000), None, value)
    return builder.build()


def test_idempotent_retries_are_not_duplicated_even_after_the_leader_dies(cluster):
    restore(cluster)
    create_topic(cluster, "idempotent")
    leader = current_leader(cluster, "idempotent")
    address = cluster.broker_address(leader)
    code, out = request(address, 22, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert code == errors.NONE
    pid = out["producer_id"]
    offsets = [produce(address, "idempotent", idempotent_batch(pid, seq, b"v%d" % seq))["base_offset"]
               for seq in range(3)]
    assert offsets == [0, 1, 2]
    retried = produce(address, "idempotent", idempotent_batch(pid, 1, b"v1"))
    assert (retried["error_code"], retried["base_offset"]) == (errors.NONE, 1)  # its original offset
    gap = produce(address, "idempotent", idempotent_batch(pid, 7, b"v7"))
    assert gap["error_code"] == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    cluster.kill(leader)
    deadline = time.monotonic() + 30
    while True:  # the retry of sequence 2 reaches the new leader: answered with offset 2 again
        new = current_leader(cluster, "idempotent")
        answer = produce(cluster.broker_address(new), "idempotent", idempotent_batch(pid, 2, b"v2")) \
            if new is not None else {"error_code": errors.LEADER_NOT_AVAILABLE}
        if answer["error_code"] == errors.NONE:
            break
        assert answer["error_code"] in RETRIABLE and time.monotonic() < deadline, answer
        time.sleep(0.05)
    assert answer["base_offset"] == 2
    assert produce(cluster.broker_address(new), "idempotent", idempotent_batch(pid, 3, b"v3"))["base_offset"] == 3
    assert read_all(cluster.broker_address(new), "idempotent") == [(0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"v3")]
    restore(cluster, "idempotent")


def test_a_full_disk_answers_kafka_storage_error_and_leadership_moves_to_a_healthy_replica(cluster):
    """A broker whose writes fail (here: its file-size limit lowered under it with prlimit, so
    appends fail with EFBIG as on a full disk) answers KAFKA_STORAGE_ERROR, appends nothing, asks
    to be fenced, and a healthy ISR member takes over with every acknowledged record."""
    import resource
    restore(cluster)
    create_topic(cluster, "disk")
    acked = {b"before-%d" % i: produce_until_acked(cluster, "disk", b"before-%d" % i) for i in range(3)}
    leader = current_leader(cluster, "disk")
    others = [b for b in cluster.broker_ids if b != leader]
    pid = cluster.process(leader).pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (1024, hard))  # no file may grow past 1 KiB
    try:
        answer = produce(cluster.broker_address(leader), "disk", batch([b"x" * 2000]))
        assert answer["error_code"] == errors.KAFKA_STORAGE_ERROR, answer
        wait_for_partition(cluster, "disk", 0, lambda p: p["leader_id"] in others and leader not in p["isr_nodes"],
                           among=others)
        status, text = http_get(cluster.http_address(leader), "/health")
        assert status == 503 and "disk" in text
        acked[b"after"] = produce_until_acked(cluster, "disk", b"after")
        new = current_leader(cluster, "disk")
        assert new in others
        assert {v: o for o, v in read_all(cluster.broker_address(new), "disk")} == acked  # nothing lost, no x*2000
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))
    cluster.kill(leader)  # an operator restarts it once the disk has room again
    restore(cluster, "disk")


def test_brokers_ride_out_the_loss_of_the_active_controller(cluster):
    """kill -9 of the active controller: brokers follow NOT_CONTROLLER answers to the next one,
    stay unfenced (heartbeats resume within the new controller's grace), keep serving acks=all,
    and forward admin requests to the new active controller."""
    restore(cluster)
    create_topic(cluster, "steady")
    produce_until_acked(cluster, "steady", b"before")
    active = cluster.wait_for_leader(timeout_s=10, among=cluster.controller_ids)
    cluster.kill(active)
    try:
        produce_until_acked(cluster, "steady", b"after")
        create_topic(cluster, "made-after-controller-loss")
        for broker in cluster.broker_ids:  # ready again once followers caught up (a broker
            deadline = time.monotonic() + 20  # restarted by the previous test may still be)
            while True:
                status, text = http_get(cluster.http_address(broker), "/health")
                if status == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert status == 200, text
            assert '"fenced": false' in text
        assert [v for _, v in read_all(cluster.broker_address(current_leader(cluster, "steady")), "steady")] == \
            [b"before", b"after"]
    finally:
        cluster.restart(active)
