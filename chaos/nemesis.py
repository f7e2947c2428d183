"""Nemeses: the faults of a chaos run, each chosen with the run's seeded generator.

A nemesis ``inject(ctx)``s one fault and returns a ``Fault`` whose ``heal()`` undoes it. Faults
do not overlap (the schedule heals one before the next), so network faults heal with one
Toxiproxy reset.

| name | fault | heal |
|---|---|---|
| isolate-leader | a partition leader cut from the other brokers and the controllers, not from clients | reset |
| isolate-controller | the active controller cut from every other node | reset |
| majority-minority | one controller + one broker cut from the other two + two | reset |
| replication-latency | latency with jitter on every broker -> broker link, both ways | reset |
| replication-bandwidth | a bandwidth limit on leader -> follower data (fetch answers) | reset |
| reset-connections | reset_peer on a random half of all links | reset |
| kill-broker | kill -9 of a partition leader | restart |
| kill-controller | kill -9 of the active controller | restart |
| pause | SIGSTOP of a partition leader or the active controller | SIGCONT |
| rolling-restart | SIGTERM + restart of every broker, then every controller, one at a time | (none) |
| kill-leader-before-copy | followers cut from a leader, writes land on it alone, then kill -9 of it | heal, restart |
| mix | one of the safe ones above at random each time | as chosen |

Cuts are ``down`` (proxy disabled: refused, fast) or ``blackhole`` (bytes dropped, silent), chosen
at random per fault.

``Reassigner`` is not one of these: it runs in the background for the whole fault schedule
(scenario ``background="reassign"``), so partitions are moving between brokers while the faults
above come and go. Each of its actions is a ``reassign`` op in the history (chaos/history.py);
the checker derives from them what every partition's replicas must be at the end.
"""
from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from raftka.chaos.cluster import CLIENT, Network, ProxiedCluster

RESTART_TIMEOUT_S = 90.0


@dataclass
class Context:
    """What a nemesis may touch: the cluster, its network, a blocking AdminClient (through the
    client proxies), the seeded generator, the workload's topic, and a line printer."""

    cluster: ProxiedCluster
    network: Network
    admin: Any
    rng: random.Random
    topic: str
    say: Callable[[str], None] = print

    def partitions(self) -> list[dict[str, Any]]:
        try:
            described = self.admin.describe_topics([self.topic])
            return described[0]["partitions"] if described else []
        except Exception:
            return []

    def leader(self) -> tuple[int, int]:
        """(partition, leader) of a random partition with a live leader; a random broker if the
        metadata cannot be read."""
        led = [p for p in self.partitions() if p["leader"] in self.cluster.broker_ids and
               self.cluster.alive(p["leader"])]
        if led:
            p = self.rng.choice(led)
            return p["partition"], p["leader"]
        return -1, self.rng.choice(self.cluster.broker_ids)

    def active_controller(self) -> int:
        found = self.cluster.leader_id(self.cluster.controller_ids)
        return found if found is not None else self.rng.choice(self.cluster.controller_ids)

    def cut_mode(self) -> str:
        return self.rng.choice(["down", "blackhole"])


@dataclass
class Fault:
    """One injected fault: ``detail`` goes to the history; ``heal()`` undoes it."""

    name: str
    detail: dict[str, Any]
    heal: Callable[[], None] | None = None  # None: nothing to undo (a rolling restart)


class Nemesis:
    """Base: ``name``, ``inject(ctx) -> Fault``; ``inject_s``: how long injecting itself takes
    (the schedule starts no fault that would run past its end); ``choose(rng)``: the nemesis to
    use this time (itself; Mix picks one)."""

    name = "nemesis"
    inject_s = 0.0

    def choose(self, rng: random.Random) -> "Nemesis":
        return self

    def inject(self, ctx: Context) -> Fault:
        raise NotImplementedError


def _network_heal(ctx: Context) -> Callable[[], None]:
    return ctx.network.heal


class IsolateLeader(Nemesis):
    name = "isolate-leader"

    def inject(self, ctx: Context) -> Fault:
        partition, leader = ctx.leader()
        mode = ctx.cut_mode()
        others = [n for n in ctx.cluster.broker_ids + ctx.cluster.controller_ids if n != leader]
        ctx.network.isolate(leader, others, mode)
        return Fault(self.name, {"partition": partition, "leader": leader, "mode": mode}, _network_heal(ctx))


class IsolateController(Nemesis):
    name = "isolate-controller"

    def inject(self, ctx: Context) -> Fault:
        active = ctx.active_controller()
        mode = ctx.cut_mode()
        others = [n for n in ctx.cluster.broker_ids + ctx.cluster.controller_ids if n != active]
        ctx.network.isolate(active, others, mode)
        return Fault(self.name, {"controller": active, "mode": mode}, _network_heal(ctx))


class MajorityMinority(Nemesis):
    name = "majority-minority"

    def inject(self, ctx: Context) -> Fault:
        minority = [ctx.rng.choice(ctx.cluster.controller_ids), ctx.rng.choice(ctx.cluster.broker_ids)]
        majority = [n for n in ctx.cluster.controller_ids + ctx.cluster.broker_ids if n not in minority]
        mode = ctx.cut_mode()
        ctx.network.partition([minority, majority], mode)
        return Fault(self.name, {"minority": minority, "majority": majority, "mode": mode}, _network_heal(ctx))


def _replication_links(ctx: Context) -> list[tuple[int, int]]:
    brokers = ctx.cluster.broker_ids
    return [(a, b) for a in brokers for b in brokers if a != b]


class ReplicationLatency(Nemesis):
    name = "replication-latency"

    def inject(self, ctx: Context) -> Fault:
        latency = ctx.rng.choice([20, 50, 100, 200, 400])
        jitter = latency // 2
        for stream in ("upstream", "downstream"):
            ctx.network.poison(_replication_links(ctx), "latency", stream=stream, latency=latency, jitter=jitter)
        return Fault(self.name, {"latency_ms": latency, "jitter_ms": jitter}, _network_heal(ctx))


class ReplicationBandwidth(Nemesis):
    name = "replication-bandwidth"

    def inject(self, ctx: Context) -> Fault:
        rate = ctx.rng.choice([5, 20, 50, 200])  # KB/s of fetch answers
        ctx.network.poison(_replication_links(ctx), "bandwidth", stream="downstream", rate=rate)
        return Fault(self.name, {"rate_kb_s": rate}, _network_heal(ctx))


