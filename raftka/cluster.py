"""The cluster API: start, stop, kill, pause and restart Raftka processes on this machine.

Used by tests, scripts and the chaos harness, so that starting and killing real processes is
written once. Every process is a real subprocess on 127.0.0.1 with ports chosen at run time
(below 32768, outside Linux's ephemeral range, so a port we picked is not taken by an outgoing
connection meanwhile). Every wait has a timeout; ``Cluster.close()`` stops every process it
started, by PID.

    with ControllerCluster.start(tmp_path, voters=3) as cluster:
        leader = cluster.wait_for_leader(timeout_s=15)
        cluster.kill(leader)               # kill -9
        cluster.restart(leader)
"""
from __future__ import annotations

import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

PORT_MIN = 20000
PORT_MAX = 32000  # exclusive; below the ephemeral range (32768+)
PORT_ATTEMPTS_MAX = 500
OUTPUT_LINES_MAX = 10_000  # per process, oldest dropped
STOP_TIMEOUT_S = 10.0

_ports_lock = threading.Lock()
_ports_given: set[int] = set()


def free_ports(count: int, *, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct TCP ports in [PORT_MIN, PORT_MAX) that are free right now on 127.0.0.1.

    Ports handed out earlier in this process are not handed out again, so two clusters in one
    test run do not collide even before their processes bind.
    """
    rng = rng or random.Random()
    ports: list[int] = []
    with _ports_lock:
        for _ in range(PORT_ATTEMPTS_MAX):
            if len(ports) == count:
                break
            port = rng.randrange(PORT_MIN, PORT_MAX)
            if port in _ports_given or port in ports:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            ports.append(port)
        if len(ports) < count:
            raise RuntimeError(f"found only {len(ports)} of {count} free ports after {PORT_ATTEMPTS_MAX} tries")
        _ports_given.update(ports)
    return ports


def wait_until(predicate: Callable[[], Any], timeout_s: float, *, interval_s: float = 0.05,
               what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as error:  # e.g. connection refused while a process starts
            last_error = error
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s} s"
                               + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval_s)


class Process:
    """One subprocess with its stdout+stderr lines collected by a reader thread.

    ``wait_for_line(pred, timeout_s)`` waits for a matching output line; ``kill()`` sends SIGKILL,
    ``pause()``/``resume()`` SIGSTOP/SIGCONT, ``stop()`` SIGTERM then SIGKILL after a timeout.
    """

    def __init__(self, name: str, argv: Sequence[str], *, cwd: str | None = None,
                 env: dict[str, str] | None = None, stdin: bool = False,
                 log_path: str | os.PathLike[str] | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path) if log_path is not None else None
        self._lines: list[str] = []
        self._lines_lock = threading.Condition()
        self._stdout_queue: queue.Queue[str] = queue.Queue(maxsize=OUTPUT_LINES_MAX)
        self.popen = subprocess.Popen(
            self.argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True, bufsize=1,
            start_new_session=True)  # its own process group: a test's Ctrl-C does not hit it twice
        self.pid = self.popen.pid
        self._reader = threading.Thread(target=self._read, name=f"out-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        log_file = open(self.log_path, "a", encoding="utf-8") if self.log_path else None
        try:
            for line in self.popen.stdout:
                line = line.rstrip("\n")
                if log_file:
                    log_file.write(line + "\n")
                    log_file.flush()
                with self._lines_lock:
                    self._lines.append(line)
                    if len(self._lines) > OUTPUT_LINES_MAX:
                        del self._lines[: len(self._lines) - OUTPUT_LINES_MAX]
                    self._lines_lock.notify_all()
                try:
                    self._stdout_queue.put_nowait(line)
                except queue.Full:
                    pass
        finally:
            if log_file:
                log_file.close()
            with self._lines_lock:
                self._lines_lock.notify_all()

    @property
    def lines(self) -> list[str]:
        with self._lines_lock:
            return list(self._lines)

    def output(self, last: int = 40) -> str:
        return "\n".join(self.lines[-last:])

    def wait_for_line(self, predicate: Callable[[str], bool], timeout_s: float, *, start: int = 0) -> str:
        """The first output line (from line number ``start``) matching ``predicate``."""
        deadline = time.monotonic() + timeout_s
        seen = start
        with self._lines_lock:
            while True:
                while seen < len(self._lines):
                    line = self._lines[seen]
                    seen += 1
                    if predicate(line):
                        return line
                if self.popen.poll() is not None and not self._reader.is_alive():
                    raise RuntimeError(f"{self.name} exited with {self.popen.returncode} before the "
                                       f"expected line; last output:\n{self.output()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.name}: expected line not seen within {timeout_s} s; "
                                       f"last output:\n{self.output()}")
                self._lines_lock.wait(min(remaining, 0.2))

    def send_line(self, text: str) -> None:
        assert self.popen.stdin is not None, "started without stdin=True"
        self.popen.stdin.write(text + "\n")
        self.popen.stdin.flush()

    def request_json(self, text: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """Send one line and return the next JSON object line the process prints."""
        start = len(self.lines)
        self.send_line(text)
        line = self.wait_for_line(lambda l: l.startswith("{"), timeout_s, start=start)
        return json.loads(line)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """kill -9 and reap."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.popen.wait(STOP_TIMEOUT_S)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (after SIGCONT, in case it is paused), SIGKILL if it has not exited in time."""
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGCONT)
                os.kill(self.pid, signal.SIGTERM)
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(timeout_s)
            except ProcessLookupError:
                pass
        if self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        return self.popen.returncode


