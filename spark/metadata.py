"""Driver-side questions to the cluster: which partitions a subscription covers, their log start
offsets and high watermarks, and a consumer group's committed offsets.

One ``ClusterView`` holds one client Consumer (no assignment, no group), opened on first use and
closed by ``close()``; it is never pickled (readers drop it before Spark ships them to workers).
"""
from __future__ import annotations

import logging
import re
from typing import Iterable, Mapping

from raftka.client import Consumer, TopicPartition
from raftka.client.aio.security import SECURITY_DEFAULTS
from raftka.client.errors import RaftkaError

from raftka.spark.options import Subscription

log = logging.getLogger(__name__)

INTERNAL_TOPIC_PREFIX = "__"  # internal topics (group offsets, ...) never match a pattern
# The reader's client configs the driver's consumers take too (not the fetch sizes): the
# security ones connect to a secure cluster as the tasks do.
DRIVER_CONFIGS = ("client_id", "request_timeout_ms", "retry_backoff_ms", "metadata_max_age_ms", *SECURITY_DEFAULTS)


class UnknownTopicError(LookupError):
    """A subscribed or assigned topic (or partition) does not exist."""


class ConsumerGroupsUnavailableError(RuntimeError):
    """Committed offsets were asked for, and the client or cluster cannot give them."""


class ClusterView:
    """Metadata and offsets, as the driver needs them for planning."""

    def __init__(self, bootstrap_servers: str, consumer_configs: Mapping[str, object] | None = None,
                 group_id: str | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.consumer_configs = dict(consumer_configs or {})
        self.group_id = group_id
        self._consumer: Consumer | None = None
        self._group_consumer: Consumer | None = None

    def driver_configs(self) -> dict:
        """The configs of the driver's consumer (partitions, offsets): the connection ones."""
        configs = {k: v for k, v in self.consumer_configs.items() if k in DRIVER_CONFIGS}
        configs.setdefault("client_id", "raftka-spark-driver")
        return configs

    def _client(self) -> Consumer:
        if self._consumer is None:  # connects: NoBrokersAvailable when no broker answers
            self._consumer = Consumer(bootstrap_servers=self.bootstrap_servers, **self.driver_configs())
        return self._consumer

    def _group(self) -> Consumer:
        if self.group_id is None:
            raise ConsumerGroupsUnavailableError("no group.id set")
        if self._group_consumer is None:
            security = {k: v for k, v in self.consumer_configs.items() if k in SECURITY_DEFAULTS}
            self._group_consumer = Consumer(bootstrap_servers=self.bootstrap_servers,
                                            group_id=self.group_id, enable_auto_commit=False,
                                            client_id="raftka-spark-committer", **security)
        return self._group_consumer

    def close(self) -> None:
        """Close the clients (safe to call twice)."""
        for consumer in (self._consumer, self._group_consumer):
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:  # closing must not hide the query's own outcome
                    log.debug("closing a driver consumer failed", exc_info=True)
        self._consumer = self._group_consumer = None

    # -- partitions --
    def partitions(self, subscription: Subscription, *, missing_ok: bool = False) -> list[TopicPartition]:
        """Every partition the subscription covers now, sorted. A named topic (subscribe, assign)
        that does not exist raises UnknownTopicError, unless ``missing_ok`` (then it is left out:
        a running stream treats a vanished topic as data loss, see the stream reader)."""
        client = self._client()
        if subscription.pattern is not None:
            pattern = re.compile(subscription.pattern)
            topics = sorted(t for t in client.topics()
                            if pattern.fullmatch(t) and not t.startswith(INTERNAL_TOPIC_PREFIX))
            found: list[TopicPartition] = []
            for topic in topics:
                found.extend(TopicPartition(topic, p) for p in sorted(client.partitions_for_topic(topic) or ()))
            return found
        if subscription.assign:
            out = []
            by_topic: dict[str, set[int] | None] = {}
            for tp in subscription.assign:
                if tp.topic not in by_topic:
                    by_topic[tp.topic] = client.partitions_for_topic(tp.topic)
                parts = by_topic[tp.topic]
                if parts is None or tp.partition not in parts:
                    if missing_ok:
                        continue
                    raise UnknownTopicError(
                        f"assigned partition {tp.topic}-{tp.partition} does not exist"
                        + ("" if parts is None else f" (topic {tp.topic!r} has partitions "
                                                    f"{sorted(parts)})"))
                out.append(tp)
            return sorted(out)
        out = []
        for topic in subscription.topics:
            parts = client.partitions_for_topic(topic)
            if parts is None:
                if missing_ok:
                    continue
                raise UnknownTopicError(f"topic {topic!r} does not exist ({subscription.describe()}); "
                                        "create it first (raftka topics --create)")
            out.extend(TopicPartition(topic, p) for p in sorted(parts))
        return sorted(out)

    # -- offsets --
    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log start offset per partition."""
        partitions = list(partitions)
        return self._client().beginning_offsets(partitions) if partitions else {}

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermark per partition: everything below it is committed (on the ISR)."""
        partitions = list(partitions)
        return self._client().end_offsets(partitions) if partitions else {}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """Per partition, the first offset whose record timestamp is >= the given one (Kafka's
        ListOffsets by timestamp; the broker answers only offsets below the high watermark), or
        None where no committed record is that late."""
        if not timestamps:
            return {}
        found = self._client().offsets_for_times(dict(timestamps))
        return {tp: (None if found.get(tp) is None else int(found[tp].offset)) for tp in timestamps}

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offset per partition (None: nothing committed)."""
        consumer = self._group()
        try:
            return {tp: _offset_of(consumer.committed(tp)) for tp in partitions}
        except RaftkaError as error:
            raise ConsumerGroupsUnavailableError(
                f"cannot read the committed offsets of group {self.group_id!r}: {error}") from error

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (next offset to read, per partition) to the group."""
        if not offsets:
            return
        consumer = self._group()
        consumer.commit(_commit_map(offsets))


def _offset_of(value: object) -> int | None:
    # committed() answers an int (kafka-python) or an OffsetAndMetadata-like object.
    if value is None:
        return None
    offset = getattr(value, "offset", value)
    return None if offset is None or int(offset) < 0 else int(offset)  # type: ignore[arg-type]


def _commit_map(offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, object]:
    """kafka-python's commit takes {TopicPartition: OffsetAndMetadata(offset, metadata)}; use the
    client's OffsetAndMetadata when it has one."""
    try:
        from raftka.client import OffsetAndMetadata  # type: ignore[attr-defined]
    except ImportError:
        return dict(offsets)
    fields = getattr(OffsetAndMetadata, "_fields", ("offset", "metadata"))
    values = {"offset": None, "metadata": "raftka-spark", "leader_epoch": -1}
    out: dict[TopicPartition, object] = {}
    for tp, offset in offsets.items():
        values["offset"] = int(offset)
        out[tp] = OffsetAndMetadata(*(values.get(f) for f in fields))
    return out
