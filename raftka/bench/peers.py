"""The peers of the benchmark: NATS JetStream (3-node cluster) and Redis Streams (one node), and
confluent-kafka (librdkafka) as a second client of Raftka's own cluster.

Servers are Debian's ``nats-server`` and ``redis-server`` binaries, started here on 127.0.0.1
with ports chosen at run time and stopped by PID (``raftka.cluster.Process``). Drivers are the
peers' own Python clients, each used the fastest documented way:

- NATS: ``nats-py``; publish with acknowledgements = ``js.publish_async`` with a window of
  ``publish_async_max_pending`` outstanding acks, then ``publish_async_completed()``; consume =
  a pull subscription fetching batches (``fetch(batch=1000)``) on an ephemeral consumer with
  ``AckPolicy.NONE`` (like a Kafka consumer that commits nothing); sequential latency = one
  ``await js.publish`` at a time. Every run uses a fresh stream name (reusing a deleted stream's
  name lost acknowledged messages on a restarted replica: shared/NOTES.md).
- Redis: ``redis-py`` with ``hiredis``; ``XADD`` pipelined (non-transactional pipelines of
  1,000), ``XREAD COUNT 1000``; sequential latency = one ``XADD`` round trip at a time. No
  persistence (``save ""``, ``appendonly no``): the in-memory ceiling.

- confluent-kafka against Raftka: librdkafka's producer (idempotent, acks=all, linger.ms 5,
  ``produce`` + ``poll(0)``, retried on a full local queue, then ``flush``) and consumer
  (``consume(num_messages=1000)`` from the earliest offset, no commits). librdkafka's C core is not
  the bottleneck a Python client is: its rate shows what the brokers take. ``--command-config``
  (Kafka's client properties) logs it in to a secure cluster: :func:`librdkafka_security` turns
  the Java names into librdkafka's (``sasl.username``/``sasl.password``, ``ssl.ca.location``).

Each driver runs in its own process (``python -m raftka.bench.peers FIGURE ...``) and prints one
JSON object, so a hung client is killed by the benchmark's timeout like any other process.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 30.0
JS_READY_TIMEOUT_S = 60.0  # JetStream meta leader elected, stream creatable
PUBLISH_WINDOW = 4000  # nats-py's default publish_async_max_pending
BATCH = 1000  # pipeline depth (Redis), fetch/XREAD batch (both)
SEQUENTIAL_SAMPLES = 2000


def version_of(binary: str) -> str:
    """``nats-server --version`` / ``redis-server --version``, first line, or 'missing'."""
    path = shutil.which(binary)
    if not path:
        return "missing"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        first = (out.stdout or out.stderr).strip().splitlines()[0]
        # "Redis server v=7.0.15 sha=... malloc=..." -> "Redis server v=7.0.15"
        return " ".join(w for w in first.split() if "=" not in w or w.startswith("v="))
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def package_version(name: str) -> str:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001 - a missing optional package
        return "missing"


class NatsCluster:
    """Three ``nats-server -js`` processes in one cluster on 127.0.0.1 (file storage)."""

    def __init__(self, root: Path, nodes: int = 3) -> None:
        from raftka.cluster import free_ports
        self.root = Path(root)
        self.nodes = nodes
        ports = free_ports(2 * nodes)
        self.client_ports = ports[:nodes]
        self.route_ports = ports[nodes:]
        self.processes: dict[int, Any] = {}
        self.started: list[Any] = []

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    def _config(self, i: int) -> Path:
        store = self.root / f"n{i}"
        store.mkdir(parents=True, exist_ok=True)
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for j, p in enumerate(self.route_ports) if j != i)
        text = (f'server_name: n{i}\nlisten: 127.0.0.1:{self.client_ports[i]}\n'
                f'jetstream {{ store_dir: "{store}" }}\n'
                f'cluster {{ name: bench, listen: 127.0.0.1:{self.route_ports[i]}, routes: [{routes}] }}\n')
        path = self.root / f"n{i}.conf"
        path.write_text(text, encoding="utf-8")
        return path

    def launch(self, i: int) -> None:
        from raftka.cluster import Process
        process = Process(f"nats-{i}", [shutil.which("nats-server") or "nats-server", "-c", str(self._config(i))],
                          log_path=self.root / f"n{i}.log")
        self.processes[i] = process
        self.started.append(process)

    def start(self) -> "NatsCluster":
        try:
            for i in range(self.nodes):
                self.launch(i)
            for i in range(self.nodes):
                self.processes[i].wait_for_line(lambda l: "Server is ready" in l, READY_TIMEOUT_S)
            asyncio.run(_wait_jetstream(self.urls))
        except BaseException:
            self.close()
            raise
        return self

    def kill(self, i: int) -> None:
        self.processes[i].kill()

    def restart(self, i: int) -> None:
        self.launch(i)
        self.processes[i].wait_for_line(lambda l: "Server is ready" in l, READY_TIMEOUT_S)

    def index_of(self, server_name: str) -> int:
        return int(server_name.lstrip("n"))

    def close(self) -> None:
        from raftka.cluster import stop_all
        stop_all(reversed(self.started))

    def __enter__(self) -> "NatsCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


async def _wait_jetstream(urls: list[str]) -> None:
    import nats
    deadline = time.monotonic() + JS_READY_TIMEOUT_S
    nc = await nats.connect(servers=urls, connect_timeout=5)
    try:
        js = nc.jetstream()
        while True:
            try:  # a stream can be created only once the JetStream meta group has a leader
                await js.add_stream(name="READY_PROBE", subjects=["ready.probe"], num_replicas=3)
                await js.delete_stream("READY_PROBE")
                return
            except Exception:  # noqa: BLE001 - not ready yet
                if time.monotonic() > deadline:
                    raise TimeoutError(f"JetStream not ready within {JS_READY_TIMEOUT_S} s")
                await asyncio.sleep(0.5)
    finally:
        await nc.close()


class RedisServer:
    """One ``redis-server`` on 127.0.0.1 without persistence."""

    def __init__(self, root: Path) -> None:
        from raftka.cluster import free_ports
        self.root = Path(root)
        self.port = free_ports(1)[0]
        self.process: Any = None

    def start(self) -> "RedisServer":
        from raftka.cluster import Process
        self.root.mkdir(parents=True, exist_ok=True)
        self.process = Process("redis", [shutil.which("redis-server") or "redis-server", "--port", str(self.port),
                                         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                         "--dir", str(self.root), "--daemonize", "no"],
                               log_path=self.root / "redis.log")
        try:
            self.process.wait_for_line(lambda l: "Ready to accept connections" in l, READY_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> "RedisServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- NATS drivers (each in its own process) -------------------------------------------------

async def nats_publish(urls: list[str], stream: str, replicas: int, records: int, size: int,
                       window: int = PUBLISH_WINDOW) -> dict[str, Any]:
    """Create ``stream`` (file storage, ``replicas``) and publish ``records`` with acks."""
    import nats
    from raftka.bench.client import payload
    nc = await nats.connect(servers=urls)
    try:
        js = nc.jetstream(publish_async_max_pending=window)
        subject = f"{stream.lower()}.data"
        await js.add_stream(name=stream, subjects=[subject], num_replicas=replicas)
        value = payload(size)
        await js.publish(subject, value)  # warm-up (stream leader, connection)
        futures = []
        started = time.perf_counter()
        for _ in range(records):
            futures.append(await js.publish_async(subject, value))
        await js.publish_async_completed()
        elapsed = time.perf_counter() - started
        failed = sum(1 for f in futures if f.cancelled() or f.exception() is not None)
        return {"records": records, "seconds": elapsed, "records_per_s": records / elapsed,
                "failed": failed, "stream": stream, "subject": subject}
    finally:
        await nc.close()


async def nats_consume(urls: list[str], stream: str, records: int, batch: int = BATCH) -> dict[str, Any]:
    """Read ``records`` (plus the warm-up message) from the start of ``stream`` with a pull
    subscription fetching ``batch`` at a time, no acks."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    nc = await nats.connect(servers=urls)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        total = info.state.messages
        subject = info.config.subjects[0]
        sub = await js.pull_subscribe(subject, stream=stream, config=ConsumerConfig(
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL))
        count = 0
        started = time.perf_counter()
        while count < total:
            msgs = await sub.fetch(batch=batch, timeout=5)
            count += len(msgs)
        elapsed = time.perf_counter() - started
        return {"records": count, "seconds": elapsed, "records_per_s": count / elapsed}
    finally:
        await nc.close()


