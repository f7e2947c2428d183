"""docs/protocol.md's API table is the one the declarations give (common/messages/doc.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from raftka.common.messages import doc

PAGE = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"


def test_the_api_table_in_docs_is_generated_from_the_declarations():
    text = PAGE.read_text()
    assert doc.rewrite(text) == text, ("docs/protocol.md's API table is stale: run "
                                       "`python -m raftka.common.messages.doc docs/protocol.md`")


def test_the_table_lists_every_declared_api_with_its_range():
    table = doc.table()
    assert "| Produce | 0 | 3-10 | 9 | broker | yes |" in table
    assert "| BrokerHeartbeat | 63 |" in table and table.count("\n") == len(doc.KAFKA_API) + 1


def test_a_page_without_the_markers_is_an_error():
    with pytest.raises(ValueError):
        doc.rewrite("no markers here")
