"""A blocking Producer or Consumer the application never closed closes quietly at interpreter
exit, as kafka-python's do. Each test runs a script in its own interpreter (.venv's python)
against a real cluster (1 controller, 1 broker): the script uses a client, does not close it,
and exits; the process must exit 0 with nothing on stderr (before the atexit hook, a flushed
producer printed "Task was destroyed but it is pending!")."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest

from raftka.client import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
SCRIPT_TIMEOUT_S = 90
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def bootstrap(module_cluster_factory):
    bootstrap = module_cluster_factory("exit", controllers=1, brokers=1).bootstrap_servers
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic("exit-topic", 2, 1)])
    return bootstrap


def run_script(source: str, bootstrap: str) -> subprocess.CompletedProcess:
    python = str(PYTHON) if PYTHON.exists() else sys.executable
    return subprocess.run([python, "-c", textwrap.dedent(source), bootstrap], cwd=ROOT,
                          capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S)


def test_a_flushed_producer_never_closed_exits_quietly(bootstrap):
    done = run_script("""
        import sys
        from raftka.client import Producer
        producer = Producer(bootstrap_servers=sys.argv[1], acks="all")
        for i in range(100):
            producer.send("exit-topic", f"value-{i}".encode())
        assert producer.flush(timeout=30) == []
        print("sent")
        """, bootstrap)
    assert (done.returncode, done.stderr) == (0, ""), done.stdout[-2000:]
    assert "sent" in done.stdout


def test_a_consumer_that_polled_and_was_never_closed_exits_quietly(bootstrap):
    done = run_script("""
        import sys
        from raftka.client import Consumer, Producer, TopicPartition
        with Producer(bootstrap_servers=sys.argv[1]) as producer:
            producer.send("exit-topic", b"one", partition=0)
        consumer = Consumer(bootstrap_servers=sys.argv[1], auto_offset_reset="earliest")
        consumer.assign([TopicPartition("exit-topic", 0)])
        records = []
        for _ in range(50):
            records += [r for rs in consumer.poll(timeout_ms=200).values() for r in rs]
            if records:
                break
        assert records, "nothing consumed"
        print("polled")
        """, bootstrap)
    assert (done.returncode, done.stderr) == (0, ""), done.stdout[-2000:]
    assert "polled" in done.stdout


def test_the_exit_hook_keeps_no_client_alive_and_forgets_a_closed_one(bootstrap):
    from raftka.client import Consumer, Producer, _sync
    producer, consumer = Producer(bootstrap_servers=bootstrap), Consumer(bootstrap_servers=bootstrap)
    assert {producer, consumer} <= set(_sync._open_clients)
    producer.close()
    consumer.close()
    assert not {producer, consumer} & set(_sync._open_clients)
    dropped = Producer(bootstrap_servers=bootstrap)  # never closed: only the exit hook knows it
    alive = weakref.ref(dropped)
    del dropped
    gc.collect()
    assert alive() is None, "the exit hook (or something else) holds an unclosed producer"
