"""Typed metadata records replay deterministically, idempotently and safely.

A seeded generator builds a sequence of log entries: mostly records that fit the current image
(it peeks at its own replica to pick real broker epochs, topic ids and partition epochs, so the
image really evolves), some with guessed values that are refused, some multi-record entries
(a fence with its partition changes), and junk bytes. Properties checked:

- two fresh replicas fed the same entries end with equal images and equal snapshot bytes;
- a snapshot taken midway, restored, then the rest replayed equals straight replay;
- one MetadataDelta over many entries (what a broker's fetch batch does) equals entry by entry;
- an entry committed twice in a row (a retried command) changes nothing the second time;
- after every entry the image is well formed (leader in the ISR or -1, ISR within replicas,
  epochs never go back);
- apply never raises, whatever the bytes (random bytes, entries with bytes flipped or cut,
  well-encoded records whose values make no sense).

Failing seeds are printed; reproduce with the seed as the parameter.
"""
from __future__ import annotations

import dataclasses
import random

import pytest

from raftka.common import errors
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage, image_from_bytes
from raftka.raft_meta.metadata.loader import MetadataLoader
from raftka.raft_meta.metadata.record_schemas import encode_frame, encode_sequence
from raftka.raft_meta.metadata.records import (
    ConfigRecord, FenceBrokerRecord, PartitionChangeRecord, PartitionRecord, ProducerIdsRecord, RegisterBrokerRecord,
    MetadataRecordError, RemoveTopicRecord, TopicRecord, UnfenceBrokerRecord, encode_entry,
)

BROKERS = [1, 2, 3, 4]


def _random_record(rng: random.Random, image: MetadataImage, register: bool = True):
    """One record: plausible for ``image`` most of the time, guessed otherwise."""
    guess = rng.random() < 0.25
    kind = rng.choice(["register" if register else "fence", "fence", "unfence", "topic", "topic", "remove",
                       "change", "change", "change", "config", "pids", "partition"])
    broker = rng.choice(BROKERS)
    reg = image.brokers.get(broker)
    epoch = rng.randint(0, 50) if guess or reg is None else reg.broker_epoch
    names = sorted(image.topics)
    if kind == "register":
        return RegisterBrokerRecord(broker, f"{rng.randint(1, 3):032x}", {"PLAINTEXT": f"h:{broker}"},
                                    rng.choice([None, "a", "b"]))
    if kind == "fence":
        return FenceBrokerRecord(broker, epoch)
    if kind == "unfence":
        return UnfenceBrokerRecord(broker, epoch)
    if kind == "topic":
        name = f"t{rng.randint(1, 6)}"
        rf = rng.randint(1, 3)
        return TopicRecord(name, f"{rng.getrandbits(128):032x}",  # new ids, as uuid4 gives
                           tuple(tuple(rng.sample(BROKERS, rf)) for _ in range(rng.randint(1, 3))),
                           {"retention.ms": rng.choice([1000, 2000])} if rng.random() < 0.3 else {})
    if kind == "remove" and len(names) > 2:  # keep some topics around
        name = rng.choice(names)
        topic_id = image.topics[name].topic_id if not guess else f"{rng.getrandbits(128):032x}"
        return RemoveTopicRecord(name, topic_id)
    if kind == "change" and names:
        topic = image.topics[rng.choice(names)]
        index = rng.randrange(len(topic.partitions)) if not guess else rng.randint(0, 3)
        p = topic.partition(index)
        if p is None or guess:
            return PartitionChangeRecord(topic.name, topic.topic_id, index, rng.randint(0, 3),
                                         rng.choice([None, -1, 1, 2]), rng.choice([None, (1,), (2, 3)]))
        isr = tuple(rng.sample(p.replicas, rng.randint(1, len(p.replicas))))
        leader = rng.choice([None if p.leader in isr else isr[0], -1, isr[0]])
        return PartitionChangeRecord(topic.name, topic.topic_id, index, p.partition_epoch, leader, isr)
    if kind == "partition" and names:  # CreatePartitions: the next index, or (a guess) any
        topic = image.topics[rng.choice(names)]
        index = len(topic.partitions) if not guess else rng.randint(0, 4)
        replicas = tuple(rng.sample(BROKERS, rng.randint(1, 3)))
        isr = replicas[:rng.randint(1, len(replicas))]
        return PartitionRecord(topic.topic_id, index, replicas, isr, isr[0])
    if kind == "config" and names:
        return ConfigRecord("topic", rng.choice(names), {"retention.ms": rng.choice([None, 1000, 3000])})
    if kind == "config":
        return ConfigRecord("cluster", "", {"unclean.leader.election.enable": rng.choice([None, True])})
    return ProducerIdsRecord(1, -1, image.next_producer_id if not guess else rng.randint(0, 9), rng.randint(1, 5))


def _entry(api_key: int, body: dict) -> bytes:
    """An entry of one record with this body, well encoded whatever its values mean."""
    return encode_sequence([encode_frame(api_key, body)])


