"""The `raftka` tools as a Kafka user expects them (issue #24, CLI): comma lists of bootstrap
controllers tried in turn (or found through a broker: quorum status --bootstrap-server), the local
cluster found through --dir, kafka-consumer-groups' flags (--group, --all-groups, also for
reset-offsets, --to-datetime, --shift-by, --by-duration, --to-current), the console
consumer's --property, --include, --consumer-property and --consumer.config, the console
producer's --topic, --property (Kafka's line reader), --producer-property and --producer.config,
kafka-topics' describe reports (--under-replicated-partitions & co) and --exclude-internal, a
subcommand's own usage on a bad flag, and docs/cli.md checked against the argparse definitions so
it cannot drift.

The commands run in this process through `raftka.cli.main` (stdout, stderr and stdin replaced),
against one module cluster (1 controller, 2 brokers, so that a partition can lose an ISR member);
the docs and parser checks need no cluster.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from raftka.cli import build_parser, flag_reference, main
from raftka.cluster import free_port_block

pytestmark = pytest.mark.timeout(120)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
REFERENCE_BEGIN = "<!-- flag reference: begin -->"
REFERENCE_END = "<!-- flag reference: end -->"
OLD_MS = 1577836800000  # 2020-01-01T00:00:00Z


def cli(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `raftka ARGS` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    sigterm = signal.getsignal(signal.SIGTERM)  # the console consumer installs its own
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, out.getvalue(), err.getvalue()


def cli_stdin(stdin: bytes, *args: str) -> tuple[int, str, str]:
    """`cli(*args)` reading ``stdin`` (the console producer reads sys.stdin.buffer)."""
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        return cli(*args)
    finally:
        sys.stdin = saved


def ok(*args: str) -> str:
    code, out, err = cli(*args)
    assert code == 0, f"raftka {' '.join(args)}: exit {code}\nstdout:\n{out}\nstderr:\n{err}"
    return out


def one_line_error(*args: str) -> str:
    code, out, err = cli(*args)
    assert code == 1, f"exit {code}\nstdout:\n{out}\nstderr:\n{err}"
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def table(out: str) -> list[dict[str, str]]:
    """A tool's table (header line, then rows) as dicts; lines before the header are skipped."""
    lines = [line for line in out.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("GROUP"))
    header = lines[start].split()
    return [dict(zip(header, line.split())) for line in lines[start + 1:] if not line.startswith("(")]


# -- docs/cli.md against the parsers ----------------------------------------------------------

def test_docs_flag_reference_is_what_the_parsers_define():
    text = DOCS.read_text(encoding="utf-8")
    assert REFERENCE_BEGIN in text and REFERENCE_END in text, "docs/cli.md lost its flag reference markers"
    documented = text.split(REFERENCE_BEGIN, 1)[1].split(REFERENCE_END, 1)[0].strip().splitlines()
    expected = flag_reference()
    assert documented == expected, ("docs/cli.md's flag reference differs from the argparse definitions; "
                                    "replace the lines between its markers with:\n" + "\n".join(expected))


def test_docs_command_table_has_a_row_for_every_command():
    rows = [line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith("| `raftka ")]
    commands = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices
    missing = [name for name in commands if not any(f"`raftka {name}" in row for row in rows)]
    assert not missing, f"docs/cli.md's command table has no row for {missing}"


