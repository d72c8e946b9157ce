"""gspo_trl.core.metric_names is the one spelling of the logged metrics: the code writes those names,
and every metric key the docs, the recipes' headers and the module docstrings name is one of them."""

from __future__ import annotations

import ast
import itertools
import re

import numpy as np
import pytest
import torch

import gspo_trl.core.metric_names as names
from gspo_trl.model.routing.flips import FlipCounts, engine_routing_metrics, replay_metrics
from gspo_trl.training.engine.mismatch import judge_mismatch
from gspo_trl.training.engine.response_weights import summarize_weights
from gspo_trl.training.heldout.scoring import mean_grade
from gspo_trl.training.probes.sampling_masks import replay_metrics as sampling_mask_metrics
from gspo_trl.training.probes.staleness import RolloutVersion, by_staleness, rollout_metrics
from gspo_trl.training.ratio_stats import ROW_COLUMNS, bucket_labels, summarize_rows
from tests._paths import ROOT

KEY = re.compile(r"(?<![\w/])(?:eval_)?(?:gspo|heldout)/[\w{},.@*-]*(?:/[\w{},.@*-]+)*")
"""A metric key as prose writes it, templates included: gspo/mb{k}/clip/{low,high}, heldout/*."""
TEMPLATE_VALUES = {"{k}": "2", "{a}-{b}": "64-256", "{a}": "1024", "pass@k": "pass@4", "STAT": "entropy"}


def logged_names() -> set[str]:
    """The names a run logs, made by the code that logs them."""
    rows = np.array([[0.001 * i, (-1) ** i, 10 * i, 1.0, 10.0, 1.0] for i in range(1, 9)])
    assert rows.shape[1] == len(ROW_COLUMNS)
    stats = summarize_rows(rows, 3e-4, 4e-4, (16, 64))
    found = {
        names.under(p, s) for p in (names.minibatch(1), names.minibatch(2), names.OFFPOLICY) for s in stats
    }
    found |= set(judge_mismatch(torch.tensor([0.0, 1e-3]), 3e-4, 4e-4).metrics())
    flips = FlipCounts()
    flips.add(torch.tensor([1.0, 3.0]), 8.0, torch.tensor([0.25, float("nan")]))
    found |= {names.under(p, s) for p in (names.minibatch(2), names.OFFPOLICY) for s in flips.stats()}
    found |= set(engine_routing_metrics(flips)) | set(replay_metrics(3, 4))
    found |= set(
        sampling_mask_metrics(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool), torch.ones(2, 3))
    )
    found |= {names.heldout(k) for k in mean_grade([[1.0, None]])} | {
        names.heldout_pass_at(k) for k in (1, 4)
    }
    found |= {names.ZERO_VARIANCE_GROUPS}
    weights = torch.tensor([[1.0, 1.0, 0, 0, 10], [0.0, 2.0, 0, 1, 100], [1.2, 1.5, 1, 0, 2000]])
    found |= set(summarize_weights(weights, (16, 64)))
    nan = float("nan")
    found |= set(by_staleness(torch.tensor([[0, 1.0, nan, nan], [2, 1.1, 1.0, 0.1], [2, 0.9, 0.0, 0.2]])))
    found |= set(rollout_metrics([RolloutVersion(3, 6, 2, 4)]))
    return found | {f"eval_{n}" for n in found if n.startswith(names.HELDOUT)}


def expansions(key: str) -> list[str]:
    """'gspo/mb{k}/clip/{low,high}' -> ['gspo/mb2/clip/low', 'gspo/mb2/clip/high']."""
    for template, value in TEMPLATE_VALUES.items():
        key = key.replace(template, value)
    parts = re.split(r"\{([^{}]*)\}", key)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def documented_keys() -> dict[str, set[str]]:
    """Metric keys named in docs/*.md, README.md, the recipes and every module docstring."""
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")}
    texts["README.md"] = (ROOT / "README.md").read_text(encoding="utf-8")
    texts |= {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "recipes").rglob("*.yaml")
    }
    for path in (ROOT / "gspo_trl").rglob("*.py"):
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        texts[str(path.relative_to(ROOT))] = docstring
    found: dict[str, set[str]] = {}
    for where, text in texts.items():
        for key in KEY.findall(text):
            found.setdefault(key.rstrip(".,"), set()).add(where)
    return found


def test_the_code_logs_only_names_of_the_module() -> None:
    unknown = sorted(n for n in logged_names() if not names.is_metric_name(n))
    assert unknown == []
    assert {names.clip_by_length(label) for label in bucket_labels((16, 64))} <= {
        n.removeprefix(names.OFFPOLICY + "/") for n in logged_names()
    }


def test_every_documented_metric_key_is_a_logged_name() -> None:
    logged = logged_names()
    documented = documented_keys()
    assert len(documented) > 20  # the scan finds the docs' tables
    wrong = {}
    for key, where in documented.items():
        for name in expansions(key):
            group = name.removesuffix("...").rstrip("*").rstrip("/")  # gspo/offpolicy/*, gspo/mb1
            ok = names.is_metric_name(name) or any(n.startswith(group + "/") for n in logged)
            if not ok:
                wrong[name] = sorted(where)
    assert wrong == {}


@pytest.mark.parametrize(
    "drifted",
    ["gspo/offpolicy/clip/regoin", "gspo/mb0/entropy", "heldout/accuracy", "gspo/engine_mismatch/bias"],
)
def test_a_misspelt_key_is_not_a_name(drifted: str) -> None:
    assert not names.is_metric_name(drifted)
