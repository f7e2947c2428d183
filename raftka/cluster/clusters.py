"""The local cluster: controller quorums and brokers as real processes on this machine.

Used by tests, scripts, the `raftka cluster` command, the chaos harness and Spark tests, so that
starting and killing real processes is written once. Every node is a `raftka server` process on
127.0.0.1 (a :class:`~raftka.cluster.process.Process` with the "log" sink), with ports chosen
at run time or consecutive from a base port (:class:`~raftka.cluster.ports.PortPlan`). Each node
runs in its own session and logs to ``<dir>/<node>/server.log``; the cluster keeps its layout
and PIDs in ``<dir>/cluster.json`` so a later process can attach to it (``Cluster.open``).
Every wait has a timeout; ``close()`` stops every process this object started, by PID.

    with ControllerCluster.start(tmp_path, voters=3) as cluster:
        leader = cluster.wait_for_leader(timeout_s=15)
        cluster.kill(leader)               # kill -9
        cluster.restart(leader)

    cluster, created = Cluster.up(".raftka", controllers=3, brokers=3)   # survives this process
    Cluster.open(".raftka").down()
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from raftka.cluster.errors import ClusterError, NoClusterError, PortInUseError
from raftka.cluster.ports import PortPlan, port_is_free
from raftka.cluster.secure import LISTENER as SECURE_LISTENER, SecureKit
from raftka.cluster.process import (LOG, READY_TIMEOUT_S, STOP_TIMEOUT_S, Process, project_env, python_argv,
                                    stop_together, wait_until)
from raftka.cluster.state import (LOCK_FILE, META_PROPERTIES, SECRET_FILE, STATE_FILE, STATE_VERSION,
                                  new_cluster_id, new_secret, read_properties, state_lock, write_atomic,
                                  write_properties)
from raftka.common.meta_properties import BOOTSTRAP_FILE, ScramSpecError, parse_add_scram, write_bootstrap

PROGRESS_EVERY_S = 5.0  # long waits say they are still waiting this often
DEFAULT_DIR = ".raftka"  # where `raftka cluster` and the console tools look by default
DEFAULT_BASE_PORT = 9092  # `raftka cluster up`: the first broker listens here, as Kafka's does

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
    http_port: int | None = None  # brokers and a Cluster's controllers: the HTTP:// side port (/health, /metrics)

    @property
    def config_path(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def name(self) -> str:
        """"controller-1", "broker-4", "combined-1": also its directory's name."""
        if self.roles == ("controller",):
            return f"controller-{self.node_id}"
        if self.roles == ("broker",):
            return f"broker-{self.node_id}"
        return f"combined-{self.node_id}"

    def ports(self) -> list[tuple[int, str]]:
        """(port, what listens there) for each port this node binds."""
        named = [(self.raft_port, "Raft"), (self.controller_port, "CONTROLLER listener"),
                 (self.broker_port, "PLAINTEXT listener"), (self.http_port, "HTTP listener")]
        return [(port, f"{self.name}'s {what}") for port, what in named if port is not None]

    def to_state(self, root: Path) -> dict[str, Any]:
        data_dir = self.data_dir
        try:
            data_dir = data_dir.relative_to(root)
        except ValueError:
            pass
        return {"node_id": self.node_id, "roles": list(self.roles), "raft_port": self.raft_port,
                "controller_port": self.controller_port, "broker_port": self.broker_port,
                "http_port": self.http_port, "data_dir": str(data_dir), "extra": dict(self.extra)}

    @classmethod
    def from_state(cls, state: dict[str, Any], root: Path) -> "NodeSpec":
        return cls(int(state["node_id"]), tuple(state["roles"]), state["raft_port"], state["controller_port"],
                   state["broker_port"], root / state["data_dir"], dict(state.get("extra") or {}),
                   http_port=state.get("http_port"))




