"""Blocking helpers to talk to controllers from tools, tests and the cluster API."""
from __future__ import annotations

from typing import Any

from raftka.common import errors
from raftka.common.errors import RaftkaError

API_DESCRIBE_QUORUM = 55


def describe_quorum(address: str, *, timeout_s: float = 5.0) -> dict[str, Any]:
    """One controller's DescribeQuorum answer (its own view of the quorum)."""
    from raftka.common.transport import call_sync
    code, body = call_sync(address, API_DESCRIBE_QUORUM, {}, timeout_ms=int(timeout_s * 1000))
    if code != errors.NONE:
        raise errors.error_for(code, (body or {}).get("error_message"))
    return body


def controller_request(bootstrap: str, api_key: int, body: Any, *, timeout_s: float = 10.0,
                       attempts_max: int = 20) -> tuple[int, Any]:
    """Send a request to the active controller, following NOT_CONTROLLER answers.

    ``bootstrap`` is "host:port,..." of controllers' RPC listeners. Returns (error_code, body) of
    the active controller's answer, or of the last answer when every attempt failed.
    """
    import time
    from raftka.common.transport import call_sync
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    deadline = time.monotonic() + timeout_s
    last: tuple[int, Any] = (errors.NOT_CONTROLLER, {"error_message": "no controller answered"})
    target: str | None = None
    for attempt in range(attempts_max):
        address = target or addresses[attempt % len(addresses)]
        target = None
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            break
        try:
            code, out = call_sync(address, api_key, body, timeout_ms=min(remaining_ms, 5000))
        except RaftkaError as error:
            last = (error.code, {"error_message": error.message})
            time.sleep(0.05)
            continue
        if code != errors.NOT_CONTROLLER:
            return code, out
        last = (code, out)
        target = (out or {}).get("controller_endpoint")
        if not target:
            time.sleep(0.1)
    return last
