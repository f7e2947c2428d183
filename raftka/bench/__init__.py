"""Raftka's benchmarks, each a module:

- ``client``: `raftka perf produce|consume|e2e|failover` (the public client against a cluster);
- ``metadata``: `raftka perf metadata` (the controller quorum);
- ``stability``: `raftka perf controller-stability` (leader changes on a busy box, failover under load);
- ``storage``: `raftka perf storage` (the partition log against the raw disk);
- ``peers``, ``report``, ``__main__``: the peer benchmark behind ``scripts/bench.sh``;
- ``profile``: where the produce and consume paths spend their CPU (py-spy).

The peer benchmark (issue #performance): ``python -m raftka.bench`` measures Raftka (3
controllers + 3 brokers, RF 3, min.insync.replicas 2) with the ``raftka perf`` tools, NATS
JetStream (3-node cluster, R1 and R3) and Redis Streams with their own Python clients
(raftka/bench/peers.py), all on 127.0.0.1, each figure several times, and writes the generated
section of BENCHMARKS.md (raftka/bench/report.py): medians, ranges, ratios, targets met or
missed, versions, machine, date and load. ``--security-protocol both`` takes Raftka's figures on a
PLAINTEXT and a SASL_SSL cluster, alternated, and writes BENCHMARKS.md's security section instead
(PLAINTEXT and SASL_SSL side by side, with their ratios).

Every process it starts is stopped by PID when it ends, also on failure or SIGTERM; each
measurement is a child process with a timeout, and the whole run has a time limit.
"""
