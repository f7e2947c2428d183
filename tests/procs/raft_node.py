"""A test process: one RaftClient (voter or observer) over a list-of-records state machine.

Driven line by line on stdin, answers one JSON line per command on stdout:
  submit <text>   -> {"ok": result} or {"error": NAME}       (result = the record's Raft index)
  records         -> {"records": [...]}                      (everything applied, in order)
  status          -> {"status": {...}}
Prints {"ready": true, ...} once the Raft port is bound. Exits when stdin closes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


from raftka.common.server_config import parse_voters
from raftka.raft_meta.raft import RaftClient, RaftConfig


class ListMachine:
    def __init__(self) -> None:
        self.records: list[str] = []

    def apply(self, record: bytes, index: int) -> int:
        self.records.append(record.decode())
        return index

    def snapshot(self) -> bytes:
        return json.dumps(self.records).encode()

    def restore(self, snapshot: bytes) -> None:
        self.records = json.loads(snapshot)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--voters", required=True)
    parser.add_argument("--node-id", type=int)
    parser.add_argument("--dir")
    parser.add_argument("--password")
    parser.add_argument("--snapshot-min-entries", type=int, default=5000)
    args = parser.parse_args()
    machine = ListMachine()
    client = RaftClient(RaftConfig(voters=parse_voters(args.voters), node_id=args.node_id,
                                   log_dir=args.dir, password=args.password,
                                   snapshot_min_entries=args.snapshot_min_entries), machine)
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        command, _, arg = line.rstrip("\n").partition(" ")
        if command == "submit":
            try:
                out = {"ok": client.submit_sync(arg.encode(), timeout_ms=3000)}
            except Exception as error:  # report the typed error by name
                out = {"error": getattr(error, "name", type(error).__name__)}
        elif command == "records":
            out = {"records": list(machine.records)}
        elif command == "status":
            out = {"status": client.status().to_dict()}
        else:
            out = {"error": f"unknown command {command!r}"}
        print(json.dumps(out), flush=True)
    client.close()


if __name__ == "__main__":
    main()
