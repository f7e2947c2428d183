"""A bounded cache of open segment files (``log.open.files.max``).

A broker holds one ``.log`` file per segment of every replica; keeping each open for the
segment's life needs more descriptors than RLIMIT_NOFILE allows at tens of thousands of
partitions (and a container's hard limit cannot be raised). Each segment therefore owns a
``CachedFile``: its path and, while cached, an open descriptor. The ``FileHandleCache`` holds
at most ``open_files_max`` of them open; opening one more closes an idle one first.

Contract:
- Every system call on a segment file goes through its ``CachedFile`` (``pread``, ``write_at``,
  ``truncate``, ``fsync``, ``stat``, ``map_read``), which holds the file's own lock for the
  call and opens the file first when the cache closed it. The cache closes a descriptor only
  after taking that lock without waiting (a file in use is skipped), so no descriptor is closed
  while another thread uses it, and none is reused under a call that still holds its number.
- Cheap when cached: a call costs one uncontended lock and a flag store, no extra system call.
  Eviction is second chance (CLOCK), an approximation of least recently used: each use sets the
  file's ``referenced`` flag, and the cache, walking its files oldest first, passes over (and
  clears) a set flag once. Exact LRU would update the shared order on every read and append.
- Bound: at most ``open_files_max`` descriptors, except while every cached file is in use by
  another thread (a broker does its log I/O on one thread; the start-up log loading on
  ``num.recovery.threads.per.data.dir``): then the cache opens one more rather than wait.
- Durability: a file is ``unsynced`` from its opening (a crash before this process may have
  left its data in the page cache only) and after every write or truncation; ``fsync`` skips a
  file that is not, and reopens a closed one that is. On Linux dirty pages belong to the file, not
  the descriptor, so the fsync of a new descriptor writes what a closed one left (and since
  Linux 4.16 reports a writeback error no descriptor has seen yet). Eviction never fsyncs: with
  Kafka's default flush policy (never) every active segment is unsynced, and an fsync per
  eviction would put the disk on the append path.
- A file must stay at its path while its ``CachedFile`` lives: segments are never renamed, a
  partition directory is renamed for deletion only after its log is closed, and ``close``
  (segment deleted or closed) drops the descriptor for good; a later use raises EBADF-like
  ``OSError``.
"""
from __future__ import annotations

import mmap
import os
import resource
import threading
from collections import OrderedDict
from pathlib import Path

from raftka.common.errors import ConfigError

OPEN_FILES_MAX_CONFIG = "log.open.files.max"
# Descriptors left to everything else when the maximum is derived from RLIMIT_NOFILE: client
# and replication sockets, index and checkpoint files (opened briefly), the listeners, pipes.
# A quarter of the limit, at most 2,048 (max.connections defaults to 1,000 per listener).
OPEN_FILES_RESERVE_MAX = 2048
# RLIMIT_NOFILE reported as unlimited: Linux's default fs.nr_open, the most a process may open.
OPEN_FILES_UNLIMITED = 1_048_576
_CLOSED = -2  # CachedFile.fd after close(): never reopened


def open_files_soft_limit() -> int:
    """This process's RLIMIT_NOFILE soft limit (OPEN_FILES_UNLIMITED when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return OPEN_FILES_UNLIMITED if soft == resource.RLIM_INFINITY else soft


def default_open_files_max(soft_limit: int | None = None) -> int:
    """The soft limit minus a reserve for sockets and other files (module constants)."""
    soft = open_files_soft_limit() if soft_limit is None else soft_limit
    return max(1, soft - min(soft // 4, OPEN_FILES_RESERVE_MAX))


def resolve_open_files_max(value: int, soft_limit: int | None = None) -> int:
    """``log.open.files.max`` as configured -> the maximum to use: -1 derives it from the soft
    limit; a count must be at least 1 and below the soft limit (the files the reserve is for
    must still open). ConfigError otherwise."""
    soft = open_files_soft_limit() if soft_limit is None else soft_limit
    if value == -1:
        return default_open_files_max(soft)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(OPEN_FILES_MAX_CONFIG, f"must be a count of at least 1, or -1 to derive it from "
                                                 f"the open-files limit, got {value!r}")
    if value >= soft:
        raise ConfigError(OPEN_FILES_MAX_CONFIG,
                          f"{value} segment files do not fit in this process's open-files limit of {soft} "
                          f"(RLIMIT_NOFILE soft), which sockets and other files share; use at most "
                          f"{default_open_files_max(soft)} (-1 picks that) or raise the limit")
    return value


class CachedFile:
    """One segment file whose descriptor the cache may close while it is idle (see the module
    docstring). ``flags`` are those of every reopen (never O_CREAT: a deleted file stays gone)."""

    __slots__ = ("path", "cache", "flags", "fd", "lock", "referenced", "unsynced")

    def __init__(self, cache: "FileHandleCache", path: Path, flags: int) -> None:
        self.path = path
        self.cache = cache
        self.flags = flags
        self.fd = -1  # -1: not open (opened on use); _CLOSED: closed for good
        self.lock = threading.Lock()
        self.referenced = True
        self.unsynced = True  # until this process fsyncs it: a crash may have left data unsynced

    @property
    def closed(self) -> bool:
        return self.fd == _CLOSED

    def _fd(self) -> int:
        """The open descriptor (the caller holds ``lock``), opening the file when evicted.
        ``pread`` and ``write_at`` inline the cached case: they are the append and read path."""
        fd = self.fd
        if fd < 0:
            return self._reopen()
        self.referenced = True
        return fd

    def _reopen(self) -> int:
        if self.fd == _CLOSED:
            raise OSError(9, f"{self.path} was closed")
        self.referenced = True
        return self.cache._reopen(self)

    def pread(self, length: int, position: int) -> bytes:
        """``length`` bytes at ``position`` (fewer only at the end of the file)."""
        with self.lock:
            fd = self.fd
            if fd < 0:
                fd = self._reopen()
            else:
                self.referenced = True
            data = os.pread(fd, length, position)
            if len(data) == length or not data:
                return data
            chunks = [data]
            while length > len(data):
                position += len(data)
                length -= len(data)
                data = os.pread(fd, length, position)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks)

    def write_at(self, data: bytes, position: int) -> None:
        """Write all of ``data`` at ``position``; OSError when the disk makes no progress."""
        with self.lock:
            fd = self.fd
            if fd < 0:
                fd = self._reopen()
            else:
                self.referenced = True
            self.unsynced = True
            written = os.pwrite(fd, data, position)
            if written == len(data):
                return
            view = memoryview(data)
            while True:
                if written <= 0:
                    raise OSError(28, "no progress writing the segment (disk full?)")
                view = view[written:]
                position += written
                if not view:
                    return
                written = os.pwrite(fd, view, position)

    def truncate(self, size: int) -> None:
        with self.lock:
            self.unsynced = True
            os.ftruncate(self._fd(), size)

    def fsync(self) -> None:
        """Make what was written durable; a file with nothing unsynced is skipped (if closed,
        not reopened)."""
        with self.lock:
            if not self.unsynced:
                return
            fd = self._fd()
            self.unsynced = False
            try:
                os.fsync(fd)
            except OSError:
                self.unsynced = True
                raise

    def size(self) -> int:
        return self.stat().st_size

    def stat(self) -> os.stat_result:
        """The file's status, from the descriptor when open, else from the path (not reopened)."""
        with self.lock:
            return os.fstat(self.fd) if self.fd >= 0 else os.stat(self.path)

    def map_read(self, length: int) -> mmap.mmap:
        """A read-only map of the first ``length`` bytes (it holds a descriptor of its own, so
        the cache may close this one while the map is in use)."""
        with self.lock:
            return mmap.mmap(self._fd(), length, access=mmap.ACCESS_READ)

    def close(self) -> None:
        """Close the descriptor for good and leave the cache (segment closed or deleted)."""
        with self.lock:
            fd, self.fd = self.fd, _CLOSED
            self.cache._forget(self)
            if fd >= 0:
                os.close(fd)


