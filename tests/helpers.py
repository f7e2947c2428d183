"""Helpers shared by test modules that run real clusters (import as ``from helpers import ...``;
the tests folder is on sys.path, as for ``from test_broker import ...``)."""
from __future__ import annotations

from typing import Any

from raftka.cluster import wait_until

TOPIC_WAIT_S = 15.0  # a loaded 2-core box: brokers may take seconds to replay a new topic


def wait_for_topic(admin: Any, name: str, partitions: int | None = None,
                   timeout_s: float = TOPIC_WAIT_S) -> list[dict[str, Any]]:
    """Wait until ``admin`` (an AdminClient) describes topic ``name`` with ``partitions``
    partitions (None: any number), each with a leader; returns them. Brokers learn of a new topic
    from the metadata log a moment after CreateTopics answers. TimeoutError naming the topic
    (and the last error, e.g. UNKNOWN_TOPIC_OR_PARTITION) after ``timeout_s``."""
    def ready() -> list[dict[str, Any]] | None:
        found = admin.describe_topics([name])[0]["partitions"]
        if found and all(p["leader"] >= 0 for p in found) and partitions in (None, len(found)):
            return found
        return None
    return wait_until(ready, timeout_s, what=f"topic {name} with a leader for each of "
                                             f"{partitions if partitions is not None else 'its'} partitions")
