"""Batch and streaming readers of the `raftka` data source.

Planning runs on the driver (in Spark's Python planner processes): it asks the cluster for the
partitions of the subscription, their log start offsets and high watermarks, and cuts
``[start, end)`` ranges, ``end`` never above the high watermark, so only committed records are
read. Each range becomes one Spark task (or several with ``minPartitions``); the task fetches
exactly that range in a worker (spark/fetch.py).

Streaming offsets are ``{"topic": {"partition": next_offset}}`` (spark/offsets.py). A partition
that appears while the query runs (a new partition, or a new topic matching
``subscribePattern``) enters the offsets at its log start offset with an empty first range, so
a batch replayed after a restart plans exactly the ranges it planned before.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows,
                                              SupportsTriggerAvailableNow)

from raftka.client import TopicPartition

from raftka.spark import offsets as off
from raftka.spark.fetch import ReadSettings, read_range, report_data_loss
from raftka.spark.metadata import ClusterView
from raftka.spark.options import EARLIEST, LATEST, InvalidOptionError, OffsetSpec, ReadOptions

log = logging.getLogger(__name__)


class RangePartition(InputPartition):
    """One Spark task's work: an OffsetRange (``value``)."""

    def __init__(self, value: off.OffsetRange) -> None:
        super().__init__(value)


def _settings(options: ReadOptions) -> ReadSettings:
    return ReadSettings(options.bootstrap_servers, options.include_headers, options.fail_on_data_loss,
                        options.poll_timeout_ms, dict(options.consumer_configs))


def _view(options: ReadOptions) -> ClusterView:
    return ClusterView(options.bootstrap_servers, options.consumer_configs, options.group_id)


def resolve_offsets(name: str, spec: OffsetSpec, partitions: Sequence[TopicPartition],
                    view: ClusterView, *, default_json: int | None = None) -> dict[TopicPartition, int]:
    """Concrete offsets for ``partitions`` from a startingOffsets/endingOffsets spec.

    Per-partition JSON must name partitions that exist and (unless ``default_json`` is given)
    every partition of the subscription, as Spark's Kafka source requires. With ``committed``,
    partitions the group never committed start from the earliest offset."""
    if spec.kind == "earliest":
        return view.earliest(partitions)
    if spec.kind == "latest":
        return view.latest(partitions)
    if spec.kind == "committed":
        committed = view.committed(partitions)
        missing = [tp for tp, o in committed.items() if o is None]
        earliest = view.earliest(missing)
        if missing:
            log.info("raftka: group %s has no committed offset for %s; starting from the earliest",
                     view.group_id, ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing))
        return {tp: (o if o is not None else earliest[tp]) for tp, o in committed.items()}
    if spec.kind == "timestamp":
        return _offsets_for_timestamps(spec, partitions, view)
    wanted = set(partitions)
    unknown = sorted(set(spec.offsets) - wanted)
    if unknown:
        raise InvalidOptionError(name, "names partitions that are not subscribed or do not exist: "
                                 + ", ".join(f"{tp.topic}-{tp.partition}" for tp in unknown))
    given = dict(spec.offsets)
    missing = sorted(wanted - set(given))
    if missing:
        if default_json is None:
            raise InvalidOptionError(name, "must give an offset for every subscribed partition; missing: "
                                     + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
                                     + " (use -2 for earliest, -1 for latest)")
        given.update({tp: default_json for tp in missing})
    earliest = view.earliest([tp for tp, o in given.items() if o == EARLIEST])
    latest = view.latest([tp for tp, o in given.items() if o == LATEST])
    return {tp: earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o
            for tp, o in given.items()}


