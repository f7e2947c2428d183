"""Declared message bodies and the boundary check that enforces them (docs/protocol.md,
"Declared bodies").

A body is declared once, as data, in the shape of Kafka's message definitions: a
:class:`Struct` of :class:`Field` s, each with a Kafka type name, the versions it exists in, whether
it may be null, and its default. Raftka adds its limits: a string's byte length, an array's entry
count, a bytes field's size, an integer's range where the API defines one. ``compile_struct``
turns a declaration into a checker once; the checker walks a decoded body, raises
:class:`~raftka.common.errors.InvalidRequestError` naming the first bad field by its path
(``topics[0].partitions[2].partition_index: expected int32, got float``) and fills the defaults
of absent fields, so a handler only ever sees values of the declared types.

Types (Kafka's names; how each looks in today's msgpack bodies):

    bool                   True / False (never 0 or 1)
    int8 int16 int32 int64 an integer in the type's range (never a bool or a float)
    uint16 uint32          an integer in 0..65535 / 0..4294967295
    float64                a finite float (or an integer)
    string                 str of at most ``max_length`` UTF-8 bytes (Kafka: int16 length, 32,767)
    bytes, records         bin of at most ``max_length`` bytes (``records`` is opaque here; the
                           partition leader walks the batches)
    uuid                   Raftka's topic id: 32 hex digits
    Array(T)               a list of at most ``max_count`` T (Kafka: ``[]T``)
    Map(T)                 Raftka only: a map of string keys to T (``configs``, ``listeners``);
                           Kafka declares these as an array of structs with a ``mapKey``

A field's ``default`` is either a value (filled in when the field is absent), ``REQUIRED`` (absence
is an error) or ``ABSENT`` (absence is allowed and left for the handler, whose default depends on
the server's configuration, e.g. Fetch ``max_bytes`` -> ``fetch.max.bytes``). Keys a declaration
does not name are ignored, as Kafka ignores unknown tagged fields.

What Kafka's definitions say about the binary encoding (common/codec.py) is declared here too: a
message's ``flexible_versions`` (compact strings, bytes and arrays, and a tagged-field section at
the end of every struct), a field's ``tag`` / ``tagged_versions`` (written only when it differs
from its default), its ``nullable_versions`` and its own ``flexible_versions`` (the request
header's client_id stays a non-compact string in flexible versions). The checker treats a tagged
field as any other field.

Each struct is compiled once per version into a generated Python function (one ``get`` and one
inline test per scalar field, a loop per array of structs); the closure checkers it falls back
to on a failure word the error. No check does work per record or allocates by a number it reads:
a count or a length is compared with its limit before anything walks it. Cost, measured on one
core: about 1-2 us per one-partition Produce or Fetch body, about 0.5 us per further partition.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field as dataclass_field
from typing import Any, Callable, Final, Mapping

from raftka.common.errors import InvalidRequestError

ZERO_UUID: Final = "0" * 32  # Kafka's "no id", as a uuid is spelled here (32 hex digits)
STRING_BYTES_MAX: Final = 32_767  # Kafka strings carry an int16 length
# Kafka's bytes carry an int32 length; a frame is at most socket.request.max.bytes anyway.
BYTES_MAX: Final = 2**31 - 1
ARRAY_COUNT_MAX: Final = 100_000  # entries of one array unless a declaration says otherwise

INT_RANGES: Final[dict[str, tuple[int, int]]] = {
    "int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
    "int64": (-2**63, 2**63 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
}
SCALAR_TYPES: Final = frozenset({*INT_RANGES, "bool", "float64", "string", "bytes", "records", "uuid"})


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


REQUIRED: Final = _Sentinel("REQUIRED")  # absence is an error
ABSENT: Final = _Sentinel("ABSENT")  # absence is allowed; nothing is filled in
_MISSING: Final = object()  # dict.get's answer for an absent key


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
class Map:
    """Raftka only: string keys (at most ``key_max_length`` bytes) to ``of`` values, at most
    ``max_count`` entries; ``nullable_values``: a value may be null (AlterConfigs deletes)."""

    of: "str | Struct"
    max_count: int = 1_000
    key_max_length: int = STRING_BYTES_MAX
    max_length: int | None = None
    nullable_values: bool = False


@dataclass(frozen=True)
class Field:
    """One field: ``name`` (Kafka's, in snake_case), ``type`` (a type name, a tuple of scalar
    type names when Raftka still accepts more than one, an Array, a Map or a Struct),
    ``versions`` it exists in, ``nullable`` (Kafka's nullableVersions: every version the field
    has), ``default`` (a value, REQUIRED or ABSENT), and limits: ``max_length`` (string / bytes),
    ``min`` / ``max`` (integers, within the type's range), ``about`` (what it means).

    Kafka's encoding details: ``nullable_versions`` (the versions in which it may be null, when
    not all: ``nullable`` stays "in every version"), ``tag`` and ``tagged_versions`` (a tagged
    field, only in flexible versions), ``flexible_versions`` (None: the message's; ``"none"``
    keeps a string non-compact in flexible versions, as the request header's client_id)."""

    name: str
    type: "str | tuple[str, ...] | Array | Map | Struct"
    versions: str = "0+"
    nullable: bool = False
    default: Any = REQUIRED
    max_length: int | None = None
    min: int | None = None
    max: int | None = None
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


# -- the checkers ----------------------------------------------------------------------------------

class FieldError(Exception):
    """A bad value (schema.py's checkers) or bad bytes (codec.py); each level it passes through
    adds its part of the path (innermost first). Internal: callers see InvalidRequestError."""

    __slots__ = ("path", "problem")

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []


def _kind(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # nan, inf, -inf
    return {dict: "struct", list: "array", str: "string", bytes: "bytes", bool: "bool", int: "integer",
            float: "float", type(None): "null"}.get(type(value), type(value).__name__)


Check = Callable[[Any], None]


def _int_check(type_name: str, low: int | None, high: int | None) -> Check:
    type_low, type_high = INT_RANGES[type_name]
    lo = type_low if low is None else max(low, type_low)
    hi = type_high if high is None else min(high, type_high)
    in_type = lo == type_low and hi == type_high

    def check(value: Any) -> None:
        if value.__class__ is not int:  # bool is a subclass: refused here too
            raise FieldError(f"expected {type_name}, got {_kind(value)}")
        if not lo <= value <= hi:
            if in_type:
                raise FieldError(f"{value} is out of range for {type_name}")
            raise FieldError(f"{value} is out of range [{lo}, {hi}]")
    return check


def _string_check(max_length: int) -> Check:
    max_chars_fast = max_length // 4  # a str of at most this many characters fits in any case

    def check(value: Any) -> None:
        if value.__class__ is not str:
            raise FieldError(f"expected string, got {_kind(value)}")
        if len(value) > max_chars_fast:
            if len(value) > max_length:
                raise FieldError(f"string of {len(value)} characters, at most {max_length} bytes")
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise FieldError("string is not valid UTF-8") from None
            if size > max_length:
                raise FieldError(f"string of {size} bytes, at most {max_length}")
    return check


def _bytes_check(type_name: str, max_length: int) -> Check:
    def check(value: Any) -> None:
        cls = value.__class__
        if cls is not bytes and cls is not bytearray:
            raise FieldError(f"expected {type_name}, got {_kind(value)}")
        if len(value) > max_length:
            raise FieldError(f"{type_name} of {len(value)} bytes, at most {max_length}")
    return check


def _bool_check(value: Any) -> None:
    if value.__class__ is not bool:
        raise FieldError(f"expected bool, got {_kind(value)}")


def _float_check(value: Any) -> None:
    cls = value.__class__
    if cls is float:
        if not math.isfinite(value):
            raise FieldError(f"expected a finite float64, got {value!r}")
    elif cls is not int:
        raise FieldError(f"expected float64, got {_kind(value)}")


_HEX = frozenset("0123456789abcdefABCDEF")


def _uuid_check(value: Any) -> None:
    if value.__class__ is not str or len(value) != 32 or not _HEX.issuperset(value):
        raise FieldError(f"expected uuid (32 hex digits), got {_kind(value)}")


def _scalar_check(type_name: str, max_length: int | None = None, low: int | None = None,
                  high: int | None = None) -> Check:
    if type_name in INT_RANGES:
        return _int_check(type_name, low, high)
    if type_name == "string":
        return _string_check(STRING_BYTES_MAX if max_length is None else max_length)
    if type_name in ("bytes", "records"):
        return _bytes_check(type_name, BYTES_MAX if max_length is None else max_length)
    if type_name == "bool":
        return _bool_check
    if type_name == "float64":
        return _float_check
    if type_name == "uuid":
        return _uuid_check
    raise ValueError(f"unknown type {type_name!r}")


def _union_check(type_names: tuple[str, ...], max_length: int | None) -> Check:
    checks = [_scalar_check(name, max_length) for name in type_names]
    expected = " or ".join(type_names)

    def check(value: Any) -> None:
        for one in checks:
            try:
                one(value)
                return
            except FieldError:
                continue
        raise FieldError(f"expected {expected}, got {_kind(value)}")
    return check


def _array_check(array: Array, version: int) -> Check:
    limit = array.max_count
    if isinstance(array.of, str) and array.of in INT_RANGES:
        lo, hi = INT_RANGES[array.of]
        name = array.of

        def check_ints(value: Any) -> None:
            if value.__class__ is not list:
                raise FieldError(f"expected an array of {name}, got {_kind(value)}")
            if len(value) > limit:
                raise FieldError(f"array of {len(value)} entries, at most {limit}")
            for i, item in enumerate(value):
                if item.__class__ is not int or not lo <= item <= hi:
                    bad = FieldError(f"expected {name}, got {_kind(item)}" if item.__class__ is not int
                               else f"{item} is out of range for {name}")
                    bad.path.append(f"[{i}]")
                    raise bad
        return check_ints
    element = _type_check(array.of, version, array.max_length)

    def check(value: Any) -> None:
        if value.__class__ is not list:
            raise FieldError(f"expected an array, got {_kind(value)}")
        if len(value) > limit:
            raise FieldError(f"array of {len(value)} entries, at most {limit}")
        for i, item in enumerate(value):
            try:
                element(item)
            except FieldError as bad:
                bad.path.append(f"[{i}]")
                raise
    return check


def _map_check(declared: Map, version: int) -> Check:
    limit = declared.max_count
    key_check = _string_check(declared.key_max_length)
    value_check = _type_check(declared.of, version, declared.max_length)
    nullable = declared.nullable_values

    def check(value: Any) -> None:
        if value.__class__ is not dict:
            raise FieldError(f"expected a map, got {_kind(value)}")
        if len(value) > limit:
            raise FieldError(f"map of {len(value)} entries, at most {limit}")
        for key, item in value.items():
            try:
                key_check(key)
            except FieldError as bad:
                bad.problem = f"map key: {bad.problem}"
                raise
            if item is None and nullable:
                continue
            try:
                value_check(item)
            except FieldError as bad:
                bad.path.append(f"[{key!r}]")
                raise
    return check


def _type_check(declared: Any, version: int, max_length: int | None = None,
                low: int | None = None, high: int | None = None) -> Check:
    if isinstance(declared, str):
        return _scalar_check(declared, max_length, low, high)
    if isinstance(declared, tuple):
        return _union_check(declared, max_length)
    if isinstance(declared, Array):
        return _array_check(declared, version)
    if isinstance(declared, Map):
        return _map_check(declared, version)
    if isinstance(declared, Struct):
        return _struct_check(declared, version)
    raise ValueError(f"unknown declared type {declared!r}")


def _fast_test(declared: Any, max_length: int | None, low: int | None, high: int | None) -> str | None:
    """A Python expression over ``v`` that is true exactly when the closure checker would pass
    (for ``string``: true only for the short strings that surely pass), or None."""
    if isinstance(declared, str) and declared in INT_RANGES:
        type_low, type_high = INT_RANGES[declared]
        lo = type_low if low is None else max(low, type_low)
        hi = type_high if high is None else min(high, type_high)
        return f"v.__class__ is int and {lo} <= v <= {hi}"
    if declared == "bool":
        return "v.__class__ is bool"
    if declared == "string":
        return f"v.__class__ is str and len(v) <= {(STRING_BYTES_MAX if max_length is None else max_length) // 4}"
    if declared in ("bytes", "records"):
        return (f"(v.__class__ is bytes or v.__class__ is bytearray) and "
                f"len(v) <= {BYTES_MAX if max_length is None else max_length}")
    return None


def _slow(value: Any, name: str, check: Check) -> None:
    """The closure checker of a field whose fast test failed: it words the error (or, for a
    long string, finds it fine after all)."""
    try:
        check(value)
    except FieldError as bad:
        bad.path.append(name)
        raise


def _refuse(name: str, problem: str) -> None:
    bad = FieldError(problem)
    bad.path.append(name)
    raise bad


def _struct_check(struct: Struct, version: int) -> Check:
    """A struct's checker, generated as Python source once per (struct, version): one ``get``
    and one inline test per scalar field, a call per nested array, map or struct; the closure
    checkers word the errors. Field names enter the source only as string literals (repr)."""
    namespace: dict[str, Any] = {"MISSING": _MISSING, "FieldError": FieldError, "_kind": _kind, "slow": _slow,
                                 "refuse": _refuse}
    lines = ["def check(value):",
             "    if value.__class__ is not dict:",
             "        raise FieldError('expected a struct (map), got ' + _kind(value))",
             "    get = value.get"]
    for i, f in enumerate(x for x in struct.fields if in_versions(version, x.versions)):
        namespace[f"C{i}"] = _type_check(f.type, version, f.max_length, f.min, f.max)
        name = repr(f.name)
        lines.append(f"    v = get({name}, MISSING)")
        lines.append("    if v is MISSING:")
        if f.default is REQUIRED:
            lines.append(f"        refuse({name}, 'missing')")
        elif f.default is ABSENT:
            lines.append("        pass")
        else:
            namespace[f"D{i}"] = f.default
            copy = ".copy()" if f.default.__class__ in (list, dict) else ""
            lines.append(f"        value[{name}] = D{i}{copy}")
        lines.append("    elif v is None:")
        lines.append("        pass" if f.nullable_in(version) else f"        refuse({name}, 'null is not allowed')")
        if isinstance(f.type, Array) and isinstance(f.type.of, Struct):
            # Entries checked in a loop here; a failure is walked again by the closure checker
            # to name the entry (the defaults it already filled in are filled in the same way).
            namespace[f"E{i}"] = _struct_check(f.type.of, version)
            lines.append(f"    elif v.__class__ is list and len(v) <= {f.type.max_count}:")
            lines.append("        try:")
            lines.append(f"            for e in v: E{i}(e)")
            lines.append("        except FieldError:")
            lines.append(f"            slow(v, {name}, C{i})")
            lines.append("    else:")
        else:
            test = _fast_test(f.type, f.max_length, f.min, f.max)
            lines.append(f"    elif not ({test}):" if test else "    else:")
        lines.append(f"        slow(v, {name}, C{i})")
    exec(compile("\n".join(lines), f"<checker of {struct.name} v{version}>", "exec"), namespace)  # noqa: S102
    return namespace["check"]


def _path(parts: list[str]) -> str:
    out = ""
    for part in reversed(parts):
        out += part if part.startswith("[") or not out else "." + part
    return out


def compile_struct(struct: Struct, version: int) -> Callable[[Any], Any]:
    """A checker for ``struct`` at ``version``: ``check(body) -> body`` (defaults filled in, in
    place), or InvalidRequestError naming the field (``.field`` holds its path)."""
    check = _struct_check(struct, version)

    def checked(body: Any) -> Any:
        try:
            check(body)
        except FieldError as bad:
            where = _path(bad.path)
            error = InvalidRequestError(f"{where}: {bad.problem}" if where else bad.problem)
            error.field = where  # type: ignore[attr-defined]
            raise error from None
        return body
    return checked


class Registry:
    """Declared requests of one listener, compiled once: ``check(api_key, version, body) -> body``."""

    def __init__(self, messages: Mapping[int, Message]) -> None:
        self.messages = dict(messages)
        self._checkers: dict[tuple[int, int], Callable[[Any], Any]] = {}
        for api_key, message in self.messages.items():
            if message.api_key != api_key:
                raise ValueError(f"{message.name} is declared under api key {api_key}, not {message.api_key}")
            for version in message.versions():
                self._checkers[(api_key, version)] = compile_struct(message.struct, version)

    def __contains__(self, api_key: object) -> bool:
        return api_key in self.messages

    def checker(self, api_key: int, version: int) -> Callable[[Any], Any] | None:
        """The compiled checker, or None for an api key or version not declared."""
        return self._checkers.get((api_key, version))

    def check(self, api_key: int, version: int, body: Any) -> Any:
        """``body`` with defaults filled in; InvalidRequestError naming the first bad field, or
        when the api key or version is not declared."""
        checker = self._checkers.get((api_key, version))
        if checker is None:
            raise InvalidRequestError(f"no declared body for api key {api_key} version {version}")
        return checker(body)


__all__ = ["ABSENT", "ARRAY_COUNT_MAX", "Array", "BYTES_MAX", "Field", "FieldError", "Map", "Message", "REQUIRED",
           "Registry", "STRING_BYTES_MAX", "Struct", "ZERO_UUID", "compile_struct", "in_versions", "parse_versions"]
