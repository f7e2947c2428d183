"""Voters reached through proxies (controller.quorum.voter.proxies): identity and dial address
kept apart, as the chaos harness needs. A tiny in-test TCP forwarder stands in for toxiproxy.

Every voter dials the others through a forwarder; cutting the forwarders in front of the
active controller isolates it although its process lives: the rest elect another leader.
"""
from __future__ import annotations

import socket
import threading

from raftka.cluster import ControllerCluster, free_ports, wait_until


class Forwarder:
    """Accepts on ``port`` and pipes bytes to ``target``; ``cut()`` drops every connection and
    refuses new ones until ``heal()``."""

    def __init__(self, port: int, target: int) -> None:
        self.target = target
        self.enabled = True
        self.bytes = 0
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", port))
        self.server.settimeout(0.2)
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            if not self.enabled:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=2)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data or not self.enabled:
                    break
                self.bytes += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self) -> None:
        self.enabled = False
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.sockets.clear()

    def heal(self) -> None:
        self.enabled = True

    def close(self) -> None:
        self.stopped.set()
        self.cut()
        self.server.close()


def test_voters_talk_through_proxies_and_an_isolated_leader_is_replaced(tmp_path):
    cluster = ControllerCluster(tmp_path, voters=3)
    links = [(a, b) for a in cluster.nodes for b in cluster.nodes if a != b]  # dialer -> target
    ports = dict(zip(links, free_ports(len(links))))
    forwarders = {link: Forwarder(ports[link], cluster.nodes[link[1]].raft_port) for link in links}
    for node_id, spec in cluster.nodes.items():
        spec.extra["controller.quorum.voter.proxies"] = ",".join(
            f"{b}@127.0.0.1:{ports[(a, b)]}" for (a, b) in links if a == node_id)
    try:
        for node_id in cluster.nodes:
            cluster.launch(node_id)
        for node_id in cluster.nodes:
            cluster.wait_ready(node_id)
        leader = cluster.wait_for_leader(timeout_s=30)
        wait_until(lambda: all(v["endpoint"] for v in cluster.describe_quorum(leader)["voters"]), 20,
                   what="all endpoints committed through the proxies")
        assert sum(f.bytes for f in forwarders.values()) > 0  # Raft traffic did go through them
        for (a, b), forwarder in forwarders.items():  # isolate the leader, process still alive
            if leader in (a, b):
                forwarder.cut()
        others = [n for n in cluster.nodes if n != leader]
        new = cluster.wait_for_leader(timeout_s=30, among=others)
        assert new != leader and cluster.alive(leader)
        # The isolated old leader steps down (leaderFallbackTimeout) instead of claiming to lead.
        wait_until(lambda: not cluster.describe_quorum(leader)["active"], 20, what="old leader steps down")
        for forwarder in forwarders.values():
            forwarder.heal()

        def agreed():  # no PreVote in pysyncobj: the rejoining node may force one more election
            views = [cluster.describe_quorum(n) for n in cluster.nodes]
            leaders = {v["leader_id"] for v in views}
            return len(leaders) == 1 and -1 not in leaders and sum(v["active"] for v in views) == 1
        wait_until(agreed, 30, what="all three agree on one active controller after healing")
    finally:
        cluster.close()
        for forwarder in forwarders.values():
            forwarder.close()
