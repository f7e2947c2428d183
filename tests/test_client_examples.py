"""examples/ scripts run as they are, in their own processes, against a real cluster
(1 controller, 1 broker); kafka_python_style.py is kafka-python's usual examples with only the
import lines changed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raftka.client import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bootstrap(module_cluster_factory):
    return module_cluster_factory("examples", controllers=1, brokers=1).bootstrap_servers


def run_example(name: str, bootstrap: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAFTKA_BOOTSTRAP": bootstrap}
    return subprocess.run([sys.executable, str(ROOT / "examples" / name)], env=env,
                          capture_output=True, text=True, timeout=90)


def test_kafka_python_usual_examples_run_with_only_the_imports_changed(bootstrap):
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic("my-topic", 2, 1), NewTopic("json-topic", 3, 1)])
    source = (ROOT / "examples" / "kafka_python_style.py").read_text()
    assert "from raftka.client import KafkaConsumer, KafkaProducer" in source
    done = run_example("kafka_python_style.py", bootstrap)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "OK" in done.stdout


def test_the_quickstart_example_runs(bootstrap):
    done = run_example("quickstart.py", bootstrap)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "quickstart OK" in done.stdout