async def nats_sequential(urls: list[str], stream: str, replicas: int, samples: int, size: int) -> dict[str, Any]:
    """One acknowledged publish at a time: latency percentiles (ms)."""
    import nats
    from raftka.bench.client import payload, percentiles
    nc = await nats.connect(servers=urls)
    try:
        js = nc.jetstream()
        subject = f"{stream.lower()}.data"
        await js.add_stream(name=stream, subjects=[subject], num_replicas=replicas)
        value = payload(size)
        for _ in range(50):
            await js.publish(subject, value)
        out = []
        for _ in range(samples):
            t0 = time.perf_counter()
            await js.publish(subject, value)
            out.append((time.perf_counter() - t0) * 1000)
        return {"latency_ms": percentiles(out)}
    finally:
        await nc.close()


_NATS_ERRORS: dict[str, int] = {}


async def _count_error(error: Exception) -> None:
    """nats-py error callback for the failover rounds: connection errors there are expected."""
    _NATS_ERRORS[type(error).__name__] = _NATS_ERRORS.get(type(error).__name__, 0) + 1


async def nats_failover(cluster: NatsCluster, kills: int, rate: float, size: int, settle_s: float) -> dict[str, Any]:
    """kill -9 the R3 stream's leader under acknowledged publishing, ``kills`` times (a fresh
    stream each time, the killed server restarted after); the longest time without an
    acknowledgement, and acknowledged messages missing afterwards (read back by stream
    sequence, with retries: unreadable and wrong are counted apart). Runs in the benchmark's
    process (it kills servers)."""
    import nats
    import statistics
    from raftka.bench.client import SEQ, acks_flowing, payload
    rounds: list[dict[str, Any]] = []
    padding = payload(size - SEQ.size)
    for round_ in range(kills):
        stream = f"FAILOVER{round_}_{os.getpid()}"
        subject = f"failover{round_}.data"
        # The kill drops this connection on purpose: count the resets instead of letting
        # nats-py's default error callback print a traceback for each.
        nc = await nats.connect(servers=cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.1,
                                error_cb=_count_error)
        js = nc.jetstream(timeout=2)
        await js.add_stream(name=stream, subjects=[subject], num_replicas=3)
        acks: list[tuple[float, int, int]] = []
        stop = asyncio.Event()

        async def load() -> None:
            seq = 0
            started = time.perf_counter()
            while not stop.is_set():
                try:
                    ack = await js.publish(subject, SEQ.pack(seq) + padding, timeout=1)
                    acks.append((time.monotonic(), seq, ack.seq))
                except Exception:  # noqa: BLE001 - no ack: the stall goes on
                    await asyncio.sleep(0.01)
                seq += 1
                delay = started + seq / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
        task = asyncio.create_task(load())
        await asyncio.sleep(settle_s)
        info = await js.stream_info(stream)
        leader = cluster.index_of(info.cluster.leader)
        before = len(acks)
        killed_at = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(None, cluster.kill, leader)
        deadline = time.monotonic() + 60
        # as raftka perf failover: the in-flight tail right after the kill is not recovery
        while not acks_flowing(acks, killed_at) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.0)
        stop.set()
        await task
        times = [a[0] for a in acks]
        # the gaps that end after the kill (the one spanning the kill included)
        gaps = [b - a for a, b in zip(times, times[1:]) if b > killed_at]
        stall = max(gaps) if gaps else time.monotonic() - killed_at
        await asyncio.get_running_loop().run_in_executor(None, cluster.restart, leader)
        wrong = unreadable = 0
        step = max(1, len(acks) // 2000)  # a sample: get_msg is one request each
        for _t, seq, stream_seq in acks[::step]:
            for attempt in range(5):
                try:
                    msg = await js.get_msg(stream, stream_seq)
                    wrong += SEQ.unpack_from(msg.data)[0] != seq
                    break
                except Exception:  # noqa: BLE001 - retried, then counted unreadable
                    if attempt == 4:
                        unreadable += 1
                    await asyncio.sleep(0.2)
        rounds.append({"leader": info.cluster.leader, "stall_s": round(stall, 3), "acknowledged": len(acks),
                       "acked_before_kill": before, "checked": len(acks[::step]), "wrong": wrong,
                       "unreadable": unreadable})
        try:
            await js.delete_stream(stream)
        except Exception:  # noqa: BLE001
            pass
        await nc.close()
    stalls = [r["stall_s"] for r in rounds]
    return {"kills": kills, "stalls_s": stalls, "rounds": rounds,
            "stall_s": {"median": statistics.median(stalls), "max": max(stalls), "min": min(stalls)},
            "acknowledged": sum(r["acknowledged"] for r in rounds),
            "checked": sum(r["checked"] for r in rounds), "wrong": sum(r["wrong"] for r in rounds),
            "unreadable": sum(r["unreadable"] for r in rounds)}


# -- confluent-kafka (librdkafka) drivers, against Raftka ---------------------------------------

LIBRDKAFKA_QUEUE_FULL_WAIT_S = 0.05  # poll() while librdkafka's local queue is full
LIBRDKAFKA_IDLE_TIMEOUT_S = 30.0  # no record consumed for this long: the run fails


def librdkafka_security(properties: dict[str, str]) -> dict[str, str]:
    """Kafka's client properties (a ``client.properties`` file) as librdkafka configs: the Java
    names librdkafka spells differently are translated, the others pass as they are (librdkafka
    refuses a name it does not know, so nothing is silently dropped)."""
    from raftka.common.errors import ConfigError
    from raftka.common.sasl import parse_jaas_config
    out: dict[str, str] = {}
    for name, value in properties.items():
        if name == "bootstrap.servers":
            continue  # --bootstrap-server says where
        if name in ("ssl.truststore.type", "ssl.keystore.type"):
            if value.upper() != "PEM":
                raise ConfigError(name, f"only PEM files are read, got {value!r}")
        elif name == "sasl.jaas.config":
            options = parse_jaas_config(value, name)
            out["sasl.username"], out["sasl.password"] = options.get("username", ""), options.get("password", "")
        elif name == "ssl.truststore.location":
            out["ssl.ca.location"] = value
        elif name == "ssl.keystore.location":  # PEM: the chain and the private key in one file
            out["ssl.certificate.location"] = out["ssl.key.location"] = value
        elif name == "ssl.endpoint.identification.algorithm":
            out[name] = value or "none"  # Kafka's empty value turns the check off; librdkafka says none
        else:
            out[name] = value
    return out


def _read_properties(path: str | None) -> dict[str, str]:
    if not path:
        return {}
    from raftka.common.server_config import parse_properties
    with open(path, encoding="utf-8") as file:
        return parse_properties(file.read())


def _protocol(command_config: str | None) -> dict[str, Any]:
    """What a result records of the login: the protocol and mechanism, never the credentials."""
    properties = _read_properties(command_config)
    return {"security_protocol": properties.get("security.protocol", "PLAINTEXT"),
            "sasl_mechanism": properties.get("sasl.mechanism")}


def librdkafka_produce(bootstrap: str, topic: str, records: int, size: int,
                       command_config: str | None = None) -> dict[str, Any]:
    """Produce ``records`` values with acks=all through librdkafka; every delivery checked.
    ``command_config``: a Kafka client properties file (a secure cluster's login)."""
    from confluent_kafka import Producer
    from raftka.bench.client import ensure_topic, payload, properties_configs
    admin = properties_configs(command_config, "admin") if command_config else {}
    ensure_topic(bootstrap, topic, 1, 3, 2, admin)  # as `raftka perf produce` makes its topic
    value = payload(size)
    failed: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(str(error))
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "client.id": "raftka-bench-librdkafka",
                         **librdkafka_security(_read_properties(command_config))})
    producer.produce(topic, value, on_delivery=delivered)  # metadata and producer id first
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(LIBRDKAFKA_QUEUE_FULL_WAIT_S)
        producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    if left or failed:
        raise RuntimeError(f"{left} records undelivered, {len(failed)} failed (first: {failed[:1]})")
    return {"records": records, "seconds": elapsed, "records_per_s": records / elapsed,
            "confluent_kafka": package_version("confluent-kafka"), **_protocol(command_config)}


