"""A broker's figures, read by /metrics (Prometheus text through common/metrics.py) and /health."""
from __future__ import annotations

import bisect
from typing import Any

from raftka.common.api import API_NAMES
from raftka.common.metrics import (Exposition, MetricsFormatError, add_process_metrics, escape_label_value)
from raftka.storage.file_handles import segment_files

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Cumulative latency buckets (Prometheus histogram)."""
    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        """Count one sample of ``seconds``."""
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.total += seconds
        self.count += 1


class BrokerMetrics:
    """Counters the broker keeps for /metrics; gauges are read from the broker at render time."""
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.bytes_in = 0
        self.bytes_out = 0
        self.replication_bytes_out = 0
        self.replication_partitions_out = 0  # partition answers in Fetch answers to followers
        # topic -> bytes, added once per topic of a Produce or a consumer's Fetch (broker/server.py)
        self.topic_bytes_in: dict[str, int] = {}
        self.topic_bytes_out: dict[str, int] = {}
        self.requests: dict[int, int] = {}
        self.errors: dict[int, int] = {}
        self.latencies: dict[int, Histogram] = {}

    def request(self, api_key: int) -> None:
        """Count a request of ``api_key``."""
        self.requests[api_key] = self.requests.get(api_key, 0) + 1

    def error(self, api_key: int) -> None:
        """Count a request of ``api_key`` answered with an error."""
        self.errors[api_key] = self.errors.get(api_key, 0) + 1

    def latency(self, api_key: int, seconds: float) -> None:
        """Record how long a request of ``api_key`` took."""
        self.latencies.setdefault(api_key, Histogram()).observe(seconds)

    def render(self) -> str:
        """Prometheus text exposition (common/metrics.py), every sample labelled ``node``."""
        b = self.broker
        out = Exposition({"node": b.broker_id})
        partitions = list(b.replicas.partitions.values())
        sessions = b.replicas.fetch_sessions
        files = segment_files()
        server = b.server
        out.counter("raftka_broker_bytes_in_total", "Bytes of record batches produced to this broker's leaders "
                    "(Kafka's BytesInPerSec).", self.bytes_in)
        out.counter("raftka_broker_bytes_out_total", "Bytes of record batches fetched by consumers "
                    "(Kafka's BytesOutPerSec).", self.bytes_out)
        out.counter("raftka_broker_replication_bytes_out_total", "Bytes of record batches fetched by followers "
                    "(Kafka's ReplicationBytesOutPerSec).", self.replication_bytes_out)
        # Partitions answered to followers: with fetch sessions, only those with news.
        out.counter("raftka_broker_replication_partitions_out_total",
                    "Partitions in Fetch answers to followers (with fetch sessions, only those with news).",
                    self.replication_partitions_out)
        self._topic_bytes(out)
        out.gauge("raftka_broker_request_queue_depth", "Requests received and not yet answered.",
                  server.request_queue_depth if server else 0)
        out.gauge("raftka_broker_produce_bytes_in_flight",
                  "Produce payload bytes appended or waiting for acks=all or for memory.", b.produce_budget.used)
        out.gauge("raftka_broker_produce_requests_waiting_for_memory",
                  "Produce requests waiting for the produce memory budget.", b.produce_budget.waiting)
        out.gauge("raftka_broker_connections", "Open client connections on the counted listener.",
                  server.connection_count if server else 0)
        if server is not None:  # the listener's connection counters (common/transport.py)
            m = server.metrics
            out.counter("raftka_broker_connections_accepted_total", "Connections accepted.", m.connections_accepted)
            # none could be closed instead
            (out.family("raftka_broker_connections_refused_total", "counter",
                        "Connections refused at a connection limit, by limit.")
             .sample(m.connections_refused, limit="max.connections")
             .sample(m.connections_refused_per_ip, limit="max.connections.per.ip"))
            closed = out.family("raftka_broker_connections_closed_total", "counter",
                                "Connections closed by the broker, by reason (unused: to make room for a new one).")
            for reason, count in (("idle", m.connections_closed_idle), ("bad_frame", m.connections_closed_bad_frame),
                                  ("unused", m.connections_closed_unused),
                                  ("frame_timeout", m.connections_closed_frame_timeout),
                                  ("first_byte_timeout", m.connections_closed_first_byte_timeout)):
                closed.sample(count, reason=reason)
            # queued.max.request.bytes: what the listener holds of partial frames and of requests
            # being handled
            out.gauge("raftka_broker_partial_frame_bytes", "Bytes of request frames partly received.",
                      server.partial_frame_bytes)
            out.gauge("raftka_broker_request_bytes_in_flight", "Bytes of requests being handled.",
                      server.request_bytes_in_flight)
        under_replicated = under_min_isr = at_min_isr = leaders = 0
        for p in partitions:
            if p.is_leader:
                leaders += 1
                isr = len(p.isr)
                under_replicated += isr < len(p.replicas)
                under_min_isr += isr < p.min_insync_replicas
                at_min_isr += isr == p.min_insync_replicas
        out.gauge("raftka_broker_under_replicated_partitions", "Partitions this broker leads whose ISR is smaller "
                  "than their replica set (Kafka's UnderReplicatedPartitions).", under_replicated)
        out.gauge("raftka_broker_under_min_isr_partitions", "Partitions this broker leads whose ISR is smaller than "
                  "min.insync.replicas: acks=all produce fails (Kafka's UnderMinIsrPartitionCount).", under_min_isr)
        out.gauge("raftka_broker_at_min_isr_partitions", "Partitions this broker leads whose ISR is exactly "
                  "min.insync.replicas: one more loss stops acks=all (Kafka's AtMinIsrPartitionCount).", at_min_isr)
        out.gauge("raftka_broker_offline_partitions", "Partitions without a leader in this broker's metadata image, "
                  "cluster-wide: every broker reports the same (Kafka's OfflinePartitionsCount).",
                  sum(1 for t in b.replicas.view.topics.values() for p in t.partitions if p.leader < 0))
        out.gauge("raftka_broker_leader_partitions", "Partitions this broker leads (Kafka's LeaderCount).", leaders)
        out.counter("raftka_broker_isr_shrinks_total", "ISR shrinks proposed by this broker's leaders.",
                    sum(p.isr_shrinks for p in partitions))
        out.counter("raftka_broker_isr_expands_total", "ISR expansions proposed by this broker's leaders.",
                    sum(p.isr_expands for p in partitions))
        # Kafka's NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached and
        # IncrementalFetchSessionEvictionsPerSec (as a total).
        out.gauge("raftka_broker_incremental_fetch_sessions", "Incremental fetch sessions (KIP-227) held.",
                  len(sessions) if sessions is not None else 0)
        out.gauge("raftka_broker_incremental_fetch_partitions_cached", "Partitions held by incremental fetch sessions.",
                  sessions.partitions_cached if sessions is not None else 0)
        out.counter("raftka_broker_incremental_fetch_session_evictions_total",
                    "Incremental fetch sessions evicted to make room.",
                    sessions.evictions if sessions is not None else 0)
        # The process's segment-file descriptor cache (storage/file_handles.py): open now, its
        # bound (log.open.files.max), reopened on use, closed to stay under the bound.
        out.gauge("raftka_broker_segment_files_open", "Segment files open now.", files.open_count)
        out.gauge("raftka_broker_segment_files_open_max", "The bound on open segment files (log.open.files.max).",
                  files.open_files_max)
        out.counter("raftka_broker_segment_file_opens_total", "Segment files opened (again) on use.", files.opens)
        out.counter("raftka_broker_segment_file_evictions_total", "Segment files closed to stay under the bound.",
                    files.evictions)
        out.counter("raftka_broker_truncations_total", "Follower log truncations (diverging leader epoch).",
                    b.replicas.truncations)
        # Replicas out of service because their log is corrupt (Kafka's OfflineReplicaCount), how
        # many ever went offline, and how many healed (re-replicated, back in the ISR).
        out.gauge("raftka_broker_offline_replicas", "Replicas out of service because their log is corrupt "
                  "(Kafka's OfflineReplicaCount).", len(b.replicas.offline))
        out.counter("raftka_broker_corrupt_replicas_total", "Replicas taken offline for a corrupt log.",
                    b.replicas.corrupt_replicas)
        out.counter("raftka_broker_healed_replicas_total", "Corrupt replicas re-replicated and back in the ISR.",
                    b.replicas.healed_replicas)
        # The replication throttle (broker/quota.py; Kafka's LeaderReplication / FollowerReplication
        # byte-rate, as totals) and how often it held a partition back.
        for side, quota in (("leader", b.replicas.leader_quota), ("follower", b.replicas.follower_quota)):
            out.counter(f"raftka_broker_{side}_replication_throttled_bytes_total",
                        f"Bytes of throttled replicas this broker {'sent as leader' if side == 'leader' else 'fetched as follower'} "
                        f"({side}.replication.throttled.rate applies).", quota.bytes_total)
            out.counter(f"raftka_broker_{side}_replication_held_back_total",
                        f"Times the {side} throttle held a throttled partition back for a round.", quota.held_back_total)
        cleaner = b.logs.cleaner
        if cleaner is not None:  # log.cleaner.enable (storage/log_cleaner.py)
            out.counter("raftka_broker_log_cleanings_total", "Log cleanings finished (compacted topics).",
                        cleaner.cleanings)
            out.counter("raftka_broker_log_cleanings_aborted_total",
                        "Log cleanings given up because retention, truncation or deletion changed the log.",
                        cleaner.aborted)
            out.counter("raftka_broker_log_cleaner_failures_total",
                        "Log cleanings that failed (a disk error, a corrupt batch): the log sits out a while.",
                        cleaner.failures)
        requests = out.family("raftka_broker_requests_total", "counter", "Requests received, by API.")
        for key, count in sorted(self.requests.items()):
            requests.sample(count, api=API_NAMES.get(key, key))
        errors = out.family("raftka_broker_request_errors_total", "counter", "Requests answered with an error, by API.")
        for key, count in sorted(self.errors.items()):
            errors.sample(count, api=API_NAMES.get(key, key))
        latency = out.family("raftka_broker_request_latency_seconds", "histogram",
                             "Time from a request's arrival to its answer, by API.")
        for key, hist in sorted(self.latencies.items()):
            latency.histogram(LATENCY_BUCKETS_S, hist.counts, hist.total, hist.count, api=API_NAMES.get(key, key))
        log_end = out.family("raftka_partition_log_end_offset", "gauge", "Log end offset of each replica.")
        high_watermark = out.family("raftka_partition_high_watermark", "gauge", "High watermark of each replica.")
        offline_flag = out.family("raftka_partition_offline", "gauge",
                                  "1 while this replica is offline (corrupt log), else 0.")
        offline = b.replicas.offline
        for p in partitions:
            log_end.sample(p.log.log_end_offset, topic=p.topic, partition=p.index)
        for p in partitions:
            high_watermark.sample(p.log.high_watermark, topic=p.topic, partition=p.index)
        for p in partitions:
            offline_flag.sample(1 if (p.topic, p.index) in offline else 0, topic=p.topic, partition=p.index)
        groups = getattr(b, "groups", None)
        if groups is not None:  # consumer groups this broker coordinates: members, lag (broker/group/)
            add_lines(out, groups.metric_lines(f'node="{escape_label_value(b.broker_id)}"'), GROUP_HELP)
        add_process_metrics(out)
        return out.render()

    def _topic_bytes(self, out: Exposition) -> None:
        """Per topic bytes in and out (Kafka's BytesInPerSec/BytesOutPerSec with a topic tag, as
        totals); a deleted topic's series go (as Kafka removes its topic metrics)."""
        topics = self.broker.replicas.view.topics
        for counts in (self.topic_bytes_in, self.topic_bytes_out):
            for gone in [t for t in counts if t not in topics]:
                del counts[gone]
        out.family("raftka_broker_topic_bytes_in_total", "counter",
                   "Bytes of record batches produced to this broker's leaders, by topic.").samples(
            self.topic_bytes_in, "topic")
        out.family("raftka_broker_topic_bytes_out_total", "counter",
                   "Bytes of record batches fetched by consumers from this broker, by topic.").samples(
            self.topic_bytes_out, "topic")


