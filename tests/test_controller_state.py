"""The metadata-log envelope (raft_meta/metadata/state.py): apply, snapshot, fetch windows."""
from __future__ import annotations

from raftka.raft_meta.metadata import record_schemas
from raftka.raft_meta.metadata.state import ControllerStateMachine, controller_record, metadata_record


class Recorder:
    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def apply(self, record: bytes, index: int):
        self.seen.append(record)
        return len(self.seen)

    def snapshot(self) -> bytes:
        return b"|".join(self.seen)

    def restore(self, snapshot: bytes) -> None:
        self.seen = snapshot.split(b"|") if snapshot else []


def test_records_are_routed_by_kind_and_unknown_kinds_are_skipped_not_raised():
    machine = ControllerStateMachine(Recorder())
    assert machine.apply(metadata_record(b"a"), 2) == 1
    assert machine.apply(controller_record(1, "127.0.0.1", 9401), 3) is None
    assert machine.apply(b"Zjunk", 4) is None
    assert machine.apply(b"C\xc1", 5) is None  # undecodable controller record: skipped
    assert machine.metadata.seen == [b"a"]
    assert machine.controllers == {1: ("127.0.0.1", 9401)} and machine.offset == 5


def test_records_since_returns_the_gap_free_tail_then_a_snapshot_once_the_window_moved_on():
    machine = ControllerStateMachine(Recorder(), recent_records_max=3)
    for index, text in [(2, b"a"), (3, b"b"), (5, b"c")]:  # Raft indexes have gaps
        machine.apply(metadata_record(text), index)
    records, snapshot, _ = machine.records_since(0, 10)
    assert snapshot is None and [o for o, _ in records] == [2, 3, 5]
    records, _, _ = machine.records_since(3, 10)
    assert [o for o, _ in records] == [5]
    assert machine.records_since(5, 10) == ([], None, 5)
    machine.apply(metadata_record(b"d"), 6)  # window now (3, 6]: offset 0 needs a snapshot
    records, snapshot, snapshot_offset = machine.records_since(0, 10)
    assert records == [] and snapshot is not None and snapshot_offset == 6
    follower = ControllerStateMachine(Recorder())
    follower.restore(snapshot)
    assert follower.metadata.seen == [b"a", b"b", b"c", b"d"] and follower.offset == 6
    assert [o for o, _ in machine.records_since(3, 1)[0]] == [5]  # max_records respected


def test_snapshot_and_restore_round_trip_controllers_and_metadata():
    machine = ControllerStateMachine(Recorder())
    machine.apply(controller_record(2, "h", 1), 2)
    machine.apply(metadata_record(b"x"), 3)
    copy = ControllerStateMachine(Recorder())
    copy.restore(machine.snapshot())
    assert copy.controllers == machine.controllers and copy.metadata.seen == [b"x"] and copy.offset == 3


def test_a_controller_record_is_one_framed_controller_endpoint_record_byte_for_byte():
    # b"C", frame version 1, api key 10000 (uvarint 0x90 0x4e), version 0, node_id int32 2,
    # host compact string "h" (length + 1), port uint16 9401, no tagged fields.
    assert controller_record(2, "h", 9401) == (b"C" + b"\x01" + b"\x90\x4e" + b"\x00" + b"\x00\x00\x00\x02"
                                               + b"\x02h" + b"\x24\xb9" + b"\x00")


def test_a_snapshot_that_does_not_decode_is_refused_and_changes_nothing():
    from raftka.raft_meta.metadata.loader import MetadataLoader
    from raftka.raft_meta.metadata.records import RegisterBrokerRecord, encode_entry
    machine = ControllerStateMachine(MetadataLoader())
    machine.apply(metadata_record(encode_entry([RegisterBrokerRecord(1, "1" * 32, {}, None)])), 2)
    machine.apply(controller_record(1, "h", 1), 3)
    image = machine.metadata.image
    good = machine.snapshot()
    bad_metadata = record_schemas.encode_frame(record_schemas.CONTROLLER_SNAPSHOT.api_key,
                                               {"offset": 9, "controllers": [], "metadata": b"\xc1"})
    endpoint = controller_record(1, "h", 1)[1:]  # a frame, but not a snapshot's
    for junk in (b"", b"\xc1", good[:-1], good + b"\x00", b"\x02" + good[1:], endpoint, bad_metadata):
        try:
            machine.restore(junk)
        except ValueError as error:
            assert "controller snapshot" in str(error) or "metadata snapshot" in str(error), error
        else:
            raise AssertionError(f"{junk!r} was accepted as a snapshot")
        assert machine.metadata.image is image and machine.offset == 3 and machine.controllers == {1: ("h", 1)}
    copy = ControllerStateMachine(MetadataLoader())
    copy.restore(good)
    assert copy.metadata.image == image and copy.controllers == {1: ("h", 1)} and copy.offset == 3