def librdkafka_consume(bootstrap: str, topic: str, records: int, command_config: str | None = None) -> dict[str, Any]:
    """Read ``records`` from the start of ``topic`` through librdkafka (no commits)."""
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **librdkafka_security(_read_properties(command_config))})
    consumer.subscribe([topic])
    count = 0
    started = None
    idle_since = time.monotonic()
    try:
        while count < records:
            batch = consumer.consume(num_messages=BATCH, timeout=1.0)
            got = sum(1 for m in batch if m.error() is None)
            if got:
                if started is None:  # from the first record: the group join is not the read rate
                    started = time.perf_counter()
                count += got
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > LIBRDKAFKA_IDLE_TIMEOUT_S:
                raise RuntimeError(f"nothing consumed for {LIBRDKAFKA_IDLE_TIMEOUT_S:.0f} s at {count} records")
    finally:
        consumer.close()
    elapsed = time.perf_counter() - (started or time.perf_counter())
    return {"records": count, "seconds": elapsed, "records_per_s": count / elapsed if elapsed else 0.0,
            **_protocol(command_config)}


# -- Redis drivers --------------------------------------------------------------------------

def redis_xadd(port: int, key: str, records: int, size: int, batch: int = BATCH) -> dict[str, Any]:
    """XADD ``records`` values, pipelined ``batch`` at a time (each pipeline waits for its replies)."""
    import redis
    from raftka.bench.client import payload
    r = redis.Redis(host="127.0.0.1", port=port)
    value = payload(size)
    r.xadd(key, {"v": value})
    started = time.perf_counter()
    sent = 0
    while sent < records:
        pipe = r.pipeline(transaction=False)
        n = min(batch, records - sent)
        for _ in range(n):
            pipe.xadd(key, {"v": value})
        pipe.execute()
        sent += n
    elapsed = time.perf_counter() - started
    r.close()
    return {"records": records, "seconds": elapsed, "records_per_s": records / elapsed,
            "hiredis": package_version("hiredis")}


