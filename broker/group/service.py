"""The broker's group APIs: FindCoordinator on any broker, the rest on the coordinator, the
``__consumer_offsets`` topic created on first need, and group lag for /metrics.

FindCoordinator answers the leader of the group's ``__consumer_offsets`` partition as committed
metadata names it. When the topic does not exist yet, the broker asks the active controller to
create it (``offsets.topic.num.partitions`` partitions, replication factor
``min(offsets.topic.replication.factor, unfenced brokers)``) and answers
COORDINATOR_NOT_AVAILABLE (retriable) until it exists and has a leader.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from raftka.broker.group.coordinator import CoordinatorConfig, GroupCoordinator
from raftka.broker.group.records import OFFSETS_TOPIC, partition_for
from raftka.broker.group.store import EndOffsets, ReplicaOffsetsStore
from raftka.broker.network import LISTENER
from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import RaftkaError

log = logging.getLogger(__name__)

LAG_REFRESH_S = 2.0  # how old the high watermarks behind group lag figures may be
LAG_SERIES_MAX = 5000  # per-partition lag lines in /metrics; past it only the per-group sums
TOPIC_CREATE_RETRY_S = 1.0
LEASE_FRACTION = 0.8  # of broker.session.timeout.ms: the margin covers clock rates and scheduling


class GroupService:
    """Group coordinator plumbing for one broker (see the module docstring)."""

    def __init__(self, broker_id: int, config: Any, replicas: Any,
                 controller_request: Callable[..., Awaitable[tuple[int, Any]]], *,
                 heartbeat_ok_at: Callable[[], float] | None = None) -> None:
        self.broker_id = broker_id
        self.replicas = replicas
        self.config = CoordinatorConfig.from_server_config(config)
        self.coordinator = GroupCoordinator(broker_id, self.config,
                                            ReplicaOffsetsStore(replicas, self.config.load_buffer_bytes))
        # The controller fences a broker it has not heard from for broker.session.timeout.ms and
        # moves its leaderships; a broker cut off from it learns that only later. So groups are
        # served only while a heartbeat the controller accepted was sent less than that long ago
        # (with a margin): a deposed coordinator stops answering (NOT_COORDINATOR) before its
        # successor can take a commit, and never serves offsets older than one already read.
        self._heartbeat_ok_at = heartbeat_ok_at
        self._lease_s = config["broker.session.timeout.ms"] * LEASE_FRACTION / 1000
        if heartbeat_ok_at is not None:
            self.coordinator.lease = self.controller_lease
        self.end_offsets = EndOffsets(replicas, broker_id, config["socket.request.max.bytes"])
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self._controller_request = controller_request
        self._creating: asyncio.Task | None = None
        self._created_at = 0.0
        self._lag_task: asyncio.Task | None = None
        self._topic: Any = None  # the TopicInfo last evaluated (views keep unchanged topics' objects)
        c = self.coordinator
        self.handlers = {
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: _whole(c.join_group), ApiKey.SYNC_GROUP: _whole(c.sync_group),
            ApiKey.HEARTBEAT: _whole(c.heartbeat), ApiKey.LEAVE_GROUP: _whole(c.leave_group),
            ApiKey.OFFSET_COMMIT: _whole(c.offset_commit), ApiKey.OFFSET_FETCH: _whole(c.offset_fetch),
            ApiKey.DESCRIBE_GROUPS: _whole(c.describe_groups), ApiKey.LIST_GROUPS: _whole(c.list_groups),
            ApiKey.DELETE_GROUPS: _whole(c.delete_groups), ApiKey.OFFSET_DELETE: _whole(c.offset_delete),
        }

    def start(self) -> None:
        """Start the coordinator's timers and the lag refresher."""
        self.coordinator.start()
        self._lag_task = asyncio.get_running_loop().create_task(self._lag_loop(), name="group-lag")

    async def close(self) -> None:
        """Stop everything; held group answers get NOT_COORDINATOR."""
        for task in (self._lag_task, self._creating):
            if task is not None:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        await self.coordinator.close()
        await self.end_offsets.close()

    def controller_lease(self) -> bool:
        """True while the controller cannot have fenced this broker yet (see __init__)."""
        assert self._heartbeat_ok_at is not None
        sent = self._heartbeat_ok_at()
        return sent > 0 and time.monotonic() - sent < self._lease_s

    # -- leadership of __consumer_offsets partitions (from committed metadata) -------------------

    def on_metadata(self, view: Any, caught_up: bool = True) -> None:
        """After the replica manager applied ``view``: load the groups of the offsets
        partitions we now lead, drop those of the ones we stopped leading. While the broker
        replays metadata older than its own registration (``caught_up`` False) it coordinates
        nothing: a past leadership must not be served."""
        if not caught_up:
            self._topic = None  # evaluate again once caught up, even if the topic is unchanged
            for index in list(self.coordinator.partitions):
                self.coordinator.resign(index)
            return
        topic = view.topics.get(OFFSETS_TOPIC)
        if topic is self._topic:
            return  # unchanged (the metadata view keeps unchanged topics' objects)
        self._topic = topic
        if topic is None:
            self.coordinator.set_partition_count(None)
            return
        self.coordinator.set_partition_count(len(topic.partitions))
        for index in range(len(topic.partitions)):
            replica = self.replicas.partitions.get((OFFSETS_TOPIC, index))
            if replica is not None and replica.is_leader:
                self.coordinator.elect(index, replica.leader_epoch, topic.topic_id)
            else:
                self.coordinator.resign(index)

    # -- FindCoordinator -------------------------------------------------------------------------

    async def find_coordinator(self, body: dict) -> tuple[int, dict]:
        """FindCoordinator {key, key_type: 0} -> {error_code, node_id, host, port}."""
        key = body.get("key")
        key_type = body.get("key_type", 0)
        if key_type != 0:
            raise errors.InvalidRequestError("only group coordinators exist (key_type 0)")
        if not key:  # a string: checked at the boundary against FindCoordinator's declaration
            return errors.NONE, _coordinator(errors.INVALID_GROUP_ID, "the group id must be a non-empty string")
        view = self.replicas.view
        topic = view.topics.get(OFFSETS_TOPIC)
        if topic is None:
            self._ensure_topic(view)
            return errors.NONE, _coordinator(errors.COORDINATOR_NOT_AVAILABLE,
                                             f"{OFFSETS_TOPIC} is being created")
        info = topic.partitions[partition_for(key, len(topic.partitions))]
        broker = view.brokers.get(info.leader)
        # On the listener this request came in on (Kafka's rule, as Metadata).
        endpoint = broker.endpoint(LISTENER.get()) if broker is not None and not broker.fenced else None
        if endpoint is None:
            return errors.NONE, _coordinator(errors.COORDINATOR_NOT_AVAILABLE,
                                             f"{OFFSETS_TOPIC} partition of group {key} has no leader")
        return errors.NONE, {"error_code": errors.NONE, "error_message": None, "node_id": info.leader,
                             "host": endpoint[0], "port": endpoint[1]}

    def _ensure_topic(self, view: Any) -> None:
        if self._creating is not None and not self._creating.done():
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._created_at < TOPIC_CREATE_RETRY_S:
            return
        self._created_at = loop.time()
        live = sum(1 for b in view.brokers.values() if not b.fenced)
        self._creating = loop.create_task(self._create_topic(max(1, min(self.config.replication_factor, live))))

    async def _create_topic(self, replication_factor: int) -> None:
        c = self.config
        # Kafka's: compacted, so the latest commit of each group and partition stays (and the
        # rest goes); segments roll within a day so the cleaner can reach the active one's records.
        segment_ms = max(60_000, min(86_400_000, c.retention_ms // 4))
        configs = {"cleanup.policy": "compact", "segment.bytes": str(c.segment_bytes),
                   "segment.ms": str(segment_ms)}
        # Kafka's CreateTopics (broker/controller_channel.py sends it at its KAFKA_VERSIONS version)
        body = {"topics": [{"name": OFFSETS_TOPIC, "num_partitions": c.num_partitions,
                            "replication_factor": replication_factor, "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "timeout_ms": 60_000, "validate_only": False}
        try:
            code, out = await self._controller_request(ApiKey.CREATE_TOPICS, body, retry_in_doubt=False)
        except RaftkaError as error:
            log.info("creating %s failed: %s", OFFSETS_TOPIC, error)
            return
        result = (out or {}).get("topics") or [{}]
        topic_code = result[0].get("error_code", code) if code == errors.NONE else code
        if topic_code in (errors.NONE, errors.TOPIC_ALREADY_EXISTS):
            log.info("%s created (%d partitions, replication factor %d)", OFFSETS_TOPIC, c.num_partitions,
                     replication_factor)
        else:
            log.info("creating %s refused: %s %s", OFFSETS_TOPIC, errors.name_of(topic_code),
                     result[0].get("error_message"))

    # -- lag ---------------------------------------------------------------------------------------

    async def _lag_loop(self) -> None:
        while True:
            await asyncio.sleep(LAG_REFRESH_S)
            try:
                offsets = self.coordinator.offsets
                tps = {tp for g in self.coordinator.loaded_groups() for tp in offsets.committed(g.group_id)}
                self.high_watermarks = await self.end_offsets.lookup(tps) if tps else {}
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("refreshing group lag failed")

    def metric_lines(self, node: str) -> list[str]:
        """Prometheus lines: per group members and lag (high watermark - committed offset)."""
        c = self.coordinator
        groups = sorted(c.loaded_groups(), key=lambda g: g.group_id)
        lines = ["# TYPE raftka_coordinator_groups gauge", f"raftka_coordinator_groups{{{node}}} {len(groups)}",
                 "# TYPE raftka_coordinator_rebalances_total counter",
                 f"raftka_coordinator_rebalances_total{{{node}}} {c.stats.rebalances}",
                 "# TYPE raftka_coordinator_expired_members_total counter",
                 f"raftka_coordinator_expired_members_total{{{node}}} {c.stats.expired_members}",
                 "# TYPE raftka_coordinator_offset_commits_total counter",
                 f"raftka_coordinator_offset_commits_total{{{node}}} {c.offsets.commits}",
                 "# TYPE raftka_coordinator_partitions_loading gauge",
                 f"raftka_coordinator_partitions_loading{{{node}}} "
                 f"{sum(1 for p in c.partitions.values() if not p.loaded)}",
                 "# TYPE raftka_group_members gauge"]
        for g in groups:
            lines.append(f'raftka_group_members{{{node},group="{_label(g.group_id)}",state="{g.state.value}"}} '
                         f"{len(g.members)}")
        lines.append("# TYPE raftka_group_generation gauge")
        for g in groups:
            lines.append(f'raftka_group_generation{{{node},group="{_label(g.group_id)}"}} {g.generation_id}')
        series = 0
        sums: list[str] = []
        per_partition: list[str] = []
        for g in groups:
            total = 0
            offsets = c.offsets.committed(g.group_id)
            for (topic, index), committed in sorted(offsets.items()):
                hw = self.high_watermarks.get((topic, index))
                if hw is None:
                    continue
                lag = max(0, hw - committed.offset)
                total += lag
                if series < LAG_SERIES_MAX:
                    series += 1
                    per_partition.append(f'raftka_group_lag{{{node},group="{_label(g.group_id)}",'
                                         f'topic="{topic}",partition="{index}"}} {lag}')
            if offsets:
                sums.append(f'raftka_group_lag_sum{{{node},group="{_label(g.group_id)}"}} {total}')
        lines.append("# TYPE raftka_group_lag gauge")
        lines += per_partition
        lines.append("# TYPE raftka_group_lag_sum gauge")
        lines += sums
        return lines


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _coordinator(code: int, message: str) -> dict:
    return {"error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}


def _whole(handler: Callable[[dict], Awaitable[dict]]) -> Callable[[dict], Awaitable[tuple[int, dict]]]:
    """Group answers carry their errors in the body (as Kafka's): the frame says NONE."""
    async def handle(body: dict) -> tuple[int, dict]:
        return errors.NONE, await handler(body)
    return handle
