"""One small metadata change costs what changed, not the cluster's size (issue #21).

OverlayMap (raft_meta/metadata/overlay_map.py) behaves as a read-only dict, and images, deltas
and the broker's MetadataView built on it copy O(sqrt(topics)) entries per change, counted with
``OverlayMap.entries_copied`` (a count, not a clock: stable on a loaded box).
"""
from __future__ import annotations

import asyncio
import random
import timeit

import pytest

from raftka.broker import metadata as broker_metadata
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage, image_from_bytes, image_to_bytes
from raftka.raft_meta.metadata.overlay_map import OverlayMap, overlay_max
from raftka.raft_meta.metadata.records import (
    FenceBrokerRecord, PartitionChangeRecord, RegisterBrokerRecord, RemoveTopicRecord, TopicRecord,
    UnfenceBrokerRecord,
)

PARTITIONS_PER_TOPIC = 10
CHANGES = 200


def _topic_id(n: int) -> str:
    return f"{n:032x}"


def cluster(topics: int) -> tuple[MetadataImage, dict[int, int]]:
    """Brokers 0-2 unfenced and ``topics`` topics of 10 partitions, RF 3, one record per entry."""
    image, offset, epochs = MetadataImage.EMPTY, 1, {}
    for b in range(3):
        delta = MetadataDelta(image)
        assert "error" not in delta.replay(RegisterBrokerRecord(b, _topic_id(100 + b), {"PLAINTEXT": f"h:{9000 + b}"}), offset)
        epochs[b] = offset
        assert "error" not in delta.replay(UnfenceBrokerRecord(b, offset), offset + 1)
        image, offset = delta.apply(), offset + 2
    for t in range(topics):
        replicas = tuple(tuple((i + t + j) % 3 for j in range(3)) for i in range(PARTITIONS_PER_TOPIC))
        delta = MetadataDelta(image)
        assert "error" not in delta.replay(TopicRecord(f"t{t:05d}", _topic_id(10_000 + t), replicas, {}), offset)
        image, offset = delta.apply(), offset + 1
    return image, epochs


def copied_per_change(topics: int) -> float:
    """Entries copied per change (an ISR shrink and expand, a fence and unfence, a 1-partition
    topic created and deleted), replayed and applied one per image, and published to a broker's
    view through ``MetadataDelta.between``, averaged over CHANGES changes."""
    image, epochs = cluster(topics)
    view = broker_metadata._view_of(image, image.offset, {}, broker_metadata.EMPTY)
    published = image
    before = OverlayMap.entries_copied
    for n in range(CHANGES):
        delta = MetadataDelta(image)
        name = f"t{n % topics:05d}"
        topic = image.topics[name]
        p = topic.partitions[n % PARTITIONS_PER_TOPIC]
        isr = p.isr[:2] if len(p.isr) == 3 else p.replicas
        records = [PartitionChangeRecord(name, topic.topic_id, n % PARTITIONS_PER_TOPIC, p.partition_epoch, isr=isr),
                   FenceBrokerRecord(2, epochs[2]) if n % 2 == 0 else UnfenceBrokerRecord(2, epochs[2]),
                   TopicRecord(f"new{n}", _topic_id(1_000_000 + n), ((0, 1, 2),), {}) if n % 2 == 0
                   else RemoveTopicRecord(f"new{n - 1}", _topic_id(1_000_000 + n - 1))]
        for record in records:
            assert "error" not in delta.replay(record, image.offset + 1)
        image = delta.apply()
        published_delta = MetadataDelta.between(published, image)
        assert set(published_delta.changed_topics) | set(published_delta.deleted_topics) == \
            set(delta.changed_topics) | set(delta.deleted_topics)
        view = broker_metadata._view_of(image, image.offset, {}, view, published_delta)
        published = image
        # Persistent maps, not copies: what the count above relies on.
        assert isinstance(image.topics, OverlayMap) and isinstance(image.topic_names_by_id, OverlayMap)
        assert isinstance(view.topics, OverlayMap)
    assert image_from_bytes(image_to_bytes(image)) == image
    assert view.topics == broker_metadata._view_of(image, image.offset, {}, broker_metadata.EMPTY).topics
    return (OverlayMap.entries_copied - before) / CHANGES


def test_a_small_change_copies_far_fewer_entries_than_the_image_holds():
    small, large = copied_per_change(10), copied_per_change(1_000)
    # 100x the partitions: a copy of every topic would cost 100x; sqrt(topics) costs ~10x at
    # most (and the 32-entry floor makes it less). Generous bound: 25x.
    assert large < 25 * max(small, 1), (small, large)
    assert large < 1_000 / 4, f"{large} entries copied per change on 1,000 topics"


def test_applying_one_isr_change_takes_about_as_long_on_10_000_partitions_as_on_100():
    def best_us(topics: int) -> float:
        image, _ = cluster(topics)
        topic = image.topics["t00001"]
        p = topic.partitions[3]
        record = PartitionChangeRecord("t00001", topic.topic_id, 3, p.partition_epoch, isr=p.isr[:2])

        def change() -> None:
            delta = MetadataDelta(image)
            delta.replay(record, image.offset + 1)
            MetadataDelta.between(image, delta.apply())
        return min(timeit.repeat(change, number=50, repeat=7)) / 50 * 1e6
    small, large = best_us(10), best_us(1_000)
    # A copy of every topic made it ~40x; generous for a loaded box.
    assert large < 8 * small, f"{small:.1f} us on 100 partitions, {large:.1f} us on 10,000"


