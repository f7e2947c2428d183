"""The offset manager: committed offsets of the groups this broker coordinates (Kafka's
GroupMetadataManager, the offsets half), beside the coordinator's membership (coordinator.py).

It owns a group's committed offsets and every ``__consumer_offsets`` record about them:

- OffsetCommit: only from a member of the current generation (ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID otherwise), or with generation -1
  and no member id on a group without members (tools, manually assigned consumers). Offsets are
  appended with acks=all and answered once below the high watermark.
- OffsetFetch: what is held (loaded from the log, or committed since).
- Loading: the offsets half of a replayed partition (``restore``), group by group.
- Retention (``retain``): a group Empty for longer than offsets.retention.minutes loses its
  offsets and metadata (tombstones). ``__consumer_offsets`` is compacted (cleanup.policy=compact)
  and keeps the latest record of each key by itself; on one created before compaction existed
  (cleanup.policy=delete), the live records of the other groups (offsets, and the group metadata
  record the coordinator builds) are written again, in one batch, before time retention could
  delete their segment.
- DeleteGroups' records (``delete_group``): tombstones of the offsets and the metadata.
- OffsetDelete's records (``delete_offsets``): tombstones of some offsets, written with acks=all
  like commits; the coordinator decides which the group may lose. A tombstone outranks a commit
  written before it that is still waiting for the ISR, so that commit does not come back in memory
  once the log says it is gone.

The interface with the coordinator is explicit and small. The manager asks it (``Membership``)
whether this broker serves a group and whether a commit's member and generation may commit; the
coordinator tells the manager when a group is gone (``group_dead``: deleted, expired or
unloaded), hands it each group's membership side for retention (``RetentionView``), and drops a
group whose records retention deleted (``Retained.expired``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol

from raftka.broker.group.group import group_id_of, optional_str
from raftka.broker.group.records import BATCH_BYTES_MAX, CommittedOffset, offset_key, offset_value, tombstones
from raftka.broker.group.store import OffsetsStore, store_error
from raftka.common import errors
from raftka.common.errors import RaftkaError

log = logging.getLogger(__name__)

PARTITIONS_PER_COMMIT_MAX = 10_000
PARTITIONS_PER_DELETE_MAX = 10_000  # partitions named in one OffsetDelete
# A tombstone's bytes besides its key (record length, attributes, deltas, lengths: varints), and
# a batch's header and margin: how many tombstones one coordinator write takes (build_batch).
TOMBSTONE_OVERHEAD_BYTES = 32
BATCH_HEADER_BYTES = 128

TopicPartition = tuple[str, int]


class Membership(Protocol):
    """What the offset manager asks the group coordinator (coordinator.py implements it)."""

    def owner_error(self, group_id: str) -> int:
        """NONE when this broker coordinates ``group_id`` and has loaded it; else the error."""
        ...

    def admit_commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None) -> tuple[int, int]:
        """May this member commit at this generation? (error code, the group's partition)."""
        ...


@dataclass(frozen=True)
class RetentionView:
    """One group's membership side, as offset retention needs it (the coordinator fills it in)."""

    group_id: str
    partition: int
    empty_since_ms: int | None  # wall clock since which it has been Empty (its last state change); None: not Empty
    metadata_written_ms: int  # wall clock of its last metadata record (0: never written)
    # Its metadata record to write again with the offsets, built only when needed; None: none to keep.
    metadata_record: Callable[[], tuple[bytes, bytes]] | None


@dataclass(frozen=True)
class Retained:
    """What ``retain`` did to a group's records."""

    expired: bool = False  # tombstones written: the coordinator drops the group
    rewritten_ms: int | None = None  # its records were written again at this wall clock


class OffsetManager:
    """Committed offsets of the groups of the partitions this broker leads (module docstring)."""

    def __init__(self, store: OffsetsStore, membership: Membership, *, commit_timeout_ms: int,
                 metadata_max_bytes: int, retention_ms: int, wall: Callable[[], int]) -> None:
        self.store = store
        self.membership = membership
        self.commit_timeout_ms = commit_timeout_ms
        self.metadata_max_bytes = metadata_max_bytes
        self.retention_ms = retention_ms
        self.wall = wall
        self.commits = 0  # for /metrics
        # group id -> its offsets. A group's dict lives exactly as long as the coordinator's Group
        # (created while the group exists, removed by group_dead), so "is it still this dict?"
        # after a write tells whether the group was dropped or reloaded meanwhile.
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # group id -> {partition: log offset of the tombstone OffsetDelete wrote}, for as long as
        # the group lives here: a commit written before it must not be applied after it.
        self._deleted: dict[str, dict[TopicPartition, int]] = {}

    # -- what the coordinator and /metrics read -------------------------------------------------

    def committed(self, group_id: str) -> Mapping[TopicPartition, CommittedOffset]:
        """The group's committed offsets (read-only; empty when it has none)."""
        return self._offsets.get(group_id) or {}

    def last_commit_ms(self, group_id: str) -> int:
        """Wall clock of the group's latest commit (0: none)."""
        return max((o.commit_timestamp for o in self.committed(group_id).values()), default=0)

    # -- what the coordinator tells --------------------------------------------------------------

    def restore(self, group_id: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        """A group loaded from its partition's log, with the offsets the replay found."""
        self._offsets[group_id] = dict(offsets)
        self._deleted.pop(group_id, None)

    def group_dead(self, group_id: str) -> None:
        """The group is gone from this broker (deleted, expired, or its partition unloaded)."""
        self._offsets.pop(group_id, None)
        self._deleted.pop(group_id, None)

    # -- OffsetCommit, OffsetFetch ---------------------------------------------------------------

    async def offset_commit(self, body: dict) -> dict:
        """OffsetCommit: per-partition answers once the records are below the high watermark."""
        # Types and per-array counts were checked at the boundary against its declaration;
        # the total over topics is this API's own limit.
        wanted = [(t["name"], p) for t in body["topics"] for p in t.get("partitions") or []]
        if len(wanted) > PARTITIONS_PER_COMMIT_MAX:
            raise errors.InvalidRequestError(f"{len(wanted)} partitions in one commit; at most "
                                             f"{PARTITIONS_PER_COMMIT_MAX}")
        codes: dict[TopicPartition, int] = {}

        def answer() -> dict:
            by_topic: dict[str, list[dict]] = {}
            for name, p in wanted:
                by_topic.setdefault(name, []).append({"partition_index": p["partition_index"],
                                                      "error_code": codes.get((name, p["partition_index"]),
                                                                              errors.NONE)})
            return {"topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

        def everyone(code: int) -> dict:
            for name, p in wanted:
                codes[(name, p["partition_index"])] = code
            return answer()

        try:
            group_id = group_id_of(body)
        except RaftkaError as e:
            return everyone(e.code)
        # Kafka's field name since KIP-848: a classic group's generation (-1: a commit from outside the group)
        generation = body.get("generation_id_or_member_epoch", -1)
        member_id = body.get("member_id") or ""
        instance_id = optional_str(body.get("group_instance_id"))
        code = self.membership.owner_error(group_id)
        if code:
            return everyone(code)
        code, partition = self.membership.admit_commit(group_id, generation, member_id, instance_id)
        if code:
            return everyone(code)
        held = self._offsets.setdefault(group_id, {})  # the group exists now (admit_commit)
        now = self.wall()
        entries: list[tuple[bytes, bytes | None]] = []
        values: list[tuple[TopicPartition, CommittedOffset]] = []
        for name, p in wanted:
            tp = (name, p["partition_index"])
            offset = p.get("committed_offset")
            metadata = p.get("committed_metadata") or ""
            if offset is None or offset < 0:
                codes[tp] = errors.INVALID_COMMIT_OFFSET_SIZE
                continue
            if len(metadata.encode()) > self.metadata_max_bytes:
                codes[tp] = errors.OFFSET_METADATA_TOO_LARGE
                continue
            epoch = p.get("committed_leader_epoch", -1)
            committed = CommittedOffset(offset, -1 if epoch is None else epoch, metadata, now)
            entries.append((offset_key(group_id, *tp), offset_value(committed)))
            values.append((tp, committed))
        if entries:
            try:
                base = await self._append(partition, entries)
            except RaftkaError as error:
                code = store_error(error)
                for tp, _ in values:
                    codes[tp] = code
                return answer()
            if self._offsets.get(group_id) is held:  # not dropped or reloaded while writing
                written = self.wall()
                deleted = self._deleted.get(group_id) or {}
                for i, (tp, committed) in enumerate(values):
                    stored = held.get(tp)
                    # Writes may finish out of order: the record later in the log wins.
                    newest = stored.log_offset if stored is not None else deleted.get(tp, -1)
                    if newest < base + i:
                        deleted.pop(tp, None)
                        held[tp] = CommittedOffset(committed.offset, committed.leader_epoch, committed.metadata,
                                                   committed.commit_timestamp, base + i, written)
                self.commits += 1
        return answer()

    async def offset_fetch(self, body: dict) -> dict:
        """OffsetFetch: committed offsets of the asked partitions (all when ``topics`` is None)."""
        try:
            group_id = group_id_of(body)
        except RaftkaError as e:
            return {"error_code": e.code, "error_message": e.message, "topics": []}
        topics = body.get("topics")
        code = self.membership.owner_error(group_id)
        if code:
            return {"error_code": code, "error_message": None, "topics": []}
        offsets = self.committed(group_id)
        if topics is None:
            asked: Iterable[TopicPartition] = sorted(offsets)
        else:
            asked = [(t["name"], i) for t in topics for i in (t.get("partition_indexes") or [])]
        by_topic: dict[str, list[dict]] = {}
        for tp in asked:
            committed = offsets.get(tp)
            by_topic.setdefault(tp[0], []).append({
                "partition_index": tp[1], "committed_offset": committed.offset if committed else -1,
                "committed_leader_epoch": committed.leader_epoch if committed else -1,
                "metadata": committed.metadata if committed else "", "error_code": errors.NONE})
        return {"error_code": errors.NONE, "error_message": None,
                "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    # -- deleting and retention --------------------------------------------------------------------

    async def delete_group(self, group_id: str, partition: int) -> None:
        """Write the group's tombstones (offsets and metadata, one batch); raises the store's
        error. The coordinator drops the group after (and tells ``group_dead``)."""
        await self._append(partition, tombstones(group_id, self.committed(group_id)))

    async def delete_offsets(self, group_id: str, partition: int,
                             wanted: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """OffsetDelete's writes: a tombstone for each of ``wanted`` the group holds an offset for,
        with acks=all (in as few batches as fit, one after the other); {partition: error code}
        for each of ``wanted``. One without an offset needs no record (NONE). After a failed
        write, that batch's partitions and the rest get the store's error, earlier ones stay
        deleted. The coordinator has decided which offsets the group may lose."""
        held = self._offsets.setdefault(group_id, {})  # the group exists (the coordinator checked)
        codes = {tp: errors.NONE for tp in wanted}
        doomed = [tp for tp in codes if tp in held]
        done = 0
        for batch in _tombstone_batches(group_id, doomed):
            try:
                base = await self._append(partition, [(key, None) for _, key in batch])
            except RaftkaError as error:
                code = store_error(error)
                for tp in doomed[done:]:
                    codes[tp] = code
                log.info("group %s: deleting offsets failed: %s", group_id, error)
                break
            done += len(batch)
            if self._offsets.get(group_id) is held:  # not dropped or reloaded while writing
                deleted = self._deleted.setdefault(group_id, {})
                for i, (tp, _) in enumerate(batch):
                    stored = held.get(tp)
                    if stored is None or stored.log_offset < base + i:  # else a later commit won
                        held.pop(tp, None)
                        deleted[tp] = max(deleted.get(tp, -1), base + i)
        if done:
            log.info("group %s: deleted the committed offsets of %d partition(s)", group_id, done)
        return codes

    async def retain(self, group: RetentionView, wall: int) -> Retained:
        """Offset retention for one group (Kafka's offset expiry), at ``wall`` (the pass's wall
        clock, read once for all groups): a group Empty for longer than the retention since it
        emptied and since its last commit gets tombstones; otherwise, once its oldest record is
        past half the retention, its live records are written again."""
        retention = self.retention_ms
        # The group exists (the coordinator asks only for live groups), so this dict is its own.
        held = self._offsets.setdefault(group.group_id, {})
        last_commit = max((o.commit_timestamp for o in held.values()), default=0)
        if group.empty_since_ms is not None and wall - max(group.empty_since_ms, last_commit) > retention:
            try:
                await self.delete_group(group.group_id, group.partition)
            except RaftkaError as error:
                log.info("group %s: expiring offsets failed: %s", group.group_id, error)
                return Retained()
            log.info("group %s: offsets expired (empty for over %d ms)", group.group_id, retention)
            return Retained(expired=True)
        oldest = min([group.metadata_written_ms or wall, *(o.written_ms or wall for o in held.values())])
        if wall - oldest < retention // 2 or not self.store.deletes_by_time(group.partition):
            return Retained()
        entries: list[tuple[bytes, bytes | None]] = [(offset_key(group.group_id, *tp), offset_value(o))
                                                     for tp, o in held.items()]
        if group.metadata_record is not None:
            entries.append(group.metadata_record())
        try:
            base = await self._append(group.partition, entries)
        except RaftkaError as error:
            log.info("group %s: rewriting its records failed: %s", group.group_id, error)
            return Retained()
        written = self.wall()
        for i, (tp, o) in enumerate(list(held.items())):
            held[tp] = CommittedOffset(o.offset, o.leader_epoch, o.metadata, o.commit_timestamp, base + i, written)
        return Retained(rewritten_ms=written)

    async def _append(self, partition: int, entries: list[tuple[bytes, bytes | None]]) -> int:
        return await self.store.append(partition, entries, self.commit_timeout_ms)


def _tombstone_batches(group_id: str, partitions: list[TopicPartition]) -> list[list[tuple[TopicPartition, bytes]]]:
    """The offset tombstones of ``partitions`` (with their keys), cut into groups that each fit
    one coordinator write (BATCH_BYTES_MAX)."""
    batches: list[list[tuple[TopicPartition, bytes]]] = []
    size = BATCH_BYTES_MAX  # full: the first tombstone opens a batch
    for tp in partitions:
        key = offset_key(group_id, *tp)
        record_bytes = len(key) + TOMBSTONE_OVERHEAD_BYTES
        if size + record_bytes > BATCH_BYTES_MAX - BATCH_HEADER_BYTES:
            batches.append([])
            size = 0
        batches[-1].append((tp, key))
        size += record_bytes
    return batches