def _offsets_for_timestamps(spec: OffsetSpec, partitions: Sequence[TopicPartition],
                            view: ClusterView) -> dict[TopicPartition, int]:
    """startingTimestamp / startingOffsetsByTimestamp / their ending twins, as spark-sql-kafka
    resolves them: each partition's first offset whose timestamp is >= the given one; where there
    is none, a start fails (``no_match`` error) or takes the latest offset, an end the latest."""
    name = spec.option
    if spec.timestamp is not None:
        wanted = {tp: spec.timestamp for tp in partitions}
    else:
        unknown = sorted(set(spec.timestamps) - set(partitions))
        if unknown:
            raise InvalidOptionError(name, "names partitions that are not subscribed or do not exist: "
                                     + ", ".join(f"{tp.topic}-{tp.partition}" for tp in unknown))
        missing = sorted(set(partitions) - set(spec.timestamps))
        if missing:
            raise InvalidOptionError(name, "must give a timestamp for every subscribed partition; missing: "
                                     + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing))
        wanted = {tp: spec.timestamps[tp] for tp in partitions}
    found = view.offsets_for_times(wanted)
    unmatched = [tp for tp in partitions if found.get(tp) is None]
    if unmatched and spec.no_match == "error":
        raise InvalidOptionError(name, "no committed record has a timestamp at or after "
                                 + ", ".join(f"{wanted[tp]} in {tp.topic}-{tp.partition}" for tp in unmatched)
                                 + "; set startingOffsetsByTimestampStrategy=latest to start those partitions "
                                   "at the latest offset")
    latest = view.latest(unmatched)
    out: dict[TopicPartition, int] = {}
    for tp in partitions:
        offset = found.get(tp)
        out[tp] = latest[tp] if offset is None else offset
    return out


