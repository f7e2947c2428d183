"""``python -m raftka.bench.profile``: where the produce and consume paths spend their CPU.

Starts a cluster (3 controllers + 3 brokers, RF 3, min.insync.replicas 2, one partition), then
runs ``raftka perf produce --acks all`` and ``raftka perf consume`` as child processes while
py-spy samples the client, the partition leader and one follower (``py-spy record --format raw
--threads --gil``; the processes run unmodified). ``--gil`` keeps only the thread holding the
GIL: the client's caller thread and I/O thread share one GIL, and without it every sample of a
thread waiting for the GIL shows up as work on whatever line it stopped at. The collapsed stacks are summarised per process:
samples (on-CPU only: py-spy leaves idle threads out), share of one core, and the functions with
the most self and inclusive time, as a Markdown report (docs/performance.md quotes it).

py-spy comes with the ``bench`` extra; it needs ptrace rights over the sampled processes (root,
or kernel.yama.ptrace_scope 0).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SAMPLE_RATE_HZ = 200
PYSPY_STOP_TIMEOUT_S = 30.0
MEASURE_TIMEOUT_S = 600.0
# Leaves that are waiting, not working: py-spy's --nonblocking sampling cannot always tell an
# idle thread, so these are counted apart and left out of the percentages.
WAIT_LEAVES = ("EpollSelector.select (", "Condition.wait (", "Event.wait (", "_wait_for_tstate_lock (",
               "Thread.join (", "sleep (")
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::\d+)?\)$")


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise RuntimeError("py-spy is not installed (pip install -e '.[bench]')")
    return found


def _short(frame: str) -> str:
    """'append (/x/y/client/aio/accumulator.py:120)' -> 'append (client/aio/accumulator.py)'."""
    m = FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        parts = Path(path).parts
        for root in ("client", "broker", "storage", "raft_meta", "raftka", "chaos"):
            if root in parts:
                path = "/".join(parts[parts.index(root):])
                break
    return f"{m.group('func')} ({path})"


def summarise(raw: str, top: int = 15) -> dict[str, Any]:
    """Collapsed stacks -> {samples (busy), waiting_samples, threads: {name: samples}, self:
    [(func, pct of busy)], inclusive: [...]}."""
    total = 0
    waiting = 0
    self_counts: collections.Counter[str] = collections.Counter()
    incl_counts: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if frames and frames[0].startswith(("thread ", "process ")):
            # --threads puts 'thread (0x..)' (or with a name) first; --subprocesses 'process ...'
            root = frames[0]
            frames = frames[1:]
            threads[root] += count
        if not frames:
            continue
        names = [_short(f) for f in frames]
        if names[-1].startswith(WAIT_LEAVES):
            waiting += count
            continue
        total += count
        self_counts[names[-1]] += count
        for name in set(names):
            incl_counts[name] += count

    def pct(counter: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(name, 100.0 * n / total) for name, n in counter.most_common(top)] if total else []
    return {"samples": total, "waiting_samples": waiting, "threads": dict(threads.most_common()), "self": pct(self_counts),
            "inclusive": pct(incl_counts)}


class Sampler:
    """``py-spy record`` attached to one PID until ``stop()`` (SIGINT makes it write the file)."""

    def __init__(self, name: str, pid: int, out: Path, rate_hz: int = SAMPLE_RATE_HZ) -> None:
        self.name = name
        self.out = out
        self.started = time.monotonic()
        self.proc = subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--format", "raw", "--threads", "--gil",
                                      "--rate", str(rate_hz), "--nonblocking", "-o", str(out)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)

    def stop(self) -> tuple[str, float]:
        seconds = time.monotonic() - self.started
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(PYSPY_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        text = self.out.read_text(encoding="utf-8") if self.out.exists() else ""
        return text, seconds


def profile_path(name: str, client_argv: list[str], pids: dict[str, int], workdir: Path,
                 rate_hz: int, subprocesses: bool = False) -> dict[str, Any]:
    """Run the client under py-spy (launched by it) while attached samplers watch ``pids``."""
    from raftka.cluster import project_env
    samplers = {role: Sampler(role, pid, workdir / f"{name}-{role}.txt", rate_hz) for role, pid in pids.items()}
    time.sleep(0.5)  # let the samplers attach
    client_out = workdir / f"{name}-client.txt"
    started = time.monotonic()
    run = subprocess.run([py_spy(), "record", "--format", "raw", "--threads", "--gil", "--rate", str(rate_hz),
                          "--nonblocking", *(["--subprocesses"] if subprocesses else []),
                          "-o", str(client_out), "--", *client_argv],
                         capture_output=True, text=True, env=project_env(), timeout=MEASURE_TIMEOUT_S)
    client_seconds = time.monotonic() - started
    result: dict[str, Any] = {"name": name, "client_stdout": run.stdout[-2000:], "processes": {}}
    result["processes"]["client"] = {**summarise(client_out.read_text(encoding="utf-8")
                                                 if client_out.exists() else ""), "seconds": client_seconds}
    for role, sampler in samplers.items():
        text, seconds = sampler.stop()
        result["processes"][role] = {**summarise(text), "seconds": seconds}
    return result


async def raw_load(address: str, topic: str, seconds: float, window: int = 8, records_per_batch: int = 160,
                   record_size: int = 100) -> dict[str, Any]:
    """Pipelined acks=all Produce requests of one pre-encoded ~16 KiB batch each, straight on
    the wire (raftka.common), so the brokers, not a Python producer, are what limits: the way
    to see the brokers' own produce path under load."""
    import asyncio
    from raftka.common import errors
    from raftka.common.records import BatchBuilder
    from raftka.client.aio.protocol import KAFKA_VERSIONS
    from raftka.common.api import ApiKey
    from raftka.common.transport import Connection
    from raftka.bench.client import payload
    builder = BatchBuilder(batch_size=1 << 22)
    value = payload(record_size)
    for _ in range(records_per_batch):
        builder.append(int(time.time() * 1000), None, value)
    batch = builder.build()
    # Kafka's Produce, at the version Raftka's own producer sends.
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    host, _, port = address.rpartition(":")
    conn = await Connection.open(host, int(port), max_in_flight_requests=window,
                                 kafka_versions={ApiKey.PRODUCE: KAFKA_VERSIONS[ApiKey.PRODUCE]})
    sent = 0
    failed = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal sent, failed
        while time.perf_counter() < deadline:
            code, answer = await conn.request(ApiKey.PRODUCE, body)
            ok = code == errors.NONE and answer["responses"][0]["partition_responses"][0]["error_code"] == 0
            sent += ok
            failed += not ok
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(window)))
    elapsed = time.perf_counter() - started
    await conn.close()
    return {"records_per_s": sent * records_per_batch / elapsed, "failed_requests": failed}


