"""A broker's figures, read by /metrics (Prometheus text) and /health."""
from __future__ import annotations

import bisect
from typing import Any

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
from raftka.common.api import API_NAMES
from raftka.storage.file_handles import segment_files


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
        """Prometheus text exposition format."""
        b = self.broker
        node = f'node="{b.broker_id}"'
        partitions = list(b.replicas.partitions.values())
        sessions = b.replicas.fetch_sessions
        files = segment_files()
        lines = [
            "# TYPE raftka_broker_bytes_in_total counter", f"raftka_broker_bytes_in_total{{{node}}} {self.bytes_in}",
            "# TYPE raftka_broker_bytes_out_total counter", f"raftka_broker_bytes_out_total{{{node}}} {self.bytes_out}",
            "# TYPE raftka_broker_replication_bytes_out_total counter",
            f"raftka_broker_replication_bytes_out_total{{{node}}} {self.replication_bytes_out}",
            # Partitions answered to followers: with fetch sessions, only those with news.
            "# TYPE raftka_broker_replication_partitions_out_total counter",
            f"raftka_broker_replication_partitions_out_total{{{node}}} {self.replication_partitions_out}",
            "# TYPE raftka_broker_request_queue_depth gauge",
            f"raftka_broker_request_queue_depth{{{node}}} {b.server.request_queue_depth if b.server else 0}",
            "# TYPE raftka_broker_produce_bytes_in_flight gauge",
            f"raftka_broker_produce_bytes_in_flight{{{node}}} {b.produce_budget.used}",
            "# TYPE raftka_broker_produce_requests_waiting_for_memory gauge",
            f"raftka_broker_produce_requests_waiting_for_memory{{{node}}} {b.produce_budget.waiting}",
            "# TYPE raftka_broker_connections gauge",
            f"raftka_broker_connections{{{node}}} {b.server.connection_count if b.server else 0}",
        ]
        if b.server is not None:  # the listener's connection counters (common/transport.py)
            m = b.server.metrics
            lines += [
                "# TYPE raftka_broker_connections_accepted_total counter",
                f"raftka_broker_connections_accepted_total{{{node}}} {m.connections_accepted}",
                "# TYPE raftka_broker_connections_refused_total counter",  # none could be closed instead
                f'raftka_broker_connections_refused_total{{{node},limit="max.connections"}} {m.connections_refused}',
                f'raftka_broker_connections_refused_total{{{node},limit="max.connections.per.ip"}} '
                f'{m.connections_refused_per_ip}',
                "# TYPE raftka_broker_connections_closed_total counter",
                f'raftka_broker_connections_closed_total{{{node},reason="idle"}} {m.connections_closed_idle}',
                f'raftka_broker_connections_closed_total{{{node},reason="bad_frame"}} {m.connections_closed_bad_frame}',
                f'raftka_broker_connections_closed_total{{{node},reason="unused"}} {m.connections_closed_unused}',
                f'raftka_broker_connections_closed_total{{{node},reason="frame_timeout"}} '
                f'{m.connections_closed_frame_timeout}',
                f'raftka_broker_connections_closed_total{{{node},reason="first_byte_timeout"}} '
                f'{m.connections_closed_first_byte_timeout}',
                # queued.max.request.bytes: what the listener holds of partial frames and of
                # requests being handled
                "# TYPE raftka_broker_partial_frame_bytes gauge",
                f"raftka_broker_partial_frame_bytes{{{node}}} {b.server.partial_frame_bytes}",
                "# TYPE raftka_broker_request_bytes_in_flight gauge",
                f"raftka_broker_request_bytes_in_flight{{{node}}} {b.server.request_bytes_in_flight}",
            ]
        lines += [
            "# TYPE raftka_broker_under_replicated_partitions gauge",
            f"raftka_broker_under_replicated_partitions{{{node}}} {sum(p.under_replicated for p in partitions)}",
            "# TYPE raftka_broker_leader_partitions gauge",
            f"raftka_broker_leader_partitions{{{node}}} {sum(p.is_leader for p in partitions)}",
            "# TYPE raftka_broker_isr_shrinks_total counter",
            f"raftka_broker_isr_shrinks_total{{{node}}} {sum(p.isr_shrinks for p in partitions)}",
            "# TYPE raftka_broker_isr_expands_total counter",
            f"raftka_broker_isr_expands_total{{{node}}} {sum(p.isr_expands for p in partitions)}",
            # Kafka's NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached and
            # IncrementalFetchSessionEvictionsPerSec (as a total).
            "# TYPE raftka_broker_incremental_fetch_sessions gauge",
            f"raftka_broker_incremental_fetch_sessions{{{node}}} {len(sessions) if sessions is not None else 0}",
            "# TYPE raftka_broker_incremental_fetch_partitions_cached gauge",
            f"raftka_broker_incremental_fetch_partitions_cached{{{node}}} "
            f"{sessions.partitions_cached if sessions is not None else 0}",
            "# TYPE raftka_broker_incremental_fetch_session_evictions_total counter",
            f"raftka_broker_incremental_fetch_session_evictions_total{{{node}}} "
            f"{sessions.evictions if sessions is not None else 0}",
            # The process's segment-file descriptor cache (storage/file_handles.py): open now,
            # its bound (log.open.files.max), reopened on use, closed to stay under the bound.
            "# TYPE raftka_broker_segment_files_open gauge",
            f"raftka_broker_segment_files_open{{{node}}} {files.open_count}",
            "# TYPE raftka_broker_segment_files_open_max gauge",
            f"raftka_broker_segment_files_open_max{{{node}}} {files.open_files_max}",
            "# TYPE raftka_broker_segment_file_opens_total counter",
            f"raftka_broker_segment_file_opens_total{{{node}}} {files.opens}",
            "# TYPE raftka_broker_segment_file_evictions_total counter",
            f"raftka_broker_segment_file_evictions_total{{{node}}} {files.evictions}",
            "# TYPE raftka_broker_truncations_total counter",
            f"raftka_broker_truncations_total{{{node}}} {b.replicas.truncations}",
            # Replicas out of service because their log is corrupt (Kafka's OfflineReplicaCount),
            # how many ever went offline, and how many healed (re-replicated, back in the ISR).
            "# TYPE raftka_broker_offline_replicas gauge",
            f"raftka_broker_offline_replicas{{{node}}} {len(b.replicas.offline)}",
            "# TYPE raftka_broker_corrupt_replicas_total counter",
            f"raftka_broker_corrupt_replicas_total{{{node}}} {b.replicas.corrupt_replicas}",
            "# TYPE raftka_broker_healed_replicas_total counter",
            f"raftka_broker_healed_replicas_total{{{node}}} {b.replicas.healed_replicas}",
            "# TYPE raftka_broker_requests_total counter",
        ]
        for key, count in sorted(self.requests.items()):
            lines.append(f'raftka_broker_requests_total{{{node},api="{API_NAMES.get(key, key)}"}} {count}')
        lines.append("# TYPE raftka_broker_request_errors_total counter")
        for key, count in sorted(self.errors.items()):
            lines.append(f'raftka_broker_request_errors_total{{{node},api="{API_NAMES.get(key, key)}"}} {count}')
        lines.append("# TYPE raftka_broker_request_latency_seconds histogram")
        for key, hist in sorted(self.latencies.items()):
            api = f'api="{API_NAMES.get(key, key)}"'
            cumulative = 0
            for bound, count in zip(LATENCY_BUCKETS_S + (float("inf"),), hist.counts):
                cumulative += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f'raftka_broker_request_latency_seconds_bucket{{{node},{api},le="{le}"}} {cumulative}')
            lines.append(f"raftka_broker_request_latency_seconds_sum{{{node},{api}}} {hist.total:.6f}")
            lines.append(f"raftka_broker_request_latency_seconds_count{{{node},{api}}} {hist.count}")
        lines.append("# TYPE raftka_partition_log_end_offset gauge")
        for p in partitions:
            lines.append(f'raftka_partition_log_end_offset{{{node},topic="{p.topic}",partition="{p.index}"}} '
                         f"{p.log.log_end_offset}")
        lines.append("# TYPE raftka_partition_high_watermark gauge")
        for p in partitions:
            lines.append(f'raftka_partition_high_watermark{{{node},topic="{p.topic}",partition="{p.index}"}} '
                         f"{p.log.high_watermark}")
        lines.append("# TYPE raftka_partition_offline gauge")  # 1: this replica is offline (corrupt log)
        offline = b.replicas.offline
        for p in partitions:
            lines.append(f'raftka_partition_offline{{{node},topic="{p.topic}",partition="{p.index}"}} '
                         f"{1 if (p.topic, p.index) in offline else 0}")
        groups = getattr(b, "groups", None)
        if groups is not None:  # consumer groups this broker coordinates: members, lag (broker/group/)
            lines += groups.metric_lines(node)
        return "\n".join(lines) + "\n"
