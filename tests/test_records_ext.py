"""The C record loops (common/_records_ext.c) against their pure-Python references.

The extension answers "OK, here is the result" or "not OK"; on "not OK" records.py and the
fetcher run the Python loops, which raise the errors. So for any bytes, valid or not: the C walk
says OK exactly when ``_walk_records`` does not raise, the C decode returns exactly what
``_decode_records`` returns (None where it raises), and every public entry point (validate_batches,
decode_batch, the fetcher's decode_records) gives the same result or the same error with the
extension as without it.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from contextlib import contextmanager

import crc32c
import pytest
from hypothesis import given, settings, strategies as st

from raftka.client.aio import fetcher
from raftka.common import records as rec
from raftka.common.errors import RaftkaError
from helpers import smoke_and_soak

EXT = rec.records_ext
FORCED_OFF = os.environ.get("RAFTKA_NO_EXTENSIONS", "") not in ("", "0")
# Without the extension only the build test below fails (and says why); these have nothing to compare.
needs_ext = pytest.mark.skipif(EXT is None, reason="RAFTKA_NO_EXTENSIONS forces the pure-Python record "
                               "loops" if FORCED_OFF else "the extension is not built (see the build test)")

INT64_MAX = (1 << 63) - 1
# Examples per property: the default suite runs a third, `-m soak` all (helpers.smoke_and_soak).
EXAMPLES = 300
SMOKE_EXAMPLES = 100


@contextmanager
def pure_python():
    """records.py and the fetcher without the extension, as RAFTKA_NO_EXTENSIONS=1 runs them."""
    saved = rec.records_ext
    rec.records_ext = None
    try:
        yield
    finally:
        rec.records_ext = saved


def outcome(call):
    """What a call gives: ("ok", repr of the result: class names, bytes vs str, None all count)
    or ("error", its class, its message)."""
    try:
        return "ok", repr(call())
    except RaftkaError as exc:
        return "error", type(exc), str(exc)


def same_with_and_without_extension(call):
    with_ext = outcome(call)
    with pure_python():
        without = outcome(call)
    assert with_ext == without
    return with_ext


# What the Python loops raise on bad bytes (their callers turn it into CorruptRecordError or
# InvalidRecordError, both RaftkaErrors).
PYTHON_LOOP_ERRORS = (IndexError, ValueError, RaftkaError)


def py_walk(data: bytes, count: int, require_keys: bool = False) -> bool:
    try:
        rec._walk_records(data, count, require_keys)
    except PYTHON_LOOP_ERRORS:
        return False
    return True


def py_decode(data: bytes, base_offset: int, base_ts: int):
    try:
        return rec._decode_records(data, base_offset, base_ts)
    except PYTHON_LOOP_ERRORS:
        return None


def check_loops(data: bytes, count: int, base_offset: int = 0, base_ts: int = 0) -> None:
    """The C walk and decode agree with the Python ones on ``data``, from any buffer type."""
    walked = py_walk(data, count)
    walked_keyed = py_walk(data, count, True)  # a compacted topic's walk
    decoded = py_decode(data, base_offset, base_ts)
    for buf in (data, bytearray(data), memoryview(data)):
        assert EXT.walk_records(buf, count) is walked
        assert EXT.walk_records(buf, count, True) is walked_keyed
        assert repr(EXT.decode_records(rec.Record, buf, base_offset, base_ts)) == repr(decoded)


def seal(section: bytes, count: int, *, base_offset: int = 0, base_ts: int = 1000,
         max_ts: int = 2000, attributes: int = 0, epoch: int = 5) -> bytes:
    """A batch around a records section (uncompressed), from the documented layout, CRC right."""
    after_crc = struct.pack(">hiqqqhii", attributes, max(count - 1, 0), base_ts, max_ts, -1, -1, -1,
                            count) + section
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), epoch, rec.MAGIC,
                       crc32c.crc32c(after_crc)) + after_crc


def varint_bytes(z: int, overlong: int = 0) -> bytes:
    """The base-128 bytes of an already zigzag-encoded ``z``, with ``overlong`` extra zero groups."""
    groups = []
    while True:
        groups.append(z & 0x7F)
        z >>= 7
        if not z:
            break
    groups += [0] * overlong
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def zig(n: int) -> int:
    return 2 * n if n >= 0 else -2 * n - 1


def raw_record(*, attributes: bytes = b"\x00", ts: bytes = b"\x00", offset: bytes = b"\x00",
               key: bytes = b"\x01", value: bytes = b"\x02v", headers: bytes = b"\x00",
               length: bytes | None = None) -> bytes:
    """One record from its encoded fields (key and value with their length varints); the length
    varint is the body's unless given."""
    body = attributes + ts + offset + key + value + headers
    return (varint_bytes(zig(len(body))) if length is None else length) + body


