"""Interim metadata state machine and controller decisions, so the controller runs end to end.

INTERIM: raft_meta's metadata package (typed records, immutable MetadataImage + MetadataDelta,
placement and election decisions) replaces this module; the controller only needs what
``MetadataStateMachine`` offers below (apply/snapshot/restore, ``image``, ``attach(service)``).

Records (the payload after the envelope's b"M"): a msgpack map with "type" and fields:

    register_broker  {broker_id, incarnation_id, endpoints {listener: "host:port"}, rack}
                     -> broker epoch = the record's offset (as Kafka); re-applying the same
                        incarnation is a no-op returning the existing epoch. Registers fenced.
    unfence_broker   {broker_id, broker_epoch}
    fence_broker     {broker_id, broker_epoch}: the broker leaves every ISR (never emptying one)
                     and each partition it led gets the first other ISR replica that is unfenced
                     as leader (leader epoch + 1), or leader -1 (offline); partition epoch + 1.
    create_topic     {name, topic_id, partitions [[replica ids]], configs {k: v}}
    delete_topic     {name, topic_id}
    config_change    {topic, configs {k: v or None (delete)}}
    partition_change {topic, partition, expected_partition_epoch, leader?, isr?}
    producer_ids     {broker_id, first_id, size}: applies only when first_id is the next id.

Apply never raises: a record that no longer applies returns {"error": code, "message": ...}
and changes nothing, identically on every node. No clock reads: times never enter the image.
"""
from __future__ import annotations

import asyncio
import copy
import logging
import re
import time
import uuid
from typing import Any

import msgpack

from client.protocol import errors
from client.protocol.configs import TOPIC_CONFIGS
from client.protocol.errors import (
    ConfigError, InvalidPartitionsError, InvalidReplicationFactorError, InvalidRequestError,
    InvalidTopicError, RaftkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)

log = logging.getLogger(__name__)

TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
TOPIC_NAME_CHARS_MAX = 249
PARTITIONS_MAX = 10_000
PRODUCER_ID_BLOCK_SIZE = 1000
FENCE_CHECK_INTERVAL_MS = 200
TOPICS_PER_REQUEST_MAX = 10_000
PRODUCER_ID_ATTEMPTS_MAX = 20
PREFERRED_ELECTIONS_PER_PASS = 1000


def encode(record: dict) -> bytes:
    return b"M" + msgpack.packb(record, use_bin_type=True)


def _err(code: int, message: str) -> dict:
    return {"error": code, "message": message}


