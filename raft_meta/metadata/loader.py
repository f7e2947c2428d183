"""MetadataLoader: replays metadata-log entries into the current MetadataImage.

It is the metadata state machine behind ``ControllerStateMachine`` (controller/state.py) on
every voter, observer and broker: ``apply(payload, offset)`` decodes one entry (records.py),
replays its records into a ``MetadataDelta`` atomically and publishes the next image as
``loader.image`` (one reference swap: readers on other threads always see a whole image).

    apply(payload, offset) -> list of per-record results, or {"error": code, "message": ...}
                              when the entry does not apply (the image then only moves its
                              offset). Never raises.
    snapshot() -> bytes      the image (image.py's ``image_to_bytes``)
    restore(bytes)           the image from a snapshot

Brokers fetching many entries at once group them: ``begin_batch()``, ``apply`` ...,
``end_batch() -> (delta, image)``: one delta (and one new image) for the whole batch, which is
what ``on_metadata_update(delta, image)`` receives. While a batch is open, ``image`` is the
image before the batch.
"""
from __future__ import annotations

import logging
from typing import Any

from raftka.common import errors
from raftka.raft_meta.metadata.delta import MetadataDelta
from raftka.raft_meta.metadata.image import MetadataImage, image_from_bytes, image_to_bytes
from raftka.raft_meta.metadata.records import MetadataRecordError, decode_entry

log = logging.getLogger(__name__)


class MetadataLoader:
    """The current image and its replay; see the module docstring. One writer thread."""

    def __init__(self, image: MetadataImage = MetadataImage.EMPTY) -> None:
        self.image = image
        self._batch: MetadataDelta | None = None

    def apply(self, payload: bytes, offset: int) -> Any:
        delta = self._batch if self._batch is not None else MetadataDelta(self.image)
        try:
            records = decode_entry(payload)
        except MetadataRecordError as error:
            result: Any = {"error": error.code, "message": f"metadata entry at offset {offset}: {error.message}"}
            records = []
        except Exception as error:  # never out of apply (tick thread)
            result = {"error": errors.INVALID_REQUEST, "message": f"metadata entry at offset {offset}: {error!r}"}
            records = []
        if records:
            savepoint = delta.savepoint()
            result = []
            for record in records:
                outcome = delta.replay(record, offset)
                if "error" in outcome:
                    delta.rollback(savepoint)
                    result = outcome
                    break
                result.append(outcome)
        delta.offset = max(delta.offset, offset)
        if self._batch is None:
            self.image = delta.apply()
        return result

    def begin_batch(self) -> None:
        assert self._batch is None, "a batch is already open"
        self._batch = MetadataDelta(self.image)

    def end_batch(self) -> tuple[MetadataDelta, MetadataImage]:
        delta, self._batch = self._batch, None
        assert delta is not None, "no batch open"
        self.image = delta.apply()
        return delta, self.image

    def snapshot(self) -> bytes:
        image = self._batch.apply() if self._batch is not None else self.image
        return image_to_bytes(image)

    def restore(self, snapshot: bytes) -> None:
        self.image = image_from_bytes(snapshot)
        if self._batch is not None:
            self._batch = MetadataDelta(self.image)
