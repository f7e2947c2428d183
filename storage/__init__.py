"""The partition log: segments, sparse indexes, checkpoints, recovery, retention (docs/storage.md).

Imports only ``client.protocol`` (record batches, errors, configs).
"""
from storage.config import LogConfig
from storage.epoch_cache import LeaderEpochCache
from storage.log import AppendInfo, FetchData, Log
from storage.manager import LogManager

__all__ = ["AppendInfo", "FetchData", "LeaderEpochCache", "Log", "LogConfig", "LogManager"]
