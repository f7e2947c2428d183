"""Kafka's binary encoding of the declared bodies (common/schema.py), compiled once per version.

``encoder(message, version)`` gives ``encode(body: dict) -> bytes``; ``decoder(message, version)``
gives ``decode(data: bytes | memoryview) -> dict``. Both are generated as Python source from the
declaration, once per (struct, version), and cached: a run of fixed-width fields is one
precompiled ``struct.Struct`` call, a string is sliced from a memoryview without a copy before it
is decoded, an array of fixed-width integers is one ``unpack_from``.

The encoding is Kafka's protocol guide's: big-endian integers, bool as one byte (any non-zero
byte reads as true), uuid as 16 bytes (Raftka's dicts hold 32 hex digits; a nullable uuid's null
is Kafka's zero uuid), string with an int16 length, bytes and records with an int32 length,
arrays with an int32 count, -1 for null; a nullable struct field has an int8 marker (-1 null).
In a flexible version (the message's ``flexible_versions``) strings, bytes and arrays are
compact (unsigned varint length + 1, 0 for null) and every struct ends with its tagged fields
(unsigned varint count, then per field: tag, size, payload). The encoder writes a declared tagged
field only when the body holds it and it differs from its default; the decoder fills the
defaults, reads the tags it knows and skips the others, as Kafka does.

Decoding trusts nothing it reads: a length or a count is compared with the declared limit and with
the bytes left before anything is allocated or walked, and every malformed input raises
:class:`CodecError` naming the field's path (``topic_data[0].partition_data[0].records: ...``).
A nullable integer has no Kafka encoding: compiling a message that holds one at that version
raises ValueError at once.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Final

from raftka.common.api import ApiKey
from raftka.common.errors import InvalidRequestError
from raftka.common.schema import (ABSENT, BYTES_MAX, REQUIRED, STRING_BYTES_MAX, Array, Field, FieldError, Message,
                                  Struct, in_versions)


class CodecError(InvalidRequestError):  # type: ignore[misc, valid-type]
    """Bytes that are not a valid encoding of the declared body, or a body the encoder cannot
    write; ``.field`` holds the path of the field at fault. A subclass of InvalidRequestError so
    a listener answers INVALID_REQUEST as for any other malformed request, while a caller can
    still tell a wire-encoding fault from a semantic one."""


# -- primitives --------------------------------------------------------------------------------------

UVARINT_BYTES_MAX: Final = 5  # an unsigned varint carries at most 32 bits (Kafka's readUnsignedVarint)
VARLONG_BYTES_MAX: Final = 10

# One width per fixed-size Kafka type; bool reads any non-zero byte as true.
FIXED_FORMATS: Final[dict[str, str]] = {
    "bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "int64": "q",
    "float64": "d", "uuid": "16s",
}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT8 = struct.Struct(">b")
_ZERO_UUID = bytes(16)
_MISSING = object()
_TAGS_STEP: Final = "<tagged fields>"


def _uv(buf: Any, pos: int, max_bytes: int = UVARINT_BYTES_MAX) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, next pos). IndexError when cut short."""
    result = shift = 0
    for _ in range(max_bytes):
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise FieldError(f"varint longer than {max_bytes} bytes")


