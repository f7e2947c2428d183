"""A broker's requests to the active controller (BrokerRegistration, BrokerHeartbeat,
AlterPartition, AllocateProducerIds, forwarded admin requests).

Requests go in Kafka's protocol at the versions in ``KAFKA_VERSIONS``; their answers are
Kafka's bodies, whose whole-request error (the top-level ``error_code``) ``request`` returns as the
code. It remembers the active controller and follows NOT_CONTROLLER answers: a Kafka answer has
no field naming the active controller, so the channel asks the controller that refused for
DescribeQuorum and goes on to the leader's CONTROLLER listener (``controller.rpc.proxies`` first). On a network error it tries the
next bootstrap controller. Every call has a deadline (``timeout_ms``) and a bounded number of
attempts.
"""
from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
import time
from typing import Any, Awaitable, Callable, Final, Sequence

from raftka.common import errors
from raftka.common.api import ApiKey
from raftka.common.errors import RaftkaError, RequestTimedOutError
from raftka.broker.network import PeerConnection
from raftka.common.messages.controller import (
    DESCRIBE_QUORUM_BODY, NEWEST_VERSIONS, answer_error, node_listener, quorum_partition,
)
from raftka.common.sasl import SaslClientSettings
from raftka.common.transport import Connection

log = logging.getLogger(__name__)

ATTEMPTS_MAX = 50
RETRY_BACKOFF_MS = 50
ATTEMPT_TIMEOUT_MS_MAX = 5000
FRAME_BYTES_MAX = 104_857_600

# api key -> the Kafka version the broker sends it at (the newest whose fields Raftka fills
# honestly).
KAFKA_VERSIONS: Final[dict[int, int]] = {
    **NEWEST_VERSIONS,
    # Forwarded admin requests: a client's request, decoded at its version, is re-encoded at these
    # (the newest declared; fields its version lacks carry their declared defaults) and the answer
    # goes back encoded at the client's version (fields that version lacks are left out).
    ApiKey.CREATE_TOPICS: 7, ApiKey.DELETE_TOPICS: 6, ApiKey.DESCRIBE_CONFIGS: 4, ApiKey.ALTER_CONFIGS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1, ApiKey.CREATE_PARTITIONS: 3, ApiKey.ELECT_LEADERS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0, ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
}


