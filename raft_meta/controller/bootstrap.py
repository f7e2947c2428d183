"""The bootstrap records: committed once, by the first controller active on an empty metadata log.

``raftka cluster up --add-scram`` (and ``raftka storage format --add-scram``) write a bootstrap
file (common/meta_properties.py ``BOOTSTRAP_FILE``) into each controller's first log dir, as
``kafka-storage format --add-scram`` writes ``bootstrap.checkpoint``: SCRAM credentials a cluster
whose listeners all ask for a login needs before anyone can log in to create one.

``Bootstrap(controller)`` reads the file when the controller starts (a corrupt or unreadable one
is a ConfigError naming it: the controller does not start). ``ensure()`` runs on the active
controller before it handles any request that may commit (service.py ``before_commits``) and
from its periodic duties, so the bootstrap records come first in the log. It commits them only
if no metadata record was ever committed (image offset 0) and skips a credential the image
already holds: a second controller, a restart or a re-election commits nothing new, and a user
deleted later is not brought back. Before it looks at the image it commits this controller's
endpoint record again (idempotent, not a metadata record) as a barrier: once that is applied,
every entry an earlier leader committed is in the image.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from raftka.common.meta_properties import BOOTSTRAP_FILE, read_bootstrap
from raftka.raft_meta.metadata.records import UserScramCredentialRecord
from raftka.raft_meta.metadata.state import controller_record

log = logging.getLogger(__name__)


class Bootstrap:
    """The bootstrap records of one QuorumController (see the module docstring)."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        log_dirs = controller.config["log.dirs"]
        first = log_dirs[0] if isinstance(log_dirs, list) else str(log_dirs).split(",")[0].strip()
        self.path = Path(first) / BOOTSTRAP_FILE
        self.records = [UserScramCredentialRecord(name, credential) for name, credential in read_bootstrap(self.path)]
        self.done = not self.records  # checked once per process: the log is not empty after that
        self._lock = asyncio.Lock()

    async def ensure(self) -> None:
        """Commit the bootstrap records if the metadata log is empty (once per process)."""
        if self.done:
            return
        async with self._lock:
            if self.done:
                return
            service = self.controller.service
            host, port = service.config.controller_listener
            await service.raft.submit(controller_record(service.config.node_id, host, port),
                                      service.request_timeout_ms)
            image = self.controller.image
            missing = [r for r in self.records if image.scram_credential(r.name, r.credential.mechanism) != r.credential]
            if image.offset == 0 and missing:
                await self.controller.commit(missing)
                log.info("committed %d bootstrap SCRAM credential(s) from %s", len(missing), self.path)
            self.done = True
