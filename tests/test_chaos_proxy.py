"""The chaos proxy server answers Toxiproxy's HTTP API as the `toxiproxy-python` client expects,
and each toxic does to the bytes what Toxiproxy's does.

The server runs on its own event loop in a thread of the test process; an echo server (also a
thread) stands behind the proxies. Every toxiproxy-python method is called at least once.
Timing assertions use generous bounds (a loaded 2-core box), each on the side that can fail.
"""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from raftka.chaos.api import ToxiproxyClient, ToxiproxyError
from raftka.chaos.proxy_server import serve
from raftka.cluster import free_ports, project_env, wait_until

SEED = 1234


class EchoServer:
    """Echoes every byte back; ``send_first`` bytes are sent to each client on connect."""

    def __init__(self, send_first: bytes = b"") -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.send_first = send_first
        self.received = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            if self.send_first:
                conn.sendall(self.send_first)
            while data := conn.recv(65536):
                self.received += len(data)
                conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.server.close()


@pytest.fixture(scope="module")
def api_port():
    """Our proxy server on a free port, in a thread; stopped at the end of the module."""
    port = free_ports(1)[0]
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    thread = threading.Thread(target=lambda: loop.run_until_complete(
        serve("127.0.0.1", port, seed=SEED, ready=lambda _: ready.set(), stop=stop)), daemon=True)
    thread.start()
    assert ready.wait(20), f"proxy server did not start (seed {SEED})"
    yield port
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


@pytest.fixture
def toxiproxy(api_port):
    server = Toxiproxy()
    server.update_api_consumer("127.0.0.1", api_port)
    server.reset()
    yield server
    server.destroy_all()


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


def listen_port(proxy) -> int:
    return int(proxy.listen.rpartition(":")[2])


def connect(proxy, timeout_s: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", listen_port(proxy)), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def round_trip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def closed_by_peer(sock: socket.socket, timeout_s: float) -> str:
    """'eof', 'reset', or 'open' (nothing within timeout_s)."""
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(65536)
        while data:
            data = sock.recv(65536)
        return "eof"
    except ConnectionResetError:
        return "reset"
    except socket.timeout:
        return "open"


# -- the API through toxiproxy-python ------------------------------------------------------------

def test_every_toxiproxy_python_method_works_against_our_server(toxiproxy, echo):
    assert toxiproxy.running() is True
    assert b"version" in toxiproxy.version()
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="echo")
    assert proxy.enabled is True and listen_port(proxy) > 0  # port 0 resolved
    with pytest.raises(ProxyExists):
        toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="echo")
    assert set(toxiproxy.proxies()) == {"echo"}
    assert toxiproxy.get_proxy("echo").upstream == f"127.0.0.1:{echo.port}"
    assert toxiproxy.get_proxy("missing") is None
    with connect(proxy) as sock:
        assert round_trip(sock, b"hello") == b"hello"

    proxy.add_toxic(type="latency", attributes={"latency": 100, "jitter": 10})
    proxy.add_toxic(type="bandwidth", stream="upstream", name="slow", toxicity=0.5, attributes={"rate": 100})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "slow"}
    assert toxics["slow"].stream == "upstream" and toxics["slow"].toxicity == 0.5
    assert toxics["latency_downstream"].attributes == {"latency": 100, "jitter": 10}
    assert proxy.get_toxic("slow").type == "bandwidth" and proxy.get_toxic("nope") is None
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="no_such_toxic")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="latency", stream="sideways")
    with pytest.raises(ProxyExists):  # the same toxic name twice: 409
        proxy.add_toxic(type="latency", attributes={"latency": 1})
    assert proxy.destroy_toxic("slow") is True
    with pytest.raises(NotFound):
        proxy.destroy_toxic("slow")
    assert set(proxy.toxics()) == {"latency_downstream"}

    proxy.disable()
    assert toxiproxy.get_proxy("echo").enabled is False
    proxy.enable()
    assert toxiproxy.get_proxy("echo").enabled is True
    with proxy.down():
        assert toxiproxy.get_proxy("echo").enabled is False
        with pytest.raises(ConnectionRefusedError):
            connect(proxy, timeout_s=2)
    assert toxiproxy.get_proxy("echo").enabled is True

    proxy.disable()
    assert toxiproxy.reset() is True  # re-enables every proxy and removes every toxic
    again = toxiproxy.get_proxy("echo")
    assert again.enabled is True and proxy.toxics() == {}
    with connect(again) as sock:
        assert round_trip(sock, b"after reset") == b"after reset"

    made = toxiproxy.populate([{"name": "p1", "upstream": f"127.0.0.1:{echo.port}", "listen": "127.0.0.1:0"},
                               {"name": "p2", "upstream": f"127.0.0.1:{echo.port}", "listen": "127.0.0.1:0"}])
    assert {p.name for p in made} == {"p1", "p2"}
    assert set(toxiproxy.proxies()) == {"echo", "p1", "p2"}
    assert toxiproxy.destroy(toxiproxy.get_proxy("p1")) is True
    assert toxiproxy.destroy("not a proxy") is False
    p2 = toxiproxy.get_proxy("p2")
    assert p2.destroy() is True
    with pytest.raises(NotFound):
        p2.destroy()
    toxiproxy.destroy_all()
    assert toxiproxy.proxies() == {}


