"""A small, generic Raft client on pysyncobj: replicate opaque records into a state machine.

Kafka's RaftClient idea: this layer knows nothing about metadata. It replicates ``bytes`` records
in one total order to every voter and observer and hands each committed record, with its Raft
index, to a :class:`StateMachine`. Everything pysyncobj-specific stays in this module.

Roles
    voter     one of the quorum (``controller.quorum.voters``); votes, may lead.
    observer  a read-only member (``SyncObj(None, voters)``): receives the committed log and
              snapshots like a follower, never votes. Brokers follow metadata this way.

Threads (measured in shared/NOTES.md)
    pysyncobj runs every replicated method, every callback and every listener below on ONE tick
    thread. That thread dies when the thread that created the node exits, so a ``RaftClient`` must
    be created from the main thread (``__init__`` asserts it). ``StateMachine`` methods and the
    ``on_commit`` / ``on_leader_change`` listeners run on the tick thread: they must not block and
    must hand work to an asyncio loop with ``loop.call_soon_threadsafe``. ``submit()`` is the
    asyncio-side bridge (pysyncobj's ``callback=`` plus ``call_soon_threadsafe``); never use
    pysyncobj's ``sync=True`` on a loop (it blocks the loop; inside a callback it deadlocks).

Failures
    A record in flight during a leader change fails (pysyncobj: NOT_LEADER, LEADER_CHANGED,
    MISSING_LEADER, DISCARDED). ``submit`` raises :class:`NotControllerError` (retriable) for
    those and :class:`RequestTimedOutError` (retriable, outcome unknown: the record may still
    commit) on timeout. Either way callers retry, so records must be idempotent.

Durability
    Journal (``raft.journal``) and snapshot (``raft.snapshot``) live in ``log_dir``. pysyncobj
    writes the journal through mmap without fsync: it survives a process kill, not an OS crash.
    Snapshots are taken in-process (``useFork=False``) from ``StateMachine.snapshot()``.

Security
    The Raft port unpickles what it receives. A ``password`` (the cluster secret) makes pysyncobj
    check an HMAC (Fernet) before unpickling; it is always required, loopback included, and the
    client refuses to start without it (:class:`ConfigError`). The port listens on the node's
    own voters address (``bind_address`` overrides), never on every interface by default. A
    connection whose frames do not authenticate is dropped with one rate-limited log line.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.node import TCPNode
from pysyncobj.monotonic import monotonic as _raft_clock
from pysyncobj.syncobj import _RAFT_STATE

from raftka.common.errors import ConfigError, InvalidRequestError, NotControllerError, RequestTimedOutError
from raftka.common.ratelog import RateLimitedLog
from raftka.common.server_config import check_secret

log = logging.getLogger(__name__)

# Tuning measured in shared/NOTES.md: ~1-2 ms commits, ~0.5-0.7 s failover after kill -9.
RAFT_TUNING: Mapping[str, Any] = {
    "appendEntriesUseBatch": False,
    "connectionRetryTime": 0.2,
    # Election timeout. At 0.15-0.45 s a loaded 2-core box (load average 5) held tick threads up
    # 160-170 ms and an election followed even with pre-vote (the leader went unheard as long);
    # 0.3-0.6 s keeps a margin of about 2 and controller failover under 1 s.
    "raftMinTimeout": 0.3,
    "raftMaxTimeout": 0.6,
    "appendEntriesPeriod": 0.04,
    "connectionTimeout": 1.0,
    "useFork": False,
    # A leader cut off from the majority steps down after this (pysyncobj's default is 30 s),
    # so a partitioned old leader answers NOT_CONTROLLER instead of timing callers out.
    "leaderFallbackTimeout": 3.0,
}
# Bound on records queued inside pysyncobj before submit() fails with a retriable error.
COMMANDS_QUEUE_MAX = 20_000
# Largest record this layer accepts; the metadata log carries small records.
RECORD_BYTES_MAX = 1_048_576
SUBMIT_TIMEOUT_MS_MAX = 300_000

_RETRY_ELSEWHERE = {
    FAIL_REASON.MISSING_LEADER: "no leader (election in progress)",
    FAIL_REASON.DISCARDED: "discarded by a new leader",
    FAIL_REASON.NOT_LEADER: "leader changed before commit",
    FAIL_REASON.LEADER_CHANGED: "leader changed before commit",
    FAIL_REASON.REQUEST_DENIED: "request denied by the Raft layer",
}


class StateMachine(Protocol):
    """What the Raft layer replicates into. Called on the tick thread only, in log order.

    ``apply`` must be deterministic (same records, same results on every node: no clock reads,
    no randomness) and must not raise for bad records: return an error result instead, because a
    raised exception would be swallowed on one node and not on another.
    """

    def apply(self, record: bytes, index: int) -> Any: ...

    def snapshot(self) -> bytes: ...

    def restore(self, snapshot: bytes) -> None: ...


@dataclass(frozen=True)
class VoterStatus:
    node_id: int
    address: str
    connected: bool | None  # None: this node itself
    match_index: int | None  # known only on the leader
    next_index: int | None
    # Monotonic seconds of the voter's last answer to the leader's AppendEntries (a Raft
    # follower's "fetch"; until the first one, when this leader was elected); known only on the
    # leader, None for the leader itself.
    last_response_monotonic: float | None = None


@dataclass(frozen=True)
class RaftStatus:
    node_id: int | None  # None for an observer
    role: str  # "leader" | "candidate" | "follower" | "observer"
    term: int
    leader_id: int | None
    leader_address: str | None
    commit_index: int
    last_applied_index: int
    log_length: int
    has_quorum: bool
    voters: tuple[VoterStatus, ...] = ()
    observers: tuple[str, ...] = ()
    ready: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["voters"] = [dict(v.__dict__) for v in self.voters]
        out["observers"] = list(self.observers)
        return out


@dataclass
class RaftConfig:
    """Everything a RaftClient needs. ``node_id=None`` makes an observer."""

    voters: dict[int, str]  # node id -> "host:port" of its Raft listener
    node_id: int | None
    log_dir: str | None  # None: journal and snapshots in memory (observers, tests)
    password: str | None = None
    tuning: dict[str, Any] = field(default_factory=dict)  # overrides of RAFT_TUNING
    # node id -> "host:port" to dial instead of its voters address (a proxy in chaos tests). The
    # voter keeps its identity (the voters address) on the wire; only the TCP target changes.
    dial: dict[int, str] = field(default_factory=dict)
    # Snapshot (and truncate the journal) after this many entries or seconds, or when asked
    # (request_snapshot).
    snapshot_min_entries: int = 5000
    snapshot_min_interval_s: float = 300.0
    # host:port the Raft port listens on; None: this node's voters address (pysyncobj's own
    # default would be every interface, 0.0.0.0, whatever the voters address says).
    bind_address: str | None = None


class _RaftNode(SyncObj):
    """pysyncobj's node with what keeps a busy box from deposing a healthy leader.

    1. **Read before the deadline check.** pysyncobj's tick checks the election deadline first
       and reads its sockets last. When the tick thread was held up (a busy box, the GIL held
       by the controller's event loop), the leader's heartbeats wait unread while the deadline
       looks missed. Reading first lets them reset it.
    2. **Pre-vote** (Raft thesis, section 9.6; pysyncobj has none). A voter whose deadline
       passed first asks the others whether they would vote for it, without raising its term.
       A voter that heard from a leader within raftMinTimeout, or whose log is newer, says no;
       a leader always says no. Only with a majority of yeses does pysyncobj's election run.
       So one voter held up past its deadline (the stability run saw it at load 5) no longer
       raises the term and makes the leader step down; its next heartbeat brings it back.
       A leader that is really gone sends nothing, the others say yes, and failover costs one
       round trip more.
    3. **Held-up ticks are logged** (rate-limited), with how long the thread was held up, so a
       leader change on a busy box can be told from a fault.

    Everything here is pysyncobj 0.3.x's private state (pinned; tests/test_raft.py checks it),
    timed with pysyncobj's own clock (CLOCK_MONOTONIC_RAW, which drifts from time.monotonic()).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._leader_heard_at = 0.0  # monotonic: last append_entries from a leader of our term or newer
        self._pre_vote: dict[str, Any] | None = None  # {"round", "votes", "term", "started"} while one is open
        self._pre_vote_won: int | None = None  # won at this term: the next deadline runs pysyncobj's election
        self._pre_vote_rounds = 0
        self._last_tick_at = 0.0
        super().__init__(*args, **kwargs)

    # -- the tick ------------------------------------------------------------------------------
    def _onTick(self, timeToWait: float = 0.0) -> None:
        now = _raft_clock()
        conf = self._getConf()
        if self._last_tick_at and now - self._last_tick_at > conf.raftMinTimeout / 2:
            _held_up.warning("raft-tick", "the Raft tick thread was held up %.0f ms (the election timeout is "
                             "%.0f-%.0f ms): a busy box, or the GIL held by this process", (now - self._last_tick_at)
                             * 1000, conf.raftMinTimeout * 1000, conf.raftMaxTimeout * 1000)
        self._last_tick_at = now
        self._poller.poll(0)  # non-blocking: handle whatever is already in the buffers
        if self._SyncObj__selfNode is not None:  # type: ignore[attr-defined]
            self._maybe_pre_vote(now)
        super()._onTick(timeToWait)

    def _maybe_pre_vote(self, now: float) -> None:
        """When pysyncobj's deadline has passed, run a pre-vote instead of its election."""
        term = self._SyncObj__raftCurrentTerm  # type: ignore[attr-defined]
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:  # type: ignore[attr-defined]
            self._pre_vote = self._pre_vote_won = None
            return
        if (self._SyncObj__raftElectionDeadline >= now  # type: ignore[attr-defined]
                or not self._SyncObj__connectedToAnyone()  # type: ignore[attr-defined]
                or self._SyncObj__transferInProgress):  # type: ignore[attr-defined]  (the leader asked us)
            return
        if self._pre_vote_won == term:
            self._pre_vote_won = None  # this tick's election is the one the pre-vote won
            return
        # Push pysyncobj's deadline on, so this tick runs no election; the next pre-vote goes out
        # then if this one is not won.
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()  # type: ignore[attr-defined]
        self._pre_vote_rounds += 1
        self._pre_vote = {"round": self._pre_vote_rounds, "votes": 1, "term": term, "started": now}
        self._pre_vote_won = None
        if self._pre_vote["votes"] > (len(self._SyncObj__otherNodes) + 1) / 2:  # type: ignore[attr-defined]
            self._win_pre_vote()
            return
        message = {"type": PRE_VOTE, "round": self._pre_vote_rounds, "term": term + 1,
                   "last_log_index": self._SyncObj__getCurrentLogIndex(),  # type: ignore[attr-defined]
                   "last_log_term": self._SyncObj__getCurrentLogTerm()}  # type: ignore[attr-defined]
        for node in self._SyncObj__otherNodes:  # type: ignore[attr-defined]
            self._SyncObj__transport.send(node, message)  # type: ignore[attr-defined]

    def _win_pre_vote(self) -> None:
        open_, self._pre_vote = self._pre_vote, None
        assert open_ is not None
        # Won too late: since it began, this voter voted in (or learned of) a newer term, or heard
        # from a leader. Electing now would depose that leader.
        if (open_["term"] != self._SyncObj__raftCurrentTerm  # type: ignore[attr-defined]
                or self._leader_heard_at >= open_["started"]
                or self._SyncObj__raftState == _RAFT_STATE.LEADER):  # type: ignore[attr-defined]
            return
        self._pre_vote_won = open_["term"]
        self._SyncObj__raftElectionDeadline = 0  # type: ignore[attr-defined]  (the next tick elects)

    # -- messages ------------------------------------------------------------------------------
    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == PRE_VOTE:
            self._answer_pre_vote(node, message)
            return
        if kind == PRE_VOTE_RESPONSE:
            open_ = self._pre_vote
            if open_ is not None and message.get("round") == open_["round"] and message.get("granted"):
                open_["votes"] += 1
                if open_["votes"] > (len(self._SyncObj__otherNodes) + 1) / 2:  # type: ignore[attr-defined]
                    self._win_pre_vote()
            return
        if kind == "append_entries" and message.get("term", -1) >= self._SyncObj__raftCurrentTerm:  # type: ignore[attr-defined]
            self._leader_heard_at = _raft_clock()
            self._pre_vote = self._pre_vote_won = None  # a leader is there
        super()._SyncObj__onMessageReceived(node, message)  # type: ignore[misc]

    def _answer_pre_vote(self, node: Any, message: dict) -> None:
        conf = self._getConf()
        my_term = self._SyncObj__getCurrentLogTerm()  # type: ignore[attr-defined]
        my_index = self._SyncObj__getCurrentLogIndex()  # type: ignore[attr-defined]
        their_term, their_index = message.get("last_log_term", -1), message.get("last_log_index", -1)
        granted = (self._SyncObj__raftState != _RAFT_STATE.LEADER  # type: ignore[attr-defined]
                   and _raft_clock() - self._leader_heard_at >= conf.raftMinTimeout
                   and (their_term > my_term or (their_term == my_term and their_index >= my_index)))
        self._SyncObj__transport.send(node, {"type": PRE_VOTE_RESPONSE,  # type: ignore[attr-defined]
                                             "round": message.get("round"), "granted": granted})


# The pre-vote's message types (pysyncobj ignores types it does not know).
PRE_VOTE = "raftka_pre_vote"
PRE_VOTE_RESPONSE = "raftka_pre_vote_response"
_held_up = RateLimitedLog(log)


class _LoggingEncryptor:
    """pysyncobj's Fernet, with one rate-limited log line for a peer whose frames do not
    authenticate (a wrong secret, or an attacker): pysyncobj drops such a connection silently."""

    def __init__(self, fernet: Any) -> None:
        self._fernet = fernet

    def _rejected(self, what: str) -> None:
        _rejected_peers.warning("raft-auth", "dropped a connection to the Raft port: %s (a peer with another "
                                "controller.quorum.secret, or not a Raft peer)", what)

    def extract_timestamp(self, token: bytes) -> int:
        try:
            return self._fernet.extract_timestamp(token)
        except Exception:
            self._rejected("a frame that is not a token of this cluster's secret")
            raise

    def decrypt(self, token: bytes, *args: Any) -> bytes:
        try:
            return self._fernet.decrypt(token, *args)
        except Exception:
            self._rejected("a frame that does not authenticate with this cluster's secret")
            raise

    def __getattr__(self, name: str) -> Any:  # encrypt and the rest: Fernet's own
        return getattr(self._fernet, name)


_rejected_peers = RateLimitedLog(log)


def _log_rejected_peers(node: SyncObj) -> None:
    # pysyncobj keeps its encryptor private and hands it to each connection it accepts or makes
    # (pinned pysyncobj 0.3.x; checked by tests/test_raft.py, which sends it a wrong-secret frame).
    fernet = getattr(node, "_SyncObj__encryptor", None)
    if fernet is not None and not isinstance(fernet, _LoggingEncryptor):
        node._SyncObj__encryptor = _LoggingEncryptor(fernet)  # type: ignore[attr-defined]


class _DialNode(TCPNode):
    """A voter whose identity is its voters address but who is reached at ``dial_address``.

    pysyncobj dials ``node.ip``/``node.port`` and identifies peers by ``node.address``.
    """

    def __init__(self, address: str, dial_address: str) -> None:
        super().__init__(address)
        self._dial_host, port = dial_address.rsplit(":", 1)
        self._dial_port = int(port)

    @property
    def ip(self) -> str:
        return globalDnsResolver().resolve(self._dial_host)

    @property
    def port(self) -> int:
        return self._dial_port


class _Applier(SyncObjConsumer):
    """pysyncobj consumer: the only replicated method appends one opaque record."""

    def __init__(self, client: "RaftClient") -> None:
        super().__init__()
        self._client = client

    @replicated
    def append(self, record: bytes) -> Any:
        return self._client._apply(record)

    def _serialize(self) -> Any:
        return self._client._state_machine.snapshot()

    def _deserialize(self, data: Any) -> None:
        self._client._restore(data)


class RaftClient:
    """One Raft member (voter or observer) replicating records into ``state_machine``.

    Listeners (tick thread): ``on_commit(index, record, result)`` after each applied record;
    ``on_leader_change(leader_id, term)`` when the known leader or term changes (leader_id None:
    no leader known); ``on_restore(last_applied_index)`` after a snapshot replaced the state.
    """

    def __init__(self, config: RaftConfig, state_machine: StateMachine, *,
                 on_commit: Callable[[int, bytes, Any], None] | None = None,
                 on_leader_change: Callable[[int | None, int], None] | None = None,
                 on_restore: Callable[[int], None] | None = None) -> None:
        assert threading.current_thread() is threading.main_thread(), \
            "create RaftClient in the main thread: pysyncobj's tick thread dies with its creator"
        if config.node_id is not None and config.node_id not in config.voters:
            raise ConfigError("node.id", f"{config.node_id} is not among controller.quorum.voters "
                                         f"({', '.join(map(str, sorted(config.voters)))})")
        check_secret(config.voters, config.password)
        self.config = config
        self._state_machine = state_machine
        self.on_commit = on_commit
        self.on_leader_change = on_leader_change
        self.on_restore = on_restore
        self._address_to_id = {address: node_id for node_id, address in config.voters.items()}
        self._last_leader: tuple[str | None, int] = (None, -1)
        # A leader newly known (another node, or a new term): Kafka's NewActiveControllersCount
        # for /metrics; read from other threads, written on the tick thread only.
        self.leader_changes = 0
        self.observer = config.node_id is None

        journal = snapshot = None
        if config.log_dir is not None:
            os.makedirs(config.log_dir, exist_ok=True)
            journal = os.path.join(config.log_dir, "raft.journal")
            snapshot = os.path.join(config.log_dir, "raft.snapshot")
        conf = SyncObjConf(
            **{**RAFT_TUNING, **config.tuning},
            password=config.password,
            journalFile=journal,
            fullDumpFile=snapshot,
            commandsQueueSize=COMMANDS_QUEUE_MAX,
            logCompactionMinEntries=config.snapshot_min_entries,
            logCompactionMinTime=config.snapshot_min_interval_s,
            dynamicMembershipChange=False,
            bindAddress=None if self.observer else (config.bind_address or config.voters[config.node_id]),
        )
        self._applier = _Applier(self)
        self_address = None if self.observer else config.voters[config.node_id]
        others = [_DialNode(a, config.dial[n]) if n in config.dial else a
                  for n, a in sorted(config.voters.items()) if n != config.node_id]
        self._node = _RaftNode(self_address, others, conf=conf, consumers=[self._applier])
        _log_rejected_peers(self._node)
        self._node.addOnTickCallback(self._on_tick)

    # -- tick thread -------------------------------------------------------------------------

    def _apply(self, record: bytes) -> Any:
        # pysyncobj increments lastApplied after the apply returns: this entry is the next one.
        index = self._node.raftLastApplied + 1
        result = self._state_machine.apply(record, index)
        if self.on_commit is not None:
            try:
                self.on_commit(index, record, result)
            except Exception:  # a listener's bug must not stop replication
                log.exception("on_commit listener failed at index %d", index)
        return result

    def _restore(self, data: Any) -> None:
        self._state_machine.restore(data)
        if self.on_restore is not None:
            try:
                # Not yet updated by pysyncobj at this point; listeners read status() later.
                self.on_restore(self._node.raftLastApplied)
            except Exception:
                log.exception("on_restore listener failed")

    def _on_tick(self) -> None:
        leader = self._node._getLeader()
        current = (leader.id if leader is not None else None, self._node.raftCurrentTerm)
        if current != self._last_leader:
            self._last_leader = current
            if current[0] is not None:
                self.leader_changes += 1
            if self.on_leader_change is not None:
                try:
                    self.on_leader_change(self._address_to_id.get(current[0]) if current[0] else None,
                                          current[1])
                except Exception:
                    log.exception("on_leader_change listener failed")

    # -- any thread --------------------------------------------------------------------------

    def submit_with_callback(self, record: bytes, callback: Callable[[Any, Exception | None], None]) -> None:
        """Append ``record``; ``callback(result, error)`` runs on the tick thread when it commits
        (error None) or fails (a retriable RaftkaError)."""
        if not isinstance(record, (bytes, bytearray)):
            raise InvalidRequestError(f"a Raft record must be bytes, got {type(record).__name__}")
        if len(record) > RECORD_BYTES_MAX:
            raise InvalidRequestError(f"Raft record of {len(record)} bytes exceeds {RECORD_BYTES_MAX}")

        def done(result: Any, reason: int) -> None:
            callback(result, None if reason == FAIL_REASON.SUCCESS else _error_for(reason))

        self._applier.append(bytes(record), callback=done)

    async def submit(self, record: bytes, timeout_ms: int) -> Any:
        """Append ``record`` and wait (on the running loop) for its commit; returns apply's result.

        Raises NotControllerError when leadership changed or is unknown, RequestTimedOutError
        after ``timeout_ms`` (the record may still commit later). Both are retriable.
        """
        if not 0 < timeout_ms <= SUBMIT_TIMEOUT_MS_MAX:
            raise InvalidRequestError(f"timeout_ms must be in (0, {SUBMIT_TIMEOUT_MS_MAX}], got {timeout_ms}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any, error: Exception | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def on_done(result: Any, error: Exception | None) -> None:
            try:
                loop.call_soon_threadsafe(settle, result, error)
            except RuntimeError:
                pass  # loop closed: nobody waits any more

        self.submit_with_callback(record, on_done)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise RequestTimedOutError(
                f"Raft record not committed within {timeout_ms} ms (it may still commit)") from None

    def submit_sync(self, record: bytes, timeout_ms: int) -> Any:
        """Blocking submit for plain threads (tests, tools). Never call on an asyncio loop or
        from a listener: both would deadlock or stall."""
        if not 0 < timeout_ms <= SUBMIT_TIMEOUT_MS_MAX:
            raise InvalidRequestError(f"timeout_ms must be in (0, {SUBMIT_TIMEOUT_MS_MAX}], got {timeout_ms}")
        done = threading.Event()
        box: list[Any] = [None, None]

        def on_done(result: Any, error: Exception | None) -> None:
            box[0], box[1] = result, error
            done.set()

        self.submit_with_callback(record, on_done)
        if not done.wait(timeout_ms / 1000):
            raise RequestTimedOutError(f"Raft record not committed within {timeout_ms} ms (it may still commit)")
        if box[1] is not None:
            raise box[1]
        return box[0]

    def request_snapshot(self) -> None:
        """Snapshot (and truncate the journal) at the next tick, before the entry or time bound
        is reached: the state machine's own bound (bytes of records) asks for it. Any thread."""
        self._node.forceLogCompaction()

    @property
    def leader_id(self) -> int | None:
        leader = self._node._getLeader()
        return self._address_to_id.get(leader.id) if leader is not None else None

    @property
    def is_leader(self) -> bool:
        """Leader AND has applied its own term's first entry (pysyncobj's no-op), so its state
        includes every record committed by earlier leaders: only then may it decide (Kafka's
        active controller waits the same way)."""
        leader = self._node._getLeader()
        if self.observer or leader is None or leader.id != self.config.voters[self.config.node_id]:
            return False
        noop_index = getattr(self._node, "_SyncObj__noopIDx", None)
        return noop_index is not None and self._node.raftLastApplied >= noop_index

    @property
    def term(self) -> int:
        return self._node.raftCurrentTerm

    @property
    def last_applied_index(self) -> int:
        return self._node.raftLastApplied

    def is_ready(self) -> bool:
        """True once this node has applied everything the leader had committed when we joined."""
        return self._node.isReady()

    def status(self) -> RaftStatus:
        raw: dict[str, Any] = {}
        responses: dict[str, float] = {}  # voter address -> its last answer (leader only)
        for _ in range(5):  # read from another thread: a dict may change size under us
            try:
                raw = self._node.getStatus()
                responses = {getattr(node, "id", None): at for node, at in
                             dict(getattr(self._node, "_SyncObj__lastResponseTime", {})).items()}
                break
            except RuntimeError:
                time.sleep(0.001)
        leader = raw.get("leader")
        leader_address = leader.id if leader is not None else None
        state = raw.get("state", 0)
        role = "observer" if self.observer else {0: "follower", 1: "candidate", 2: "leader"}.get(state, "follower")
        voters = []
        self_address = None if self.observer else self.config.voters[self.config.node_id]
        for node_id, address in sorted(self.config.voters.items()):
            is_self = address == self_address
            connected = None if is_self else raw.get(f"partner_node_status_server_{address}", 0) == 2
            match = raw.get(f"match_idx_server_{address}")
            nxt = raw.get(f"next_node_idx_server_{address}")
            if is_self:
                # pysyncobj tracks no match index for itself: its own log end is the answer.
                match = self._log_end_index()
            answered = responses.get(address) if role == "leader" and not is_self else None
            voters.append(VoterStatus(node_id, address, connected, match, nxt, answered))
        observers = tuple(sorted(k[len("readonly_node_status_server_"):]
                                 for k in raw if k.startswith("readonly_node_status_server_")))
        return RaftStatus(
            node_id=self.config.node_id,
            role=role,
            term=int(raw.get("raft_term", 0)),
            leader_id=self._address_to_id.get(leader_address) if leader_address else None,
            leader_address=leader_address,
            commit_index=int(raw.get("commit_idx", 0)),
            last_applied_index=int(raw.get("last_applied", 0)),
            log_length=int(raw.get("log_len", 0)),
            has_quorum=bool(raw.get("has_quorum", False)),
            voters=tuple(voters),
            observers=observers,
            ready=self._node.isReady(),
        )

    def _log_end_index(self) -> int | None:
        getter = getattr(self._node, "_SyncObj__getCurrentLogIndex", None)
        try:
            return int(getter()) if getter is not None else None
        except Exception:  # journal being compacted under us: unknown this instant
            return None

    def wait_ready(self, timeout_ms: int) -> bool:
        deadline = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < deadline:
            if self.is_ready():
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        """Stop the tick thread and close the Raft port. Idempotent."""
        try:
            self._node.destroy()
        except Exception:
            log.exception("raft node destroy failed")


def _error_for(reason: int) -> Exception:
    if reason in _RETRY_ELSEWHERE:
        return NotControllerError(f"Raft record not committed: {_RETRY_ELSEWHERE[reason]}; retry")
    if reason == FAIL_REASON.QUEUE_FULL:
        return RequestTimedOutError(f"Raft command queue full ({COMMANDS_QUEUE_MAX} records); retry later")
    return RequestTimedOutError(f"Raft record outcome unknown (pysyncobj reason {reason}); retry")
