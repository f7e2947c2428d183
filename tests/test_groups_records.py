"""The coordinator's ``__consumer_offsets`` records (broker/group/records.py) are Kafka's
OffsetCommitKey/Value and GroupMetadataKey/Value: bytes computed by hand from Kafka's definitions,
every value version read, newer versions read with the newest layout (KIP-915), replay keeps the
last record of a key and honours tombstones, and an unreadable record is a typed error naming its
partition and offset that replay skips without losing the records around it."""
from __future__ import annotations

import pytest

from raftka.broker.group.group import Group, GroupState, Member
from raftka.broker.group.records import (GROUP_METADATA_VALUE, OFFSET_COMMIT_VALUE, CommittedOffset, GroupRecordError,
                                         Loaded, apply_record, build_batch, group_key, group_value, offset_key,
                                         offset_value, replay, tombstones)
from raftka.common.messages.consumer_protocol import encode_versioned


def test_an_offset_commit_key_and_value_are_kafkas_bytes():
    # key version 1 | group (int16 length 1) "g" | topic "t" | partition int32 3
    assert offset_key("g", "t", 3) == bytes.fromhex("0001" "0001" "67" "0001" "74" "00000003")
    # value version 3 | offset int64 42 | leader_epoch int32 5 | metadata "m" | commit_timestamp int64 1000
    assert offset_value(CommittedOffset(42, 5, "m", 1000)) == bytes.fromhex(
        "0003" "000000000000002a" "00000005" "0001" "6d" "00000000000003e8")


def test_a_group_key_is_kafkas_bytes():
    assert group_key("g") == bytes.fromhex("0002" "0001" "67")


def _group() -> Group:
    group = Group("g", 0, generation_id=4, protocol_type="consumer", protocol_name="range")
    group.add(Member("m-1", "host-a", "client", "/10.0.0.1", 3000, 9000, "consumer", [("range", b"sub")], b"asg"))
    group.add(Member("m-2", None, "client", "/10.0.0.2", 4000, 8000, "consumer", [("range", b"sub2")], b""))
    return group


def test_a_group_survives_its_metadata_record():
    loaded = Loaded({}, {})
    apply_record(loaded, group_key("g"), group_value(_group().metadata_value(777)), 0, 55)
    back = Group.from_value("g", 0, loaded.groups["g"], now_ms=100.0)
    assert back.state is GroupState.STABLE and back.generation_id == 4 and back.state_timestamp_ms == 777
    assert (back.protocol_type, back.protocol_name, back.leader_id) == ("consumer", "range", "m-1")
    first, second = back.members["m-1"], back.members["m-2"]
    assert (first.group_instance_id, first.session_timeout_ms, first.rebalance_timeout_ms) == ("host-a", 3000, 9000)
    assert first.protocols == [("range", b"sub")] and first.assignment == b"asg"
    assert second.group_instance_id is None and back.static_members == {"host-a": "m-1"}
    assert loaded.group_written_ms == {"g": 55}


def test_a_group_without_a_protocol_is_stored_with_kafkas_empty_protocol_type():
    value = Group("g", 0).metadata_value(5)
    assert value["protocol_type"] == ""
    loaded = Loaded({}, {})
    apply_record(loaded, group_key("g"), group_value(value), 0)
    back = Group.from_value("g", 0, loaded.groups["g"], 0.0)
    assert back.protocol_type is None and back.state is GroupState.EMPTY


@pytest.mark.parametrize("version", range(5))
def test_every_offset_commit_value_version_loads(version):
    body = {"offset": 9, "leader_epoch": 2, "metadata": "x", "commit_timestamp": 50, "expire_timestamp": 99}
    loaded = Loaded({}, {})
    apply_record(loaded, offset_key("g", "t", 0), encode_versioned(OFFSET_COMMIT_VALUE, version, body), 7, 60)
    assert loaded.offsets["g"][("t", 0)] == CommittedOffset(9, 2 if version >= 3 else -1, "x", 50, 7, 60)


