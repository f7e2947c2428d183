"""A seeded fuzzer of the broker's wire protocol (#hardening), shared by the bounded test in the
default suite and the long `-m soak` target (tests/test_fuzz.py).

Inputs are Kafka request frames a hostile or broken client could send: requests of every API a
broker serves, at a random declared version, with one value replaced by an extreme or odd one of
its type (they encode, so they reach the handlers), valid encodings with bytes changed, cut short
or with bytes added (they reach the decoder), random headers (api key, version, client id
length), random bytes, and frames whose declared length lies. An input goes to the broker on
the connection the last one was answered on, else a new one; the outcome is counted as

    answered   a response frame came back (the error codes in it are counted too)
    closed     the broker closed the connection
    silent     neither within ``answer_timeout_s`` (a frame still incomplete, or acks=0)

A crash is the broker process gone. Everything is drawn from ``random.Random(seed)``: a run is
reproduced by its seed, which a failing test prints.
"""
from __future__ import annotations

import random
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from raftka.common.api import ApiKey
from raftka.common.codec import CodecError, encoder, request_header_version
from raftka.common.errors import FrameError
from raftka.common.messages import BROKER_API
from raftka.common.records import BatchBuilder
from raftka.common.transport import decode_kafka_response

TOPIC = "fuzz"
LIE_TIMEOUT_S = 0.05  # how long an answer to a frame whose length lies is waited for


def _batch(rng: random.Random) -> bytes:
    builder = BatchBuilder(batch_size=1 << 16)
    for i in range(rng.randint(1, 5)):
        builder.append(1_000 + i, None, rng.randbytes(rng.randint(0, 40)))
    return builder.build()


def valid_bodies(rng: random.Random) -> dict[int, Any]:
    """One well-formed body per API a client may send a broker, in Kafka's shape (the fuzzer's
    seeds; each version leaves out the fields it does not have)."""
    return {
        ApiKey.PRODUCE: {"acks": rng.choice([1, -1]), "timeout_ms": 1000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": _batch(rng)}]}]},
        ApiKey.FETCH: {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 16,
                       "isolation_level": 0, "topics": [{"topic": TOPIC, "partitions": [{
                           "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                           "last_fetched_epoch": -1, "log_start_offset": -1,
                           "partition_max_bytes": 1 << 16}]}]},
        ApiKey.LIST_OFFSETS: {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]},
        ApiKey.METADATA: {"topics": [{"name": TOPIC}]},
        ApiKey.OFFSET_COMMIT: {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]},
        ApiKey.OFFSET_FETCH: {"group_id": "g", "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        ApiKey.FIND_COORDINATOR: {"key": "g", "key_type": 0},
        ApiKey.JOIN_GROUP: {"group_id": "g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 1000,
                            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b"m"}]},
        ApiKey.HEARTBEAT: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None},
        ApiKey.LEAVE_GROUP: {"group_id": "g", "member_id": "m", "members": [{"member_id": "m", "group_instance_id": None}]},
        ApiKey.SYNC_GROUP: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
                            "assignments": [{"member_id": "m", "assignment": b"a"}]},
        ApiKey.DESCRIBE_GROUPS: {"groups": ["g"]},
        ApiKey.LIST_GROUPS: {},
        ApiKey.API_VERSIONS: {},
        ApiKey.CREATE_TOPICS: {"topics": [{"name": "fz" + str(rng.randint(0, 3)), "num_partitions": 1,
                                           "replication_factor": 1, "configs": []}], "timeout_ms": 1000},
        ApiKey.INIT_PRODUCER_ID: {"transactional_id": None, "transaction_timeout_ms": 60000},
        ApiKey.OFFSET_FOR_LEADER_EPOCH: {"replica_id": -1, "topics": [
            {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
        ApiKey.DESCRIBE_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}]},
        ApiKey.DESCRIBE_CLUSTER: {},
    }


