"""Kafka's binary encoding compiled from the declarations (common/codec.py, #kafka-protocol).

Proves four things. Each primitive encodes byte for byte as Kafka's protocol guide says (vectors
written here by hand, never produced by the codec), and so do a request header v2 with an
ApiVersions v3 body, a response header and a tagged field. Any body of a test message that has
every type, nested arrays of structs, nullable fields, a tagged field and fields added in later
versions decodes to itself after encoding, in non-flexible and flexible versions. Hostile bytes
(every truncation, huge counts and lengths, bad UTF-8, negative lengths, random and mutated
bytes) raise only CodecError naming the field, at once; unknown tagged fields are skipped. And
what has no Kafka encoding (a Map, a nullable int) is refused when compiled.
"""
from __future__ import annotations

import time
import timeit

import pytest
from hypothesis import given, settings, strategies as st

from raftka.common import codec, errors
from raftka.common.codec import (CodecError, decode_request_header, decode_response_header, decode_uvarint,
                                 decode_varint, decode_varlong, decoder, encode_request_header,
                                 encode_response_header, encode_uvarint, encode_varint, encode_varlong, encoder,
                                 peek_request_api, request_header_version, response_header_version)
from raftka.common.errors import InvalidRequestError
from raftka.common.messages import KAFKA_API
from raftka.common.schema import ABSENT, Array, Field, Message, Struct

PRODUCE = KAFKA_API[0][0]  # Kafka's ProduceRequest (v3 is the lowest version served)

FLEX = 1  # the single-field messages below are flexible from version 1


def one(type_: object, **options: object) -> Message:
    """A message of one field ``x``: version 0 non-flexible, version 1 flexible."""
    field = Field("x", type_, **options)  # type: ignore[arg-type]
    return Message(1000, "One", "0-1", (field,), flexible_versions="1+")


def enc(message: Message, version: int, body: dict) -> bytes:
    return encoder(message, version)(body)


def dec(message: Message, version: int, data: bytes) -> dict:
    return decoder(message, version)(data)


def refused(message: Message, version: int, data: bytes) -> CodecError:
    with pytest.raises(CodecError) as caught:
        dec(message, version, data)
    assert isinstance(caught.value, InvalidRequestError) and caught.value.code == errors.INVALID_REQUEST
    return caught.value


# -- primitives, byte for byte ---------------------------------------------------------------------

UVARINTS = [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
            (16_383, b"\xff\x7f"), (16_384, b"\x80\x80\x01"), (2**32 - 1, b"\xff\xff\xff\xff\x0f")]


@pytest.mark.parametrize("value, wire", UVARINTS)
def test_unsigned_varint_vectors(value, wire):
    assert encode_uvarint(value) == wire
    assert decode_uvarint(wire + b"rest") == (value, len(wire))


