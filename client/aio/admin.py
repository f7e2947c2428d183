"""The asyncio admin client: topics, configs, the cluster's brokers.

CreateTopics, DeleteTopics, DescribeConfigs and AlterConfigs go to any broker, which forwards
them to the active controller (docs/protocol.md); NOT_CONTROLLER and lost connections are
retried on another broker within ``request_timeout_ms``.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from client.aio.cluster import (API_ALTER_CONFIGS, API_CREATE_TOPICS, API_DELETE_TOPICS,
                                API_DESCRIBE_CLUSTER, API_DESCRIBE_CONFIGS, Cluster)
from client.errors import ConfigError
from client.protocol import errors
from client.protocol.errors import RaftkaError
from client.structs import ConfigEntry, ConfigResource, NewTopic

DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": "localhost:9092",
    "client_id": None,
    "request_timeout_ms": 30_000,
    "retry_backoff_ms": 100,
    "metadata_max_age_ms": 300_000,
    "connection_factory": None,
}
IGNORED = {"api_version"}
_RETRIABLE_CODES = tuple(code for code, spec in errors.SPECS.items() if spec.retriable)


def _raise_or_collect(results: dict[str, RaftkaError | None], raise_errors: bool) -> dict[str, RaftkaError | None]:
    if raise_errors:
        for error in results.values():
            if error is not None:
                raise error
    return results


def _config_value(value: Any) -> Any:
    """A config value as Kafka writes it: a string (booleans lower-case, lists comma-separated)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_config_value(v) for v in value)
    return str(value)