def test_status_codes_and_error_bodies(api_port, echo):
    api = ToxiproxyClient(f"127.0.0.1:{api_port}", timeout_s=10)
    api.reset()
    for name in list(api.proxies()):
        api.delete(name)
    created = api.create("codes", f"127.0.0.1:{echo.port}")
    assert created["toxics"] == [] and created["enabled"] is True
    cases = [
        (lambda: api.create("codes", f"127.0.0.1:{echo.port}"), 409),
        (lambda: api.proxy("nope"), 404),
        (lambda: api.delete("nope"), 404),
        (lambda: api._call("POST", "/proxies", {"name": "x"}), 400),  # no upstream
        (lambda: api._call("POST", "/proxies", {"name": "x", "upstream": "no-port"}), 400),
        (lambda: api.add_toxic("codes", "latency", latency=-5), 400),
        (lambda: api.add_toxic("codes", "latency", toxicity=2.0), 400),
        (lambda: api.add_toxic("nope", "latency"), 404),
        (lambda: api.remove_toxic("codes", "nope"), 404),
        (lambda: api._call("GET", "/proxies/codes/toxics/nope"), 404),
    ]
    for call, status in cases:
        with pytest.raises(ToxiproxyError) as raised:
            call()
        assert raised.value.status == status and raised.value.message
    busy = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(ToxiproxyError) as raised:
            api.create("busy", f"127.0.0.1:{echo.port}", listen=f"127.0.0.1:{busy.getsockname()[1]}")
        assert raised.value.status == 500 and "listen" in raised.value.message
    finally:
        busy.close()
    toxic = api.add_toxic("codes", "latency", latency=10)
    assert toxic == {"name": "latency_downstream", "type": "latency", "stream": "downstream",
                     "toxicity": 1.0, "attributes": {"latency": 10, "jitter": 0}}
    updated = api._call("POST", "/proxies/codes/toxics/latency_downstream", {"attributes": {"jitter": 3}})
    assert updated["attributes"] == {"latency": 10, "jitter": 3}
    assert api._call("GET", "/proxies/codes/toxics/latency_downstream") == updated
    assert api.proxy("codes")["toxics"] == [updated]
    api.delete("codes")


# -- what each toxic does -------------------------------------------------------------------------

def timed_round_trip(proxy, payload: bytes = b"ping") -> float:
    with connect(proxy) as sock:
        start = time.monotonic()
        assert round_trip(sock, payload) == payload
        return time.monotonic() - start


def test_latency_with_jitter_delays_each_direction_it_is_added_to(toxiproxy, echo):
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="lat")
    base = timed_round_trip(proxy)
    proxy.add_toxic(type="latency", stream="downstream", attributes={"latency": 300, "jitter": 50})
    assert timed_round_trip(proxy) >= 0.25  # 300 - 50 at least
    proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 300})
    assert timed_round_trip(proxy) >= 0.55  # both ways now
    proxy.destroy_toxic("latency_downstream")
    proxy.destroy_toxic("latency_upstream")
    assert timed_round_trip(proxy) < base + 0.25


def test_bandwidth_paces_the_stream(toxiproxy, echo):
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="bw")
    proxy.add_toxic(type="bandwidth", stream="downstream", attributes={"rate": 100})  # 100 KB/s
    payload = b"x" * 100_000
    with connect(proxy, timeout_s=20) as sock:
        start = time.monotonic()
        assert round_trip(sock, payload) == payload
        elapsed = time.monotonic() - start
    assert elapsed >= 0.8, elapsed  # 1 s at 100 KB/s (the first chunk goes at once)


def test_slicer_cuts_data_into_small_pieces(toxiproxy, echo):
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="slicer")
    proxy.add_toxic(type="slicer", attributes={"average_size": 10, "size_variation": 5, "delay": 20_000})
    payload = bytes(range(200))
    with connect(proxy) as sock:
        sock.sendall(payload)
        reads = []
        got = b""
        while len(got) < len(payload):
            chunk = sock.recv(65536)
            assert chunk
            reads.append(len(chunk))
            got += chunk
    assert got == payload
    # pieces of 5..15 bytes, 20 ms apart: most arrive alone (a loaded box may join a few)
    assert len(reads) >= 8 and sorted(reads)[len(reads) // 2] <= 15, reads


def test_limit_data_closes_the_connection_after_that_many_bytes(toxiproxy, echo):
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="limit")
    proxy.add_toxic(type="limit_data", stream="downstream", attributes={"bytes": 10})
    with connect(proxy) as sock:
        sock.sendall(b"0123456789abcdef")
        got = b""
        sock.settimeout(10)
        while chunk := sock.recv(100):
            got += chunk
    assert got == b"0123456789"
    proxy.destroy_toxic("limit_data_downstream")
    proxy.add_toxic(type="limit_data", stream="upstream", attributes={"bytes": 4})
    before = echo.received
    with connect(proxy) as sock:
        sock.sendall(b"abcdefgh")
        assert closed_by_peer(sock, 10) in ("eof", "reset")
    wait_until(lambda: echo.received - before >= 4, 10, what="4 bytes at the upstream server")
    time.sleep(0.2)
    assert echo.received - before == 4  # only the first 4 bytes reached the upstream server


