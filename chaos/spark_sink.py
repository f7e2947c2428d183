"""The Spark side of a chaos run (``raftka chaos run --spark``, scenario ``spark``).

A Spark streaming query copies the workload's topic into Parquet while the faults happen; at the
end its output must equal the committed log exactly. The query runs in its own process,
``raftka spark sink`` (spark/sink.py: format ``raftka`` from the earliest
offset -> Parquet with a checkpoint, a micro-batch every second, a failed query started again
from its checkpoint), never in the harness: a JVM does not belong in the runner, and the harness
reaches Spark only through the ``raftka`` command. It connects through the client proxies, so
the faults hit it as they hit every client. On a secure cluster it logs in as the cluster's admin
with ``--command-config OUT/cluster/client.properties`` (the file the secure kit writes, mode
600): the password stays in that file, never in the process's argv.

``SparkSink`` starts that process, follows its JSON lines (``started``, one ``batch`` per
completed micro-batch with its end offsets, ``restart``, ``stopped``), waits for its first
micro-batch with rows (before the faults start), waits after the final read until its last
batch reached the final high watermarks, stops it with SIGTERM (it then reads its own output
back with ``spark.read.parquet``, which skips files of aborted batches) and loads the rows.
Files under OUT/spark: ``parquet/``, ``checkpoint/``, ``spark.log`` (the JVM's log),
``sink.jsonl`` (its JSON lines), ``sink.stderr``, ``rows.json``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from raftka.cluster import project_env

TERM_WAIT_S = 15.0  # after SIGTERM on teardown, before SIGKILL
EXIT_AFTER_ROWS_S = 30.0  # after the rows are written, for the process (and its JVM) to exit
OUTPUT_LINES_MAX = 100_000  # JSON lines kept in memory (one per micro-batch)


class SinkError(RuntimeError):
    """The sink process failed, or did not do what was asked in time."""


class SparkSink:
    """One ``raftka spark sink`` process reading ``topic`` through ``bootstrap_servers``."""

    def __init__(self, out: str | Path, bootstrap_servers: str, topic: str, *, max_seconds: float,
                 trigger_ms: int = 1000, wait_topic_s: float = 0.0, command_config: str | Path | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.out = Path(out)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.command_config = command_config  # Kafka's client properties: the login, when the cluster is secure
        self.max_seconds = max_seconds
        self.trigger_ms = trigger_ms
        self.wait_topic_s = wait_topic_s
        self.on_event = on_event
        self.rows_path = self.out / "rows.json"
        self.log_path = self.out / "spark.log"
        self.process: subprocess.Popen[str] | None = None
        self.events: list[dict[str, Any]] = []
        self.end: dict[int, int] = {}  # the last completed batch's end offsets
        self.batches = 0  # distinct micro-batches completed
        self._batch_ids: set[Any] = set()
        self.restarts = 0
        self.rows_written = False
        self.started_at: float | None = None
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None
        self._stderr: Any = None

    def command(self) -> list[str]:
        """The sink process's argv (the login goes by file name only)."""
        command = [sys.executable, "-m", "raftka", "spark", "sink", "--bootstrap-server", self.bootstrap_servers,
                   "--topic", self.topic, "--output", str(self.out), "--rows-out", str(self.rows_path),
                   "--trigger-ms", str(self.trigger_ms), "--max-seconds", str(self.max_seconds),
                   "--wait-topic-s", str(self.wait_topic_s),
                   "--spark-log", str(self.log_path)]
        if self.command_config is not None:
            command += ["--command-config", str(self.command_config)]
        return command

    def start(self) -> None:
        """Start the process (returns at once; ``wait_first_rows`` waits for it to read)."""
        self.out.mkdir(parents=True, exist_ok=True)
        command = self.command()
        self._stderr = open(self.out / "sink.stderr", "w", encoding="utf-8")
        self.started_at = time.monotonic()
        # Its own session: a Ctrl-C meant for the runner does not reach it (the runner stops it),
        # and the teardown can end the JVM with it.
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL,
                                        text=True, env=project_env(), start_new_session=True)
        self._reader = threading.Thread(target=self._read, name="spark-sink-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with open(self.out / "sink.jsonl", "w", encoding="utf-8") as record:
            for line in self.process.stdout:
                record.write(line)
                record.flush()
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # not ours (a library printing to stdout)
                if not isinstance(event, dict) or "event" not in event:
                    continue
                with self._changed:
                    if len(self.events) < OUTPUT_LINES_MAX:
                        self.events.append(event)
                    if event["event"] == "batch":
                        self._batch_ids.add(event.get("batch"))
                        self.batches = len(self._batch_ids)
                        self.end = {int(p): int(o) for p, o in (event.get("end") or {}).items()}
                    elif event["event"] == "restart":
                        self.restarts = int(event.get("restarts", self.restarts + 1))
                    elif event["event"] == "stopped":
                        self.rows_written = True  # the last line: it said so after writing the rows file
                    self._changed.notify_all()
                if self.on_event is not None:
                    self.on_event(event)
        with self._changed:
            self._changed.notify_all()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _wait(self, done: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    return done()
                self._changed.wait(min(left, 1.0))
        return True

    def wait_first_rows(self, timeout_s: float) -> bool:
        """Until a micro-batch with rows completed (the JVM and Spark's Python workers are warm);
        False if none did within ``timeout_s``."""
        return self._wait(lambda: any(e["event"] == "batch" and e.get("rows") for e in self.events), timeout_s)

    def caught_up(self, high_watermarks: dict[int, int]) -> bool:
        return all(self.end.get(p, 0) >= hw for p, hw in high_watermarks.items())

    def wait_caught_up(self, high_watermarks: dict[int, int], timeout_s: float) -> bool:
        """Until the last completed micro-batch ends at or past every partition's high
        watermark; False if it did not within ``timeout_s`` (or the process ended)."""
        return self._wait(lambda: self.caught_up(high_watermarks), timeout_s)

    def stop(self, timeout_s: float) -> dict[str, Any]:
        """SIGTERM, wait for the process to read its output back and exit; the rows file's
        content. SinkError when it fails or its output is not written within ``timeout_s``.

        The output counts once the ``stopped`` event says the rows file is written: a JVM slow
        to shut down after that (seen on a loaded box) costs at most ``EXIT_AFTER_ROWS_S`` more,
        and ``close`` then ends it."""
        assert self.process is not None
        signalled = time.monotonic()
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        written = self._wait(lambda: self.rows_written, timeout_s)
        left = max(0.0, timeout_s - (time.monotonic() - signalled))
        try:
            code: int | None = self.process.wait(min(left, EXIT_AFTER_ROWS_S) if written else left)
        except subprocess.TimeoutExpired:
            if not written:
                last = self.events[-1]["event"] if self.events else "none"
                raise SinkError(f"the Spark sink did not stop within {timeout_s:.0f} s of SIGTERM (its last "
                                f"event: {last}; Spark's log: {self.log_path})") from None
            code = None  # the rows are written; the JVM is still shutting down
        if self._reader is not None and code is not None:
            self._reader.join(10)
        if code not in (0, None):
            raise SinkError(f"the Spark sink exited with status {code}" + self.exit_note())
        try:
            body = json.loads(self.rows_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise SinkError(f"the Spark sink's rows are unreadable: {error}") from None
        body["records"] = {int(p): rows for p, rows in body.get("records", {}).items()}
        body["stop_s"] = round(time.monotonic() - signalled, 1)
        return body

    def exit_note(self) -> str:
        """Why the process ended (status, last stderr line), or '' while it runs."""
        if self.process is None or self.process.poll() is None:
            return ""
        lines = [line.strip() for line in self._tail(self.out / "sink.stderr") if line.strip()]
        why = f": {lines[-1][:300]}" if lines else ""
        return f" (the process exited with status {self.process.returncode}{why}; Spark's log: {self.log_path})"

    @staticmethod
    def _tail(path: Path) -> list[str]:
        try:
            return path.read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
        except OSError:
            return []

    def close(self) -> None:
        """Make sure the process (and the JVM it started) is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(TERM_WAIT_S)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)  # its own session: it and its JVM
                except ProcessLookupError:
                    pass
                self.process.wait(10)
        if self._reader is not None:
            self._reader.join(5)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