# --- valid batches: every kind the BatchBuilder writes ---------------------------------------------------
optional_bytes = st.none() | st.binary(max_size=40) | st.binary(min_size=300, max_size=3000)
header_lists = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=4)
record_lists = st.lists(st.tuples(st.integers(0, 2**62), optional_bytes, optional_bytes, header_lists),
                        min_size=1, max_size=200)
codecs = st.sampled_from(sorted(rec.SUPPORTED_COMPRESSION))


def build(records, **kwargs) -> bytes:
    builder = rec.BatchBuilder(batch_size=1 << 22, **kwargs)
    for ts, key, value, hdrs in records:
        assert builder.append(ts, key, value, hdrs)
    return builder.build()


@needs_ext
@smoke_and_soak(SMOKE_EXAMPLES, EXAMPLES,
                records=record_lists, codec=codecs, base_offset=st.integers(0, 2**62),
                timestamp_type=st.sampled_from([rec.TIMESTAMP_TYPE_CREATE_TIME, rec.TIMESTAMP_TYPE_LOG_APPEND_TIME]),
                window=st.tuples(st.integers(-3, 210), st.integers(-1, 210)))
def test_every_valid_batch_decodes_the_same_in_c_and_python(records, codec, base_offset, timestamp_type,
                                                            window):
    batch = build(records, compression_type=codec, base_offset=base_offset,
                  timestamp_type=timestamp_type)
    header, data = rec.records_section(batch)
    assert EXT.walk_records(data, header.record_count)
    check_loops(data, header.record_count, header.base_offset, header.base_timestamp)
    assert same_with_and_without_extension(lambda: rec.validate_batches(batch))[0] == "ok"
    assert same_with_and_without_extension(lambda: rec.decode_batch(batch))[0] == "ok"
    fetch_offset, high_watermark = (base_offset + window[0], -1 if window[1] < 0 else base_offset + window[1])
    for check_crcs in (True, False):
        assert same_with_and_without_extension(lambda: fetcher.decode_records(
            batch, fetch_offset, high_watermark, check_crcs, "topic", 7))[0] == "ok"


# --- broken and unusual bytes ------------------------------------------------------------------------------
# Raw zigzag values (not the numbers they encode): small ones, ones past 32 bits, ones past 64.
raw_z = st.one_of(st.integers(0, 300), st.integers(0, 2**36), st.integers(2**63, 2**70 - 1))
overlong = st.sampled_from([0, 0, 0, 0, 1, 4, 9])


@st.composite
def varints(draw, value=None):
    z = zig(value) if value is not None and draw(st.integers(0, 4)) else draw(raw_z)
    return varint_bytes(z, draw(overlong))


@st.composite
def length_prefixed(draw, payload):
    """A key, value or header value: null, bytes with their length, or a length that lies."""
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return b"\x01"
    body = draw(payload)
    return (draw(varints()) if choice == 5 else varint_bytes(zig(len(body)), draw(overlong))) + body


header_names = st.text(max_size=6).map(lambda s: s.encode()) | st.binary(max_size=6)


