"""Prometheus text exposition (format 0.0.4) and the HTTP side port every server process serves.

One place writes the text, so brokers and controllers expose alike:

- every family opens with ``# HELP`` and ``# TYPE``, before any of its samples, and appears once;
- metric and label names are checked against Prometheus' grammar, label values escaped
  (backslash, double quote, newline);
- a counter's name ends in ``_total`` (the name samples carry: format 0.0.4, not OpenMetrics);
- ``process_*``: the standard process metrics of Prometheus' client libraries (CPU seconds,
  resident and virtual memory, open and maximum file descriptors, start time), from
  ``/proc/self`` where there is one, else from the ``resource`` module.

    out = Exposition({"node": "3"})
    requests = out.family("raftka_broker_requests_total", "counter", "Requests received, by API.")
    requests.sample(12, api="Produce")
    add_process_metrics(out)
    text = out.render()

``start_http(host, port, metrics=..., health=...)`` serves ``GET /metrics`` (the text above) and
``GET /health`` (a JSON summary, 200 or 503) on aiohttp; broker/http.py and
raft_meta/controller/http.py pass what their process has to say.
"""
from __future__ import annotations

import math
import os
import re
import resource
import time
from typing import Any, Callable, Iterable, Mapping

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
KINDS = ("counter", "gauge", "histogram", "summary", "untyped")
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# Sample names a family of each kind may carry besides its own name.
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
HELP_BYTES_MAX = 1000  # one line each: HELP is documentation, not data


class MetricsFormatError(ValueError):
    """A family or sample that would make the exposition ill-formed (a programmer's error)."""


