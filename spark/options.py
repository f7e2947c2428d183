"""Options of the `raftka` data source, with spark-sql-kafka's names, parsed and checked.

Spark hands options over as strings in a case-insensitive map. ``ReadOptions.parse`` and
``WriteOptions.parse`` check them once, on the driver, and raise ``InvalidOptionError`` naming the
option, so a typo fails the query at once with a message instead of deep inside a task. An
option that is none of the source's (READ_OPTIONS, WRITE_OPTIONS, kafka.*) nor one Spark adds
itself (SPARK_STREAM_WRITE_OPTIONS) is refused with the list of known ones, never ignored.

Everything here is plain data and pure functions (no Spark, no network): it is pickled into
Spark's Python workers and unit-tested without a JVM.

Kafka's security configs (``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.*``) are
turned into client keywords by raftka.client.properties, as a client.properties file is, and
checked here by the client's own rules (PEM files read, SASL settings complete), so a typo fails
on the driver naming the option. The client keywords then hold the SASL password: a message
never repeats ``sasl.jaas.config`` or ``ssl.key.password``, and the dataclasses keep the configs
out of their repr.
"""
from __future__ import annotations

import difflib
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from raftka.client import TopicPartition
from raftka.client.aio.consumer import DEFAULTS as CONSUMER_DEFAULTS
from raftka.client.aio.producer import DEFAULTS as PRODUCER_DEFAULTS
from raftka.client.aio.security import SECURITY_DEFAULTS, apply_security
from raftka.client.errors import ConfigError
from raftka.client.properties import REFUSED as PROPERTY_REFUSED
from raftka.client.properties import client_configs
from raftka.common import sasl, security

log = logging.getLogger(__name__)

EARLIEST = -2  # in per-partition JSON offsets, as in Spark's Kafka source
LATEST = -1
POLL_TIMEOUT_MS_DEFAULT = 120_000  # kafkaConsumer.pollTimeoutMs: longest wait for a range to progress
MAX_POLL_RECORDS = 5_000  # records per poll in read(); also the largest Arrow batch
MAX_PARTITION_FETCH_BYTES = 4 * 1_048_576  # per-partition fetch size in read()

# kafka.* options handed to the client, as its keyword (Kafka's dotted name with '_').
CONSUMER_PASSTHROUGH = {"client.id", "request.timeout.ms", "fetch.max.bytes", "fetch.min.bytes",
                        "fetch.max.wait.ms", "max.partition.fetch.bytes", "retry.backoff.ms",
                        "metadata.max.age.ms", "check.crcs"}
PRODUCER_PASSTHROUGH = {"client.id", "request.timeout.ms", "linger.ms", "batch.size",
                        "compression.type", "delivery.timeout.ms", "max.block.ms", "buffer.memory",
                        "max.request.size", "retry.backoff.ms", "metadata.max.age.ms",
                        "max.in.flight.requests.per.connection"}
# Kafka's security configs, for the reader and the writer alike (raftka.client.properties maps
# them: sasl.jaas.config to user name and password, the truststore to ssl_cafile, ...).
SECURITY = {"security.protocol", "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location",
            "ssl.keystore.type", "ssl.key.password", "ssl.endpoint.identification.algorithm",
            "sasl.mechanism", "sasl.jaas.config"}
# Refused as Spark's Kafka source refuses them: the source manages these itself.
FORBIDDEN = {"auto.offset.reset": "use startingOffsets",
             "enable.auto.commit": "offsets are tracked in Spark's checkpoint (and committed to group.id)",
             "key.deserializer": "keys are always binary; cast or parse them in the query",
             "value.deserializer": "values are always binary; cast or parse them in the query",
             "key.serializer": "write a binary or string 'key' column",
             "value.serializer": "write a binary or string 'value' column",
             "interceptor.classes": "not supported",
             "enable.idempotence": "the writer always uses the idempotent producer",
             "acks": "the writer always uses acks=all"}