@st.composite
def headers_field(draw):
    pairs = draw(st.lists(st.tuples(header_names, st.binary(max_size=8)), max_size=3))
    if not pairs and draw(st.booleans()):
        return b"\x00"
    out = draw(varints(len(pairs)))
    for name, value in pairs:
        out += varint_bytes(zig(len(name))) + name if draw(st.integers(0, 6)) else draw(varints())
        out += draw(length_prefixed(st.just(value)))
    return out


@st.composite
def record_sections(draw):
    """A records section of records that are mostly right, each field sometimes wrong, then
    sometimes cut, grown or overwritten; and how many records it claims."""
    n = draw(st.integers(0, 6))
    section = b""
    for index in range(n):
        body = (bytes([draw(st.sampled_from([0, 0, 1, 0xFF]))]) + draw(varints(draw(st.integers(-5, 5))))
                + draw(varints(index)) + draw(length_prefixed(st.binary(max_size=12)))
                + draw(length_prefixed(st.binary(max_size=30))) + draw(headers_field()))
        section += draw(varints(len(body))) + body
    mutation = draw(st.integers(0, 5))
    if section and mutation == 1:
        section = section[:draw(st.integers(0, len(section) - 1))]
    elif section and mutation == 2:
        at = draw(st.integers(0, len(section) - 1))
        section = section[:at] + bytes([draw(st.integers(0, 255))]) + section[at + 1:]
    elif mutation == 3:
        at = draw(st.integers(0, len(section)))
        section = section[:at] + draw(st.binary(min_size=1, max_size=12)) + section[at:]
    elif mutation == 4:
        section = draw(st.binary(max_size=64))
    count = n if draw(st.integers(0, 3)) else draw(st.integers(0, 8))
    return section, count


@needs_ext
@smoke_and_soak(SMOKE_EXAMPLES, EXAMPLES,
                case=record_sections(), base_offset=st.sampled_from([0, 1000, 2**40, INT64_MAX - 3]),
                base_ts=st.sampled_from([0, 1_700_000_000_000, INT64_MAX, -(2**63)]))
def test_c_is_ok_exactly_when_python_does_not_raise_and_decodes_the_same(case, base_offset, base_ts):
    section, count = case
    check_loops(section, count, base_offset, base_ts)


@needs_ext
@smoke_and_soak(SMOKE_EXAMPLES, EXAMPLES,
                case=record_sections(), attributes=st.sampled_from([0, rec.ATTR_TIMESTAMP_TYPE, rec.ATTR_CONTROL]),
                base_offset=st.sampled_from([0, 2**40]), window=st.tuples(st.integers(-2, 8), st.integers(-1, 8)),
                gap=st.sampled_from([0, 1]))
def test_public_entry_points_give_the_same_result_or_the_same_error(case, attributes, base_offset, window,
                                                                    gap):
    section, count = case
    good = build([(1000, b"k", b"v", [("h", None)])], base_offset=base_offset + count + gap)
    # A broken batch before a good one: the leader's walk, decode_batch and the consumer all see it.
    buf = seal(section, count, base_offset=base_offset, attributes=attributes) + good
    same_with_and_without_extension(lambda: rec.validate_batches(buf))
    same_with_and_without_extension(lambda: rec.decode_batch(buf))
    same_with_and_without_extension(lambda: list(rec.iter_records(buf)))
    fetch_offset, high_watermark = base_offset + window[0], (-1 if window[1] < 0 else base_offset + window[1])
    same_with_and_without_extension(lambda: fetcher.decode_records(buf, fetch_offset, high_watermark, True,
                                                                   "topic", 3))