class ControllerCluster:
    """A quorum of controller processes (and, in :class:`Cluster`, brokers).

    Public: ``start(root, voters=3, configs=None)``, ``nodes``, ``process(node_id)``,
    ``bootstrap_controllers`` ("host:port,..." of the RPC listeners), ``wait_ready(node_id)``,
    ``kill(node_id)`` (-9), ``pause``/``resume`` (SIGSTOP/SIGCONT), ``stop(node_id)``,
    ``restart(node_id)``, ``wait_for_leader(timeout_s)``, ``describe_quorum(node_id)``, ``close()``.

    Every node logs to ``<root>/<node dir>/server.log`` and runs in its own session; the cluster
    writes ``<root>/cluster.json`` (ports, configs, PIDs, cluster id) after every launch, so
    ``Cluster.open(root)`` in another process can attach to it. Subclasses (the chaos harness)
    may override ``config_values(node_id)`` and ``launch(node_id)``.
    """

    def __init__(self, root: str | os.PathLike[str], voters: int = 3,
                 configs: dict[str, Any] | None = None, *, secret: str | None = None,
                 base_port: int | None = None, cluster_id: str | None = None,
                 port_plan: PortPlan | None = None, add_scram: Iterable[str] = (), secure: bool = False) -> None:
        assert voters >= 1, voters
        self.root = Path(root).resolve()  # absolute: configs and PIDs' command lines name it
        # secure: every listener SASL_SSL, ACLs on, an admin super user (secure.py)
        self.security: SecureKit | None = SecureKit.create(self.root) if secure else None
        # Kafka's --add-scram values, salted now and written into each controller's bootstrap
        # file at format time; kept in memory only (never in cluster.json).
        self.bootstrap_scram = parse_scram_users([*(self.security.add_scram() if self.security else ()),
                                                  *add_scram])
        self.configs = dict(configs or {})
        # Every cluster has a secret: the Raft port refuses to run without one (it unpickles).
        self.secret: str | None = secret or new_secret()
        self.cluster_id = cluster_id or new_cluster_id()
        plan = port_plan or PortPlan(base_port)
        self.base_port = plan.base_port
        ports = plan.take(2 * voters)
        self.nodes: dict[int, NodeSpec] = {}
        for i in range(voters):
            node_id = i + 1
            self.nodes[node_id] = NodeSpec(node_id, ("controller",), ports[2 * i], ports[2 * i + 1], None,
                                           self.root / f"controller-{node_id}")
        self.processes: dict[int, Process] = {}
        self.started: list[Process] = []  # every process ever started by this object, for close()

    @classmethod
    def start(cls, root: str | os.PathLike[str], voters: int = 3, configs: dict[str, Any] | None = None,
              *, timeout_s: float = READY_TIMEOUT_S, secret: str | None = None,
              base_port: int | None = None) -> "ControllerCluster":
        cluster = cls(root, voters, configs, secret=secret, base_port=base_port)
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
        """The node's server.properties (override to change how nodes are configured)."""
        spec = self.nodes[node_id]
        listeners = []
        if spec.controller_port is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{spec.controller_port}")
        if spec.broker_port is not None:
            listeners.append(f"{self.client_listener}://127.0.0.1:{spec.broker_port}")
        if spec.http_port is not None:
            listeners.append(f"HTTP://127.0.0.1:{spec.http_port}")
        values: dict[str, Any] = {
            "process.roles": ",".join(spec.roles),
            "node.id": spec.node_id,
            "controller.quorum.voters": self.voters_string,
            "listeners": ",".join(listeners),
            "log.dirs": str(spec.data_dir / "data"),
        }
        if "controller" in spec.roles:
            values["controller.quorum.secret.file"] = str(self.secret_path)  # not the secret itself
        if "broker" in spec.roles:
            values["controller.quorum.bootstrap.servers"] = self.bootstrap_controllers
        if self.security is not None:
            values.update(self.security.node_configs(spec.roles))
        values.update(self.configs)
        values.update(spec.extra)
        return values

    def log_dirs(self, node_id: int) -> list[Path]:
        """The node's log.dirs as its config names them."""
        value = str(self.config_values(node_id)["log.dirs"])
        return [Path(d.strip()) for d in value.split(",") if d.strip()]

    def format_storage(self, node_id: int) -> None:
        """Kafka's ``kafka-storage format``: write meta.properties (cluster.id, node.id) into each
        of the node's log dirs, and a controller's bootstrap file (``add_scram``) into its first.
        Idempotent; a log dir formatted for another cluster or node is refused (ClusterError), so
        two clusters never mix data."""
        for index, log_dir in enumerate(self.log_dirs(node_id)):
            meta = log_dir / META_PROPERTIES
            if meta.exists():
                found = read_properties(meta)
                if found.get("cluster.id") != self.cluster_id or found.get("node.id") != str(node_id):
                    raise ClusterError(
                        f"{log_dir} belongs to cluster {found.get('cluster.id')} node {found.get('node.id')}, "
                        f"not cluster {self.cluster_id} node {node_id}; use an empty directory")
                continue
            log_dir.mkdir(parents=True, exist_ok=True)
            if index == 0 and "controller" in self.nodes[node_id].roles and self.bootstrap_scram:
                write_bootstrap(log_dir / BOOTSTRAP_FILE, self.bootstrap_scram)  # before meta: a retry rewrites it
            write_atomic(meta, f"# written by raftka.cluster (format)\nversion=1\n"
                                f"cluster.id={self.cluster_id}\nnode.id={node_id}\n")

    def check_ports(self, node_id: int) -> None:
        """PortInUseError when another process listens on one of the node's ports."""
        for port, what in self.nodes[node_id].ports():
            if not port_is_free(port):
                raise PortInUseError(port, what)

    def launch(self, node_id: int) -> Process:
        """Format the node's storage, write its config and start its process (does not wait for
        readiness). Records the PID in the state file."""
        spec = self.nodes[node_id]
        old = self.processes.get(node_id)
        if old is not None and old.alive():
            raise ClusterError(f"{spec.name} is still running (pid {old.pid})")
        self.check_ports(node_id)
        self.write_secret()
        write_properties(spec.config_path, self.config_values(node_id))
        self.format_storage(node_id)
        config = str(spec.config_path)
        # The "log" sink: the node outlives this process (`raftka cluster up` exits).
        process = Process(spec.name, python_argv("-m", "raftka", "server", "--config", config), sink=LOG,
                          log_path=spec.log_path, marker=config, env=project_env())
        self.processes[node_id] = process
        self.started.append(process)
        self.save_state()
        return process

    def process(self, node_id: int) -> Process:
        return self.processes[node_id]

    def wait_ready(self, node_id: int, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Wait for the node's ready line ("raftka controller N ready ...")."""
        return self.processes[node_id].wait_for_line(lambda l: " ready " in l and l.startswith("raftka "),
                                                     timeout_s)

    def _running(self, node_id: int) -> Process:
        process = self.processes.get(node_id)
        if node_id not in self.nodes:
            raise ClusterError(f"no node {node_id} in this cluster (nodes: {', '.join(map(str, self.nodes))})")
        if process is None or not process.alive():
            raise ClusterError(f"{self.nodes[node_id].name} is not running")
        return process

    def kill(self, node_id: int) -> None:
        """kill -9 the node and wait until it is gone."""
        self.processes[node_id].kill()

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the node stops answering but keeps its sockets open."""
        self._running(node_id).pause()

    def resume(self, node_id: int) -> None:
        """SIGCONT after ``pause``."""
        self._running(node_id).resume()

    def stop(self, node_id: int) -> int | None:
        """SIGTERM (clean shutdown), SIGKILL after STOP_TIMEOUT_S; the exit code if known."""
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

    def paused(self, node_id: int) -> bool:
        process = self.processes.get(node_id)
        return process is not None and process.paused()

    @property
    def client_listener(self) -> str:
        """The name (and protocol) of the brokers' one client listener."""
        return SECURE_LISTENER if self.security is not None else "PLAINTEXT"

    @property
    def client_configs(self) -> dict[str, Any]:
        """The security keywords a Raftka client of this cluster needs (kafka-python's names):
        none for a plain cluster, the admin super user's login for a secure one."""
        return self.security.client_configs() if self.security is not None else {}

    def describe_quorum(self, node_id: int, timeout_s: float = 5.0) -> dict[str, Any]:
        """Quorum status as seen by one controller (its DescribeQuorum RPC)."""
        from raftka.cluster.controller_client import PLAINTEXT_DIAL, describe_quorum, dial_from_client_configs
        host, port = self.controller_address(node_id)
        dial = getattr(self, "_dial", None)
        if dial is None:  # made once: a TLS context and a login, the same for every call
            dial = self._dial = dial_from_client_configs(self.client_configs) if self.security else PLAINTEXT_DIAL
        return describe_quorum(f"{host}:{port}", timeout_s=timeout_s, dial=dial)

    def leader_id(self, among: Iterable[int] | None = None) -> int | None:
        """The controller that says it is the active controller right now, or None."""
        for node_id in among or [n for n, s in self.nodes.items() if "controller" in s.roles]:
            if not self.alive(node_id):
                continue
            try:
                status = self.describe_quorum(node_id, timeout_s=2.0)
            except Exception:
                continue
            if status["active"]:  # the active controller answers DescribeQuorum without an error
                return node_id
        return None

    def wait_for_leader(self, timeout_s: float = 30.0, among: Iterable[int] | None = None) -> int:
        nodes = list(among) if among is not None else None
        return wait_until(lambda: self.leader_id(nodes), timeout_s, interval_s=0.05, what="an active controller")

    # -- the state file: lets another process (a later `raftka cluster ...`) attach --
    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    def state(self) -> dict[str, Any]:
        """What ``cluster.json`` holds: layout, configs, cluster id and each node's PID."""
        nodes = {}
        for node_id, spec in self.nodes.items():
            entry = spec.to_state(self.root)
            process = self.processes.get(node_id)
            if process is not None:
                entry.update(pid=process.pid, log_offset=process.log_offset, marker=process.marker,
                             argv=process.argv)
            nodes[str(node_id)] = entry
        return {"version": STATE_VERSION, "cluster_id": self.cluster_id, "base_port": self.base_port,
                "started_by": _class_name(self), "secure": self.security is not None,  # its secrets: secure.py's files
                "configs": self.configs,  # the secret stays in its own file
                "controller_ids": [n for n, s in self.nodes.items() if "controller" in s.roles],
                "broker_ids": [n for n, s in self.nodes.items() if "broker" in s.roles],
                "nodes": nodes}

    @property
    def secret_path(self) -> Path:
        return self.root / SECRET_FILE

    def write_secret(self) -> None:
        """``root/cluster.secret``, mode 600, named by every controller's config. A cluster
        attached without one gets a new one only while none of its nodes runs (a running node
        keeps the secret it started with, and a new one would cut it off)."""
        if self.secret is None:
            running = [self.nodes[n].name for n in self.nodes if self.alive(n)]
            if running:
                raise ClusterError(f"{self.secret_path} is missing while {', '.join(running)} run(s) with the "
                                   f"secret it held; stop the cluster (`raftka cluster down --dir {self.root}`) "
                                   "and start it again to make a new one")
            self.secret = new_secret()
        try:
            if self.secret_path.read_text(encoding="utf-8").strip() == self.secret:
                return
        except OSError:
            pass
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.secret_path, self.secret + "\n")

    def save_state(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.state_path, json.dumps(self.state(), indent=2, sort_keys=True) + "\n")

    def close(self) -> None:
        """Stop every process this object started (SIGTERM, then SIGKILL), by PID: brokers
        first (their controlled shutdown needs the quorum), all of a kind at once."""
        only_brokers = [p for p in self.started if self._roles_of(p) == ("broker",)]
        stop_together(only_brokers)
        stop_together([p for p in self.started if p not in only_brokers])

    def _roles_of(self, process: Process) -> tuple[str, ...]:
        for node_id, spec in self.nodes.items():
            if process.marker == str(spec.config_path):
                return spec.roles
        return ()


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

    Across processes (what ``raftka cluster ...`` does): ``Cluster.up(root, ...)`` starts or
    resumes the cluster kept in ``root`` and waits until it is ready; ``Cluster.open(root)``
    attaches to it (``status()``, ``kill``, ``pause``, ``restart``, ...); ``down()`` stops it.
    With ``base_port`` the ports are consecutive from it: brokers' PLAINTEXT listeners first
    (so the first broker is on the base port), then each controller's Raft and CONTROLLER
    ports, then brokers' HTTP ports, then controllers' HTTP ports (not for combined nodes: their
    broker serves none, and their controller's would stand where a broker's /health is looked for).
    """

    def __init__(self, root: str | os.PathLike[str], controllers: int = 3, brokers: int = 3,
                 configs: dict[str, Any] | None = None, *, broker_configs: dict[str, Any] | None = None,
                 secret: str | None = None, combined: bool = False, base_port: int | None = None,
                 cluster_id: str | None = None, add_scram: Iterable[str] = (), secure: bool = False) -> None:
        plan = PortPlan(base_port)
        plaintext = plan.take((controllers if combined else 0) + brokers)
        super().__init__(root, controllers, configs, secret=secret, cluster_id=cluster_id, port_plan=plan,
                         add_scram=add_scram, secure=secure)
        http = plan.take(brokers)
        self.controller_ids = list(self.nodes)
        if not combined:  # every controller's /metrics, as every broker's
            for node_id, port in zip(self.controller_ids, plan.take(controllers)):
                self.nodes[node_id].http_port = port
        self.broker_ids: list[int] = []
        if combined:  # process.roles=broker,controller: the controllers are brokers too
            for node_id in self.controller_ids:
                spec = self.nodes[node_id]
                spec.roles = ("broker", "controller")
                spec.broker_port = plaintext.pop(0)
                spec.data_dir = self.root / spec.name
                spec.extra.update(broker_configs or {})
                self.broker_ids.append(node_id)
        for i in range(brokers):
            node_id = controllers + i + 1
            self.nodes[node_id] = NodeSpec(node_id, ("broker",), None, None, plaintext[i],
                                           self.root / f"broker-{node_id}", dict(broker_configs or {}),
                                           http_port=http[i])
            self.broker_ids.append(node_id)

    @classmethod
    def start(cls, root: str | os.PathLike[str], controllers: int = 3, brokers: int = 3,  # type: ignore[override]
              configs: dict[str, Any] | None = None, *, broker_configs: dict[str, Any] | None = None,
              timeout_s: float = READY_TIMEOUT_S, secret: str | None = None, combined: bool = False,
              base_port: int | None = None, progress: Callable[[str], None] | None = None,
              add_scram: Iterable[str] = (), secure: bool = False) -> "Cluster":
        """Start a new cluster in ``root`` and wait until every broker is ready. ``add_scram``:
        SCRAM users of Kafka's ``--add-scram`` syntax the cluster starts with (bootstrap.py);
        ``secure``: SASL_SSL everywhere, ACLs, an admin super user (secure.py)."""
        cluster = cls(root, controllers, brokers, configs, broker_configs=broker_configs, secret=secret,
                      combined=combined, base_port=base_port, add_scram=add_scram, secure=secure)
        try:
            cluster.ensure_running(timeout_s, progress=progress, check_unfenced=False)
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

    def restart(self, node_id: int, timeout_s: float = READY_TIMEOUT_S,
                progress: Callable[[str], None] | None = None) -> Process:
        """Stop (if running) and start again on the same ports and directory; waits for ready
        (a broker killed with -9 can take up to broker.session.timeout.ms: its old incarnation
        must be fenced before it may register again)."""
        self.check_can_launch()
        process = self.processes.get(node_id)
        if process is not None and process.alive():
            process.stop()
        self.launch(node_id)
        began = time.monotonic()
        self._wait_nodes([node_id], began + timeout_s, began, progress or (lambda message: None), [node_id])
        return self.processes[node_id]

    # -- across processes -------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> "Cluster":
        """Attach to the cluster kept in ``root`` (its ``cluster.json``), running or not.
        Processes are adopted by PID only while their command line still names their config;
        ``close()`` on the result stops only what it starts itself (``restart``).
        NoClusterError when ``root`` holds no cluster."""
        root = Path(root).resolve()
        path = root / STATE_FILE
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NoClusterError(f"no cluster in {root} (start one with: raftka cluster up --dir {root})") from None
        except (OSError, ValueError) as error:
            raise ClusterError(f"cannot read {path}: {error}") from None
        if state.get("version") != STATE_VERSION:
            raise ClusterError(f"{path} has state version {state.get('version')}, this raftka reads {STATE_VERSION}")
        cluster = cls.__new__(cls)
        cluster._restore(root, state)
        return cluster

    def _restore(self, root: Path, state: dict[str, Any]) -> None:
        """Set every attribute ``__init__`` sets, from a state file (subclasses that add
        attributes extend this)."""
        self.root = root
        self.configs = dict(state.get("configs") or {})
        try:  # only launching a node needs it (write_secret)
            self.secret = (root / SECRET_FILE).read_text(encoding="utf-8").strip() or None
        except OSError:
            self.secret = None
        self.cluster_id = state["cluster_id"]
        self.security = SecureKit.load(root) if state.get("secure") else None
        self.bootstrap_scram = []  # an existing cluster was formatted already
        self.base_port = state.get("base_port")
        self.nodes = {}
        self.processes = {}
        self.started = []
        for key, entry in sorted(state["nodes"].items(), key=lambda kv: int(kv[0])):
            spec = NodeSpec.from_state(entry, root)
            self.nodes[spec.node_id] = spec
            if entry.get("pid"):
                self.processes[spec.node_id] = Process.attach(
                    spec.name, int(entry["pid"]), entry.get("argv") or [], spec.log_path,
                    int(entry.get("log_offset") or 0), entry.get("marker") or str(spec.config_path))
        self.controller_ids = [int(n) for n in state["controller_ids"]]
        self.broker_ids = [int(n) for n in state["broker_ids"]]
        self.started_by = state.get("started_by") or PLAIN_CLUSTERS[0]

    def check_can_launch(self) -> None:
        """ClusterError when the cluster was started by a subclass that configures nodes its own
        way (the chaos harness's proxies): starting its nodes from a plain Cluster would drop
        that configuration. Stopping, killing and pausing them is fine."""
        started_by = getattr(self, "started_by", None)
        if started_by and started_by not in PLAIN_CLUSTERS and _class_name(self) in PLAIN_CLUSTERS:
            raise ClusterError(f"this cluster was started by {started_by}, which configures its nodes its own "
                               f"way; start or restart its nodes from there")

    @property
    def combined(self) -> bool:
        return any(len(self.nodes[n].roles) == 2 for n in self.controller_ids)

    def shape(self) -> str:
        """"3 controllers + 3 brokers" or "3 combined nodes + 1 broker"."""
        def count(n: int, word: str) -> str:
            return f"{n} {word}{'' if n == 1 else 's'}"
        only_brokers = [b for b in self.broker_ids if b not in self.controller_ids]
        head = count(len(self.controller_ids), "combined node" if self.combined else "controller")
        return head + (f" + {count(len(only_brokers), 'broker')}" if only_brokers or not self.combined else "")

    @classmethod
    def up(cls, root: str | os.PathLike[str], controllers: int | None = None, brokers: int | None = None, *,
           combined: bool = False, base_port: int | None = DEFAULT_BASE_PORT,
           configs: dict[str, Any] | None = None, timeout_s: float = READY_TIMEOUT_S,
           progress: Callable[[str], None] | None = None, add_scram: Iterable[str] = (),
           secure: bool = False) -> tuple["Cluster", bool]:
        """Start the cluster kept in ``root``, creating it the first time (cluster id, formatted
        storage, one config per node), and wait until it is ready: quorum leader elected, every
        broker registered and unfenced. Idempotent: nodes already running are left alone, and an
        existing cluster keeps its layout (asking for another shape raises ClusterError).
        Returns (cluster, created). New clusters get default.replication.factor min(3, brokers)
        and min.insync.replicas min(2, brokers) unless ``configs`` says otherwise. ``add_scram``
        (Kafka's ``--add-scram`` values) goes into a new cluster's format; for an existing one it
        is a ClusterError (its metadata log is not empty: use AlterUserScramCredentials).
        ``secure`` makes a new cluster secure (secure.py); an existing one keeps what it is.
        Nodes it starts keep running after this process exits; ``down()`` stops them."""
        root = Path(root).resolve()
        add_scram = list(add_scram)
        with state_lock(root):
            created = not (root / STATE_FILE).exists()
            if not created and add_scram:
                raise ClusterError(f"--add-scram applies when a cluster is formatted; {root} already holds one "
                                   f"(make users with `raftka users`, or start a new cluster in another --dir)")
            if created:
                controllers = 3 if controllers is None else controllers
                brokers = 3 if brokers is None else brokers
                if controllers < 1 or brokers < 0:
                    raise ClusterError("a cluster needs at least 1 controller and 0 or more brokers")
                if controllers not in (1, 3, 5):
                    raise ClusterError(f"{controllers} controllers: use 1, 3 or 5 (a Raft quorum of an odd size)")
                serving = brokers + (controllers if combined else 0)
                if serving == 0:
                    raise ClusterError("a cluster without brokers serves no clients: ask for --brokers 1 or more, or --combined")
                defaults = {"default.replication.factor": min(3, serving), "min.insync.replicas": min(2, serving)}
                cluster = cls(root, controllers, brokers, {**defaults, **(configs or {})}, combined=combined,
                              base_port=base_port, add_scram=add_scram, secure=secure)
                for node_id in cluster.nodes:  # before anything starts: fail fast, leave nothing running
                    cluster.check_ports(node_id)
                cluster.save_state()
                if progress:
                    progress(f"new cluster {cluster.cluster_id} in {root}: {cluster.shape()}")
            else:
                cluster = cls.open(root)
                cluster.check_can_launch()
                if secure and cluster.security is None:
                    raise ClusterError(f"{root} already holds a PLAINTEXT cluster; --secure applies when a cluster "
                                       f"is made (`raftka cluster down --dir {root} --delete` first, or use another --dir)")
                only_brokers = len([b for b in cluster.broker_ids if b not in cluster.controller_ids])
                if ((controllers is not None and controllers != len(cluster.controller_ids))
                        or (brokers is not None and brokers != only_brokers)
                        or (combined and not cluster.combined)):
                    raise ClusterError(f"{root} already holds a cluster of {cluster.shape()}; run "
                                       f"`raftka cluster down --dir {root} --delete` first, or use another --dir")
                if configs:
                    cluster.configs.update(configs)  # for nodes started now; running ones keep theirs
            try:
                cluster.ensure_running(timeout_s, progress=progress)
            except BaseException:
                cluster.close()  # what this call started; nodes that were already running stay
                raise
            return cluster, created

    def ensure_running(self, timeout_s: float = READY_TIMEOUT_S, *, progress: Callable[[str], None] | None = None,
                       check_unfenced: bool = True) -> list[int]:
        """Start every node that is not running (controllers first) and wait, within one
        ``timeout_s``, for every controller's and broker's ready line, an active controller and
        (with ``check_unfenced``) every broker registered and unfenced as the controllers see
        it. Returns the ids it started."""
        say = progress or (lambda message: None)
        began = time.monotonic()
        deadline = began + timeout_s
        started: list[int] = []
        for node_id in self.controller_ids:
            if not self.alive(node_id):
                self.launch(node_id)
                started.append(node_id)
        pure_controllers = [n for n in self.controller_ids if n not in self.broker_ids]
        self._wait_nodes(pure_controllers, deadline, began, say, started)
        if pure_controllers:
            leader = self._wait_step(lambda: self.leader_id(), deadline, began, say, "an active controller")
            say(f"active controller: {leader} ({time.monotonic() - began:.1f} s)")
        for node_id in self.broker_ids:
            if not self.alive(node_id):
                self.launch(node_id)
                started.append(node_id)
        self._wait_nodes(self.broker_ids, deadline, began, say, started)
        if check_unfenced and self.broker_ids:
            self._wait_step(self._all_brokers_unfenced, deadline, began, say,
                            "every broker registered and unfenced")
            say(f"all {len(self.broker_ids)} brokers registered and unfenced ({time.monotonic() - began:.1f} s)")
        return started

    def _wait_nodes(self, node_ids: list[int], deadline: float, began: float, say: Callable[[str], None],
                    started: list[int]) -> None:
        """Each node's ready line, with a progress line per node started now and every
        PROGRESS_EVERY_S while waiting."""
        running = [self.nodes[n].name for n in node_ids if n not in started]
        if running:
            say(f"already running: {', '.join(running)}")
        for node_id in node_ids:
            name = self.nodes[node_id].name
            while True:
                chunk = min(PROGRESS_EVERY_S, deadline - time.monotonic())
                try:
                    self.wait_ready(node_id, max(chunk, 0.0))
                    break
                except TimeoutError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"{name} was not ready within {deadline - began:.0f} s; "
                                           f"see {self.nodes[node_id].log_path}") from None
                    say(f"waiting for {name} ... ({time.monotonic() - began:.0f} s)")
            if node_id in started:
                say(f"{name} ready (pid {self.processes[node_id].pid}, {time.monotonic() - began:.1f} s)")

    @staticmethod
    def _wait_step(predicate: Callable[[], Any], deadline: float, began: float, say: Callable[[str], None],
                   what: str) -> Any:
        while True:
            chunk = min(PROGRESS_EVERY_S, deadline - time.monotonic())
            try:
                return wait_until(predicate, max(chunk, 0.0), interval_s=0.1, what=what)
            except TimeoutError as error:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{what}: not reached within {deadline - began:.0f} s ({error})") from None
                say(f"waiting for {what} ... ({time.monotonic() - began:.0f} s)")

    def describe_brokers(self, timeout_s: float = 3.0) -> dict[int, dict[str, Any]] | None:
        """{broker id: {"fenced": bool, "host", "port"}} as the cluster metadata says (the
        brokers' DescribeCluster), or None when no running broker answered."""
        from raftka.client import AdminClient
        from raftka.client.errors import RaftkaError
        for node_id in self.broker_ids:
            if not self.alive(node_id) or self.paused(node_id):
                continue
            try:
                admin = AdminClient(bootstrap_servers=self.broker_address(node_id),
                                    request_timeout_ms=int(timeout_s * 1000), **self.client_configs)
            except RaftkaError:
                continue
            try:
                described = admin.describe_cluster()
            except RaftkaError:
                continue
            finally:
                admin.close()
            return {b["node_id"]: b for b in described["brokers"]}
        return None

    def _all_brokers_unfenced(self) -> bool:
        brokers = self.describe_brokers()
        return brokers is not None and all(b in brokers and not brokers[b].get("fenced") for b in self.broker_ids)

    def status(self, timeout_s: float = 2.0) -> list[dict[str, Any]]:
        """Per node: id, name, roles, pid, ports, alive, paused, log; ``quorum_role`` for
        controllers ("leader", "follower", or "unknown" when it does not answer) and ``fenced``
        for brokers (True/False, None when unknown or not registered)."""
        brokers = self.describe_brokers(timeout_s) if self.broker_ids else None
        rows = []
        for node_id, spec in self.nodes.items():
            process = self.processes.get(node_id)
            alive = process is not None and process.alive()
            paused = alive and process is not None and process.paused()
            row: dict[str, Any] = {
                "node_id": node_id, "name": spec.name, "roles": list(spec.roles),
                "pid": process.pid if alive and process else None, "alive": alive, "paused": paused,
                "raft_port": spec.raft_port, "controller_port": spec.controller_port,
                "plaintext_port": spec.broker_port, "http_port": spec.http_port, "log": str(spec.log_path)}
            if "controller" in spec.roles:
                role = None
                if alive and not paused:
                    try:
                        quorum = self.describe_quorum(node_id, timeout_s=timeout_s)
                        role = "leader" if quorum["active"] else "follower"
                    except Exception:
                        role = "unknown"
                row["quorum_role"] = role
            if "broker" in spec.roles:
                known = (brokers or {}).get(node_id)
                row["fenced"] = None if known is None else bool(known.get("fenced"))
            rows.append(row)
        return rows

    def down(self, timeout_s: float = STOP_TIMEOUT_S, *, delete: bool = False) -> list[int]:
        """Stop every running node, brokers first (their controlled shutdown needs the quorum),
        each kind all at once: SIGTERM, SIGKILL after ``timeout_s``. Safe to repeat. With
        ``delete``, then remove the nodes' directories and the state file (only what the
        cluster created). Returns the ids that were running."""
        with state_lock(self.root):
            running = [n for n in self.nodes if self.alive(n)]
            only_brokers = [n for n in running if self.nodes[n].roles == ("broker",)]
            stop_together([self.processes[n] for n in only_brokers], timeout_s)
            stop_together([self.processes[n] for n in running if n not in only_brokers], timeout_s)
            self.processes.clear()
            if delete:
                for spec in self.nodes.values():
                    if spec.data_dir.parent == self.root:  # never outside the cluster's directory
                        shutil.rmtree(spec.data_dir, ignore_errors=True)
                self.state_path.unlink(missing_ok=True)
                self.secret_path.unlink(missing_ok=True)
                if self.security is not None:
                    self.security.delete()
            else:
                self.save_state()
        if delete:
            (self.root / LOCK_FILE).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.root.rmdir()  # only when empty: anything else in it is not ours
        return running

    def find_node(self, name: str) -> int:
        """A node id from what a user typed: "4", "broker-4", "controller-1", or "leader" (the
        active controller). ClusterError when there is no such node."""
        text = name.strip().lower()
        if text in ("leader", "active-controller"):
            leader = self.leader_id()
            if leader is None:
                raise ClusterError("no active controller answers right now")
            return leader
        number = text.rsplit("-", 1)[-1]
        if not number.isdigit() or int(number) not in self.nodes:
            names = ", ".join(s.name for s in self.nodes.values())
            raise ClusterError(f"no node {name!r} in this cluster (nodes: {names}; or 'leader')")
        node_id = int(number)
        if "-" in text and text.rsplit("-", 1)[0] != self.nodes[node_id].name.rsplit("-", 1)[0]:
            raise ClusterError(f"node {node_id} is {self.nodes[node_id].name}, not {name}")
        return node_id


PLAIN_CLUSTERS = ("raftka.cluster.Cluster", "raftka.cluster.ControllerCluster")


def parse_scram_users(specs: Iterable[str]) -> list[tuple[str, Any]]:
    """(user, credential) per ``--add-scram`` value; ClusterError (naming no password) for a bad
    one or a user and mechanism given twice."""
    users: list[tuple[str, Any]] = []
    for spec in specs:
        try:
            name, credential = parse_add_scram(spec)
        except ScramSpecError as error:
            raise ClusterError(str(error)) from None
        if any(n == name and c.mechanism == credential.mechanism for n, c in users):
            raise ClusterError(f"--add-scram: user {name!r} has two {credential.mechanism.name} credentials")
        users.append((name, credential))
    return users


def _class_name(cluster: ControllerCluster) -> str:
    """"raftka.cluster.Cluster" for ours (the name state files have always recorded, whatever
    module defines it), else the subclass's module and name."""
    if type(cluster) in (Cluster, ControllerCluster):
        return f"raftka.cluster.{type(cluster).__name__}"
    return f"{type(cluster).__module__}.{type(cluster).__qualname__}"


def local_bootstrap_servers(root: str | os.PathLike[str] = DEFAULT_DIR) -> str:
    """The bootstrap servers of the cluster kept in ``root`` when at least one of its brokers
    runs; NoClusterError otherwise (the message says how to start one)."""
    cluster = Cluster.open(root)
    live = [b for b in cluster.broker_ids if cluster.alive(b)]
    if not live:
        raise NoClusterError(f"no cluster running in {cluster.root} (start it with: raftka cluster up "
                             f"--dir {cluster.root}, or pass --bootstrap-server HOST:PORT)")
    return ",".join(cluster.broker_address(b) for b in live)
