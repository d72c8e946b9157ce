"""docs/performance.md is pinned to gspo_trl.core.metric_names: it names every `perf/*` key the
package logs, and every `perf/*` key it names is one of them."""

from __future__ import annotations

import re

import gspo_trl.core.metric_names as names
from tests._paths import ROOT

DOC = ROOT / "docs" / "performance.md"
TEXT = DOC.read_text(encoding="utf-8")
PERF_KEY = re.compile(rf"(?<![\w/]){names.PERF}/[\w/{{}}]+")
"""`perf/...` as the doc writes it; `perf/{phase}_s`-style templates are skipped by the reverse check."""


def perf_names() -> set[str]:
    """Every perf/* key a run logs, from metric_names alone."""
    phases = (*names.PHASES, names.PHASE_OTHER)
    constants = {v for k, v in vars(names).items() if k.startswith("PERF_") and isinstance(v, str)}
    return constants | {names.perf_seconds(p) for p in phases} | {names.perf_total(p) for p in phases}


def test_the_doc_names_every_perf_metric():
    named = perf_names()
    assert len(named) == 2 * (len(names.PHASES) + 1) + 9  # the scan finds the constants
    assert sorted(n for n in named if f"`{n}`" not in TEXT) == []


def test_every_perf_key_the_doc_names_is_logged():
    written = {k for k in PERF_KEY.findall(TEXT) if "{" not in k}
    assert written, "the scan finds the doc's keys"
    assert sorted(k for k in written if not names.is_metric_name(k)) == []
