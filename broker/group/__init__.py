"""Consumer groups on the brokers: the group coordinator and its ``__consumer_offsets`` records.

| module | what |
|---|---|
| ``records.py`` | which partition a group lives in (Java's String.hashCode), the record formats |
| ``group.py`` | one group: members, generation, the state table |
| ``coordinator.py`` | the protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit/Fetch, ... |
| ``store.py`` | appends with acks=all and loading through the broker's own replicas; high watermarks for lag |
| ``service.py`` | the broker's glue: FindCoordinator, creating the topic, leadership changes, /metrics |
"""
from raftka.broker.group.coordinator import REQUEST, CoordinatorConfig, GroupCoordinator
from raftka.broker.group.records import OFFSETS_TOPIC, partition_for
from raftka.broker.group.service import GroupService

__all__ = ["REQUEST", "CoordinatorConfig", "GroupCoordinator", "GroupService", "OFFSETS_TOPIC", "partition_for"]
