"""ACL bindings on the active controller (Kafka's AclControlManager).

``Acls(controller)`` adds three handlers to a QuorumController's service (common/acl.py has the
model, common/messages/security.py the messages):

- CreateAcls (v1-3): one result per creation, in request order. INVALID_REQUEST, naming the
  field, for a binding ``acl.binding`` refuses (a filter-only value such as ANY or MATCH, an
  empty name, a CLUSTER not named ``kafka-cluster``, a principal other than ``User:<name>``, a
  host that is neither an IP address nor ``*``). A binding that exists already, or twice in the
  request, succeeds without a second copy. New bindings get a random uuid and are committed as
  AccessControlEntryRecords before the answer goes out.
- DescribeAcls (v1-3): the bindings one filter selects, grouped by resource pattern (type,
  name, pattern type) in Kafka's answer shape. INVALID_REQUEST for a filter with a value
  outside Kafka's numbers or a malformed principal or host filter.
- DeleteAcls (v1-3): per filter, the bindings it selected and deleted (a binding selected by
  several filters is listed under the first), committed as RemoveAccessControlEntryRecords; a
  bad filter fails alone with INVALID_REQUEST.

Kafka answers SECURITY_DISABLED when no authorizer is configured; Raftka always keeps ACLs in
the metadata log (authorizer.class.name decides only whether they are enforced), so it answers.

CreateAcls' and DeleteAcls' answers have no request-level error field, so (as
scram_credentials.py does) these handlers put a whole-request error in every entry: NOT_CONTROLLER
on a controller that is not the active one (a broker's controller channel finds it there and
goes on to the active controller), REQUEST_TIMED_OUT for a commit that did not finish (it may
still happen). Requests decide on the committed image one at a time.
"""
from __future__ import annotations

import asyncio
import uuid
from typing import Any

from raftka.common import acl, errors
from raftka.common.acl import AclBinding, AclBindingFilter
from raftka.common.errors import RaftkaError
from raftka.raft_meta.controller import service as svc
from raftka.raft_meta.metadata.records import (AccessControlEntryRecord, MetadataRecord,
                                               RemoveAccessControlEntryRecord)

# An ACL record is at most ~2.3 KiB (a name, a principal and a host at their limits): 400 of
# them stay well under the Raft layer's 1 MiB per entry.
RECORDS_PER_ENTRY_MAX = 400


