"""LoopPublisher hands updates applied on another thread (pysyncobj's tick thread) to an asyncio
loop, coalesced, with deltas that chain from one published image to the next."""
from __future__ import annotations

import asyncio
import threading

from raftka.raft_meta.metadata.state import ControllerStateMachine, metadata_record
from raftka.raft_meta.metadata.loader import MetadataLoader
from raftka.raft_meta.metadata.publisher import LoopPublisher
from raftka.raft_meta.metadata.records import PartitionChangeRecord, RegisterBrokerRecord, TopicRecord, encode_entry

TOPICS = 200


def test_updates_applied_on_another_thread_reach_the_loop_as_chained_deltas():
    state = ControllerStateMachine(MetadataLoader())
    state.apply(metadata_record(encode_entry([RegisterBrokerRecord(1, "1" * 32, {"PLAINTEXT": "h:1"}, None)])), 1)
    calls = []

    async def scenario():
        loop_thread = threading.current_thread()

        def on_update(delta, image):
            assert threading.current_thread() is loop_thread
            calls.append((delta, image))

        publisher = LoopPublisher(state, asyncio.get_running_loop(), on_update)

        def tick_thread():  # stands in for pysyncobj's tick thread
            offset = 2
            for i in range(TOPICS):
                state.apply(metadata_record(encode_entry([TopicRecord(f"t{i}", f"{i:032x}", ((1,),), {})])), offset)
                offset += 1
            state.apply(metadata_record(encode_entry([PartitionChangeRecord("t0", f"{0:032x}", 0, 0, -1, None)])), offset)
        thread = threading.Thread(target=tick_thread)
        thread.start()
        await asyncio.to_thread(thread.join, 10)
        for _ in range(100):
            if calls and calls[-1][1] is state.metadata.image:
                break
            await asyncio.sleep(0.01)
        publisher.close()
    asyncio.run(scenario())
    final = state.metadata.image
    assert calls[-1][1] is final and final.offset == TOPICS + 2
    assert len(calls) < TOPICS  # coalesced, not one call per record
    previous = None
    for delta, image in calls:  # each delta starts where the previous publication ended
        if previous is not None:
            assert delta.image is previous
        assert delta.apply() == image
        previous = image
    assert calls[0][0].changed_brokers[1].broker_id == 1  # the first call carries what was there before
    leads, follows = set(), set()
    for delta, _ in calls:
        changes = delta.local_changes(1)
        leads |= set(changes.leaders)
        follows |= set(changes.followers)
    # Broker 1 learnt to lead every partition but t0, which went offline (it follows that one).
    assert leads - {("t0", 0)} == {(f"t{i}", 0) for i in range(1, TOPICS)}
    assert ("t0", 0) in follows
