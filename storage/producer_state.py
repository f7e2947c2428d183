"""Idempotent-producer state (placeholder until the real one lands)."""
from __future__ import annotations

from pathlib import Path


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def load(self, segments, all_headers, log_end_offset, log_start_offset) -> None:
        pass

    def check_leader_append(self, headers, base):
        return None

    def on_append(self, headers, base) -> None:
        pass

    def on_roll(self, base) -> None:
        pass

    def rebuild(self, segments, all_headers, log_end_offset, log_start_offset) -> None:
        pass

    def clear(self) -> None:
        pass

    def delete_snapshots_below(self, offset) -> None:
        pass

    def take_snapshot(self, offset) -> None:
        pass