def python_argv(*args: str) -> list[str]:
    """Run with this interpreter (the project's venv), unbuffered."""
    return [sys.executable, "-u", *args]


def project_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child: this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def stop_all(processes: Iterable[Process]) -> None:
    for process in processes:
        try:
            process.stop()
        except Exception:
            pass


# -- controller quorums ----------------------------------------------------------------------

READY_TIMEOUT_S = 60.0  # a cold Python start on a loaded 2-core box can take seconds


@dataclass
class NodeSpec:
    """One `raftka server` process: its id, roles, ports and directory."""

    node_id: int
    roles: tuple[str, ...]
    raft_port: int | None  # controllers only: the port in controller.quorum.voters
    controller_port: int | None  # controllers only: the CONTROLLER:// RPC listener
    broker_port: int | None  # brokers only: the PLAINTEXT:// listener
    data_dir: Path
    extra: dict[str, str] = field(default_factory=dict)
    http_port: int | None = None  # brokers: the HTTP:// side port (/health, /metrics)

    @property
    def config_path(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"


def write_properties(path: Path, values: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# written by raftka.cluster"] + [f"{k}={v}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


class ControllerCluster:
    """A quorum of controller processes (and, later, brokers) started from this process.

    Public: ``start(root, voters=3, configs=None)``, ``nodes``, ``process(node_id)``,
    ``bootstrap_controllers`` ("host:port,..." of the RPC listeners), ``wait_ready(node_id)``,
    ``kill(node_id)`` (-9), ``pause``/``resume`` (SIGSTOP/SIGCONT), ``stop(node_id)``,
    ``restart(node_id)``, ``wait_for_leader(timeout_s)``, ``describe_quorum(node_id)``, ``close()``.
    """

    def __init__(self, root: str | os.PathLike[str], voters: int = 3,
                 configs: dict[str, Any] | None = None, *, secret: str | None = None) -> None:
        assert voters in (1, 3, 5) or voters >= 1, voters
        self.root = Path(root)
        self.configs = dict(configs or {})
        self.secret = secret
        ports = free_ports(2 * voters)
        self.nodes: dict[int, NodeSpec] = {}
        for i in range(voters):
            node_id = i + 1
            self.nodes[node_id] = NodeSpec(node_id, ("controller",), ports[2 * i], ports[2 * i + 1], None,
                                           self.root / f"controller-{node_id}")
        self.processes: dict[int, Process] = {}
        self.started: list[Process] = []  # every process ever started, for teardown

    @classmethod
    def start(cls, root: str | os.PathLike[str], voters: int = 3, configs: dict[str, Any] | None = None,
              *, timeout_s: float = READY_TIMEOUT_S, secret: str | None = None) -> "ControllerCluster":
        cluster = cls(root, voters, configs, secret=secret)
        try:
            for node_id in cluster.nodes:
                cluster.launch(node_id)
            for node_id in cluster.nodes:
                cluster.wait_ready(node_id, timeout_s)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def __enter__(self) -> "ControllerCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def voters_string(self) -> str:
        return ",".join(f"{n.node_id}@127.0.0.1:{n.raft_port}" for n in self.nodes.values()
                        if n.raft_port is not None)

    @property
    def bootstrap_controllers(self) -> str:
        return ",".join(f"127.0.0.1:{n.controller_port}" for n in self.nodes.values()
                        if n.controller_port is not None)

    def controller_address(self, node_id: int) -> tuple[str, int]:
        port = self.nodes[node_id].controller_port
        assert port is not None
        return ("127.0.0.1", port)

    def config_values(self, node_id: int) -> dict[str, Any]:
        spec = self.nodes[node_id]
        listeners = []
        if spec.controller_port is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{spec.controller_port}")
        if spec.broker_port is not None:
            listeners.append(f"PLAINTEXT://127.0.0.1:{spec.broker_port}")
        if spec.http_port is not None:
            listeners.append(f"HTTP://127.0.0.1:{spec.http_port}")
        values: dict[str, Any] = {
            "process.roles": ",".join(spec.roles),
            "node.id": spec.node_id,
            "controller.quorum.voters": self.voters_string,
            "listeners": ",".join(listeners),
            "log.dirs": str(spec.data_dir / "data"),
        }
        if self.secret:
            values["controller.quorum.secret"] = self.secret
        if "broker" in spec.roles:
            values["controller.quorum.bootstrap.servers"] = self.bootstrap_controllers
        values.update(self.configs)
        values.update(spec.extra)
        return values

    def launch(self, node_id: int) -> Process:
        """Write the node's config and start its process (does not wait for readiness)."""
        spec = self.nodes[node_id]
        old = self.processes.get(node_id)
        assert old is None or not old.alive(), f"node {node_id} is still running"
        write_properties(spec.config_path, self.config_values(node_id))
        process = Process(f"node-{node_id}", python_argv("-m", "raftka", "server", "--config", str(spec.config_path)),
                          env=project_env(), log_path=spec.log_path)
        self.processes[node_id] = process
        self.started.append(process)
        return process

    def process(self, node_id: int) -> Process:
        return self.processes[node_id]

    def wait_ready(self, node_id: int, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Wait for the node's ready line ("raftka controller N ready ...")."""
        return self.processes[node_id].wait_for_line(lambda l: " ready " in l and l.startswith("raftka "),
                                                     timeout_s)

    def kill(self, node_id: int) -> None:
        self.processes[node_id].kill()

    def pause(self, node_id: int) -> None:
        self.processes[node_id].pause()

    def resume(self, node_id: int) -> None:
        self.processes[node_id].resume()

    def stop(self, node_id: int) -> int | None:
        return self.processes[node_id].stop()

    def restart(self, node_id: int, timeout_s: float = READY_TIMEOUT_S) -> Process:
        """Stop (if running) and start again on the same ports and directory; waits for ready."""
        process = self.processes.get(node_id)
        if process is not None and process.alive():
            process.stop()
        self.launch(node_id)
        self.wait_ready(node_id, timeout_s)
        return self.processes[node_id]

    def alive(self, node_id: int) -> bool:
        process = self.processes.get(node_id)
        return process is not None and process.alive()

    def describe_quorum(self, node_id: int, timeout_s: float = 5.0) -> dict[str, Any]:
        """Quorum status as seen by one controller (its DescribeQuorum RPC)."""
        from raftka.controller_client import describe_quorum
        host, port = self.controller_address(node_id)
        return describe_quorum(f"{host}:{port}", timeout_s=timeout_s)

    def leader_id(self, among: Iterable[int] | None = None) -> int | None:
        """The controller that says it is the active controller right now, or None."""
        for node_id in among or list(self.nodes):
            if not self.alive(node_id):
                continue
            try:
                status = self.describe_quorum(node_id, timeout_s=2.0)
            except Exception:
                continue
            if status.get("role") == "leader" and status.get("active"):
                return node_id
        return None

    def wait_for_leader(self, timeout_s: float = 30.0, among: Iterable[int] | None = None) -> int:
        nodes = list(among) if among is not None else None
        return wait_until(lambda: self.leader_id(nodes), timeout_s, interval_s=0.05, what="an active controller")

    def close(self) -> None:
        """Stop every process this cluster started (SIGTERM, then SIGKILL), by PID."""
        stop_all(reversed(self.started))


class Cluster(ControllerCluster):
    """Controllers and brokers: ``Cluster.start(root, controllers=3, brokers=3, configs=...)``.

    Controllers get node ids 1..controllers, brokers the ids after them (``broker_ids``). Start
    order: controllers, then brokers; ``start`` returns once every broker printed its ready line
    (registered, unfenced, caught up with the metadata log). ``configs`` go to every process,
    ``broker_configs`` to brokers only. Everything ControllerCluster offers (``kill``, ``pause``,
    ``resume``, ``stop``, ``restart``, ``wait_for_leader``, ``close``) works on any node id.

        with Cluster.start(tmp_path, controllers=3, brokers=3,
                           configs={"default.replication.factor": 3}) as cluster:
            cluster.bootstrap_servers        # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
            cluster.kill(cluster.broker_ids[0])
    """

    def __init__(self, root: str | os.PathLike[str], controllers: int = 3, brokers: int = 3,
                 configs: dict[str, Any] | None = None, *, broker_configs: dict[str, Any] | None = None,
                 secret: str | None = None, combined: bool = False) -> None:
        super().__init__(root, controllers, configs, secret=secret)
        self.controller_ids = list(self.nodes)
        self.broker_ids: list[int] = []
        if combined:  # process.roles=broker,controller: the controllers are brokers too
            for node_id, port in zip(self.controller_ids, free_ports(len(self.controller_ids))):
                spec = self.nodes[node_id]
                spec.roles = ("broker", "controller")
                spec.broker_port = port
                spec.extra.update(broker_configs or {})
                self.broker_ids.append(node_id)
        ports = free_ports(2 * brokers)
        for i in range(brokers):
            node_id = controllers + i + 1
            self.nodes[node_id] = NodeSpec(node_id, ("broker",), None, None, ports[2 * i],
                                           self.root / f"broker-{node_id}", dict(broker_configs or {}),
                                           http_port=ports[2 * i + 1])
            self.broker_ids.append(node_id)

    @classmethod
    def start(cls, root: str | os.PathLike[str], controllers: int = 3, brokers: int = 3,  # type: ignore[override]
              configs: dict[str, Any] | None = None, *, broker_configs: dict[str, Any] | None = None,
              timeout_s: float = READY_TIMEOUT_S, secret: str | None = None, combined: bool = False) -> "Cluster":
        cluster = cls(root, controllers, brokers, configs, broker_configs=broker_configs, secret=secret,
                      combined=combined)
        try:
            for node_id in cluster.controller_ids:
                cluster.launch(node_id)
            for node_id in cluster.controller_ids:
                if node_id not in cluster.broker_ids:
                    cluster.wait_ready(node_id, timeout_s)
            for node_id in cluster.broker_ids:
                if node_id not in cluster.processes:
                    cluster.launch(node_id)
            for node_id in cluster.broker_ids:
                cluster.wait_ready(node_id, timeout_s)
        except BaseException:
            cluster.close()
            raise
        return cluster

    @property
    def bootstrap_servers(self) -> str:
        """"host:port,..." of every broker's PLAINTEXT listener (clients' bootstrap_servers)."""
        return ",".join(f"127.0.0.1:{self.nodes[b].broker_port}" for b in self.broker_ids)

    def broker_address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.nodes[node_id].broker_port}"

    def http_address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.nodes[node_id].http_port}"

    def wait_ready(self, node_id: int, timeout_s: float = READY_TIMEOUT_S) -> str:
        """The node's ready line; a node with the broker role (combined too) is ready when its
        broker is (registered, unfenced, caught up)."""
        if "broker" not in self.nodes[node_id].roles:
            return super().wait_ready(node_id, timeout_s)
        return self.processes[node_id].wait_for_line(lambda l: l.startswith("raftka broker ") and " ready " in l,
                                                     timeout_s)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m raftka.cluster --voters 3 --dir DIR``: start a local controller quorum, print
    its endpoints, and keep it running until Ctrl-C / SIGTERM (then stop every process)."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m raftka.cluster",
                                     description="Start a local controller quorum for trying Raftka out.")
    parser.add_argument("--voters", type=int, default=3, choices=[1, 3, 5])
    parser.add_argument("--brokers", type=int, default=0,
                        help="also start this many brokers (default 0: controllers only)")
    parser.add_argument("--dir", required=True, help="directory for configs, logs and data")
    parser.add_argument("--ready-timeout-s", type=float, default=READY_TIMEOUT_S)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.brokers > 0:
        started: ControllerCluster = Cluster.start(
            args.dir, controllers=args.voters, brokers=args.brokers, timeout_s=args.ready_timeout_s,
            configs={"default.replication.factor": min(3, args.brokers),
                     "min.insync.replicas": min(2, args.brokers)})
    else:
        started = ControllerCluster.start(args.dir, voters=args.voters, timeout_s=args.ready_timeout_s)
    with started as cluster:
        if isinstance(cluster, Cluster):
            print(f"brokers ready: bootstrap servers {cluster.bootstrap_servers}", flush=True)
        leader = cluster.wait_for_leader(timeout_s=args.ready_timeout_s)
        print(f"controller quorum ready: voters {cluster.voters_string}", flush=True)
        print(f"bootstrap controllers (RPC): {cluster.bootstrap_controllers}", flush=True)
        print(f"active controller: {leader}; logs in {args.dir}/controller-N/server.log", flush=True)
        print(f"try: raftka quorum status --bootstrap-controller {cluster.bootstrap_controllers.split(',')[0]}",
              flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
