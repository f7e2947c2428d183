"""Placeholder metadata state machine until raft_meta's metadata records land.

It keeps the raw metadata records it applied (bounded) so the controller runs end to end; the
real one replays typed records into a MetadataImage.
"""
from __future__ import annotations

from typing import Any

import msgpack

RECORDS_MAX = 100_000


class MetadataStateMachine:
    def __init__(self, config: Any = None) -> None:
        self.records: list[bytes] = []

    def apply(self, record: bytes, index: int) -> Any:
        if len(self.records) < RECORDS_MAX:
            self.records.append(record)
        return index

    def snapshot(self) -> bytes:
        return msgpack.packb(self.records, use_bin_type=True)

    def restore(self, snapshot: bytes) -> None:
        self.records = list(msgpack.unpackb(snapshot, raw=False))
