"""docs/serving.md's table of request fields is the server's: every field the chat and completion
requests declare, and every other field refused by name, has one row, and each row says what
``kvreg.app.serving.fields`` does with it."""

from __future__ import annotations

import re
from pathlib import Path

from kvreg.app.serving import fields
from kvreg.app.serving.protocol import ChatRequest, CompletionRequest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "serving.md"
ROW = re.compile(r"^\| `([a-z_]+)` \| (chat|completions|both) \| (applied|changes nothing|refused) \|")


def test_the_field_table_of_the_docs_is_the_servers() -> None:
    rows = {m.group(1): m.group(3) for line in DOCS.read_text().splitlines() if (m := ROW.match(line))}
    declared = set(ChatRequest.model_fields) | set(CompletionRequest.model_fields)
    assert set(rows) == declared | set(fields.OTHER_KNOWN)
    for name, kind in rows.items():
        expected = (
            "applied"
            if name in fields.APPLIED
            else "changes nothing"
            if name in fields.IGNORED
            else "refused"
        )
        assert kind == expected, name
