"""SCRAM credentials on the active controller (Kafka's ScramControlManager).

``ScramCredentials(controller)`` adds two handlers to a QuorumController's service:

- AlterUserScramCredentials (v0): ``deletions`` [{name, mechanism}] and ``upsertions`` [{name,
  mechanism, iterations, salt, salted_password}], answered per user {user, error_code,
  error_message}. Users succeed or fail independently, as in Kafka; a user's changes (one per
  mechanism: both mechanisms of a new user in one request, as ``kafka-configs --add-config
  'SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]'`` sends them) are applied together or not at all.
  The same user and mechanism named more than once (in either list) is refused
  DUPLICATE_RESOURCE, with every change of that user. Per entry: INVALID_REQUEST for a user name SCRAM cannot take
  (empty, longer than scram.USER_NAME_BYTES_MAX bytes, control characters),
  UNSUPPORTED_SASL_MECHANISM for a mechanism number other than 1 (SCRAM-SHA-256) and 2
  (SCRAM-SHA-512), UNACCEPTABLE_CREDENTIAL for iterations outside 4,096..16,384, an empty (or
  longer than scram.SALT_BYTES_MAX) salt, or a salted password that is not one digest of the
  mechanism's hash, RESOURCE_NOT_FOUND for deleting a credential the user does not have.
  The salted password becomes StoredKey and ServerKey here (common/scram.py); only those, the
  salt and the iterations are committed (UserScramCredentialRecord), so the metadata log never
  holds anything a client could log in with.
- DescribeUserScramCredentials (v0): ``users`` (null or empty: every user with a credential),
  answered per user with its mechanisms and iterations, never a salt or a key;
  RESOURCE_NOT_FOUND for a user without a credential, DUPLICATE_RESOURCE for a user named twice.

Decisions are taken on the committed image one request at a time (a deletion is checked against
what is there), and the accepted changes are committed before the answer goes out, in entries of
at most ``RECORDS_PER_ENTRY_MAX`` records.

AlterUserScramCredentials' answer has no request-level error field, and its results answer two
request arrays, which the generic whole-request error answer (common/messages/error_answers.py)
cannot list. So this handler answers a whole-request error itself, in every user's result:
NOT_CONTROLLER on a controller that is not (or stopped being) the active one, where a broker's
controller channel finds it and goes on to the active controller (service.py), and
REQUEST_TIMED_OUT for a commit that did not finish (the change may still happen).
"""
from __future__ import annotations

import asyncio
import collections
from typing import Any

from raftka.common import errors, scram
from raftka.common.errors import RaftkaError
from raftka.raft_meta.controller import service as svc
from raftka.raft_meta.metadata.image import MetadataImage
from raftka.raft_meta.metadata.records import (MetadataRecord, RemoveUserScramCredentialRecord,
                                               UserScramCredentialRecord)

# A credential record holds a user name and a salt of up to 1 KiB each: 400 of them stay well
# under the Raft layer's 1 MiB per entry.
RECORDS_PER_ENTRY_MAX = 400