# --- the edges of the varint rules, one by one ---------------------------------------------------------------
@needs_ext
def test_a_five_byte_varint_past_32_bits_decodes_as_python_reads_it():
    # z = 2**35 - 1: Python's decode_varint keeps every bit (no 32-bit wrap): -(2**34).
    section = raw_record(offset=b"\xff\xff\xff\xff\x7f")
    check_loops(section, 1, 10**6)
    assert EXT.decode_records(rec.Record, section, 10**6, 0)[0].offset == 10**6 - 2**34


@needs_ext
def test_a_ten_byte_varlong_past_64_bits_and_sums_past_int64_decode_as_python_ints():
    wide = raw_record(ts=b"\xff" * 9 + b"\x7f")                      # z = 2**70 - 1
    check_loops(wide, 1, 0, 5)
    assert EXT.decode_records(rec.Record, wide, 0, 5)[0].timestamp == 5 - 2**69
    even = raw_record(ts=b"\xfe" + b"\xff" * 8 + b"\x7f")            # z = 2**70 - 2
    assert EXT.decode_records(rec.Record, even, 0, 5)[0].timestamp == 5 + 2**69 - 1
    past = raw_record(offset=varint_bytes(zig(7)), ts=varint_bytes(zig(9)))
    check_loops(past, 1, INT64_MAX, INT64_MAX)
    assert EXT.decode_records(rec.Record, past, INT64_MAX, INT64_MAX)[0][:2] == (INT64_MAX + 7, INT64_MAX + 9)


@needs_ext
@pytest.mark.parametrize("section, count", [
    (raw_record(offset=b"\x80\x80\x80\x80\x80\x00"), 1),              # a 6-byte varint
    (raw_record(ts=b"\x80" * 10 + b"\x00"), 1),                       # an 11-byte varlong
    (raw_record(key=b"\x03"), 1),                                     # key length -2
    (raw_record(value=varint_bytes(zig(64)) + b"v" * 63), 1),         # value over the headers count
    (raw_record(length=b"\x0a"), 1),                                  # length 5: under the minimum
    (raw_record(length=b"\xfe\x01"), 1),                              # length past the data
    (raw_record(headers=b"\x02\x02\xff\x01"), 1),                     # a header key not UTF-8
    (raw_record(headers=b"\x02\x06\xed\xa0\x80\x01"), 1),             # a UTF-16 surrogate in UTF-8
    (raw_record(headers=varint_bytes(zig(4097)) + b"\x00\x00" * 4097), 1),  # too many headers
    (raw_record(headers=b"\x02\x02h\x03"), 1),                        # header value length -2
    (raw_record(headers=b"\x02\x02h\x01\x00"), 1),                    # a byte after the headers
    (raw_record(offset=b"\x02"), 1),                                  # offset delta 1 at index 0
    (raw_record() + raw_record(offset=b"\x02"), 1),                   # more records than declared
    (raw_record(), 2),                                                # fewer
    (raw_record()[:-1], 1),                                           # cut inside the record
    (b"\xff", 1),                                                     # cut inside the length
    (b"", 0),                                                         # empty and declared so
    (raw_record(headers=b"\x04\x02h\x01\x04\xc3\xa9\x02v"), 1),       # good headers: null, "é" -> b"v"
    (raw_record(offset=b"\x80\x00", headers=b"\x80\x00"), 1),         # overlong zeros are zeros
])
def test_edge_cases_agree(section, count):
    check_loops(section, count, 100, 1000)


@needs_ext
def test_walk_and_decode_refuse_exactly_what_python_refuses_in_a_real_batch():
    batch = build([(1, b"key", b"value", [("h", b"v")]), (2, None, b"second", ())])
    header, data = rec.records_section(batch)
    for cut in range(len(data)):
        check_loops(data[:cut], 2)
    for at in range(len(data)):
        for byte in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            check_loops(data[:at] + bytes([byte]) + data[at + 1:], 2)


