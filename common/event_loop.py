"""The event loop Raftka's servers and the blocking client's I/O thread run on.

uvloop (libuv under asyncio's API) where it is installed, else asyncio's own loop. Every broker
request is a few turns of the loop, and on a 2-core box the loop's own Python code (the selector,
handles, callbacks) was a tenth of a broker's CPU: uvloop moved acks=all produce by ~10-20% and
end-to-end latency by ~20% in the same run (BENCHMARKS.md). Code written against the asyncio API
runs unchanged on both; the asyncio client (``raftka.client.aio``) runs on whichever loop its
caller chose.

``RAFTKA_EVENT_LOOP=asyncio`` forces asyncio's loop (to compare, or to rule the loop out when
debugging); ``uvloop`` requires uvloop and fails at start-up without it.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Coroutine, TypeVar

from raftka.common.errors import ConfigError

T = TypeVar("T")

EVENT_LOOP_ENV = "RAFTKA_EVENT_LOOP"
EVENT_LOOPS = ("uvloop", "asyncio")


def event_loop_name() -> str:
    """The loop this process uses: ``uvloop`` or ``asyncio``."""
    wanted = os.environ.get(EVENT_LOOP_ENV, "").strip().lower()
    if wanted and wanted not in EVENT_LOOPS:
        raise ConfigError(EVENT_LOOP_ENV, f"{wanted!r} is not one of {', '.join(EVENT_LOOPS)}")
    if wanted == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if wanted == "uvloop":
            raise ConfigError(EVENT_LOOP_ENV, "uvloop is asked for but not installed "
                                              "(pip install uvloop)") from None
        return "asyncio"
    return "uvloop"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """A function making a new loop of the kind :func:`event_loop_name` names."""
    if event_loop_name() == "uvloop":
        import uvloop
        return uvloop.new_event_loop
    return asyncio.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop of the kind this process uses (not set as the thread's current loop)."""
    return loop_factory()()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on this process's loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
