"""ElectLeaders on the active controller (Kafka's KIP-460: kafka-leader-election).

``LeaderElection(controller)`` adds ElectLeaders (v0-2) to a QuorumController's service. For each
partition named (``topic_partitions`` null: every partition), decided on the committed image:

- **preferred** (election type 0; v0 knows only this one): the first replica leads if it is
  live and in the ISR. Already leading: ELECTION_NOT_NEEDED; not live or not in the ISR:
  PREFERRED_LEADER_NOT_AVAILABLE.
- **unclean** (1): only for a partition without a leader. The first live ISR member leads, else,
  whatever the topic's ``unclean.leader.election.enable`` says (the operator asked for it), the
  first live replica with an ISR of itself: acknowledged records it lacks are lost. A leader
  already: ELECTION_NOT_NEEDED; no live replica: ELIGIBLE_LEADERS_NOT_AVAILABLE.

An unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION. Asked for every partition, the
answer lists only the partitions that were elected or failed, not those whose election was not
needed (as Kafka's). The changes are PartitionChangeRecords expecting the partition epoch they
were decided on, committed in entries of at most PARTITION_CHANGES_PER_ENTRY_MAX; a partition
that changed meanwhile is decided again. A new leader bumps the leader epoch, so the old one
steps down as after any election.

With ``auto.leader.rebalance.enable`` (the default) the controller moves leadership back to the
preferred replica by itself whenever that replica is live and in the ISR (elections.py); this API
is for clusters that turn it off, and for unclean elections.
"""
from __future__ import annotations

from typing import Any, Final

from raftka.common import errors
from raftka.raft_meta.controller import service as svc
from raftka.raft_meta.metadata.image import NO_LEADER, MetadataImage
from raftka.raft_meta.metadata.records import PartitionChangeRecord

PREFERRED: Final = 0
UNCLEAN: Final = 1
ELECTION_TYPES: Final = {PREFERRED: "PREFERRED", UNCLEAN: "UNCLEAN"}
DECISION_ATTEMPTS_MAX: Final = 20


class LeaderElection:
    """ElectLeaders of one QuorumController (see the module docstring)."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        controller.service.handlers[svc.API_ELECT_LEADERS] = self.elect_leaders

    async def elect_leaders(self, version: int, body: dict) -> tuple[int, dict]:
        election_type = body["election_type"] if version >= 1 else PREFERRED
        if election_type not in ELECTION_TYPES:
            raise errors.InvalidRequestError(f"election_type {election_type}: 0 (preferred) or 1 (unclean)")
        from raftka.raft_meta.controller.quorum_controller import PARTITION_CHANGES_PER_ENTRY_MAX as per_entry
        wanted = body["topic_partitions"]
        for _ in range(DECISION_ATTEMPTS_MAX):
            image = self.controller.image
            results, records = decide(image, election_type, wanted)
            try:
                for start in range(0, len(records), per_entry):
                    await self.controller.commit(records[start:start + per_entry])
            except errors.InvalidUpdateVersionError:
                continue  # a partition changed under us: decide again on the new image
            return errors.NONE, {"throttle_time_ms": 0, "error_code": errors.NONE,
                                 "replica_election_results": _grouped(results)}
        raise errors.RequestTimedOutError("leader elections kept racing with other changes; retry")


def decide(image: MetadataImage, election_type: int,
           wanted: list[dict] | None) -> tuple[list[tuple[str, int, int, str | None]], list[PartitionChangeRecord]]:
    """([(topic, partition, error code, message)], the changes to commit) for one ElectLeaders."""
    live = set(image.live_broker_ids())
    if wanted is None:
        named = [(name, index) for name in sorted(image.topics) for index in range(len(image.topics[name].partitions))]
    else:
        named = [(entry["topic"], index) for entry in wanted for index in entry["partition_id"]]
    results: list[tuple[str, int, int, str | None]] = []
    records: list[PartitionChangeRecord] = []
    seen: set[tuple[str, int]] = set()
    for name, index in named:
        if (name, index) in seen:
            continue
        seen.add((name, index))
        topic = image.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            results.append((name, index, errors.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {name}-{index}"))
            continue
        p = topic.partitions[index]
        leader, isr, code, message = _elect(p, live, election_type)
        if code == errors.ELECTION_NOT_NEEDED and wanted is None:
            continue
        if code == errors.NONE:
            records.append(PartitionChangeRecord(name, topic.topic_id, index, p.partition_epoch, leader,
                                                 None if isr == p.isr else isr))
        results.append((name, index, code, message))
    return results, records


def _elect(p: Any, live: set[int], election_type: int) -> tuple[int, tuple[int, ...], int, str | None]:
    """(new leader, new ISR, error code, message) of one partition's election."""
    if election_type == PREFERRED:
        preferred = p.replicas[0]
        if p.leader == preferred:
            return p.leader, p.isr, errors.ELECTION_NOT_NEEDED, f"broker {preferred}, the preferred replica, leads"
        if preferred not in live or preferred not in p.isr:
            where = "not live" if preferred not in live else "not in the ISR"
            return p.leader, p.isr, errors.PREFERRED_LEADER_NOT_AVAILABLE, f"preferred replica {preferred} is {where}"
        return preferred, p.isr, errors.NONE, None
    if p.leader != NO_LEADER:
        return p.leader, p.isr, errors.ELECTION_NOT_NEEDED, f"broker {p.leader} leads"
    in_sync = [b for b in p.replicas if b in p.isr and b in live]
    if in_sync:
        return in_sync[0], tuple(b for b in p.isr if b in live), errors.NONE, None
    alive = [b for b in p.replicas if b in live]
    if alive:
        return alive[0], (alive[0],), errors.NONE, None
    return p.leader, p.isr, errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"no replica of {list(p.replicas)} is live"


def _grouped(results: list[tuple[str, int, int, str | None]]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for name, index, code, message in results:
        by_topic.setdefault(name, []).append({"partition_id": index, "error_code": code, "error_message": message})
    return [{"topic": name, "partition_result": partitions} for name, partitions in by_topic.items()]


__all__ = ["ELECTION_TYPES", "LeaderElection", "PREFERRED", "UNCLEAN", "decide"]
