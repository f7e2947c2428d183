"""A test process for tests/test_server_limits.py: one shared Server (common/server.py) with a
trivial handler, alone in a fresh interpreter, so its RSS is the server's and nothing else's.

Usage: limits_server.py REQUEST_FRAME_TIMEOUT_MS. Prints ``ready PORT QUEUED_MAX_REQUEST_BYTES``,
then every ``REPORT_INTERVAL_S`` a line ``PARTIAL_FRAME_BYTES CONNECTIONS RSS_BYTES``, until its
stdin closes (the parent is gone) or it is killed.
"""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the echo API's declaration
from echo_api import echo_server  # noqa: E402

from raftka.common.server import Request, Response  # noqa: E402

REPORT_INTERVAL_S = 0.05


async def answer(request: Request) -> Response:
    return Response(0, {"i": request.body["i"], "pad": b"x" * request.body["answer_bytes"]})


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def main() -> None:
    server = await echo_server(answer, request_frame_timeout_ms=int(sys.argv[1])).start("127.0.0.1", 0)
    print(f"ready {server.port} {server.queued_max_request_bytes}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = loop.run_in_executor(None, sys.stdin.read)
    while not stdin_closed.done():
        print(server.partial_frame_bytes, server.connection_count, rss_bytes(), flush=True)
        await asyncio.sleep(REPORT_INTERVAL_S)
    await server.close()


if __name__ == "__main__":
    asyncio.run(main())