def escape_label_value(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int | bool) -> str:
    """Go's float syntax as Prometheus reads it; integers stay integers."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def label_text(labels: Mapping[str, Any]) -> str:
    """``{a="x",b="y"}`` (names checked, values escaped), or "" without labels."""
    if not labels:
        return ""
    parts = []
    for name, value in labels.items():
        if not LABEL_NAME.match(name) or name.startswith("__"):
            raise MetricsFormatError(f"label name {name!r} is not a Prometheus label name")
        parts.append(f'{name}="{escape_label_value(value)}"')
    return "{" + ",".join(parts) + "}"


class Family:
    """One metric family: its HELP and TYPE lines, then its samples (in the order added)."""

    def __init__(self, name: str, kind: str, help_text: str, base: Mapping[str, Any]) -> None:
        if not METRIC_NAME.match(name):
            raise MetricsFormatError(f"{name!r} is not a Prometheus metric name")
        if kind not in KINDS:
            raise MetricsFormatError(f"{name}: kind {kind!r} is not one of {', '.join(KINDS)}")
        if kind == "counter" and not name.endswith("_total"):
            raise MetricsFormatError(f"counter {name} must end in _total")
        if not help_text or len(help_text) > HELP_BYTES_MAX:
            raise MetricsFormatError(f"{name}: HELP must be 1 to {HELP_BYTES_MAX} characters")
        self.name = name
        self.kind = kind
        self.lines = [f"# HELP {name} {_escape_help(help_text)}", f"# TYPE {name} {kind}"]
        self._base = base
        self._base_text = label_text(base)[1:-1]  # rendered once: most samples add one label or none

    def sample(self, value: float | int | bool, suffix: str = "", **labels: Any) -> "Family":
        """Add a sample of this family (``suffix``: "_bucket", "_sum", "_count" of a histogram)."""
        if suffix and suffix not in SUFFIXES.get(self.kind, ()):
            raise MetricsFormatError(f"{self.name}: a {self.kind} has no {suffix} samples")
        if labels:
            if any(name in self._base for name in labels):
                raise MetricsFormatError(f"{self.name}: labels {sorted(labels)} repeat one of {sorted(self._base)}")
            extra = label_text(labels)[1:-1]
            text = "{" + (f"{self._base_text},{extra}" if self._base_text else extra) + "}"
        else:
            text = "{" + self._base_text + "}" if self._base_text else ""
        self.lines.append(f"{self.name}{suffix}{text} {format_value(value)}")
        return self

    def samples(self, values: Mapping[Any, float | int], label: str) -> "Family":
        """One sample per entry of ``values`` (by key order), the key as label ``label``."""
        for key, value in sorted(values.items()):
            self.sample(value, **{label: key})
        return self

    def histogram(self, bounds: Iterable[float], counts: Iterable[int], total: float, count: int,
                  **labels: Any) -> "Family":
        """One histogram's samples: ``counts`` per bucket (not cumulative; the last is above the
        highest bound), their sum and count."""
        if self.kind != "histogram":
            raise MetricsFormatError(f"{self.name} is a {self.kind}, not a histogram")
        cumulative = 0
        for bound, n in zip([*bounds, math.inf], counts):
            cumulative += n
            self.sample(cumulative, "_bucket", **labels, le=format_value(float(bound)))
        self.sample(total, "_sum", **labels)
        return self.sample(count, "_count", **labels)


class Exposition:
    """The families of one scrape, rendered in the order they were declared.

    ``base_labels`` go on every sample of the families declared with ``base=True`` (the default);
    ``process_*`` families go without them, as every Prometheus client writes them."""

    def __init__(self, base_labels: Mapping[str, Any] | None = None) -> None:
        self.base_labels = dict(base_labels or {})
        label_text(self.base_labels)  # checks the names now
        self.families: dict[str, Family] = {}

    def family(self, name: str, kind: str, help_text: str, *, base: bool = True) -> Family:
        if name in self.families:
            raise MetricsFormatError(f"family {name} declared twice")
        family = Family(name, kind, help_text, self.base_labels if base else {})
        self.families[name] = family
        return family

    def gauge(self, name: str, help_text: str, value: float | int | bool, **labels: Any) -> Family:
        """A gauge family with one sample."""
        return self.family(name, "gauge", help_text).sample(value, **labels)

    def counter(self, name: str, help_text: str, value: float | int, **labels: Any) -> Family:
        """A counter family with one sample."""
        return self.family(name, "counter", help_text).sample(value, **labels)

    def render(self) -> str:
        return "".join(line + "\n" for family in self.families.values() for line in family.lines)


# -- process metrics ---------------------------------------------------------------------------

_PAGE_BYTES = resource.getpagesize()
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_IMPORTED_AT = time.time()  # the start time where /proc cannot say it


def _boot_time_s() -> float | None:
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


_BOOT_TIME_S = _boot_time_s()


def process_figures() -> dict[str, float]:
    """This process's CPU seconds, memory, descriptors and start time (Prometheus' names)."""
    rlimit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    figures: dict[str, float] = {"process_max_fds": rlimit if rlimit != resource.RLIM_INFINITY else math.inf}
    try:
        with open("/proc/self/stat", "rb") as f:
            # comm (field 2) may hold spaces and parentheses: the fields after it follow the last ")"
            fields = f.read().rsplit(b")", 1)[1].split()
        # fields[0] is field 3 (state): utime 14, stime 15, starttime 22, vsize 23, rss 24
        figures["process_cpu_seconds_total"] = (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
        figures["process_virtual_memory_bytes"] = int(fields[20])
        figures["process_resident_memory_bytes"] = int(fields[21]) * _PAGE_BYTES
        if _BOOT_TIME_S is not None:
            figures["process_start_time_seconds"] = _BOOT_TIME_S + int(fields[19]) / _TICKS_PER_S
        figures["process_open_fds"] = len(os.listdir("/proc/self/fd"))
    except (OSError, IndexError, ValueError):  # no /proc (not Linux): what resource knows
        usage = resource.getrusage(resource.RUSAGE_SELF)
        figures["process_cpu_seconds_total"] = usage.ru_utime + usage.ru_stime
        figures["process_resident_memory_bytes"] = usage.ru_maxrss * 1024  # the peak, Linux's unit
    figures.setdefault("process_start_time_seconds", _IMPORTED_AT)
    return figures


PROCESS_HELP = {
    "process_cpu_seconds_total": ("counter", "Total user and system CPU time spent in seconds."),
    "process_resident_memory_bytes": ("gauge", "Resident memory size in bytes."),
    "process_virtual_memory_bytes": ("gauge", "Virtual memory size in bytes."),
    "process_open_fds": ("gauge", "Number of open file descriptors."),
    "process_max_fds": ("gauge", "Maximum number of open file descriptors."),
    "process_start_time_seconds": ("gauge", "Start time of the process since unix epoch in seconds."),
}


def add_process_metrics(out: Exposition) -> None:
    """The ``process_*`` families (without the base labels, as Prometheus' clients write them)."""
    figures = process_figures()
    for name, (kind, help_text) in PROCESS_HELP.items():
        if name in figures:
            out.family(name, kind, help_text, base=False).sample(figures[name])


# -- the HTTP side port ------------------------------------------------------------------------

async def start_http(host: str, port: int, *, metrics: Callable[[], str],
                     health: Callable[[], tuple[bool, dict]]) -> Any:
    """Serve ``GET /metrics`` (``metrics()``: the exposition text) and ``GET /health``
    (``health()``: (healthy, summary) -> 200 or 503 with the summary as JSON) on host:port.
    Returns the aiohttp runner; ``await runner.cleanup()`` stops it."""
    import json

    from aiohttp import web  # here: the client, which shares this package, never needs aiohttp

    async def get_health(request: web.Request) -> web.Response:
        healthy, summary = health()
        return web.Response(status=200 if healthy else 503, text=json.dumps(summary),
                            content_type="application/json")

    async def get_metrics(request: web.Request) -> web.Response:
        return web.Response(body=metrics().encode(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/health", get_health)
    app.router.add_get("/metrics", get_metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
