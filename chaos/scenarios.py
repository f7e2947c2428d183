"""The named scenarios of `raftka chaos run --scenario NAME` (``--list`` prints them).

A scenario is a nemesis, the lengths of faults and quiet spells between them, the workload and
the cluster configuration. Every safe scenario must come out valid; ``unsafe-lost-writes`` runs
acks=1 with unclean leader election and must come out invalid (the checker catching lost writes).
``smoke`` scenarios run in the default test suite (about 30 s each); the others are ``soak``.
``spark`` scenarios also run a Spark streaming query during the faults (chaos/spark_sink.py;
tests/test_chaos_spark.py runs ``spark`` in the default suite when Java 17+ is there).
``secure`` scenarios run on a secure cluster (SASL_SSL, ACLs: chaos/runner.py); any scenario
does with ``raftka chaos run --secure``. A ``background`` nemesis runs during the whole fault
schedule, alongside the scenario's own faults (``reassign``: chaos/nemesis.py's Reassigner).
``compact`` writes keyed records and tombstones to a compacted topic whose cleaner runs during
the faults; the checker then allows what compaction may remove (chaos/checker.py's CompactedLog).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from raftka.chaos.workload import WorkloadConfig

# Every process: quick fencing and ISR changes, so a 30 s run sees several leader changes.
CLUSTER_CONFIGS: dict[str, Any] = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.wait.max.ms": 200,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
}

# Scenario ``compact``: segments roll about every second per partition at the workload's rate,
# and any dirt makes a log cleanable, so the cleaner rewrites each partition every few seconds
# (log.cleaner.backoff.ms 200 on the brokers); tombstones may go 2 s after their first cleaning.
COMPACT_KEYS = 24  # 8 per partition: each key rewritten ~12 times a second
COMPACTED_TOPIC: dict[str, Any] = {"cleanup.policy": "compact", "segment.bytes": 8192,
                                   "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 2000}


@dataclass
class Scenario:
    name: str
    description: str
    nemesis: str | None
    fault_s: tuple[float, float] = (3.0, 7.0)
    quiet_s: tuple[float, float] = (2.0, 5.0)
    workload: Callable[[], WorkloadConfig] = WorkloadConfig
    cluster_configs: dict[str, Any] = field(default_factory=dict)
    expect_valid: bool = True
    smoke: bool = False
    spark: bool = False  # a Spark streaming query to Parquet runs during the faults
    secure: bool = False  # SASL_SSL on every listener, ACLs, clients log in (raftka/cluster/secure.py)
    brokers: int = 3
    background: str | None = None  # "reassign": chaos/nemesis.py's Reassigner during the whole schedule

    def configs(self) -> dict[str, Any]:
        return {**CLUSTER_CONFIGS, **self.cluster_configs}


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("none", "no faults: the baseline", None),
    Scenario("isolate-leader", "a partition leader cut from brokers and controllers, clients still reach it",
             "isolate-leader"),
    Scenario("isolate-controller", "the active controller cut from every node", "isolate-controller"),
    Scenario("majority-minority", "one controller and one broker split from the rest", "majority-minority"),
    Scenario("replication-latency", "latency with jitter on broker-to-broker links", "replication-latency"),
    Scenario("replication-bandwidth", "bandwidth limit on fetch answers between brokers", "replication-bandwidth"),
    Scenario("reset-connections", "TCP resets on a random half of the links", "reset-connections", smoke=True),
    Scenario("kill-broker", "kill -9 of a partition leader, restarted at heal", "kill-broker", smoke=True),
    Scenario("kill-controller", "kill -9 of the active controller, restarted at heal", "kill-controller"),
    Scenario("pause", "SIGSTOP of a leader or the active controller, SIGCONT at heal", "pause"),
    Scenario("rolling-restart", "SIGTERM and restart of every node in turn", "rolling-restart",
             fault_s=(0.0, 0.0), quiet_s=(3.0, 5.0)),
    Scenario("mix", "a random one of the above each time", "mix"),
    Scenario("spark", "a Spark streaming query to Parquet while a partition leader is isolated or killed -9; "
             "Spark's output must equal the committed log", "isolate-or-kill-leader", spark=True,
             # Half the usual rate: Spark's JVM and Python workers need the box's CPU too.
             workload=lambda: WorkloadConfig(rate_per_producer=50.0)),
    Scenario("reassign", "partitions moved between 4 brokers (RF 3), some moves cancelled, while a partition "
             "leader is isolated or killed -9; every move must end where it was last sent", "isolate-or-kill-leader",
             brokers=4, background="reassign", smoke=True),
    Scenario("compact", "a compacted topic of keyed records and tombstones, the log cleaner running on every "
             "broker, while a partition leader is killed -9 or isolated, or a leader or the controller paused; "
             "each key's latest acknowledged write must survive", "kill-isolate-or-pause",
             workload=lambda: WorkloadConfig(topic="chaos-compacted", keys=COMPACT_KEYS, tombstone_ratio=0.005,
                                             topic_configs=COMPACTED_TOPIC),
             cluster_configs={"log.cleaner.backoff.ms": 200}, smoke=True),
    Scenario("unsafe-lost-writes",
             "acks=1, unclean leader election: followers cut, then the leader killed (must be INVALID)",
             "kill-leader-before-copy", fault_s=(0.5, 1.0), quiet_s=(4.0, 6.0),
             workload=WorkloadConfig.unsafe,
             cluster_configs={"unclean.leader.election.enable": True, "min.insync.replicas": 1},
             expect_valid=False),
]}


def get(name: str) -> Scenario:
    """A scenario by name; KeyError naming the known ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
