"""common/event_loop.py: which loop the servers and the blocking client run on."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import uvloop  # a dependency on Linux: its absence is a broken install, not a skip

from raftka.common import event_loop
from raftka.common.errors import ConfigError



def test_uvloop_by_default(monkeypatch):
    monkeypatch.delenv(event_loop.EVENT_LOOP_ENV, raising=False)
    assert event_loop.event_loop_name() == "uvloop"
    loop = event_loop.new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_asyncio_when_asked(monkeypatch):
    monkeypatch.setenv(event_loop.EVENT_LOOP_ENV, "asyncio")
    loop = event_loop.new_event_loop()
    try:
        assert not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


@pytest.mark.parametrize("name", ["uvloop", "asyncio"])
def test_run_returns_the_result_on_that_loop(monkeypatch, name):
    monkeypatch.setenv(event_loop.EVENT_LOOP_ENV, name)

    async def main():
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop())

    assert (event_loop.run(main()) is uvloop.Loop) == (name == "uvloop")


def test_unknown_loop_is_a_config_error(monkeypatch):
    monkeypatch.setenv(event_loop.EVENT_LOOP_ENV, "tokio")
    with pytest.raises(ConfigError, match="RAFTKA_EVENT_LOOP.*'tokio'"):
        event_loop.new_event_loop()


def test_blocking_client_thread_runs_on_uvloop(monkeypatch):
    from raftka.client._sync import LoopThread
    monkeypatch.delenv(event_loop.EVENT_LOOP_ENV, raising=False)
    thread = LoopThread("test-loop")
    try:
        assert isinstance(thread.loop, uvloop.Loop)
    finally:
        thread.stop()


def test_server_with_a_bad_loop_setting_exits_with_a_message(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("process.roles=controller\nnode.id=1\n"
                      "controller.quorum.voters=1@127.0.0.1:1\n"
                      "listeners=CONTROLLER://127.0.0.1:0\n"
                      f"log.dirs={tmp_path / 'data'}\n")
    out = subprocess.run([sys.executable, "-m", "raftka", "server", "--config", str(config)],
                         capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, event_loop.EVENT_LOOP_ENV: "tokio"})
    assert out.returncode != 0
    assert "RAFTKA_EVENT_LOOP" in out.stderr and "Traceback" not in out.stderr, out.stderr