@pytest.mark.parametrize("value, wire", [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"),
                                         (-64, b"\x7f"), (64, b"\x80\x01"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
                                         (-2**31, b"\xff\xff\xff\xff\x0f")])
def test_zigzag_varint_vectors(value, wire):
    assert encode_varint(value) == wire
    assert decode_varint(wire) == (value, len(wire))


@pytest.mark.parametrize("value, wire", [(-1, b"\x01"), (300, b"\xd8\x04"),
                                         (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
                                         (-2**63, b"\xff" * 9 + b"\x01")])
def test_zigzag_varlong_vectors(value, wire):
    assert encode_varlong(value) == wire
    assert decode_varlong(wire) == (value, len(wire))


def test_varints_refuse_too_many_bytes_a_cut_and_out_of_range_values():
    for bad in (b"\x80" * 5 + b"\x01", b"\x80", b""):
        with pytest.raises(CodecError):
            decode_uvarint(bad)
    with pytest.raises(CodecError):
        decode_varlong(b"\x80" * 10 + b"\x01")
    for call in (lambda: encode_uvarint(-1), lambda: encode_uvarint(2**32), lambda: encode_varint(2**31),
                 lambda: encode_varlong(-2**63 - 1)):
        with pytest.raises(CodecError):
            call()


UUID_HEX = "00112233445566778899aabbccddeeff"
FIXED_VECTORS = [
    ("bool", True, b"\x01"), ("bool", False, b"\x00"), ("int8", -1, b"\xff"), ("int16", -2, b"\xff\xfe"),
    ("uint16", 65_535, b"\xff\xff"), ("int32", 1, b"\x00\x00\x00\x01"), ("int32", -2**31, b"\x80\x00\x00\x00"),
    ("uint32", 2**32 - 1, b"\xff\xff\xff\xff"), ("int64", -1, b"\xff" * 8),
    ("int64", 2**40, b"\x00\x00\x01\x00\x00\x00\x00\x00"), ("float64", 1.0, b"\x3f\xf0" + b"\x00" * 6),
    ("float64", -2.5, b"\xc0\x04" + b"\x00" * 6), ("uuid", UUID_HEX, bytes(range(0, 256, 17))),
]


@pytest.mark.parametrize("type_name, value, wire", FIXED_VECTORS)
def test_fixed_width_vectors_in_both_encodings(type_name, value, wire):
    message = one(type_name)
    assert enc(message, 0, {"x": value}) == wire
    assert enc(message, FLEX, {"x": value}) == wire + b"\x00"  # + an empty tagged-field section
    assert dec(message, 0, wire) == {"x": value}
    assert dec(message, FLEX, wire + b"\x00") == {"x": value}


def test_bool_reads_any_non_zero_byte_as_true():
    assert dec(one("bool"), 0, b"\x07") == {"x": True}


# (type, value, non-flexible wire, flexible wire without the tagged-field section)
VARIABLE_VECTORS = [
    ("string", "abc", b"\x00\x03abc", b"\x04abc"),
    ("string", "", b"\x00\x00", b"\x01"),
    ("string", None, b"\xff\xff", b"\x00"),
    ("string", "\u00e9", b"\x00\x02\xc3\xa9", b"\x03\xc3\xa9"),  # length in UTF-8 bytes
    ("bytes", b"\x01\x02", b"\x00\x00\x00\x02\x01\x02", b"\x03\x01\x02"),
    ("bytes", None, b"\xff\xff\xff\xff", b"\x00"),
    ("records", b"RB", b"\x00\x00\x00\x02RB", b"\x03RB"),
    ("records", None, b"\xff\xff\xff\xff", b"\x00"),
    (Array("int32"), [1, 2], b"\x00\x00\x00\x02" b"\x00\x00\x00\x01\x00\x00\x00\x02",
     b"\x03" b"\x00\x00\x00\x01\x00\x00\x00\x02"),
    (Array("int32"), [], b"\x00\x00\x00\x00", b"\x01"),
    (Array("int32"), None, b"\xff\xff\xff\xff", b"\x00"),
    (Array("string"), ["a", "bc"], b"\x00\x00\x00\x02\x00\x01a\x00\x02bc", b"\x03\x02a\x03bc"),
]


@pytest.mark.parametrize("type_, value, plain, compact", VARIABLE_VECTORS)
def test_strings_bytes_records_and_arrays_in_plain_and_compact_form(type_, value, plain, compact):
    message = one(type_, nullable=True)
    assert enc(message, 0, {"x": value}) == plain
    assert enc(message, FLEX, {"x": value}) == compact + b"\x00"
    assert dec(message, 0, plain) == {"x": value}
    assert dec(message, FLEX, compact + b"\x00") == {"x": value}


def test_a_300_byte_compact_string_has_a_two_byte_length():
    message = one("string")
    wire = b"\xad\x02" + b"s" * 300  # 301 as an unsigned varint
    assert enc(message, FLEX, {"x": "s" * 300}) == wire + b"\x00"
    assert dec(message, FLEX, wire + b"\x00") == {"x": "s" * 300}


def test_structs_nullable_structs_and_their_tagged_sections():
    inner = Struct("Inner", (Field("a", "int16"),))
    plain, nullable = one(inner), one(inner, nullable=True)
    assert enc(plain, 0, {"x": {"a": 5}}) == b"\x00\x05"
    assert enc(plain, FLEX, {"x": {"a": 5}}) == b"\x00\x05\x00\x00"  # inner's tags, then the body's
    assert enc(nullable, 0, {"x": None}) == b"\xff"
    assert enc(nullable, 0, {"x": {"a": 5}}) == b"\x01\x00\x05"
    assert dec(nullable, 0, b"\xff") == {"x": None} and dec(nullable, 0, b"\x01\x00\x05") == {"x": {"a": 5}}
    entries = one(Array(inner))
    assert enc(entries, FLEX, {"x": [{"a": 1}, {"a": 2}]}) == b"\x03\x00\x01\x00\x00\x02\x00\x00"


TAGGED = Message(1001, "Tagged", "0-1", (
    Field("id", "int32"),
    Field("note", "string", nullable=True, default=None, tag=0, tagged_versions="1+", versions="1+"),
    Field("weight", "int32", default=7, tag=3, tagged_versions="1+", versions="1+"),
), flexible_versions="1+")


def test_a_tagged_field_is_written_only_when_it_differs_from_its_default():
    assert enc(TAGGED, 1, {"id": 1}) == b"\x00\x00\x00\x01\x00"
    assert enc(TAGGED, 1, {"id": 1, "note": None, "weight": 7}) == b"\x00\x00\x00\x01\x00"
    # count 1; tag 0, size 2, compact string "x"
    assert enc(TAGGED, 1, {"id": 1, "note": "x"}) == b"\x00\x00\x00\x01\x01\x00\x02\x02x"
    # count 2, ascending tags; tag 3 holds an int32 of 4 bytes
    both = b"\x00\x00\x00\x01\x02\x00\x02\x02x\x03\x04\x00\x00\x00\x09"
    assert enc(TAGGED, 1, {"id": 1, "note": "x", "weight": 9}) == both
    assert dec(TAGGED, 1, both) == {"id": 1, "note": "x", "weight": 9}
    assert dec(TAGGED, 1, b"\x00\x00\x00\x01\x00") == {"id": 1, "note": None, "weight": 7}
    assert enc(TAGGED, 0, {"id": 1, "note": "ignored"}) == b"\x00\x00\x00\x01"
    assert dec(TAGGED, 0, b"\x00\x00\x00\x01") == {"id": 1, "note": None, "weight": 7}  # defaults of later fields


def test_unknown_tags_are_skipped_and_a_known_tag_must_fill_its_size():
    # tags 1 and 9 are unknown (9 with a 2-byte size varint), then the known tag 3
    wire = (b"\x00\x00\x00\x01\x03" + b"\x01\x03abc" + b"\x09\x80\x01" + b"z" * 128
            + b"\x03\x04\x00\x00\x00\x02")
    assert dec(TAGGED, 1, wire) == {"id": 1, "note": None, "weight": 2}
    error = refused(TAGGED, 1, b"\x00\x00\x00\x01\x01\x03\x05\x00\x00\x00\x02\xff")  # size 5 for an int32
    assert error.field == "weight" and "holds 4" in error.message
    assert "truncated" in refused(TAGGED, 1, b"\x00\x00\x00\x01\x01\x07\x09abc").message


API_VERSIONS_V3 = Message(18, "ApiVersionsRequest", "0-3", (
    Field("client_software_name", "string", versions="3+", default=""),
    Field("client_software_version", "string", versions="3+", default=""),
), flexible_versions="3+")


def test_request_header_v2_and_an_api_versions_v3_body_match_the_protocol_guide():
    header = {"api_key": 18, "api_version": 3, "correlation_id": 7, "client_id": "my-client"}
    header_wire = (b"\x00\x12" b"\x00\x03" b"\x00\x00\x00\x07"
                   b"\x00\x09my-client"  # client_id: a NON-compact nullable string in v2 too
                   b"\x00")  # no tagged fields
    body = {"client_software_name": "raftka", "client_software_version": "0.1"}
    body_wire = b"\x07raftka" b"\x040.1" b"\x00"
    assert request_header_version(API_VERSIONS_V3, 3) == 2 and request_header_version(API_VERSIONS_V3, 2) == 1
    assert encode_request_header(header, 2) == header_wire
    assert enc(API_VERSIONS_V3, 3, body) == body_wire
    frame = header_wire + body_wire
    assert peek_request_api(frame) == (18, 3)
    decoded, offset = decode_request_header(frame, 2)
    assert decoded == header and offset == len(header_wire)
    assert dec(API_VERSIONS_V3, 3, memoryview(frame)[offset:]) == body
    assert dec(API_VERSIONS_V3, 2, b"") == {"client_software_name": "", "client_software_version": ""}
    # v1 has no tagged fields; a null client id is -1
    assert encode_request_header({**header, "client_id": None}, 1) == b"\x00\x12\x00\x03\x00\x00\x00\x07\xff\xff"
    assert decode_request_header(b"\x00\x12\x00\x03\x00\x00\x00\x07\xff\xffBODY", 1)[1] == 10


def test_response_headers_and_api_versions_answering_with_v0():
    assert encode_response_header({"correlation_id": 7}, 0) == b"\x00\x00\x00\x07"
    assert encode_response_header({"correlation_id": 7}, 1) == b"\x00\x00\x00\x07\x00"
    assert decode_response_header(b"\x00\x00\x00\x07\x00rest", 1) == ({"correlation_id": 7}, 5)
    assert response_header_version(API_VERSIONS_V3, 3) == 0
    assert response_header_version(TAGGED, 1) == 1 and response_header_version(TAGGED, 0) == 0
    with pytest.raises(CodecError):
        peek_request_api(b"\x00\x12")


# -- round trips ------------------------------------------------------------------------------------

PARTITION = Struct("Partition", (
    Field("index", "int32"),
    Field("replicas", Array("int32", max_count=50)),
    Field("ids", Array("uuid", max_count=5), default=[]),
    Field("names", Array("string", max_count=5, max_length=8), nullable=True),
    Field("leader", Struct("Leader", (Field("id", "int32"), Field("epoch", "int32"))), nullable=True),
    Field("epoch", "int32", versions="1+", default=-1),
))
EVERYTHING = Message(1002, "Everything", "0-2", (
    Field("b", "bool"), Field("i8", "int8"), Field("i16", "int16"), Field("u16", "uint16"), Field("i32", "int32"),
    Field("u32", "uint32"), Field("i64", "int64"), Field("f", "float64"), Field("id", "uuid"),
    Field("maybe_id", "uuid", nullable=True, default=None),
    Field("s", "string", nullable=True), Field("blob", "bytes", nullable=True), Field("recs", "records", nullable=True),
    Field("name", "string", default="", nullable_versions="1+", max_length=20),
    Field("topics", Array(Struct("Topic", (
        Field("name", "string"),
        Field("partitions", Array(PARTITION, max_count=6)),
    )), max_count=4), nullable=True),
    Field("since_1", "int64", versions="1+", default=-1),
    Field("note", "string", versions="2+", nullable=True, default=None, tag=0, tagged_versions="2+"),
    Field("extra", "int32", default=0, tag=5, tagged_versions="2+"),
), flexible_versions="2+")


def ints(type_name: str) -> st.SearchStrategy[int]:
    low, high = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1),
                 "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1)}[type_name]
    return st.integers(low, high)


uuids = st.binary(min_size=16, max_size=16).map(bytes.hex)
text = st.text(max_size=6)


def bodies(version: int) -> st.SearchStrategy[dict]:
    partition = {"index": ints("int32"), "replicas": st.lists(ints("int32"), max_size=5),
                 "ids": st.lists(uuids, max_size=2), "names": st.none() | st.lists(st.text(max_size=2), max_size=3),
                 "leader": st.none() | st.fixed_dictionaries({"id": ints("int32"), "epoch": ints("int32")})}
    if version >= 1:
        partition["epoch"] = ints("int32")
    fields = {
        "b": st.booleans(), **{n: ints(n) for n in ("int8", "int16", "uint16", "int32", "uint32", "int64")},
        "f": st.floats(allow_nan=False), "id": uuids.filter(lambda u: u != "0" * 32),
        "maybe_id": st.none() | uuids.filter(lambda u: u != "0" * 32), "s": st.none() | text,
        "blob": st.none() | st.binary(max_size=8), "recs": st.none() | st.binary(max_size=8),
        # at most 5 characters: 20 UTF-8 bytes, the declared max_length, even of 4-byte characters
        "name": (st.none() | st.text(max_size=5)) if version >= 1 else st.text(max_size=5),
        "topics": st.none() | st.lists(st.fixed_dictionaries({
            "name": text, "partitions": st.lists(st.fixed_dictionaries(partition), max_size=2)}), max_size=2),
        "extra": ints("int32"),
    }
    for short, long in (("i8", "int8"), ("i16", "int16"), ("u16", "uint16"), ("i32", "int32"), ("u32", "uint32"),
                        ("i64", "int64")):
        fields[short] = fields.pop(long)
    optional = {}
    if version >= 1:
        fields["since_1"] = ints("int64")
    if version >= 2:
        optional["note"] = st.none() | text
    return st.fixed_dictionaries(fields, optional=optional)  # type: ignore[arg-type]


def expected_after(body: dict, version: int) -> dict:
    """``body`` as the decoder gives it back: the fields of later versions get their defaults."""
    out = dict(body)
    if version < 1:
        out["since_1"] = -1
        for topic in out["topics"] or ():
            for partition in topic["partitions"]:
                partition["epoch"] = -1
    out.setdefault("note", None)
    return out


@pytest.mark.parametrize("version", [0, 1, 2])
@settings(derandomize=True, max_examples=200, deadline=None)
@given(data=st.data())
def test_every_body_decodes_to_itself_after_encoding(version, data):
    body = data.draw(bodies(version))
    wire = enc(EVERYTHING, version, body)
    assert dec(EVERYTHING, version, wire) == expected_after(body, version)
    assert enc(EVERYTHING, version, dec(EVERYTHING, version, wire)) == wire


RICH = {
    "b": True, "i8": -3, "i16": 300, "u16": 40_000, "i32": -70_000, "u32": 3_000_000_000, "i64": -2**40, "f": 0.5,
    "id": UUID_HEX, "maybe_id": None, "s": "s\u00e9", "blob": b"\x00\x01", "recs": None, "name": "n",
    "topics": [{"name": "t", "partitions": [
        {"index": 0, "replicas": [1, 2], "ids": [UUID_HEX], "names": ["a", "b"], "leader": {"id": 1, "epoch": 2},
         "epoch": 4},
        {"index": 1, "replicas": [], "ids": [], "names": None, "leader": None, "epoch": 5}]}],
    "since_1": 9, "note": "hi", "extra": 3,
}


def test_the_flexible_version_is_smaller_and_a_later_version_writes_more():
    sizes = [len(enc(EVERYTHING, v, RICH)) for v in (0, 1, 2)]
    assert sizes[1] == sizes[0] + 8 + 2 * 4  # since_1 and two partitions' epoch
    assert sizes[2] < sizes[1]


def test_the_codec_is_compiled_once_per_message_and_version():
    assert codec._compiled(EVERYTHING, 2) is not None
    first, again = codec._compiled(EVERYTHING, 2), codec._compiled(EVERYTHING, 2)
    assert first[0] is again[0] and first[1] is again[1]
    assert codec._compiled(EVERYTHING, 1)[1] is not first[1]
    with pytest.raises(ValueError, match="not in"):
        encoder(EVERYTHING, 3)


# -- hostile input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 2])
def test_every_truncation_of_a_valid_encoding_is_a_codec_error(version):
    wire = enc(EVERYTHING, version, RICH)
    started = time.perf_counter()
    for cut in range(len(wire)):
        error = refused(EVERYTHING, version, wire[:cut])
        assert error.field or cut == 0, (cut, error.message)
    assert time.perf_counter() - started < 1.0


def test_a_huge_count_with_few_bytes_left_fails_before_allocating():
    message = one(Array("int64", max_count=2**31 - 1))
    started = time.perf_counter()
    error = refused(message, 0, b"\x7f\xff\xff\xff" + b"\x00" * 10)
    assert "2147483647 entries declared, 10 bytes left" in error.message and error.field == "x"
    error = refused(message, FLEX, b"\xff\xff\xff\xff\x07" + b"\x00" * 10)  # compact count 2**31 - 1
    assert "entries declared" in error.message
    entries = one(Array(Struct("E", (Field("a", "string"),)), max_count=2**31 - 1))
    assert "entries declared" in refused(entries, 0, b"\x7f\xff\xff\xff\x00\x01a").message
    assert time.perf_counter() - started < 0.05


def test_declared_limits_hold_when_decoding():
    assert "at most 3" in refused(one(Array("int32", max_count=3)), 0, b"\x00\x00\x00\x04" + b"\x00" * 16).message
    assert "at most 2" in refused(one("string", max_length=2), 0, b"\x00\x03abc").message
    assert "at most 32767" in refused(one("string"), FLEX, encode_uvarint(40_000) + b"x" * 39_999 + b"\x00").message
    assert "at most 4" in refused(one("bytes", max_length=4), FLEX, b"\x06" + b"x" * 5 + b"\x00").message
    error = refused(EVERYTHING, 0, enc(EVERYTHING, 0, {**RICH, "topics": [{"name": "t", "partitions": [
        {**RICH["topics"][0]["partitions"][0], "names": ["a" * 8]}]}]}).replace(b"\x00\x08" + b"a" * 8,
                                                                                  b"\x00\x09" + b"a" * 9))
    assert error.field == "topics[0].partitions[0].names[0]" and "at most 8" in error.message


def test_huge_lengths_and_negative_lengths_other_than_minus_one():
    assert "truncated" in refused(one("string"), 0, b"\x7f\xff" + b"abc").message
    assert "truncated" in refused(one("bytes"), 0, b"\x7f\xff\xff\xff" + b"abc").message
    assert "truncated" in refused(one("records"), FLEX, b"\xff\xff\xff\xff\x07abc").message
    for type_, wire in (("string", b"\xff\xfe"), ("bytes", b"\xff\xff\xff\xfe"), (Array("int32"), b"\x80\x00\x00\x00")):
        assert "negative length" in refused(one(type_, nullable=True), 0, wire).message
    for type_, wire in (("string", b"\xff\xff"), ("bytes", b"\xff\xff\xff\xff"), (Array("int32"), b"\xff\xff\xff\xff")):
        assert "null is not allowed" in refused(one(type_), 0, wire).message
    assert "null is not allowed" in refused(one("string"), FLEX, b"\x00\x00").message
    assert "varint longer" in refused(one("string"), FLEX, b"\x80\x80\x80\x80\x80\x01").message


def test_invalid_utf8_is_named_by_its_field_path():
    partition = {**RICH["topics"][0]["partitions"][0], "names": ["\u00e9"]}
    body = {**RICH, "topics": [{"name": "t", "partitions": [partition]}]}
    wire = enc(EVERYTHING, 2, body)
    bad = wire.replace(b"\x03\xc3\xa9", b"\x03\xc3\x28")
    error = refused(EVERYTHING, 2, bad)
    assert error.field == "topics[0].partitions[0].names[0]" and "invalid UTF-8" in error.message
    assert "invalid UTF-8" in refused(one("string"), 0, b"\x00\x02\xed\xa0").message  # cut sequence
    assert "invalid UTF-8" in refused(one("string"), 0, b"\x00\x03\xed\xa0\x80").message  # a surrogate


def test_trailing_bytes_are_refused_unless_allowed():
    wire = enc(TAGGED, 1, {"id": 1})
    assert "1 bytes after the body" in refused(TAGGED, 1, wire + b"\x00").message
    assert decoder(TAGGED, 1, allow_trailing=True)(wire + b"junk") == {"id": 1, "note": None, "weight": 7}


@settings(derandomize=True, max_examples=300, deadline=None)
@given(data=st.binary(max_size=120))
def test_random_bytes_decode_or_raise_only_codec_error(data):
    for version in (0, 2):
        try:
            dec(EVERYTHING, version, data)
        except CodecError:
            pass


@settings(derandomize=True, max_examples=300, deadline=None)
@given(offset=st.integers(0, 10_000), value=st.integers(0, 255), version=st.sampled_from([0, 1, 2]))
def test_a_valid_encoding_with_one_byte_changed_decodes_or_raises_only_codec_error(offset, value, version):
    wire = bytearray(enc(EVERYTHING, version, RICH))
    wire[offset % len(wire)] = value
    try:
        dec(EVERYTHING, version, bytes(wire))
    except CodecError:
        pass


# -- encoding faults and what has no encoding ---------------------------------------------------------

def test_an_unencodable_body_raises_codec_error_naming_the_field():
    encode = encoder(PRODUCE, 3)
    body = {"acks": 1, "timeout_ms": 5, "topic_data": [{"name": "t", "partition_data": [{"index": "0"}]}]}
    with pytest.raises(CodecError) as caught:
        encode(body)
    assert caught.value.field == "topic_data[0].partition_data[0].index"
    with pytest.raises(CodecError) as caught:
        encode({"acks": 1, "timeout_ms": 2**31, "topic_data": []})
    assert caught.value.field == "timeout_ms"  # the field at fault within a run packed together
    with pytest.raises(CodecError) as caught:
        encode({"timeout_ms": 2**31, "topic_data": []})  # acks is absent: its default is written
    assert caught.value.field == "timeout_ms"
    with pytest.raises(CodecError) as caught:
        enc(one("int32"), 0, {})  # a field without a default
    assert caught.value.field == "x" and "missing" in caught.value.message
    with pytest.raises(CodecError) as caught:
        enc(EVERYTHING, 0, {**RICH, "id": "not a uuid"})
    assert caught.value.field == "id"
    with pytest.raises(CodecError) as caught:
        enc(one("string", max_length=2), 0, {"x": "abc"})
    assert "at most 2" in caught.value.message
    with pytest.raises(CodecError) as caught:
        enc(one(Array(Struct("E", (Field("a", "int8"),)))), 0, {"x": [{"a": 1}, 7]})
    assert caught.value.field == "x[1]"


def test_what_kafka_cannot_encode_is_refused_when_compiled():
    with pytest.raises(ValueError, match="nullable int32"):
        decoder(one("int32", nullable=True), 0)
    with pytest.raises(ValueError, match="not a flexible version"):
        encoder(Message(1, "T", "0", (Field("t", "int32", default=0, tag=1, tagged_versions="0+"),)), 0)
    with pytest.raises(ValueError, match="tag"):
        Field("t", "int32", tag=1)  # a tag without tagged_versions


def test_every_declared_message_compiles_at_every_version_it_declares():
    compiled = 0
    for request, response in KAFKA_API.values():
        for message in (request, response):
            for version in message.versions():
                encoder(message, version), decoder(message, version)
                compiled += 1
    assert compiled >= 2 * len(KAFKA_API)


def test_nullable_versions_and_uint32_hold_when_encoding():
    declared = Message(1000, "T", "0-1", (Field("s", "string", nullable_versions="1+"), Field("u", "uint32", default=0)),
                       flexible_versions="1+")
    assert dec(declared, 1, enc(declared, 1, {"s": None, "u": 2**32 - 1})) == {"s": None, "u": 2**32 - 1}
    with pytest.raises(CodecError) as caught:
        enc(declared, 0, {"s": None})
    assert caught.value.field == "s"
    with pytest.raises(CodecError) as caught:
        enc(declared, 1, {"s": "x", "u": 2**32})
    assert caught.value.field == "u"
    assert Field("a", "int32", default=ABSENT, tag=0, tagged_versions="1+").tagged_in(1)


# -- speed (printed, not asserted) -----------------------------------------------------------------------

def test_print_the_cost_of_a_one_partition_produce_body(capsys):
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 30_000,
            "topic_data": [{"name": "topic", "partition_data": [{"index": 0, "records": b"r" * 200}]}]}
    encode, decode = encoder(PRODUCE, 3), decoder(PRODUCE, 3)
    wire = encode(body)
    assert decode(wire) == body and len(wire) == 2 + 2 + 4 + 4 + 7 + 4 + 4 + 4 + 200
    rounds = 5_000
    both = min(timeit.repeat(lambda: decode(encode(body)), number=rounds, repeat=3)) / rounds
    decode_only = min(timeit.repeat(lambda: decode(wire), number=rounds, repeat=3)) / rounds
    with capsys.disabled():
        print(f"\nProduce v3, one topic, one partition: encode+decode {both * 1e6:.1f} us, "
              f"decode {decode_only * 1e6:.1f} us")


def test_a_uuid_null_is_the_zero_uuid_only_where_nullable():
    nullable, plain = one("uuid", nullable=True), one("uuid")
    assert enc(nullable, 0, {"x": None}) == bytes(16) and dec(nullable, 0, bytes(16)) == {"x": None}
    assert dec(plain, 0, bytes(16)) == {"x": "0" * 32}
    with pytest.raises(CodecError) as caught:
        enc(plain, 0, {"x": None})
    assert caught.value.field == "x"
    with pytest.raises(CodecError):
        enc(plain, 0, {"x": "00 11 22 33 44 55 66 77 88 99 aa"})  # fromhex would skip the spaces
