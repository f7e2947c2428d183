"""The vocabulary every request, response and record is declared in (docs/protocol.md,
"Declared bodies"), after Kafka's message definitions.

A message is declared once, as data: a :class:`Message` (``api_key``, ``valid_versions``,
``flexible_versions``) of :class:`Field` s, each with a Kafka type name, the versions it exists
in, the versions it may be null in, its default and, for a tagged field, its tag. Raftka adds its
limits: a string's byte length, an array's entry count, a bytes field's size. common/codec.py
compiles each message at each version into an encoder and a decoder; the decoder is the
boundary check, so a handler only ever sees values of the declared types.

Types (Kafka's names):

    bool                   True / False
    int8 int16 int32 int64 an integer in the type's range
    uint16 uint32          an integer in 0..65535 / 0..4294967295
    float64                a float
    string                 str of at most ``max_length`` UTF-8 bytes (Kafka: int16 length, 32,767)
    bytes, records         bytes of at most ``max_length`` (``records`` is opaque here; the
                           partition leader walks the batches)
    uuid                   Raftka's topic id: 32 hex digits (16 bytes on the wire)
    Array(T)               a list of at most ``max_count`` T (Kafka: ``[]T``)
    Struct                 nested fields

A field's ``default`` is either a value (what an absent field means), ``REQUIRED`` (absence is an
error when encoding) or ``ABSENT`` (a tagged field left out unless given). Keys a declaration does
not name are ignored, as Kafka ignores unknown tagged fields.

What Kafka's definitions say about the binary encoding is declared here too: a message's
``flexible_versions`` (compact strings, bytes and arrays, and a tagged-field section at the end
of every struct), a field's ``tag`` / ``tagged_versions`` (written only when it differs from its
default), its ``nullable_versions`` and its own ``flexible_versions`` (the request header's
client_id stays a non-compact string in flexible versions).
"""
from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from typing import Any, Final

ZERO_UUID: Final = "0" * 32  # Kafka's "no id", as a uuid is spelled here (32 hex digits)
STRING_BYTES_MAX: Final = 32_767  # Kafka strings carry an int16 length
# Kafka's bytes carry an int32 length; a frame is at most socket.request.max.bytes anyway.
BYTES_MAX: Final = 2**31 - 1
ARRAY_COUNT_MAX: Final = 100_000  # entries of one array unless a declaration says otherwise


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


REQUIRED: Final = _Sentinel("REQUIRED")  # absence is an error
ABSENT: Final = _Sentinel("ABSENT")  # absence is allowed; nothing is filled in


# -- versions ------------------------------------------------------------------------------------

def parse_versions(text: str) -> tuple[int, int | None]:
    """Kafka's version range: ``"0+"`` (0 and later), ``"1-3"``, ``"2"``; None: no upper bound."""
    text = text.strip()
    if text.endswith("+"):
        return int(text[:-1]), None
    if "-" in text:
        low, high = text.split("-", 1)
        return int(low), int(high)
    return int(text), int(text)


def in_versions(version: int, text: str) -> bool:
    if text.strip() == "none":  # Kafka's "no version" (flexibleVersions, taggedVersions)
        return False
    low, high = parse_versions(text)
    return version >= low and (high is None or version <= high)


# -- declarations --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Array:
    """Kafka's ``[]T``: a list of ``of`` (a type name or a Struct) with at most ``max_count`` entries."""

    of: "str | Struct"
    max_count: int = ARRAY_COUNT_MAX
    max_length: int | None = None  # of each string / bytes entry (default: the type's)


@dataclass(frozen=True)
class Field:
    """One field: ``name`` (Kafka's, in snake_case), ``type`` (a type name, an Array or a Struct),
    ``versions`` it exists in, ``nullable`` (Kafka's nullableVersions: every version the field
    has), ``default`` (a value, REQUIRED or ABSENT), ``max_length`` (string / bytes) and ``about``
    (what it means).

    Kafka's encoding details: ``nullable_versions`` (the versions in which it may be null, when
    not all: ``nullable`` stays "in every version"), ``tag`` and ``tagged_versions`` (a tagged
    field, only in flexible versions), ``flexible_versions`` (None: the message's; ``"none"``
    keeps a string non-compact in flexible versions, as the request header's client_id)."""

    name: str
    type: "str | Array | Struct"
    versions: str = "0+"
    nullable: bool = False
    default: Any = REQUIRED
    max_length: int | None = None
    about: str = ""
    nullable_versions: str | None = None
    tag: int | None = None
    tagged_versions: str | None = None
    flexible_versions: str | None = None

    def __post_init__(self) -> None:
        if (self.tag is None) != (self.tagged_versions is None):
            raise ValueError(f"{self.name}: a tagged field needs both tag and tagged_versions")
        if self.tag is not None and (self.tag < 0 or self.default is REQUIRED):
            raise ValueError(f"{self.name}: a tag is >= 0 and a tagged field has a default (or ABSENT)")

    def nullable_in(self, version: int) -> bool:
        """May the field be null at ``version``."""
        return self.nullable or (self.nullable_versions is not None and in_versions(version, self.nullable_versions))

    def tagged_in(self, version: int) -> bool:
        return self.tagged_versions is not None and in_versions(version, self.tagged_versions)


@dataclass(frozen=True)
class Struct:
    """A body or a nested struct: ``fields`` in order."""

    name: str
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Message:
    """One API's request (or response): ``api_key``, ``valid_versions`` (Kafka's validVersions),
    its top-level fields and ``flexible_versions`` (Kafka's flexibleVersions: ``"none"`` or e.g.
    ``"9+"``, the versions with compact encodings and tagged fields)."""

    api_key: int
    name: str
    valid_versions: str
    fields: tuple[Field, ...]
    about: str = ""
    flexible_versions: str = "none"
    struct: Struct = dataclass_field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "struct", Struct(self.name, self.fields))

    def versions(self) -> range:
        low, high = parse_versions(self.valid_versions)
        if high is None:
            raise ValueError(f"{self.name}: validVersions must be bounded, got {self.valid_versions!r}")
        return range(low, high + 1)

    def flexible(self, version: int) -> bool:
        """Is ``version`` a flexible version (compact encodings, tagged fields)."""
        return in_versions(version, self.flexible_versions)


# -- errors ----------------------------------------------------------------------------------------

class FieldError(Exception):
    """A value that cannot be encoded or bytes that cannot be decoded (codec.py); each level it
    passes through adds its part of the path (innermost first). Internal: callers see
    CodecError, an InvalidRequestError."""

    __slots__ = ("path", "problem")

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []
