"""Server configuration (`raftka server --config FILE`): Kafka's property names, declared once.

``load_server_config(path)`` reads a Java-style properties file (``key=value`` or ``key: value``,
``#``/``!`` comments) and returns a :class:`ServerConfig`; a missing key, an unknown key or a bad
value raises ``ConfigError`` naming the key.

Ports: ``controller.quorum.voters`` gives each voter's **Raft** port (pysyncobj, `id@host:port`);
the ``CONTROLLER://host:port`` entry of ``listeners`` is this controller's **RPC** port (the wire
protocol: BrokerRegistration, CreateTopics, DescribeQuorum, ...). They must differ.
"""
from __future__ import annotations

import functools
import logging
import os
import ssl
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from raftka.common import authorizer, sasl, scram, security
from raftka.common.configs import INT_MAX, REQUIRED, ConfigDef, ConfigKey, at_least, between, one_of
from raftka.common.errors import ConfigError

log = logging.getLogger(__name__)

SECRET_KEY = "controller.quorum.secret"

CONFIG_FILE_BYTES_MAX = 1_048_576


def parse_connection_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``"host:count,host:count"`` (Kafka's format; an
    IPv6 address in brackets, ``[::1]:5``) -> {host: count}; ValueError naming the bad entry."""
    out: dict[str, int] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        host, colon, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not colon or not host or not count.strip().isdigit():
            raise ValueError(f"expected host:count entries, got {item!r}")
        if host in out:
            raise ValueError(f"{host} listed twice")
        out[host] = int(count)
    return out


def _connection_overrides(value: str) -> str | None:
    try:
        parse_connection_overrides(value)
    except ValueError as error:
        return str(error)
    return None


# Kafka's default map, plus Raftka's own listener names so configs written before it keep working.
PROTOCOL_MAP_DEFAULT = ("PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL",
                        "CONTROLLER:PLAINTEXT", "HTTP:PLAINTEXT")
HTTP_LISTENER = "HTTP"  # /health and /metrics: served by broker/http.py, not the Kafka protocol
LISTENER_PREFIX = "listener.name."


def _protocol_map(value: list[str]) -> str | None:
    try:
        security.parse_protocol_map(value)
    except ConfigError as error:
        return error.message.partition(": ")[2]
    return None


def _sasl_mechanisms(value: list[str]) -> str | None:
    unknown = [m for m in value if m.upper() not in sasl.MECHANISMS]
    if not value or unknown:
        return f"{', '.join(unknown) or 'none given'}: use one or more of {', '.join(sasl.MECHANISMS)}"
    return None


def _inter_broker_mechanism(value: str) -> str | None:
    if value.upper() not in sasl.MECHANISMS:
        return f"{value!r}: use one of {', '.join(sasl.MECHANISMS)}"
    return None


def _super_users(value: str) -> str | None:
    try:
        authorizer.parse_super_users(value)
    except ConfigError as error:
        return error.message.partition(": ")[2]
    return None


def _roles(value: list[str]) -> str | None:
    if not value:
        return "must name at least one role (broker, controller)"
    unknown = [r for r in value if r not in ("broker", "controller")]
    if unknown:
        return f"unknown role(s) {', '.join(unknown)}; expected broker and/or controller"
    return None


SERVER_CONFIGS = (
    ConfigDef()
    .define("process.roles", "list", REQUIRED, "broker, controller, or both (combined mode).", _roles)
    .define("node.id", "int", REQUIRED, "This node's id; a controller's id is its entry in controller.quorum.voters.",
            at_least(0))
    .define("controller.quorum.voters", "string", REQUIRED,
            "Voters' Raft endpoints: id@host:port,... (Raft ports, not the RPC listener).")
    .define("controller.quorum.voter.proxies", "string", "",
            "id@host:port,...: reach these voters' Raft ports through these addresses (proxies in "
            "fault tests); their identity stays the controller.quorum.voters address.")
    .define("controller.listener.names", "list", ["CONTROLLER"], "Listener names used by the controller RPC.")
    .define("listeners", "list", [], "name://host:port,...; CONTROLLER://host:port is the controller RPC port.")
    .define("advertised.listeners", "list", [], "Endpoints given to others, when they differ from listeners.")
    .define("listener.security.protocol.map", "list", list(PROTOCOL_MAP_DEFAULT),
            "NAME:PROTOCOL,...: each listener's security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL). "
            "Kafka's default, plus CONTROLLER:PLAINTEXT and HTTP:PLAINTEXT for Raftka's own listener names.",
            _protocol_map)
    .define("inter.broker.listener.name", "string", "PLAINTEXT",
            "The listener followers dial to replicate from a leader (and brokers dial each other on).")
    # -- TLS (PEM only); each may be given for one listener as listener.name.<name>.<key> -------
    .define("ssl.keystore.type", "string", "PEM", "Format of the keystore: PEM only.", one_of("PEM"))
    .define("ssl.keystore.location", "string", None,
            "PEM file with the listener's certificate chain and its private key.")
    .define("ssl.keystore.certificate.chain", "string", None,
            "The certificate chain as PEM text (with ssl.keystore.key, instead of ssl.keystore.location).")
    .define("ssl.keystore.key", "password", None, "The private key as PEM text (with ssl.keystore.certificate.chain).")
    .define("ssl.key.password", "password", None, "Password of an encrypted private key.")
    .define("ssl.truststore.type", "string", "PEM", "Format of the truststore: PEM only.", one_of("PEM"))
    .define("ssl.truststore.location", "string", None,
            "PEM file of the CA certificates peers' certificates must chain to: clients' (ssl.client.auth) "
            "and, for a broker dialling the inter-broker listener, other brokers'.")
    .define("ssl.client.auth", "string", "none",
            "none, requested or required: whether TLS clients must show a certificate.",
            one_of(*security.CLIENT_AUTH_MODES))
    .define("ssl.enabled.protocols", "list", list(security.ENABLED_PROTOCOLS_DEFAULT),
            "TLS versions allowed: TLSv1.2, TLSv1.3.")
    .define("ssl.endpoint.identification.algorithm", "string", "https",
            "https: a broker dialling another over TLS checks that its certificate names the host dialled; "
            "empty: no host name check (the certificate must still chain to the truststore).",
            lambda v: None if v in ("https", "") else f"must be https or empty, got {v!r}")
    .define("sasl.enabled.mechanisms", "list", list(scram.MECHANISMS),
            "SASL mechanisms a SASL_PLAINTEXT or SASL_SSL listener offers: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN "
            "(Kafka's default, GSSAPI, is not offered). PLAIN sends the password itself: offer it on SASL_SSL only.",
            _sasl_mechanisms)
    .define("sasl.mechanism.inter.broker.protocol", "string", None,
            "The SASL mechanism a broker logs in to other brokers with when inter.broker.listener.name is "
            "SASL_PLAINTEXT or SASL_SSL: SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN (required then: Kafka's "
            "default, GSSAPI, is not offered). Its user and password: "
            "listener.name.<listener>.<mechanism>.sasl.jaas.config.", _inter_broker_mechanism)
    .define("sasl.mechanism.controller.protocol", "string", None,
            "The SASL mechanism brokers log in to the controllers with when the controller listener "
            "(controller.listener.names) is SASL_PLAINTEXT or SASL_SSL: SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN "
            "(required then). Its user and password: listener.name.<controller listener>.<mechanism>.sasl.jaas.config.",
            _inter_broker_mechanism)
    # -- ACLs (common/authorizer.py; enforced by brokers and controllers) ----------------------------------
    .define("authorizer.class.name", "string", "",
            f"Empty: no authorizer; {authorizer.STANDARD_AUTHORIZER}: ACLs from the metadata log decide.",
            authorizer.check_authorizer_class)
    .define("super.users", "string", "",
            "Principals every ACL check allows, separated by ;  (User:admin;User:ops).", _super_users)
    .define("allow.everyone.if.no.acl.found", "bool", False,
            "Whether a resource no ACL names is open to everyone (false: only super users).")
    .define("log.dirs", "list", REQUIRED, "Directories for data; the controller keeps its Raft journal and snapshots in the first.")
    .define("broker.session.timeout.ms", "int", 9000, "A broker without a heartbeat this long is fenced.", at_least(1))
    .define("broker.heartbeat.interval.ms", "int", 2000, "How often brokers heartbeat to the active controller.",
            at_least(1))
    .define("broker.session.disconnect.grace.ms", "int", 500,
            "Raftka only: a broker whose heartbeat connection was closed by its end (a crashed process's "
            "kernel closes its sockets) and that sends no heartbeat for this long is fenced at once, not "
            "after broker.session.timeout.ms (a broker that closes the connection itself heartbeats again "
            "at once). -1: only the session timeout fences.", at_least(-1))
    .define("controller.quorum.secret", "password", None,
            "Cluster secret for the Raft port (required: pysyncobj authenticates and encrypts peers with it).")
    .define("controller.quorum.secret.file", "string", None, "A file whose first line is controller.quorum.secret (mode 600: refused when others may read it).")
    .define("controller.quorum.request.timeout.ms", "int", 5000,
            "How long the controller waits for a metadata record to commit before answering REQUEST_TIMED_OUT.",
            between(1, 300_000))
    .define("metadata.log.snapshot.min.records", "int", 5000,
            "Snapshot the metadata (and truncate the Raft journal) after this many records.", at_least(2))
    .define("metadata.log.max.snapshot.interval.ms", "long", 300_000,
            "Snapshot at least this often when records were appended.", at_least(1000))
    .define("metadata.log.max.record.bytes.between.snapshots", "long", 20 * 1024 * 1024,
            "Snapshot the metadata once records of this many bytes were appended since the last snapshot, "
            "however few they are (a single entry can hold thousands of records).", at_least(1))
    .define("metadata.fetch.max.records", "int", 5000, "Most records one metadata fetch returns.", at_least(1))
    .define("max.connections", "int", 1000,
            "Most concurrent connections one listener accepts (Kafka: unbounded; we bound it). At the limit "
            "the oldest connection of at least 1 s that never completed a request is closed to make room; "
            "when there is none, the new connection is closed at once.", at_least(1))
    .define("max.connections.per.ip", "int", INT_MAX,
            "Most concurrent connections one listener accepts from one address (Kafka's default: no "
            "limit of its own, as many clients may share an address). At this limit or max.connections, "
            "the oldest connection of at least 1 s that never completed a request is closed to make "
            "room; when there is none, the new connection is closed at once.", at_least(0))
    .define("max.connections.per.ip.overrides", "string", "",
            "host:count,host:count: max.connections.per.ip for these addresses (host names are resolved "
            "at start).", _connection_overrides)
    .define("connections.max.idle.ms", "long", 600_000,
            "Close a connection with no request running and no bytes read or written for this long.",
            at_least(1))
    .define("connections.first.byte.timeout.ms", "long", 10_000,
            "Raftka only: close a connection that sends nothing for this long after it connects.",
            at_least(1))
    .define("request.frame.timeout.ms", "long", 30_000,
            "Raftka only: close a connection whose request frame does not complete this long after its "
            "first byte (slowloris).", at_least(1))
    .define("socket.request.max.bytes", "int", 104_857_600, "Largest request frame accepted.", at_least(1024))
    .define("num.partitions", "int", 1, "Partitions of a topic created without a count.", at_least(1))
    .define("default.replication.factor", "int", 1, "Replication factor of a topic created without one.", at_least(1))
    .define("min.insync.replicas", "int", 1, "Default min.insync.replicas of new topics.", at_least(1))
    .define("unclean.leader.election.enable", "bool", False, "Default for new topics: elect outside the ISR.")
    .define("auto.leader.rebalance.enable", "bool", True,
            "Controllers: move leadership back to a partition's preferred (first) replica as soon as it is "
            "live and in the ISR; false: only ElectLeaders (raftka leader-election) moves it.")
    .define("auto.create.topics.enable", "bool", False, "Create a topic when a client first asks for it.")
    .define("log.retention.ms", "long", 604_800_000, "Default retention.ms of new topics.", at_least(-1))
    .define("log.retention.bytes", "long", -1, "Default retention.bytes of new topics.", at_least(-1))
    .define("log.retention.check.interval.ms", "long", 300_000,
            "How often a broker looks for segments past retention (and idempotent producers to forget).",
            at_least(1))
    .define("log.segment.bytes", "int", 1_073_741_824, "Default segment.bytes of new topics.", at_least(14))
    .define("log.cleanup.policy", "list", ["delete"], "Default cleanup.policy of new topics.",
            lambda v: None if v and set(v) <= {"delete", "compact"} else f"must be delete, compact or both, got {v}")
    .define("log.cleaner.enable", "bool", True,
            "Run the log cleaner, which compacts topics with cleanup.policy=compact (storage/log_cleaner.py).")
    .define("log.cleaner.threads", "int", 1, "Log cleaner threads.", between(1, 16))
    .define("log.cleaner.backoff.ms", "long", 15_000, "How long a cleaner thread sleeps when no log needs cleaning.",
            at_least(0))
    .define("log.cleaner.dedupe.buffer.size", "long", 134_217_728,
            "Bytes of offset map for all cleaner threads together, counted as Kafka does (24 bytes a key); "
            "Python's dict costs about 150 bytes a key, so the process may use about six times this.",
            at_least(24))
    .define("log.cleaner.io.buffer.size", "int", 524_288, "The cleaner's read size (a larger batch is read whole).",
            at_least(61))
    .define("log.cleaner.io.buffer.load.factor", "double", 0.9, "How full an offset map may get.",
            lambda v: None if 0 < v <= 1 else f"must be in (0, 1], got {v}")
    .define("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308,
            "Bytes per second all cleaner threads together may read and write.",
            lambda v: None if v > 0 else f"must be positive, got {v}")
    .define("log.cleaner.min.cleanable.ratio", "double", 0.5, "Default min.cleanable.dirty.ratio of new topics.",
            between(0, 1))
    .define("log.cleaner.delete.retention.ms", "long", 86_400_000, "Default delete.retention.ms of new topics.",
            at_least(0))
    .define("log.cleaner.min.compaction.lag.ms", "long", 0, "Default min.compaction.lag.ms of new topics.",
            at_least(0))
    .define("log.cleaner.max.compaction.lag.ms", "long", 9_223_372_036_854_775_807,
            "Default max.compaction.lag.ms of new topics.", at_least(1))
    .define("num.recovery.threads.per.data.dir", "int", 8,
            "Threads that open (and after an unclean stop recover) the partition logs of each log dir at "
            "start. Kafka's default is 1; opening a log here mostly waits on the disk.", at_least(1))
    .define("log.open.files.max", "int", -1,
            "Raftka only (Kafka keeps every segment file open and needs a high ulimit): most segment files "
            "a broker keeps open at once; past it an idle one (about the least recently used) is closed and "
            "reopened when read or written again. -1: the open-files soft limit (RLIMIT_NOFILE) less a quarter of "
            "it, at most 2048, left to sockets and other files (docs/storage.md).",
            lambda v: None if v == -1 or v >= 1 else f"must be a count of at least 1, or -1, got {v}")
    .define("replica.lag.time.max.ms", "long", 30_000, "A follower not caught up for this long leaves the ISR.",
            at_least(1))
    # -- broker role (process.roles=broker): Kafka's names ----------------------------------
    .define("controller.quorum.bootstrap.servers", "list", [],
            "Brokers: host:port,... of controllers' CONTROLLER (RPC) listeners, to register, heartbeat "
            "and follow the metadata log (not the Raft ports of controller.quorum.voters).")
    .define("broker.dial.proxies", "string", "",
            "Brokers, fault tests: id@host:port,... dial these brokers' PLAINTEXT listeners (as followers) "
            "through these addresses (e.g. toxiproxy listeners) instead of their advertised endpoints.")
    .define("controller.rpc.proxies", "string", "",
            "Brokers, fault tests: id@host:port,... reach these controllers' RPC listeners through these "
            "addresses, also when a NOT_CONTROLLER answer names the active controller.")
    .define("broker.rack", "string", None, "This broker's rack, given to clients and the controller.")
    .define("message.max.bytes", "int", 1_048_588,
            "Largest record batch a broker accepts when the topic sets no max.message.bytes.", at_least(0))
    .define("replica.fetch.max.bytes", "int", 1_048_576, "Bytes a follower asks for per partition per fetch.",
            at_least(1))
    .define("replica.fetch.response.max.bytes", "int", 10_485_760, "Bytes a follower asks for per fetch in all.",
            at_least(1))
    .define("replica.fetch.wait.max.ms", "int", 500, "How long a follower's fetch waits at the leader for data.",
            between(0, 60_000))
    .define("replica.fetch.min.bytes", "int", 1, "Bytes a follower's fetch waits for at the leader.", at_least(0))
    .define("replica.fetch.backoff.ms", "int", 100, "Pause after a failed follower fetch.", between(0, 60_000))
    .define("max.incremental.fetch.session.cache.slots", "int", 1000,
            "Incremental fetch sessions (KIP-227) a broker keeps at once, for followers and consumers; "
            "0: every fetch is a full one.", at_least(0))
    .define("replica.high.watermark.checkpoint.interval.ms", "long", 5000,
            "How often a broker writes every partition's high watermark to its checkpoint.", at_least(1))
    .define("queued.max.requests", "int", 500,
            "Requests one connection may have in flight before the broker stops reading it (backpressure).",
            at_least(1))
    .define("queued.max.request.bytes", "long", 104_857_600,
            "Request bytes a listener holds at once: frames being read (a large frame is read in chunks, "
            "and no further while this is used) and requests being handled (past it, a connection's next "
            "request waits unless it has none running). Brokers: also the produce payloads held at once "
            "(appending or waiting for acks); past it, produce requests wait in arrival order and their "
            "connections stop being read.", at_least(1))
    .define("fetch.max.bytes", "int", 57_671_680, "Upper bound on the bytes one Fetch response carries.",
            at_least(1024))
    .define("controller.request.timeout.ms", "int", 10_000,
            "How long a broker waits on a controller RPC (registration, AlterPartition, forwarded admin).",
            between(1, 300_000))
    .define("controlled.shutdown.timeout.ms", "int", 5000,
            "On SIGTERM a broker asks to be fenced first so leadership moves away, waiting at most this long.",
            between(0, 300_000))
    # -- group coordinator (brokers; docs/consumer-groups.md): Kafka's names and defaults ----
    .define("offsets.topic.num.partitions", "int", 50,
            "Partitions of __consumer_offsets (fixed once the topic exists).", between(1, 1000))
    .define("offsets.topic.replication.factor", "int", 3,
            "Replication factor of __consumer_offsets (fewer when fewer brokers are unfenced).", between(1, 32))
    .define("offsets.topic.segment.bytes", "int", 104_857_600, "segment.bytes of __consumer_offsets.",
            at_least(1024))
    .define("offsets.retention.minutes", "int", 10_080,
            "Committed offsets of a group that has been empty this long are dropped.", at_least(1))
    .define("offsets.retention.check.interval.ms", "long", 600_000,
            "How often the coordinator expires old offsets and rewrites the live ones.", at_least(1))
    .define("offsets.commit.timeout.ms", "int", 5000,
            "How long an offset commit waits for the ISR of __consumer_offsets.", between(1, 300_000))
    .define("offsets.load.buffer.size", "int", 5_242_880,
            "Bytes read at a time when a coordinator loads a __consumer_offsets partition.", at_least(1024))
    .define("offset.metadata.max.bytes", "int", 4096, "Largest metadata string of one committed offset.",
            at_least(0))
    .define("group.min.session.timeout.ms", "int", 6000, "Smallest session_timeout_ms a member may ask for.",
            at_least(1))
    .define("group.max.session.timeout.ms", "int", 1_800_000, "Largest session_timeout_ms a member may ask for.",
            at_least(1))
    .define("group.initial.rebalance.delay.ms", "int", 3000,
            "An empty group waits this long for more members before its first rebalance completes.",
            between(0, 300_000))
)


# Keys Kafka lets a listener override (listener.name.<name>.<key>).
LISTENER_KEYS = tuple(name for name in SERVER_CONFIGS.names()
                      if name.startswith("ssl.") or name == "sasl.enabled.mechanisms")
# Kafka's per-listener, per-mechanism login: listener.name.<name>.<mechanism lower>.sasl.jaas.config.
# A broker reads only the inter-broker listener's, for sasl.mechanism.inter.broker.protocol: the
# user and password it logs in to other brokers with (its listeners check logins against the
# SCRAM credentials in the metadata log, so no user list is read).
JAAS_CONFIG = ConfigKey("sasl.jaas.config", "password", None,
                        "The login module entry (ScramLoginModule or PlainLoginModule, required, with username "
                        "and password) a broker logs in to other brokers with.")


def jaas_key(mechanism: str) -> str:
    """The listener_values key of a mechanism's login: ``<mechanism lower>.sasl.jaas.config``."""
    return f"{mechanism.lower()}.{JAAS_CONFIG.name}"


