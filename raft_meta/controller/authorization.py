"""ACLs on the controller listener, when the controller's ``authorizer.class.name`` is set.

Who may ask a controller for what (Kafka's rules for the controller's APIs):

- the broker APIs (BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds) and
  the metadata log (Fetch, FetchSnapshot): CLUSTER_ACTION on the cluster, the brokers' right;
- the admin APIs: the cluster-level operation a direct caller needs (DESCRIBE for DescribeQuorum,
  DescribeAcls and DescribeUserScramCredentials, DESCRIBE_CONFIGS, ALTER_CONFIGS, ALTER for ACLs,
  SCRAM users, UnregisterBroker, CreatePartitions and ElectLeaders, CREATE for CreateTopics, DELETE for
  DeleteTopics). A principal with CLUSTER_ACTION may send them all: brokers forward their
  clients' admin requests on their own connection after checking the client's ACLs themselves
  (broker/authorization.py), as Kafka's brokers forward in an envelope only a broker may send.

The principal is the connection's (``User:<name>`` after SASL, ``User:ANONYMOUS`` on a PLAINTEXT
or SSL controller listener: give it in ``super.users`` there, as with Kafka), the ACLs those of the
controller's committed metadata image. An API without a rule is refused. Refusals are logged at
INFO, at most once a minute per (principal, API): the fence attack of issue #22 (a forged
BrokerHeartbeat with want_fence) is refused CLUSTER_AUTHORIZATION_FAILED and leaves a line.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Final

from raftka.common import errors
from raftka.common.acl import CLUSTER_NAME, AclOperation as Op, ResourceType as Res
from raftka.common.api import ApiKey, api_name
from raftka.common.authorizer import Authorizer
from raftka.common.ratelog import RateLimitedLog

log = logging.getLogger(__name__)
refused_log = RateLimitedLog(log)

# api key -> the operation on the cluster it needs, besides CLUSTER_ACTION (which allows all).
CLUSTER_OPERATION: Final[dict[int, Op]] = {
    ApiKey.FETCH: Op.CLUSTER_ACTION, ApiKey.FETCH_SNAPSHOT: Op.CLUSTER_ACTION,
    ApiKey.BROKER_REGISTRATION: Op.CLUSTER_ACTION, ApiKey.BROKER_HEARTBEAT: Op.CLUSTER_ACTION,
    ApiKey.ALTER_PARTITION: Op.CLUSTER_ACTION, ApiKey.ALLOCATE_PRODUCER_IDS: Op.CLUSTER_ACTION,
    ApiKey.UNREGISTER_BROKER: Op.ALTER,
    ApiKey.DESCRIBE_QUORUM: Op.DESCRIBE,
    ApiKey.CREATE_TOPICS: Op.CREATE, ApiKey.DELETE_TOPICS: Op.DELETE, ApiKey.CREATE_PARTITIONS: Op.ALTER,
    ApiKey.ELECT_LEADERS: Op.ALTER, ApiKey.ALTER_PARTITION_REASSIGNMENTS: Op.ALTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Op.DESCRIBE,
    ApiKey.DESCRIBE_CONFIGS: Op.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS: Op.ALTER_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Op.ALTER_CONFIGS,
    ApiKey.DESCRIBE_ACLS: Op.DESCRIBE, ApiKey.CREATE_ACLS: Op.ALTER, ApiKey.DELETE_ACLS: Op.ALTER,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Op.DESCRIBE, ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Op.ALTER,
}


class ControllerGate:
    """Decides each controller request from its principal (see the module docstring)."""

    def __init__(self, config: Any, acls: Callable[[], Any]) -> None:
        self.authorizer = Authorizer.from_config(config)
        self._acls = acls  # the committed image's AclIndex, read per request (one reference)

    def refusal(self, api_key: int, principal: str, host: str) -> str | None:
        """None when ``principal`` from ``host`` may send ``api_key`` here; else why not."""
        authorizer = self.authorizer
        authorizer.acls = self._acls()
        if authorizer.authorize(principal, host, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME):
            return None
        operation = CLUSTER_OPERATION.get(api_key)
        if operation is not None and operation is not Op.CLUSTER_ACTION and \
                authorizer.authorize(principal, host, operation, Res.CLUSTER, CLUSTER_NAME):
            return None
        needed = "CLUSTER_ACTION" if operation in (None, Op.CLUSTER_ACTION) else f"{operation.name} or CLUSTER_ACTION"
        refused_log.log(logging.INFO, f"{principal}|{api_key}", "refused %s from %s at %s: it needs %s on the cluster",
                        api_name(api_key), principal, host, needed)
        return f"not authorized: {api_name(api_key)} needs {needed} on the cluster"


def refused_answer(api_key: int, body: Any, message: str) -> tuple[int, dict]:
    """The whole-request refusal in the API's answer. AlterUserScramCredentials has no
    request-level error field: every user's result carries it (raft_meta/controller/scram_credentials.py)."""
    code = errors.CLUSTER_AUTHORIZATION_FAILED
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS and isinstance(body, dict):
        users = dict.fromkeys(entry.get("name") for field in ("deletions", "upsertions")
                              for entry in body.get(field) or ())
        return errors.NONE, {"results": [{"user": user, "error_code": code, "error_message": message}
                                         for user in users]}
    return code, {"error_message": message}
