"""The cluster API: start, stop, kill, pause and restart Raftka processes on this machine.

Used by tests, scripts and the chaos harness, so that starting and killing real processes is
written once. Every process is a real subprocess on 127.0.0.1 with ports chosen at run time
(below 32768, outside Linux's ephemeral range, so a port we picked is not taken by an outgoing
connection meanwhile). Every wait has a timeout; ``Cluster.close()`` stops every process it
started, by PID.

    with ControllerCluster.start(tmp_path, voters=3) as cluster:
        leader = cluster.wait_for_leader(timeout_s=15)
        cluster.kill(leader)               # kill -9
        cluster.restart(leader)
"""
from __future__ import annotations

import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

PORT_MIN = 20000
PORT_MAX = 32000  # exclusive; below the ephemeral range (32768+)
PORT_ATTEMPTS_MAX = 500
OUTPUT_LINES_MAX = 10_000  # per process, oldest dropped
STOP_TIMEOUT_S = 10.0

_ports_lock = threading.Lock()
_ports_given: set[int] = set()


def free_ports(count: int, *, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct TCP ports in [PORT_MIN, PORT_MAX) that are free right now on 127.0.0.1.

    Ports handed out earlier in this process are not handed out again, so two clusters in one
    test run do not collide even before their processes bind.
    """
    rng = rng or random.Random()
    ports: list[int] = []
    with _ports_lock:
        for _ in range(PORT_ATTEMPTS_MAX):
            if len(ports) == count:
                break
            port = rng.randrange(PORT_MIN, PORT_MAX)
            if port in _ports_given or port in ports:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            ports.append(port)
        if len(ports) < count:
            raise RuntimeError(f"found only {len(ports)} of {count} free ports after {PORT_ATTEMPTS_MAX} tries")
        _ports_given.update(ports)
    return ports


def wait_until(predicate: Callable[[], Any], timeout_s: float, *, interval_s: float = 0.05,
               what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as error:  # e.g. connection refused while a process starts
            last_error = error
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s} s"
                               + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval_s)


class Process:
    """One subprocess with its stdout+stderr lines collected by a reader thread.

    ``wait_for_line(pred, timeout_s)`` waits for a matching output line; ``kill()`` sends SIGKILL,
    ``pause()``/``resume()`` SIGSTOP/SIGCONT, ``stop()`` SIGTERM then SIGKILL after a timeout.
    """

    def __init__(self, name: str, argv: Sequence[str], *, cwd: str | None = None,
                 env: dict[str, str] | None = None, stdin: bool = False,
                 log_path: str | os.PathLike[str] | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path) if log_path is not None else None
        self._lines: list[str] = []
        self._lines_lock = threading.Condition()
        self._stdout_queue: queue.Queue[str] = queue.Queue(maxsize=OUTPUT_LINES_MAX)
        self.popen = subprocess.Popen(
            self.argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True, bufsize=1,
            start_new_session=True)  # its own process group: a test's Ctrl-C does not hit it twice
        self.pid = self.popen.pid
        self._reader = threading.Thread(target=self._read, name=f"out-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        log_file = open(self.log_path, "a", encoding="utf-8") if self.log_path else None
        try:
            for line in self.popen.stdout:
                line = line.rstrip("\n")
                if log_file:
                    log_file.write(line + "\n")
                    log_file.flush()
                with self._lines_lock:
                    self._lines.append(line)
                    if len(self._lines) > OUTPUT_LINES_MAX:
                        del self._lines[: len(self._lines) - OUTPUT_LINES_MAX]
                    self._lines_lock.notify_all()
                try:
                    self._stdout_queue.put_nowait(line)
                except queue.Full:
                    pass
        finally:
            if log_file:
                log_file.close()
            with self._lines_lock:
                self._lines_lock.notify_all()

    @property
    def lines(self) -> list[str]:
        with self._lines_lock:
            return list(self._lines)

    def output(self, last: int = 40) -> str:
        return "\n".join(self.lines[-last:])

    def wait_for_line(self, predicate: Callable[[str], bool], timeout_s: float, *, start: int = 0) -> str:
        """The first output line (from line number ``start``) matching ``predicate``."""
        deadline = time.monotonic() + timeout_s
        seen = start
        with self._lines_lock:
            while True:
                while seen < len(self._lines):
                    line = self._lines[seen]
                    seen += 1
                    if predicate(line):
                        return line
                if self.popen.poll() is not None and not self._reader.is_alive():
                    raise RuntimeError(f"{self.name} exited with {self.popen.returncode} before the "
                                       f"expected line; last output:\n{self.output()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.name}: expected line not seen within {timeout_s} s; "
                                       f"last output:\n{self.output()}")
                self._lines_lock.wait(min(remaining, 0.2))

    def send_line(self, text: str) -> None:
        assert self.popen.stdin is not None, "started without stdin=True"
        self.popen.stdin.write(text + "\n")
        self.popen.stdin.flush()

    def request_json(self, text: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """Send one line and return the next JSON object line the process prints."""
        start = len(self.lines)
        self.send_line(text)
        line = self.wait_for_line(lambda l: l.startswith("{"), timeout_s, start=start)
        return json.loads(line)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """kill -9 and reap."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.popen.wait(STOP_TIMEOUT_S)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (after SIGCONT, in case it is paused), SIGKILL if it has not exited in time."""
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGCONT)
                os.kill(self.pid, signal.SIGTERM)
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(timeout_s)
            except ProcessLookupError:
                pass
        if self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        return self.popen.returncode


def python_argv(*args: str) -> list[str]:
    """Run with this interpreter (the project's venv), unbuffered."""
    return [sys.executable, "-u", *args]


def project_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child: this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def stop_all(processes: Iterable[Process]) -> None:
    for process in processes:
        try:
            process.stop()
        except Exception:
            pass