class Acls:
    """The three ACL APIs of one QuorumController (see the module docstring)."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self._lock = asyncio.Lock()  # one request decides (and commits) at a time
        service = controller.service
        service.handlers.update({
            svc.API_DESCRIBE_ACLS: self.describe_acls,
            svc.API_CREATE_ACLS: self.create_acls,
            svc.API_DELETE_ACLS: self.delete_acls,
        })
        # They say NOT_CONTROLLER in their own answers (module docstring).
        service.any_controller_apis.update({svc.API_CREATE_ACLS, svc.API_DELETE_ACLS})

    async def describe_acls(self, version: int, body: dict) -> tuple[int, dict]:
        selector = _filter(body)  # InvalidRequestError: the answer's own error_code
        resources: dict[tuple[int, str, int], list[dict]] = {}
        for _, b in self.controller.image.acls.matching(selector):
            resources.setdefault((int(b.resource_type), b.resource_name, int(b.pattern_type)), []).append(
                {"principal": b.principal, "host": b.host, "operation": int(b.operation),
                 "permission_type": int(b.permission)})
        return errors.NONE, {"error_code": errors.NONE, "error_message": None, "resources": [
            {"resource_type": rtype, "resource_name": name, "pattern_type": ptype, "acls": found}
            for (rtype, name, ptype), found in sorted(resources.items())]}

    async def create_acls(self, version: int, body: dict) -> tuple[int, dict]:
        creations = body["creations"]
        answers = [{"error_code": errors.NONE, "error_message": None} for _ in creations]
        try:
            self._check_active()
            async with self._lock:
                records: list[MetadataRecord] = []
                answered: list[list[dict]] = []  # per record, the answers that wait on its commit
                new: dict[AclBinding, int] = {}  # binding -> its record's index
                image = self.controller.image
                for creation, answer in zip(creations, answers):
                    try:
                        b = acl.binding(creation["resource_type"], creation["resource_name"],
                                        creation["resource_pattern_type"], creation["principal"],
                                        creation["host"], creation["operation"], creation["permission_type"])
                    except RaftkaError as error:
                        answer.update(error_code=error.code, error_message=error.message)
                        continue
                    if image.acls.id_of(b) is not None:
                        continue  # already there: Kafka answers success
                    if b in new:
                        answered[new[b]].append(answer)
                        continue
                    new[b] = len(records)
                    records.append(AccessControlEntryRecord(uuid.uuid4().hex, b))
                    answered.append([answer])
                await self._commit(records, answered)
        except RaftkaError as error:
            self._answer_all(error, answers)
        return errors.NONE, {"results": answers}

    async def delete_acls(self, version: int, body: dict) -> tuple[int, dict]:
        filters = body["filters"]
        answers: list[dict] = [{"error_code": errors.NONE, "error_message": None, "matching_acls": []}
                               for _ in filters]
        try:
            self._check_active()
            async with self._lock:
                records: list[MetadataRecord] = []
                answered: list[list[dict]] = []
                deleted: set[str] = set()
                image = self.controller.image
                for given, answer in zip(filters, answers):
                    try:
                        selector = _filter(given)
                    except RaftkaError as error:
                        answer.update(error_code=error.code, error_message=error.message)
                        continue
                    for acl_id, b in image.acls.matching(selector):
                        if acl_id in deleted:
                            continue
                        deleted.add(acl_id)
                        matched = _matching(b)  # a deletion refused at replay says so here
                        answer["matching_acls"].append(matched)
                        records.append(RemoveAccessControlEntryRecord(acl_id))
                        answered.append([matched])
                await self._commit(records, answered)
        except RaftkaError as error:
            self._answer_all(error, answers)
            for answer in answers:
                answer["matching_acls"] = []
        return errors.NONE, {"filter_results": answers}

    def _check_active(self) -> None:
        if not self.controller.service.is_active:
            raise errors.NotControllerError()

    def _answer_all(self, error: RaftkaError, answers: list[dict]) -> None:
        """A whole-request error in every entry; NOT_CONTROLLER names the active controller."""
        code, message = error.code, error.message
        if isinstance(error, errors.NotControllerError):
            code, message = errors.NOT_CONTROLLER, self.controller.service.not_controller()[1]["error_message"]
        for answer in answers:
            answer.update(error_code=code, error_message=message)

    async def _commit(self, records: list[MetadataRecord], answered: list[list[dict]]) -> None:
        """Commit in entries of at most RECORDS_PER_ENTRY_MAX records. A retriable failure
        (NOT_CONTROLLER, REQUEST_TIMED_OUT) is the whole request's answer; a refusal at replay
        answers the entries of that log entry only (nothing of it was applied)."""
        for start in range(0, len(records), RECORDS_PER_ENTRY_MAX):
            chunk = records[start:start + RECORDS_PER_ENTRY_MAX]
            try:
                await self.controller.commit(chunk)
            except RaftkaError as error:
                if error.retriable:
                    raise
                for waiting in answered[start:start + RECORDS_PER_ENTRY_MAX]:
                    for answer in waiting:
                        answer.update(error_code=error.code, error_message=error.message)


def _filter(body: dict) -> AclBindingFilter:
    return acl.binding_filter(body["resource_type_filter"], body["resource_name_filter"],
                              body["pattern_type_filter"], body["principal_filter"], body["host_filter"],
                              body["operation"], body["permission_type"])


def _matching(b: AclBinding) -> dict:
    return {"error_code": errors.NONE, "error_message": None, "resource_type": int(b.resource_type),
            "resource_name": b.resource_name, "pattern_type": int(b.pattern_type), "principal": b.principal,
            "host": b.host, "operation": int(b.operation), "permission_type": int(b.permission)}
