"""Optional HTTP listener (``listeners=...,HTTP://host:port``): /health and /metrics.

GET /health   200 with a JSON summary when this controller knows a leader, else 503.
GET /metrics  Prometheus text format: term, commit index, metadata offset, active flag, leader
              id, brokers fenced and unfenced (plus one series per fenced broker), each voter's
              lag (as the active controller sees it), requests and errors per API key.
"""
from __future__ import annotations

import json
from typing import Any

from aiohttp import web


async def start_http(service: Any, host: str, port: int) -> web.AppRunner:
    app = web.Application()

    async def health(request: web.Request) -> web.Response:
        status = service.quorum_status()
        summary = {k: status[k] for k in ("node_id", "role", "active", "leader_id", "term", "commit_index",
                                          "metadata_offset", "has_quorum")}
        return web.Response(status=200 if status["leader_id"] >= 0 else 503,
                            text=json.dumps(summary), content_type="application/json")

    async def metrics(request: web.Request) -> web.Response:
        status = service.quorum_status()
        node = status["node_id"]
        lines = [
            "# TYPE raftka_controller_term gauge", f'raftka_controller_term{{node="{node}"}} {status["term"]}',
            "# TYPE raftka_controller_commit_index gauge",
            f'raftka_controller_commit_index{{node="{node}"}} {status["commit_index"]}',
            "# TYPE raftka_controller_metadata_offset gauge",
            f'raftka_controller_metadata_offset{{node="{node}"}} {status["metadata_offset"]}',
            "# TYPE raftka_controller_active gauge",
            f'raftka_controller_active{{node="{node}"}} {1 if status["active"] else 0}',
            "# TYPE raftka_controller_leader_id gauge",
            f'raftka_controller_leader_id{{node="{node}"}} {status["leader_id"]}',
        ]
        image = getattr(getattr(service.state, "metadata", None), "image", None)
        if image is not None:  # this controller's applied image (-1 leader: none known)
            fenced = sum(1 for b in image.brokers.values() if b.fenced)
            lines += ["# TYPE raftka_controller_brokers gauge",
                      f'raftka_controller_brokers{{node="{node}",state="fenced"}} {fenced}',
                      f'raftka_controller_brokers{{node="{node}",state="unfenced"}} {len(image.brokers) - fenced}',
                      "# TYPE raftka_controller_fenced_broker gauge"]
            lines += [f'raftka_controller_fenced_broker{{node="{node}",broker="{b}"}} 1'
                      for b, reg in sorted(image.brokers.items()) if reg.fenced]
        lines.append("# TYPE raftka_controller_voter_lag gauge")
        for voter in status["voters"]:
            if voter["lag"] is not None:
                lines.append(f'raftka_controller_voter_lag{{node="{node}",voter="{voter["node_id"]}"}} {voter["lag"]}')
        lines.append("# TYPE raftka_controller_requests_total counter")
        for api_key, count in sorted(service.request_counts.items()):
            lines.append(f'raftka_controller_requests_total{{node="{node}",api_key="{api_key}"}} {count}')
        lines.append("# TYPE raftka_controller_request_errors_total counter")
        for api_key, count in sorted(service.error_counts.items()):
            lines.append(f'raftka_controller_request_errors_total{{node="{node}",api_key="{api_key}"}} {count}')
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner
