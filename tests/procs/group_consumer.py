"""A test process: one group member that processes records and commits after each batch.

Usage: group_consumer.py BOOTSTRAP GROUP TOPIC CLIENT_ID [SESSION_MS HEARTBEAT_MS PROCESS_MS [MAX_POLL_RECORDS]]

Prints one JSON line per event (each with "t", the wall clock), which the parent reads:
  {"assigned": [[topic, p], ...]}            after each rebalance (the whole assignment)
  {"records": [[p, offset, value], ...]}     a batch handed to the application (processed next)
  {"committed": {"p": offset, ...}}          once the commit after that batch was acknowledged
  {"commit_failed": "..."}                   when it was refused (a rebalance took partitions)
Runs until SIGTERM (then closes: commits, leaves the group) or until it is killed.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time


from raftka.client import CommitFailedError, Consumer, ConsumerRebalanceListener
from raftka.client.errors import RaftkaError

RUN_S_MAX = 600  # the parent stops us long before this


def say(obj: dict) -> None:
    print(json.dumps({**obj, "t": time.time()}), flush=True)


def main() -> int:
    bootstrap, group, topic, client_id = sys.argv[1:5]
    args = sys.argv[5:9] + ["3000", "300", "0", "50"][len(sys.argv[5:9]):]
    session_ms, heartbeat_ms, process_ms, max_poll_records = (int(x) for x in args)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    consumer = Consumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                        auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=max_poll_records,
                        session_timeout_ms=session_ms, heartbeat_interval_ms=heartbeat_ms, request_timeout_ms=10_000)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            say({"assigned": sorted([tp.topic, tp.partition] for tp in consumer.assignment())})

        def on_partitions_revoked(self, revoked):
            say({"revoked": sorted([tp.topic, tp.partition] for tp in revoked)})

    consumer.subscribe([topic], listener=Listener())
    say({"ready": client_id})
    started = time.monotonic()
    while not stop and time.monotonic() - started < RUN_S_MAX:
        batch = consumer.poll(timeout_ms=200)
        records = [[r.partition, r.offset, r.value.decode()] for rs in batch.values() for r in rs]
        if not records:
            continue
        say({"records": records})
        if process_ms:
            time.sleep(process_ms / 1000)  # "processing"
        try:
            consumer.commit()
            say({"committed": {str(tp.partition): consumer.position(tp) for tp in batch}})
        except CommitFailedError as error:
            say({"commit_failed": str(error)})
        except RaftkaError as error:
            say({"commit_failed": f"{type(error).__name__}: {error}"})
    consumer.close()
    say({"closed": client_id})
    return 0


if __name__ == "__main__":
    sys.exit(main())