class FileHandleCache:
    """At most ``open_files_max`` open segment files, process wide (see the module docstring).
    ``opens`` counts files opened on use (a loaded segment's first read, or after an eviction),
    ``evictions`` the descriptors the cache closed."""

    def __init__(self, open_files_max: int) -> None:
        if open_files_max < 1:
            raise ValueError(f"open_files_max must be at least 1, got {open_files_max}")
        self.open_files_max = open_files_max
        self._lock = threading.Lock()
        self._open: OrderedDict[CachedFile, None] = OrderedDict()  # oldest first
        self.opens = 0
        self.evictions = 0

    @property
    def open_count(self) -> int:
        return len(self._open)

    def set_max(self, open_files_max: int) -> None:
        """Change the maximum; closes idle files at once when it shrank."""
        if open_files_max < 1:
            raise ValueError(f"open_files_max must be at least 1, got {open_files_max}")
        with self._lock:
            self.open_files_max = open_files_max
            self._make_room(0)

    def open(self, path: Path, flags: int, mode: int = 0o644) -> CachedFile:
        """Open ``path`` now (e.g. O_CREAT | O_EXCL for a new segment) and cache it; reopens
        use ``flags`` without O_CREAT, O_EXCL and O_TRUNC."""
        file = CachedFile(self, path, flags & ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC))
        with self._lock:
            self._make_room(1)
            file.fd = os.open(path, flags, mode)
            self._open[file] = None
        return file

    def file(self, path: Path, flags: int) -> CachedFile:
        """``path``, not opened until first used."""
        return CachedFile(self, path, flags)

    def _reopen(self, file: CachedFile) -> int:
        """Open an evicted ``file`` (its lock is held by the caller)."""
        with self._lock:
            self._make_room(1)
            fd = os.open(file.path, file.flags)
            file.fd = fd
            self._open[file] = None
            self.opens += 1
        return fd

    def _forget(self, file: CachedFile) -> None:
        with self._lock:
            self._open.pop(file, None)

    def _make_room(self, needed: int) -> None:
        """Close idle files until ``needed`` more fit (the cache lock is held). Second chance:
        a referenced file goes to the back with its flag cleared; a file in use by another
        thread goes to the back as it is. Two passes at most, then the bound gives way."""
        files = self._open
        budget = 2 * len(files)
        while len(files) + needed > self.open_files_max and budget > 0:
            budget -= 1
            file, _ = files.popitem(last=False)
            if file.referenced:
                file.referenced = False
                files[file] = None
                continue
            if not file.lock.acquire(blocking=False):
                files[file] = None
                continue
            try:
                fd, file.fd = file.fd, -1
                self.evictions += 1
                if fd >= 0:
                    os.close(fd)
            except OSError:
                pass  # Linux frees the descriptor even then; a lost write is the next fsync's to report
            finally:
                file.lock.release()


_segment_files = FileHandleCache(default_open_files_max())


def segment_files() -> FileHandleCache:
    """The process-wide cache of segment files (descriptors are a per-process resource); the
    broker's LogManager sets its maximum from ``log.open.files.max``."""
    return _segment_files