class MetadataStateMachine:
    """The metadata image (plain dicts, copied on write by apply) and its replay."""

    def __init__(self, config: Any = None) -> None:
        self.image: dict[str, Any] = {"brokers": {}, "topics": {}, "next_producer_id": 0}
        self.config = config

    # -- replay (tick thread) --------------------------------------------------------------

    def apply(self, payload: bytes, index: int) -> Any:
        try:
            record = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            kind = record["type"]
        except Exception:
            return _err(errors.INVALID_REQUEST, f"undecodable metadata record at offset {index}")
        method = getattr(self, f"_apply_{kind}", None)
        if method is None:
            return _err(errors.INVALID_REQUEST, f"unknown metadata record type {kind!r}")
        # Copy on write: the top-level maps are copied here, a topic or broker entry only when a
        # method changes it (_topic/_broker). Readers on other threads hold the old image, which
        # is never mutated; a failed apply leaves self.image as it was.
        image = {"brokers": dict(self.image["brokers"]), "topics": dict(self.image["topics"]),
                 "next_producer_id": self.image["next_producer_id"]}
        try:
            result = method(image, record, index)
        except (KeyError, TypeError, ValueError) as error:
            return _err(errors.INVALID_REQUEST, f"malformed {kind} record: {error!r}")
        if not (isinstance(result, dict) and "error" in result):
            self.image = image
        return result

    @staticmethod
    def _topic(image: dict, name: str) -> dict:
        topic = copy.deepcopy(image["topics"][name])
        image["topics"][name] = topic
        return topic

    @staticmethod
    def _broker(image: dict, broker_id: int) -> dict:
        broker = dict(image["brokers"][broker_id])
        image["brokers"][broker_id] = broker
        return broker

    def _apply_register_broker(self, image: dict, r: dict, index: int) -> dict:
        broker_id = int(r["broker_id"])
        current = image["brokers"].get(broker_id)
        if current is not None and current["incarnation_id"] == r["incarnation_id"]:
            return {"broker_epoch": current["broker_epoch"]}
        image["brokers"][broker_id] = {
            "incarnation_id": r["incarnation_id"], "endpoints": dict(r["endpoints"]),
            "rack": r.get("rack"), "broker_epoch": index, "fenced": True,
            "registered_offset": index,
        }
        return {"broker_epoch": index}

    def _apply_unfence_broker(self, image: dict, r: dict, index: int) -> dict:
        broker = image["brokers"].get(int(r["broker_id"]))
        if broker is None or broker["broker_epoch"] != r["broker_epoch"]:
            return _err(errors.STALE_BROKER_EPOCH, "unfence for a stale broker epoch")
        broker_id = int(r["broker_id"])
        self._broker(image, broker_id)["fenced"] = False
        # Offline partitions whose ISR kept this broker get it back as leader.
        for name, original in list(image["topics"].items()):
            if not any(p["leader"] == -1 and broker_id in p["isr"] for p in original["partitions"]):
                continue
            for p in self._topic(image, name)["partitions"]:
                if p["leader"] == -1 and broker_id in p["isr"]:
                    p["leader"] = broker_id
                    p["leader_epoch"] += 1
                    p["partition_epoch"] += 1
        return {}

    def _apply_fence_broker(self, image: dict, r: dict, index: int) -> dict:
        broker_id = int(r["broker_id"])
        broker = image["brokers"].get(broker_id)
        if broker is None or broker["broker_epoch"] != r["broker_epoch"]:
            return _err(errors.STALE_BROKER_EPOCH, "fence for a stale broker epoch")
        if broker["fenced"]:
            return {}
        self._broker(image, broker_id)["fenced"] = True
        live = {b for b, info in image["brokers"].items() if not info["fenced"]}
        for name, original in list(image["topics"].items()):
            if not any(p["leader"] == broker_id or broker_id in p["isr"] for p in original["partitions"]):
                continue
            topic = self._topic(image, name)
            # The cluster default travels in the record: configs may differ between controllers.
            unclean = topic["configs"].get("unclean.leader.election.enable", bool(r.get("unclean_default")))
            for p in topic["partitions"]:
                changed = False
                if broker_id in p["isr"] and len(p["isr"]) > 1:
                    p["isr"] = [b for b in p["isr"] if b != broker_id]
                    changed = True
                if p["leader"] == broker_id:
                    candidates = [b for b in p["replicas"] if b in p["isr"] and b in live]
                    if not candidates and unclean:
                        candidates = [b for b in p["replicas"] if b in live]
                        if candidates:
                            p["isr"] = [candidates[0]]
                    p["leader"] = candidates[0] if candidates else -1
                    p["leader_epoch"] += 1
                    changed = True
                if changed:
                    p["partition_epoch"] += 1
        return {}

    def _apply_create_topic(self, image: dict, r: dict, index: int) -> dict:
        existing = image["topics"].get(r["name"])
        if existing is not None:
            if existing["topic_id"] == r["topic_id"]:
                return {"topic_id": existing["topic_id"]}  # a retried create
            return _err(errors.TOPIC_ALREADY_EXISTS, f"topic {r['name']!r} already exists")
        image["topics"][r["name"]] = {
            "topic_id": r["topic_id"], "configs": dict(r["configs"]),
            "partitions": [{"replicas": list(replicas), "leader": replicas[0], "leader_epoch": 0,
                            "isr": list(replicas), "partition_epoch": 0} for replicas in r["partitions"]],
        }
        return {"topic_id": r["topic_id"]}

    def _apply_delete_topic(self, image: dict, r: dict, index: int) -> dict:
        existing = image["topics"].get(r["name"])
        if existing is None or existing["topic_id"] != r["topic_id"]:
            return {}  # already deleted: idempotent
        del image["topics"][r["name"]]
        return {}

    def _apply_config_change(self, image: dict, r: dict, index: int) -> dict:
        if r["topic"] not in image["topics"]:
            return _err(errors.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {r['topic']!r}")
        topic = self._topic(image, r["topic"])
        for key, value in r["configs"].items():
            if value is None:
                topic["configs"].pop(key, None)
            else:
                topic["configs"][key] = value
        return {}

    def _apply_partition_change(self, image: dict, r: dict, index: int) -> dict:
        topic = image["topics"].get(r["topic"])
        if topic is None or not 0 <= r["partition"] < len(topic["partitions"]):
            return _err(errors.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition")
        p = self._topic(image, r["topic"])["partitions"][r["partition"]]
        if p["partition_epoch"] != r["expected_partition_epoch"]:
            return _err(errors.INVALID_UPDATE_VERSION,
                        f"partition epoch is {p['partition_epoch']}, change expected {r['expected_partition_epoch']}")
        if "isr" in r and r["isr"] is not None:
            p["isr"] = list(r["isr"])
        if "leader" in r and r["leader"] is not None and r["leader"] != p["leader"]:
            p["leader"] = r["leader"]
            p["leader_epoch"] += 1
        p["partition_epoch"] += 1
        return {"leader_epoch": p["leader_epoch"], "partition_epoch": p["partition_epoch"],
                "leader": p["leader"], "isr": p["isr"]}

    def _apply_producer_ids(self, image: dict, r: dict, index: int) -> dict:
        if r["first_id"] != image["next_producer_id"]:
            return _err(errors.INVALID_UPDATE_VERSION, "producer id block already handed out")
        image["next_producer_id"] = r["first_id"] + r["size"]
        return {"first_id": r["first_id"], "size": r["size"]}

    def snapshot(self) -> bytes:
        return msgpack.packb(self.image, use_bin_type=True)

    def restore(self, snapshot: bytes) -> None:
        self.image = msgpack.unpackb(snapshot, raw=False, strict_map_key=False)

    # -- controller side (asyncio loop) ----------------------------------------------------

    def attach(self, service: Any) -> None:
        ControllerHandlers(self, service)


class ControllerHandlers:
    """The active controller's decisions: validate, build records, commit, answer."""

    def __init__(self, machine: MetadataStateMachine, service: Any) -> None:
        from raft_meta.controller import service as svc
        self.machine = machine
        self.service = service
        self.config = service.config
        self.session_timeout_ms: int = self.config["broker.session.timeout.ms"]
        self.last_heartbeat: dict[int, float] = {}  # broker id -> monotonic seconds
        self.active_since: float | None = None
        self.id_block: list[int] | None = None  # [next, end) of this controller's producer ids
        self.id_block_term = -1
        service.handlers.update({
            svc.API_BROKER_REGISTRATION: self.broker_registration,
            svc.API_BROKER_HEARTBEAT: self.broker_heartbeat,
            svc.API_CREATE_TOPICS: self.create_topics,
            svc.API_DELETE_TOPICS: self.delete_topics,
            svc.API_DESCRIBE_CONFIGS: self.describe_configs,
            svc.API_ALTER_CONFIGS: self.alter_configs,
            svc.API_ALTER_PARTITION: self.alter_partition,
            svc.API_INIT_PRODUCER_ID: self.init_producer_id,
            svc.API_ALLOCATE_PRODUCER_IDS: self.allocate_producer_ids,
            svc.API_METADATA: self.metadata,
        })
        service.background_factories.append(self.fence_loop)

    @property
    def image(self) -> dict:
        return self.machine.image

    async def commit_one(self, record: dict) -> dict:
        result = await self.service.raft.submit(encode(record), self.service.request_timeout_ms)
        if isinstance(result, dict) and "error" in result:
            raise errors.error_for(result["error"], result.get("message"))
        return result

    # BrokerRegistration {broker_id, incarnation_id, listeners {name: "host:port"}, rack}
    async def broker_registration(self, version: int, body: dict) -> tuple[int, dict]:
        from raft_meta.controller.service import require
        broker_id = require(body, "broker_id", int)
        incarnation = require(body, "incarnation_id", str)
        listeners = require(body, "listeners", dict)
        current = self.image["brokers"].get(broker_id)
        if (current is not None and current["incarnation_id"] != incarnation and not current["fenced"]
                and self._alive(broker_id)):
            return errors.DUPLICATE_BROKER_REGISTRATION, {
                "error_message": f"broker {broker_id} is registered by a live incarnation"}
        result = await self.commit_one({"type": "register_broker", "broker_id": broker_id,
                                        "incarnation_id": incarnation, "endpoints": listeners,
                                        "rack": body.get("rack")})
        self.last_heartbeat[broker_id] = time.monotonic()
        return errors.NONE, {"broker_epoch": result["broker_epoch"]}

    # BrokerHeartbeat {broker_id, broker_epoch, current_metadata_offset, want_fence, want_shut_down}
    async def broker_heartbeat(self, version: int, body: dict) -> tuple[int, dict]:
        from raft_meta.controller.service import require
        broker_id = require(body, "broker_id", int)
        epoch = require(body, "broker_epoch", int)
        offset = int(body.get("current_metadata_offset", -1))
        broker = self.image["brokers"].get(broker_id)
        if broker is None:
            return errors.BROKER_ID_NOT_REGISTERED, {"error_message": f"broker {broker_id} is not registered"}
        if broker["broker_epoch"] != epoch:
            return errors.STALE_BROKER_EPOCH, {"error_message": f"broker epoch {epoch} is stale"}
        self.last_heartbeat[broker_id] = time.monotonic()
        caught_up = offset >= broker["registered_offset"]
        if body.get("want_fence") or body.get("want_shut_down"):
            if not broker["fenced"]:
                await self.commit_one(self._fence_record(broker_id, epoch))
        elif broker["fenced"] and caught_up:
            await self.commit_one({"type": "unfence_broker", "broker_id": broker_id, "broker_epoch": epoch})
        broker = self.image["brokers"][broker_id]
        return errors.NONE, {"is_caught_up": caught_up, "is_fenced": broker["fenced"],
                             "should_shut_down": bool(body.get("want_shut_down")) and broker["fenced"],
                             "leader_id": self.config.node_id}

    def _fence_record(self, broker_id: int, epoch: int) -> dict:
        return {"type": "fence_broker", "broker_id": broker_id, "broker_epoch": epoch,
                "unclean_default": self.config["unclean.leader.election.enable"]}

    def _alive(self, broker_id: int) -> bool:
        seen = self.last_heartbeat.get(broker_id)
        return seen is not None and (time.monotonic() - seen) * 1000 < self.session_timeout_ms

    async def fence_loop(self) -> None:
        """Active controller only: fence brokers silent for broker.session.timeout.ms. A newly
        active controller gives every broker one session timeout of grace first."""
        while True:
            await asyncio.sleep(FENCE_CHECK_INTERVAL_MS / 1000)
            if not self.service.is_active:
                self.active_since = None
                continue
            now = time.monotonic()
            if self.active_since is None:
                self.active_since = now
                for broker_id in self.image["brokers"]:
                    self.last_heartbeat[broker_id] = now  # grace
            await self._elect_preferred_leaders()
            for broker_id, broker in list(self.image["brokers"].items()):
                if broker["fenced"] or self._alive(broker_id):
                    continue
                try:
                    await self.commit_one(self._fence_record(broker_id, broker["broker_epoch"]))
                    log.info("fenced broker %d: no heartbeat for %d ms", broker_id, self.session_timeout_ms)
                except RaftkaError as error:
                    log.warning("fencing broker %d failed: %s", broker_id, error)

    async def _elect_preferred_leaders(self) -> None:
        """Move leadership back to the first replica (the preferred leader) when it is unfenced
        and in the ISR; at most PREFERRED_ELECTIONS_PER_PASS changes per pass."""
        image = self.image
        live = {b for b, info in image["brokers"].items() if not info["fenced"]}
        done = 0
        for name, topic in image["topics"].items():
            for index, p in enumerate(topic["partitions"]):
                preferred = p["replicas"][0]
                if p["leader"] == preferred or preferred not in live or preferred not in p["isr"]:
                    continue
                try:
                    await self.commit_one({"type": "partition_change", "topic": name, "partition": index,
                                           "expected_partition_epoch": p["partition_epoch"], "leader": preferred})
                except RaftkaError as error:
                    log.debug("preferred leader election for %s-%d: %s", name, index, error)
                done += 1
                if done >= PREFERRED_ELECTIONS_PER_PASS:
                    return

    # CreateTopics {topics: [{name, num_partitions, replication_factor, configs {k: v}}], validate_only}
    async def create_topics(self, version: int, body: dict) -> tuple[int, dict]:
        from raft_meta.controller.service import require
        topics = require(body, "topics", list)
        if len(topics) > TOPICS_PER_REQUEST_MAX:
            raise InvalidRequestError(f"{len(topics)} topics in one request; at most {TOPICS_PER_REQUEST_MAX}")
        results = []
        for topic in topics:
            name = topic.get("name") if isinstance(topic, dict) else None
            try:
                record = self._create_topic_record(topic)
                if not body.get("validate_only"):
                    await self.commit_one(record)
                results.append({"name": name, "topic_id": record["topic_id"], "error_code": errors.NONE,
                                "error_message": None, "num_partitions": len(record["partitions"]),
                                "replication_factor": len(record["partitions"][0])})
            except RaftkaError as error:
                if isinstance(error, errors.NotControllerError):
                    raise
                results.append({"name": name, "topic_id": None, "error_code": error.code,
                                "error_message": error.message})
        return errors.NONE, {"topics": results}

    def _create_topic_record(self, topic: Any) -> dict:
        if not isinstance(topic, dict):
            raise InvalidRequestError("each topic must be a map")
        name = topic.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidTopicError("topic name must be a non-empty string")
        if name in (".", "..") or len(name) > TOPIC_NAME_CHARS_MAX or not TOPIC_NAME_RE.match(name):
            raise InvalidTopicError(f"topic name {name!r} is invalid: use at most {TOPIC_NAME_CHARS_MAX} "
                                    "of [a-zA-Z0-9._-], and not '.' or '..'")
        if name in self.image["topics"]:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        partitions = topic.get("num_partitions", -1)
        partitions = self.config["num.partitions"] if partitions in (-1, None) else partitions
        if not isinstance(partitions, int) or partitions < 1 or partitions > PARTITIONS_MAX:
            raise InvalidPartitionsError(f"num_partitions must be between 1 and {PARTITIONS_MAX}, got {partitions}")
        rf = topic.get("replication_factor", -1)
        rf = self.config["default.replication.factor"] if rf in (-1, None) else rf
        live = sorted(b for b, info in self.image["brokers"].items() if not info["fenced"])
        if not isinstance(rf, int) or rf < 1 or rf > len(live):
            raise InvalidReplicationFactorError(
                f"replication factor {rf} is invalid: must be between 1 and the {len(live)} unfenced broker(s)")
        raw_configs = topic.get("configs") or {}
        if not isinstance(raw_configs, dict):
            raise InvalidRequestError("configs must be a map")
        try:
            configs = TOPIC_CONFIGS.parse({k: v for k, v in raw_configs.items()}, fill_defaults=False)
        except ConfigError as error:
            raise errors.InvalidConfigError(f"topic {name!r}: {error.message}") from None
        replicas = self._place(live, partitions, rf)
        return {"type": "create_topic", "name": name, "topic_id": uuid.uuid4().hex,
                "partitions": replicas, "configs": configs}

    def _place(self, live: list[int], partitions: int, rf: int) -> list[list[int]]:
        """Round-robin replicas; the start broker rotates so leaders spread evenly, continuing
        from how many partitions each broker already leads."""
        led = {b: 0 for b in live}
        for topic in self.image["topics"].values():
            for p in topic["partitions"]:
                if p["leader"] in led:
                    led[p["leader"]] += 1
        order = sorted(live, key=lambda b: (led[b], b))
        start = live.index(order[0])
        return [[live[(start + i + j) % len(live)] for j in range(rf)] for i in range(partitions)]

    # DeleteTopics {topic_names: [...]}
    async def delete_topics(self, version: int, body: dict) -> tuple[int, dict]:
        from raft_meta.controller.service import require
        names = require(body, "topic_names", list)
        results = []
        for name in names:
            topic = self.image["topics"].get(name)
            if topic is None:
                results.append({"name": name, "error_code": errors.UNKNOWN_TOPIC_OR_PARTITION,
                                "error_message": f"unknown topic {name!r}"})
                continue
            await self.commit_one({"type": "delete_topic", "name": name, "topic_id": topic["topic_id"]})
            results.append({"name": name, "error_code": errors.NONE, "error_message": None})
        return errors.NONE, {"responses": results}

    # DescribeConfigs {resources: [{resource_type: "topic", resource_name}]}
    async def describe_configs(self, version: int, body: dict) -> tuple[int, dict]:
        from raft_meta.controller.service import require
        out = []
        for resource in require(body, "resources", list):
            name = resource.get("resource_name") if isinstance(resource, dict) else None
            topic = self.image["topics"].get(name)
            if topic is None:
                out.append({"resource_name": name, "error_code": errors.UNKNOWN_TOPIC_OR_PARTITION,
                            "error_message": f"unknown topic {name!r}", "configs": []})
                continue
            configs = [{"name": key.name, "value": topic["configs"].get(key.name, key.default),
                        "is_default": key.name not in topic["configs"]}
                       for key in TOPIC_CONFIGS.keys.values()]
            out.append({"resource_name": name, "error_code": errors.NONE, "error_message": None,
                        "configs": configs})
        return errors.NONE, {"results": out}

    # AlterConfigs {resources: [{resource_type: "topic", resource_name, configs {k: v or None}}]}
    async def alter_configs(self, version: int, body: dict) -> tuple[int, dict]:
        from raft_meta.controller.service import require
        out = []
        for resource in require(body, "resources", list):
            name = resource.get("resource_name") if isinstance(resource, dict) else None
            try:
                if name not in self.image["topics"]:
                    raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
                changes = resource.get("configs") or {}
                if not isinstance(changes, dict):
                    raise InvalidRequestError("configs must be a map")
                parsed = TOPIC_CONFIGS.parse({k: v for k, v in changes.items() if v is not None},
                                             fill_defaults=False)
                parsed.update({k: None for k, v in changes.items() if v is None and k in TOPIC_CONFIGS})
                unknown = [k for k, v in changes.items() if v is None and k not in TOPIC_CONFIGS]
                if unknown:
                    raise ConfigError(unknown[0], "unknown configuration key")
                await self.commit_one({"type": "config_change", "topic": name, "configs": parsed})
                out.append({"resource_name": name, "error_code": errors.NONE, "error_message": None})
            except ConfigError as error:
                out.append({"resource_name": name, "error_code": errors.INVALID_CONFIG, "error_message": error.message})
            except errors.NotControllerError:
                raise
            except RaftkaError as error:
                out.append({"resource_name": name, "error_code": error.code, "error_message": error.message})
        return errors.NONE, {"responses": out}

    # AlterPartition {broker_id, broker_epoch, topic, partition, leader_epoch, partition_epoch, new_isr}
    async def alter_partition(self, version: int, body: dict) -> tuple[int, dict]:
        from raft_meta.controller.service import require
        broker_id = require(body, "broker_id", int)
        topic_name = require(body, "topic", str)
        index = require(body, "partition", int)
        new_isr = require(body, "new_isr", list)
        broker = self.image["brokers"].get(broker_id)
        if broker is None or broker["broker_epoch"] != body.get("broker_epoch"):
            return errors.STALE_BROKER_EPOCH, {"error_message": "stale or unknown broker epoch"}
        topic = self.image["topics"].get(topic_name)
        if topic is None or not 0 <= index < len(topic["partitions"]):
            return errors.UNKNOWN_TOPIC_OR_PARTITION, {"error_message": f"unknown partition {topic_name}-{index}"}
        p = topic["partitions"][index]
        if p["leader"] != broker_id:
            return errors.NOT_LEADER_OR_FOLLOWER, {"error_message": f"broker {broker_id} does not lead {topic_name}-{index}"}
        if body.get("leader_epoch") != p["leader_epoch"]:
            return errors.FENCED_LEADER_EPOCH, {"error_message": f"leader epoch {body.get('leader_epoch')} is not {p['leader_epoch']}"}
        if body.get("partition_epoch") != p["partition_epoch"]:
            return errors.INVALID_UPDATE_VERSION, {
                "error_message": f"partition epoch {body.get('partition_epoch')} is stale (now {p['partition_epoch']})"}
        bad = [b for b in new_isr if b not in p["replicas"] or self.image["brokers"].get(b, {}).get("fenced", True)]
        if bad or broker_id not in new_isr:
            return errors.INELIGIBLE_REPLICA, {"error_message": f"ineligible ISR members {bad} (must be unfenced replicas, leader included)"}
        result = await self.commit_one({"type": "partition_change", "topic": topic_name, "partition": index,
                                        "expected_partition_epoch": p["partition_epoch"], "isr": new_isr})
        return errors.NONE, result

    async def _allocate_block(self, size: int) -> tuple[int, int]:
        for _ in range(PRODUCER_ID_ATTEMPTS_MAX):  # concurrent requests race for the next id
            first = self.image["next_producer_id"]
            try:
                result = await self.commit_one({"type": "producer_ids", "broker_id": self.config.node_id,
                                                "first_id": first, "size": size})
            except errors.InvalidUpdateVersionError:
                continue
            return result["first_id"], result["size"]
        raise errors.RequestTimedOutError("producer id allocation kept racing; retry")

    # AllocateProducerIds {broker_id, broker_epoch} -> {producer_id_start, producer_id_len}
    async def allocate_producer_ids(self, version: int, body: dict) -> tuple[int, dict]:
        """Kafka's AllocateProducerIds: a broker gets a committed block of PRODUCER_ID_BLOCK_SIZE
        ids and hands them out itself (one Raft commit per block, not per producer)."""
        from raft_meta.controller.service import require
        broker_id = require(body, "broker_id", int)
        broker = self.image["brokers"].get(broker_id)
        if broker is None or broker["broker_epoch"] != body.get("broker_epoch"):
            return errors.STALE_BROKER_EPOCH, {"error_message": "stale or unknown broker epoch"}
        first, size = await self._allocate_block(PRODUCER_ID_BLOCK_SIZE)
        return errors.NONE, {"producer_id_start": first, "producer_id_len": size}

    # InitProducerId {} -> {producer_id, producer_epoch}
    async def init_producer_id(self, version: int, body: dict) -> tuple[int, dict]:
        """Ids from a block this controller allocated (a new active controller starts a new
        block; ids left in an old one are skipped, never reused)."""
        if self.id_block is None or self.id_block[0] >= self.id_block[1] or self.id_block_term != self.service.raft.term:
            first, size = await self._allocate_block(PRODUCER_ID_BLOCK_SIZE)
            self.id_block = [first, first + size]
            self.id_block_term = self.service.raft.term
        producer_id = self.id_block[0]
        self.id_block[0] += 1
        return errors.NONE, {"producer_id": producer_id, "producer_epoch": 0}

    # Metadata {topics: [...] or None} -> brokers and topics as the committed image says
    async def metadata(self, version: int, body: dict) -> tuple[int, dict]:
        wanted = body.get("topics")
        image = self.image
        topics = []
        for name, topic in sorted(image["topics"].items()):
            if wanted is not None and name not in wanted:
                continue
            topics.append({"name": name, "topic_id": topic["topic_id"], "error_code": errors.NONE,
                           "partitions": [{"partition_index": i, "leader_id": p["leader"],
                                           "leader_epoch": p["leader_epoch"], "replica_nodes": p["replicas"],
                                           "isr_nodes": p["isr"], "partition_epoch": p["partition_epoch"]}
                                          for i, p in enumerate(topic["partitions"])]})
        for name in wanted or []:
            if name not in image["topics"]:
                topics.append({"name": name, "error_code": errors.UNKNOWN_TOPIC_OR_PARTITION, "partitions": []})
        brokers = [{"node_id": b, "endpoints": info["endpoints"], "rack": info["rack"], "fenced": info["fenced"],
                    "broker_epoch": info["broker_epoch"]} for b, info in sorted(image["brokers"].items())]
        return errors.NONE, {"brokers": brokers, "topics": topics, "controller_id": self.config.node_id,
                             "metadata_offset": self.service.state.offset}