@needs_ext
def test_consumer_records_filter_as_the_fetcher_does():
    # Offsets 5, 6, 7 with the window [6, 7): only offset 6, sizes and leader epoch as Python counts them.
    batch = build([(1, b"k", b"v", [("hé", b"xy"), ("n", None)]), (2, None, b"", ()), (3, b"", None, ())],
                  base_offset=5, partition_leader_epoch=9)
    found, next_offset = fetcher.decode_records(batch, 6, 7, True, "t", 1)
    assert [(r.offset, r.serialized_key_size, r.serialized_value_size, r.serialized_header_size, r.leader_epoch)
            for r in found] == [(6, -1, 0, 0, 9)] and next_offset == 7
    found, _ = fetcher.decode_records(batch, 0, -1, True, "t", 1)
    assert found[0].serialized_header_size == len("hé") + 2 + len("n")
    same_with_and_without_extension(lambda: fetcher.decode_records(batch, 6, 7, True, "t", 1))


# --- the build and the switch --------------------------------------------------------------------------------
def test_the_extension_is_built_and_every_hot_path_uses_it(monkeypatch):
    if FORCED_OFF:
        pytest.skip("RAFTKA_NO_EXTENSIONS forces the pure-Python record loops")
    assert EXT is not None, ("raftka.common._records_ext is not built: `pip install -e .` needs a C "
                             "compiler and the Python headers (python3-dev)")
    assert EXT.__name__ == "raftka.common._records_ext"
    assert (EXT.RECORD_BYTES_MIN, EXT.HEADERS_PER_RECORD_MAX) == (rec.RECORD_BYTES_MIN, rec.HEADERS_PER_RECORD_MAX)
    batch = build([(1, b"k", b"v", [("h", b"x")]), (2, None, b"w", ())], compression_type=rec.COMPRESSION_LZ4)

    def python_loop(*_args):
        raise AssertionError("the pure-Python loop ran although the extension is loaded")
    monkeypatch.setattr(rec, "_walk_records", python_loop)
    monkeypatch.setattr(rec, "_decode_records", python_loop)
    assert rec.validate_batches(batch)[0].record_count == 2
    assert [r.value for r in rec.decode_batch(batch)[1]] == [b"v", b"w"]
    monkeypatch.setattr(rec, "decode_batch", python_loop)
    assert [r.value for r in fetcher.decode_records(batch, 0, -1, True, "t", 0)[0]] == [b"v", b"w"]


# --- the producer's key hash -----------------------------------------------------------------------------------
@pytest.mark.skipif(EXT is None, reason="the extension is not built")
@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=70))
def test_c_murmur2_is_the_python_murmur2(key):
    from raftka.client.partitioner import murmur2
    assert EXT.murmur2(key) == murmur2(key)
    assert EXT.murmur2(bytearray(key)) == EXT.murmur2(memoryview(key)) == murmur2(key)


@pytest.mark.skipif(EXT is None, reason="the extension is not built")
def test_c_murmur2_gives_kafkas_vectors_and_the_partitioner_uses_it(monkeypatch):
    from raftka.client import partitioner
    from tests.test_client_unit import KAFKA_MURMUR2_VECTORS, MORE_MURMUR2_VECTORS
    for key, expected in {**KAFKA_MURMUR2_VECTORS, **MORE_MURMUR2_VECTORS, b"": 275646681}.items():
        assert EXT.murmur2(key) == expected, key
    with pytest.raises(TypeError):
        EXT.murmur2("text")  # a str is not serialized bytes, as in the Python hash
    monkeypatch.setattr(partitioner, "murmur2", lambda _key: pytest.fail("the Python hash ran"))
    assert partitioner.partition_for_key(b"foobar", 50) == (-790332482 & 0x7FFFFFFF) % 50


def test_raftka_no_extensions_forces_the_pure_python_path():
    env = dict(os.environ, RAFTKA_NO_EXTENSIONS="1")
    code = ("from raftka.common import records as rec; b = rec.BatchBuilder(); b.append(1, None, b'v'); "
            "print(rec.records_ext, rec.decode_batch(b.build())[1][0].value)")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "b'v'"]
