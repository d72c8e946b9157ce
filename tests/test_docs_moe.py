"""docs/moe.md's measured table is generated from the experiment's rows (rows.jsonl) by
scripts/moe_routing_summary.py: the page must hold exactly what that gives."""

from __future__ import annotations

import importlib.util
import json

from tests._paths import ROOT

MEASURED = ROOT / "docs" / "measurements" / "moe_routing"


def load_summary():
    spec = importlib.util.spec_from_file_location(
        "moe_routing_summary", ROOT / "scripts" / "moe_routing_summary.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pages_table_is_the_one_the_rows_give():
    rows = [json.loads(line) for line in (MEASURED / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 108
    table = load_summary().docs_table(rows)
    assert table in (ROOT / "docs" / "moe.md").read_text(), "regenerate: moe_routing_summary.docs_table"
