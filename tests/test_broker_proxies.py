"""Brokers reach each other and the controllers through proxies (broker.dial.proxies,
controller.rpc.proxies), as the chaos harness will run them: here plain TCP forwarders started by
the test. Cutting a leader's link to one follower drops that follower from the ISR while
acks=all goes on; healing the link brings it back."""
from __future__ import annotations

import socket
import threading

from client.protocol import errors
from raftka.cluster import Cluster, free_ports
from test_broker import FAST, batch, create_topic, leader_address, produce, wait_for_partition

BUFFER_BYTES = 65536


class Forwarder:
    """A TCP forwarder on 127.0.0.1:listen_port -> target; ``cut()`` drops every connection and
    refuses new ones until ``heal()``; counts the bytes it carried."""

    def __init__(self, listen_port: int, target: tuple[str, int]) -> None:
        self.target = target
        self.bytes = 0
        self.open = True
        self.sockets: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", listen_port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(BUFFER_BYTES)
                if not data:
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
        self.open = False
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.sockets.clear()

    def heal(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self.server.close()


def test_followers_fetch_through_proxies_and_a_cut_link_only_shrinks_the_isr(tmp_path):
    cluster = Cluster(tmp_path, controllers=1, brokers=3, configs=FAST)
    forwarders: dict[tuple[int, int], Forwarder] = {}  # (dialer, target) -> its own proxy
    try:
        brokers = cluster.broker_ids
        ports = iter(free_ports(len(brokers) * (len(brokers) - 1) + len(brokers)))
        for dialer in brokers:
            dial = {}
            for target in brokers:
                if target != dialer:
                    port = next(ports)
                    forwarders[dialer, target] = Forwarder(port, ("127.0.0.1", cluster.nodes[target].broker_port))
                    dial[target] = f"127.0.0.1:{port}"
            controller = cluster.controller_ids[0]
            port = next(ports)
            forwarders[dialer, controller] = Forwarder(port, cluster.controller_address(controller))
            cluster.nodes[dialer].extra.update({
                "broker.dial.proxies": ",".join(f"{t}@{a}" for t, a in dial.items()),
                "controller.rpc.proxies": f"{controller}@127.0.0.1:{port}",
                "controller.quorum.bootstrap.servers": f"127.0.0.1:{port}"})
        for node in cluster.controller_ids + brokers:
            cluster.launch(node)
        for node in cluster.controller_ids + brokers:
            cluster.wait_ready(node)
        create_topic(cluster, "proxied")
        leader, address = leader_address(cluster, "proxied")
        assert produce(address, "proxied", batch([b"through proxies"]))["error_code"] == errors.NONE
        follower = next(b for b in brokers if b != leader)
        link = forwarders[follower, leader]
        assert link.bytes > 0  # the follower's fetches went through its own proxy
        link.cut()
        wait_for_partition(cluster, "proxied", 0, lambda p: follower not in p["isr_nodes"], among=[leader])
        assert produce(address, "proxied", batch([b"with two"]))["error_code"] == errors.NONE
        link.heal()
        wait_for_partition(cluster, "proxied", 0, lambda p: len(p["isr_nodes"]) == 3, among=[leader], timeout_s=30)
    finally:
        cluster.close()
        for forwarder in forwarders.values():
            forwarder.close()
