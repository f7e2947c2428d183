"""Consumer groups on the brokers: the group coordinator, its offset manager, and their
``__consumer_offsets`` records.

The coordinator (membership) and the offset manager (committed offsets) are split the way
Kafka's GroupCoordinator delegates offsets to its GroupMetadataManager: the coordinator owns the
groups (members, generations, rebalances, which partitions are loaded) and hands OffsetCommit
and OffsetFetch to the offset manager, which owns the offsets and their records (commit, fetch,
loading, retention). They talk through a small explicit interface (offsets.py's docstring).

| module | what |
|---|---|
| ``records.py`` | which partition a group lives in (Java's String.hashCode), the record formats |
| ``group.py`` | one group: members, generation, the state table; the group id check |
| ``coordinator.py`` | membership: Join/Sync/Heartbeat/LeaveGroup, Describe/List/DeleteGroups, loads, timers |
| ``offsets.py`` | offsets: OffsetCommit/Fetch, expiry, rewriting live records before retention |
| ``store.py`` | what both write through: appends (acks=all), loads from the replicas; lag's high watermarks |
| ``service.py`` | the broker's glue: FindCoordinator, creating the topic, leadership changes, /metrics |
"""
from raftka.broker.group.coordinator import REQUEST, CoordinatorConfig, GroupCoordinator
from raftka.broker.group.offsets import OffsetManager
from raftka.broker.group.records import OFFSETS_TOPIC, partition_for
from raftka.broker.group.service import GroupService

__all__ = ["REQUEST", "CoordinatorConfig", "GroupCoordinator", "GroupService", "OFFSETS_TOPIC", "OffsetManager",
           "partition_for"]
