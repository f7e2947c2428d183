"""The metadata log's records on the wire (raft_meta/metadata/record_schemas.py, records.py, image.py).

Proves: a framed record is the bytes Kafka's metadata serde would write, worked out by hand from
the declarations; every typed record comes back equal from its bytes; bytes that are not an entry
or a snapshot raise the typed error (MetadataRecordError, ValueError) with a message, never a
codec or Python error; what the declarations cannot carry is refused when written; the limits
hold both ways; an image (generated, not replayed) comes back equal from its snapshot.
"""
from __future__ import annotations

import random
from types import MappingProxyType

import pytest

from raftka.common import errors
from raftka.common.codec import CodecError, encode_uvarint
from raftka.raft_meta.metadata import record_schemas
from raftka.raft_meta.metadata.image import (
    BrokerRegistration, MetadataImage, PartitionRegistration, TopicImage, image_from_bytes, image_to_bytes,
)
from raftka.raft_meta.metadata.records import (
    RECORDS_PER_ENTRY_MAX, ConfigRecord, FenceBrokerRecord, MetadataRecordError, PartitionChangeRecord,
    ProducerIdsRecord, RegisterBrokerRecord, RemoveTopicRecord, TopicRecord, UnfenceBrokerRecord,
    UnregisterBrokerRecord, decode_entry, encode_entry,
)

TOPIC_ID = "0123456789abcdef" * 2
ALL_RECORDS = [
    RegisterBrokerRecord(3, "fe" * 16, MappingProxyType({"PLAINTEXT": "h:9092", "SSL": "[::1]:9093"}), "rack-a"),
    RegisterBrokerRecord(4, "fe" * 16, MappingProxyType({}), None),
    FenceBrokerRecord(3, 17), UnfenceBrokerRecord(3, 2**40), UnregisterBrokerRecord(3, 17),
    TopicRecord("orders", TOPIC_ID, ((1, 2, 3), (2, 3, 1)), MappingProxyType(
        {"retention.ms": 604_800_000, "cleanup.policy": ("compact", "delete"), "unclean.leader.election.enable": False,
         "min.cleanable.dirty.ratio": 0.25, "compression.type": "lz4", "segment.bytes": None, "empty.list": ()})),
    RemoveTopicRecord("orders", TOPIC_ID),
    PartitionChangeRecord("orders", TOPIC_ID, 1, 7), PartitionChangeRecord("orders", TOPIC_ID, 1, 7, -1, (2,)),
    PartitionChangeRecord("orders", TOPIC_ID, 0, 0, 3, None),
    ConfigRecord("topic", "orders", MappingProxyType({"retention.ms": None, "retention.bytes": -1})),
    ConfigRecord("cluster", "", MappingProxyType({})),
    ConfigRecord("cluster", "", MappingProxyType({"min.insync.replicas": 2})),
    ConfigRecord("broker", "0", MappingProxyType({"leader.replication.throttled.rate": 1_048_576})),
    ConfigRecord("broker", "2147483647", MappingProxyType({"min.insync.replicas": None})),
    ProducerIdsRecord(1, -1, 0, 1000), ProducerIdsRecord(2, 9, 2**40, 1),
]


def test_a_one_record_entry_is_the_bytes_kafkas_metadata_serde_writes():
    assert encode_entry([FenceBrokerRecord(1, 5)]) == bytes.fromhex(
        "01"                  # one record
        "10"                  # of 16 bytes:
        "01" "07" "00"        # frame version 1, api key 7 (FenceBrokerRecord), version 0
        "00000001"            # id (int32)
        "0000000000000005"    # epoch (int64)
        "00")                 # no tagged fields


def test_a_partition_change_carries_kafkas_tags_and_raftkas_tags_from_10000():
    body = bytes.fromhex(
        "00000002" + TOPIC_ID  # partition_id, topic_id (16 bytes)
        + "03"                 # three tagged fields, by tag:
        + "00" "09" "03" "00000001" "00000002"  # tag 0 isr: 9 bytes, compact array of 2 int32
        + "904e" "02" "0274"                    # tag 10000 topic_name: 2 bytes, compact "t"
        + "914e" "04" "00000003")               # tag 10001 expected_partition_epoch: 3
    # leader None is Kafka's default -2: not written.
    frame = b"\x01\x05\x00" + body
    assert encode_entry([PartitionChangeRecord("t", TOPIC_ID, 2, 3, None, (1, 2))]) == (
        b"\x01" + bytes((len(frame),)) + frame)


def test_every_record_comes_back_equal_from_its_entry():
    decoded = decode_entry(encode_entry(ALL_RECORDS))
    assert decoded == ALL_RECORDS
    assert [type(r) for r in decoded] == [type(r) for r in ALL_RECORDS]


