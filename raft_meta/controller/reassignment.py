"""Partition reassignment on the active controller (Kafka's KIP-455, as its KRaft controller does it).

``Reassignments(controller)`` adds AlterPartitionReassignments (45) and ListPartitionReassignments
(46) to a QuorumController's service, and ``completions(image)`` gives the changes that finish
the reassignments whose new replicas have caught up (the controller's periodic pass commits them).

A reassignment of a partition from its replicas R to the target T is three committed steps:

1. **Start** (AlterPartitionReassignments): one PartitionChangeRecord with replicas = T, then the
   members of R not in T; adding = T - R; removing = R - T. The ISR and the leader stay. Brokers
   act on the committed change like on any other: a broker new to the replica list creates the
   replica and fetches from the leader, which tracks it as a follower.
2. **Catch up**: the leader adds each new replica to the ISR once it has caught up (AlterPartition,
   as for any follower), so nothing is acknowledged that the new replicas might lack.
3. **Finish** (``completions``): once every member of T is in the ISR, replicas = T, ISR = ISR
   minus the removed, adding = removing = (); if the leader was removed, the first member of T
   that is live and in the ISR leads (a new leader epoch). Brokers no longer in the replica list
   stop their replica and delete its log.

A new reassignment of a partition already being reassigned starts from its original replicas
(replicas minus adding), as Kafka's does; null replicas cancel one (back to the original replicas,
ISR and leader among them), NO_REASSIGNMENT_IN_PROGRESS when there is none. Target replicas must be
distinct, registered brokers (INVALID_REPLICA_ASSIGNMENT otherwise); a target equal to the
replicas changes nothing. Every decision is taken on the committed image and expects the
partition epoch it was decided on: a partition that changed meanwhile is decided again.
"""
from __future__ import annotations

import asyncio
from typing import Any, Final, Iterator

from raftka.common import errors
from raftka.raft_meta.controller import service as svc
from raftka.raft_meta.metadata.image import NO_LEADER, MetadataImage, PartitionRegistration
from raftka.raft_meta.metadata.records import PartitionChangeRecord

DECISION_ATTEMPTS_MAX: Final = 20
CHANGES_PER_ENTRY_MAX: Final = 2000  # as the controller's elections (quorum_controller.py)

Decision = tuple[int, "str | None", "PartitionChangeRecord | None"]  # (error code, message, change)