class ScramCredentials:
    """The two SCRAM credential APIs of one QuorumController (see the module docstring)."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self._lock = asyncio.Lock()  # one request decides (and commits) at a time
        service = controller.service
        service.handlers.update({
            svc.API_DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
            svc.API_ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
        })
        # It says NOT_CONTROLLER in its own answer (module docstring).
        service.any_controller_apis.add(svc.API_ALTER_USER_SCRAM_CREDENTIALS)

    async def describe_user_scram_credentials(self, version: int, body: dict) -> tuple[int, dict]:
        infos = self.controller.image.scram_credential_infos()
        wanted = [u["name"] for u in body["users"] or []]
        counts = collections.Counter(wanted)
        results = []
        for user in dict.fromkeys(wanted) if wanted else infos:  # each user once, in request order
            result: dict[str, Any] = {"user": user, "error_code": errors.NONE, "error_message": None,
                                      "credential_infos": []}
            if counts[user] > 1:
                result.update(error_code=errors.DUPLICATE_RESOURCE,
                              error_message=f"user {user!r:.80} is named more than once in the request")
            elif user not in infos:
                result.update(error_code=errors.RESOURCE_NOT_FOUND,
                              error_message=f"user {user!r:.80} has no SCRAM credential")
            else:
                result["credential_infos"] = [{"mechanism": mechanism.number, "iterations": iterations}
                                              for mechanism, iterations in infos[user]]
            results.append(result)
        return errors.NONE, {"error_code": errors.NONE, "error_message": None, "results": results}

    async def alter_user_scram_credentials(self, version: int, body: dict) -> tuple[int, dict]:
        entries: dict[str, list[tuple[bool, dict]]] = {}  # user -> [(is an upsertion, entry)], request order
        for deletion in body["deletions"]:
            entries.setdefault(deletion["name"], []).append((False, deletion))
        for upsertion in body["upsertions"]:
            entries.setdefault(upsertion["name"], []).append((True, upsertion))
        service = self.controller.service
        answers: list[dict] = []
        try:
            if not service.is_active:
                raise errors.NotControllerError()
            await self._alter(entries, answers)
        except RaftkaError as error:  # a whole-request error: every user's answer says it
            code, message = error.code, error.message
            if isinstance(error, errors.NotControllerError):  # the answer names the active controller
                code, message = errors.NOT_CONTROLLER, service.not_controller()[1]["error_message"]
            answers = [{"user": user, "error_code": code, "error_message": message} for user in entries]
        return errors.NONE, {"results": answers}

    async def _alter(self, entries: dict[str, list[tuple[bool, dict]]], answers: list[dict]) -> None:
        async with self._lock:
            image = self.controller.image
            decided: list[tuple[list[MetadataRecord], dict]] = []  # a user's records, its answer
            for user, changes in entries.items():
                answer = {"user": user, "error_code": errors.NONE, "error_message": None}
                answers.append(answer)
                try:
                    mechanisms = collections.Counter(change["mechanism"] for _, change in changes)
                    twice = [number for number, count in mechanisms.items() if count > 1]
                    if twice:
                        raise errors.DuplicateResourceError(
                            f"user {user!r:.80}: mechanism {twice[0]} is altered more than once in the request")
                    decided.append(([_upsertion(change) if upsert else _deletion(image, change)
                                     for upsert, change in changes], answer))
                except RaftkaError as error:
                    answer.update(error_code=error.code, error_message=error.message)
            chunk: list[tuple[list[MetadataRecord], dict]] = []
            for item in decided:  # a user's records stay in one entry: together or not at all
                if chunk and sum(len(r) for r, _ in chunk) + len(item[0]) > RECORDS_PER_ENTRY_MAX:
                    await self._commit(chunk)
                    chunk = []
                chunk.append(item)
            if chunk:
                await self._commit(chunk)

    async def _commit(self, chunk: list[tuple[list[MetadataRecord], dict]]) -> None:
        try:
            await self.controller.commit([record for records, _ in chunk for record in records])
        except RaftkaError as error:
            if error.retriable:  # NOT_CONTROLLER, REQUEST_TIMED_OUT: the whole request's answer
                raise
            for _, answer in chunk:  # refused at replay: nothing of this entry was applied
                answer.update(error_code=error.code, error_message=error.message)


def _user_and_mechanism(change: dict) -> tuple[str, scram.ScramMechanism]:
    user = change["name"]
    try:
        scram.check_user_name(user)
    except scram.ScramError as error:
        raise errors.InvalidRequestError(f"user {user!r:.80}: {error}") from None
    mechanism = scram.MECHANISMS_BY_NUMBER.get(change["mechanism"])
    if mechanism is None:
        raise errors.UnsupportedSaslMechanismError(
            f"user {user!r}: unknown SCRAM mechanism {change['mechanism']} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)")
    return user, mechanism


def _deletion(image: MetadataImage, change: dict) -> RemoveUserScramCredentialRecord:
    user, mechanism = _user_and_mechanism(change)
    if image.scram_credential(user, mechanism) is None:
        raise errors.ResourceNotFoundError(f"user {user!r} has no {mechanism.name} credential to delete")
    return RemoveUserScramCredentialRecord(user, mechanism)


def _upsertion(change: dict) -> UserScramCredentialRecord:
    user, mechanism = _user_and_mechanism(change)
    try:
        credential = scram.credential_from_salted(mechanism, change["salt"], change["salted_password"],
                                                  change["iterations"])
    except scram.ScramError as error:
        raise errors.UnacceptableCredentialError(f"user {user!r}: {error}") from None
    return UserScramCredentialRecord(user, credential)