@pytest.mark.parametrize("payload, words", [
    (b"", "before the record count"),
    (b"\x00", "at least one record"),
    (b"\x01", "truncated"),
    (b"\x01\x10\x01\x07\x00", "truncated"),
    (b"\x01\x03\x02\x07\x00", "frame version 2"),
    (b"\x01\x04\x01\x07\x01\x00", "FenceBrokerRecord version 1"),
    (b"\x01\x04\x01\x63\x00\x00", "api key 99"),
    (b"\x01\x11\x01\x07\x00" + bytes(14), "1 bytes after the body"),
    (b"\x01\x10\x01\x07\x00" + bytes(13) + b"\x00", "1 bytes after the last record"),
    (b"\x01\x10\x01\x07\x00" + bytes(12) + b"\x05", "truncated"),  # 5 tagged fields that are not there
    (b"\xff\xff\xff\xff\xff\xff", "record count"),  # a varint longer than 5 bytes
    (encode_uvarint(RECORDS_PER_ENTRY_MAX + 1) + bytes(8), f"at most {RECORDS_PER_ENTRY_MAX}"),
    (record_schemas.encode_sequence([record_schemas.encode_frame(2, {
        "name": "t", "topic_id": TOPIC_ID, "partitions": [{"replicas": [1]}],
        "configs": [{"name": "retention.ms", "value": "ten", "value_type": 5}]})]), "config type 5"),
    (record_schemas.encode_sequence([record_schemas.encode_frame(5, {"topic_id": TOPIC_ID, "topic_name": "t"})]),
     "missing its Raftka field 'expected_partition_epoch'"),
])
def test_a_corrupt_entry_raises_the_typed_error_naming_the_fault(payload, words):
    with pytest.raises(MetadataRecordError) as caught:
        decode_entry(payload)
    assert caught.value.code == errors.INVALID_REQUEST and words in caught.value.message
    assert not isinstance(caught.value, CodecError)


def test_flipped_and_cut_entries_give_records_or_the_typed_error_never_another_exception():
    rng = random.Random(7)
    good = encode_entry(ALL_RECORDS)
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = data[:rng.randint(0, len(data))] if rng.random() < 0.3 else data
        try:
            decode_entry(bytes(data))
        except MetadataRecordError as error:
            assert error.message


@pytest.mark.parametrize("record, words", [
    (TopicRecord("t", "T1", ((1,),), {}), "uuid"),
    (TopicRecord("t", TOPIC_ID.upper(), ((1,),), {}), "uuid"),
    (RegisterBrokerRecord(1, "i", {}, None), "incarnation_id"),
    (RegisterBrokerRecord(1, "fe" * 16, {"PLAINTEXT": "no-port"}, None), "host:port"),
    (RegisterBrokerRecord(1, "fe" * 16, {"PLAINTEXT": "h:09092"}, None), "host:port"),
    (RegisterBrokerRecord(2**31, "fe" * 16, {}, None), "broker_id: cannot encode"),
    (TopicRecord("t", TOPIC_ID, ((1,),), {"a": {"b": 1}}), "has no Kafka string form"),
    (TopicRecord("t", TOPIC_ID, ((1,),), {"a": ("x,y",)}), "has no Kafka string form"),
    (ConfigRecord("galaxy", "", {}), "config resource type"),
    (ConfigRecord("cluster", "1", {}), "cluster config overrides are named"),
    (ConfigRecord("broker", "", {}), "named by its id"),
    (ConfigRecord("broker", "01", {}), "named by its id"),
    (ConfigRecord("broker", "-1", {}), "named by its id"),
    (ConfigRecord("broker", "2147483648", {}), "named by its id"),
    (PartitionChangeRecord("t", TOPIC_ID, 0, 0, -2, None), "leader must be"),
    (FenceBrokerRecord(1, None), "epoch"),
    (ProducerIdsRecord(1, 1, None, 5), "unencodable"),
])
def test_what_the_declarations_cannot_carry_is_refused_when_written(record, words):
    with pytest.raises(MetadataRecordError) as caught:
        encode_entry([record])
    assert words in caught.value.message


def test_the_entry_limits_apply_when_written():
    with pytest.raises(MetadataRecordError, match="at most 20000"):
        encode_entry([FenceBrokerRecord(1, 1)] * (RECORDS_PER_ENTRY_MAX + 1))
    huge = TopicRecord("t", TOPIC_ID, tuple((1, 2, 3) for _ in range(10_000)),
                       {f"k{i}": "v" * 1000 for i in range(999)})
    with pytest.raises(MetadataRecordError, match="bytes; at most 1048576"):
        encode_entry([huge])