class _InDoubt(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ControllerChannel:
    """A broker's client of the active controller (see the module docstring)."""
    def __init__(self, bootstrap: Sequence[str], *, timeout_ms: int = 10_000, client_id: str = "raftka-broker",
                 proxies: dict[int, str] | None = None, ssl: "ssl_module.SSLContext | None" = None,
                 sasl: SaslClientSettings | None = None) -> None:
        assert bootstrap, "at least one controller address"
        self.bootstrap = list(bootstrap)
        self.timeout_ms = timeout_ms
        self.client_id = client_id
        self.active: str | None = None
        self._next = 0
        self.proxies = dict(proxies or {})  # controller.rpc.proxies: controller id -> address to dial
        self.ssl = ssl  # the controller listener is SSL / SASL_SSL
        self.sasl = sasl  # it is SASL_*: every connection logs in first (sasl.mechanism.controller.protocol)
        self._connections: dict[str, PeerConnection] = {}  # one persistent connection per controller
        # Called when a request on a persistent connection failed and dropped it: the broker then
        # heartbeats at once on a new one, so the active controller (which fences a broker whose
        # heartbeat connection closed and stays silent for broker.session.disconnect.grace.ms)
        # hears from it again in time.
        self.on_disconnect: Callable[[], None] | None = None

    def connected_since(self) -> float | None:
        """When the persistent connection to the active controller was opened, or None while
        there is no open one (closed by either end, or no active controller known)."""
        connection = self._connections.get(self.active) if self.active else None
        return connection.open_since() if connection is not None else None

    async def _call(self, address: str, api_key: int, body: Any, timeout_ms: int) -> tuple[int, Any]:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = PeerConnection(address, client_id=self.client_id,
                                                                     max_frame_bytes=FRAME_BYTES_MAX,
                                                                     kafka_versions=KAFKA_VERSIONS,
                                                                     ssl=self.ssl, sasl=self.sasl)
        # A timeout closes the connection (a paused controller must not leave later requests
        # queued behind answers that may never come); the next call reopens it after a backoff.
        _, out = await connection.request(api_key, body, timeout_ms=timeout_ms)
        return answer_error(out), out

    async def _call_once(self, address: str, api_key: int, body: Any, timeout_ms: int) -> tuple[int, Any]:
        """One request on its own connection. A failure to connect is safe to retry elsewhere;
        any failure after the request was sent is in doubt (raised as _InDoubt)."""
        host, _, port = address.rpartition(":")
        connection = await Connection.open(host, int(port), client_id=self.client_id,
                                           connect_timeout_ms=min(timeout_ms, ATTEMPT_TIMEOUT_MS_MAX),
                                           max_frame_bytes=FRAME_BYTES_MAX, request_timeout_ms=timeout_ms,
                                           kafka_versions=KAFKA_VERSIONS, ssl=self.ssl, sasl=self.sasl)
        try:
            _, out = await connection.request(api_key, body, timeout_ms=timeout_ms)
            return answer_error(out), out
        except RaftkaError as error:
            raise _InDoubt(error.code, f"{address}: {error.message}") from None
        finally:
            await connection.close()

    async def _active_endpoint(self, address: str, timeout_ms: int) -> str | None:
        """Where the active controller listens, after ``address`` answered NOT_CONTROLLER: the
        leader that ``address``'s DescribeQuorum names (None when it knows none or does not
        answer)."""
        try:
            _, quorum = await self._call(address, ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_BODY, timeout_ms)
        except RaftkaError:
            return None
        partition = quorum_partition(quorum or {})
        leader = partition["leader_id"] if partition is not None else -1
        if leader < 0:
            return None
        return self.proxies.get(leader) or node_listener(quorum, leader)

    async def close(self) -> None:
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()

    async def request(self, api_key: int, body: Any, *, timeout_ms: int | None = None,
                      retry_in_doubt: bool = True) -> tuple[int, Any]:
        """(error_code, body) of the active controller's answer. NOT_CONTROLLER answers and
        connection failures are retried until the deadline; then the last answer is returned, or
        RequestTimedOutError raised when nobody answered.

        ``retry_in_doubt``: also retry when an attempt timed out (REQUEST_TIMED_OUT answered or no
        answer in time), which is safe for idempotent requests (heartbeats, registration,
        AlterPartition with its epochs). Forwarded admin requests pass False: a CreateTopics that
        did commit must not come back TOPIC_ALREADY_EXISTS; its REQUEST_TIMED_OUT goes to the client.
        """
        deadline = time.monotonic() + (timeout_ms or self.timeout_ms) / 1000
        last: tuple[int, Any] | None = None
        last_error: RaftkaError | None = None
        for _ in range(ATTEMPTS_MAX):
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            address = self.active or self.bootstrap[self._next % len(self.bootstrap)]
            try:
                if retry_in_doubt:
                    code, out = await self._call(address, api_key, body, min(remaining_ms, ATTEMPT_TIMEOUT_MS_MAX))
                else:
                    code, out = await self._call_once(address, api_key, body, remaining_ms)
            except _InDoubt as doubt:
                return doubt.code, {"error_message": f"{doubt.message}; the request may have taken effect"}
            except RaftkaError as error:  # RequestTimedOutError, NetworkExceptionError, ...
                last_error = error
                self.active = None
                self._next += 1
                if retry_in_doubt and self.on_disconnect is not None:
                    self.on_disconnect()
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
                continue
            if code == errors.NOT_CONTROLLER:
                last = (code, out)
                endpoint = await self._active_endpoint(address, min(remaining_ms, ATTEMPT_TIMEOUT_MS_MAX))
                if endpoint and endpoint != address:
                    self.active = endpoint
                else:
                    self.active = None
                    self._next += 1
                    await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
                continue
            if code == errors.REQUEST_TIMED_OUT and retry_in_doubt:  # in doubt, but idempotent
                last = (code, out)
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
                continue
            self.active = address
            return code, out
        if last is not None:
            return last
        raise RequestTimedOutError(f"no controller answered within {timeout_ms or self.timeout_ms} ms"
                                   + (f" (last error: {last_error.message})" if last_error else ""))


class AlterPartitionManager:
    """Leaders' ISR changes to the active controller, batched as Kafka's AlterPartitionManager:
    every change submitted while no request is in flight goes out in the next AlterPartition
    request, with every other pending change (at most one request in flight), and each
    partition's answer settles its own future. A failed change (its own error code, or the
    whole request's) fails its future: the caller proposes again from its current state, and
    that change goes out in a later round.

    ``send(body)`` sends one AlterPartition body and returns (error_code, answer)
    (``ControllerChannel.request``); ``header()`` gives the request's ``broker_id`` and
    ``broker_epoch`` at the time it goes out.
    """

    def __init__(self, send: Callable[[dict], Awaitable[tuple[int, Any]]], header: Callable[[], dict]) -> None:
        self.send = send
        self.header = header
        # (topic id, partition index) -> (its item of the next request, its caller's future)
        self._pending: dict[tuple[str, int], tuple[dict, asyncio.Future]] = {}
        self._sender: asyncio.Task | None = None
        self.requests_sent = 0

    def submit(self, topic_id: str, item: dict) -> "asyncio.Future[dict]":
        """Queue one partition's change ``item`` ({partition_index, leader_epoch,
        new_isr_with_epochs, partition_epoch}); the future gives that partition's answer
        ({partition_index, error_code NONE, leader_id, leader_epoch, isr, partition_epoch}) or
        raises the error it was refused with. One change per partition at a time."""
        future: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        key = (topic_id, item["partition_index"])
        if key in self._pending:
            future.set_exception(errors.InvalidRequestError(
                f"topic id {topic_id} partition {key[1]}: an ISR change is already waiting to be sent"))
            return future
        self._pending[key] = (item, future)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_rounds(), name="alter-partition")
        return future

    async def _send_rounds(self) -> None:
        await asyncio.sleep(0)  # let the caller's tick queue the rest of its changes first
        while self._pending:
            batch, self._pending = self._pending, {}
            try:
                await self._send_round(batch)
            except BaseException as error:  # cancelled (close) or a bug: no caller waits forever
                for _, future in batch.values():
                    if not future.done():
                        future.set_exception(error if isinstance(error, Exception)
                                             else errors.NetworkExceptionError("the broker is shutting down"))
                if not isinstance(error, Exception):
                    raise

    async def _send_round(self, batch: dict[tuple[str, int], tuple[dict, asyncio.Future]]) -> None:
        by_topic: dict[str, list[dict]] = {}
        for (topic_id, _), (item, _) in batch.items():
            by_topic.setdefault(topic_id, []).append(item)
        body = {**self.header(), "topics": [{"topic_id": t, "partitions": items} for t, items in by_topic.items()]}
        self.requests_sent += 1
        log.info("AlterPartition: %d ISR change(s) of %d topic(s) in one request", len(batch), len(by_topic))
        try:
            code, out = await self.send(body)
        except RaftkaError as error:
            code, out = error.code, {"error_message": error.message}
        answers: dict[tuple[str, int], dict] = {}
        if code == errors.NONE:
            for topic in out.get("topics") or []:
                for answer in topic["partitions"]:
                    answers[(topic["topic_id"], answer["partition_index"])] = answer
        for key, (_, future) in batch.items():
            if future.done():
                continue
            answer = answers.get(key)
            if code != errors.NONE:
                future.set_exception(errors.error_for(code, f"AlterPartition refused: {errors.name_of(code)}"
                                                      + (f" ({out['error_message']})" if out.get("error_message") else "")))
            elif answer is None:
                future.set_exception(errors.error_for(errors.UNKNOWN_SERVER_ERROR,
                                                      "the AlterPartition answer left this partition out"))
            elif answer["error_code"] != errors.NONE:
                future.set_exception(errors.error_for(answer["error_code"],
                                                      f"AlterPartition refused: {errors.name_of(answer['error_code'])}"))
            else:
                future.set_result(answer)

    async def close(self) -> None:
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()
            try:
                await self._sender
            except (asyncio.CancelledError, Exception):
                pass
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(errors.NetworkExceptionError("the broker is shutting down"))
        self._pending.clear()
