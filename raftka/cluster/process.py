"""One local subprocess, whose output goes to a sink chosen by its starter, and the waits around it.

A process runs in its own session (a test's Ctrl-C does not reach it twice; signals go to its
PID alone). Its stdout and stderr go to one of two sinks:

- ``"pipe"`` (the default, for tests and tools): a thread reads them into memory (the last
  OUTPUT_LINES_MAX lines) and copies them to ``log_path`` when given. ``stdin=True`` adds a pipe
  to write to (``send_line``, ``request_json``). The pipe ties the process to its starter.
- ``"log"`` (for cluster nodes): the child writes straight to ``log_path``, after a header line;
  no pipe, so the process outlives its starter (``raftka cluster up`` exits, the cluster runs
  on) and a later process adopts it by PID (``Process.attach``), reading its output back from
  the file. Starting one raises this process's open-files soft limit to the hard limit first
  (``raise_open_files_limit``), which the node inherits; a tool that knows it needs more (``raftka
  perf partitions``) raises the hard limit too, before it starts nodes.

Either way: ``alive``, ``paused``, ``kill`` (SIGKILL), ``pause``/``resume`` (SIGSTOP/SIGCONT),
``terminate``, ``stop`` (SIGTERM, then SIGKILL), ``wait_exit``, ``wait_for_line``, ``lines``,
``output``.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from raftka.cluster.errors import ClusterError, NodeExitedError

OUTPUT_LINES_MAX = 10_000  # per process, oldest dropped
STOP_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 60.0  # a cold Python start on a loaded 2-core box can take seconds
LOG_TAIL_BYTES_MAX = 4 * 1024 * 1024  # ``lines``/``output`` read at most this much of a log file
POLL_INTERVAL_S = 0.05
# When the hard limit is unlimited: Linux's default fs.nr_open, the most a soft limit may be.
OPEN_FILES_UNLIMITED_SOFT = 1_048_576

PIPE = "pipe"
LOG = "log"


def raise_open_files_limit(needed: int | None = None) -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit, so the nodes it starts inherit
    it: a broker keeps a file open per log segment of every replica it holds, up to
    ``log.open.files.max`` (derived from this limit by default), so 10,000 partitions (RF 3, 3
    brokers) on the common soft limit of 1,024 would reopen segment files all the time. With ``needed`` above
    the hard limit, the hard limit is raised as well, up to fs.nr_open (the kernel allows that
    to root, or with CAP_SYS_RESOURCE); ClusterError, one line, when the soft limit stays below
    ``needed``. Returns (soft, hard) after the attempt; a limit the kernel refuses is otherwise
    left as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed is not None and hard != resource.RLIM_INFINITY and needed > hard:
        ceiling = _nr_open()
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, min(max(needed, hard), ceiling)))
        except (ValueError, OSError):
            pass  # not root: judged below
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_UNLIMITED_SOFT if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed is not None and soft != resource.RLIM_INFINITY and soft < needed:
        why = (f"fs.nr_open is {_nr_open():,}" if needed > _nr_open()
               else "raising the hard limit needs CAP_SYS_RESOURCE (root outside a container)")
        raise ClusterError(f"open files: {needed:,} needed per node, the limit stays at {soft:,} (hard {hard:,}): "
                           f"{why}; raise it (ulimit -Hn / -n, or fs.nr_open) before starting")
    return soft, hard


def _nr_open() -> int:
    """The kernel's ceiling for RLIMIT_NOFILE (Linux's default when unreadable)."""
    try:
        return int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return OPEN_FILES_UNLIMITED_SOFT


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


def python_argv(*args: str) -> list[str]:
    """Run with this interpreter (the project's venv), unbuffered."""
    return [sys.executable, "-u", *args]


def project_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: this one's, unbuffered. Children run this
    interpreter (``python_argv``), so they import the same installed raftka."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def pid_state(pid: int) -> str | None:
    """The kernel's one-letter state of ``pid`` (R, S, T, Z, ...), or None when there is no such
    process. Falls back to ``os.kill(pid, 0)`` (state "?") where /proc is missing."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return "?"
        return "?"
    return stat.rsplit(")", 1)[1].split()[0]  # the command name in ( ) may hold spaces


def pid_is_ours(pid: int, marker: str) -> bool:
    """True when ``pid`` is a live (not zombie) process whose command line contains ``marker``
    (a node's config path): a PID recorded by an earlier run may since have been reused."""
    state = pid_state(pid)
    if state is None or state in ("Z", "X"):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask ps
        run = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True)
        cmdline = run.stdout
    return marker in cmdline


class _PipeOutput:
    """The "pipe" sink: a daemon thread reads the child's output lines into memory (and appends
    them to ``copy_to`` when given)."""

    def __init__(self, name: str, stream: Any, copy_to: Path | None) -> None:
        self._stream = stream
        self._copy_to = copy_to
        self._lines: list[str] = []
        self._lines_changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, name=f"out-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        log_file = open(self._copy_to, "a", encoding="utf-8") if self._copy_to else None
        try:
            for line in self._stream:
                line = line.rstrip("\n")
                if log_file:
                    log_file.write(line + "\n")
                    log_file.flush()
                with self._lines_changed:
                    self._lines.append(line)
                    if len(self._lines) > OUTPUT_LINES_MAX:
                        del self._lines[: len(self._lines) - OUTPUT_LINES_MAX]
                    self._lines_changed.notify_all()
        finally:
            if log_file:
                log_file.close()
            with self._lines_changed:
                self._lines_changed.notify_all()

    def lines(self) -> list[str]:
        with self._lines_changed:
            return list(self._lines)

    def wait_for_line(self, process: "Process", predicate: Callable[[str], bool], timeout_s: float,
                      start: int) -> str:
        deadline = time.monotonic() + timeout_s
        seen = start
        with self._lines_changed:
            while True:
                while seen < len(self._lines):
                    line = self._lines[seen]
                    seen += 1
                    if predicate(line):
                        return line
                # Exited and every line read: the line will never come.
                if not process.alive() and not self._reader.is_alive():
                    raise NodeExitedError(f"{process.name} exited with {process.returncode} before the "
                                          f"expected line; last output:\n{process.output()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{process.name}: expected line not seen within {timeout_s} s; "
                                       f"last output:\n{process.output()}")
                self._lines_changed.wait(min(remaining, 0.2))


class _LogOutput:
    """The "log" sink: the child writes to ``path`` itself; lines are read back from the file,
    from ``offset`` (where this incarnation's output begins)."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path = path
        self.offset = offset

    def _read(self, start: int, limit: int | None = None) -> tuple[bytes, int]:
        """Bytes of the log from ``start`` (at most ``limit``) and the position after them."""
        try:
            with open(self.path, "rb") as log:
                log.seek(start)
                data = log.read() if limit is None else log.read(limit)
        except FileNotFoundError:
            return b"", start
        return data, start + len(data)

    def lines(self) -> list[str]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        start = max(self.offset, size - LOG_TAIL_BYTES_MAX)
        data, _ = self._read(start)
        lines = data.decode(errors="replace").splitlines()
        if start > self.offset and lines:
            lines = lines[1:]  # cut mid-line
        return lines[-OUTPUT_LINES_MAX:]

    def wait_for_line(self, process: "Process", predicate: Callable[[str], bool], timeout_s: float,
                      start: int) -> str:
        deadline = time.monotonic() + timeout_s
        position, pending, seen = self.offset, b"", 0
        while True:
            exited = not process.alive()  # checked before reading: a line written before exit is seen
            data, position = self._read(position, LOG_TAIL_BYTES_MAX)
            pending += data
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                seen += 1
                line = raw.decode(errors="replace")
                if seen > start and predicate(line):
                    return line
            if exited and not data:
                code = process.returncode
                raise NodeExitedError(
                    f"{process.name} exited{f' with code {code}' if code is not None else ''} before it was "
                    f"ready (see {self.path})\nlast output:\n{process.output()}")
            if data:
                continue  # more may be there already
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{process.name}: expected line not seen within {timeout_s} s (see "
                                   f"{self.path})\nlast output:\n{process.output()}")
            time.sleep(POLL_INTERVAL_S)


class Process:
    """One subprocess and its output sink (see the module docstring).

        Process("proxy", argv, env=project_env(), log_path=root / "proxy.log")      # pipe
        Process(spec.name, argv, sink="log", log_path=spec.log_path, marker=config)  # outlives us

    ``marker``: a string of the command line (a node's config path) that ``attach`` checks
    before it trusts a recorded PID. ``wait_for_line`` raises NodeExitedError when the process
    exits before the line, TimeoutError after ``timeout_s``.
    """

    def __init__(self, name: str, argv: Sequence[str], *, sink: str = PIPE,
                 log_path: str | os.PathLike[str] | None = None, marker: str | None = None,
                 cwd: str | None = None, env: dict[str, str] | None = None, stdin: bool = False) -> None:
        if sink not in (PIPE, LOG):
            raise ValueError(f"sink {sink!r}: use {PIPE!r} or {LOG!r}")
        if sink == LOG and (log_path is None or stdin):
            raise ValueError("the log sink needs log_path and takes no stdin")
        self.name = name
        self.argv = list(argv)
        self.sink = sink
        self.log_path = Path(log_path) if log_path is not None else None
        self.marker = marker if marker is not None else " ".join(self.argv)
        self._output: _PipeOutput | _LogOutput
        self.popen: subprocess.Popen[Any] | None
        if sink == PIPE:
            self.log_offset = 0
            self.popen = subprocess.Popen(
                self.argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True, bufsize=1,
                start_new_session=True)
            self._output = _PipeOutput(name, self.popen.stdout, self.log_path)
        else:
            assert self.log_path is not None
            raise_open_files_limit()  # a node: inherits the raised limit
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as log:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                log.write(f"=== raftka.cluster: starting {name} at {stamp}: {' '.join(self.argv)}\n".encode())
                log.flush()
                self.log_offset = log.tell()
                self.popen = subprocess.Popen(self.argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
            self._output = _LogOutput(self.log_path, self.log_offset)
        self.pid = self.popen.pid

    @classmethod
    def attach(cls, name: str, pid: int, argv: Sequence[str], log_path: str | os.PathLike[str],
               log_offset: int, marker: str) -> "Process":
        """Adopt a "log" sink process started by another run (not our child: no exit code;
        ``alive()`` also checks that ``pid`` still runs a command line holding ``marker``)."""
        process = cls.__new__(cls)
        process.name = name
        process.argv = list(argv)
        process.sink = LOG
        process.log_path = Path(log_path)
        process.marker = marker
        process.log_offset = log_offset
        process.popen = None
        process.pid = pid
        process._output = _LogOutput(process.log_path, log_offset)
        return process

    # -- state --
    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_is_ours(self.pid, self.marker)

    def paused(self) -> bool:
        """Stopped by SIGSTOP (``pause``) and not resumed."""
        return self.alive() and pid_state(self.pid) == "T"

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode if self.popen is not None else None

    # -- signals: only to a process that is still ours (never to a reused PID) --
    def _signal(self, sig: int) -> bool:
        if not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        """kill -9 and wait until it is gone."""
        self._signal(signal.SIGKILL)
        self.wait_exit(STOP_TIMEOUT_S)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def terminate(self) -> None:
        """SIGCONT (in case it is paused), then SIGTERM; does not wait."""
        if self._signal(signal.SIGCONT):
            self._signal(signal.SIGTERM)

    def wait_exit(self, timeout_s: float) -> bool:
        """Wait until the process has exited (reaped if it is our child); False on timeout."""
        if self.popen is not None:
            try:
                self.popen.wait(timeout_s)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout_s
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_INTERVAL_S)
        return True

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (after SIGCONT), SIGKILL if it has not exited within ``timeout_s``; returns the
        exit code when it is our child."""
        self.terminate()
        if not self.wait_exit(timeout_s):
            self._signal(signal.SIGKILL)
            self.wait_exit(timeout_s)
        if self.popen is not None and self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        return self.returncode

    # -- output --
    @property
    def lines(self) -> list[str]:
        """This incarnation's output lines (the last ``OUTPUT_LINES_MAX``)."""
        return self._output.lines()

    def output(self, last: int = 40) -> str:
        return "\n".join(self.lines[-last:])

    def wait_for_line(self, predicate: Callable[[str], bool], timeout_s: float, *, start: int = 0) -> str:
        """The first output line (from line number ``start`` of this incarnation) matching
        ``predicate``."""
        return self._output.wait_for_line(self, predicate, timeout_s, start)

    def send_line(self, text: str) -> None:
        assert self.popen is not None and self.popen.stdin is not None, "started without stdin=True"
        self.popen.stdin.write(text + "\n")
        self.popen.stdin.flush()

    def request_json(self, text: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """Send one line and return the next JSON object line the process prints."""
        start = len(self.lines)
        self.send_line(text)
        line = self.wait_for_line(lambda l: l.startswith("{"), timeout_s, start=start)
        return json.loads(line)


def stop_all(processes: Iterable[Any]) -> None:
    """Stop processes one by one (SIGTERM, then SIGKILL); never raises."""
    for process in processes:
        try:
            process.stop()
        except Exception:
            pass


def stop_together(processes: Iterable[Any], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM every live process at once, wait for all within ``timeout_s``, SIGKILL the rest
    (:class:`Process`'s ``terminate``/``wait_exit``); never raises."""
    live = []
    for process in processes:
        try:
            if process.alive():
                process.terminate()
                live.append(process)
        except Exception:
            pass
    deadline = time.monotonic() + timeout_s
    for process in live:
        try:
            if not process.wait_exit(max(0.0, deadline - time.monotonic())):
                process.kill()
        except Exception:
            pass