def redis_xread(port: int, key: str, records: int, batch: int = BATCH) -> dict[str, Any]:
    """XREAD COUNT ``batch`` from the start of ``key`` until every entry is read."""
    import redis
    r = redis.Redis(host="127.0.0.1", port=port)
    total = r.xlen(key)
    count = 0
    last = "0-0"
    started = time.perf_counter()
    while count < total:
        out = r.xread({key: last}, count=batch)
        entries = out[0][1]
        count += len(entries)
        last = entries[-1][0]
    elapsed = time.perf_counter() - started
    r.close()
    return {"records": count, "seconds": elapsed, "records_per_s": count / elapsed}


def redis_sequential(port: int, key: str, samples: int, size: int) -> dict[str, Any]:
    import redis
    from raftka.bench.client import payload, percentiles
    r = redis.Redis(host="127.0.0.1", port=port)
    value = payload(size)
    for _ in range(50):
        r.xadd(key, {"v": value})
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        r.xadd(key, {"v": value})
        out.append((time.perf_counter() - t0) * 1000)
    r.close()
    return {"latency_ms": percentiles(out)}


def main(argv: list[str] | None = None) -> int:
    """``python -m raftka.bench.peers FIGURE ...``: run one peer measurement, print JSON."""
    parser = argparse.ArgumentParser(prog="python -m raftka.bench.peers")
    parser.add_argument("figure", choices=["nats-publish", "nats-consume", "nats-sequential",
                                           "redis-xadd", "redis-xread", "redis-sequential",
                                           "librdkafka-produce", "librdkafka-consume"])
    parser.add_argument("--bootstrap-server", default="", help="librdkafka: Raftka's brokers")
    parser.add_argument("--command-config", default=None, metavar="FILE",
                        help="librdkafka: Kafka client properties (a secure cluster's login)")
    parser.add_argument("--urls", default="", help="NATS: comma-separated server URLs")
    parser.add_argument("--port", type=int, default=0, help="Redis: port on 127.0.0.1")
    parser.add_argument("--stream", default="bench", help="NATS stream / Redis key / Kafka topic")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--samples", type=int, default=SEQUENTIAL_SAMPLES)
    args = parser.parse_args(argv)
    urls = [u for u in args.urls.split(",") if u]
    if args.figure == "nats-publish":
        out = asyncio.run(nats_publish(urls, args.stream, args.replicas, args.records, args.record_size))
    elif args.figure == "nats-consume":
        out = asyncio.run(nats_consume(urls, args.stream, args.records))
    elif args.figure == "nats-sequential":
        out = asyncio.run(nats_sequential(urls, args.stream, args.replicas, args.samples, args.record_size))
    elif args.figure == "librdkafka-produce":
        out = librdkafka_produce(args.bootstrap_server, args.stream, args.records, args.record_size,
                                 args.command_config)
    elif args.figure == "librdkafka-consume":
        out = librdkafka_consume(args.bootstrap_server, args.stream, args.records, args.command_config)
    elif args.figure == "redis-xadd":
        out = redis_xadd(args.port, args.stream, args.records, args.record_size)
    elif args.figure == "redis-xread":
        out = redis_xread(args.port, args.stream, args.records)
    else:
        out = redis_sequential(args.port, args.stream, args.samples, args.record_size)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
