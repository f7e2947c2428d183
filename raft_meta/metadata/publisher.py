"""Hand metadata updates from the Raft tick thread to an asyncio loop (Kafka's MetadataPublisher).

A controller, a combined-mode broker or a pysyncobj read-only observer replays the metadata log
on pysyncobj's tick thread (raft.py). Code living on an event loop must not run there, so:

    publisher = LoopPublisher(state, loop, on_metadata_update)   # state: ControllerStateMachine

After records are applied, ``on_metadata_update(delta, image)`` runs **on ``loop``**, where
``delta`` (a MetadataDelta) goes from the last image published to the current one. Updates are
coalesced: while a call is pending, more applies only move the image it will publish forward,
so a slow callback never builds up a queue. A MetadataFetcher needs none of this: it already
replays on its own loop.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable

from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage

log = logging.getLogger(__name__)

MetadataUpdate = Callable[[MetadataDelta, MetadataImage], None]


class LoopPublisher:
    """Publishes the image of ``state.metadata`` (a MetadataLoader) to a callback on ``loop``."""

    def __init__(self, state: Any, loop: asyncio.AbstractEventLoop, on_metadata_update: MetadataUpdate, *,
                 published: MetadataImage = MetadataImage.EMPTY) -> None:
        self.loader = state.metadata
        self.loop = loop
        self.on_metadata_update = on_metadata_update
        self.published = published  # the image the callback last saw (loop thread only)
        self._scheduled = False
        self._lock = threading.Lock()
        self._closed = False
        state.add_listener(self._on_apply)
        self._schedule()  # publish what is there already

    def close(self) -> None:
        """Stop publishing (the listener stays registered but does nothing)."""
        self._closed = True

    def _on_apply(self, offset: int, kind: Any, result: Any) -> None:  # tick thread
        self._schedule()

    def _schedule(self) -> None:
        with self._lock:
            if self._scheduled or self._closed:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._publish)
        except RuntimeError:  # the loop is closed: nobody to publish to
            self._closed = True

    def _publish(self) -> None:  # loop thread
        with self._lock:
            self._scheduled = False
        if self._closed:
            return
        image = self.loader.image  # one reference read: always a whole image
        if image is self.published:
            return
        delta = MetadataDelta.between(self.published, image)
        self.published = image
        try:
            self.on_metadata_update(delta, image)
        except Exception:
            log.exception("on_metadata_update failed at offset %d", image.offset)