def _odd_value(rng: random.Random, depth: int = 0) -> Any:
    """A value of a random type and size: what a field should never hold, or sometimes could."""
    kind = rng.randrange(14 if depth < 2 else 11)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31 - 1, -2**31, 2**31, 2**63 - 1, -2**63, 2**62, 134_217_728])
    if kind == 3:
        return rng.randint(-1000, 1000)
    if kind == 4:
        return rng.choice([0.5, -1.5, 1e300, float("nan"), float("inf")])
    if kind == 5:
        return rng.choice(["", "x" * rng.randint(1, 300), "\u2603", "g", TOPIC, "../../etc"])
    if kind == 6:
        return rng.randbytes(rng.randint(0, 64))
    if kind == 7:
        return b"\x00" * rng.randint(0, 4096)
    if kind == 8:
        return rng.choice([[], {}, "", b""])
    if kind == 9:
        return -rng.randint(2, 2**40)
    if kind == 10:
        return rng.randint(2**32, 2**64 - 1)
    if kind == 11:
        return [_odd_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == 12:
        return {str(_odd_value(rng, depth + 1))[:20]: _odd_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return [{"name": TOPIC, "partitions": [_odd_value(rng, depth + 1)]}]


def _mutate(rng: random.Random, value: Any, depth: int = 0) -> Any:
    """``value`` with one place changed: a field replaced, removed or added, deep or shallow."""
    if isinstance(value, dict) and value and depth < 6:
        key = rng.choice(list(value))
        out = dict(value)
        action = rng.randrange(6)
        if action == 0:
            del out[key]
        elif action == 1:
            out[rng.choice(["extra", "", key + "_", 7])] = _odd_value(rng)
        elif action == 2:
            out[key] = _odd_value(rng)
        else:
            out[key] = _mutate(rng, out[key], depth + 1)
        return out
    if isinstance(value, list) and value and depth < 6:
        out = list(value)
        i = rng.randrange(len(out))
        action = rng.randrange(5)
        if action == 0:
            out[i] = _odd_value(rng)
        elif action == 1:
            out.extend(out * rng.randint(1, 50))  # many copies of a valid entry
        else:
            out[i] = _mutate(rng, out[i], depth + 1)
        return out
    if isinstance(value, bytes) and value and rng.random() < 0.5:
        data = bytearray(value)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    return _odd_value(rng)


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _header(api_key: int, version: int, correlation_id: int) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"fuzz"
    return header + b"\x00" if request_header_version(BROKER_API[api_key][0], version) == 2 else header


def _encoded(rng: random.Random, api_key: int, version: int, body: Any) -> bytes:
    """``body`` with one value changed and still encodable at ``version`` (a few tries; else
    ``body`` as it is): what the decoder passes and a handler must cope with."""
    encode = encoder(BROKER_API[api_key][0], version)
    for _ in range(8):
        try:
            return encode(_mutate(rng, body))
        except CodecError:
            pass
    return encode(body)


def make_input(rng: random.Random, seeds: dict[int, Any], correlation_id: int) -> tuple[bytes, tuple[int, int] | None]:
    """One frame (or not quite a frame) to send, with the (api key, version) it asks at (None
    when the header itself is fuzzed: an answer cannot be read then, only counted)."""
    kind = rng.random()
    api_key = rng.choice(list(seeds))
    versions = BROKER_API[api_key][0].versions()
    version = rng.randrange(versions.start, versions.stop)
    header = _header(api_key, version, correlation_id)
    if kind < 0.45:  # a known API, one value changed within its type: it reaches the handler
        return _frame(header + _encoded(rng, api_key, version, seeds[api_key])), (api_key, version)
    body = encoder(BROKER_API[api_key][0], version)(seeds[api_key])
    if kind < 0.65:  # a valid encoding with bytes changed: it reaches the decoder
        data = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        return _frame(header + bytes(data)), (api_key, version)
    if kind < 0.75:  # cut short, or bytes added after the body
        cut = body[:rng.randrange(len(body))] if body and rng.random() < 0.5 else body + rng.randbytes(rng.randint(1, 8))
        return _frame(header + cut), (api_key, version)
    if kind < 0.85:  # a fuzzed header: api key, version, client id length
        fields = [api_key, version, correlation_id, 4]
        i = rng.randrange(4)
        fields[i] = rng.choice([-1, 0, 255, 2**15 - 1, -2**15, rng.randrange(-2**15, 2**15)]) if i != 2 \
            else rng.randrange(-2**31, 2**31)
        return _frame(struct.pack(">hhih", *fields) + b"fuzz" + body), None
    if kind < 0.95:  # random bytes in a well-sized frame (a zero first byte now and then)
        data = rng.randbytes(rng.randint(0, 200))
        return _frame((b"\x00" + data[1:]) if data and rng.random() < 0.5 else data), None
    # a length that lies (too long: the frame never completes; too short: garbage follows)
    payload = header + body
    lie = rng.choice([len(payload) + rng.randint(1, 100), max(0, len(payload) - rng.randint(1, 10)), 2**31 - 1, 0])
    return struct.pack(">I", lie) + payload, None


@dataclass
class FuzzResult:
    seed: int
    inputs: int = 0
    outcomes: Counter = field(default_factory=Counter)  # answered / closed / silent
    error_codes: Counter = field(default_factory=Counter)  # in the answers (each entry's)
    crashed: bool = False
    elapsed_s: float = 0.0

    def summary(self) -> str:
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(self.error_codes.items()))
        return (f"seed {self.seed}: {self.inputs} inputs in {self.elapsed_s:.1f} s; "
                f"{dict(self.outcomes)}; error codes {{{codes}}}; crashed: {self.crashed}")


def _outcome(sock: socket.socket, answer_timeout_s: float,
             expected: tuple[int, int] | None) -> tuple[str, list[int]]:
    sock.settimeout(answer_timeout_s)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return ("closed", []) if len(data) < 4 else ("answered", _codes(data, expected))
            data += chunk
            if len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", data[:4])[0]:
                return "answered", _codes(data, expected)
    except socket.timeout:
        return ("silent", []) if len(data) < 4 else ("answered", _codes(data, expected))
    except ConnectionError:
        return "closed", []


def _codes(data: bytes, expected: tuple[int, int] | None) -> list[int]:
    """Every error code in an answer (none when it cannot be read: it is still an answer)."""
    if expected is None:
        return []
    try:
        _, body = decode_kafka_response(data[4:4 + struct.unpack(">I", data[:4])[0]], *expected)
    except FrameError:
        return []
    codes: list[int] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("error_code"), int):
                codes.append(value["error_code"])
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)
    walk(body)
    return codes