class ResetConnections(Nemesis):
    name = "reset-connections"

    def inject(self, ctx: Context) -> Fault:
        links = sorted(ctx.cluster.links, key=str)
        chosen = ctx.rng.sample(links, len(links) // 2)
        timeout = ctx.rng.choice([0, 100, 500, 1000])
        ctx.network.poison(chosen, "reset_peer", stream=ctx.rng.choice(["upstream", "downstream"]),
                           toxicity=0.5, timeout=timeout)
        return Fault(self.name, {"links": [ctx.cluster.links[p][0] for p in chosen], "timeout_ms": timeout},
                     _network_heal(ctx))


def _restart(ctx: Context, node: int) -> Callable[[], None]:
    def heal() -> None:
        if not ctx.cluster.alive(node):
            ctx.cluster.restart(node, timeout_s=RESTART_TIMEOUT_S)
    return heal


class KillBroker(Nemesis):
    name = "kill-broker"

    def inject(self, ctx: Context) -> Fault:
        partition, leader = ctx.leader()
        ctx.cluster.kill(leader)
        return Fault(self.name, {"broker": leader, "led_partition": partition}, _restart(ctx, leader))


class KillController(Nemesis):
    name = "kill-controller"

    def inject(self, ctx: Context) -> Fault:
        active = ctx.active_controller()
        ctx.cluster.kill(active)
        return Fault(self.name, {"controller": active}, _restart(ctx, active))


class Pause(Nemesis):
    name = "pause"

    def inject(self, ctx: Context) -> Fault:
        if ctx.rng.random() < 0.5:
            _, node = ctx.leader()
            role = "leader"
        else:
            node, role = ctx.active_controller(), "controller"
        ctx.cluster.pause(node)
        return Fault(self.name, {"node": node, "role": role}, lambda: ctx.cluster.resume(node))


class RollingRestart(Nemesis):
    """The whole roll happens inside ``inject`` (SIGTERM = controlled shutdown for brokers)."""

    name = "rolling-restart"
    inject_s = 15.0  # six restarts of a few seconds each on a loaded box

    def inject(self, ctx: Context) -> Fault:
        order = list(ctx.cluster.broker_ids) + list(ctx.cluster.controller_ids)
        for node in order:
            ctx.cluster.restart(node, timeout_s=RESTART_TIMEOUT_S)
            ctx.say(f"  rolling restart: node {node} back")
        return Fault(self.name, {"order": order})


class KillLeaderBeforeCopy(Nemesis):
    """For the unsafe configuration: the followers of one leader cannot fetch, acks=1 writes land
    on the leader alone (its ISR shrinks to itself after replica.lag.time.max.ms), then the leader
    is killed: an unclean election makes a stale follower leader and the restarted old leader
    truncates what only it had."""

    name = "kill-leader-before-copy"

    def __init__(self, hold_s: float = 4.0, down_s: float = 2.0) -> None:
        self.hold_s = hold_s
        self.down_s = down_s
        self.inject_s = hold_s + down_s

    def inject(self, ctx: Context) -> Fault:
        partition, leader = ctx.leader()
        followers = [b for b in ctx.cluster.broker_ids if b != leader]
        ctx.network.cut_links([(f, leader) for f in followers], "down")
        time.sleep(self.hold_s)
        ctx.cluster.kill(leader)
        ctx.network.heal()  # the followers can now talk to each other and the controller freely
        time.sleep(self.down_s)  # a follower is elected while the old leader is down
        return Fault(self.name, {"partition": partition, "leader": leader, "hold_s": self.hold_s},
                     _restart(ctx, leader))


class Mix(Nemesis):
    name = "mix"

    def __init__(self, choices: list[Nemesis]) -> None:
        self.choices = choices

    def choose(self, rng: random.Random) -> Nemesis:
        return rng.choice(self.choices)

    def inject(self, ctx: Context) -> Fault:
        return self.choose(ctx.rng).inject(ctx)


class LeaderFaults(Mix):
    """A partition leader isolated (cut from brokers and controllers, clients still reach it) or
    killed -9, at random each time: the two faults that move leadership under a reader."""

    name = "isolate-or-kill-leader"

    def __init__(self) -> None:
        super().__init__([IsolateLeader(), KillBroker()])


class LeaderKillCutOrPause(Mix):
    """A partition leader killed -9 or isolated, or a leader or the active controller paused
    (SIGSTOP), at random each time: the default scenarios' kills, partitions and pauses in one
    run (scenario ``compact``: while the log cleaner works)."""

    name = "kill-isolate-or-pause"

    def __init__(self) -> None:
        super().__init__([Pause(), IsolateLeader(), KillBroker()])


SAFE_NEMESES: list[type[Nemesis]] = [IsolateLeader, IsolateController, MajorityMinority, ReplicationLatency,
                                     ReplicationBandwidth, ResetConnections, KillBroker, KillController, Pause,
                                     RollingRestart]


def by_name(name: str) -> Nemesis:
    """A nemesis by its name (``mix`` mixes every safe one)."""
    for cls in SAFE_NEMESES + [KillLeaderBeforeCopy, LeaderFaults, LeaderKillCutOrPause]:
        if cls.name == name:
            return cls()
    if name == "mix":
        return Mix([cls() for cls in SAFE_NEMESES])
    raise KeyError(name)


def heal_everything(ctx: Context) -> list[str]:
    """After the schedule: network healed, paused processes resumed, dead ones restarted.
    Returns what it had to do."""
    done = []
    ctx.network.heal()
    for node in ctx.cluster.nodes:
        process = ctx.cluster.processes.get(node)
        if process is None:
            continue
        if process.alive():
            ctx.cluster.resume(node)  # SIGCONT is harmless on a running process
        else:
            ctx.cluster.restart(node, timeout_s=RESTART_TIMEOUT_S)
            done.append(f"restarted {node}")
    return done


# Errors with which the controller refuses a reassignment before committing anything.
REASSIGNMENT_REFUSALS = frozenset({"INVALID_REPLICA_ASSIGNMENT", "NO_REASSIGNMENT_IN_PROGRESS",
                                   "UNKNOWN_TOPIC_OR_PARTITION"})


class Reassigner:
    """Background nemesis: moves partitions of the workload's topic between brokers during the
    faults (KIP-455 reassignments through AlterPartitionReassignments), now and then cancelling
    one under way.

    Every ``interval_s`` (uniform, seeded) it either cancels a reassignment under way (chance
    ``cancel_p``, when there is one) or starts ``1..partitions_max`` new ones: each picked
    partition gets a random ordered sample of ``replication_factor`` brokers whose set differs
    from the partition's current one (a partition already moving is moved elsewhere: the new
    target replaces the old, from the original replicas). Each tick it also lists the
    reassignments under way and records those it started that are no longer listed as finished.

    History (process ``reassigner``, f ``reassign``, every op with ``seed``): ``action`` start
    (``partition``, ``from`` the replicas seen, ``to``), cancel (``partition``, ``original``: the
    replicas a cancel returns to, as listed just before), finish (``partition``, ``replicas``
    seen then); type ok (the controller accepted it), fail (refused: one of REASSIGNMENT_REFUSALS,
    ``error``) or info (no answer, or another error: it may or may not have happened). It uses
    its own AdminClient, so a request stuck
    behind a fault does not hold up the fault schedule's.
    """

    name = "reassign"

    def __init__(self, interval_s: tuple[float, float] = (1.0, 3.0), cancel_p: float = 0.25,
                 partitions_max: int = 2, request_timeout_ms: int = 5000) -> None:
        self.interval_s = interval_s
        self.cancel_p = cancel_p
        self.partitions_max = partitions_max
        self.request_timeout_ms = request_timeout_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._admin: Any = None
        self._moving: set[int] = set()  # partitions whose start was accepted and not yet seen done
        self.counts = {"start": 0, "cancel": 0, "finish": 0, "fail": 0, "info": 0}

    def start(self, ctx: Context, history: Any, replication_factor: int, seed: int) -> None:
        """Start the background thread (returns at once)."""
        from raftka.client import AdminClient
        if len(ctx.cluster.broker_ids) <= replication_factor:
            raise ValueError(f"reassign needs more brokers than the replication factor {replication_factor}: "
                             f"{ctx.cluster.broker_ids}")
        self._admin = AdminClient(bootstrap_servers=ctx.cluster.bootstrap_servers,
                                  request_timeout_ms=self.request_timeout_ms, **ctx.cluster.client_configs)
        rng = random.Random(seed)
        self._thread = threading.Thread(target=self._run, args=(ctx, history, replication_factor, rng, seed),
                                        name="chaos-reassigner", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop starting anything (what is under way goes on moving) and close the client."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:
                pass

    def _run(self, ctx: Context, history: Any, rf: int, rng: random.Random, seed: int) -> None:
        from raftka.client import TopicPartition

        def record(kind: str, action: str, **fields: Any) -> None:
            history.append("reassigner", kind, "reassign", action=action, seed=seed, **fields)
            self.counts[action if kind == "ok" else kind] += 1
            ctx.say(f"  reassign {action} {kind} {json.dumps(fields)}")

        def outcome(failure: Exception) -> str:
            # Only the controller's own refusals are certain (decided before anything is
            # committed); a timeout, a lost connection or a controller change may or may not
            # have left the change committed.
            return "fail" if getattr(failure, "name", None) in REASSIGNMENT_REFUSALS else "info"

        while not self._stop.wait(rng.uniform(*self.interval_s)):
            try:
                under_way = {tp.partition: r for tp, r in self._admin.list_partition_reassignments().items()
                             if tp.topic == ctx.topic}
                described = self._admin.describe_topics([ctx.topic])
            except Exception:
                continue  # no metadata during this fault: try again next tick
            replicas = {p["partition"]: list(p["replicas"]) for p in (described[0]["partitions"] if described else [])}
            for partition in sorted(self._moving - set(under_way)):
                if partition in replicas:
                    self._moving.discard(partition)
                    record("ok", "finish", partition=partition, replicas=replicas[partition])
            if under_way and rng.random() < self.cancel_p:
                partition = rng.choice(sorted(under_way))
                original = [b for b in under_way[partition].replicas if b not in under_way[partition].adding_replicas]
                try:
                    self._admin.alter_partition_reassignments({TopicPartition(ctx.topic, partition): None})
                    self._moving.discard(partition)
                    record("ok", "cancel", partition=partition, original=original)
                except Exception as failure:
                    record(outcome(failure), "cancel", partition=partition, original=original,
                           error=repr(failure)[:300])
                continue
            if not replicas:
                continue
            chosen = rng.sample(sorted(replicas), rng.randint(1, min(self.partitions_max, len(replicas))))
            for partition in chosen:
                current = replicas[partition]
                target = current
                while set(target) == set(current):
                    target = rng.sample(ctx.cluster.broker_ids, rf)
                try:
                    self._admin.alter_partition_reassignments({TopicPartition(ctx.topic, partition): target})
                    self._moving.add(partition)
                    record("ok", "start", partition=partition, **{"from": current, "to": target})
                except Exception as failure:
                    if outcome(failure) == "info":
                        self._moving.add(partition)  # it may be moving: watch for its end
                    record(outcome(failure), "start", partition=partition, error=repr(failure)[:300],
                           **{"from": current, "to": target})


__all__ = ["Context", "Fault", "Nemesis", "Reassigner", "by_name", "heal_everything", "CLIENT"]