class AdminClient:
    """asyncio admin client; the blocking ``client.AdminClient`` wraps it."""

    def __init__(self, **configs: Any) -> None:
        unknown = set(configs) - set(DEFAULTS) - IGNORED
        if unknown:
            raise ConfigError(sorted(unknown)[0], "unknown admin config")
        self.config = {**DEFAULTS, **{k: v for k, v in configs.items() if k not in IGNORED}}
        c = self.config
        self.cluster = Cluster(c["bootstrap_servers"], client_id=c["client_id"] or "raftka-admin",
                               request_timeout_ms=c["request_timeout_ms"],
                               retry_backoff_ms=c["retry_backoff_ms"],
                               metadata_max_age_ms=c["metadata_max_age_ms"],
                               connection_factory=c["connection_factory"])

    async def close(self) -> None:
        """Close every connection."""
        await self.cluster.close()

    async def _call(self, api_key: int, body: dict[str, Any], timeout_ms: int | None, *,
                    read_only: bool = False) -> dict[str, Any]:
        # NOT_CONTROLLER means nothing was applied: always safe to send again. A read may also
        # be retried after any other retriable answer; a write that timed out may have happened,
        # so that outcome goes back to the caller.
        retry = _RETRIABLE_CODES if read_only else (errors.NOT_CONTROLLER,)
        code, answer = await self.cluster.request_any(api_key, body, timeout_ms=timeout_ms, retry_codes=retry)
        if code != errors.NONE:
            raise errors.error_for(code, (answer or {}).get("error_message") if isinstance(answer, dict) else None)
        return answer or {}

    async def create_topics(self, new_topics: Sequence[NewTopic], timeout_ms: int | None = None,
                            validate_only: bool = False, raise_errors: bool = True
                            ) -> dict[str, RaftkaError | None]:
        """Create topics. Returns {name: None or the error}; with ``raise_errors`` (default) the
        first error is raised instead (e.g. TopicAlreadyExistsError, InvalidConfigError)."""
        body = {"topics": [{"name": t.name, "num_partitions": t.num_partitions,
                            "replication_factor": t.replication_factor,
                            "configs": {k: _config_value(v) for k, v in (t.topic_configs or {}).items()}}
                           for t in new_topics], "validate_only": validate_only}
        answer = await self._call(API_CREATE_TOPICS, body, timeout_ms)
        results: dict[str, RaftkaError | None] = {}
        for t in answer.get("topics") or []:
            code = t.get("error_code", 0) or 0
            results[t["name"]] = (errors.error_for(code, t.get("error_message"), topic=t["name"])
                                  if code else None)
        if not validate_only:
            self.cluster.add_topics(results)
        return _raise_or_collect(results, raise_errors)

    async def delete_topics(self, topics: Sequence[str], timeout_ms: int | None = None,
                            raise_errors: bool = True) -> dict[str, RaftkaError | None]:
        """Delete topics; {name: None or error}, or raise the first error (raise_errors)."""
        answer = await self._call(API_DELETE_TOPICS, {"topic_names": list(topics)}, timeout_ms)
        results: dict[str, RaftkaError | None] = {}
        for t in answer.get("responses") or []:
            code = t.get("error_code", 0) or 0
            results[t["name"]] = (errors.error_for(code, t.get("error_message"), topic=t["name"])
                                  if code else None)
        return _raise_or_collect(results, raise_errors)

    async def list_topics(self) -> list[str]:
        """Names of every topic, sorted."""
        meta = await self.cluster.refresh_metadata(topics=None)
        return sorted(name for name, info in meta.topics.items() if info.error_code == errors.NONE)

    async def describe_topics(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Per topic: {topic, topic_id, error_code, partitions: [{partition, leader, leader_epoch,
        replicas, isr, offline_replicas}]} (every topic when ``topics`` is None)."""
        names = None if topics is None else list(topics)
        meta = await self.cluster.refresh_metadata(topics=names)
        out = []
        for name in (names if names is not None else sorted(meta.topics)):
            info = meta.topics.get(name)
            if info is None:
                out.append({"topic": name, "topic_id": None,
                            "error_code": errors.UNKNOWN_TOPIC_OR_PARTITION, "partitions": []})
                continue
            out.append({"topic": name, "topic_id": info.topic_id, "error_code": info.error_code,
                        "partitions": [{"partition": p.partition, "leader": p.leader,
                                        "leader_epoch": p.leader_epoch, "replicas": list(p.replicas),
                                        "isr": list(p.isr), "offline_replicas": list(p.offline_replicas)}
                                       for _, p in sorted(info.partitions.items())]})
        return out

    async def describe_cluster(self) -> dict[str, Any]:
        """{cluster_id, controller_id, brokers: [{node_id, host, port, rack, fenced}]}."""
        answer = await self._call(API_DESCRIBE_CLUSTER, {}, None, read_only=True)
        brokers = [{"node_id": b.get("broker_id", b.get("node_id")), "host": b.get("host"),
                    "port": b.get("port"), "rack": b.get("rack"), "fenced": bool(b.get("fenced"))}
                   for b in answer.get("brokers") or []]
        return {"cluster_id": answer.get("cluster_id"), "controller_id": answer.get("controller_id"),
                "brokers": sorted(brokers, key=lambda b: b["node_id"])}

    @staticmethod
    def _resources(resources: Iterable[ConfigResource | str]) -> list[ConfigResource]:
        out = []
        for r in resources:
            r = ConfigResource("topic", r) if isinstance(r, str) else r
            kind = str(getattr(r.resource_type, "name", r.resource_type)).lower()
            if kind != "topic":
                raise ConfigError("resource_type", f"only 'topic' resources exist, got {r.resource_type!r}")
            out.append(r._replace(resource_type="topic"))
        return out

    async def describe_configs(self, config_resources: Iterable[ConfigResource | str],
                               timeout_ms: int | None = None) -> dict[str, dict[str, ConfigEntry]]:
        """{topic: {key: ConfigEntry(name, value, is_default)}}; raises a topic's error. Values
        are strings, as Kafka's AdminClient gives them (``"3600000"``, ``"true"``)."""
        body = {"resources": [{"resource_type": r.resource_type, "resource_name": r.name}
                              for r in self._resources(config_resources)]}
        answer = await self._call(API_DESCRIBE_CONFIGS, body, timeout_ms, read_only=True)
        out: dict[str, dict[str, ConfigEntry]] = {}
        for r in answer.get("results") or []:
            code = r.get("error_code", 0) or 0
            if code:
                raise errors.error_for(code, r.get("error_message"), topic=r.get("resource_name"))
            out[r["resource_name"]] = {c["name"]: ConfigEntry(c["name"], _config_value(c.get("value")),
                                                              bool(c.get("is_default")))
                                       for c in r.get("configs") or []}
        return out

    async def alter_configs(self, config_resources: Iterable[ConfigResource],
                            timeout_ms: int | None = None, raise_errors: bool = True
                            ) -> dict[str, RaftkaError | None]:
        """Set (or, with a None value, remove) topic config overrides; {topic: None or error}."""
        body = {"resources": [{"resource_type": r.resource_type, "resource_name": r.name,
                               "configs": {k: _config_value(v) for k, v in (r.configs or {}).items()}}
                              for r in self._resources(config_resources)]}
        answer = await self._call(API_ALTER_CONFIGS, body, timeout_ms)
        results: dict[str, RaftkaError | None] = {}
        for r in answer.get("responses") or []:
            code = r.get("error_code", 0) or 0
            results[r["resource_name"]] = (errors.error_for(code, r.get("error_message"),
                                                            topic=r["resource_name"]) if code else None)
        return _raise_or_collect(results, raise_errors)
