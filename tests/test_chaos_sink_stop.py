"""The chaos harness's handling of the Spark sink process at stop (chaos/spark_sink.py), with a
stand-in process that speaks the sink's JSON lines: no JVM needed."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from raftka.chaos import spark_sink
from raftka.chaos.spark_sink import SinkError, SparkSink

# Prints a batch, and on SIGTERM writes the rows file, says "stopped", then lingers (a JVM slow
# to shut down) or exits, as its first argument says.
STAND_IN = textwrap.dedent('''
    import json, signal, sys, time
    rows_path, linger_s, write_rows = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print(json.dumps({"event": "batch", "batch": 0, "rows": 2, "end": {"0": 2}}), flush=True)
    while not stop:
        time.sleep(0.01)
    if write_rows:
        with open(rows_path, "w") as f:
            json.dump({"topic": "t", "rows": 2, "records": {"0": [[0, "a"], [1, "b"]]}}, f)
        print(json.dumps({"event": "stopped", "rows": 2}), flush=True)
    time.sleep(linger_s)
''')


def start_stand_in(tmp_path, linger_s: float, write_rows: bool = True) -> SparkSink:
    sink = SparkSink(tmp_path, "127.0.0.1:1", "t", max_seconds=60)
    tmp_path.mkdir(parents=True, exist_ok=True)
    sink.process = subprocess.Popen([sys.executable, "-c", STAND_IN, str(sink.rows_path), str(linger_s),
                                     "1" if write_rows else "0"], stdout=subprocess.PIPE, text=True,
                                    start_new_session=True)
    sink._reader = threading.Thread(target=sink._read, daemon=True)
    sink._reader.start()
    assert sink.wait_first_rows(10)
    return sink


@pytest.fixture(autouse=True)
def short_teardown(monkeypatch):
    monkeypatch.setattr(spark_sink, "TERM_WAIT_S", 0.5)  # close(): SIGTERM, then SIGKILL soon


def test_rows_written_count_even_when_the_process_is_slow_to_exit(tmp_path, monkeypatch):
    monkeypatch.setattr(spark_sink, "EXIT_AFTER_ROWS_S", 0.5)
    sink = start_stand_in(tmp_path, linger_s=30)
    try:
        began = time.monotonic()
        body = sink.stop(timeout_s=20)
        assert time.monotonic() - began < 10  # not the 30 s the process lingers
        assert body["records"] == {0: [[0, "a"], [1, "b"]]}
    finally:
        sink.close()
    assert sink.process.poll() is not None  # close ended it


def test_a_sink_that_never_writes_its_rows_is_reported_with_its_last_event(tmp_path):
    sink = start_stand_in(tmp_path, linger_s=30, write_rows=False)
    try:
        with pytest.raises(SinkError, match=r"did not stop within 1 s of SIGTERM \(its last event: batch"):
            sink.stop(timeout_s=1)
    finally:
        sink.close()


def test_a_clean_exit_returns_the_rows(tmp_path):
    sink = start_stand_in(tmp_path, linger_s=0)
    try:
        assert sink.stop(timeout_s=20)["rows"] == 2
        assert sink.process.returncode == 0
    finally:
        sink.close()