@pytest.mark.parametrize("version", range(5))
def test_every_group_metadata_value_version_loads(version):
    value = _group().metadata_value(777)
    loaded = Loaded({}, {})
    apply_record(loaded, group_key("g"), encode_versioned(GROUP_METADATA_VALUE, version, value), 0)
    back = Group.from_value("g", 0, loaded.groups["g"], 0.0)
    first = back.members["m-1"]
    assert first.group_instance_id == ("host-a" if version >= 3 else None)
    # v0 has no rebalance timeout: the session timeout serves, as in Kafka
    assert first.rebalance_timeout_ms == (9000 if version >= 1 else 3000)
    assert back.state_timestamp_ms == (777 if version >= 2 else 0)


def test_a_newer_value_version_is_read_with_the_newest_layout():
    # v4 is flexible: v3's fields then a tagged-field section; a v6 value may carry tags v4 does not know
    flexible = encode_versioned(OFFSET_COMMIT_VALUE, 4, {"offset": 1, "leader_epoch": 0, "metadata": "",
                                                         "commit_timestamp": 2})
    future = b"\x00\x06" + flexible[2:-1] + bytes([1, 40, 2]) + b"hi"  # one unknown tag (40) of 2 bytes
    loaded = Loaded({}, {})
    apply_record(loaded, offset_key("g", "t", 0), future, 3)
    assert loaded.offsets["g"][("t", 0)] == CommittedOffset(1, 0, "", 2, 3, 0)


def test_replay_keeps_the_last_record_of_a_key_and_honours_tombstones():
    entries = [(offset_key("g", "t", 0), offset_value(CommittedOffset(1, -1, "", 10))),
               (offset_key("g", "t", 0), offset_value(CommittedOffset(5, -1, "", 11))),
               (offset_key("g", "t", 1), offset_value(CommittedOffset(3, -1, "", 12))),
               (group_key("g"), group_value(_group().metadata_value(1))),
               (offset_key("h", "t", 0), offset_value(CommittedOffset(8, -1, "", 13))),
               *tombstones("h", [("t", 0)]),
               (offset_key("g", "t", 1), None)]
    loaded = Loaded({}, {}, partition=2)
    assert replay(loaded, build_batch(entries, now_ms=1)) == len(entries)
    assert {tp: o.offset for tp, o in loaded.offsets["g"].items()} == {("t", 0): 5}
    assert loaded.offsets["g"][("t", 0)].log_offset == 1
    assert loaded.offsets["h"] == {} and loaded.groups["h"] is None and loaded.groups["g"] is not None
    assert (loaded.records, loaded.skipped) == (len(entries), 0)


@pytest.mark.parametrize("key, value, words", [
    (None, b"", "no key"),
    (b"\x00", b"", "the key version takes 2"),
    (b"\x00\x05" + b"\x00\x01g", b"", "key version 5"),  # Kafka's newer group types are not read here
    (offset_key("g", "t", 0)[:-1], None, "OffsetCommitKey v1: partition: truncated"),
    (offset_key("g", "t", 0), b"\xff\xff", "OffsetCommitValue: unsupported version -1"),
    (offset_key("g", "t", 0), offset_value(CommittedOffset(1, 0, "", 0)) + b"?", "1 bytes after the body"),
    (group_key("g"), b"\x00\x03\x00\x08consumer", "GroupMetadataValue v3: generation: truncated"),
])
def test_an_unreadable_record_is_a_typed_error_naming_its_partition_and_offset(key, value, words):
    with pytest.raises(GroupRecordError) as caught:
        apply_record(Loaded({}, {}, partition=4), key, value, 17)
    assert caught.value.partition == 4 and caught.value.offset == 17
    assert "__consumer_offsets-4" in str(caught.value) and "offset 17" in str(caught.value)
    assert words in str(caught.value)


def test_replay_skips_an_unreadable_record_and_keeps_the_others(caplog):
    entries = [(offset_key("g", "t", 0), offset_value(CommittedOffset(1, -1, "", 10))),
               (offset_key("g", "t", 0), b"\x00\x03garbage"),
               (offset_key("g", "t", 1), offset_value(CommittedOffset(2, -1, "", 10)))]
    loaded = Loaded({}, {}, partition=1)
    replay(loaded, build_batch(entries, now_ms=1))
    assert {tp: o.offset for tp, o in loaded.offsets["g"].items()} == {("t", 0): 1, ("t", 1): 2}
    assert (loaded.records, loaded.skipped) == (3, 1)
    assert "__consumer_offsets-1" in caplog.text and "offset 1" in caplog.text
