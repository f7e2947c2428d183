"""The console tools end to end: `raftka topics`, `produce`, `consume`, `dump-log`, each run as its
own process against a real cluster (1 controller, 3 brokers, started by the cluster API in a
directory the tools find with --dir, as they find ./.raftka by default). Checks their output,
exit codes and one-line error messages (never a traceback).
"""
from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from raftka.cluster import Cluster, free_port_block, project_env, python_argv

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    # in a directory named .raftka, as the tools' default ./.raftka is
    return module_cluster_factory("cli-tools", controllers=1, brokers=3, subdir=".raftka",
                                  configs={"default.replication.factor": 3, "min.insync.replicas": 2})


def raftka(*args: str, stdin: str | None = None, cwd: Path | None = None, timeout_s: float = 90
           ) -> subprocess.CompletedProcess:
    return subprocess.run(python_argv("-m", "raftka", *args), input=stdin, capture_output=True, text=True,
                          env=project_env(), cwd=cwd, timeout=timeout_s)


def tool(cluster: Cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return raftka(*args, "--dir", str(cluster.root), stdin=stdin)


def ok(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Traceback" not in run.stderr, run.stderr
    return run.stdout


def one_line_error(run: subprocess.CompletedProcess, *words: str, code: int = 1) -> str:
    assert run.returncode == code, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Traceback" not in run.stderr + run.stdout, run.stderr
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, run.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def new_topic(cluster: Cluster, partitions: int = 3, *extra: str) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    out = ok(tool(cluster, "topics", "create", name, "--partitions", str(partitions), *extra))
    assert out.strip() == f"Created topic {name}."
    return name


def test_topics_create_list_describe_alter_delete(cluster):
    name = new_topic(cluster, 6, "--replication-factor", "3", "--config", "min.insync.replicas=2",
                     "--config", "retention.ms=86400000")
    assert name in ok(tool(cluster, "topics", "list")).split()
    described = ok(tool(cluster, "topics", "describe", name)).splitlines()
    assert described[0].startswith(f"Topic: {name}\tTopicId: ")
    assert "PartitionCount: 6\tReplicationFactor: 3" in described[0]
    assert "min.insync.replicas=2" in described[0] and "retention.ms=86400000" in described[0]
    rows = described[1:]
    assert len(rows) == 6
    for p, row in enumerate(rows):
        fields = dict(f.split(": ", 1) for f in row.strip().split("\t"))
        assert fields["Partition"] == str(p)
        replicas = fields["Replicas"].split(",")
        assert len(replicas) == 3 and set(replicas) <= {"2", "3", "4"}
        assert fields["Leader"] in replicas and set(fields["Isr"].split(",")) == set(replicas)
    out = ok(tool(cluster, "topics", "alter", name, "--config", "retention.ms=1000", "--delete-config",
                  "min.insync.replicas"))
    assert out.startswith(f"Updated config of topic {name}")
    head = ok(tool(cluster, "topics", "describe", "--topic", name)).splitlines()[0]
    assert "retention.ms=1000" in head and "min.insync.replicas" not in head
    assert ok(tool(cluster, "topics", "delete", name)).strip() == f"Deleted topic {name}."
    one_line_error(tool(cluster, "topics", "describe", name), f"unknown topic '{name}'")


def test_topics_errors_are_one_line(cluster):
    name = new_topic(cluster, 1)
    one_line_error(tool(cluster, "topics", "create", name, "--partitions", "1"), "already exists")
    assert "already exists" in ok(tool(cluster, "topics", "create", name, "--if-not-exists"))
    one_line_error(tool(cluster, "topics", "create", "x" + name, "--replication-factor", "5"),
                   "INVALID_REPLICATION_FACTOR")
    one_line_error(tool(cluster, "topics", "create", "y" + name, "--config", "no.such.key=1"), "no.such.key")
    one_line_error(tool(cluster, "topics", "create", "z" + name, "--config", "novalue"), "KEY=VALUE")
    one_line_error(tool(cluster, "topics", "delete", "missing-topic"), "unknown topic 'missing-topic'")
    assert "does not exist" in ok(tool(cluster, "topics", "delete", "missing-topic", "--if-exists"))
    one_line_error(tool(cluster, "topics", "alter", "missing-topic", "--config", "retention.ms=1"), "unknown topic")
    one_line_error(tool(cluster, "topics", "alter", name), "nothing to change")
    one_line_error(tool(cluster, "topics", "alter", name, "--config", "retention.ms=abc"), "retention.ms")
    one_line_error(tool(cluster, "topics", "create"), "name the topic")
    bad = tool(cluster, "topics", "create", name, "--partitions", "many")
    assert bad.returncode == 2 and "invalid int value" in bad.stderr and "Traceback" not in bad.stderr


def test_produce_then_consume_keys_values_headers_and_offsets(cluster):
    name = new_topic(cluster, 3)
    lines = [f"match-{i % 4}:event {i}" for i in range(40)]
    run = tool(cluster, "produce", name, "--key-separator", ":", stdin="\n".join(lines) + "\n")
    ok(run)
    assert f"produced 40 records to {name}" in run.stderr
    run = tool(cluster, "produce", name, "--headers", "--key-separator", ":",
               stdin="source:web,trace:7\tmatch-9:with headers\n\tmatch-9:no headers\n")
    ok(run)
    run = tool(cluster, "consume", name, "--from-beginning", "--max-messages", "42", "--print-key",
               "--print-partition", "--print-offset", "--print-headers")
    out = ok(run)
    assert "Processed a total of 42 messages" in run.stderr
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == 42
    by_key: dict[str, list[tuple[int, int, str]]] = {}
    for partition, offset, headers, key, value in rows:
        by_key.setdefault(key, []).append((int(partition.split(":")[1]), int(offset.split(":")[1]), value))
        if value == "with headers":
            assert headers == "source:web,trace:7"
        elif key != "match-9" or value == "no headers":
            assert headers == "NO_HEADERS"
    for key in (f"match-{k}" for k in range(4)):
        got = by_key[key]
        assert len({p for p, _, _ in got}) == 1, "one key, one partition"
        assert [v for _, _, v in sorted(got)] == [line.split(":", 1)[1] for line in lines
                                                 if line.startswith(key + ":")], "in the order produced"
    only_values = ok(tool(cluster, "consume", name, "--from-beginning", "--partition",
                          str(by_key["match-9"][0][0]), "--offset", str(by_key["match-9"][0][1]),
                          "--max-messages", "1"))
    assert only_values == "with headers\n"


def test_produce_with_each_acks_setting_and_lines_without_a_key(cluster):
    name = new_topic(cluster, 1)
    for acks in ("all", "1", "0"):
        ok(tool(cluster, "produce", name, "--acks", acks, stdin=f"acks={acks}\n"))
    out = ok(tool(cluster, "consume", name, "--from-beginning", "--max-messages", "3", "--print-key"))
    assert out.splitlines() == ["null\tacks=all", "null\tacks=1", "null\tacks=0"]


def test_consume_stops_after_timeout_without_records_and_only_sees_new_ones_by_default(cluster):
    name = new_topic(cluster, 1)
    ok(tool(cluster, "produce", name, stdin="old\n"))
    run = tool(cluster, "consume", name, "--timeout-ms", "1500")
    assert ok(run) == "" and "Processed a total of 0 messages" in run.stderr


def test_consume_with_a_group_reads_the_topic(cluster):
    name = new_topic(cluster, 2)
    ok(tool(cluster, "produce", name, "--key-separator", ":", stdin="a:1\nb:2\nc:3\n"))
    run = tool(cluster, "consume", name, "--group", "g-" + name, "--from-beginning", "--max-messages", "3")
    assert sorted(ok(run).split()) == ["1", "2", "3"]
    assert all(line.startswith(("warning:", "Processed")) for line in run.stderr.splitlines()), run.stderr


def test_produce_and_consume_errors_are_one_line(cluster, tmp_path):
    name = new_topic(cluster, 1)
    one_line_error(tool(cluster, "produce", "missing-topic", stdin="x\n"), "unknown topic 'missing-topic'")
    one_line_error(tool(cluster, "consume", "missing-topic", "--max-messages", "1"), "unknown topic")
    one_line_error(tool(cluster, "produce", name, "--key-separator", ":", stdin="k:v\nno separator\n"),
                   "line 2", "no key separator")
    one_line_error(tool(cluster, "produce", name, "--headers", stdin="no tab here\n"), "line 1", "no tab")
    one_line_error(tool(cluster, "produce", name, "--partition", "7", stdin="x\n"), "partitions 0-0")
    one_line_error(tool(cluster, "consume", name, "--offset", "3"), "--offset needs --partition")
    one_line_error(tool(cluster, "consume", name, "--partition", "0", "--offset", "soon"), "--offset 'soon'")
    bad = tool(cluster, "produce", name, "--acks", "2", stdin="")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "Traceback" not in bad.stderr
    one_line_error(raftka("produce", name, cwd=tmp_path, stdin="x\n"), "no cluster in", ".raftka")
    port = free_port_block(1)
    one_line_error(raftka("consume", name, "--bootstrap-server", f"127.0.0.1:{port}"), "no broker reachable",
                   "refused")
    one_line_error(raftka("topics", "list", "--bootstrap-server", "nonsense"), "not HOST:PORT")


def test_the_tools_work_with_bootstrap_server_instead_of_dir(cluster):
    name = new_topic(cluster, 1)
    servers = cluster.bootstrap_servers
    ok(raftka("produce", name, "--bootstrap-server", servers, stdin="via bootstrap\n"))
    out = ok(raftka("consume", name, "--bootstrap-server", servers.split(",")[0], "--from-beginning",
                    "--max-messages", "1"))
    assert out == "via bootstrap\n"


def partition_dir(cluster: Cluster, topic: str, partition: int) -> Path:
    for broker in cluster.broker_ids:
        path = cluster.nodes[broker].data_dir / "data" / f"{topic}-{partition}"
        if path.exists():
            return path
    raise AssertionError(f"no replica of {topic}-{partition} on disk")


def test_dump_log_decodes_segments_and_reports_a_bad_crc(cluster, tmp_path):
    name = new_topic(cluster, 1)
    ok(tool(cluster, "produce", name, "--key-separator", ":", "--compression-type", "lz4",
            stdin="".join(f"k{i}:value {i}\n" for i in range(5))))
    ok(tool(cluster, "produce", name, stdin="plain\n"))
    segment = partition_dir(cluster, name, 0) / "00000000000000000000.log"
    run = raftka("dump-log", str(segment.parent), "--print-data-log")
    out = ok(run)
    batches = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    records = [line for line in out.splitlines() if line.startswith("| offset:")]
    assert len(batches) == 2 and "compresscodec: lz4" in batches[0] and "compresscodec: none" in batches[1]
    assert all("isvalid: true" in b for b in batches)
    assert "count: 5" in batches[0] and "baseOffset: 5 lastOffset: 5" in batches[1]
    assert len(records) == 6 and "key: k3 payload: value 3" in records[3] and "key: null payload: plain" in records[5]
    assert "Batches: 2, records: 6" in out

    broken = tmp_path / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-2] ^= 0xFF  # inside the last batch's records: covered by its CRC
    broken.write_bytes(bytes(data))
    run = raftka("dump-log", str(broken))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "isvalid: false" in run.stdout and "failed its CRC check" in run.stdout
    torn = tmp_path / "00000000000000000005.log"
    torn.write_bytes(segment.read_bytes()[:70])
    run = raftka("dump-log", str(torn))
    assert run.returncode == 1 and "torn write" in run.stdout


def test_dump_log_reads_index_files_and_refuses_what_is_not_there(tmp_path):
    import struct
    index = tmp_path / "00000000000000000100.index"
    index.write_bytes(struct.pack(">II", 0, 0) + struct.pack(">II", 10, 4096))
    time_index = tmp_path / "00000000000000000100.timeindex"
    time_index.write_bytes(struct.pack(">qI", 1000, 0) + struct.pack(">qI", 900, 3))
    run = raftka("dump-log", str(index), str(time_index))
    assert "offset: 100 position: 0" in run.stdout and "offset: 110 position: 4096" in run.stdout
    assert "timestamp: 900 offset: 103" in run.stdout and "does not increase" in run.stdout
    assert run.returncode == 1, "the time index goes back"
    one_line_error(raftka("dump-log", str(tmp_path / "nothing.log")), "no such file")
    one_line_error(raftka("dump-log"), "at least one PATH")
