"""Follow the committed metadata log from the controllers (what a broker does), on asyncio.

    fetcher = MetadataFetcher(["127.0.0.1:9401", ...], replica_id=broker_id,
                              on_metadata_update=lambda delta, image: ...)
    task = asyncio.create_task(fetcher.run())
    ...  fetcher.image is the broker's local MetadataImage
    await fetcher.close()

The fetcher long-polls one controller's Fetch (see service.fetch_metadata), replays records in
log order on the event loop thread (no pysyncobj thread involved) into its own
``ControllerStateMachine(MetadataLoader())`` (or the ``state`` passed in), restores a snapshot
when the controller sends one, and after each fetched batch calls, on the loop:

- ``on_metadata_update(delta, image)``: ``delta`` (a MetadataDelta) holds what the batch changed,
  ``image`` is the new image; after a snapshot restore the delta goes from the old image to the
  restored one, so ``delta.local_changes(broker_id)`` is right either way;
- ``on_update(offset)``: the last applied offset (of any record kind).

A callback that raises is logged and does not stop the fetcher. Any controller serves the same
committed log with the same offsets, so on an error the fetcher moves to the next bootstrap
controller (after ``retry_backoff_ms``) and goes on from its own offset.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Sequence

from raftka.common import errors
from raftka.common.errors import RaftkaError
from raftka.common.transport import call
from raftka.raft_meta.metadata.state import ControllerStateMachine
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage
from raftka.raft_meta.metadata.loader import MetadataLoader

log = logging.getLogger(__name__)

API_FETCH = 1


MetadataUpdate = Callable[[MetadataDelta, MetadataImage], None]


class MetadataFetcher:
    """A broker's follower of the committed metadata log; see the module docstring."""

    def __init__(self, bootstrap: Sequence[str], state: ControllerStateMachine | None = None, *,
                 replica_id: int | None = None, on_metadata_update: MetadataUpdate | None = None,
                 on_update: Callable[[int], None] | None = None,
                 max_wait_ms: int = 500, max_records: int = 5000, request_timeout_ms: int = 5000,
                 retry_backoff_ms: int = 100) -> None:
        assert bootstrap, "at least one controller address"
        assert request_timeout_ms > max_wait_ms
        self.bootstrap = list(bootstrap)
        self.state = state if state is not None else ControllerStateMachine(MetadataLoader())
        assert isinstance(self.state.metadata, MetadataLoader), "the fetcher replays into a MetadataLoader"
        self.loader: MetadataLoader = self.state.metadata
        self.replica_id = replica_id
        self.on_metadata_update = on_metadata_update
        self.on_update = on_update
        self.max_wait_ms = max_wait_ms
        self.max_records = max_records
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._next = 0
        self._closed = asyncio.Event()
        self.errors_seen = 0  # for tests and metrics

    async def fetch_once(self) -> int:
        """One fetch from the current controller; returns how many records were applied."""
        address = self.bootstrap[self._next % len(self.bootstrap)]
        body = {"fetch_offset": self.state.offset, "max_records": self.max_records,
                "max_wait_ms": self.max_wait_ms}
        if self.replica_id is not None:
            body["replica_id"] = self.replica_id
        code, out = await call(address, API_FETCH, body, timeout_ms=self.request_timeout_ms)
        if code != errors.NONE:
            raise errors.error_for(code, (out or {}).get("error_message"))
        records = out.get("records") if isinstance(out, dict) else None
        if not isinstance(records, list) or not all(
                isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[0], int) and isinstance(r[1], bytes)
                for r in records):
            raise errors.CorruptMessageError(f"malformed metadata Fetch answer from {address}")
        applied = 0
        before = self.loader.image
        restored = out.get("snapshot") is not None
        if restored:
            try:
                self.state.restore(out["snapshot"])
            except (ValueError, TypeError) as error:
                raise errors.CorruptMessageError(f"undecodable metadata snapshot from {address}: {error}") from None
            applied += 1
        self.loader.begin_batch()
        try:
            for offset, record in records:
                if offset <= self.state.offset:
                    continue  # already have it (an answer raced with a snapshot)
                self.state.apply(record, offset)
                applied += 1
        finally:
            delta, image = self.loader.end_batch()
        if not applied:
            return 0
        if restored:
            delta = MetadataDelta.between(before, image)
        if self.on_metadata_update is not None:
            try:
                self.on_metadata_update(delta, image)
            except Exception:
                log.exception("on_metadata_update failed at offset %d", image.offset)
        if self.on_update is not None:
            try:
                self.on_update(self.state.offset)
            except Exception:
                log.exception("on_update failed at offset %d", self.state.offset)
        return applied

    @property
    def image(self) -> MetadataImage:
        """The local metadata image (committed metadata records up to ``image.offset``)."""
        return self.loader.image

    @property
    def offset(self) -> int:
        """The last committed offset applied, of any record kind (what BrokerHeartbeat reports
        as ``current_metadata_offset``); >= ``image.offset``."""
        return self.state.offset

    async def run(self) -> None:
        while not self._closed.is_set():
            try:
                await self.fetch_once()
            except (RaftkaError, OSError) as error:
                self.errors_seen += 1
                log.debug("metadata fetch from %s failed: %s", self.bootstrap[self._next % len(self.bootstrap)], error)
                self._next += 1
                try:
                    await asyncio.wait_for(self._closed.wait(), self.retry_backoff_ms / 1000)
                except asyncio.TimeoutError:
                    pass

    async def close(self) -> None:
        self._closed.set()