# The source's own options, in spark-sql-kafka's spelling (Spark hands them over lower-cased), besides
# kafka.* (checked by _client_configs). Anything else fails the query naming the known ones.
READ_OPTIONS = ("kafka.bootstrap.servers", "bootstrap.servers", "subscribe", "subscribePattern", "assign",
                "startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp",
                "startingOffsetsByTimestampStrategy", "endingOffsets", "endingOffsetsByTimestamp",
                "endingTimestamp", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
                "minPartitions", "failOnDataLoss", "includeHeaders", "group.id", "kafka.group.id",
                "groupIdPrefix", "kafkaConsumer.pollTimeoutMs")
WRITE_OPTIONS = ("kafka.bootstrap.servers", "bootstrap.servers", "topic", "flushTimeoutMs")
# Spark adds these to a streaming writer's options itself (writeStream.option("checkpointLocation"),
# queryName(...)); they are Spark's business, not the sink's.
SPARK_STREAM_WRITE_OPTIONS = ("checkpointLocation", "queryName")
# spark-sql-kafka options (and one Spark adds from load(path)/save(path)) the raftka source does not
# take, refused with the reason rather than ignored.
NOT_SUPPORTED = {
    "fetchoffset.numretries": "the client retries offset requests itself until kafka.request.timeout.ms",
    "fetchoffset.retryintervalms": "the client retries offset requests itself (kafka.retry.backoff.ms)",
    "maxrecordsperpartition": "use minPartitions to split large partition ranges",
    "path": "the raftka source reads and writes topics, not paths: use subscribe, subscribePattern or "
            "assign to read, topic to write (load() and save() without an argument)",
}
BY_TIMESTAMP_STRATEGIES = ("error", "latest")  # startingOffsetsByTimestampStrategy
MAX_TRIGGER_DELAY_DEFAULT = "15m"  # spark-sql-kafka's default
# Spark's time strings (JavaUtils.timeStringAs): a number and an optional unit, milliseconds if none.
DURATION_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                     "d": 86_400_000}
_DURATION = re.compile(r"^([0-9]+)\s*([a-z]+)?$")


