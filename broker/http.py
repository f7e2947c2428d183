"""The broker's HTTP side port (``listeners=...,HTTP://host:port``), served by common/metrics.py.

GET /health   200 when ready (registered, unfenced, caught up with the metadata log, every
              partition it follows is in the ISR, and no replica offline), else 503; JSON body
              with each flag ("live" is true whenever the process answers) and
              ``offline_replicas``: each replica whose log is corrupt (file, byte position,
              offset, cause) and what is being done about it (broker/replica_manager.py).
GET /metrics  Prometheus text (broker/metrics.py).
"""
from __future__ import annotations

from typing import Any

from raftka.common import metrics


async def start_http(broker: Any, host: str, port: int) -> Any:
    """Serve /health and /metrics for ``broker`` on host:port; returns the runner to clean up."""
    def health() -> tuple[bool, dict]:
        replicas_caught_up = broker.replicas.is_caught_up()
        offline = [o.describe(tp) for tp, o in sorted(broker.replicas.offline.items())]
        summary = {"node_id": broker.broker_id, "live": True, "registered": broker.registered,
                   "fenced": broker.fenced, "metadata_caught_up": broker.caught_up,
                   "replicas_in_sync": replicas_caught_up,
                   "metadata_offset": broker.metadata.offset if broker.metadata else -1,
                   "storage_error": broker.storage_error,
                   "offline_replicas": offline,
                   "ready": broker.ready and replicas_caught_up and not offline}
        return summary["ready"], summary

    return await metrics.start_http(host, port, metrics=broker.metrics.render, health=health)