class Reassignments:
    """The two reassignment APIs of one QuorumController (see the module docstring)."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self._lock = asyncio.Lock()  # one request decides (and commits) at a time
        controller.service.handlers.update({svc.API_ALTER_PARTITION_REASSIGNMENTS: self.alter,
                                            svc.API_LIST_PARTITION_REASSIGNMENTS: self.list})

    async def alter(self, version: int, body: dict) -> tuple[int, dict]:
        wanted = [(t["name"], p["partition_index"], p["replicas"]) for t in body["topics"] for p in t["partitions"]]
        async with self._lock:
            for _ in range(DECISION_ATTEMPTS_MAX):
                image = self.controller.image
                decided = [(name, index, decide(image, name, index, None if replicas is None else tuple(replicas)))
                           for name, index, replicas in wanted]
                records = [change for _, _, (_, _, change) in decided if change is not None]
                try:
                    for start in range(0, len(records), CHANGES_PER_ENTRY_MAX):
                        await self.controller.commit(records[start:start + CHANGES_PER_ENTRY_MAX])
                except errors.InvalidUpdateVersionError:
                    continue  # a partition changed under us: decide again on the new image
                break
            else:
                raise errors.RequestTimedOutError("reassignments kept racing with other changes; retry")
        by_topic: dict[str, list[dict]] = {}
        for name, index, (code, message, _) in decided:
            by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code,
                                                  "error_message": message})
        return errors.NONE, {"throttle_time_ms": 0, "error_code": errors.NONE, "error_message": None,
                             "responses": [{"name": name, "partitions": partitions}
                                           for name, partitions in by_topic.items()]}

    async def list(self, version: int, body: dict) -> tuple[int, dict]:
        image = self.controller.image
        if body["topics"] is None:
            named = [(name, index) for name, topic in sorted(image.topics.items())
                     for index, p in enumerate(topic.partitions) if p.reassigning]
        else:
            named = []
            for entry in body["topics"]:
                topic = image.topics.get(entry["name"])
                if topic is None:
                    raise errors.UnknownTopicOrPartitionError(f"unknown topic {entry['name']!r}")
                named += [(entry["name"], i) for i in entry["partition_indexes"]
                          if 0 <= i < len(topic.partitions) and topic.partitions[i].reassigning]
        by_topic: dict[str, list[dict]] = {}
        for name, index in named:
            p = image.topics[name].partitions[index]
            by_topic.setdefault(name, []).append({"partition_index": index, "replicas": list(p.replicas),
                                                  "adding_replicas": list(p.adding_replicas),
                                                  "removing_replicas": list(p.removing_replicas)})
        return errors.NONE, {"throttle_time_ms": 0, "error_code": errors.NONE, "error_message": None,
                             "topics": [{"name": name, "partitions": partitions}
                                        for name, partitions in by_topic.items()]}


def decide(image: MetadataImage, name: str, index: int, target: tuple[int, ...] | None) -> Decision:
    """One partition's (error code, message, change to commit or None): start, replace or cancel."""
    topic = image.topics.get(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        return errors.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {name}-{index}", None
    p = topic.partitions[index]
    original = tuple(b for b in p.replicas if b not in p.adding_replicas)
    if target is None:
        if not p.reassigning:
            return errors.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {name}-{index} is in progress", None
        isr = tuple(b for b in p.isr if b in original)
        if not isr:
            return (errors.INVALID_REPLICA_ASSIGNMENT, f"cannot cancel the reassignment of {name}-{index}: none of "
                    f"its original replicas {list(original)} is in the ISR {list(p.isr)}", None)
        return errors.NONE, None, _change(name, topic.topic_id, index, p, original, isr, (), (),
                                          _leader_among(p, original, isr, image))
    if not target or len(set(target)) != len(target) or min(target) < 0:
        return errors.INVALID_REPLICA_ASSIGNMENT, f"replicas {list(target)}: need distinct broker ids >= 0", None
    unknown = [b for b in target if b not in image.brokers]
    if unknown:
        return errors.INVALID_REPLICA_ASSIGNMENT, f"broker(s) {unknown} are not registered", None
    if target == (p.target_replicas if p.reassigning else p.replicas):
        return errors.NONE, None, None  # already there, or already on its way there
    adding = tuple(b for b in target if b not in original)
    removing = tuple(b for b in original if b not in target)
    replicas = target + removing
    if set(target) <= set(p.isr):  # nothing to catch up: finish at once
        isr = tuple(b for b in p.isr if b in target)
        return errors.NONE, None, _change(name, topic.topic_id, index, p, target, isr, (), (),
                                          _leader_among(p, target, isr, image))
    # A replaced reassignment may drop replicas it was adding, some already in the ISR.
    isr = tuple(b for b in p.isr if b in replicas)
    if not isr:
        return (errors.INVALID_REPLICA_ASSIGNMENT, f"{name}-{index}: no in-sync replica {list(p.isr)} would stay "
                f"among {list(replicas)}", None)
    return errors.NONE, None, _change(name, topic.topic_id, index, p, replicas, isr, removing, adding,
                                      _leader_among(p, replicas, isr, image))


def completions(image: MetadataImage, topics: Any = None) -> Iterator[PartitionChangeRecord]:
    """The changes that finish every reassignment whose target replicas are all in the ISR, in
    ``topics`` (None: every topic)."""
    for name in image.topics if topics is None else topics:
        topic = image.topics.get(name)
        if topic is None:
            continue
        for index, p in enumerate(topic.partitions):
            if not p.reassigning:
                continue
            target = p.target_replicas
            if not set(target) <= set(p.isr):
                continue
            isr = tuple(b for b in p.isr if b in target)
            yield _change(name, topic.topic_id, index, p, target, isr, (), (), _leader_among(p, target, isr, image))


def _leader_among(p: PartitionRegistration, replicas: tuple[int, ...], isr: tuple[int, ...],
                  image: MetadataImage) -> int:
    """The leader once the replica list is ``replicas``: the current one if it stays, else the
    first of ``replicas`` that is live and in ``isr`` (none: offline until the elections find one)."""
    if p.leader in replicas and p.leader in isr:
        return p.leader
    live = set(image.live_broker_ids())
    return next((b for b in replicas if b in isr and b in live), NO_LEADER)


def _change(name: str, topic_id: str, index: int, p: PartitionRegistration, replicas: tuple[int, ...],
            isr: tuple[int, ...], removing: tuple[int, ...], adding: tuple[int, ...],
            leader: int) -> PartitionChangeRecord:
    return PartitionChangeRecord(name, topic_id, index, p.partition_epoch,
                                 leader=None if leader == p.leader else leader,
                                 isr=None if isr == p.isr else isr,
                                 replicas=None if replicas == p.replicas else replicas,
                                 removing_replicas=None if removing == p.removing_replicas else removing,
                                 adding_replicas=None if adding == p.adding_replicas else adding)


__all__ = ["Reassignments", "completions", "decide"]
