"""The hub-schema fixtures in tests/fixtures/datasets stay what their README says they are.

Recipe and preset tests read these files as stand-ins for the real hub datasets, so a
fixture that drifts from its README (a column dropped, a row with a different shape, a
completion missing) would let those tests pass on data no hub serves.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from tests._paths import FIXTURES

_TABLE_ROW = re.compile(r"^\| `(?P<file>[\w.-]+\.jsonl)` \|")


def readme_columns() -> dict[str, list[str]]:
    """File name -> the columns its README table row lists (5th cell, backticked names)."""
    table: dict[str, list[str]] = {}
    for line in (FIXTURES / "README.md").read_text().splitlines():
        match = _TABLE_ROW.match(line)
        if match:
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            table[match["file"]] = re.findall(r"`([^`]+)`", cells[4])
    return table


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


COLUMNS = readme_columns()


def test_readme_lists_every_fixture_and_nothing_else() -> None:
    on_disk = {p.name for p in FIXTURES.glob("*.jsonl") if not p.name.endswith(".completions.jsonl")}
    assert COLUMNS, "README.md has no fixture table rows"
    assert set(COLUMNS) == on_disk


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_fixture_rows_have_exactly_the_readme_columns(name: str) -> None:
    rows = read_jsonl(FIXTURES / name)
    assert 3 <= len(rows) <= 6, f"{name}: {len(rows)} rows, expected 3-6"
    for index, row in enumerate(rows):
        assert list(row) == COLUMNS[name], f"{name} row {index}: {list(row)} != README {COLUMNS[name]}"
    # One Arrow schema for all rows: what `datasets` builds when it loads the file.
    assert Dataset.from_list(rows).column_names == COLUMNS[name]


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_every_row_has_a_correct_and_a_wrong_completion(name: str) -> None:
    rows = read_jsonl(FIXTURES / name)
    completions = read_jsonl(FIXTURES / name.replace(".jsonl", ".completions.jsonl"))
    assert len(completions) == len(rows)
    keys = {"correct", "wrong"} | ({"correct_answer_line"} if name == "dapo-math.jsonl" else set())
    for index, completion in enumerate(completions):
        assert set(completion) == keys, f"{name} completion {index}: keys {sorted(completion)}"
        assert all(isinstance(text, str) and text.strip() for text in completion.values())
        assert completion["correct"] != completion["wrong"]
