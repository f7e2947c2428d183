"""A TCP proxy server that speaks Toxiproxy's HTTP API (`raftka chaos proxy`).

No toxiproxy binary can be installed where Raftka is developed, so this is one: asyncio TCP
proxies, each a listener that forwards every accepted connection to its ``upstream``, with
toxics (chaos/toxics.py) applied per direction, driven over HTTP (aiohttp) with Toxiproxy's
endpoints, JSON fields and status codes:

| method | path | answer |
|---|---|---|
| GET | /proxies | 200 {name: proxy} |
| POST | /proxies | 201 proxy; 409 name taken; 400 bad body; 500 listen failed |
| POST | /populate | 201 {"proxies": [...]}: create, or replace those whose listen/upstream differ |
| GET / POST(PATCH) / DELETE | /proxies/{name} | 200 proxy / 200 updated proxy / 204; 404 unknown |
| GET / POST | /proxies/{name}/toxics | 200 [toxic] / 200 toxic; 409 name taken; 400 invalid |
| GET / POST(PATCH) / DELETE | /proxies/{name}/toxics/{toxic} | 200 toxic / 200 toxic / 204 |
| POST | /reset | 204: every proxy enabled, every toxic removed |
| GET | /version | 200 {"version": ...} |

A proxy is ``{"name", "listen", "upstream", "enabled", "toxics"}``; errors are
``{"error": message, "status": code}``. ``enabled=false`` closes the listener (new connections
are refused) and drops every open connection; ``true`` listens again on the same address.

Random choices (jitter, toxicity, slicer sizes) come from one generator seeded with ``--seed``.
"""
from __future__ import annotations

import asyncio
import json
import random
import signal
import socket
import struct
import time
from typing import Any, Callable

from aiohttp import web

from raftka.chaos.toxics import Toxic, ToxicError, parse_toxic, update_toxic

VERSION = "2.12.0-raftka"  # the Toxiproxy API level followed, marked as ours
CHUNK_BYTES = 65536  # one read from a socket
CHUNKS_QUEUED_MAX = 64  # per direction between reader and writer; beyond it TCP pushes back
UPSTREAM_CONNECT_TIMEOUT_S = 5.0
PROXIES_MAX = 10_000
TOXICS_PER_PROXY_MAX = 100
HTTP_BODY_BYTES_MAX = 1_048_576


