"""A small blocking client of the Toxiproxy HTTP API, used by the harness.

The harness could drive proxies with `toxiproxy-python` (tests/test_chaos_proxy.py shows our
server answers every one of its calls), but that client sends requests without a timeout and
keeps its server address in class attributes; a fault harness must not hang on its own control
channel, so this one bounds every call (``timeout_s``) and raises ToxiproxyError with the
server's ``{"error", "status"}``. It speaks to `raftka chaos proxy` and to a real
`toxiproxy-server` alike.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class ToxiproxyError(Exception):
    """A non-2xx answer (``status``, ``message``) or an unreachable server (status 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"toxiproxy {status}: {message}" if status else f"toxiproxy: {message}")
        self.status = status
        self.message = message


class ToxiproxyClient:
    """``ToxiproxyClient("127.0.0.1:8474")``: create/list/delete proxies, enable/disable them,
    add/remove toxics, reset. Every call waits at most ``timeout_s``."""

    def __init__(self, address: str, *, timeout_s: float = 10.0) -> None:
        self.base = f"http://{address}"
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                message = json.loads(raw).get("error", raw.decode(errors="replace"))
            except ValueError:
                message = raw.decode(errors="replace")
            raise ToxiproxyError(error.code, str(message).strip()) from None
        except (urllib.error.URLError, OSError) as error:
            raise ToxiproxyError(0, f"{self.base}: {getattr(error, 'reason', error)}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def version(self) -> Any:
        return self._call("GET", "/version")

    def proxies(self) -> dict[str, dict[str, Any]]:
        return self._call("GET", "/proxies")

    def create(self, name: str, upstream: str, listen: str = "127.0.0.1:0", enabled: bool = True) -> dict[str, Any]:
        return self._call("POST", "/proxies", {"name": name, "upstream": upstream, "listen": listen,
                                               "enabled": enabled})

    def proxy(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/proxies/{name}")

    def set_enabled(self, name: str, enabled: bool) -> dict[str, Any]:
        return self._call("POST", f"/proxies/{name}", {"enabled": enabled})

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    def add_toxic(self, proxy: str, type: str, *, stream: str = "downstream", name: str | None = None,
                  toxicity: float = 1.0, **attributes: int) -> dict[str, Any]:
        return self._call("POST", f"/proxies/{proxy}/toxics", {
            "name": name or f"{type}_{stream}", "type": type, "stream": stream,
            "toxicity": toxicity, "attributes": attributes})

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/proxies/{proxy}/toxics")

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def reset(self) -> None:
        self._call("POST", "/reset")