def test_a_snapshot_is_asked_for_once_the_bytes_bound_is_passed_however_few_the_records():
    # metadata.log.max.record.bytes.between.snapshots: two big entries pass a 100-byte bound that
    # an entry count of 5,000 would never reach; the Raft layer is asked once per interval.
    asked: list[int] = []
    machine = ControllerStateMachine(Recorder(), record_bytes_between_snapshots_max=100,
                                     request_snapshot=lambda: asked.append(machine.offset))
    machine.apply(metadata_record(b"a" * 59), 2)  # 60 bytes with the kind byte
    assert asked == [] and machine.record_bytes_since_snapshot == 60
    machine.apply(metadata_record(b"b" * 39), 3)  # 100: the bound is reached
    machine.apply(metadata_record(b"c" * 10), 4)  # still past it: not asked again
    assert asked == [3] and machine.record_bytes_since_snapshot == 111
    machine.snapshot()  # what the Raft layer does when asked: a new interval starts
    assert machine.record_bytes_since_snapshot == 0 and machine.snapshot_offset == 4
    machine.apply(metadata_record(b"d" * 99), 5)
    assert asked == [3, 5]


def test_without_a_bytes_bound_nothing_is_asked():
    asked: list[int] = []
    machine = ControllerStateMachine(Recorder(), request_snapshot=lambda: asked.append(1))
    machine.apply(metadata_record(b"x" * 100_000), 2)
    assert asked == [] and machine.record_bytes_since_snapshot == 100_001


def test_each_raft_snapshot_moves_the_fetch_window_past_the_snapshot_before_it():
    # A fetcher a few entries behind the latest snapshot still gets records; one behind the
    # snapshot before it (a broker restarting from offset 0) gets a snapshot of the state now.
    machine = ControllerStateMachine(Recorder())
    for index in (2, 3):
        machine.apply(metadata_record(b"%d" % index), index)
    machine.snapshot()  # at 3; the window still holds everything: no snapshot before it
    assert [o for o, _ in machine.records_since(0, 10)[0]] == [2, 3] and machine.recent_from == 0
    for index in (5, 6):
        machine.apply(metadata_record(b"%d" % index), index)
    machine.snapshot()  # at 6: the records up to 3 (the previous snapshot) leave the window
    assert machine.recent_from == 3
    assert [o for o, _ in machine.records_since(3, 10)[0]] == [5, 6]
    records, snapshot, snapshot_offset = machine.records_since(0, 10)
    assert records == [] and snapshot_offset == 6
    restarted = ControllerStateMachine(Recorder())
    restarted.restore(snapshot)
    assert restarted.metadata.seen == [b"2", b"3", b"5", b"6"] and restarted.offset == 6
    assert restarted.snapshot_offset == 6 and restarted.recent_from == 6


def test_a_fetchers_snapshot_changes_neither_the_window_nor_the_bytes_count():
    machine = ControllerStateMachine(Recorder(), record_bytes_between_snapshots_max=1000)
    for index in (2, 3):
        machine.apply(metadata_record(b"%d" % index), index)
    machine.snapshot()
    machine.apply(metadata_record(b"4"), 4)
    data, offset = machine.current_snapshot()
    data, offset = machine.current_snapshot()
    assert offset == 4 and machine.recent_from == 0 and machine.record_bytes_since_snapshot == 2
    copy = ControllerStateMachine(Recorder())
    copy.restore(data)
    assert copy.metadata.seen == [b"2", b"3", b"4"]


def test_a_bound_passed_before_the_raft_layer_was_wired_asks_at_the_next_record():
    # The journal replays on pysyncobj's tick thread, which may run before the controller hands
    # the state machine RaftClient.request_snapshot: the ask must not be lost.
    machine = ControllerStateMachine(Recorder(), record_bytes_between_snapshots_max=10)
    machine.apply(metadata_record(b"x" * 20), 2)
    asked: list[int] = []
    machine.request_snapshot = lambda: asked.append(machine.offset)
    machine.apply(metadata_record(b"y"), 3)
    machine.apply(metadata_record(b"z"), 4)
    assert asked == [3]