def test_overlay_map_behaves_as_a_dict_under_random_updates():
    rng = random.Random(21)
    expected: dict[int, int] = {k: k for k in range(50)}
    current = OverlayMap(expected)
    history = [(current, dict(expected))]
    for step in range(2_000):
        changes = {rng.randrange(80): step for _ in range(rng.randrange(3))}
        deleted = [rng.randrange(80) for _ in range(rng.randrange(3))]
        current = current.updated(changes, deleted)
        for key in deleted:
            expected.pop(key, None)
        expected.update(changes)  # an existing key keeps its place, as in the map
        assert len(current) == len(expected)
        assert list(current.items()) == list(expected.items())  # a dict's insertion order too
        assert len(current._changed) + len(current._hidden) <= overlay_max(len(current)) + 3
        history.append((current, dict(expected)))
    for old, items in history[::97]:  # older maps never change
        assert dict(old) == items
        assert all(old.get(k, -1) == items.get(k, -1) and (k in old) == (k in items) for k in range(80))
    with pytest.raises(KeyError):
        OverlayMap({1: 1}).updated({}, [1])[1]


def test_changed_keys_names_every_difference_between_two_maps_of_one_base():
    a = OverlayMap({k: k for k in range(100)})
    b = a.updated({1: "x", 200: "y"}, [2])
    c = b.updated({3: "z"}, [200])
    for older, newer in ((a, b), (b, c), (a, c)):
        keys = newer.changed_keys(older)
        assert keys is not None
        assert {k for k in set(older) | set(newer) if older.get(k) != newer.get(k)} <= keys
    folded = OverlayMap(dict(c))
    assert folded.changed_keys(a) is None  # not one base: the caller compares every key


def test_an_image_and_a_view_compare_equal_to_plain_dicts():
    image, _ = cluster(3)
    assert image.topics == dict(image.topics)
    assert dict(image.topics) == image.topics
    assert image == MetadataImage(image.offset, image.brokers, dict(image.topics), image.cluster_configs,
                                  image.next_producer_id)


def test_the_active_controllers_election_pass_looks_only_at_topics_changed_since_its_last_clean_pass(monkeypatch):
    from raftka.raft_meta.controller import elections
    from test_controller_decisions import controller, ok, three_brokers_and_a_topic

    looked_at = []
    real_changes = elections.changes

    def changes(image, live, unclean_default, **kwargs):
        looked_at.append(kwargs.get("topics"))
        return real_changes(image, live, unclean_default, **kwargs)

    async def scenario():
        qc, raft = controller()
        await three_brokers_and_a_topic(qc)
        await ok(qc.create_topics, {"topics": [{"name": f"other{i}", "num_partitions": 2, "replication_factor": 3}
                                               for i in range(5)]})
        monkeypatch.setattr(elections, "changes", changes)
        await qc._periodic_pass()
        assert looked_at == [None]  # the first pass looks at everything
        assert qc._checked_image is qc.image
        topic = qc.image.topics["t"]
        p = topic.partitions[0]
        follower = p.replicas[1]
        await qc.commit([PartitionChangeRecord("t", topic.topic_id, 0, p.partition_epoch, leader=follower)])
        looked_at.clear()
        await qc._periodic_pass()
        assert looked_at and all(topics == {"t"} for topics in looked_at)
        assert qc.image.topics["t"].partitions[0].leader == p.replicas[0]  # the preferred leader is back

    asyncio.run(scenario())


def test_a_brokers_replica_manager_looks_only_at_the_topics_a_change_touched(monkeypatch):
    """ReplicaManager.on_metadata takes the changed names from the views' OverlayMaps: one ISR
    change never walks the 1,000 topics (before, every name was compared per change)."""
    from raftka.broker.replica_manager import ReplicaManager
    image, _ = cluster(1_000)
    view = broker_metadata._view_of(image, image.offset, {}, broker_metadata.EMPTY)
    manager = ReplicaManager(7, {}, logs=None, alter_partition=None)  # holds no replica: nothing to create
    manager.on_metadata(view)  # the first view: every topic is new
    name = "t00042"
    topic = image.topics[name]
    p = topic.partitions[3]
    delta = MetadataDelta(image)
    assert "error" not in delta.replay(
        PartitionChangeRecord(name, topic.topic_id, 3, p.partition_epoch, isr=p.isr[:2]), image.offset + 1)
    newer = delta.apply()
    newer_view = broker_metadata._view_of(newer, newer.offset, {}, view, MetadataDelta.between(image, newer))
    walks = []
    iterate = OverlayMap.__iter__

    def counted(self):
        walks.append(len(self))
        return iterate(self)
    monkeypatch.setattr(OverlayMap, "__iter__", counted)
    manager.on_metadata(newer_view)
    assert walks == [], f"on_metadata walked maps of sizes {walks} for one ISR change"
    assert manager.view is newer_view