ZERO_ID = "0" * 32
# Entries that do not decode, or decode into records no image accepts.
JUNK = [
    b"", b"\xc1", b"\x00", b"\x01", b"\x01\x05\x01\x07\x00\x00\x00\x00\x01",  # empty, cut short
    encode_sequence([b"\x02\x07\x00" + bytes(13)]),  # frame version 2
    encode_sequence([b"\x01\x07\x01" + bytes(13)]),  # FenceBrokerRecord version 1
    encode_sequence([b"\x01\x63\x00" + bytes(13)]),  # api key 99
    encode_sequence([b"\x01\x07\x00" + bytes(14)]),  # a byte after the body
    encode_entry([FenceBrokerRecord(1, 1)]) + b"\x00",  # a byte after the last record
    _entry(3, {"topic_id": ZERO_ID, "replicas": [1], "isr": [1]}),  # a snapshot's PartitionRecord
    _entry(2, {"name": "z", "topic_id": ZERO_ID}),  # a TopicRecord without partitions
    _entry(2, {"name": "z", "topic_id": "1" * 32, "partitions": [{"replicas": []}]}),
    _entry(2, {"name": "z", "topic_id": "1" * 32, "partitions": [{"replicas": [1, 1]}]}),
    _entry(2, {"name": "", "topic_id": "1" * 32, "partitions": [{"replicas": [1]}]}),
    _entry(4, {"resource_type": 8, "resource_name": "", "configs": []}),
    _entry(4, {"resource_type": 2, "resource_name": "t1",
               "configs": [{"name": "retention.ms", "value": "ten", "value_type": 5}]}),
    _entry(5, {"topic_id": ZERO_ID, "topic_name": "t1"}),  # no expected partition epoch
    _entry(15, {"broker_id": 1, "broker_epoch": 1, "next_producer_id": -5, "first_producer_id": 0}),
    _entry(0, {"broker_id": -3, "incarnation_id": ZERO_ID, "broker_epoch": -1, "end_points": [], "rack": None}),
]


def entries(seed: int, count: int = 300, retried: bool = False) -> list[bytes]:
    """A seeded sequence of metadata-log entries (payloads after the envelope's b"M"), made to
    fit a replay from offset 2 (``retried``: each entry applied twice, offsets 2, 3; 4, 5; ...)."""
    rng = random.Random(seed)
    shadow = MetadataLoader()  # only to pick plausible values; the tests replay from scratch
    out: list[bytes] = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.05:
            payload = rng.choice(JUNK + [rng.randbytes(rng.randint(1, 40))])
        elif roll < 0.15 and shadow.image.brokers:
            # A fence with the leader moves it causes, as the controller commits it.
            from raftka.raft_meta.controller import elections
            broker = rng.choice(sorted(shadow.image.brokers))
            reg = shadow.image.brokers[broker]
            live = set(shadow.image.live_broker_ids()) - {broker}
            changes = list(elections.changes(shadow.image, live, rng.random() < 0.3,
                                             involving=elections.involves(broker)))
            payload = encode_entry([FenceBrokerRecord(broker, reg.broker_epoch), *changes])
        else:
            # Several records in one entry, as the controller builds them: never two incarnations
            # of one broker (a retry of an old incarnation would register it again).
            size = rng.choice([1, 1, 1, 2])
            payload = encode_entry([_random_record(rng, shadow.image, register=size == 1) for _ in range(size)])
        if retried:
            shadow.apply(payload, 2 + 2 * i)
            shadow.apply(payload, 3 + 2 * i)
        else:
            shadow.apply(payload, 2 + i)
        out.append(payload)
    return out


def replay(payloads: list[bytes], loader: MetadataLoader | None = None, start: int = 2) -> MetadataLoader:
    loader = loader or MetadataLoader()
    for i, payload in enumerate(payloads):
        loader.apply(payload, start + i)
    return loader


def without_offset(image: MetadataImage) -> MetadataImage:
    return dataclasses.replace(image, offset=0)


def check_well_formed(before: MetadataImage, after: MetadataImage) -> None:
    for name, topic in after.topics.items():
        assert after.topic_by_id(topic.topic_id) is topic
        old = before.topics.get(name)
        if old is not None and old.topic_id != topic.topic_id:
            old = None  # another topic of the same name
        assert old is None or len(topic.partitions) >= len(old.partitions), name  # partitions are only added
        for index, p in enumerate(topic.partitions):
            assert p.leader == -1 or p.leader in p.isr, (name, index, p)
            assert p.isr and set(p.isr) <= set(p.replicas), (name, index, p)
            if old is not None and index < len(old.partitions):
                q = old.partitions[index]
                assert p.partition_epoch >= q.partition_epoch and p.leader_epoch >= q.leader_epoch
                assert p.leader == q.leader or p.leader_epoch > q.leader_epoch  # a new leader, a new epoch
    assert after.next_producer_id >= before.next_producer_id
    assert len(after.topic_names_by_id) == len(after.topics)


