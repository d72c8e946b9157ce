"""docs/moe.md's measured table is generated from the experiment's rows (rows.jsonl) by
scripts/moe_routing_summary.py: the page must hold exactly what that gives."""

from __future__ import annotations

import json

from tests._paths import ROOT
from tests._scripts import load_script

MEASURED = ROOT / "docs" / "measurements" / "moe_routing"


def test_the_pages_table_is_the_one_the_rows_give():
    rows = [json.loads(line) for line in (MEASURED / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 108
    table = load_script("moe_routing_summary").docs_table(rows)
    assert table in (ROOT / "docs" / "moe.md").read_text(), "regenerate: moe_routing_summary.docs_table"


def test_the_pages_replay_cost_figures_are_the_measured_tables():
    """docs/moe.md quotes replay's cost; each ratio it gives is one the overhead table printed."""
    import re

    page = (ROOT / "docs" / "moe.md").read_text()
    bullet = page[page.index("- Replay's cost") :].split("\n\n")[0]
    table = (MEASURED / "overhead_table.md").read_text()
    quoted = re.findall(r"\b\d\.\d{3}\b", bullet)
    assert quoted, bullet
    assert [q for q in quoted if q not in table] == [], bullet
