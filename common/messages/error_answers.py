"""A Kafka answer that carries one error for a whole request, built from the declarations.

Kafka's responses have no frame-level error code: an error that hits the whole request (the
handler failed, ran out of time, the broker is not the controller) must stand in the body's own
error fields. :func:`error_answer` fills them, for any API, from the request and response
declarations:

- every ``error_code`` gets the code and every ``error_message`` the message;
- an array of structs in the answer lists one entry per entry of the request array it answers
  (found by name, else the request's first array not answered yet whose entries name the same
  thing), with the entry's identity (its topic name, partition index, group id, ...) copied, so a
  client can tell which of its topics or partitions failed, as Kafka's own error responses do;
- every other field keeps its declared default (throttle_time_ms 0, leader -1, empty arrays).
"""
from __future__ import annotations

from typing import Any, Final

from raftka.common.schema import Array, Field, Message, Struct, in_versions

# Answer fields that name what they answer, with the request fields that hold the same thing.
_IDENTITY: Final[dict[str, tuple[str, ...]]] = {
    "name": ("name", "topic"), "topic": ("topic", "name"), "topic_id": ("topic_id",),
    "index": ("index", "partition_index", "partition"), "partition_index": ("partition_index", "partition", "index"),
    "partition": ("partition", "partition_index", "index"),
    "resource_type": ("resource_type",), "resource_name": ("resource_name",),
    "group_id": ("group_id",), "key": ("key",), "member_id": ("member_id",),
    "group_instance_id": ("group_instance_id",), "transactional_id": ("transactional_id",),
}
_INTEGERS: Final = frozenset({"int8", "int16", "int32", "int64"})


def _present(struct: Struct, version: int) -> list[Field]:
    return [f for f in struct.fields if in_versions(version, f.versions)]


def _struct_arrays(fields: list[Field]) -> list[Field]:
    return [f for f in fields if isinstance(f.type, Array)]


def _identity_of(struct: Struct, version: int, scalar: Any) -> dict[str, Any]:
    """An answer entry for a request entry that is a bare value (a topic name, a partition
    index): the value goes into the answer struct's first identity field of its kind."""
    for f in _present(struct, version):
        if f.name not in _IDENTITY:
            continue
        if isinstance(scalar, str) and f.type == "string":
            return {f.name: scalar}
        if isinstance(scalar, int) and not isinstance(scalar, bool) and f.type in _INTEGERS:
            return {f.name: scalar}
    return {}


def _answers_to(answer: Field, requests: list[Field], version: int) -> Field | None:
    """The request array ``answer`` (an array of structs) answers: the one of the same name,
    else the first whose entries carry one of the answer struct's identities."""
    for f in requests:
        if f.name == answer.name:
            return f
    struct = answer.type.of  # type: ignore[union-attr]
    identities = {n for f in _present(struct, version) for n in _IDENTITY.get(f.name, ())}
    for f in requests:
        of = f.type.of  # type: ignore[union-attr]
        if isinstance(of, Struct):
            if identities & {g.name for g in _present(of, version)}:
                return f
        elif _identity_of(struct, version, "" if of == "string" else 0):
            return f
    return None


def _fill(answer: Struct, request: Struct | None, given: Any, version: int, code: int,
          message: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    given = given if isinstance(given, dict) else {}
    fields = _present(answer, version)
    request_fields = _present(request, version) if request is not None else []
    unanswered = _struct_arrays(request_fields)
    for f in fields:
        if f.name == "error_code":
            out[f.name] = code
        elif f.name == "error_message" and f.type == "string":
            if message is not None:
                out[f.name] = message
        elif isinstance(f.type, Array) and isinstance(f.type.of, Struct):
            source = _answers_to(f, unanswered, version)
            if source is None:
                continue  # the declared default (an empty array)
            unanswered.remove(source)
            entries = given.get(source.name) or []
            of = source.type.of  # type: ignore[union-attr]
            if isinstance(of, Struct):
                out[f.name] = [_fill(f.type.of, of, entry, version, code, message) for entry in entries]
            else:
                out[f.name] = [{**_identity_of(f.type.of, version, entry),
                                **_fill(f.type.of, None, None, version, code, message)} for entry in entries]
        elif f.name in _IDENTITY:
            for name in _IDENTITY[f.name]:
                if name in given and (f.type != "string" or isinstance(given[name], str)):
                    out[f.name] = given[name]
                    break
    return out


def error_answer(request: Message, response: Message, version: int, body: Any, code: int,
                 message: str | None = None) -> dict[str, Any]:
    """The ``response`` body at ``version`` that answers the request ``body`` with ``code`` (and
    ``message`` where the answer has room for one) everywhere it can say an error."""
    return _fill(response.struct, request.struct, body, version, code, message)


__all__ = ["error_answer"]
