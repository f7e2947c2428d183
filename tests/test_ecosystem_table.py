"""docs/compatibility.md, Kafka's names against Raftka's (issue #24), checked against the code.

Each table is read back and held to what it claims: a config key said to be Raftka's (``same``
or named) is declared and one said ``refused`` is refused when given; every declared config key
and every client keyword has a row; every ``raftka`` command and flag named parses and every
command has a row, and a flag a row says is not taken is not; every API Raftka knows has a row,
and an API marked absent is unknown to common/api.py; every metric family a live broker and
controller expose is named, and every one named is exposed; every Spark option has a row. So
the table cannot drift from the code unnoticed: a new config key, command, flag, API or metric
makes one of these fail until the table says how it stands against Kafka's.
"""
from __future__ import annotations

import argparse
import re
import shlex
import urllib.request
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "compatibility.md"
ABSENT = "—"
MARKERS = ("same", "refused", "ignored", ABSENT)


def sections() -> dict[str, list[tuple[str, str, str]]]:
    """{heading (## or ###): [(kafka, raftka, difference) cells of its table]}."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    heading = ""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("| ") and not line.startswith("| Kafka | Raftka |"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            assert len(cells) == 3, f"{heading}: not three cells: {line}"
            out.setdefault(heading, []).append((cells[0], cells[1], cells[2]))
    return out


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def table(title: str) -> list[tuple[str, str, str]]:
    rows = sections().get(title)
    assert rows, f"docs/compatibility.md has no table under '{title}'"
    return rows


def check_shape(title: str, rows: list[tuple[str, str, str]], empty_difference_ok: bool = False) -> None:
    """Each row names something on one side at least, and says why unless it is ``same`` (or,
    ``empty_difference_ok``, the names differ only as the text above the table says)."""
    for kafka, raftka, difference in rows:
        assert names(kafka) or kafka == ABSENT, f"{title}: Kafka cell {kafka!r}"
        assert names(raftka) or raftka in MARKERS, f"{title}: Raftka cell {raftka!r}"
        assert not (kafka == ABSENT and raftka in MARKERS), f"{title}: a row of nothing"
        if raftka != "same" and not empty_difference_ok:
            assert difference, f"{title}: {kafka} -> {raftka} differs without a word why"
        if kafka == ABSENT:
            assert difference.startswith("Raftka only") or "'s" in difference.split(":")[0], (
                f"{title}: {raftka} has no Kafka name and does not say whose it is")


# -- configs --------------------------------------------------------------------------------

def _config_rows(title: str, declared: set[str], parse) -> None:
    from raftka.common.errors import ConfigError
    rows = table(title)
    check_shape(title, rows)
    covered = set()
    for kafka, raftka, _ in rows:
        if raftka == "same":
            (key,) = names(kafka)
            assert key in declared, f"{title}: {key} is not declared, yet the table says Raftka has it"
            covered.add(key)
        elif raftka == "refused":
            for key in names(kafka):
                assert key not in declared, f"{title}: {key} is declared, yet the table says it is refused"
                with pytest.raises(ConfigError):
                    parse(key)
        else:
            for key in names(raftka):
                assert key in declared, f"{title}: {key} is not declared"
                covered.add(key)
    missing = sorted(declared - covered)
    assert not missing, f"{title}: declared keys without a row: {missing}"


def test_every_broker_config_is_a_row_and_every_refused_one_is_refused():
    from raftka.common.configs import BROKER_DYNAMIC_CONFIGS
    from raftka.common.server_config import SERVER_CONFIGS
    declared = set(SERVER_CONFIGS.names()) | set(BROKER_DYNAMIC_CONFIGS.names())
    _config_rows("Broker and controller configs (`server.properties`)", declared,
                 lambda key: SERVER_CONFIGS.parse({key: "1"}, fill_defaults=False))


def test_every_topic_config_is_a_row_and_every_refused_one_is_refused():
    from raftka.common.configs import TOPIC_CONFIGS
    _config_rows("Topic configs", set(TOPIC_CONFIGS.names()),
                 lambda key: TOPIC_CONFIGS.parse({key: "1"}, fill_defaults=False))


@pytest.mark.parametrize("title, kind, module", [("Producer", "producer", "raftka.client.aio.producer"),
                                                 ("Consumer", "consumer", "raftka.client.aio.consumer"),
                                                 ("Admin client", "admin", "raftka.client.aio.admin")])
def test_every_client_keyword_is_a_row_and_each_row_is_what_the_client_does(title, kind, module):
    import importlib
    from raftka.client.aio.configs import IGNORED, check_config
    from raftka.common.errors import ConfigError
    defaults = importlib.import_module(module).DEFAULTS
    rows = table(title)
    check_shape(title, rows)
    covered = set()
    for kafka, raftka, _ in rows:
        keyword = names(kafka)[0].replace(".", "_") if kafka != ABSENT else None
        if raftka == "same":
            assert keyword in defaults, f"{title}: {keyword} is not a {kind} keyword"
            covered.add(keyword)
        elif raftka == "ignored":
            assert keyword in IGNORED and keyword not in defaults, f"{title}: {keyword} is not ignored"
            assert keyword not in check_config(kind, {keyword: 1}, defaults)
        elif raftka == "refused":
            assert keyword not in defaults and keyword not in IGNORED, f"{title}: {keyword} is taken"
            with pytest.raises(ConfigError):
                check_config(kind, {keyword: "x"}, defaults)
        else:
            for name in names(raftka):
                assert name in defaults, f"{title}: {name} is not a {kind} keyword"
                covered.add(name)
    missing = sorted(set(defaults) - covered)
    assert not missing, f"{title}: {kind} keywords without a row: {missing}"


# -- command-line tools ---------------------------------------------------------------------

def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    sub = _subparsers(parser)
    if sub is None:
        return [path]
    out, seen = [], set()
    for name, child in sub.choices.items():
        if id(child) not in seen:
            seen.add(id(child))
            out += _leaves(child, path + (name,))
    return out


def _command(text: str) -> tuple[tuple[str, ...], argparse.ArgumentParser, list[str]]:
    """`raftka a b --x V` -> (("a", "b"), the leaf parser, ["--x"])."""
    from raftka.cli import build_parser
    words = shlex.split(text)
    assert words[0] == "raftka", text
    parser, path = build_parser(), []
    for word in words[1:]:
        sub = _subparsers(parser)
        if sub is None or word.startswith("-"):
            break
        assert word in sub.choices, f"`{text}`: no command {' '.join(path + [word])}"
        parser = sub.choices[word]
        path.append(word)
    assert _subparsers(parser) is None, f"`{text}` names no single command"
    return tuple(path), parser, [w for w in words if w.startswith("--")]


def test_every_command_named_parses_with_its_flags_and_every_command_has_a_row():
    from raftka.cli import build_parser
    title = "Command-line tools"
    rows = table(title)
    check_shape(title, rows, empty_difference_ok=True)
    covered = set()
    for kafka, raftka, difference in rows:
        commands = [n for n in names(raftka) if n.startswith("raftka ")]
        assert commands or raftka == ABSENT, f"{title}: {raftka}"
        first = None
        for text in commands:
            path, parser, flags = _command(text)
            known = {s for a in parser._actions for s in a.option_strings}
            unknown = [f for f in flags if f not in known]
            assert not unknown, f"`{text}`: raftka {' '.join(path)} has no {unknown}"
            covered.add(path)
            first = first or parser
        if first is None:
            continue
        # "no `--x`, `--y`" and "`--x` is not taken": those flags must really be absent.
        known = {s for a in first._actions for s in a.option_strings}
        for clause in difference.split(";"):
            claim = clause.split(":")[0]
            if claim.strip().startswith("no ") or "not taken" in claim:
                taken = [f for f in names(claim) if f.startswith("--") and f.split()[0] in known]
                assert not taken, f"{title}: {kafka} says {taken} are not taken, but they are"
    missing = [" ".join(p) for p in _leaves(build_parser()) if p not in covered]
    assert not missing, f"{title}: commands without a row: {missing}"


# -- APIs -------------------------------------------------------------------------------------

def test_every_api_raftka_knows_is_a_row_and_every_absent_one_is_unknown():
    from raftka.common.api import API_NAMES
    title = "APIs"
    rows = table(title)
    check_shape(title, rows, empty_difference_ok=True)
    known = set(API_NAMES.values())
    covered = set()
    for kafka, raftka, _ in rows:
        for api in names(kafka):
            if raftka == "same":
                assert api in known, f"{title}: {api} is not an API Raftka knows"
                covered.add(api)
            else:
                assert raftka == ABSENT, f"{title}: {raftka}"
                assert api not in known, f"{title}: {api} is known to common/api.py, yet marked absent"
    missing = sorted(known - covered)
    assert not missing, f"{title}: APIs without a row: {missing}"


# -- metrics (a live broker and controller) -------------------------------------------------

@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory("ecosystem", controllers=1, brokers=1)


def _families(address: str) -> set[str]:
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    return set(re.findall(r"^# TYPE (\S+) \S+$", text, re.M))


@pytest.mark.timeout(120)
def test_every_metric_family_exposed_is_a_row_and_every_one_named_is_exposed(cluster):
    title = "Metrics"
    rows = table(title)
    check_shape(title, rows, empty_difference_ok=True)  # JMX -> Prometheus: said once, above the table
    exposed = set()
    for node in cluster.controller_ids + cluster.broker_ids:
        exposed |= _families(cluster.http_address(node))
    assert {"raftka_broker_requests_total", "raftka_controller_active"} <= exposed, exposed
    named = {n for _, raftka, _ in rows for n in names(raftka)}
    assert not sorted(named - exposed), f"{title}: named but not exposed: {sorted(named - exposed)}"
    assert not sorted(exposed - named), f"{title}: exposed without a row: {sorted(exposed - named)}"


# -- Spark ------------------------------------------------------------------------------------

def test_every_spark_option_is_a_row_and_each_row_is_what_the_source_takes():
    from raftka.spark import options
    title = "Spark options"
    rows = table(title)
    check_shape(title, rows)
    own = {o.lower() for o in options.READ_OPTIONS + options.WRITE_OPTIONS + options.SPARK_STREAM_WRITE_OPTIONS}
    passthrough = options.CONSUMER_PASSTHROUGH | options.PRODUCER_PASSTHROUGH | options.SECURITY

    def taken(option: str) -> bool:
        if option.lower() in own:
            return True
        return option.startswith("kafka.") and option[len("kafka."):] in passthrough

    mentioned = set()
    for kafka, raftka, difference in rows:
        for option in names(kafka) + names(raftka):
            mentioned.add(option.lower())
        for option in names(kafka):
            if raftka == "same":
                assert taken(option), f"{title}: {option} is not an option of the raftka source"
            elif raftka == "refused":
                assert not taken(option), f"{title}: {option} is taken, yet marked refused"
                key = option[len("kafka."):] if option.startswith("kafka.") else None
                assert option.lower() in options.NOT_SUPPORTED or key in options.FORBIDDEN, (
                    f"{title}: {option} is refused only as unknown, without its reason")
        if kafka == ABSENT:
            assert all(taken(o) for o in names(raftka)), f"{title}: {raftka}"
        mentioned |= {n.lower() for n in names(difference)}
    expected = own | set(options.NOT_SUPPORTED) | {f"kafka.{k}" for k in options.FORBIDDEN} | {
        f"kafka.{k}" for k in passthrough}
    missing = sorted(expected - mentioned)
    assert not missing, f"{title}: options without a row: {missing}"