class InvalidOptionError(ValueError):
    """An option of the `raftka` data source is missing, unknown in its context, or malformed.
    ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"raftka option '{option}': {message}")
        self.option = option


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise InvalidOptionError(name, f"must be true or false, got {raw!r}")


def _positive_int(opts: dict[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOptionError(name, f"must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise InvalidOptionError(name, f"must be a positive integer, got {raw!r}")
    return value


def _non_negative_long(opts: dict[str, str], name: str, what: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOptionError(name, f"must be {what} (an integer >= 0), got {raw!r}") from None
    if value < 0:
        raise InvalidOptionError(name, f"must be {what} (an integer >= 0), got {raw!r}")
    return value


def parse_duration_ms(name: str, raw: str) -> int:
    """A Spark time string (``15m``, ``30s``, ``500ms``, ``500``: milliseconds without a unit) in
    milliseconds."""
    match = _DURATION.match(raw.strip().lower())
    if match is None or (match.group(2) or "ms") not in DURATION_UNITS_MS:
        raise InvalidOptionError(name, f"must be a duration like 15m, 30s or 500ms "
                                       f"(units: {', '.join(DURATION_UNITS_MS)}), got {raw!r}")
    return int(int(match.group(1)) * DURATION_UNITS_MS[match.group(2) or "ms"])


def check_known(opts: Mapping[str, str], known: tuple[str, ...], role: str) -> None:
    """Every option that is not kafka.* must be one of ``known`` (compared lower-cased, as Spark
    hands options over): a misspelt option would otherwise be ignored and the query run with a
    default the user did not want."""
    canonical = {name.lower(): name for name in known}
    for key in sorted(opts):
        if key.startswith("kafka.") or key in canonical:
            continue
        if key in NOT_SUPPORTED:
            raise InvalidOptionError(key, f"is not supported: {NOT_SUPPORTED[key]}")
        close = difflib.get_close_matches(key, list(canonical), n=1, cutoff=0.75)
        hint = f"did you mean {canonical[close[0]]}? " if close else ""
        raise InvalidOptionError(key, f"is not an option of the raftka {role}; {hint}known: "
                                      f"{', '.join(known)} and kafka.<client config>")


def _bootstrap(opts: dict[str, str]) -> str:
    servers = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap.servers")
    if not servers or not servers.strip():
        raise InvalidOptionError("kafka.bootstrap.servers",
                                 "is required (host:port[,host:port...] of the brokers)")
    return servers.strip()


def _client_configs(opts: dict[str, str], allowed: set[str], role: str) -> dict[str, Any]:
    """kafka.* options -> client keyword arguments; forbidden ones raise, unknown ones too (a
    silently ignored config is a bug waiting to happen)."""
    out: dict[str, Any] = {}
    secured: dict[str, str] = {}
    for key, raw in opts.items():
        if not key.startswith("kafka.") or key in ("kafka.bootstrap.servers", "kafka.group.id"):
            continue
        name = key[len("kafka."):]
        if name in FORBIDDEN:
            raise InvalidOptionError(key, f"is not supported: {FORBIDDEN[name]}")
        if name in SECURITY or name in PROPERTY_REFUSED:  # the latter refused with the reason
            secured[name] = raw
            continue
        if name not in allowed:
            known = ", ".join("kafka." + n for n in sorted(allowed | SECURITY))
            raise InvalidOptionError(key, f"is not a {role} config the raftka source passes on (known: {known})")
        value: Any = raw
        if name == "check.crcs":
            value = raw.strip().lower() == "true"
        elif name not in ("client.id", "compression.type"):
            try:
                value = int(raw)
            except ValueError:
                raise InvalidOptionError(key, f"must be an integer, got {raw!r}") from None
        out[name.replace(".", "_")] = value
    if secured:
        out.update(_security_configs(secured, CONSUMER_DEFAULTS if role == "consumer" else PRODUCER_DEFAULTS))
    return out


def _option_error(error: ConfigError, option: str) -> InvalidOptionError:
    """A client's ConfigError (``key: problem``) as the Spark option's error."""
    problem = error.message
    if problem.startswith(f"{error.key}: "):
        problem = problem[len(error.key) + 2:]
    return InvalidOptionError(option, problem)


def _security_configs(props: dict[str, str], known: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka's security configs (names without ``kafka.``) -> client keywords, checked as the
    client checks them, with Kafka's option names in every message and never a password."""
    try:
        configs = client_configs(props, known)
    except ConfigError as error:
        raise _option_error(error, f"kafka.{error.key}") from None
    protocol = str(configs.get("security_protocol", security.PLAINTEXT)).upper()
    if protocol not in security.SECURITY_PROTOCOLS:
        raise InvalidOptionError("kafka.security.protocol", f"must be one of {', '.join(security.SECURITY_PROTOCOLS)}, "
                                                            f"got {props['security.protocol']!r}")
    configs["security_protocol"] = protocol
    given_sasl = [f"kafka.{n}" for n in sorted(props) if n.startswith("sasl.")]
    given_ssl = [f"kafka.{n}" for n in sorted(props) if n.startswith("ssl.")]
    if security.uses_sasl(protocol):
        mechanism = props.get("sasl.mechanism", "").strip()
        if mechanism.upper() not in sasl.MECHANISMS:
            # Kafka's default mechanism, GSSAPI (Kerberos), is not one Raftka speaks.
            got = f"got {mechanism!r}" if mechanism else "none is set"
            raise InvalidOptionError("kafka.sasl.mechanism", f"must be one of {', '.join(sasl.MECHANISMS)} with "
                                                             f"security.protocol={protocol}; {got}")
        configs["sasl_mechanism"] = mechanism.upper()
        if "sasl.jaas.config" not in props:
            raise InvalidOptionError("kafka.sasl.jaas.config", f"is required with security.protocol={protocol}: "
                                     f'{sasl.login_module_of(mechanism.upper())} required username="..." '
                                     'password="...";')
    elif given_sasl:  # a silently ignored SASL setting is how a client ends up unauthenticated
        raise InvalidOptionError("kafka.security.protocol", f"is {protocol}, which does not use "
                                 f"{', '.join(given_sasl)}; use SASL_SSL or SASL_PLAINTEXT")
    if given_ssl and not security.uses_tls(protocol):  # ... and talking plaintext
        raise InvalidOptionError("kafka.security.protocol", f"is {protocol}, which does not use "
                                 f"{', '.join(given_ssl)}; use SSL or SASL_SSL")
    # The client's own checks (readable PEM files, a key its password decrypts), here on the
    # driver rather than in every task; its keyword is traced back to the option that set it.
    try:
        apply_security({**SECURITY_DEFAULTS, **configs, "connection_factory": None})
    except ConfigError as error:
        origin = {keyword: name for name, raw in props.items() for keyword in client_configs({name: raw}, known)}
        raise _option_error(error, f"kafka.{origin.get(error.key, error.key.replace('_', '.'))}") from None
    return configs