def _random_image(rng: random.Random) -> MetadataImage:
    """An image as replay could build it, made directly: brokers, topics, configs of every type."""
    values = [None, "x", "", "a b", 0, -1, 2**62, True, False, 0.5, 1e-300, ("a",), ("a", "b"), ()]
    brokers = {}
    for broker_id in rng.sample(range(1000), rng.randint(0, 5)):
        endpoints = {name: f"{rng.choice(['h', '10.0.0.1', '[::1]'])}:{rng.randint(0, 65535)}"
                     for name in rng.sample(["PLAINTEXT", "SSL", "INTERNAL"], rng.randint(0, 3))}
        brokers[broker_id] = BrokerRegistration(broker_id, f"{rng.getrandbits(128):032x}", rng.randint(0, 2**40),
                                                MappingProxyType(endpoints), rng.choice([None, "r1", ""]),
                                                rng.random() < 0.5)
    topics = {}
    for index in range(rng.randint(0, 6)):
        name = f"topic-{index}-" + "é" * rng.randint(0, 2)
        partitions = []
        for _ in range(rng.randint(1, 5)):
            replicas = tuple(rng.sample(range(10), rng.randint(1, 4)))
            isr = tuple(rng.sample(replicas, rng.randint(1, len(replicas))))
            partitions.append(PartitionRegistration(replicas, isr, rng.choice([-1, isr[0]]), rng.randint(0, 99),
                                                    rng.randint(0, 2**31 - 1)))
        configs = {f"k{k}": rng.choice(values) for k in range(rng.randint(0, 4))}
        configs = {k: v for k, v in configs.items() if v is not None}  # an image holds no deletions
        topics[name] = TopicImage(name, f"{rng.getrandbits(128):032x}", tuple(partitions), MappingProxyType(configs))
    cluster = {f"c{k}": v for k in range(rng.randint(0, 3)) if (v := rng.choice(values)) is not None}
    offset, next_producer_id = rng.randint(0, 2**50), rng.randint(0, 2**50)
    # Per-broker overrides, for registered brokers and others (a broker may be configured before it
    # starts); a broker without any is no key, as replay leaves it.
    per_broker = {}
    for broker_id in rng.sample(range(2**31), rng.randint(0, 3)) + list(brokers)[:1]:
        own = {f"b{k}": v for k in range(rng.randint(1, 3)) if (v := rng.choice(values)) is not None}
        if own:
            per_broker[broker_id] = MappingProxyType(own)
    return MetadataImage(offset=offset, brokers=MappingProxyType(brokers),
                         topics=MappingProxyType(topics), cluster_configs=MappingProxyType(cluster),
                         next_producer_id=next_producer_id, broker_configs=MappingProxyType(per_broker))


@pytest.mark.parametrize("seed", range(200))
def test_a_generated_image_comes_back_equal_from_its_snapshot(seed):
    image = _random_image(random.Random(seed))
    data = image_to_bytes(image)
    restored = image_from_bytes(data)
    assert restored == image, f"seed {seed}"
    assert restored.topic_names_by_id == image.topic_names_by_id
    assert image_to_bytes(restored) == data  # deterministic


def test_a_corrupt_snapshot_raises_value_error_naming_the_fault():
    image = _random_image(random.Random(3))
    data = image_to_bytes(image)
    with pytest.raises(ValueError, match="begins with a MetadataSnapshotHeaderRecord"):
        image_from_bytes(encode_entry([FenceBrokerRecord(1, 1)]))
    with pytest.raises(ValueError, match="does not belong in a metadata snapshot"):
        image_from_bytes(record_schemas.encode_sequence([
            record_schemas.encode_frame(record_schemas.METADATA_SNAPSHOT_HEADER.api_key, {"offset": 1}),
            record_schemas.encode_frame(7, {"id": 1, "epoch": 1})]))
    with pytest.raises(ValueError, match="does not follow its topic's previous partition"):
        image_from_bytes(record_schemas.encode_sequence([
            record_schemas.encode_frame(record_schemas.METADATA_SNAPSHOT_HEADER.api_key, {"offset": 1}),
            record_schemas.encode_frame(3, {"partition_id": 0, "topic_id": TOPIC_ID, "replicas": [1], "isr": [1]})]))
    rng = random.Random(11)
    for _ in range(1000):
        cut = bytearray(data[:rng.randint(0, len(data) - 1)] if rng.random() < 0.3 else data)
        cut[rng.randrange(len(cut))] ^= 1 << rng.randrange(8)
        try:
            image_from_bytes(bytes(cut))
        except ValueError as error:
            assert "metadata snapshot" in str(error)


try:
    from hypothesis import given, settings, strategies as st
except ImportError:  # hypothesis is in the test extra; the seeded tests above still run
    pass
