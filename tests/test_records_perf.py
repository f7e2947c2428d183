"""Speed of the RecordBatch v2 codec in pure Python on one core (run with ``pytest -m perf -s``).

Issue target: 100-byte values, no compression, encode >= 1,000,000 records/s and decode
>= 500,000 records/s. Prints the figures; takes the best of a few rounds so a busy neighbour
on the shared box does not fail it.
"""
from __future__ import annotations

import time

import pytest

from raftka.common import records as rec

pytestmark = pytest.mark.perf

RECORDS = 200_000
ROUNDS = 3
VALUE = b"x" * 100


@pytest.fixture(autouse=True)
def _only_when_asked(request):
    # Perf checks run only when selected with -m perf (they are excluded from the default suite).
    if "perf" not in (request.config.getoption("-m") or ""):
        pytest.skip("performance check: run with -m perf")


def encode(batch_size: int, codec: int) -> tuple[list[bytes], float]:
    batches = []
    start = time.perf_counter()
    builder = rec.BatchBuilder(batch_size=batch_size, compression_type=codec)
    ts = 1_700_000_000_000
    for i in range(RECORDS):
        if not builder.append(ts + (i >> 8), None, VALUE):
            batches.append(builder.build())
            builder = rec.BatchBuilder(batch_size=batch_size, compression_type=codec)
            builder.append(ts + (i >> 8), None, VALUE)
    batches.append(builder.build())
    return batches, RECORDS / (time.perf_counter() - start)


def decode(batches: list[bytes]) -> float:
    start = time.perf_counter()
    count = 0
    for batch in batches:
        count += len(rec.decode_batch(batch)[1])
    assert count == RECORDS
    return RECORDS / (time.perf_counter() - start)


@pytest.mark.parametrize("batch_size", [16384, 1 << 20])
@pytest.mark.parametrize("codec", [rec.COMPRESSION_NONE, rec.COMPRESSION_LZ4])
def test_codec_speed_meets_the_issue_target(batch_size, codec):
    encode_rates, decode_rates = [], []
    for _ in range(ROUNDS):
        batches, rate = encode(batch_size, codec)
        encode_rates.append(rate)
        decode_rates.append(decode(batches))
    print(f"\nbatch_size {batch_size} codec {codec}: encode {max(encode_rates):,.0f} records/s, "
          f"decode {max(decode_rates):,.0f} records/s (best of {ROUNDS})")
    if codec == rec.COMPRESSION_NONE:
        assert max(encode_rates) >= 1_000_000
        assert max(decode_rates) >= 500_000


def test_validate_batch_speed():
    batch = encode(1 << 20, rec.COMPRESSION_NONE)[0][0]
    rounds = 200
    start = time.perf_counter()
    for _ in range(rounds):
        rec.validate_batch(batch)
    elapsed = time.perf_counter() - start
    print(f"\nvalidate_batch: {len(batch) * rounds / elapsed / 1e9:.2f} GB/s on "
          f"{len(batch)}-byte batches")
    assert len(batch) * rounds / elapsed > 200e6