def render(results: list[dict[str, Any]], rate_hz: int, env: dict[str, Any]) -> str:
    lines = [f"Profiles taken {env['date']} (load average {env['load']}), py-spy {rate_hz} Hz; % = share of "
             f"that process's busy samples (stacks ending in a wait are left out).", ""]
    for r in results:
        lines.append(f"### {r['name']}")
        lines.append("")
        last = [l for l in r["client_stdout"].splitlines() if l.strip() and not l.startswith("py-spy>")]
        if last:
            lines.append(f"Client said: `{last[-1][:300]}`")
            lines.append("")
        for role, p in r["processes"].items():
            busy = p["samples"] / (rate_hz * p["seconds"]) * 100 if p["seconds"] else 0
            lines.append(f"**{role}**: {p['samples']:,} busy samples over {p['seconds']:.1f} s "
                         f"(~{busy:.0f}% of one core holding the GIL; {p['waiting_samples']:,} more samples "
                         f"waiting in select/wait/sleep, left out)")
            lines.append("")
            lines.append("| self % | function | | inclusive % | function |")
            lines.append("|---:|---|---|---:|---|")
            for i in range(max(len(p["self"]), len(p["inclusive"]))):
                s = p["self"][i] if i < len(p["self"]) else ("", 0.0)
                c = p["inclusive"][i] if i < len(p["inclusive"]) else ("", 0.0)
                lines.append(f"| {s[1]:.1f} | `{s[0]}` | | {c[1]:.1f} | `{c[0]}` |")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m raftka.bench.profile", description=__doc__)
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--record-size", type=int, default=100)
    p.add_argument("--rate-hz", type=int, default=SAMPLE_RATE_HZ)
    p.add_argument("--load-producers", type=int, default=2,
                   help="a third run with this many producer processes, to load the brokers (0: skip)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--out", default=None, help="write the Markdown report here (default: stdout)")
    p.add_argument("--keep", default=None, help="keep the raw collapsed stacks in this directory")
    p.add_argument("--raw-load", default=None, metavar="HOST:PORT",
                   help="internal: be the wire-level load generator for --topic for --seconds")
    p.add_argument("--topic", default="profile")
    p.add_argument("--seconds", type=float, default=8.0)
    args = p.parse_args(argv)
    if args.raw_load:
        import asyncio
        out = asyncio.run(raw_load(args.raw_load, args.topic, args.seconds))
        print(f"wire-level acks=all load (8 in flight, 160 x {100} B batches): "
              f"{out['records_per_s']:,.0f} records/s, {out['failed_requests']} failed requests")
        return 0
    from raftka.cluster import Cluster
    from raftka.bench.client import ensure_topic, _leader_of

    def on_term(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    py = sys.executable
    env = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load": ", ".join(f"{x:.1f}" for x in os.getloadavg())}
    results = []
    with tempfile.TemporaryDirectory(prefix="raftka-profile-") as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        with Cluster.start(Path(tmp) / "cluster", controllers=3, brokers=3,
                           configs={"default.replication.factor": 3, "min.insync.replicas": 2}) as cluster:
            boot = cluster.bootstrap_servers
            topic = "profile"
            ensure_topic(boot, topic, 1, 3, 2)
            leader, replicas, _isr = _leader_of(boot, topic)
            follower = next(r for r in replicas if r != leader)
            pids = {f"leader broker {leader}": cluster.processes[leader].pid,
                    f"follower broker {follower}": cluster.processes[follower].pid}
            perf = [py, "-m", "raftka", "perf"]
            results.append(profile_path(
                "produce, acks=all", perf + ["produce", "--bootstrap-server", boot, "--topic", topic, "--acks", "all",
                                            "--num-records", str(args.records), "--record-size",
                                            str(args.record_size), "--no-progress"], pids, workdir, args.rate_hz))
            if args.load_producers > 0:
                results.append(profile_path(
                    f"produce, acks=all, {args.load_producers} producer processes, batch_size 65536 (brokers under more load)",
                    perf + ["produce", "--bootstrap-server", boot, "--topic", topic, "--acks", "all",
                            "--num-records", str(args.records), "--record-size", str(args.record_size),
                            "--producers", str(args.load_producers), "--no-progress",
                            "--producer-props", "batch_size=65536"], pids, workdir, args.rate_hz, subprocesses=True))
            results.append(profile_path(
                "broker produce path: wire-level acks=all load (no Python producer)",
                [py, "-m", "raftka.bench.profile", "--raw-load", cluster.broker_address(leader), "--topic", topic,
                 "--seconds", "8"], pids, workdir, args.rate_hz))
            results.append(profile_path(
                "consume", perf + ["consume", "--bootstrap-server", boot, "--topic", topic, "--messages",
                                   str(args.records), "--no-progress"], {k: v for k, v in pids.items()
                                                                          if k.startswith("leader")},
                workdir, args.rate_hz))
        text = render(results, args.rate_hz, env)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