else:
    _config_value = st.one_of(
        st.none(), st.text(max_size=20), st.booleans(), st.integers(-2**63, 2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.lists(st.text(min_size=1, max_size=5).filter(lambda s: "," not in s), max_size=4).map(tuple))
    _configs = st.dictionaries(st.text(max_size=12), _config_value, max_size=5).map(MappingProxyType)

    @settings(max_examples=300, deadline=None)
    @given(configs=_configs, name=st.text(min_size=1, max_size=30),
           replicas=st.lists(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=4).map(tuple),
                             min_size=1, max_size=5).map(tuple),
           leader=st.one_of(st.none(), st.integers(-1, 2**31 - 1)),
           isr=st.one_of(st.none(), st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple)),
           epoch=st.integers(-2**31, 2**31 - 1), first=st.integers(0, 2**62), size=st.integers(0, 2**20))
    def test_any_record_of_the_declared_ranges_comes_back_equal(configs, name, replicas, leader, isr, epoch,
                                                                first, size):
        records = [TopicRecord(name, TOPIC_ID, replicas, configs), ConfigRecord("cluster", "", configs),
                   ConfigRecord("broker", str(replicas[0][0]), configs),
                   PartitionChangeRecord(name, TOPIC_ID, 0, epoch, leader, isr), ProducerIdsRecord(1, -1, first, size)]
        assert decode_entry(encode_entry(records)) == records

    @settings(max_examples=100, deadline=None)
    @given(st.integers(0, 2**32))
    def test_any_generated_image_comes_back_equal_from_its_snapshot(seed):
        image = _random_image(random.Random(seed))
        assert image_from_bytes(image_to_bytes(image)) == image


def test_a_broker_resource_is_told_from_the_cluster_by_its_name_on_the_wire():
    """Kafka writes both as a BROKER (4) ConfigRecord: "" is the cluster-wide default, a decimal
    id one broker; a name that is neither decodes but is refused when replayed."""
    from raftka.raft_meta.metadata.delta import MetadataDelta
    cluster, broker = ConfigRecord("cluster", "", {"a": 1}), ConfigRecord("broker", "7", {"a": 2})
    bodies = [cluster.to_body(), broker.to_body()]
    assert [b["resource_type"] for b in bodies] == [4, 4]
    assert decode_entry(encode_entry([cluster, broker])) == [cluster, broker]
    odd = record_schemas.encode_sequence([record_schemas.encode_frame(4, {"resource_type": 4, "resource_name": "x7",
                                                                          "configs": []})])
    [decoded] = decode_entry(odd)
    assert (decoded.resource_type, decoded.resource_name) == ("broker", "x7")
    result = MetadataDelta(MetadataImage.EMPTY).replay(decoded, 1)
    assert result["error"] == errors.INVALID_REQUEST and "named by its id" in result["message"]


def test_per_broker_overrides_replay_merge_and_roll_back_apart_from_the_cluster_ones():
    from raftka.raft_meta.metadata.delta import MetadataDelta
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in (ConfigRecord("cluster", "", {"min.insync.replicas": 2}),
                   ConfigRecord("broker", "1", {"min.insync.replicas": 3, "leader.replication.throttled.rate": 10}),
                   ConfigRecord("broker", "2", {"follower.replication.throttled.rate": 5})):
        assert "error" not in delta.replay(record, 1)
    assert delta.changed_broker_configs == {1, 2}
    saved = delta.savepoint()
    delta.replay(ConfigRecord("broker", "1", {"min.insync.replicas": None}), 2)
    delta.replay(ConfigRecord("broker", "2", {"follower.replication.throttled.rate": None}), 2)
    assert dict(delta.broker_configs_of(1)) == {"leader.replication.throttled.rate": 10}
    assert dict(delta.broker_configs_of(2)) == {}
    delta.rollback(saved)
    assert dict(delta.broker_configs_of(1)) == {"min.insync.replicas": 3, "leader.replication.throttled.rate": 10}
    image = delta.apply()
    assert dict(image.cluster_configs) == {"min.insync.replicas": 2}
    assert {b: dict(c) for b, c in image.broker_configs.items()} == {
        1: {"min.insync.replicas": 3, "leader.replication.throttled.rate": 10},
        2: {"follower.replication.throttled.rate": 5}}
    assert image_from_bytes(image_to_bytes(image)) == image
    # Removing a broker's last override leaves no key behind, so the image equals one never set.
    later = MetadataDelta(image)
    later.replay(ConfigRecord("broker", "2", {"follower.replication.throttled.rate": None}), 3)
    after = later.apply()
    assert set(after.broker_configs) == {1}
    assert MetadataDelta.between(image, after).changed_broker_configs == {2}