# Old Raftka names still read, with a warning: old name -> Kafka's name.
DEPRECATED_NAMES = {"connections.max": "max.connections"}


def _renamed(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with deprecated keys moved to their Kafka names (both given: ConfigError)."""
    out = dict(raw)
    for old, new in DEPRECATED_NAMES.items():
        if old in out:
            if new in out:
                raise ConfigError(old, f"is the deprecated name of {new}; give only {new}")
            log.warning("config key %s is deprecated; use %s (Kafka's name)", old, new)
            out[new] = out.pop(old)
    return out


def parse_voters(value: str) -> dict[int, str]:
    """``"1@127.0.0.1:9301,2@127.0.0.1:9302"`` -> ``{1: "127.0.0.1:9301", ...}`` (Raft ports)."""
    voters: dict[int, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        node, sep, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not host or not node.strip().isdigit() or not port.isdigit():
            raise ConfigError("controller.quorum.voters",
                              f"expected id@host:port entries, got {item!r}")
        if not 0 < int(port) < 65536:
            raise ConfigError("controller.quorum.voters", f"port out of range in {item!r}")
        node_id = int(node)
        if node_id in voters:
            raise ConfigError("controller.quorum.voters", f"node id {node_id} listed twice")
        if address in voters.values():
            raise ConfigError("controller.quorum.voters", f"address {address} listed twice")
        voters[node_id] = address
    if not voters:
        raise ConfigError("controller.quorum.voters", "no voters given")
    return voters


def check_secret(voters: Mapping[int, str], password: str | None) -> None:
    """Refuse a Raft member without a secret, loopback included: the Raft port unpickles what it
    receives, and on one machine every local user (and every process a browser tricks into
    connecting) can reach a loopback port too."""
    if not password:
        raise ConfigError(
            SECRET_KEY,
            f"required for the Raft port(s) {', '.join(sorted(voters.values()))}: pysyncobj unpickles what it "
            "receives, so without a secret anyone who can reach the port can run code on this node (set "
            "controller.quorum.secret.file to a file only this user can read; `raftka cluster up` and "
            "scripts/bootstrap-quorum.sh generate one)")


def raft_bind_address(voter_address: str, controller_listener: tuple[str, int] | None) -> str:
    """Where this node's Raft port listens: its own voter address, or the same port on every
    interface when its controller listener says so (``CONTROLLER://0.0.0.0:port``)."""
    host, _, port = voter_address.rpartition(":")
    if controller_listener is not None and controller_listener[0] in ("", "0.0.0.0", "::"):
        return f"{controller_listener[0] or '0.0.0.0'}:{port}"
    return f"{host}:{port}"


def secret_file_problem(path: str) -> str | None:
    """Why a secret file is unsafe to use (others may read or change it), or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # reading it reports the error
    if mode & 0o077:
        return f"{path} is readable or writable by others (mode {mode & 0o777:o}); chmod 600 it"
    return None


@dataclass(frozen=True)
class ServerConfig:
    values: dict[str, Any]
    voters: dict[int, str]  # node id -> Raft host:port
    dial: dict[int, str]  # node id -> address to dial instead (controller.quorum.voter.proxies)
    listeners: dict[str, tuple[str, int]]  # listener name -> (host, port)
    secret: str | None
    # listener name -> its own values (listener.name.<name>.<key>), typed; jaas_key(mechanism) for
    # a listener.name.<name>.<mechanism>.sasl.jaas.config
    listener_values: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The keys server.properties set (Kafka's STATIC_BROKER_CONFIG), Kafka's names, listener.name.*
    # ones included; the others hold their defaults (DEFAULT_CONFIG).
    given: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        # values hold secrets (controller.quorum.secret, private keys, a broker's password):
        # a repr names the node only.
        return f"ServerConfig(node.id={self.node_id}, process.roles={','.join(self.roles)})"

    def __getitem__(self, key: str) -> Any:
        return self.values[DEPRECATED_NAMES.get(key, key)]

    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def roles(self) -> list[str]:
        return self.values["process.roles"]

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def controller_listener(self) -> tuple[str, int]:
        name = self.values["controller.listener.names"][0]
        return self.listeners[name]

    @property
    def raft_bind_address(self) -> str:
        """host:port this controller's Raft port listens on (see ``raft_bind_address``)."""
        return raft_bind_address(self.voters[self.node_id], self.controller_listener)

    def proxies(self, key: str) -> dict[int, str]:
        """``broker.dial.proxies`` / ``controller.rpc.proxies`` as {node id: "host:port"}."""
        return parse_voters(self.values[key]) if self.values[key].strip() else {}

    @property
    def max_connections_per_ip_overrides(self) -> dict[str, int]:
        """``max.connections.per.ip.overrides`` as {host: count}."""
        return parse_connection_overrides(self.values["max.connections.per.ip.overrides"])

    @property
    def server_limits(self) -> dict[str, Any]:
        """The listener limits of this config as keyword arguments of common.server.Server
        (for every listener: broker and controller)."""
        return {"max_frame_bytes": self.values["socket.request.max.bytes"],
                "max_connections": self.values["max.connections"],
                "max_connections_per_ip": self.values["max.connections.per.ip"],
                "max_connections_per_ip_overrides": self.max_connections_per_ip_overrides,
                "idle_timeout_ms": self.values["connections.max.idle.ms"],
                "first_byte_timeout_ms": self.values["connections.first.byte.timeout.ms"],
                "request_frame_timeout_ms": self.values["request.frame.timeout.ms"],
                "queued_max_request_bytes": self.values["queued.max.request.bytes"]}

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    def advertised(self, listener: str) -> tuple[str, int]:
        """The endpoint of ``listener`` given to others: advertised.listeners, else listeners."""
        advertised = parse_listeners(self.values["advertised.listeners"], "advertised.listeners")
        host, port = advertised.get(listener) or self.listeners[listener]
        return ("127.0.0.1" if host in ("", "0.0.0.0") else host), port

    @property
    def protocol_map(self) -> dict[str, str]:
        """listener.security.protocol.map as {listener name: security protocol}."""
        return security.parse_protocol_map(self.values["listener.security.protocol.map"])

    def security_protocol(self, listener: str) -> str:
        """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (checked at load: every listener has one)."""
        return self.protocol_map.get(listener, security.PLAINTEXT)

    @property
    def client_listeners(self) -> list[str]:
        """The Kafka-protocol listeners a broker serves (all but the controller's and HTTP), in
        the order of ``listeners``."""
        skip = {*self.values["controller.listener.names"], HTTP_LISTENER}
        return [name for name in self.listeners if name not in skip]

    @property
    def inter_broker_listener(self) -> str:
        return self.values["inter.broker.listener.name"]

    def inter_broker_sasl(self) -> sasl.SaslClientSettings | None:
        """How a broker logs in to another's inter-broker listener: None unless that listener is
        SASL_*, else sasl.mechanism.inter.broker.protocol with the user and password of
        ``listener.name.<listener>.<mechanism>.sasl.jaas.config``. ConfigError naming the key
        that is missing or wrong (never the password)."""
        return self._client_sasl(self.inter_broker_listener, "sasl.mechanism.inter.broker.protocol",
                                 "inter.broker.listener.name", "other brokers")

    @property
    def controller_listener_name(self) -> str:
        """The controllers' listener (the first of controller.listener.names)."""
        return self.values["controller.listener.names"][0]

    def controller_sasl(self) -> sasl.SaslClientSettings | None:
        """How a broker (and a tool given this config) logs in to the controllers: None unless the
        controller listener is SASL_*, else sasl.mechanism.controller.protocol with the user and
        password of ``listener.name.<controller listener>.<mechanism>.sasl.jaas.config``."""
        return self._client_sasl(self.controller_listener_name, "sasl.mechanism.controller.protocol",
                                 "controller.listener.names", "the controllers")

    def _client_sasl(self, listener: str, mechanism_key: str, listener_key: str,
                     whom: str) -> sasl.SaslClientSettings | None:
        protocol = self.security_protocol(listener)
        if not security.uses_sasl(protocol):
            return None
        mechanism = (self.values[mechanism_key] or "").upper()
        if not mechanism:
            raise ConfigError(mechanism_key,
                              f"is required: {listener_key} {listener} is {protocol}; name the mechanism this "
                              f"node logs in to {whom} with ({', '.join(sasl.MECHANISMS)}; Kafka's default, "
                              "GSSAPI, is not offered)")
        enabled = [m.upper() for m in self.listener_value(listener, "sasl.enabled.mechanisms")]
        if mechanism not in enabled:
            raise ConfigError(mechanism_key, f"{mechanism} is not enabled on the listener {listener} "
                                             f"(sasl.enabled.mechanisms: {', '.join(enabled)})")
        key = f"{LISTENER_PREFIX}{listener.lower()}.{jaas_key(mechanism)}"
        own = self.listener_values.get(listener, {})
        text = own.get(jaas_key(mechanism))
        if text is None:
            given = sorted(k.partition(".")[0] for k in own if k.endswith(f".{JAAS_CONFIG.name}"))
            also = f" (one is given for {', '.join(given)}, not {mechanism.lower()})" if given else ""
            raise ConfigError(key, f"is required: the {sasl.login_module_of(mechanism)} entry with the username "
                                   f"and password this node logs in to {whom} with{also}")
        return sasl.jaas_client_settings(mechanism, text, key)

    def unread_logins(self) -> list[str]:
        """The ``listener.name.*.<mechanism>.sasl.jaas.config`` keys this node does not read: a
        broker reads the inter-broker listener's entry for sasl.mechanism.inter.broker.protocol
        and the controller listener's for sasl.mechanism.controller.protocol; a controller
        alone reads none (it checks logins against the SCRAM credentials in the metadata log)."""
        read = set()
        if self.is_broker:
            for listener, mechanism_key in ((self.inter_broker_listener, "sasl.mechanism.inter.broker.protocol"),
                                            (self.controller_listener_name, "sasl.mechanism.controller.protocol")):
                if security.uses_sasl(self.security_protocol(listener)):
                    read.add((listener, jaas_key(self.values[mechanism_key] or "")))
        return [f"{LISTENER_PREFIX}{listener.lower()}.{key}" for listener, own in self.listener_values.items()
                for key in own if key.endswith(f".{JAAS_CONFIG.name}") and (listener, key) not in read]

    def listener_value(self, listener: str, key: str) -> Any:
        """``key`` (one of LISTENER_KEYS) for ``listener``: its listener.name.<name>.<key>, else
        the key."""
        own = self.listener_values.get(listener, {})
        return own[key] if key in own else self.values[key]

    def _ssl_key_names(self, listener: str) -> dict[str, str]:
        """security.SERVER_KEY_NAMES as given for ``listener`` (errors name the key that was set)."""
        own = self.listener_values.get(listener, {})
        return {arg: f"{LISTENER_PREFIX}{listener.lower()}.{key}" if key in own else key
                for arg, key in security.SERVER_KEY_NAMES.items()}

    def server_ssl_context(self, listener: str) -> ssl.SSLContext:
        """The TLS context of a listener whose protocol is SSL or SASL_SSL; ConfigError naming
        the key when its keystore or truststore is missing or unreadable."""
        value = functools.partial(self.listener_value, listener)
        names = self._ssl_key_names(listener)
        if not (value("ssl.keystore.location") or value("ssl.keystore.certificate.chain") or value("ssl.keystore.key")):
            raise ConfigError(names["certfile"], f"listener {listener} is {self.security_protocol(listener)} and "
                                                 "needs a keystore (ssl.keystore.location, or "
                                                 "ssl.keystore.certificate.chain with ssl.keystore.key)")
        return security.server_ssl_context(
            certfile=value("ssl.keystore.location"), certificate_chain=value("ssl.keystore.certificate.chain"),
            key=value("ssl.keystore.key"), password=value("ssl.key.password"),
            cafile=value("ssl.truststore.location"), client_auth=value("ssl.client.auth"),
            enabled_protocols=value("ssl.enabled.protocols"), names=names)

    def inter_broker_ssl_context(self) -> ssl.SSLContext | None:
        """How a broker dials another's inter-broker listener: None for PLAINTEXT, else a TLS
        context trusting ssl.truststore.location (the system's CAs when unset), showing this
        broker's keystore (for ssl.client.auth), checking host names unless
        ssl.endpoint.identification.algorithm is empty."""
        return self.client_ssl_context(self.inter_broker_listener)

    def controller_ssl_context(self) -> ssl.SSLContext | None:
        """How a broker (or a tool given this config) dials the controllers' listener: as
        ``inter_broker_ssl_context``, with the controller listener's keys."""
        return self.client_ssl_context(self.controller_listener_name)

    def client_ssl_context(self, listener: str) -> ssl.SSLContext | None:
        """The dialling side's TLS context for ``listener`` (None when it is not SSL/SASL_SSL),
        from its ssl.* keys (listener.name.<listener>.ssl.* first)."""
        if not security.uses_tls(self.security_protocol(listener)):
            return None
        value = functools.partial(self.listener_value, listener)
        names = self._ssl_key_names(listener)
        chain = value("ssl.keystore.certificate.chain")
        return security.client_ssl_context(
            value("ssl.truststore.location"), None if chain else value("ssl.keystore.location"), None,
            value("ssl.key.password"), value("ssl.endpoint.identification.algorithm") == "https",
            certificate_chain=chain, key=value("ssl.keystore.key") if chain else None,
            enabled_protocols=value("ssl.enabled.protocols"), names=names)

    @property
    def metadata_dir(self) -> str:
        return os.path.join(self.values["log.dirs"][0], "__cluster_metadata-0")


def parse_properties(text: str) -> dict[str, str]:
    """A Java properties file's ``key=value`` (or ``key: value``) lines; ``#`` and ``!`` start
    comments; a line ending in an odd number of backslashes continues on the next one (its
    leading blanks dropped), as Java reads them."""
    out: dict[str, str] = {}
    lines: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        part = raw.lstrip() if pending is not None else raw
        if pending is None and part.strip()[:1] in ("#", "!"):
            continue
        joined = (pending[0], pending[1] + part) if pending is not None else (number, part)
        trailing = len(part) - len(part.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (joined[0], joined[1][:-1])
            continue
        pending = None
        lines.append(joined)
    if pending is not None:
        lines.append(pending)
    for number, raw in lines:
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ConfigError(f"line {number}", f"expected key=value, got {raw!r}")
        out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


def parse_listeners(values: list[str], key: str = "listeners") -> dict[str, tuple[str, int]]:
    listeners: dict[str, tuple[str, int]] = {}
    for item in values:
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not name or not colon or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ConfigError(key, f"expected NAME://host:port, got {item!r}")
        if name in listeners:
            raise ConfigError(key, f"listener {name} given twice")
        listeners[name] = (host or "0.0.0.0", int(port))
    return listeners


def _split_listener_values(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(the other keys, {lower-case listener name: {key: typed value}}) of ``raw``: Kafka's
    per-listener ``listener.name.<name>.<key>``, for the LISTENER_KEYS and
    ``listener.name.<name>.<mechanism>.sasl.jaas.config`` (kept under ``jaas_key(mechanism)``)."""
    rest: dict[str, Any] = {}
    per_listener: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        if not name.startswith(LISTENER_PREFIX):
            rest[name] = value
            continue
        listener, _, key = name[len(LISTENER_PREFIX):].partition(".")
        mechanism, _, jaas = key.partition(".")
        if listener and jaas == JAAS_CONFIG.name:
            if mechanism.upper() not in sasl.MECHANISMS:
                raise ConfigError(name, f"{mechanism!r} is not a SASL mechanism here: use "
                                        f"{', '.join(m.lower() for m in sasl.MECHANISMS)}")
            declared = JAAS_CONFIG
            key = jaas_key(mechanism)
        elif listener and key in LISTENER_KEYS:
            declared = SERVER_CONFIGS.keys[key]
        else:
            raise ConfigError(name, f"expected {LISTENER_PREFIX}<listener>.<key> with one of {', '.join(LISTENER_KEYS)}, "
                                    f"or {LISTENER_PREFIX}<listener>.<mechanism>.{JAAS_CONFIG.name}")
        per_listener.setdefault(listener.lower(), {})[key] = replace(declared, name=name).parse(value)
    return rest, per_listener


def _check_listeners(values: dict[str, Any], listeners: dict[str, tuple[str, int]],
                     per_listener: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every listener has a security protocol; the controller's and HTTP are PLAINTEXT; every
    listener.name.<name>.* names a listener. Returns the per-listener values by listener name."""
    protocols = security.parse_protocol_map(values["listener.security.protocol.map"])
    for name in listeners:
        protocol = protocols.get(name)
        if protocol is None and name != HTTP_LISTENER:
            raise ConfigError("listener.security.protocol.map",
                              f"listener {name} (in listeners) has no security protocol here; add {name}:PROTOCOL")
        if name == HTTP_LISTENER and protocol not in (None, security.PLAINTEXT):
            raise ConfigError("listener.security.protocol.map", f"{name}:{protocol}: the HTTP listener serves "
                                                                 "/health and /metrics over plain HTTP only")
    # A broker-only node dials the controller listener without listening on it: its keys (TLS
    # trust, the login) are given as listener.name.<controller listener>.* all the same.
    # (A broker-only node's map may leave it out: PLAINTEXT, as configs written before it could be secured.)
    controller = values["controller.listener.names"][0]
    by_name = {name.lower(): name for name in (*listeners, controller)}
    out: dict[str, dict[str, Any]] = {}
    for lower, own in per_listener.items():
        if lower not in by_name:
            raise ConfigError(f"{LISTENER_PREFIX}{lower}.{next(iter(own))}", f"no listener named {lower} in listeners")
        out[by_name[lower]] = own
    return out


def server_config(raw: Mapping[str, Any]) -> ServerConfig:
    raw = _renamed(raw)
    given = frozenset(raw)
    raw, per_listener = _split_listener_values(raw)
    values = SERVER_CONFIGS.parse(raw)
    voters = parse_voters(values["controller.quorum.voters"])
    listeners = parse_listeners(values["listeners"])
    listener_values = _check_listeners(values, listeners, per_listener)
    dial = {}
    if values["controller.quorum.voter.proxies"].strip():
        try:
            dial = parse_voters(values["controller.quorum.voter.proxies"])
        except ConfigError as error:
            raise ConfigError("controller.quorum.voter.proxies", error.message.partition(": ")[2]) from None
        unknown = sorted(set(dial) - set(voters))
        if unknown:
            raise ConfigError("controller.quorum.voter.proxies", f"node id(s) {unknown} are not voters")
    secret = values["controller.quorum.secret"]
    secret_file = values["controller.quorum.secret.file"]
    if secret_file and not secret:
        problem = secret_file_problem(secret_file)
        if problem:
            raise ConfigError("controller.quorum.secret.file", problem)
        try:
            with open(secret_file, encoding="utf-8") as f:
                secret = f.readline().strip()
        except OSError as error:
            raise ConfigError("controller.quorum.secret.file", f"cannot read {secret_file}: {error.strerror}") from None
        if not secret:
            raise ConfigError("controller.quorum.secret.file", f"{secret_file} is empty")
    if "controller" in values["process.roles"]:
        if values["node.id"] not in voters:
            raise ConfigError("node.id", f"{values['node.id']} is not among controller.quorum.voters "
                                         f"({', '.join(map(str, sorted(voters)))})")
        name = values["controller.listener.names"][0]
        if name not in listeners:
            raise ConfigError("listeners", f"a controller needs a {name}://host:port listener for its RPC port")
        rpc = f"{listeners[name][0]}:{listeners[name][1]}"
        if rpc == voters[values["node.id"]]:
            raise ConfigError("listeners", f"{name} listener {rpc} is the Raft port of controller.quorum.voters; "
                                           "the RPC port must differ")
        check_secret(voters, secret)
    if "broker" in values["process.roles"]:
        for key in ("broker.dial.proxies", "controller.rpc.proxies"):
            if values[key].strip():
                try:
                    parse_voters(values[key])
                except ConfigError as error:
                    raise ConfigError(key, error.message.partition(": ")[2]) from None
        advertised = parse_listeners(values["advertised.listeners"], "advertised.listeners")
        for name, (host, _) in advertised.items():
            if name not in listeners:
                raise ConfigError("advertised.listeners", f"{name} is not in listeners")
            if host in ("", "0.0.0.0"):
                raise ConfigError("advertised.listeners", f"{name}: give a host others can dial, not 0.0.0.0")
        if not values["controller.quorum.bootstrap.servers"] and "controller" not in values["process.roles"]:
            raise ConfigError("controller.quorum.bootstrap.servers",
                              "a broker needs the controllers' RPC listeners (host:port,...)")
    config = ServerConfig(values, voters, dial, listeners, secret, listener_values, given)
    if "broker" in values["process.roles"]:
        inter_broker = values["inter.broker.listener.name"]
        if inter_broker not in config.client_listeners:
            raise ConfigError("inter.broker.listener.name",
                              f"{inter_broker} is not one of this broker's client listeners "
                              f"({', '.join(config.client_listeners) or 'none in listeners'})")
        # Load every keystore and truststore now: a missing or bad file fails the start with
        # the key that names it, not the first client's handshake.
        for name in config.client_listeners:
            if security.uses_tls(config.security_protocol(name)):
                config.server_ssl_context(name)
        config.inter_broker_ssl_context()
        config.inter_broker_sasl()
        config.controller_ssl_context()
        config.controller_sasl()
    if config.is_controller and security.uses_tls(config.security_protocol(config.controller_listener_name)):
        config.server_ssl_context(config.controller_listener_name)
    for key in config.unread_logins():
        log.warning("%s is not read: brokers and controllers check SASL logins against the SCRAM credentials "
                    "in the metadata log; a broker logs in with inter.broker.listener.name's entry for "
                    "sasl.mechanism.inter.broker.protocol and the controller listener's for "
                    "sasl.mechanism.controller.protocol", key)
    return config


def load_server_config(path: str) -> ServerConfig:
    try:
        size = os.path.getsize(path)
        if size > CONFIG_FILE_BYTES_MAX:
            raise ConfigError("--config", f"{path} is {size} bytes; at most {CONFIG_FILE_BYTES_MAX}")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise ConfigError("--config", f"cannot read {path}: {error.strerror}") from None
    return server_config(parse_properties(text))