def _partition_json(name: str, raw: str, not_json: str, kind: str, example: str, lowest: int,
                    allowed: str) -> dict[TopicPartition, int]:
    """Spark's per-partition JSON, ``{"topic": {"0": value}}`` -> {TopicPartition: value}, each
    value an integer >= ``lowest`` (``allowed`` says so in a message, ``kind`` names the values)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise InvalidOptionError(name, f"{not_json} ({error.msg} at position {error.pos}): {raw!r}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidOptionError(name, f'JSON must be an object like {{"topic": {{"0": {example}}}}}, got {raw!r}')
    out: dict[TopicPartition, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict) or not parts:
            raise InvalidOptionError(name, f"topic {topic!r} must map partition numbers to {kind}s "
                                           f'(like {{"0": {example}}}), got {parts!r}')
        for part, value in parts.items():
            try:
                index = int(part)
            except (TypeError, ValueError):
                index = -1
            if index < 0:
                raise InvalidOptionError(name, f"partition {part!r} of topic {topic!r} is not a "
                                               "partition number")
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise InvalidOptionError(name, f"{kind} of {topic}-{index} must be {allowed}, got {value!r}")
            out[TopicPartition(topic, index)] = value
    return out


def parse_offsets_json(name: str, raw: str) -> dict[TopicPartition, int]:
    """``{"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}`` -> {TopicPartition: offset}.
    -2 means earliest, -1 latest. Raises InvalidOptionError for anything else."""
    return _partition_json(name, raw, "is neither earliest, latest nor valid JSON", "offset", "23", EARLIEST,
                           "an integer >= 0, -2 (earliest) or -1 (latest)")


def parse_timestamps_json(name: str, raw: str) -> dict[TopicPartition, int]:
    """``{"topicA": {"0": 1700000000000, "1": 1700000000000}}`` -> {TopicPartition: timestamp in
    ms}; every timestamp >= 0. Raises InvalidOptionError for anything else."""
    return _partition_json(name, raw, "is not valid JSON", "timestamp", "1700000000000", 0,
                           "milliseconds since the epoch (an integer >= 0)")


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: ``kind`` is earliest, latest, committed, json (then
    ``offsets`` holds the per-partition values, -2/-1 included) or timestamp (then ``timestamp``
    holds one for every partition, or ``timestamps`` one per partition: each partition's position
    is its first offset whose record timestamp is >= it). ``option`` names the option it came from;
    ``no_match`` says what a start does where no record is that late: ``error`` or ``latest``
    (startingOffsetsByTimestampStrategy; an end then is always the latest offset)."""

    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    option: str = ""
    timestamp: int | None = None
    timestamps: dict[TopicPartition, int] = field(default_factory=dict)
    no_match: str = "error"

    @classmethod
    def parse(cls, name: str, raw: str | None, default: str, allowed: tuple[str, ...]) -> "OffsetSpec":
        text = (raw if raw is not None else default).strip()
        if text.lower() in ("earliest", "latest", "committed"):
            if text.lower() not in allowed:
                raise InvalidOptionError(name, f"{text.lower()!r} is not allowed here "
                                               f"(allowed: {', '.join(allowed)} or per-partition JSON)")
            return cls(text.lower(), option=name)
        return cls("json", parse_offsets_json(name, text), option=name)

    @classmethod
    def by_timestamp(cls, opts: dict[str, str], which: str, offsets: "OffsetSpec") -> "OffsetSpec":
        """spark-sql-kafka's precedence for ``which`` (starting or ending): ``<which>Timestamp``
        (one timestamp for every partition), then ``<which>OffsetsByTimestamp`` (per-partition
        JSON), then ``offsets`` (from ``<which>Offsets``). Every one given is checked; the first
        one given wins."""
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in BY_TIMESTAMP_STRATEGIES:
            raise InvalidOptionError("startingOffsetsByTimestampStrategy", "must be error or latest, got "
                                     f"{opts['startingoffsetsbytimestampstrategy']!r}")
        no_match = strategy if which == "starting" else "latest"
        single, per_partition = f"{which}Timestamp", f"{which}OffsetsByTimestamp"
        timestamp = _non_negative_long(opts, single, "milliseconds since the epoch")
        raw_json = opts.get(per_partition.lower())
        timestamps = parse_timestamps_json(per_partition, raw_json) if raw_json is not None else None
        given = [n for n, v in ((single, timestamp), (per_partition, timestamps)) if v is not None]
        if given and f"{which}offsets" in opts:
            given.append(f"{which}Offsets")
        if len(given) > 1:
            log.info("raftka: %s takes precedence over %s", given[0], ", ".join(given[1:]))
        if timestamp is not None:
            return cls("timestamp", option=single, timestamp=timestamp, no_match=no_match)
        if timestamps is not None:
            return cls("timestamp", option=per_partition, timestamps=timestamps, no_match=no_match)
        return offsets


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: ``subscribe`` (topic names), ``subscribePattern`` (a regular
    expression matched against whole topic names) or ``assign`` (JSON ``{"topic": [0, 1]}``)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()

    @classmethod
    def parse(cls, opts: dict[str, str]) -> "Subscription":
        given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
        names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
        if len(given) != 1:
            shown = ", ".join(names[k] for k in given) or "none"
            raise InvalidOptionError("subscribe", "exactly one of subscribe, subscribePattern or "
                                                  f"assign must be set (got: {shown})")
        kind = given[0]
        raw = opts[kind].strip()
        if kind == "subscribe":
            topics = tuple(t.strip() for t in raw.split(",") if t.strip())
            if not topics:
                raise InvalidOptionError("subscribe", f"no topic names in {raw!r}")
            return cls(topics=topics)
        if kind == "subscribepattern":
            try:
                re.compile(raw)
            except re.error as error:
                raise InvalidOptionError("subscribePattern", f"is not a valid regular expression: {error}") from None
            return cls(pattern=raw)
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as error:
            raise InvalidOptionError("assign", f"is not valid JSON ({error.msg}): {raw!r}") from None
        if not isinstance(parsed, dict) or not parsed or not all(
                isinstance(v, list) and v and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                                  for p in v) for v in parsed.values()):
            raise InvalidOptionError("assign", f'must look like {{"topicA": [0, 1]}}, got {raw!r}')
        return cls(assign=tuple(sorted(TopicPartition(t, p) for t, ps in parsed.items() for p in set(ps))))

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern={self.pattern!r}"
        if self.assign:
            return "assign=" + ",".join(f"{tp.topic}-{tp.partition}" for tp in self.assign)
        return "subscribe=" + ",".join(self.topics)


