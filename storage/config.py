"""Typed per-log configuration, read from TOPIC_CONFIGS (common/configs.py).

A log gets a mapping of topic configs (already parsed or raw strings); ``LogConfig.from_mapping``
validates it against the declared keys and fills defaults, so a value of the wrong type or range
raises ``ConfigError`` naming the key. Keys the log does not use (min.insync.replicas, ...) are
accepted and ignored; unknown keys are passed through untouched for the layers above.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from raftka.common.configs import TOPIC_CONFIGS


def _default(name: str) -> Any:
    return TOPIC_CONFIGS.keys[name].default


@dataclass(frozen=True)
class LogConfig:
    """The subset of topic configs the partition log acts on; each field is its topic config's name
    with dots as underscores."""

    # The defaults are read from TOPIC_CONFIGS, the one declaration; tests check they stay equal.
    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    segment_index_bytes: int = _default("segment.index.bytes")
    index_interval_bytes: int = _default("index.interval.bytes")
    retention_ms: int = _default("retention.ms")              # -1: keep forever
    retention_bytes: int = _default("retention.bytes")        # -1: no limit
    max_message_bytes: int = _default("max.message.bytes")    # largest batch accepted
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    message_timestamp_type: str = _default("message.timestamp.type")
    cleanup_policy: tuple[str, ...] = tuple(_default("cleanup.policy"))
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    delete_retention_ms: int = _default("delete.retention.ms")

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None) -> "LogConfig":
        """Validate ``config`` with TOPIC_CONFIGS (ConfigError names a bad key) and build one."""
        values = TOPIC_CONFIGS.parse(dict(config or {}), allow_unknown=True)
        return cls(
            segment_bytes=values["segment.bytes"],
            segment_ms=values["segment.ms"],
            segment_index_bytes=values["segment.index.bytes"],
            index_interval_bytes=values["index.interval.bytes"],
            retention_ms=values["retention.ms"],
            retention_bytes=values["retention.bytes"],
            max_message_bytes=values["max.message.bytes"],
            flush_messages=values["flush.messages"],
            flush_ms=values["flush.ms"],
            message_timestamp_type=values["message.timestamp.type"],
            cleanup_policy=tuple(values["cleanup.policy"]),
            min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
            min_compaction_lag_ms=values["min.compaction.lag.ms"],
            max_compaction_lag_ms=values["max.compaction.lag.ms"],
            delete_retention_ms=values["delete.retention.ms"],
        )

    @property
    def compact(self) -> bool:
        """cleanup.policy includes compact: the log cleaner keeps the latest record per key."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """cleanup.policy includes delete: retention.ms and retention.bytes apply."""
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"
