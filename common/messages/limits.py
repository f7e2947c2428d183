"""Raftka's limits on what one request may name, each with its reason; the declarations in this
package use them as their arrays' ``max_count`` and their bytes' ``max_length``."""
from __future__ import annotations

from typing import Final

TOPICS_MAX: Final = 100_000  # topics named in one request (a cluster holds far fewer)
PARTITIONS_MAX: Final = 10_000  # partitions of one topic in one request (the controller's limit per topic)
GROUPS_MAX: Final = 10_000  # group ids in one DescribeGroups / DeleteGroups / FindCoordinator
MEMBERS_MAX: Final = 100_000  # assignments in one SyncGroup (one per member)
LEAVING_MEMBERS_MAX: Final = 1_000  # members in one LeaveGroup
PROTOCOLS_MAX: Final = 100  # assignors one member offers in a JoinGroup
REPLICAS_MAX: Final = 1_000  # broker ids in one replica list or ISR
CONFIGS_MAX: Final = 1_000  # config entries in one resource (a topic has a few dozen keys)
STATES_MAX: Final = 16  # ListGroups states (there are 5)
LISTENERS_MAX: Final = 16  # endpoints one broker registers
# Bytes a group member may put in its subscription or assignment (the coordinator stores them in
# one __consumer_offsets record, itself bounded by the frame).
MEMBER_BYTES_MAX: Final = 1 << 20
