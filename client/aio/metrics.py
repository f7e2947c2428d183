"""The client's metrics: windowed stats shaped like Kafka's (and kafka-python's) client metrics.

``metrics()`` on a producer, consumer or admin client returns ``{group: {name: value}}`` as
kafka-python's does, with Kafka's group and metric names (``producer-metrics``:
``record-send-rate``...; ``consumer-fetch-manager-metrics``: ``records-lag-max``...). Each
component (the Cluster, the producer's Sender, the consumer's Fetcher and GroupMember) owns the
sensors of what it does and records into them on the I/O thread; ``metrics()`` reads them there.

A :class:`Sensor` keeps ``metrics_num_samples`` samples of ``metrics_sample_window_ms`` each
(Kafka's ``metrics.num.samples`` = 2 and ``metrics.sample.window.ms`` = 30000), and gives what
Kafka's stats give from them:

- ``total``: every value ever recorded, summed (Kafka's CumulativeSum: ``*-total``);
- ``rate``: the recorded values of the live samples per second (Kafka's Rate: ``*-rate``). As
  in Kafka the elapsed time counts at least ``num_samples - 1`` whole windows, so a fresh
  client's rate starts low rather than spiking;
- ``avg`` and ``max`` over the live samples (``*-avg``, ``*-max``), NaN when nothing was
  recorded in them, as Kafka reports.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Final, NamedTuple

# kafka-python's (and Kafka's) metric window settings, shared by the three clients' DEFAULTS.
METRICS_DEFAULTS: Final[dict[str, Any]] = {
    "metrics_num_samples": 2,
    "metrics_sample_window_ms": 30_000,
}
NUM_SAMPLES_MAX: Final = 100  # samples kept per sensor: memory per sensor is bounded


class MetricConfig(NamedTuple):
    """How many samples a sensor keeps, and how long each covers."""

    num_samples: int = 2
    window_s: float = 30.0


def metric_config(config: dict[str, Any]) -> MetricConfig:
    """The MetricConfig of a client's config (``metrics_*`` keys, defaults when absent);
    ConfigError names a bad value."""
    from raftka.common.errors import ConfigError  # the one error table
    samples = config.get("metrics_num_samples", METRICS_DEFAULTS["metrics_num_samples"])
    window = config.get("metrics_sample_window_ms", METRICS_DEFAULTS["metrics_sample_window_ms"])
    if not isinstance(samples, int) or isinstance(samples, bool) or not 1 <= samples <= NUM_SAMPLES_MAX:
        raise ConfigError("metrics_num_samples", f"must be an int from 1 to {NUM_SAMPLES_MAX}, got {samples!r}")
    if not isinstance(window, (int, float)) or isinstance(window, bool) or window <= 0:
        raise ConfigError("metrics_sample_window_ms", f"must be > 0, got {window!r}")
    return MetricConfig(samples, window / 1000)


class Sensor:
    """Values recorded over time: total, rate, avg and max (module doc). Not thread-safe: one
    event loop records and reads it."""

    __slots__ = ("_config", "_samples", "_total", "_count", "_clock")

    def __init__(self, config: MetricConfig = MetricConfig(), clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._samples: list[list[float]] = []  # [start, count, sum, max], oldest first
        self._total = 0.0
        self._count = 0

    def record(self, value: float = 1.0) -> None:
        """Record one value (a count of records, a size, a latency in ms)."""
        now = self._clock()
        samples = self._samples
        if not samples or now - samples[-1][0] >= self._config.window_s:
            samples.append([now, 0, 0.0, -math.inf])
            if len(samples) > self._config.num_samples:
                del samples[0]
        sample = samples[-1]
        sample[1] += 1
        sample[2] += value
        if value > sample[3]:
            sample[3] = value
        self._total += value
        self._count += 1

    def _live(self, now: float) -> list[list[float]]:
        horizon = now - self._config.num_samples * self._config.window_s
        return [s for s in self._samples if s[0] + self._config.window_s > horizon]

    @property
    def total(self) -> float:
        return self._total

    @property
    def count(self) -> int:
        """How many values were ever recorded (the ``*-total`` of events whose values are times)."""
        return self._count

    @property
    def rate(self) -> float:
        """Recorded values per second, over the live samples (module doc)."""
        return self._per_second(2)

    @property
    def count_rate(self) -> float:
        """Recordings per second, over the live samples (the ``*-rate`` of timed events)."""
        return self._per_second(1)

    def _per_second(self, field: int) -> float:
        now = self._clock()
        live = self._live(now)
        if not live:
            return 0.0
        window = self._config.window_s
        elapsed = now - live[0][0]
        full_windows = int(elapsed // window)
        if full_windows < self._config.num_samples - 1:
            elapsed += (self._config.num_samples - 1 - full_windows) * window
        return sum(s[field] for s in live) / elapsed if elapsed > 0 else 0.0

    @property
    def avg(self) -> float:
        live = self._live(self._clock())
        count = sum(s[1] for s in live)
        return sum(s[2] for s in live) / count if count else math.nan

    @property
    def max(self) -> float:
        live = self._live(self._clock())
        return max((s[3] for s in live if s[1]), default=math.nan)


def sensor_metrics(name: str, sensor: Sensor, *stats: str) -> dict[str, float]:
    """``{name-stat: value}`` for stats among total, rate, avg, max (Kafka's suffixes)."""
    return {f"{name}-{stat}": float(getattr(sensor, stat)) for stat in stats}


def event_metrics(name: str, sensor: Sensor) -> dict[str, float]:
    """``{name-total, name-rate}`` counting the recordings of a timed sensor (Kafka's
    WindowedCount): how many heartbeats, commits, joins."""
    return {f"{name}-total": float(sensor.count), f"{name}-rate": sensor.count_rate}
