"""Verdicts, fixes and the whole report on realistic setups; input errors."""

from __future__ import annotations

import pytest

from gspo_trl.plan import PlanError, format_plan, plan
from gspo_trl.plan.memory import MemoryTerm
from gspo_trl.plan.verdict import DOES_NOT_FIT, FITS, TIGHT, classify


@pytest.mark.parametrize(
    ("state", "train", "rollout", "status", "phase", "dominant"),
    [
        (50, 30, 10, FITS, "train", "state"),  # 80 of 100
        (50, 40, 10, FITS, "train", "state"),  # 90: not above 90%
        (60, 35, 10, TIGHT, "train", "state"),  # 95
        (40, 61, 10, DOES_NOT_FIT, "train", "train"),  # 101
        (40, 10, 55, TIGHT, "rollout", "rollout"),  # the rollout phase peaks
    ],
)
def test_classify(state, train, rollout, status, phase, dominant):
    terms = [MemoryTerm("state", state, "state"), MemoryTerm("train", train, "train")]
    terms.append(MemoryTerm("rollout", rollout, "rollout"))
    verdict = classify(terms, 100)
    assert (verdict.status, verdict.peak_phase, verdict.dominant.name) == (status, phase, dominant)
    assert verdict.peak_bytes == state + max(train, rollout)


EIGHT_K = {"max_prompt_length": 512, "max_completion_length": 7680}


@pytest.mark.parametrize("checkpointing", [False, True])
def test_qwen3_8b_16x8192_ddp_does_not_fit_and_names_activations(checkpointing):
    training = {"per_device_train_batch_size": 16, "gradient_checkpointing": checkpointing, **EIGHT_K}
    result = plan(training, "Qwen/Qwen3-8B", strategy="ddp", nodes=1, gpus_per_node=8, gpu_memory_gb=80)
    assert result.setup.micro_batch_tokens == 16 * 8192
    assert result.verdict.status == DOES_NOT_FIT
    assert result.verdict.dominant.name == "activations"
    assert result.verdict.fix.endswith(("GiB",))
    assert "-> fits" in result.verdict.fix or "-> tight" in result.verdict.fix
    if not checkpointing:
        assert result.verdict.fix.startswith("gradient_checkpointing: true")
    report = format_plan(result)
    assert "Verdict: DOES NOT FIT" in report
    assert "dominant term: activations" in report


@pytest.mark.parametrize("use_vllm", [False, True])
def test_qwen3_1_7b_zero2_8xh100_batch_8x4096_fits(use_vllm):
    training = {
        "per_device_train_batch_size": 8,
        "max_prompt_length": 512,
        "max_completion_length": 3584,
        "use_vllm": use_vllm,
    }
    result = plan(training, "Qwen/Qwen3-1.7B", strategy="zero2", nodes=1, gpus_per_node=8, gpu_memory_gb=80)
    assert result.setup.micro_batch_tokens == 8 * 4096
    assert result.verdict.status == FITS
    assert result.verdict.fix is None
    assert ("vLLM" in format_plan(result)) == use_vllm


def test_vllm_that_cannot_hold_its_weights_does_not_fit():
    # 15% of 80 GiB = 12 GiB < Qwen3-8B's 15.3 GiB of bf16 weights
    training = {"use_vllm": True, "vllm_gpu_memory_utilization": 0.15, **EIGHT_K}
    result = plan(training, "Qwen/Qwen3-8B", strategy="zero3", gpus_per_node=8, gpu_memory_gb=80)
    assert result.verdict.status == DOES_NOT_FIT
    assert result.verdict.dominant.name.startswith("vLLM")
    assert result.verdict.fix.startswith("vllm_gpu_memory_utilization >= 0.2")


def test_sleep_mode_frees_vllm_during_training():
    training = {"use_vllm": True, "vllm_gpu_memory_utilization": 0.5, **EIGHT_K}
    awake = plan(training, "Qwen/Qwen3-4B", strategy="zero3", gpus_per_node=8, gpu_memory_gb=80)
    asleep = plan({**training, "vllm_enable_sleep_mode": True}, "Qwen/Qwen3-4B", strategy="zero3")
    assert asleep.verdict.peak_bytes < awake.verdict.peak_bytes
    vllm_bytes = next(t.bytes for t in awake.terms if t.name.startswith("vLLM"))
    train_bytes = sum(t.bytes for t in awake.terms if t.phase == "train")
    assert awake.verdict.peak_bytes - asleep.verdict.peak_bytes == min(vllm_bytes, train_bytes)


def test_report_sections():
    report = format_plan(plan({"use_vllm": True}, "Qwen/Qwen3-30B-A3B", strategy="fsdp2", nodes=2))
    for section in ("topology  2 node(s) x 8 GPU(s) = 16", "Memory per GPU", "vLLM", "Verdict:", "Work per"):
        assert section in report
    assert "3.35B active" in report
    assert "512 (assumed)" in report  # TRL 1.16 has no max_prompt_length


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "zero1"}, "strategy 'zero1'"),
        ({"training": {"per_device_train_batch_size": 0}}, "per_device_train_batch_size"),
        ({"training": {"gradient_checkpointing": "yes"}}, "gradient_checkpointing"),
        ({"training": {"vllm_mode": "remote"}}, "vllm_mode"),
        ({"lora": {"r": 8, "target_modules": ["lm_head"]}}, "lm_head"),
        ({"dtype": "int4"}, "int4"),
        ({"gpus_per_node": 0}, "gpus_per_node"),
    ],
)
def test_bad_inputs_are_named(kwargs, message):
    arguments = {"training": {}, "model_name_or_path": "Qwen/Qwen3-0.6B", **kwargs}
    with pytest.raises(PlanError, match=message):
        plan(**arguments)