def _uvb(value: int) -> bytes:
    """An unsigned varint's bytes."""
    if value < 0:
        raise FieldError(f"unsigned varint of a negative number {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_UVB_SMALL: Final = tuple(bytes((n,)) for n in range(128))


def _public(call: Callable[[], Any], what: str) -> Any:
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - every fault becomes the one typed error
        raise _error(_located(exc, None), what) from None


def encode_uvarint(value: int) -> bytes:
    """Kafka's UNSIGNED_VARINT (32 bits): 7 bits a byte, low first, high bit = more."""
    if not 0 <= value < 2**32:
        raise CodecError(f"unsigned varint out of range: {value}")
    return _uvb(value)


def decode_uvarint(data: Any, pos: int = 0) -> tuple[int, int]:
    """(value, next pos) of an UNSIGNED_VARINT at ``pos``."""
    return _public(lambda: _uv(data, pos), "uvarint")  # type: ignore[no-any-return]


def encode_varint(value: int) -> bytes:
    """Kafka's VARINT: a zig-zag int32 (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...) as an unsigned varint."""
    if not -2**31 <= value < 2**31:
        raise CodecError(f"varint out of range: {value}")
    return _uvb((value << 1) ^ (value >> 31))


def decode_varint(data: Any, pos: int = 0) -> tuple[int, int]:
    raw, end = decode_uvarint(data, pos)
    if raw >= 2**32:
        raise CodecError(f"varint beyond 32 bits at {pos}")
    return (raw >> 1) ^ -(raw & 1), end


def encode_varlong(value: int) -> bytes:
    """Kafka's VARLONG: a zig-zag int64 as an unsigned varint of up to 10 bytes."""
    if not -2**63 <= value < 2**63:
        raise CodecError(f"varlong out of range: {value}")
    return _uvb((value << 1) ^ (value >> 63))


def decode_varlong(data: Any, pos: int = 0) -> tuple[int, int]:
    raw, end = _public(lambda: _uv(data, pos, VARLONG_BYTES_MAX), "varlong")
    if raw >= 2**64:
        raise CodecError(f"varlong beyond 64 bits at {pos}")
    return (raw >> 1) ^ -(raw & 1), end


# -- faults ---------------------------------------------------------------------------------------

def _located(exc: BaseException, part: str | None) -> FieldError:
    """``exc``, raised while decoding, as a FieldError with ``part`` added to its path: the one place a
    Python error from a generated decoder (a short buffer, bad UTF-8) gets its wording."""
    if isinstance(exc, FieldError):
        bad = exc
    elif isinstance(exc, (IndexError, struct.error)):
        bad = FieldError("truncated: the data ends inside this field")
    elif isinstance(exc, UnicodeDecodeError):
        bad = FieldError(f"invalid UTF-8 at byte {exc.start} of the string")
    else:  # not expected: still the one typed error, with what happened
        bad = FieldError(f"{type(exc).__name__}: {exc}")
    if part is not None and not (part is _TAGS_STEP and bad.path):  # a known tag names itself
        bad.path.append(part)
    return bad


def _located_encoding(exc: BaseException, part: str | None) -> FieldError:
    """The same for an encoder: a value it cannot write."""
    if isinstance(exc, FieldError):
        bad = exc
    elif isinstance(exc, KeyError):
        bad = FieldError("missing")
    elif isinstance(exc, UnicodeEncodeError):
        bad = FieldError("string is not valid UTF-8 (a lone surrogate)")
    else:
        bad = FieldError(f"cannot encode: {exc}")
    if part is not None:
        bad.path.append(part)
    return bad


def _path(parts: list[str]) -> str:
    out = ""
    for part in reversed(parts):
        out += part if part.startswith("[") or not out else "." + part
    return out


def _error(bad: FieldError, what: str) -> CodecError:
    where = _path(bad.path)
    error = CodecError(f"{what}: {where}: {bad.problem}" if where else f"{what}: {bad.problem}")
    error.field = where  # type: ignore[attr-defined]
    return error


def _run_field(step: Any, ctx: Any) -> str | None:
    """The field of a step at fault: a step is one field's name, or a run of fixed-width fields
    read or written together, (name, width, _) when decoding, (name, default, format) when
    encoding; ``ctx`` is the bytes left (decoding) or the body (encoding)."""
    if isinstance(step, str):
        return step
    if isinstance(ctx, int):  # decoding: the first field that does not fit in what is left
        for name, width, _ in step:
            if width > ctx:
                return name
            ctx -= width
        return step[-1][0]
    for name, default, fmt in step:  # encoding: the first field that does not pack alone
        value = ctx.get(name, default)
        try:
            struct.pack(">" + fmt, _nullable_uuid_bytes(value) if fmt == "16s" else value)
        except Exception:  # noqa: BLE001
            return name
    return step[0][0]


def _uuid_bytes(value: Any) -> bytes:
    raw = bytes.fromhex(value) if value.__class__ is str and len(value) == 32 else b""
    if len(raw) != 16:
        raise FieldError(f"expected uuid (32 hex digits), got {value!r:.40}")
    return raw


def _nullable_uuid_bytes(value: Any) -> bytes:
    """Null is Kafka's zero uuid ("no id")."""
    return _ZERO_UUID if value is None else _uuid_bytes(value)


# -- the generator ----------------------------------------------------------------------------------

def _min_size(declared: Any, version: int, flexible: bool) -> int:
    """The fewest bytes one value of ``declared`` takes: bounds a count read from the wire."""
    if isinstance(declared, str):
        if declared in FIXED_FORMATS:
            return struct.calcsize(">" + FIXED_FORMATS[declared])
        return 1 if flexible else (2 if declared == "string" else 4)
    if isinstance(declared, Array):
        return 1 if flexible else 4
    if isinstance(declared, Struct):
        total = 1 if flexible else 0  # the tagged-field count
        for f in declared.fields:
            if not in_versions(version, f.versions) or (flexible and f.tagged_in(version)):
                continue
            if isinstance(f.type, Struct) and f.nullable_in(version):
                total += 1  # a null struct is its marker alone
            elif f.flexible_versions is not None and not _fixed(f):
                total += 1  # its own encoding may be compact: never more than the fewest bytes
            else:
                total += _min_size(f.type, version, flexible)
        return total
    return 0


class _Compiler:
    """Generates the encoder and decoder of one struct at one version (nested structs: their own)."""

    def __init__(self, version: int, flexible: bool, what: str) -> None:
        self.version = version
        self.flexible = flexible
        self.what = what
        self.structs: dict[int, tuple[Struct, Callable[..., Any], Callable[..., Any]]] = {}

    def struct(self, declared: Struct) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """(enc(d, buf) -> None, dec(buf, pos) -> (d, pos)) of ``declared``."""
        cached = self.structs.get(id(declared))
        if cached is not None:
            return cached[1], cached[2]
        pair = _StructCode(self, declared).build()
        self.structs[id(declared)] = (declared, *pair)
        return pair


class _StructCode:
    def __init__(self, compiler: _Compiler, declared: Struct) -> None:
        self.c = compiler
        self.s = declared
        self.ns: dict[str, Any] = {
            "FieldError": FieldError, "LOC": _located, "LOCE": _located_encoding, "WHERE": _run_field,
            "UV": _uv, "UVB": _uvb,
            "SMALL": _UVB_SMALL, "I16": _INT16, "I32": _INT32, "I8": _INT8, "UUID": _uuid_bytes,
            "NUUID": _nullable_uuid_bytes, "ZERO": _ZERO_UUID, "MISSING": _MISSING, "TAGS": _read_tags,
            "unpack_from": struct.unpack_from, "pack": struct.pack,
        }
        self.counter = 0

    def name(self, prefix: str, value: Any) -> str:
        self.counter += 1
        key = f"{prefix}{self.counter}"
        self.ns[key] = value
        return key

    # -- one value -----------------------------------------------------------------------------

    def flexible_for(self, f: Field) -> bool:
        if f.flexible_versions is None:
            return self.c.flexible
        return in_versions(self.c.version, f.flexible_versions)

    def enc_value(self, out: list[str], ind: str, declared: Any, v: str, buf: str, nullable: bool, flexible: bool,
                  max_length: int | None, depth: int) -> None:
        """Lines writing the value in variable ``v`` of type ``declared`` to bytearray ``buf``."""
        n = f"n{depth}"
        null = "SMALL[0]" if flexible else ("I16.pack(-1)" if declared == "string" else "I32.pack(-1)")

        def length_prefix(count: str) -> str:
            if flexible:
                return f"{buf} += SMALL[{count} + 1] if {count} < 127 else UVB({count} + 1)"
            return f"{buf} += {'I16' if declared == 'string' else 'I32'}.pack({count})"

        def null_case() -> None:
            out.append(f"{ind}if {v} is None:")
            out.append(f"{ind}    {buf} += {null}" if nullable else f"{ind}    raise FieldError('null is not allowed')")
            out.append(f"{ind}else:")

        if isinstance(declared, str) and declared in FIXED_FORMATS:
            fmt = self.name("S", struct.Struct(">" + FIXED_FORMATS[declared]))
            value = f"{'NUUID' if nullable else 'UUID'}({v})" if declared == "uuid" else v
            out.append(f"{ind}{buf} += {fmt}.pack({value})")
        elif declared in ("string", "bytes", "records"):
            limit = max_length if max_length is not None else (STRING_BYTES_MAX if declared == "string" else BYTES_MAX)
            null_case()
            body = f"b{depth}"
            out.append(f"{ind}    {body} = {v}.encode('utf-8')" if declared == "string" else f"{ind}    {body} = {v}")
            out.append(f"{ind}    {n} = len({body})")
            out.append(f"{ind}    if {n} > {limit}: raise FieldError(f'{declared} of {{{n}}} bytes, at most {limit}')")
            out.append(f"{ind}    {length_prefix(n)}")
            out.append(f"{ind}    {buf} += {body}")
        elif isinstance(declared, Array):
            null_case()
            of = declared.of
            out.append(f"{ind}    {n} = len({v})")
            out.append(f"{ind}    if {n} > {declared.max_count}: "
                       f"raise FieldError(f'array of {{{n}}} entries, at most {declared.max_count}')")
            out.append(f"{ind}    {length_prefix(n)}")
            if isinstance(of, str) and of in FIXED_FORMATS and of != "uuid":
                out.append(f"{ind}    {buf} += pack('>%d{FIXED_FORMATS[of]}' % {n}, *{v})")
            else:
                i, x = f"i{depth}", f"x{depth}"
                out.append(f"{ind}    {i} = 0")
                out.append(f"{ind}    try:")
                out.append(f"{ind}        for {i}, {x} in enumerate({v}):")
                self.enc_value(out, ind + "            ", of, x, buf, False, flexible, declared.max_length, depth + 1)
                out.append(f"{ind}    except Exception as exc:")
                out.append(f"{ind}        raise LOCE(exc, '[%d]' % {i}) from None")
        elif isinstance(declared, Struct):
            enc, _ = self.c.struct(declared)
            fn = self.name("E", enc)
            if nullable:  # Kafka's nullable struct: an int8 marker, -1 null, 1 present
                out.append(f"{ind}if {v} is None:")
                out.append(f"{ind}    {buf} += b'\\xff'")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {buf} += b'\\x01'")
                out.append(f"{ind}    {fn}({v}, {buf})")
            else:
                out.append(f"{ind}{fn}({v}, {buf})")
        else:
            raise ValueError(f"{self.c.what}: unknown type {declared!r}")

    def dec_value(self, out: list[str], ind: str, declared: Any, v: str, nullable: bool, flexible: bool,
                  max_length: int | None, depth: int) -> None:
        """Lines reading a value of type ``declared`` at ``pos`` of memoryview ``buf`` into ``v``."""
        n = f"n{depth}"

        def length(kind: str) -> None:
            """``n`` := the length or count; ``null`` handled; ends inside an ``else:`` block."""
            if flexible:
                out.append(f"{ind}{n} = buf[pos]")
                out.append(f"{ind}if {n} < 128: pos += 1")
                out.append(f"{ind}else: {n}, pos = UV(buf, pos)")
                out.append(f"{ind}if {n} == 0:")
                out.append(f"{ind}    {v} = None" if nullable else f"{ind}    raise FieldError('null is not allowed')")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {n} -= 1")
            else:
                out.append(f"{ind}{n} = {'I16' if kind == 'string' else 'I32'}.unpack_from(buf, pos)[0]")
                out.append(f"{ind}pos += {2 if kind == 'string' else 4}")
                out.append(f"{ind}if {n} < 0:")
                if nullable:
                    out.append(f"{ind}    if {n} != -1: raise FieldError(f'negative length {{{n}}}')")
                    out.append(f"{ind}    {v} = None")
                else:
                    out.append(f"{ind}    raise FieldError('null is not allowed' if {n} == -1 "
                               f"else f'negative length {{{n}}}')")
                out.append(f"{ind}else:")

        if isinstance(declared, str) and declared in FIXED_FORMATS:
            fmt = self.name("S", struct.Struct(">" + FIXED_FORMATS[declared]))
            out.append(f"{ind}{v} = {fmt}.unpack_from(buf, pos)[0]")
            out.append(f"{ind}pos += {struct.calcsize('>' + FIXED_FORMATS[declared])}")
            if declared == "uuid":
                out.append(f"{ind}{v} = None if {v} == ZERO else {v}.hex()" if nullable else f"{ind}{v} = {v}.hex()")
        elif declared in ("string", "bytes", "records"):
            limit = max_length if max_length is not None else (STRING_BYTES_MAX if declared == "string" else BYTES_MAX)
            length(declared)
            e = f"e{depth}"
            out.append(f"{ind}    if {n} > {limit}: raise FieldError(f'{declared} of {{{n}}} bytes, at most {limit}')")
            out.append(f"{ind}    {e} = pos + {n}")
            out.append(f"{ind}    if {e} > size: "
                       f"raise FieldError(f'truncated: {{{n}}} bytes declared, {{size - pos}} left')")
            if declared == "string":
                out.append(f"{ind}    {v} = str(buf[pos:{e}], 'utf-8')")
            else:
                out.append(f"{ind}    {v} = bytes(buf[pos:{e}])")
            out.append(f"{ind}    pos = {e}")
        elif isinstance(declared, Array):
            of = declared.of
            each = max(_min_size(of, self.c.version, self.c.flexible), 0)
            length("array")
            out.append(f"{ind}    if {n} > {declared.max_count}: "
                       f"raise FieldError(f'array of {{{n}}} entries, at most {declared.max_count}')")
            if each:  # before anything is allocated: could the bytes left hold that many?
                out.append(f"{ind}    if {n} * {each} > size - pos: "
                           f"raise FieldError(f'truncated: {{{n}}} entries declared, {{size - pos}} bytes left')")
            if isinstance(of, str) and of in FIXED_FORMATS and of != "uuid":
                out.append(f"{ind}    {v} = list(unpack_from('>%d{FIXED_FORMATS[of]}' % {n}, buf, pos))")
                out.append(f"{ind}    pos += {n} * {each}")
            else:
                i, x, ap = f"i{depth}", f"x{depth}", f"ap{depth}"
                out.append(f"{ind}    {v} = []")
                out.append(f"{ind}    {ap} = {v}.append")
                out.append(f"{ind}    {i} = 0")
                out.append(f"{ind}    try:")
                out.append(f"{ind}        for {i} in range({n}):")
                self.dec_value(out, ind + "            ", of, x, False, flexible, declared.max_length, depth + 1)
                out.append(f"{ind}            {ap}({x})")
                out.append(f"{ind}    except Exception as exc:")
                out.append(f"{ind}        raise LOC(exc, '[%d]' % {i}) from None")
        elif isinstance(declared, Struct):
            _, dec = self.c.struct(declared)
            fn = self.name("D", dec)
            if nullable:  # Kafka reads a negative marker as null
                out.append(f"{ind}if I8.unpack_from(buf, pos)[0] < 0:")
                out.append(f"{ind}    pos += 1")
                out.append(f"{ind}    {v} = None")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {v}, pos = {fn}(buf, pos + 1)")
            else:
                out.append(f"{ind}{v}, pos = {fn}(buf, pos)")
        else:
            raise ValueError(f"{self.c.what}: unknown type {declared!r}")

    # -- one struct ----------------------------------------------------------------------------

    def build(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        version, flexible = self.c.version, self.c.flexible
        present: list[Field] = []
        tagged: list[Field] = []
        defaults: list[Field] = []  # not on the wire at this version: their default, if a value
        for f in self.s.fields:
            where = f"{self.c.what}: {self.s.name}.{f.name}"
            if not in_versions(version, f.versions):
                defaults.append(f)
                continue
            if f.nullable_in(version) and isinstance(f.type, str) and f.type in FIXED_FORMATS and f.type != "uuid":
                raise ValueError(f"{where}: a nullable {f.type} has no Kafka encoding")
            if f.tagged_in(version):
                if not flexible:
                    raise ValueError(f"{where}: tagged in v{version}, which is not a flexible version")
                tagged.append(f)
                if f.default is not ABSENT and f.default is not REQUIRED:
                    defaults.append(f)
            else:
                present.append(f)
        tagged.sort(key=lambda f: f.tag)  # type: ignore[arg-type, return-value]
        if len({f.tag for f in tagged}) != len(tagged):
            raise ValueError(f"{self.c.what}: {self.s.name} declares a tag twice")
        encode = self.build_encoder(present, tagged)
        decode = self.build_decoder(present, tagged, defaults)
        return encode, decode

    def getter(self, f: Field, version: int) -> str:
        name = repr(f.name)
        if f.default is REQUIRED or (f.default is ABSENT and not f.nullable_in(version)):
            return f"d[{name}]"
        if f.default is ABSENT:
            return f"get({name})"
        return f"get({name}, {self.name('V', f.default)})"

    def runs(self, present: list[Field]) -> list[list[Field]]:
        """Consecutive fixed-width fields grouped: one struct call each."""
        groups: list[list[Field]] = []
        for f in present:
            if _fixed(f) and groups and _fixed(groups[-1][-1]):
                groups[-1].append(f)
            else:
                groups.append([f])
        return groups

    def build_encoder(self, present: list[Field], tagged: list[Field]) -> Callable[..., Any]:
        version = self.c.version
        steps: list[Any] = []
        out = ["def enc(d, buf):",
               "    if d.__class__ is not dict: raise FieldError('expected a struct (dict), got ' + type(d).__name__)",
               "    at = 0", "    try:", "        get = d.get"]
        ind = "        "
        for group in self.runs(present):
            out.append(f"{ind}at = {len(steps)}")
            if _fixed(group[0]):
                fmt = ">" + "".join(FIXED_FORMATS[f.type] for f in group)  # type: ignore[index]
                values = ", ".join(self.getter(f, version) if f.type != "uuid" else
                                   f"{'NUUID' if f.nullable_in(version) else 'UUID'}({self.getter(f, version)})"
                                   for f in group)
                out.append(f"{ind}buf += {self.name('S', struct.Struct(fmt))}.pack({values})")
                steps.append(tuple((f.name, _run_default(f, version), FIXED_FORMATS[f.type])  # type: ignore[index]
                                   for f in group))
            else:
                f = group[0]
                steps.append(f.name)
                out.append(f"{ind}v = {self.getter(f, version)}")
                self.enc_value(out, ind, f.type, "v", "buf", f.nullable_in(version), self.flexible_for(f),
                               f.max_length, 0)
        if self.c.flexible:
            if not tagged:
                out.append(f"{ind}buf.append(0)")
            else:
                out.append(f"{ind}tags = []")
                for f in tagged:
                    out.append(f"{ind}at = {len(steps)}")
                    steps.append(f.name)
                    out.append(f"{ind}v = get({f.name!r}, MISSING)")
                    skip = "" if f.default is ABSENT else f" and v != {self.name('V', f.default)}"
                    out.append(f"{ind}if v is not MISSING{skip}:")
                    out.append(f"{ind}    t = bytearray()")
                    self.enc_value(out, ind + "    ", f.type, "v", "t", f.nullable_in(version), True,
                                   f.max_length, 0)
                    out.append(f"{ind}    tags.append(({f.tag}, t))")
                out.append(f"{ind}buf += UVB(len(tags))")
                out.append(f"{ind}for tag, t in tags:")
                out.append(f"{ind}    buf += UVB(tag)")
                out.append(f"{ind}    buf += UVB(len(t))")
                out.append(f"{ind}    buf += t")
        out.append("    except Exception as exc:")
        out.append("        raise LOCE(exc, WHERE(STEPS[at], d)) from None")
        self.ns["STEPS"] = steps
        return self.define(out, "enc", "encoder")

    def build_decoder(self, present: list[Field], tagged: list[Field], defaults: list[Field]) -> Callable[..., Any]:
        version = self.c.version
        steps: list[Any] = []
        out = ["def dec(buf, pos):", "    size = len(buf)", "    at = 0", "    try:"]
        ind = "        "
        names: list[tuple[str, str]] = []  # (field name, local variable)
        for group in self.runs(present):
            out.append(f"{ind}at = {len(steps)}")
            if _fixed(group[0]):
                fmt = ">" + "".join(FIXED_FORMATS[f.type] for f in group)  # type: ignore[index]
                local = [f"f{len(names) + k}" for k in range(len(group))]
                compiled = struct.Struct(fmt)
                out.append(f"{ind}{', '.join(local)}, = {self.name('S', compiled)}.unpack_from(buf, pos)")
                out.append(f"{ind}pos += {compiled.size}")
                for f, var in zip(group, local):
                    if f.type == "uuid":
                        out.append(f"{ind}{var} = None if {var} == ZERO else {var}.hex()" if f.nullable_in(version)
                                   else f"{ind}{var} = {var}.hex()")
                    names.append((f.name, var))
                steps.append(tuple((f.name, struct.calcsize(">" + FIXED_FORMATS[f.type]), "")  # type: ignore[index]
                                   for f in group))
            else:
                f = group[0]
                var = f"f{len(names)}"
                steps.append(f.name)
                self.dec_value(out, ind, f.type, var, f.nullable_in(version), self.flexible_for(f), f.max_length, 0)
                names.append((f.name, var))
        items = [f"{name!r}: {var}" for name, var in names]
        for f in defaults:
            if f.default is not REQUIRED and f.default is not ABSENT:
                copy = ".copy()" if f.default.__class__ in (list, dict) else ""
                items.append(f"{f.name!r}: {self.name('V', f.default)}{copy}")
        out.append(f"{ind}d = {{{', '.join(items)}}}")
        if self.c.flexible:
            out.append(f"{ind}at = {len(steps)}")
            steps.append(_TAGS_STEP)
            out.append(f"{ind}n = buf[pos]")
            out.append(f"{ind}if n < 128: pos += 1")
            out.append(f"{ind}else: n, pos = UV(buf, pos)")
            known: dict[int, tuple[str, Callable[..., Any]]] = {}
            for f in tagged:
                known[f.tag] = (f.name, self.tag_decoder(f))  # type: ignore[index]
            out.append(f"{ind}if n: pos = TAGS(buf, pos, n, d, {self.name('K', known)})")
        out.append(f"{ind}return d, pos")
        out.append("    except Exception as exc:")
        out.append("        raise LOC(exc, WHERE(STEPS[at], size - pos)) from None")
        self.ns["STEPS"] = steps
        return self.define(out, "dec", "decoder")

    def tag_decoder(self, f: Field) -> Callable[..., Any]:
        out = ["def tagged(buf, pos):", "    size = len(buf)"]
        self.dec_value(out, "    ", f.type, "v", f.nullable_in(self.c.version), True, f.max_length, 0)
        out.append("    return v, pos")
        return self.define(out, "tagged", f"decoder of tag {f.tag}")

    def define(self, lines: list[str], fn: str, kind: str) -> Callable[..., Any]:
        namespace = dict(self.ns)  # each function keeps its own STEPS
        source = "\n".join(lines)
        exec(compile(source, f"<{kind} of {self.s.name} v{self.c.version}>", "exec"), namespace)  # noqa: S102
        function = namespace[fn]
        function.source = source  # for reading the generated code when debugging
        return function  # type: ignore[no-any-return]


def _run_default(f: Field, version: int) -> Any:
    """What the encoder writes for ``f`` when the body lacks it (_MISSING: nothing, an error)."""
    if f.default is REQUIRED or (f.default is ABSENT and not f.nullable_in(version)):
        return _MISSING
    return None if f.default is ABSENT else f.default


def _fixed(f: Field) -> bool:
    return isinstance(f.type, str) and f.type in FIXED_FORMATS


def _read_tags(buf: Any, pos: int, count: int, d: dict[str, Any], known: dict[int, tuple[str, Any]]) -> int:
    """Reads ``count`` tagged fields into ``d``: each known tag decoded within its declared size
    (the payload must fill it exactly), an unknown one skipped. Every field takes at least two
    bytes, so a huge count only runs until the data ends."""
    size = len(buf)
    for _ in range(count):
        tag, pos = _uv(buf, pos)
        length, pos = _uv(buf, pos)
        end = pos + length
        if end > size:
            raise FieldError(f"truncated: tagged field {tag} of {length} bytes, {size - pos} left")
        entry = known.get(tag)
        if entry is not None:
            name, decode = entry
            try:
                value, used = decode(buf[pos:end], 0)
                if used != length:
                    raise FieldError(f"tagged field of {length} bytes holds {used}")
            except Exception as exc:  # noqa: BLE001
                raise _located(exc, name) from None
            d[name] = value
        pos = end
    return pos


# -- compiled codecs, cached ----------------------------------------------------------------------------

_CACHE: dict[tuple[int, int], tuple[Message, Callable[..., Any], Callable[..., Any]]] = {}


def _compiled(message: Message, version: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    key = (id(message), version)
    cached = _CACHE.get(key)
    if cached is not None and cached[0] is message:
        return cached[1], cached[2]
    if version not in message.versions():
        raise ValueError(f"{message.name}: version {version} is not in {message.valid_versions}")
    compiler = _Compiler(version, message.flexible(version), f"{message.name} v{version}")
    enc, dec = compiler.struct(message.struct)
    _CACHE[key] = (message, enc, dec)
    return enc, dec


_WRAPPERS: dict[tuple[int, int, str], tuple[Message, Callable[..., Any]]] = {}


def _wrapper(message: Message, version: int, kind: str, make: Callable[[], Callable[..., Any]]) -> Any:
    key = (id(message), version, kind)
    cached = _WRAPPERS.get(key)
    if cached is None or cached[0] is not message:
        cached = _WRAPPERS[key] = (message, make())
    return cached[1]


def encoder(message: Message, version: int) -> Callable[[dict[str, Any]], bytes]:
    """``encode(body) -> bytes`` of ``message`` at ``version``, compiled once; a body it cannot
    write raises CodecError naming the field. Absent fields get their default (null when
    nullable and ABSENT); a REQUIRED one is an error."""
    return _wrapper(message, version, "encode", lambda: _make_encoder(message, version))  # type: ignore[no-any-return]


def _make_encoder(message: Message, version: int) -> Callable[[dict[str, Any]], bytes]:
    enc, _ = _compiled(message, version)
    what = f"{message.name} v{version}"

    def encode(body: dict[str, Any]) -> bytes:
        buf = bytearray()
        try:
            enc(body, buf)
        except FieldError as bad:
            raise _error(bad, what) from None
        return bytes(buf)
    return encode


def encoder_into(message: Message, version: int) -> Callable[[dict[str, Any], bytearray], None]:
    """``encode_into(body, buf)``: as :func:`encoder`, appending to ``buf`` (a frame being built:
    its length prefix and header first, then the body, with no copy of a large body)."""
    return _wrapper(message, version, "encode into", lambda: _make_encoder_into(message, version))  # type: ignore[no-any-return]


def _make_encoder_into(message: Message, version: int) -> Callable[[dict[str, Any], bytearray], None]:
    enc, _ = _compiled(message, version)
    what = f"{message.name} v{version}"

    def encode_into(body: dict[str, Any], buf: bytearray) -> None:
        try:
            enc(body, buf)
        except FieldError as bad:
            raise _error(bad, what) from None
    return encode_into


def decoder(message: Message, version: int, *, allow_trailing: bool = False) -> Callable[[Any], dict[str, Any]]:
    """``decode(data) -> body`` of ``message`` at ``version``, compiled once; any malformed input
    raises CodecError naming the field. Bytes after the body are an error unless ``allow_trailing``."""
    kind = "decode, trailing bytes allowed" if allow_trailing else "decode"
    return _wrapper(message, version, kind,  # type: ignore[no-any-return]
                    lambda: _make_decoder(message, version, allow_trailing))


def _make_decoder(message: Message, version: int, allow_trailing: bool) -> Callable[[Any], dict[str, Any]]:
    _, dec = _compiled(message, version)
    what = f"{message.name} v{version}"

    def decode(data: Any) -> dict[str, Any]:
        buf = data if data.__class__ is memoryview else memoryview(data)
        try:
            body, pos = dec(buf, 0)
        except FieldError as bad:
            raise _error(bad, what) from None
        if pos != len(buf) and not allow_trailing:
            raise _error(FieldError(f"{len(buf) - pos} bytes after the body"), what)
        return body  # type: ignore[no-any-return]
    return decode


# -- headers ------------------------------------------------------------------------------------------

# Kafka's RequestHeader: v1 (api_key, api_version, correlation_id, client_id), v2 adds tagged
# fields; client_id stays a non-compact string in v2 so a broker can read it before it knows the
# request is flexible.
REQUEST_HEADER: Final = Message(-1, "RequestHeader", "1-2", (
    Field("api_key", "int16"),
    Field("api_version", "int16"),
    Field("correlation_id", "int32"),
    Field("client_id", "string", nullable=True, default=None, flexible_versions="none"),
), flexible_versions="2+")
RESPONSE_HEADER: Final = Message(-1, "ResponseHeader", "0-1", (Field("correlation_id", "int32"),),
                                 flexible_versions="1+")
_API = struct.Struct(">hh")


def request_header_version(message: Message, version: int) -> int:
    """2 for a flexible request version, else 1."""
    return 2 if message.flexible(version) else 1


def response_header_version(message: Message, version: int) -> int:
    """1 for a flexible response version, else 0; ApiVersions answers with v0 always, so that a
    client that sent a version the broker does not know can still read the answer."""
    return 1 if message.flexible(version) and message.api_key != ApiKey.API_VERSIONS else 0


def peek_request_api(data: Any) -> tuple[int, int]:
    """(api_key, api_version) of a request frame's header, to pick its header and body versions."""
    if len(data) < 4:
        raise CodecError(f"RequestHeader: truncated: {len(data)} bytes, the api key and version take 4")
    return _API.unpack_from(data)  # type: ignore[return-value]


def encode_request_header(header: dict[str, Any], header_version: int) -> bytes:
    return encoder(REQUEST_HEADER, header_version)(header)


def decode_request_header(data: Any, header_version: int) -> tuple[dict[str, Any], int]:
    """(header, offset of the body in ``data``)."""
    return _decode_prefix(REQUEST_HEADER, header_version, data)


def encode_response_header(header: dict[str, Any], header_version: int) -> bytes:
    return encoder(RESPONSE_HEADER, header_version)(header)


def decode_response_header(data: Any, header_version: int) -> tuple[dict[str, Any], int]:
    return _decode_prefix(RESPONSE_HEADER, header_version, data)


def _decode_prefix(message: Message, version: int, data: Any) -> tuple[dict[str, Any], int]:
    _, dec = _compiled(message, version)
    buf = data if data.__class__ is memoryview else memoryview(data)
    try:
        return dec(buf, 0)  # type: ignore[no-any-return]
    except FieldError as bad:
        raise _error(bad, f"{message.name} v{version}") from None


__all__ = ["CodecError", "FIXED_FORMATS", "REQUEST_HEADER", "RESPONSE_HEADER", "decode_request_header",
           "decode_response_header", "decode_uvarint", "decode_varint", "decode_varlong", "decoder",
           "encode_request_header", "encode_response_header", "encode_uvarint", "encode_varint", "encode_varlong",
           "encoder", "encoder_into", "peek_request_api", "request_header_version", "response_header_version"]