def _documented_command_lines() -> list[str]:
    """Every `raftka ...` command in docs/cli.md's ```sh blocks (continuations joined, comments,
    pipes and redirections cut off)."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"\|(?!\|)|&&", line):
                words = shlex.split(part, comments=True)
                if words and words[0] == "raftka":
                    commands.append(words[1:])
    return commands


def test_every_example_in_the_docs_parses():
    commands = _documented_command_lines()
    assert len(commands) > 20, commands
    parser = build_parser()
    refused = []
    for words in commands:
        words = [w for w in words if not w.startswith(">")]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                parser.parse_args(words)
            except SystemExit:
                refused.append(f"`raftka {' '.join(words)}`: {err.getvalue().splitlines()[-1]}")
    assert not refused, "docs/cli.md examples that do not parse:\n" + "\n".join(refused)


def test_a_bad_flag_shows_the_subcommands_own_usage():
    code, _, err = cli("groups", "describe", "g", "--no-such-flag")
    assert code == 2
    assert err.startswith("usage: raftka groups describe "), err
    assert "raftka groups describe: error: unrecognized arguments: --no-such-flag" in err
    code, _, err = cli("quorum", "status", "--nope", "1")
    assert code == 2 and err.startswith("usage: raftka quorum status "), err
    assert "unrecognized arguments: --nope 1" in err
    code, _, err = cli("consume", "t", "--nope")
    assert code == 2 and err.startswith("usage: raftka consume "), err
    code, _, err = cli("--nope")  # the top level still has its own
    assert code == 2 and err.startswith("usage: raftka [-h]"), err


# -- parsers of the new flags (no cluster) ----------------------------------------------------

def test_reset_times_parse_as_kafka_writes_them():
    from raftka.cli.commands.groups import parse_datetime_ms, parse_duration_ms
    from raftka.cli.commands._common import CommandError
    assert parse_datetime_ms("2020-01-01T00:00:00.000Z") == OLD_MS
    assert parse_datetime_ms("2020-01-01T01:00:00.250+01:00") == OLD_MS + 250
    assert parse_datetime_ms("2020-01-01T00:00:00-0130") == OLD_MS + 90 * 60_000
    local = time.mktime(time.strptime("2020-01-01T00:00:00", "%Y-%m-%dT%H:%M:%S"))
    assert parse_datetime_ms("2020-01-01T00:00:00.000") == int(local * 1000), "no zone: local time, as Kafka"
    assert parse_duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4500
    assert parse_duration_ms("PT30M") == 1_800_000 and parse_duration_ms("P2D") == 2 * 86_400_000
    for bad in ("2020-01-01", "2020-01-01 00:00:00", "yesterday", "2020-13-01T00:00:00"):
        with pytest.raises(CommandError, match="--to-datetime"):
            parse_datetime_ms(bad)
    for bad in ("P", "PT", "P1DT", "1h", "PT-5M", "P1W"):
        with pytest.raises(CommandError, match="--by-duration"):
            parse_duration_ms(bad)


def test_console_consumer_properties_set_the_formatter():
    from types import SimpleNamespace
    from raftka.cli.commands.consume import apply_properties, format_record
    from raftka.cli.commands._common import CommandError
    args = build_parser().parse_args(["consume", "t", "--property", "print.key=true", "--property",
                                      "key.separator= | ", "--property", "print.offset=TRUE",
                                      "--property", "print.partition=false", "--property", "null.literal=<none>"])
    apply_properties(args)
    record = SimpleNamespace(key=None, value=b"v", partition=2, offset=7, timestamp=5, timestamp_type=0,
                             headers=[])
    assert format_record(record, args) == "Offset:7 | <none> | v"
    args = build_parser().parse_args(["consume", "t", "--print-key", "--property", "print.value=false",
                                      "--property", "print.timestamp=true"])
    apply_properties(args)
    assert format_record(record, args) == "CreateTime:5\tnull"
    for bad, words in ((["print.keys=true"], "print.keys: unknown"), (["print.key"], "KEY=VALUE")):
        args = build_parser().parse_args(["consume", "t", "--property", *bad])
        with pytest.raises(CommandError, match=words):
            apply_properties(args)


def test_console_producer_properties_split_lines_as_kafkas_line_reader():
    # [HEADERS<headers.delimiter>][KEY<key.separator>]VALUE, null.marker for nulls, ignore.error
    # for a missing separator; an unknown key or an unusable separator is refused by name.
    from raftka.cli.commands.produce import line_format, parse_line
    from raftka.cli.commands._common import CommandError

    def fmt(*words: str):
        return line_format(build_parser().parse_args(["produce", "t", *words]))

    tab_key = fmt("--property", "parse.key=TRUE")
    assert parse_line("k\tv\tw", tab_key, 1) == (b"k", b"v\tw", None), "key.separator defaults to tab"
    assert parse_line("k:v", fmt("--property", "key.separator=:"), 1) == (None, b"k:v", None), "no parse.key"
    full = fmt("--property", "parse.key=true", "--property", "key.separator=::", "--property", "parse.headers=true",
               "--property", "headers.delimiter=|", "--property", "headers.separator=;",
               "--property", "headers.key.separator==", "--property", "null.marker=NULL")
    assert parse_line("a=1;b=NULL|k::v", full, 1) == (b"k", b"v", [("a", b"1"), ("b", None)])
    assert parse_line("|NULL::NULL", full, 1) == (None, None, []), "empty headers; null key and value"
    assert parse_line("NULL|k::v", full, 1)[2] == []
    assert fmt("--key-separator", ":", "--headers") == fmt(
        "--property", "parse.key=true", "--property", "key.separator=:", "--property", "parse.headers=true")
    lenient = fmt("--property", "parse.key=true", "--property", "parse.headers=true", "--property", "ignore.error=true")
    assert parse_line("just a value", lenient, 1) == (None, b"just a value", None)
    assert parse_line("flag,a:1\tk\tv", lenient, 1) == (b"k", b"v", [("flag", None), ("a", b"1")])
    with pytest.raises(CommandError, match="line 3: no key separator"):
        parse_line("no separator", tab_key, 3)
    with pytest.raises(CommandError, match="line 2: header 'x' is not KEY=VALUE"):
        parse_line("x|k::v", full, 2)
    with pytest.raises(CommandError, match="null.marker"):
        parse_line("NULL=1|k::v", full, 4)
    for words, message in ((["--property", "parse.keys=true"], "parse.keys: unknown"),
                           (["--property", "parse.key"], "KEY=VALUE"),
                           (["--property", "key.separator="], "key.separator must not be empty"),
                           (["--headers", "--property", "headers.separator=:"], "must differ")):
        with pytest.raises(CommandError, match=message):
            fmt(*words)


# -- against a cluster ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("cli-parity", controllers=1, brokers=2)


@pytest.fixture(scope="module")
def admin(cluster, module_admin_factory):
    return module_admin_factory(cluster)


def new_topic(admin, partitions: int, prefix: str = "t", replication_factor: int = 1) -> str:
    from raftka.client import NewTopic
    from helpers import wait_for_topic
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication_factor)])
    wait_for_topic(admin, name, partitions)
    return name


def produce(cluster, topic: str, records: list[tuple[int, bytes | None, bytes, int | None]]) -> None:
    """(partition, key, value, timestamp_ms or None for now) each, acknowledged."""
    from raftka.client import Producer
    with contextlib.closing(Producer(bootstrap_servers=cluster.bootstrap_servers)) as producer:
        futures = [producer.send(topic, value, key=key, partition=p, timestamp_ms=ts) for p, key, value, ts in records]
        for future in futures:
            future.get(timeout=30)


def test_quorum_status_tries_each_controller_and_finds_the_local_cluster(cluster):
    dead = f"127.0.0.1:{free_port_block(1)}"
    live = cluster.bootstrap_controllers
    out = ok("quorum", "status", "--bootstrap-controller", f"{dead},{live}", "--json")
    status = json.loads(out)
    assert status["leader_id"] == cluster.controller_ids[0] and status["active"]
    by_dir = json.loads(ok("quorum", "status", "--dir", str(cluster.root), "--json"))
    assert by_dir["leader_id"] == status["leader_id"]
    assert [(v["node_id"], v["endpoint"]) for v in by_dir["voters"]] == [(1, live)]
    assert "ClusterLeaderId:" in ok("quorum", "status", "--dir", str(cluster.root))
    line = one_line_error("quorum", "status", "--bootstrap-controller", f"{dead},no-such-host.invalid:1",
                          "--timeout-ms", "1000")
    assert "no controller answered" in line and dead in line and "no-such-host.invalid:1" in line
    assert "not HOST:PORT" in one_line_error("quorum", "status", "--bootstrap-controller", "h1,h2")


def test_groups_describe_by_flag_and_all_groups(cluster, admin):
    topic = new_topic(admin, 2)
    produce(cluster, topic, [(p, None, b"x", None) for p in (0, 1) for _ in range(4)])
    g1, g2 = f"g1-{topic}", f"g2-{topic}"
    for group, offset in ((g1, "1"), (g2, "3")):
        ok("groups", "reset-offsets", "--dir", str(cluster.root), "--group", group, "--topic", topic,
           "--to-offset", offset, "--execute")
    both = ok("groups", "describe", "--dir", str(cluster.root), "--group", g1, "--group", g2)
    rows = [line.split() for line in both.splitlines() if line.startswith(("g1-", "g2-"))]
    assert sorted((r[0], r[2], r[3], r[5]) for r in rows) == [
        (g1, "0", "1", "3"), (g1, "1", "1", "3"), (g2, "0", "3", "1"), (g2, "1", "3", "1")]
    everything = ok("groups", "describe", "--bootstrap-server", cluster.bootstrap_servers, "--all-groups",
                    "--state")
    assert {g1, g2} <= {line.split()[0] for line in everything.splitlines() if line.strip()}
    assert ok("groups", "describe", "--dir", str(cluster.root), g1) == ok(
        "groups", "describe", "--dir", str(cluster.root), "--group", g1, "--offsets")
    assert g1 in ok("groups", "list", "--dir", str(cluster.root)).split()
    assert "name the group once" in one_line_error("groups", "describe", "--dir", str(cluster.root), g1,
                                                   "--group", g2)
    assert "name the group" in one_line_error("groups", "describe", "--dir", str(cluster.root))
    assert "does not exist" in one_line_error("groups", "describe", "--dir", str(cluster.root), "--group",
                                              g1, "--group", "no-such-group")


def test_reset_offsets_by_time_shift_and_current(cluster, admin):
    topic = new_topic(admin, 2)
    now_ms = int(time.time() * 1000)
    # partition 0: 4 records of 2020, then 4 of now; partition 1: 2 of now
    produce(cluster, topic, [(0, None, b"old", OLD_MS + i) for i in range(4)]
            + [(0, None, b"new", now_ms) for _ in range(4)] + [(1, None, b"new", now_ms) for _ in range(2)])
    group = f"g-{topic}"
    root = ("--dir", str(cluster.root))
    ok("groups", "reset-offsets", *root, "--group", group, "--topic", f"{topic}:0", "--to-offset", "5",
       "--execute")

    def plan(*how: str, spec: str = topic) -> dict[int, int]:
        out = ok("groups", "reset-offsets", *root, "--group", group, "--topic", spec, *how)
        return {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(out)}

    assert plan("--to-datetime", "2020-01-01T00:00:00.002Z") == {0: 2, 1: 0}
    assert plan("--to-datetime", "2020-01-01T01:00:00.002+01:00") == {0: 2, 1: 0}
    assert plan("--to-datetime", "2020-06-01T00:00:00.000Z") == {0: 4, 1: 0}
    assert plan("--to-datetime", "2100-01-01T00:00:00.000Z") == {0: 8, 1: 2}, "nothing that late: the log end"
    assert plan("--by-duration", "P1D") == {0: 4, 1: 0}
    assert plan("--by-duration", "P36500D") == {0: 0, 1: 0}
    assert plan("--to-current") == {0: 5, 1: 2}, "no committed offset on partition 1: the log end"
    assert "no committed offset" in one_line_error("groups", "reset-offsets", *root, "--group", group,
                                                   "--topic", topic, "--shift-by", "-2")
    one = ("--topic", f"{topic}:0")
    out = ok("groups", "reset-offsets", *root, "--group", group, *one, "--shift-by", "-2", "--execute")
    assert table(out) == [{"GROUP": group, "TOPIC": topic, "PARTITION": "0", "NEW-OFFSET": "3"}]
    assert "dry run" not in out
    assert plan("--to-current")[0] == 3, "--execute committed the shifted offset"
    assert plan("--shift-by", "100", spec=f"{topic}:0") == {0: 8}, "kept within the log"
    assert plan("--shift-by", "-100", spec=f"{topic}:0") == {0: 0}
    assert "--to-datetime" in one_line_error("groups", "reset-offsets", *root, "--group", group, *one,
                                             "--to-datetime", "2020-01-01")
    assert "--by-duration" in one_line_error("groups", "reset-offsets", *root, "--group", group, *one,
                                             "--by-duration", "1 day")
    code, _, err = cli("groups", "reset-offsets", *root, "--group", group, *one, "--to-current",
                       "--shift-by", "1")
    assert code == 2 and "not allowed with argument" in err


def test_console_consumer_property_and_include(cluster, admin):
    prefix = f"inc{uuid.uuid4().hex[:6]}"
    a, b = new_topic(admin, 1, prefix), new_topic(admin, 2, prefix)
    other = new_topic(admin, 1, a)  # "<a>-<hex>": its start matches the pattern below, its whole name not
    produce(cluster, a, [(0, b"ka", b"va", None)])
    produce(cluster, b, [(1, b"kb", b"vb", None)])
    produce(cluster, other, [(0, b"ko", b"vo", None)])
    root = ("--dir", str(cluster.root))
    pattern = f"{prefix}-[0-9a-f]{{8}}"
    out = ok("consume", *root, "--include", pattern, "--from-beginning", "--max-messages", "3",
             "--timeout-ms", "1500", "--property", "print.key=true", "--property", "key.separator=:",
             "--property", "print.partition=true")
    assert sorted(out.splitlines()) == ["Partition:0:ka:va", "Partition:1:kb:vb"]
    out = ok("consume", *root, "--include", pattern, "--group", f"g-{prefix}", "--from-beginning",
             "--max-messages", "2", "--timeout-ms", "15000", "--property", "print.value=false",
             "--property", "print.key=true")
    assert sorted(out.split()) == ["ka", "kb"]
    assert "no topic matches" in one_line_error("consume", *root, "--include", "nothing-.*", "--timeout-ms", "1")
    assert "name one topic" in one_line_error("consume", *root, a, "--include", f"{prefix}-.*")
    assert "--include" in one_line_error("consume", *root, "--include", "(", "--max-messages", "1")
    assert ok("consume", *root, "--topic", other, "--from-beginning", "--max-messages", "1",
              "--property", "line.separator=;") == "vo;"


def test_quorum_status_through_the_brokers(cluster):
    # kafka-metadata-quorum --bootstrap-server: the broker names its controllers
    # (controller.quorum.bootstrap.servers), the tool asks them; same answer as asking them directly.
    direct = json.loads(ok("quorum", "status", "--bootstrap-controller", cluster.bootstrap_controllers, "--json"))
    through = json.loads(ok("quorum", "status", "--bootstrap-server", cluster.bootstrap_servers, "--json"))
    assert through["leader_id"] == direct["leader_id"] == cluster.controller_ids[0] and through["active"]
    assert [v["node_id"] for v in through["voters"]] == [v["node_id"] for v in direct["voters"]]
    assert "only one of --bootstrap-server or --bootstrap-controller" in one_line_error(
        "quorum", "status", "--bootstrap-server", cluster.bootstrap_servers,
        "--bootstrap-controller", cluster.bootstrap_controllers)
    dead = f"127.0.0.1:{free_port_block(1)}"
    assert "no broker reachable" in one_line_error("quorum", "status", "--bootstrap-server", dead)


def test_reset_offsets_of_several_and_all_groups_skips_a_group_with_members(cluster, admin):
    from raftka.client import Consumer, TopicPartition
    topic = new_topic(admin, 2)
    produce(cluster, topic, [(p, None, b"x", None) for p in (0, 1) for _ in range(6)])
    root = ("--dir", str(cluster.root))
    g1, g2, busy = f"g1-{topic}", f"g2-{topic}", f"busy-{topic}"
    for group in (g1, g2, busy):
        ok("groups", "reset-offsets", *root, "--group", group, "--topic", topic, "--to-offset", "2", "--execute")
    member = Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=busy, enable_auto_commit=False)
    try:
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(timeout_ms=100)
        assert member.assignment(), "the busy group's consumer got no partitions"
        # --group repeated: both reset, in one run
        out = ok("groups", "reset-offsets", *root, "--group", g1, "--group", g2, "--topic", topic,
                 "--to-latest", "--execute")
        assert sorted((r["GROUP"], r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)) == [
            (g1, "0", "6"), (g1, "1", "6"), (g2, "0", "6"), (g2, "1", "6")]
        # --all-groups: every group without members planned (each its own committed topics);
        # the one with members reported as Kafka's tool does, and the exit code says so
        code, out, err = cli("groups", "reset-offsets", *root, "--all-groups", "--all-topics", "--to-earliest")
        assert code == 1
        assert f"group '{busy}' is inactive" in err and err.count("error:") == 1, err
        planned = {(r["GROUP"], r["TOPIC"], r["PARTITION"]): r["NEW-OFFSET"] for r in table(out)}
        assert all(planned[(g, topic, p)] == "0" for g in (g1, g2) for p in ("0", "1")), planned
        assert not any(group == busy for group, _, _ in planned) and "dry run" in out
    finally:
        member.close()
    # the dry run changed nothing; the --execute above did, and the busy group kept its offsets
    for group, expected in ((g1, 6), (g2, 6), (busy, 2)):
        offsets = admin.list_consumer_group_offsets(group)
        assert [getattr(offsets[TopicPartition(topic, p)], "offset", None) for p in (0, 1)] == [expected] * 2
    code, _, err = cli("groups", "reset-offsets", *root, "--all-groups", "--group", g1, "--all-topics",
                       "--to-earliest")
    assert code == 2 and "not allowed with argument" in err


def test_console_producer_topic_flag_and_properties_then_consume_shows_them(cluster, admin, tmp_path):
    # Kafka's console producer invocation, run unchanged but for the tool's name: --topic and
    # the line reader's --property keys; the console consumer prints the keys and headers back.
    topic = new_topic(admin, 1)
    root = ("--dir", str(cluster.root))
    lines = b"src=web;n=1|k1::v1\n|k2::v2\nh=NULL|NULL::v3\n"
    code, _, err = cli_stdin(lines, "produce", *root, "--topic", topic, "--property", "parse.key=true",
                             "--property", "key.separator=::", "--property", "parse.headers=true",
                             "--property", "headers.delimiter=|", "--property", "headers.separator=;",
                             "--property", "headers.key.separator==", "--property", "null.marker=NULL",
                             "--producer-property", "linger.ms=0", "--producer-property", "compression.type=gzip")
    assert code == 0 and f"produced 3 records to {topic}" in err, err
    out = ok("consume", *root, "--topic", topic, "--from-beginning", "--max-messages", "3", "--timeout-ms", "10000",
             "--property", "print.key=true", "--property", "print.headers=true", "--property", "key.separator= ")
    assert out.splitlines() == ["src:web,n:1 k1 v1", "NO_HEADERS k2 v2", "h:null null v3"]
    # --producer.config: producer-only keys (acks, linger.ms) go to the producer, not the admin
    # client the tool opens first, which would refuse them.
    config = tmp_path / "producer.properties"
    config.write_text("acks=1\nlinger.ms=0\nbatch.size=1024\n")
    code, _, err = cli_stdin(b"k4\tv4\n", "produce", topic, *root, "--producer.config", str(config),
                             "--property", "parse.key=true")
    assert code == 0 and "(acks=1)" in err, err
    out = ok("consume", *root, topic, "--partition", "0", "--offset", "3", "--max-messages", "1",
             "--timeout-ms", "10000", "--print-key")
    assert out == "k4\tv4\n"
    # a producer property takes effect, and a flag given wins over it: the batches on disk are
    # gzip (the first run's compression.type), none (the file's run), lz4 (--compression-type)
    code, _, err = cli_stdin(b"v5\n", "produce", topic, *root, "--compression-type", "lz4",
                             "--producer-property", "compression.type=gzip")
    assert code == 0, err
    replica = next(cluster.nodes[b].data_dir / "data" / f"{topic}-0" for b in cluster.broker_ids
                   if (cluster.nodes[b].data_dir / "data" / f"{topic}-0").exists())
    codecs = re.findall(r"compresscodec: (\w+)", ok("dump-log", str(replica)))
    assert [c for i, c in enumerate(codecs) if i == 0 or codecs[i - 1] != c] == ["gzip", "none", "lz4"], codecs
    assert "linger.ms: expected an integer" in one_line_error("produce", topic, *root, "--producer-property",
                                                              "linger.ms=soon")
    assert "--producer-property: no.such.key" in one_line_error("produce", topic, *root, "--producer-property",
                                                               "no.such.key=1")
    assert "not both" in one_line_error("produce", topic, *root, "--producer.config", str(config),
                                        "--command-config", str(config))
    assert "name the topic once" in one_line_error("produce", topic, *root, "--topic", topic)
    assert "name the topic once" in one_line_error("produce", *root)


def test_consumer_property_and_consumer_config_take_effect(cluster, admin, tmp_path):
    # auto.offset.reset=earliest by --consumer-property (or the file) reads what is already
    # there, where the default (latest) reads nothing; bad values are refused by the key's name.
    topic = new_topic(admin, 1)
    produce(cluster, topic, [(0, None, b"first", None), (0, None, b"second", None)])
    root = ("--dir", str(cluster.root))
    assert ok("consume", *root, topic, "--timeout-ms", "1500") == "", "latest: nothing yet"
    assert ok("consume", *root, topic, "--timeout-ms", "10000", "--max-messages", "2",
              "--consumer-property", "auto.offset.reset=earliest") == "first\nsecond\n"
    config = tmp_path / "consumer.properties"
    config.write_text("auto.offset.reset=earliest\nmax.poll.records=1\nclient.id=parity\n")
    assert ok("consume", *root, topic, "--timeout-ms", "10000", "--max-messages", "2",
              "--consumer.config", str(config)) == "first\nsecond\n"
    line = one_line_error("consume", *root, topic, "--consumer-property", "max.poll.records=many")
    assert "--consumer-property: max.poll.records: expected an integer" in line, line
    line = one_line_error("consume", *root, topic, "--consumer-property", "fetch.max.wait.msec=5")
    assert "fetch.max.wait.msec" in line, line
    assert "auto.offset.reset=latest" in one_line_error("consume", *root, topic, "--from-beginning",
                                                        "--consumer-property", "auto.offset.reset=latest")
    assert "differ" in one_line_error("consume", *root, topic, "--group", "a", "--consumer-property", "group.id=b")
    # group.id as a property is --group: the group's offsets are committed
    group = f"g-{topic}"
    assert ok("consume", *root, topic, "--from-beginning", "--max-messages", "2", "--timeout-ms", "15000",
              "--consumer-property", f"group.id={group}") == "first\nsecond\n"
    from raftka.client import TopicPartition
    committed = admin.list_consumer_group_offsets(group)[TopicPartition(topic, 0)]
    assert getattr(committed, "offset", committed) == 2


def _partition_lines(out: str) -> list[tuple[str, int]]:
    """(topic, partition) of each of kafka-topics' partition lines in ``out``; fails on any other line."""
    found = []
    for line in out.splitlines():
        match = re.fullmatch(r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: \S+\tReplicas: [\d,]+\tIsr: [\d,]*.*", line)
        assert match, f"not a partition line: {line!r}"
        found.append((match[1], int(match[2])))
    return sorted(found)


def test_topics_describe_reports_only_the_partitions_they_name(cluster, admin):
    # A topic of RF 2 and one of RF 1 across the two brokers; with every replica in sync the
    # under-replicated report prints nothing; once a broker is stopped it prints exactly the RF 2
    # partitions (their ISR lost it), and --unavailable-partitions exactly the RF 1 partitions
    # that lived only there. The broker is restarted and the report is empty again.
    from raftka.cluster import wait_until
    both = new_topic(admin, 2, "rf2", replication_factor=2)
    single = new_topic(admin, 4, "rf1")
    victim, survivor = cluster.broker_ids[-1], cluster.broker_ids[0]
    on_victim = sorted((single, p["partition"]) for p in admin.describe_topics([single])[0]["partitions"]
                       if p["replicas"] == [victim])
    assert on_victim, "no RF 1 partition was placed on the broker to stop"
    live = ("--bootstrap-server", cluster.broker_address(survivor))

    def report(flag: str) -> list[tuple[str, int]]:
        return _partition_lines(ok("topics", "describe", both, single, *live, flag))

    wait_until(lambda: report("--under-replicated-partitions") == [], 30, interval_s=0.5, what="full ISRs")
    assert report("--unavailable-partitions") == [] and report("--under-min-isr-partitions") == []
    at_min = report("--at-min-isr-partitions")  # min.insync.replicas=1: the RF 1 partitions
    assert at_min == [(single, p) for p in range(4)], at_min
    try:
        cluster.stop(victim)
        expected = [(both, 0), (both, 1)]
        wait_until(lambda: report("--under-replicated-partitions") == expected, 60, interval_s=0.5,
                   what=f"the RF 2 partitions without broker {victim} in their ISR")
        assert report("--unavailable-partitions") == on_victim
        assert report("--under-min-isr-partitions") == on_victim, "min.insync.replicas=1: only leaderless ones"
        code, out, err = cli("topics", "describe", both, *live, "--under-replicated-partitions",
                             "--unavailable-partitions")
        assert code == 2 and "not allowed with argument" in err, "one report at a time, as kafka-topics"
    finally:
        cluster.restart(victim)
    wait_until(lambda: report("--under-replicated-partitions") == [], 60, interval_s=0.5,
               what=f"broker {victim} back in every ISR")
    assert report("--unavailable-partitions") == []


def test_topics_list_and_describe_exclude_internal_topics(cluster, admin):
    topic = new_topic(admin, 1)
    root = ("--dir", str(cluster.root))
    # a committed offset makes sure __consumer_offsets exists
    ok("groups", "reset-offsets", *root, "--group", f"g-{topic}", "--topic", topic, "--to-earliest", "--execute")
    from raftka.cluster import wait_until
    wait_until(lambda: "__consumer_offsets" in ok("topics", "list", *root).split(), 30, interval_s=0.5,
               what="__consumer_offsets listed")
    everything = ok("topics", "list", *root).split()
    assert ok("topics", "list", *root, "--exclude-internal").split() == [t for t in everything if not t.startswith("__")]
    described = ok("topics", "describe", *root, "--exclude-internal")
    assert f"Topic: {topic}\t" in described and "__consumer_offsets" not in described
    assert "Topic: __consumer_offsets\t" in ok("topics", "describe", *root)
    out = ok("topics", "describe", *root, topic, "--topics-with-overrides")
    assert out == "", "no overrides: no line"
    ok("topics", "alter", *root, topic, "--add-config", "retention.ms=3600000")
    out = ok("topics", "describe", *root, topic, "--topics-with-overrides")
    assert out.startswith(f"Topic: {topic}\tTopicId: ") and "retention.ms=3600000" in out and "Partition:" not in out
