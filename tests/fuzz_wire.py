"""A seeded fuzzer of the broker's wire protocol (#hardening), shared by the bounded test in the
default suite and the long `-m soak` target (tests/test_fuzz.py).

Inputs are frames a hostile or broken client could send: valid requests of every API with one
field replaced by a value of another type or size, fields removed or added, random headers,
random msgpack, random bytes, and frames whose declared length lies. Each input goes to the
broker on a connection of its own; the outcome is counted as

    answered   a response frame came back (its error code is counted too)
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

import msgpack

from raftka.common.api import ApiKey
from raftka.common.records import BatchBuilder

TOPIC = "fuzz"
LIE_TIMEOUT_S = 0.05  # how long an answer to a frame whose length lies is waited for


def _batch(rng: random.Random) -> bytes:
    builder = BatchBuilder(batch_size=1 << 16)
    for i in range(rng.randint(1, 5)):
        builder.append(1_000 + i, None, rng.randbytes(rng.randint(0, 40)))
    return builder.build()


def valid_bodies(rng: random.Random) -> dict[int, Any]:
    """One well-formed body per API a client may send a broker (the fuzzer's seeds)."""
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
        ApiKey.METADATA: {"topics": [TOPIC]},
        ApiKey.OFFSET_COMMIT: {"group_id": "g", "generation_id": -1, "member_id": "", "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]},
        ApiKey.OFFSET_FETCH: {"group_id": "g", "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        ApiKey.FIND_COORDINATOR: {"key": "g", "key_type": 0},
        ApiKey.JOIN_GROUP: {"group_id": "g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 1000,
                            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": b"m"}]},
        ApiKey.HEARTBEAT: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None},
        ApiKey.LEAVE_GROUP: {"group_id": "g", "members": [{"member_id": "m", "group_instance_id": None}]},
        ApiKey.SYNC_GROUP: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
                            "assignments": [{"member_id": "m", "assignment": b"a"}]},
        ApiKey.DESCRIBE_GROUPS: {"groups": ["g"]},
        ApiKey.LIST_GROUPS: {},
        ApiKey.API_VERSIONS: {},
        ApiKey.CREATE_TOPICS: {"topics": [{"name": "fz" + str(rng.randint(0, 3)), "num_partitions": 1,
                                           "replication_factor": 1, "configs": {}}], "timeout_ms": 1000},
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
        return rng.randint(2**32, 2**64 - 1)  # msgpack packs it unsigned
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


def make_input(rng: random.Random, seeds: dict[int, Any], correlation_id: int) -> bytes:
    """One frame (or not quite a frame) to send."""
    kind = rng.random()
    api_key = rng.choice(list(seeds))
    body = seeds[api_key]
    if kind < 0.70:  # a known API with a mutated body
        items: list[Any] = [int(api_key), 0, correlation_id, "fuzz", _mutate(rng, body)]
    elif kind < 0.80:  # a mutated header
        items = _mutate(rng, [int(api_key), 0, correlation_id, "fuzz", body])
        if not isinstance(items, list):
            items = [items]
    elif kind < 0.88:  # random msgpack
        items = [_odd_value(rng) for _ in range(rng.randint(0, 6))]
    elif kind < 0.95:  # random bytes in a well-sized frame
        return _frame(rng.randbytes(rng.randint(0, 200)))
    else:  # a length that lies (too long: the frame never completes; too short: garbage follows)
        payload = msgpack.packb([int(api_key), 0, correlation_id, "fuzz", body], use_bin_type=True)
        lie = rng.choice([len(payload) + rng.randint(1, 100), max(0, len(payload) - rng.randint(1, 10)),
                          2**31 - 1, 0])
        return struct.pack(">I", lie) + payload
    try:
        payload = msgpack.packb(items, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        payload = msgpack.packb([int(api_key), 0, correlation_id, "fuzz", {}], use_bin_type=True)
    return _frame(payload)


@dataclass
class FuzzResult:
    seed: int
    inputs: int = 0
    outcomes: Counter = field(default_factory=Counter)  # answered / closed / silent
    error_codes: Counter = field(default_factory=Counter)  # of the answered ones
    crashed: bool = False
    elapsed_s: float = 0.0

    def summary(self) -> str:
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(self.error_codes.items()))
        return (f"seed {self.seed}: {self.inputs} inputs in {self.elapsed_s:.1f} s; "
                f"{dict(self.outcomes)}; error codes {{{codes}}}; crashed: {self.crashed}")


def _outcome(sock: socket.socket, answer_timeout_s: float) -> tuple[str, int | None]:
    sock.settimeout(answer_timeout_s)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return ("closed", None) if len(data) < 4 else ("answered", _code(data))
            data += chunk
            if len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", data[:4])[0]:
                return "answered", _code(data)
    except socket.timeout:
        return ("silent", None) if len(data) < 4 else ("answered", _code(data))
    except ConnectionError:
        return "closed", None


def _code(data: bytes) -> int | None:
    try:
        response = msgpack.unpackb(data[4:4 + struct.unpack(">I", data[:4])[0]], raw=False)
        return int(response[1])
    except Exception:  # noqa: BLE001 - an answer we cannot read is still an answer
        return None


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
            data = make_input(rng, seeds, n)
            # A frame whose length lies leaves the stream out of step: its connection is not
            # reused, and a frame that never completes is not waited for long.
            lying = struct.unpack(">I", data[:4])[0] != len(data) - 4
            try:
                if sock is None:
                    sock = _connect(host, port)
                sock.sendall(data)
                outcome, code = _outcome(sock, LIE_TIMEOUT_S if lying else answer_timeout_s)
            except OSError:
                outcome, code = "closed", None
            if (outcome != "answered" or lying) and sock is not None:
                sock.close()
                sock = None
            result.inputs += 1
            result.outcomes[outcome] += 1
            if code is not None:
                result.error_codes[code] += 1
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