@dataclass(frozen=True)
class ReadOptions:
    """Checked reader options (batch and streaming)."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch only
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    group_id: str | None
    poll_timeout_ms: int
    consumer_configs: dict[str, Any] = field(repr=False)  # may hold the SASL password
    min_offsets_per_trigger: int | None = None  # streaming only
    max_trigger_delay_ms: int = 0  # with min_offsets_per_trigger
    group_id_prefix: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any], streaming: bool) -> "ReadOptions":
        """Check ``options`` for a batch (``streaming=False``) or streaming read."""
        opts = _lower(options)
        check_known(opts, READ_OPTIONS, "streaming reader" if streaming else "batch reader")
        group_id = (opts.get("group.id") or opts.get("kafka.group.id") or "").strip() or None
        start_allowed = ("earliest", "latest", "committed") if streaming else ("earliest", "committed")
        starting = OffsetSpec.by_timestamp(opts, "starting", OffsetSpec.parse(
            "startingOffsets", opts.get("startingoffsets"), "latest" if streaming else "earliest", start_allowed))
        if starting.kind == "committed" and group_id is None:
            raise InvalidOptionError("startingOffsets", "'committed' needs group.id (the consumer group "
                                                        "whose committed offsets to start from)")
        if not streaming and any(v == LATEST for v in starting.offsets.values()):
            raise InvalidOptionError("startingOffsets", "-1 (latest) is not allowed in a batch query")
        ending: OffsetSpec | None = None
        if streaming:
            for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
                if name.lower() in opts:
                    raise InvalidOptionError(name, "is for batch queries only; a streaming query "
                                                   "reads until it is stopped")
        else:
            ending = OffsetSpec.by_timestamp(opts, "ending", OffsetSpec.parse(
                "endingOffsets", opts.get("endingoffsets"), "latest", ("latest",)))
            if any(v == EARLIEST for v in ending.offsets.values()):
                raise InvalidOptionError("endingOffsets", "-2 (earliest) is not allowed as an ending offset")
        max_per_trigger = _positive_int(opts, "maxOffsetsPerTrigger")
        min_per_trigger = _positive_int(opts, "minOffsetsPerTrigger")
        raw_delay = opts.get("maxtriggerdelay")
        delay_ms = parse_duration_ms("maxTriggerDelay", MAX_TRIGGER_DELAY_DEFAULT if raw_delay is None else raw_delay)
        if not streaming:
            for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
                if name.lower() in opts:
                    raise InvalidOptionError(name, "is for streaming queries only")
        if raw_delay is not None and min_per_trigger is None:
            raise InvalidOptionError("maxTriggerDelay", "has no effect without minOffsetsPerTrigger")
        if min_per_trigger is not None and max_per_trigger is not None and min_per_trigger > max_per_trigger:
            raise InvalidOptionError("minOffsetsPerTrigger", f"{min_per_trigger} is higher than "
                                                             f"maxOffsetsPerTrigger {max_per_trigger}")
        prefix = opts.get("groupidprefix")
        if prefix is not None and not prefix.strip():
            raise InvalidOptionError("groupIdPrefix", "must not be empty")
        if prefix is not None and group_id is not None:
            log.warning("raftka: groupIdPrefix is ignored: group.id is set")  # as spark-sql-kafka
        poll_timeout = _positive_int(opts, "kafkaConsumer.pollTimeoutMs") or POLL_TIMEOUT_MS_DEFAULT
        return cls(bootstrap_servers=_bootstrap(opts), subscription=Subscription.parse(opts),
                   starting=starting, ending=ending, max_offsets_per_trigger=max_per_trigger,
                   min_partitions=_positive_int(opts, "minPartitions"),
                   fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
                   include_headers=_bool(opts, "includeHeaders", False), group_id=group_id,
                   poll_timeout_ms=poll_timeout,
                   consumer_configs=_client_configs(opts, CONSUMER_PASSTHROUGH, "consumer"),
                   min_offsets_per_trigger=min_per_trigger, max_trigger_delay_ms=delay_ms,
                   group_id_prefix=None if group_id is not None or prefix is None else prefix.strip())


@dataclass(frozen=True)
class WriteOptions:
    """Checked writer options: where rows go (``topic`` overrides a topic column)."""

    bootstrap_servers: str
    topic: str | None
    producer_configs: dict[str, Any] = field(repr=False)  # may hold the SASL password
    flush_timeout_ms: int

    @classmethod
    def parse(cls, options: Mapping[str, Any], streaming: bool = False) -> "WriteOptions":
        opts = _lower(options)
        if streaming:
            check_known(opts, WRITE_OPTIONS + SPARK_STREAM_WRITE_OPTIONS, "streaming writer")
        else:
            check_known(opts, WRITE_OPTIONS, "batch writer")
        topic = (opts.get("topic") or "").strip() or None
        flush_timeout = _positive_int(opts, "flushTimeoutMs") or 300_000
        return cls(bootstrap_servers=_bootstrap(opts), topic=topic,
                   producer_configs=_client_configs(opts, PRODUCER_PASSTHROUGH, "producer"),
                   flush_timeout_ms=flush_timeout)
