"""`gspo-trl plan` with `packing: true`: the step time counts a row's own tokens (prompt + mean
completion, given or assumed half the cap), memory keeps the padded rectangle (its peak)."""

from __future__ import annotations

import pytest

from gspo_trl.plan.model_shape import PlanError
from gspo_trl.plan.planner import plan
from gspo_trl.plan.report import format_plan

TRAINING = {
    "per_device_train_batch_size": 8,
    "max_completion_length": 8192,
    "num_generations": 8,
    "max_prompt_length": 512,
}


def planned(**extra):
    return plan(
        {**TRAINING, **extra}, "Qwen/Qwen3-8B", strategy="zero3", nodes=1, gpus_per_node=8, gpu_memory_gb=80
    )


@pytest.mark.parametrize(
    ("extra", "tokens_per_row"),
    [
        ({}, 512 + 8192),
        ({"packing": True}, 512 + 4096),
        ({"packing": True, "mean_completion_length": 1000}, 1512),
    ],
)
def test_packed_step_time_counts_the_rows_own_tokens(extra, tokens_per_row):
    padded, packed = planned(), planned(**extra)
    assert packed.throughput.tokens == 64 * tokens_per_row
    ratio = packed.throughput.compute_seconds / padded.throughput.compute_seconds
    assert ratio == pytest.approx(1.0) if not extra else ratio < tokens_per_row / (512 + 8192)
    assert [t.bytes for t in packed.terms] == [t.bytes for t in padded.terms]  # memory: the peak rectangle


def test_the_report_says_what_it_assumed():
    assumed = format_plan(planned(packing=True))
    assert "packing   step time counts 4,608 tokens a row (mean completion assumed half the cap)" in assumed
    assert "mean completion given" in format_plan(planned(packing=True, mean_completion_length=1000))
    assert "packing   " not in format_plan(planned())


def test_a_bad_mean_completion_length_is_refused_naming_it():
    with pytest.raises(PlanError, match="mean_completion_length = -3: expected a positive number"):
        planned(packing=True, mean_completion_length=-3)