@pytest.mark.parametrize("seed", range(20))
def test_replay_is_deterministic_and_snapshots_and_batches_do_not_change_the_outcome(seed):
    try:
        payloads = entries(seed)
        a, b = replay(payloads), replay(payloads)
        assert a.image == b.image and a.snapshot() == b.snapshot()
        assert a.image.brokers and a.image.topics, "the generator should build a non-trivial image"
        cut = len(payloads) // 2
        restored = MetadataLoader()
        restored.restore(replay(payloads[:cut]).snapshot())
        replay(payloads[cut:], restored, start=2 + cut)
        assert restored.image == a.image
        batched = MetadataLoader()
        batched.begin_batch()
        replay(payloads, batched)
        delta, image = batched.end_batch()
        assert image == a.image and image_from_bytes(a.snapshot()) == a.image
        assert MetadataDelta.between(MetadataImage.EMPTY, a.image).apply() == a.image
    except AssertionError:
        print(f"failing seed: {seed}")
        raise


@pytest.mark.parametrize("seed", range(20))
def test_an_entry_committed_twice_in_a_row_is_a_no_op_the_second_time(seed):
    """pysyncobj fails in-flight commands on a leader change and callers retry, so the same
    entry can be committed twice; the second copy must change nothing (but the offset)."""
    payloads = entries(seed, retried=True)
    try:
        loader = MetadataLoader()
        offset = 2
        applied = 0
        for payload in payloads:
            before = loader.image
            first = loader.apply(payload, offset)
            once = loader.image
            check_well_formed(before, once)
            applied += isinstance(first, list)
            loader.apply(payload, offset + 1)  # the retry
            assert without_offset(loader.image) == without_offset(once), payload
            offset += 2
        assert applied > len(payloads) // 2, "most generated entries should apply"
    except AssertionError:
        print(f"failing seed: {seed}")
        raise


@pytest.mark.parametrize("seed", range(5))
def test_apply_never_raises_on_garbage_and_garbage_changes_nothing(seed):
    rng = random.Random(seed)
    loader = replay(entries(seed, 60))
    image = loader.image
    for offset, payload in enumerate(JUNK, start=10_000):
        result = loader.apply(payload, offset)
        assert isinstance(result, dict) and isinstance(result["error"], int) and result["message"], payload
    assert without_offset(loader.image) == without_offset(image)
    # Random bytes, real entries with a byte changed or cut short, and records with random
    # field values: an error result or, when the bytes happen to make sense, a success; never an
    # exception, never a malformed image.
    real = entries(seed + 1, 40)
    values = [None, -2, -1, 0, 1, 2**31, "x", "1" * 32, (1,), (1, 2), (), {"a": 1}, {"PLAINTEXT": "h:1"}, 2**62]
    for offset in range(20_000, 20_600):
        roll = rng.random()
        if roll < 0.3:
            payload = rng.randbytes(rng.randint(0, 64))
        elif roll < 0.6:
            payload = bytearray(rng.choice(real))
            if rng.random() < 0.5:
                payload[rng.randrange(len(payload))] = rng.randrange(256)
            else:
                del payload[rng.randrange(len(payload)):]
            payload = bytes(payload)
        else:
            cls = rng.choice([RegisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord, TopicRecord,
                              RemoveTopicRecord, PartitionChangeRecord, PartitionRecord, ConfigRecord,
                              ProducerIdsRecord])
            record = cls(*(rng.choice(values) for _ in dataclasses.fields(cls)))
            try:
                payload = encode_entry([record])
            except MetadataRecordError as error:  # values the declarations cannot carry
                assert error.code == errors.INVALID_REQUEST and error.message
                continue
        before = loader.image
        result = loader.apply(payload, offset)
        assert isinstance(result, list) or (isinstance(result["error"], int) and result["message"]), payload
        check_well_formed(before, loader.image)


def test_unknown_record_types_are_refused_with_a_message_naming_the_api_key():
    result = MetadataLoader().apply(encode_sequence([b"\x01\x63\x00\x00"]), 5)
    assert result["error"] == errors.INVALID_REQUEST and "api key 99" in result["message"]
    result = MetadataLoader().apply(_entry(10_001, {"offset": 5}), 6)  # a snapshot's header
    assert "MetadataSnapshotHeaderRecord is not a metadata-log record" in result["message"]


def test_an_entry_applies_all_or_nothing():
    loader = MetadataLoader()
    good = RegisterBrokerRecord(1, "a" * 32, {"PLAINTEXT": "h:1"}, None)
    stale = FenceBrokerRecord(1, 99)
    result = loader.apply(encode_entry([good, stale]), 2)
    assert result["error"] == errors.STALE_BROKER_EPOCH and "99" in result["message"]
    assert loader.image.brokers == {} and loader.image.offset == 2
    assert loader.apply(encode_entry([good, FenceBrokerRecord(1, 3)]), 3) == [{"broker_epoch": 3}, {}]
    assert loader.image.brokers[1].fenced and loader.image.brokers[1].broker_epoch == 3