def test_timeout_drops_data_then_closes_and_zero_holds_forever(toxiproxy, echo):
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="timeout")
    proxy.add_toxic(type="timeout", name="t", attributes={"timeout": 500})
    with connect(proxy) as sock:
        start = time.monotonic()
        sock.sendall(b"lost")
        assert closed_by_peer(sock, 10) == "eof"  # nothing echoed, then closed
        assert time.monotonic() - start >= 0.4
    proxy.destroy_toxic("t")
    proxy.add_toxic(type="timeout", name="t0", attributes={"timeout": 0})
    with connect(proxy) as sock:
        sock.sendall(b"held")
        assert closed_by_peer(sock, 1.0) == "open"
    proxy.destroy_toxic("t0")
    with connect(proxy) as sock:
        assert round_trip(sock, b"back") == b"back"


def test_reset_peer_resets_open_connections(toxiproxy, echo):
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="reset")
    with connect(proxy) as sock:
        assert round_trip(sock, b"fine") == b"fine"
        proxy.add_toxic(type="reset_peer", attributes={"timeout": 200})
        assert closed_by_peer(sock, 10) == "reset"


def test_slow_close_delays_the_close(toxiproxy):
    closer = socket.create_server(("127.0.0.1", 0))  # upstream that says hi and closes at once
    threading.Thread(target=lambda: [c.sendall(b"bye") or c.close()
                                     for c in iter(lambda: closer.accept()[0], None)], daemon=True).start()
    try:
        proxy = toxiproxy.create(upstream=f"127.0.0.1:{closer.getsockname()[1]}", name="slowclose")
        proxy.add_toxic(type="slow_close", attributes={"delay": 600})
        with connect(proxy) as sock:
            start = time.monotonic()
            sock.settimeout(10)
            assert sock.recv(10) == b"bye"
            assert sock.recv(10) == b""
            assert time.monotonic() - start >= 0.5
    finally:
        closer.close()


def test_toxicity_applies_a_toxic_to_a_seeded_share_of_connections(toxiproxy, echo):
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="toxicity")
    proxy.add_toxic(type="timeout", name="never", toxicity=0.0, attributes={"timeout": 0})
    with connect(proxy) as sock:
        assert round_trip(sock, b"untouched") == b"untouched"
    proxy.destroy_toxic("never")
    proxy.add_toxic(type="timeout", name="half", toxicity=0.5, attributes={"timeout": 100})
    outcomes = []
    for _ in range(20):
        with connect(proxy) as sock:
            sock.sendall(b"?")
            sock.settimeout(5)
            try:
                outcomes.append(sock.recv(10) == b"?")
            except OSError:
                outcomes.append(False)
    assert 2 <= sum(outcomes) <= 18, f"{outcomes} (seed {SEED})"


def test_a_disabled_proxy_drops_its_connections_and_refuses_new_ones(toxiproxy, echo):
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{echo.port}", name="down")
    sock = connect(proxy)
    assert round_trip(sock, b"up") == b"up"
    proxy.disable()
    assert closed_by_peer(sock, 10) in ("eof", "reset")
    sock.close()
    with pytest.raises(ConnectionRefusedError):
        connect(proxy, timeout_s=2)
    proxy.enable()
    with connect(proxy) as again:  # same address again
        assert round_trip(again, b"again") == b"again"


def test_an_unreachable_upstream_closes_the_client(toxiproxy):
    dead = free_ports(1)[0]
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{dead}", name="dead")
    with connect(proxy) as sock:
        assert closed_by_peer(sock, 10) in ("eof", "reset")


def test_cli_serves_until_terminated():
    port = free_ports(1)[0]
    process = subprocess.Popen([sys.executable, "-m", "raftka", "chaos", "proxy", "--listen", f"127.0.0.1:{port}",
                                "--seed", "7"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=project_env())
    try:
        line = process.stdout.readline()
        assert "ready" in line and str(port) in line
        assert ToxiproxyClient(f"127.0.0.1:{port}").version()["version"]
    finally:
        process.terminate()
        assert process.wait(20) == 0