class ApiError(Exception):
    """An HTTP error answer ({"error", "status"})."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _split_address(address: str) -> tuple[str, int]:
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ApiError(400, f"expected host:port, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


class Connection:
    """One accepted client connection and its upstream connection: two directions, each a reader
    task feeding a bounded queue and a writer task applying the proxy's toxics."""

    def __init__(self, proxy: "Proxy", client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.closed = False
        self.tasks: list[asyncio.Task[Any]] = []
        self.timers: dict[int, asyncio.Task[Any]] = {}  # toxic uid -> timeout/reset_peer timer
        self._applies: dict[int, bool] = {}  # toxic uid -> drawn against its toxicity
        self._sent: dict[int, int] = {}  # limit_data toxic uid -> bytes passed
        self._paced: dict[int, float] = {}  # bandwidth toxic uid -> when the link is free again

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for stream, (reader, _), (_, writer) in (("upstream", self.client, self.upstream),
                                                  ("downstream", self.upstream, self.client)):
            queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(CHUNKS_QUEUED_MAX)
            self.tasks.append(loop.create_task(self._read(reader, queue)))
            self.tasks.append(loop.create_task(self._write(stream, writer, queue)))
        for toxic in self.proxy.toxic_list():
            self.toxic_added(toxic)

    def applies(self, toxic: Toxic) -> bool:
        decided = self._applies.get(toxic.uid)
        if decided is None:
            decided = self._applies[toxic.uid] = (toxic.toxicity >= 1.0 or
                                                  self.proxy.rng.random() < toxic.toxicity)
        return decided

    # -- toxics with timers --
    def toxic_added(self, toxic: Toxic) -> None:
        if toxic.type in ("timeout", "reset_peer") and self.applies(toxic) and not self.closed:
            if toxic.type == "timeout" and toxic.attributes["timeout"] == 0:
                return  # held open, data dropped, until the toxic goes
            self.timers[toxic.uid] = asyncio.get_running_loop().create_task(self._timer(toxic))

    def toxic_removed(self, toxic: Toxic) -> None:
        timer = self.timers.pop(toxic.uid, None)
        if timer is not None:
            timer.cancel()

    async def _timer(self, toxic: Toxic) -> None:
        await asyncio.sleep(toxic.attributes["timeout"] / 1000)
        if self.proxy.toxics.get(toxic.name) is toxic:
            self.close(reset=toxic.type == "reset_peer")

    # -- the two directions --
    async def _read(self, reader: asyncio.StreamReader, queue: "asyncio.Queue[tuple[float, bytes] | None]") -> None:
        try:
            while True:
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    break
                await queue.put((time.monotonic(), data))
        except (ConnectionError, OSError):
            pass
        await queue.put(None)

    async def _write(self, stream: str, writer: asyncio.StreamWriter,
                     queue: "asyncio.Queue[tuple[float, bytes] | None]") -> None:
        rng = self.proxy.rng
        try:
            while True:
                item = await queue.get()
                if item is None:  # end of stream: close, after slow_close's delay
                    delays = [t.attributes["delay"] for t in self.proxy.toxic_list(stream)
                              if t.type == "slow_close" and self.applies(t)]
                    if delays:
                        await asyncio.sleep(max(delays) / 1000)
                    break
                arrival, data = item
                slicer: Toxic | None = None
                close_after = False
                for toxic in self.proxy.toxic_list(stream):
                    if not self.applies(toxic):
                        continue
                    kind, a = toxic.type, toxic.attributes
                    if kind in ("timeout", "reset_peer"):
                        data = b""  # dropped while the toxic is there
                        break
                    if kind == "latency":
                        jitter = rng.uniform(-a["jitter"], a["jitter"]) if a["jitter"] else 0.0
                        delay_s = max(0.0, a["latency"] + jitter) / 1000
                        wait = arrival + delay_s - time.monotonic()
                        if wait > 0:
                            await asyncio.sleep(wait)
                    elif kind == "bandwidth" and a["rate"] > 0:
                        now = time.monotonic()
                        free = max(now, self._paced.get(toxic.uid, now)) + len(data) / (a["rate"] * 1000)
                        self._paced[toxic.uid] = free
                        if free > now:
                            await asyncio.sleep(free - now)
                    elif kind == "limit_data":
                        left = a["bytes"] - self._sent.get(toxic.uid, 0)
                        if len(data) >= left:
                            data, close_after = data[:max(0, left)], True
                        self._sent[toxic.uid] = self._sent.get(toxic.uid, 0) + len(data)
                    elif kind == "slicer":
                        slicer = toxic
                if data:
                    if slicer is not None and slicer.attributes["average_size"] > 0:
                        await self._write_sliced(writer, data, slicer.attributes)
                    else:
                        writer.write(data)
                        await writer.drain()
                if close_after:
                    break
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            return
        self.close()

    async def _write_sliced(self, writer: asyncio.StreamWriter, data: bytes, a: dict[str, int]) -> None:
        rng = self.proxy.rng
        position = 0
        while position < len(data):
            variation = rng.randint(-a["size_variation"], a["size_variation"]) if a["size_variation"] else 0
            size = max(1, a["average_size"] + variation)
            writer.write(data[position:position + size])
            await writer.drain()
            position += size
            if a["delay"] and position < len(data):
                await asyncio.sleep(a["delay"] / 1_000_000)

    def close(self, *, reset: bool = False) -> None:
        """Close both sockets (with RST when ``reset``) and stop this connection's tasks."""
        if self.closed:
            return
        self.closed = True
        self.proxy.connections.discard(self)
        for _, writer in (self.client, self.upstream):
            transport = writer.transport
            if reset:
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    except OSError:
                        pass
                transport.abort()
            else:
                transport.close()
        current = asyncio.current_task()
        for task in [*self.tasks, *self.timers.values()]:
            if task is not current:
                task.cancel()


class Proxy:
    """One named proxy: a listener on ``listen`` forwarding to ``upstream``, and its toxics."""

    def __init__(self, server: "ProxyServer", name: str, listen: str, upstream: str, enabled: bool) -> None:
        self.server = server
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = enabled
        self.toxics: dict[str, Toxic] = {}  # insertion order = order applied
        self.connections: set[Connection] = set()
        self.listener: asyncio.base_events.Server | None = None

    @property
    def rng(self) -> random.Random:
        return self.server.rng

    def toxic_list(self, stream: str | None = None) -> list[Toxic]:
        return [t for t in self.toxics.values() if stream is None or t.stream == stream]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled, "toxics": [t.to_json() for t in self.toxics.values()]}

    async def start(self) -> None:
        """Listen (no-op when already listening); ApiError 500 when the address cannot be bound."""
        if self.listener is not None:
            return
        host, port = _split_address(self.listen)
        try:
            self.listener = await asyncio.start_server(self._accept, host, port, reuse_address=True)
        except OSError as error:
            raise ApiError(500, f"listen {self.listen}: {error.strerror or error}") from None
        bound = self.listener.sockets[0].getsockname()
        self.listen = f"{host}:{bound[1]}"
        self.enabled = True

    async def stop(self) -> None:
        """Stop listening and drop every open connection."""
        self.enabled = False
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.close()
        for connection in list(self.connections):
            connection.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.enabled:
            writer.transport.abort()
            return
        host, port = _split_address(self.upstream)
        try:
            upstream = await asyncio.wait_for(asyncio.open_connection(host, port), UPSTREAM_CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            writer.transport.abort()  # as a refused connection looks to the client
            return
        if not self.enabled:
            upstream[1].transport.abort()
            writer.transport.abort()
            return
        for w in (writer, upstream[1]):
            sock = w.transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
        connection = Connection(self, (reader, writer), upstream)
        self.connections.add(connection)
        connection.start()

    def add_toxic(self, toxic: Toxic) -> None:
        if toxic.name in self.toxics:
            raise ApiError(409, f"toxic already exists: {toxic.name}")
        if len(self.toxics) >= TOXICS_PER_PROXY_MAX:
            raise ApiError(400, f"at most {TOXICS_PER_PROXY_MAX} toxics per proxy")
        self.toxics[toxic.name] = toxic
        for connection in list(self.connections):
            connection.toxic_added(toxic)

    def remove_toxic(self, name: str) -> None:
        toxic = self.toxics.pop(name, None)
        if toxic is None:
            raise ApiError(404, f"toxic not found: {name}")
        for connection in list(self.connections):
            connection.toxic_removed(toxic)

    def remove_all_toxics(self) -> None:
        for name in list(self.toxics):
            self.remove_toxic(name)


class ProxyServer:
    """Every proxy of one server and the HTTP API over them (``app()``)."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)
        self.proxies: dict[str, Proxy] = {}
        self._uid = 0
        self._lock = asyncio.Lock()  # API calls change state one at a time

    def next_uid(self) -> int:
        self._uid += 1
        return self._uid

    def get(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ApiError(404, f"proxy not found: {name}")
        return proxy

    async def create(self, body: Any) -> Proxy:
        if not isinstance(body, dict):
            raise ApiError(400, "a proxy must be a JSON object")
        name, upstream = body.get("name"), body.get("upstream")
        listen = body.get("listen") or "127.0.0.1:0"
        enabled = body.get("enabled", True)
        if not isinstance(name, str) or not name:
            raise ApiError(400, "missing required field: name")
        if not isinstance(upstream, str) or not upstream:
            raise ApiError(400, "missing required field: upstream")
        if not isinstance(listen, str) or not isinstance(enabled, bool):
            raise ApiError(400, "listen must be a string and enabled a boolean")
        _split_address(upstream)
        _split_address(listen)
        if name in self.proxies:
            raise ApiError(409, f"proxy already exists: {name}")
        if len(self.proxies) >= PROXIES_MAX:
            raise ApiError(400, f"at most {PROXIES_MAX} proxies")
        proxy = Proxy(self, name, listen, upstream, enabled)
        if enabled:
            await proxy.start()
        self.proxies[name] = proxy
        return proxy

    async def update(self, proxy: Proxy, body: Any) -> Proxy:
        if not isinstance(body, dict):
            raise ApiError(400, "a proxy must be a JSON object")
        listen = body.get("listen", proxy.listen)
        upstream = body.get("upstream", proxy.upstream)
        enabled = body.get("enabled", proxy.enabled)
        if not isinstance(listen, str) or not isinstance(upstream, str) or not isinstance(enabled, bool):
            raise ApiError(400, "listen and upstream must be strings, enabled a boolean")
        _split_address(listen)
        _split_address(upstream)
        if listen != proxy.listen or upstream != proxy.upstream:
            await proxy.stop()  # as Toxiproxy: a moved proxy restarts
            proxy.listen, proxy.upstream = listen, upstream
        if enabled:
            await proxy.start()
        else:
            await proxy.stop()
        return proxy

    async def delete(self, proxy: Proxy) -> None:
        await proxy.stop()
        self.proxies.pop(proxy.name, None)

    async def reset(self) -> None:
        for proxy in self.proxies.values():
            proxy.remove_all_toxics()
            await proxy.start()

    async def close(self) -> None:
        for proxy in list(self.proxies.values()):
            await proxy.stop()

    # -- HTTP --
    def app(self) -> web.Application:
        app = web.Application(client_max_size=HTTP_BODY_BYTES_MAX, middlewares=[self._errors])
        r = app.router
        r.add_get("/version", self._version)
        r.add_post("/reset", self._reset)
        r.add_get("/proxies", self._index)
        r.add_post("/proxies", self._create)
        r.add_post("/populate", self._populate)
        r.add_get("/proxies/{proxy}", self._show)
        r.add_post("/proxies/{proxy}", self._update)
        r.add_patch("/proxies/{proxy}", self._update)
        r.add_delete("/proxies/{proxy}", self._delete)
        r.add_get("/proxies/{proxy}/toxics", self._toxic_index)
        r.add_post("/proxies/{proxy}/toxics", self._toxic_create)
        r.add_get("/proxies/{proxy}/toxics/{toxic}", self._toxic_show)
        r.add_post("/proxies/{proxy}/toxics/{toxic}", self._toxic_update)
        r.add_patch("/proxies/{proxy}/toxics/{toxic}", self._toxic_update)
        r.add_delete("/proxies/{proxy}/toxics/{toxic}", self._toxic_delete)
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        try:
            async with self._lock:
                return await handler(request)
        except ApiError as error:
            return web.json_response({"error": error.message, "status": error.status}, status=error.status)
        except ToxicError as error:
            return web.json_response({"error": str(error), "status": 400}, status=400)
        except web.HTTPException as error:
            if error.status >= 400:
                return web.json_response({"error": error.reason, "status": error.status}, status=error.status)
            raise

    @staticmethod
    async def _body(request: web.Request) -> Any:
        try:
            return json.loads(await request.read() or b"{}")
        except ValueError:
            raise ApiError(400, "bad request body: not JSON") from None

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": VERSION})

    async def _reset(self, request: web.Request) -> web.Response:
        await self.reset()
        return web.Response(status=204)

    async def _index(self, request: web.Request) -> web.Response:
        return web.json_response({name: p.to_json() for name, p in self.proxies.items()})

    async def _create(self, request: web.Request) -> web.Response:
        proxy = await self.create(await self._body(request))
        return web.json_response(proxy.to_json(), status=201)

    async def _populate(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if isinstance(body, dict) and isinstance(body.get("proxies"), list):
            body = body["proxies"]
        if not isinstance(body, list):
            raise ApiError(400, "populate takes a JSON list of proxies")
        made = []
        for item in body:
            if not isinstance(item, dict):
                raise ApiError(400, "populate takes a JSON list of proxies")
            existing = self.proxies.get(item.get("name"))  # type: ignore[arg-type]
            if existing is not None:
                if (existing.upstream == item.get("upstream") and
                        existing.listen == (item.get("listen") or existing.listen)):
                    made.append(await self.update(existing, {"enabled": item.get("enabled", True)}))
                    continue
                await self.delete(existing)
            made.append(await self.create(item))
        return web.json_response({"proxies": [p.to_json() for p in made]}, status=201)

    async def _show(self, request: web.Request) -> web.Response:
        return web.json_response(self.get(request.match_info["proxy"]).to_json())

    async def _update(self, request: web.Request) -> web.Response:
        proxy = self.get(request.match_info["proxy"])
        return web.json_response((await self.update(proxy, await self._body(request))).to_json())

    async def _delete(self, request: web.Request) -> web.Response:
        await self.delete(self.get(request.match_info["proxy"]))
        return web.Response(status=204)

    async def _toxic_index(self, request: web.Request) -> web.Response:
        return web.json_response([t.to_json() for t in self.get(request.match_info["proxy"]).toxic_list()])

    async def _toxic_create(self, request: web.Request) -> web.Response:
        proxy = self.get(request.match_info["proxy"])
        toxic = parse_toxic(await self._body(request), self.next_uid())
        proxy.add_toxic(toxic)
        return web.json_response(toxic.to_json())

    def _toxic(self, request: web.Request) -> Toxic:
        proxy = self.get(request.match_info["proxy"])
        toxic = proxy.toxics.get(request.match_info["toxic"])
        if toxic is None:
            raise ApiError(404, f"toxic not found: {request.match_info['toxic']}")
        return toxic

    async def _toxic_show(self, request: web.Request) -> web.Response:
        return web.json_response(self._toxic(request).to_json())

    async def _toxic_update(self, request: web.Request) -> web.Response:
        toxic = self._toxic(request)
        update_toxic(toxic, await self._body(request))
        return web.json_response(toxic.to_json())

    async def _toxic_delete(self, request: web.Request) -> web.Response:
        self.get(request.match_info["proxy"]).remove_toxic(request.match_info["toxic"])
        return web.Response(status=204)


async def serve(host: str, port: int, *, seed: int | None = None,
                ready: Callable[[str], None] | None = None, stop: asyncio.Event | None = None) -> None:
    """Run the API on host:port until ``stop`` is set (or SIGTERM/SIGINT when not given)."""
    server = ProxyServer(seed)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(f"{host}:{bound}")
    try:
        await stop.wait()
    finally:
        await server.close()
        await runner.cleanup()


def main(listen: str, seed: int | None = None) -> int:
    """`raftka chaos proxy`: serve until SIGTERM/SIGINT; prints one ready line with the address."""
    host, port = _split_address(listen)

    def ready(address: str) -> None:
        print(f"raftka chaos proxy ready api=http://{address} (Toxiproxy API; seed {seed})", flush=True)

    asyncio.run(serve(host, port, seed=seed, ready=ready))
    return 0
