"""Toxics: the faults a proxy applies to the bytes of one direction of a connection.

Names, attributes and defaults follow Toxiproxy's (the HTTP API is in chaos/proxy_server.py):

| type | attributes | effect on the stream it is added to |
|---|---|---|
| latency | latency, jitter (ms) | each chunk waits latency +/- jitter (uniform) after it arrived |
| bandwidth | rate (KB/s, 1 KB = 1000 bytes; 0 = no limit) | chunks paced to the rate |
| slow_close | delay (ms) | the close that follows end-of-stream waits delay |
| timeout | timeout (ms) | data dropped; the connection closed after timeout (0: never, held open) |
| reset_peer | timeout (ms) | data dropped; both sockets reset (RST) after timeout |
| slicer | average_size, size_variation (bytes), delay (us) | chunks cut into pieces, delay between |
| limit_data | bytes | the connection closed once this many bytes went through |

``stream`` is ``upstream`` (client -> upstream server) or ``downstream`` (server -> client).
``toxicity`` is the probability that the toxic applies to a given connection, drawn once per
connection and toxic. Timers of timeout and reset_peer start when the toxic meets the connection
(the toxic is added, or the connection opens while it is present).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STREAMS = ("upstream", "downstream")

# type -> attribute -> default; every attribute is a non-negative integer.
TOXIC_ATTRIBUTES: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}
ATTRIBUTE_MAX = 2**40  # far beyond any sane ms/bytes figure; refuses nonsense early
NAME_CHARS_MAX = 200


class ToxicError(ValueError):
    """A toxic (or proxy) definition that cannot be accepted: HTTP 400 with this message."""


@dataclass
class Toxic:
    """One toxic on one proxy. ``uid`` tells an updated toxic from a removed-and-re-added one."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]
    uid: int = field(default=0, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "stream": self.stream,
                "toxicity": self.toxicity, "attributes": dict(self.attributes)}


def _attributes(kind: str, given: Any, base: dict[str, int] | None = None) -> dict[str, int]:
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ToxicError("attributes must be an object")
    out = dict(base if base is not None else TOXIC_ATTRIBUTES[kind])
    for key, value in given.items():
        if key not in TOXIC_ATTRIBUTES[kind]:
            continue  # as Toxiproxy: unknown attributes are ignored
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ToxicError(f"attribute {key} of a {kind} toxic must be a number, got {value!r}")
        if not 0 <= value <= ATTRIBUTE_MAX or value != int(value):
            raise ToxicError(f"attribute {key} of a {kind} toxic must be a non-negative integer, got {value!r}")
        out[key] = int(value)
    return out


def _toxicity(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ToxicError(f"toxicity must be a number in [0, 1], got {value!r}")
    return float(value)


def parse_toxic(body: Any, uid: int) -> Toxic:
    """A new toxic from its JSON body; ToxicError for an unknown type, stream or bad attribute."""
    if not isinstance(body, dict):
        raise ToxicError("a toxic must be a JSON object")
    kind = body.get("type")
    if kind not in TOXIC_ATTRIBUTES:
        raise ToxicError(f"invalid toxic type: {kind!r} (known: {', '.join(TOXIC_ATTRIBUTES)})")
    stream = body.get("stream") or "downstream"
    if stream not in STREAMS:
        raise ToxicError(f"stream must be upstream or downstream, got {stream!r}")
    name = body.get("name") or f"{kind}_{stream}"
    if not isinstance(name, str) or len(name) > NAME_CHARS_MAX:
        raise ToxicError("toxic name must be a string of at most 200 characters")
    toxicity = _toxicity(body.get("toxicity", 1.0))
    return Toxic(name, kind, stream, toxicity, _attributes(kind, body.get("attributes")), uid)


def update_toxic(toxic: Toxic, body: Any) -> None:
    """Apply an update body (toxicity, attributes) to an existing toxic, or raise ToxicError
    and leave it unchanged. Type, stream and name stay."""
    if not isinstance(body, dict):
        raise ToxicError("a toxic must be a JSON object")
    toxicity = _toxicity(body["toxicity"]) if "toxicity" in body else toxic.toxicity
    attributes = _attributes(toxic.type, body.get("attributes"), toxic.attributes)
    toxic.toxicity, toxic.attributes = toxicity, attributes
