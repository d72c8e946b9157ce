"""docs/plan.md states what the plan code does: each copied fact is read back from its home here."""

from __future__ import annotations

import ast
import re

from gspo_trl.config.sections import HeldoutConfig
from gspo_trl.eval.batching import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS
from gspo_trl.plan.gpu_prices import price_table_markdown
from gspo_trl.plan.memory import DEEPSPEED_SUB_GROUP_SIZE
from gspo_trl.training.heldout.layout import HF, HF_LOCKSTEP, VLLM_COLOCATE
from tests._paths import ROOT

DOC = (ROOT / "docs" / "plan.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    return DOC.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_heldout_section_names_the_runs_engines_and_bounds():
    heldout = " ".join(section("Held-out evaluation").split())
    for engine in (VLLM_COLOCATE, HF, HF_LOCKSTEP):
        assert f"`{engine}`" in heldout, engine
    assert HeldoutConfig().max_batch_tokens == DEFAULT_BATCH_TOKENS
    assert f"(default {DEFAULT_BATCH_TOKENS} prompt + new tokens) and {DEFAULT_BATCH_SIZE} rows" in heldout
    for stale in ("not sharded", "64-prompt", "64 prompts at a time"):
        assert stale not in DOC, stale


def test_deepspeed_sub_group_is_the_one_in_the_code():
    exponent = len(str(DEEPSPEED_SUB_GROUP_SIZE)) - 1
    assert 10**exponent == DEEPSPEED_SUB_GROUP_SIZE
    assert f"one 1e{exponent}-parameter sub-group" in " ".join(DOC.split())


def test_bench_figures_match_the_test_that_records_them():
    """The measured/plan figures are written twice (this doc, the test's docstring): keep them equal."""
    recorded = ast.get_docstring(ast.parse((ROOT / "tests" / "plan" / "test_plan_cpu_memory.py").read_text()))
    figures = r"(\d+\.\d) (?:MiB )?(?:measured )?vs (\d+\.\d) MiB"
    in_doc = re.findall(figures, " ".join(section("Checks against measurements").split()))
    in_test = re.findall(figures, " ".join(recorded.split()))
    assert in_doc and in_doc == in_test


def test_price_table_is_the_one_in_the_code():
    assert price_table_markdown() in section("Work, hours and cost (estimates)")