class RaftkaBatchReader(DataSourceReader):
    """``spark.read.format("raftka")``: the records in [startingOffsets, endingOffsets) of every
    subscribed partition; ``latest`` is the high watermark when the query is planned."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        view = _view(o)
        try:
            tps = view.partitions(o.subscription)
            start = resolve_offsets("startingOffsets", o.starting, tps, view)
            assert o.ending is not None
            end = resolve_offsets("endingOffsets", o.ending, tps, view)
            high = view.latest(tps)
        finally:
            view.close()
        ranges = []
        for tp in tps:
            if end[tp] > high[tp]:
                raise InvalidOptionError("endingOffsets", f"{end[tp]} for {tp.topic}-{tp.partition} is "
                                         f"beyond the high watermark {high[tp]}: only committed "
                                         "records can be read")
            if start[tp] > end[tp]:
                raise InvalidOptionError("startingOffsets", f"{start[tp]} for {tp.topic}-{tp.partition} "
                                         f"is after the ending offset {end[tp]}")
            ranges.append(off.OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
        split = off.split_ranges(ranges, o.min_partitions)
        if not split:  # nothing to read: one empty task keeps Spark's planning simple
            first = tps[0] if tps else TopicPartition("", 0)
            split = [off.OffsetRange(first.topic, first.partition, 0, 0)]
        return [RangePartition(r) for r in split]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        r: off.OffsetRange = partition.value
        return read_range(r.topic, r.partition, r.start, r.end, _settings(self.options))


class RaftkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("raftka")``: micro-batches of committed records.

    Lives in one long-running planner process per query run (initialOffset, latestOffset,
    partitions, commit); ``read`` runs in workers on a pickled copy, so the cluster client is
    opened lazily and never pickled."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._view_: ClusterView | None = None
        self._initial: dict[str, Any] | None = None
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's end
        self._last_high: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}  # what this run committed to group.id
        self._last_trigger_s: float | None = None  # minOffsetsPerTrigger: when a batch last went ahead

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_view_"] = None
        return state

    @property
    def _view(self) -> ClusterView:
        if self._view_ is None:
            self._view_ = _view(self.options)
        return self._view_

    def initialOffset(self) -> dict:
        """Where a new query starts (a restarted one starts from its checkpoint instead). Asked
        once per run and kept, so ``latest`` means the high watermark when the query started."""
        if self._initial is None:
            o = self.options
            tps = self._view.partitions(o.subscription)
            start = resolve_offsets("startingOffsets", o.starting, tps, self._view)
            self._initial = off.to_json(start)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger as a ReadMaxRows limit, else minOffsetsPerTrigger as ReadMinRows
        (Spark passes it back to latestOffset, or ReadAllAvailable for Trigger.Once). Python
        sources have no composite limit: with both, the minimum is taken from the options."""
        o = self.options
        if o.max_offsets_per_trigger:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.min_offsets_per_trigger:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: fix the end at today's high watermarks."""
        tps = self._view.partitions(self.options.subscription, missing_ok=True)
        self._target = self._view.latest(tps)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch: each partition's high watermark now (capped by the
        AvailableNow target), limited to ``limit`` records in all."""
        o = self.options
        begin = off.from_json(start)
        # Spark plans the next batch only after the previous one completed, so ``start`` is
        # processed: commit it now (commit(end) comes a batch later, and never for the last one).
        self._commit_to_group(begin)
        current = self._view.partitions(o.subscription, missing_ok=True)
        if self._target is not None:  # AvailableNow: nothing that appeared after the target
            current = [tp for tp in current if tp in self._target or tp in begin]
        present = set(current)
        for tp in sorted(set(begin) - present):
            report_data_loss(o.fail_on_data_loss, f"{tp.topic}-{tp.partition} no longer exists "
                                                  f"(the query had read up to offset {begin[tp]})")
        high = self._view.latest(current)
        self._last_high = dict(high)
        new = [tp for tp in current if tp not in begin]
        known = [tp for tp in current if tp in begin]
        earliest = self._view.earliest(new)
        latest: dict[TopicPartition, int] = {}
        back = [tp for tp in known if high[tp] < begin[tp]]
        back_start = self._view.earliest(back)
        for tp in known:
            hw = high[tp]
            if hw < begin[tp]:
                report_data_loss(o.fail_on_data_loss,
                                 f"{tp.topic}-{tp.partition}: the high watermark went back from "
                                 f"{begin[tp]} to {hw} (was the topic deleted and re-created?)")
                latest[tp] = back_start[tp]
                continue
            if self._target is not None and tp in self._target:
                hw = max(begin[tp], min(hw, self._target[tp]))
            latest[tp] = hw
        if self._hold_back(begin, latest, limit):
            return start
        if isinstance(limit, ReadMaxRows):
            forward = {tp: v for tp, v in latest.items() if v >= begin[tp]}
            latest.update(off.rate_limit({tp: begin[tp] for tp in forward}, forward, limit.max_rows))
        for tp in new:  # first range empty: the next batch starts here
            latest[tp] = earliest[tp]
        if new:
            log.info("raftka: new partitions %s start at their log start offsets",
                     ", ".join(f"{tp.topic}-{tp.partition}" for tp in new))
        return off.to_json(latest)

    def _hold_back(self, begin: dict[TopicPartition, int], latest: dict[TopicPartition, int],
                   limit: ReadLimit) -> bool:
        """minOffsetsPerTrigger: True to skip this trigger (latestOffset then answers ``start``,
        so Spark runs no batch) while fewer records wait and maxTriggerDelay has not passed since
        the last batch went ahead. Not for ReadAllAvailable (Trigger.Once), as spark-sql-kafka,
        nor Trigger.AvailableNow, whose last records must not wait for company."""
        minimum = self.options.min_offsets_per_trigger
        if not minimum or isinstance(limit, ReadAllAvailable) or self._target is not None:
            return False
        waiting = sum(max(0, v - begin[tp]) for tp, v in latest.items() if tp in begin)
        now = time.monotonic()
        since_ms = None if self._last_trigger_s is None else (now - self._last_trigger_s) * 1000
        if off.hold_back(waiting, minimum, since_ms, self.options.max_trigger_delay_ms):
            return True
        self._last_trigger_s = now
        return False

    def reportLatestOffset(self) -> dict | None:
        """The high watermarks seen by the last latestOffset (for the query's progress)."""
        return off.to_json(self._last_high) if self._last_high else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """One task per partition range [start, end) (split by minPartitions). Partitions not in
        ``start`` are new: their first range is empty; ranges going backwards (data loss that
        was skipped) are empty too."""
        begin, stop = off.from_json(start), off.from_json(end)
        ranges = [off.OffsetRange(tp.topic, tp.partition, begin[tp], e)
                  for tp, e in stop.items() if tp in begin]
        return [RangePartition(r) for r in off.split_ranges(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        r: off.OffsetRange = partition.value
        return read_range(r.topic, r.partition, r.start, r.end, _settings(self.options))

    def commit(self, end: dict) -> None:
        """Spark finished every batch up to ``end``: with group.id, commit it to the consumer
        group, so the group's lag shows how far behind the query is."""
        self._commit_to_group(off.from_json(end))

    def _commit_to_group(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit the offsets that moved forward since our last commit. Best effort: the
        checkpoint, not the group, is what the query restarts from, so a failure is logged."""
        if self.options.group_id is None:
            return
        ahead = {tp: o for tp, o in offsets.items() if o > self._committed.get(tp, -1)}
        if not ahead:
            return
        try:
            self._view.commit(ahead)
        except Exception as error:  # noqa: BLE001 - lag reporting must not fail the query
            log.warning("raftka: committing offsets to group %s failed: %s", self.options.group_id, error)
            return
        self._committed.update(ahead)

    def stop(self) -> None:
        """The query ended: close the cluster client."""
        if self._view_ is not None:
            self._view_.close()
            self._view_ = None
