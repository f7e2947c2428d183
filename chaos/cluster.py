"""A cluster whose every directed link goes through its own proxy, and the network faults on it.

Links (a proxy each, named ``"{source}-{target}"``):

| link | proxy upstream | how the source is made to use it |
|---|---|---|
| client -> broker B | B's client listener | B advertises the proxy (``advertised.listeners``) |
| broker A -> broker B | B's client listener | A's ``broker.dial.proxies`` (followers fetch through it) |
| broker A -> controller C | C's CONTROLLER (RPC) listener | A's ``controller.quorum.bootstrap.servers`` and ``controller.rpc.proxies`` |
| controller A -> controller C | C's Raft port | A's ``controller.quorum.voter.proxies`` |

Between two controllers pysyncobj opens one TCP connection, from the voter with the greater
address (NOTES.md), so only one of ``A-C``/``C-A`` carries their Raft traffic; ``cut`` takes
both down. Clients (the workload) are one source, ``client``.

With ``secure=True`` (raftka/cluster/secure.py) every listener is SASL_SSL and the brokers' one
listener is ``client_listener``: the proxies are plain TCP forwarders, so TLS and the SASL login
pass through them end to end, and since they listen on 127.0.0.1, the name the nodes'
certificate carries, a client or broker dialling a proxy checks the certificate as if it dialled
the node. Clients need ``client_configs`` (the admin super user's login).

``ProxyService`` runs the proxy server: ours (`raftka chaos proxy`, a subprocess) or a real
`toxiproxy-server` when asked and on PATH. ``ProxiedCluster`` is raftka.cluster's ``Cluster``
with the proxy keys added to each node's config (``config_values``); ``Network`` cuts, partitions
and poisons links through the Toxiproxy API.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from raftka.chaos.api import ToxiproxyClient, ToxiproxyError
from raftka.cluster import Cluster, Process, free_ports, project_env, python_argv, wait_until

CLIENT = "client"
PORT_ATTEMPTS_MAX = 5  # a probed-free port can be taken by another process before we bind it
PROXY_READY_TIMEOUT_S = 60.0


class ProxyService:
    """The proxy server process. ``api`` is a ToxiproxyClient on it; ``close()`` stops it."""

    def __init__(self, root: Path, *, seed: int, toxiproxy_server: bool = False) -> None:
        root.mkdir(parents=True, exist_ok=True)
        binary = shutil.which("toxiproxy-server") if toxiproxy_server else None
        if toxiproxy_server and binary is None:
            raise FileNotFoundError("--toxiproxy-server: no toxiproxy-server on PATH")
        self.kind = "toxiproxy-server" if toxiproxy_server else "raftka chaos proxy"
        for attempt in range(PORT_ATTEMPTS_MAX):
            self.port = free_ports(1)[0]
            self.address = f"127.0.0.1:{self.port}"
            if binary is not None:
                argv = [binary, "-host", "127.0.0.1", "-port", str(self.port), "-seed", str(seed)]
            else:
                argv = python_argv("-m", "raftka", "chaos", "proxy", "--listen", self.address, "--seed", str(seed))
            self.process = Process("proxy", argv, env=project_env(), log_path=root / "proxy.log")
            self.api = ToxiproxyClient(self.address, timeout_s=10.0)
            try:
                if self._wait_ready():
                    return
            except BaseException:
                self.close()
                raise
            self.close()  # it exited: most likely its port was taken meanwhile; another port
        raise RuntimeError(f"{self.kind} did not start in {PORT_ATTEMPTS_MAX} attempts; last output:\n"
                           f"{self.process.output(10)}")

    def _wait_ready(self) -> bool:
        """True once the API answers, False if the process exited; TimeoutError after
        PROXY_READY_TIMEOUT_S."""
        deadline = time.monotonic() + PROXY_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.process.alive():
                return False
            try:
                self.api.version()
                return True
            except ToxiproxyError:
                time.sleep(0.1)
        raise TimeoutError(f"the proxy server ({self.kind}) at {self.address} did not answer within "
                           f"{PROXY_READY_TIMEOUT_S} s")

    def close(self) -> None:
        self.process.stop()


def link_name(source: int | str, target: int | str) -> str:
    return f"{source}-{target}"


class ProxiedCluster(Cluster):
    """raftka.cluster.Cluster with a proxy on every directed link (see the module docstring).

    ``ProxiedCluster.start(root, proxies, controllers=3, brokers=3, configs=..., secure=False)``;
    clients use ``bootstrap_servers`` (the client -> broker proxies) with ``client_configs``.
    ``links`` maps (source, target) to the proxy's name and listen address.
    """

    def __init__(self, root: str | Path, proxies: ProxyService, controllers: int = 3, brokers: int = 3,
                 configs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(root, controllers, brokers, configs, **kwargs)
        self.proxies = proxies
        self.links: dict[tuple[int | str, int | str], tuple[str, str]] = {}  # -> (name, listen)
        wanted: list[tuple[int | str, int | str, str]] = []  # (source, target, upstream)
        for b in self.broker_ids:
            wanted.append((CLIENT, b, f"127.0.0.1:{self.nodes[b].broker_port}"))
            for other in self.broker_ids:
                if other != b:
                    wanted.append((b, other, f"127.0.0.1:{self.nodes[other].broker_port}"))
            for c in self.controller_ids:
                wanted.append((b, c, "%s:%d" % self.controller_address(c)))
        for c in self.controller_ids:
            for other in self.controller_ids:
                if other != c:
                    wanted.append((c, other, f"127.0.0.1:{self.nodes[other].raft_port}"))
        for (source, target, upstream), port in zip(wanted, free_ports(len(wanted))):
            name = link_name(source, target)
            try:
                proxies.api.delete(name)
            except ToxiproxyError:
                pass
            for attempt in range(PORT_ATTEMPTS_MAX):
                listen = f"127.0.0.1:{port}"
                try:
                    proxies.api.create(name, upstream, listen=listen)
                    break
                except ToxiproxyError as error:  # another process took the port since we probed it
                    if error.status != 500 or attempt == PORT_ATTEMPTS_MAX - 1:
                        raise
                    port = free_ports(1)[0]
            self.links[source, target] = (name, listen)

    @classmethod
    def start(cls, root: str | Path, proxies: ProxyService, controllers: int = 3, brokers: int = 3,  # type: ignore[override]
              configs: dict[str, Any] | None = None, *, timeout_s: float = 90.0, **kwargs: Any) -> "ProxiedCluster":
        cluster = cls(root, proxies, controllers, brokers, configs, **kwargs)
        try:
            for node_id in cluster.controller_ids:
                cluster.launch(node_id)
            for node_id in cluster.controller_ids:
                cluster.wait_ready(node_id, timeout_s)
            for node_id in cluster.broker_ids:
                cluster.launch(node_id)
            for node_id in cluster.broker_ids:
                cluster.wait_ready(node_id, timeout_s)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def listen(self, source: int | str, target: int | str) -> str:
        return self.links[source, target][1]

    def config_values(self, node_id: int) -> dict[str, Any]:
        values = super().config_values(node_id)
        spec = self.nodes[node_id]
        if "broker" in spec.roles:
            values["advertised.listeners"] = f"{self.client_listener}://{self.listen(CLIENT, node_id)}"
            values["broker.dial.proxies"] = ",".join(
                f"{b}@{self.listen(node_id, b)}" for b in self.broker_ids if b != node_id)
            values["controller.quorum.bootstrap.servers"] = ",".join(
                self.listen(node_id, c) for c in self.controller_ids)
            values["controller.rpc.proxies"] = ",".join(
                f"{c}@{self.listen(node_id, c)}" for c in self.controller_ids)
        if "controller" in spec.roles:
            values["controller.quorum.voter.proxies"] = ",".join(
                f"{c}@{self.listen(node_id, c)}" for c in self.controller_ids if c != node_id)
        return values

    @property
    def bootstrap_servers(self) -> str:
        """The client -> broker proxies."""
        return ",".join(self.listen(CLIENT, b) for b in self.broker_ids)


class Network:
    """Faults on a ProxiedCluster's links. Nodes are node ids or ``"client"``.

    ``mode`` of a cut: ``"down"`` disables the proxies (connections dropped, new ones refused:
    a fast failure), ``"blackhole"`` keeps them open but drops every byte (timeout toxic with
    timeout 0 on both streams: the silent partition that only timeouts detect).
    """

    def __init__(self, cluster: ProxiedCluster) -> None:
        self.cluster = cluster
        self.api = cluster.proxies.api

    def names(self, pairs: Iterable[tuple[int | str, int | str]]) -> list[str]:
        return [self.cluster.links[p][0] for p in pairs if p in self.cluster.links]

    def cut_links(self, pairs: Iterable[tuple[int | str, int | str]], mode: str = "down") -> list[str]:
        """Cut these directed links; returns the proxy names touched."""
        names = self.names(pairs)
        for name in names:
            if mode == "down":
                self.api.set_enabled(name, False)
            elif mode == "blackhole":
                for stream in ("upstream", "downstream"):
                    self._add(name, "timeout", stream=stream, name=f"blackhole_{stream}", timeout=0)
            else:
                raise ValueError(f"unknown cut mode {mode!r}")
        return names

    def _add(self, proxy: str, type: str, **kwargs: Any) -> None:
        try:
            self.api.add_toxic(proxy, type, **kwargs)
        except ToxiproxyError as error:
            if error.status != 409:  # already there: the same fault twice is one fault
                raise

    def cut(self, a: int | str, b: int | str, mode: str = "down") -> list[str]:
        """Cut both directions between two nodes."""
        return self.cut_links([(a, b), (b, a)], mode)

    def partition(self, groups: Sequence[Iterable[int | str]], mode: str = "down") -> list[str]:
        """Cut every link between nodes of different groups (nodes in no group are untouched)."""
        groups = [set(g) for g in groups]
        pairs = [(s, t) for (s, t) in self.cluster.links
                 if any(s in g for g in groups) and any(t in g for g in groups)
                 and not any(s in g and t in g for g in groups)]
        return self.cut_links(pairs, mode)

    def isolate(self, node: int | str, from_nodes: Iterable[int | str], mode: str = "down") -> list[str]:
        pairs = []
        for other in from_nodes:
            if other != node:
                pairs += [(node, other), (other, node)]
        return self.cut_links(pairs, mode)

    def poison(self, pairs: Iterable[tuple[int | str, int | str]], type: str, *, stream: str = "downstream",
               name: str | None = None, toxicity: float = 1.0, **attributes: int) -> list[str]:
        """Add a toxic to each of these links."""
        names = self.names(pairs)
        for proxy in names:
            self._add(proxy, type, stream=stream, name=name or f"{type}_{stream}", toxicity=toxicity, **attributes)
        return names

    def heal(self) -> None:
        """Every proxy enabled, every toxic removed."""
        self.api.reset()

    def all_links_up(self) -> bool:
        return all(p["enabled"] and not p["toxics"] for p in self.api.proxies().values())


def wait_healthy(admin: Any, topic: str, replicas: int, timeout_s: float) -> list[dict[str, Any]]:
    """Wait until every partition of ``topic`` has a leader and a full ISR (``admin``: a blocking
    client.AdminClient); returns the partitions."""
    def full() -> list[dict[str, Any]] | None:
        described = admin.describe_topics([topic])
        parts = described[0]["partitions"] if described else []
        if parts and all(p["leader"] >= 0 and len(p["isr"]) >= replicas for p in parts):
            return parts
        return None
    return wait_until(full, timeout_s, interval_s=0.25, what=f"every partition of {topic} led with a full ISR")


def monotonic_s() -> float:
    return time.monotonic()