# The coordinator's families (broker/group/service.py writes their lines): their HELP text.
GROUP_HELP = {
    "raftka_coordinator_groups": "Consumer groups this broker coordinates.",
    "raftka_coordinator_rebalances_total": "Rebalances this coordinator ran.",
    "raftka_coordinator_expired_members_total": "Group members removed after their session timed out.",
    "raftka_coordinator_offset_commits_total": "Offset commits written.",
    "raftka_coordinator_partitions_loading": "__consumer_offsets partitions being loaded.",
    "raftka_group_members": "Members of each group, by state.",
    "raftka_group_generation": "Generation of each group.",
    "raftka_group_lag": "Consumer lag (high watermark - committed offset) per group and partition.",
    "raftka_group_lag_sum": "Consumer lag summed over a group's partitions (Kafka's records-lag, per group).",
}


def add_lines(out: Exposition, lines: list[str], helps: dict[str, str]) -> None:
    """Families written as text elsewhere ("# TYPE name kind" then samples), each given its HELP
    from ``helps`` (a family missing there gets a plain one rather than failing the scrape); a
    sample outside its family is a bug there."""
    family = None
    for line in lines:
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            family = out.family(name, kind, helps.get(name) or f"{name} (no description yet).")
        elif family is None or line.split("{", 1)[0].split(" ", 1)[0] != family.name:
            raise MetricsFormatError(f"sample outside its family: {line!r}")
        else:
            family.lines.append(line)
