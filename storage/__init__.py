"""The partition log: segments, sparse indexes, checkpoints, recovery, retention, compaction (docs/storage.md).

Imports only ``raftka.common`` (record batches, errors, configs).
"""
from raftka.storage.config import LogConfig
from raftka.storage.epoch_cache import LeaderEpochCache
from raftka.storage.log import AppendInfo, Corruption, FetchData, Log, LogCorruptedError
from raftka.storage.log_cleaner import LogCleanerConfig
from raftka.storage.manager import LogManager

__all__ = ["AppendInfo", "Corruption", "FetchData", "LeaderEpochCache", "Log", "LogCleanerConfig", "LogConfig",
           "LogCorruptedError", "LogManager"]