def _connect(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=5)
    # Closed with a reset, not FIN: a million connections would otherwise leave the client's
    # ephemeral ports in TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return sock


def run(address: str, seed: int, inputs: int, *, alive: Callable[[], bool],
        answer_timeout_s: float = 0.5, progress: Callable[[FuzzResult], None] | None = None,
        progress_every: int = 10_000) -> FuzzResult:
    """Send ``inputs`` fuzzed frames to the broker at ``address``. A connection is reused while
    the broker answers on it; after anything else the next input gets a new one."""
    rng = random.Random(seed)
    host, _, port_text = address.rpartition(":")
    port = int(port_text)
    result = FuzzResult(seed)
    began = time.monotonic()
    seeds = valid_bodies(rng)
    sock: socket.socket | None = None
    try:
        for n in range(inputs):
            if n % 500 == 0:
                seeds = valid_bodies(rng)  # fresh batches now and then
            data, expected = make_input(rng, seeds, n)
            # A frame whose length lies leaves the stream out of step: its connection is not
            # reused, and a frame that never completes is not waited for long.
            lying = struct.unpack(">I", data[:4])[0] != len(data) - 4
            try:
                if sock is None:
                    sock = _connect(host, port)
                sock.sendall(data)
                outcome, codes = _outcome(sock, LIE_TIMEOUT_S if lying else answer_timeout_s, expected)
            except OSError:
                outcome, codes = "closed", []
            if (outcome != "answered" or lying) and sock is not None:
                sock.close()
                sock = None
            result.inputs += 1
            result.outcomes[outcome] += 1
            result.error_codes.update(codes)
            if n % 200 == 0 and not alive():
                result.crashed = True
                break
            if progress is not None and result.inputs % progress_every == 0:
                result.elapsed_s = time.monotonic() - began
                progress(result)
    finally:
        if sock is not None:
            sock.close()
    result.crashed = result.crashed or not alive()
    result.elapsed_s = time.monotonic() - began
    return result
