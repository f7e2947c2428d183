"""The partition logs the broker stores: storage/'s LogManager (segments, indexes, checkpoints,
recovery, retention). Kept as one import so the broker names storage in one place."""
from __future__ import annotations

from storage import LogManager

STORAGE = "storage"

__all__ = ["LogManager", "STORAGE"]
