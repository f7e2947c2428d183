"""Optional HTTP listener (``listeners=...,HTTP://host:port``): /health and /metrics, served by
common/metrics.py.

GET /health   200 with a JSON summary when this controller knows a leader, else 503.
GET /metrics  Prometheus text, every sample labelled ``node``: term, commit index, metadata
              offset, active flag, leader id, leader changes seen, brokers fenced and unfenced
              (plus one series per fenced broker), topics, partitions and offline partitions as
              this controller's metadata image has them, each voter's lag (as the active
              controller sees it), requests and errors per API key, and the process metrics.
"""
from __future__ import annotations

from typing import Any

from raftka.common import metrics
from raftka.common.metrics import Exposition, add_process_metrics


def render(service: Any) -> str:
    """The controller's exposition (every controller, active or not, says what it knows)."""
    status = service.quorum_status()
    out = Exposition({"node": status["node_id"]})
    out.gauge("raftka_controller_term", "The Raft term this controller is in.", status["term"])
    out.gauge("raftka_controller_commit_index", "The Raft commit index this controller knows.",
              status["commit_index"])
    out.gauge("raftka_controller_metadata_offset", "Offset of the last metadata record this controller applied "
              "(Kafka's LastAppliedRecordOffset).", status["metadata_offset"])
    out.gauge("raftka_controller_active", "1 on the active controller, else 0 (Kafka's ActiveControllerCount).",
              1 if status["active"] else 0)
    out.gauge("raftka_controller_leader_id", "The Raft leader this controller knows, -1: none.", status["leader_id"])
    out.counter("raftka_controller_leader_changes_total", "New Raft leaders (or terms) this controller has seen "
                "(Kafka's NewActiveControllersCount).", getattr(service.raft, "leader_changes", 0))
    image = getattr(getattr(service.state, "metadata", None), "image", None)
    if image is not None:  # this controller's applied image
        fenced = sum(1 for b in image.brokers.values() if b.fenced)
        (out.family("raftka_controller_brokers", "gauge", "Registered brokers, by state "
                    "(Kafka's FencedBrokerCount and ActiveBrokerCount).")
         .sample(fenced, state="fenced").sample(len(image.brokers) - fenced, state="unfenced"))
        fenced_broker = out.family("raftka_controller_fenced_broker", "gauge", "1 for each fenced broker.")
        for b, reg in sorted(image.brokers.items()):
            if reg.fenced:
                fenced_broker.sample(1, broker=b)
        partitions = offline = 0
        for _, _, partition in image.partitions():
            partitions += 1
            offline += partition.is_offline
        out.gauge("raftka_controller_topics", "Topics in the metadata image (Kafka's GlobalTopicCount).",
                  len(image.topics))
        out.gauge("raftka_controller_partitions", "Partitions in the metadata image (Kafka's GlobalPartitionCount).",
                  partitions)
        out.gauge("raftka_controller_offline_partitions", "Partitions without a leader in the metadata image "
                  "(Kafka's OfflinePartitionsCount).", offline)
    voter_lag = out.family("raftka_controller_voter_lag", "gauge",
                           "Records each voter is behind the leader's log end (on the active controller).")
    for voter in status["voters"]:
        if voter["lag"] is not None:
            voter_lag.sample(voter["lag"], voter=voter["node_id"])
    out.family("raftka_controller_requests_total", "counter", "Requests received, by API key.").samples(
        service.request_counts, "api_key")
    out.family("raftka_controller_request_errors_total", "counter",
               "Requests answered with an error, by API key.").samples(service.error_counts, "api_key")
    add_process_metrics(out)
    return out.render()


async def start_http(service: Any, host: str, port: int) -> Any:
    """Serve /health and /metrics for ``service`` on host:port; returns the runner to clean up."""
    def health() -> tuple[bool, dict]:
        status = service.quorum_status()
        summary = {k: status[k] for k in ("node_id", "role", "active", "leader_id", "term", "commit_index",
                                          "metadata_offset", "has_quorum")}
        return status["leader_id"] >= 0, summary

    return await metrics.start_http(host, port, metrics=lambda: render(service), health=health)
