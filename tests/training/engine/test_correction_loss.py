"""engine.correction inside GSPOTrainer's loss, on a real rollout of the tiny model (no vLLM: the
engine's log-probs are the trainer's pi_old, shifted by known amounts, and put where TRL keeps vLLM's).

- engine equal to the trainer: every weight is 1 and the loss and its gradient are bit-identical
  to the run without the correction;
- a known per-response gap: the loss is -mean_i w_i min(s_i A_i, clip(s_i) A_i) with
  w_i = exp(gap_i) (TRL's `loss_type: grpo` average, each response weighted once), and the
  rollout batch's metrics say what was truncated and rejected.
"""

from __future__ import annotations

import math

import pytest
import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import EngineConfig
from gspo_trl.training.probes.correction import CorrectionProbe, CorrectionRun
from gspo_trl.training.probes.diagnostics import DiagnosticsProbe
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir  # noqa: F401


@pytest.fixture(scope="module")
def rollout_and_trainer(tmp_path_factory):
    root = tmp_path_factory.mktemp("correction")
    trainer = make_trainer(tiny_model_dir(root), root / "run", max_steps=1)
    trainer.model.train()
    rows = [{"prompt": f"add {i} and {i + 3}"} for i in range(4) for _ in range(trainer.num_generations)]
    torch.manual_seed(0)
    rollout = trainer._generate_and_score_completions(rows)
    assert rollout["old_per_token_logps"] is not None  # 4 updates per rollout batch: pi_old recomputed
    # what a vLLM run has at loss time (TRL applies the weight only `if self.use_vllm and ...`,
    # grpo_trainer.py:3146), and the accumulation count Trainer.train sets before the first step
    trainer.use_vllm, trainer.current_gradient_accumulation_steps = True, 1
    return trainer, rollout


def loss_and_grad(trainer, rollout, config: EngineConfig) -> tuple[torch.Tensor, list[torch.Tensor]]:
    buckets = trainer.probes.find(DiagnosticsProbe).config.length_buckets
    trainer.probes.find(CorrectionProbe).correction = CorrectionRun(config.correction_settings(), buckets)
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, rollout)
    loss.backward()
    grads = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
    return loss.detach(), grads


@pytest.mark.parametrize(
    "config",
    [
        {"correction": "truncate"},  # auto C, calibrated on this batch
        {"correction": "reject", "reject_max_token": "auto", "reject_k3": 1e-4},
    ],
)
def test_engine_equal_to_trainer_leaves_the_loss_bit_identical(rollout_and_trainer, config):
    trainer, rollout = rollout_and_trainer
    matched = dict(rollout, sampling_per_token_logps=rollout["old_per_token_logps"].clone())
    off_loss, off_grads = loss_and_grad(trainer, matched, EngineConfig())
    on_loss, on_grads = loss_and_grad(trainer, matched, EngineConfig(**config))
    summary = trainer.probes.find(CorrectionProbe).correction.finish_rollout()
    assert summary[names.CORRECTION_WEIGHT_MEAN] == 1.0 and summary[names.CORRECTION_REJECTED] == 0.0
    assert torch.equal(on_loss, off_loss)
    assert all(torch.equal(a, b) for a, b in zip(on_grads, off_grads, strict=True))
    assert "importance_sampling_ratio" not in rollout  # the weight went into the loss's copy only
    assert trainer.vllm_importance_sampling_correction is False  # TRL's flag restored after the loss


def test_a_known_gap_weighs_each_response_once(rollout_and_trainer):
    trainer, rollout = rollout_and_trainer
    old, mask = rollout["old_per_token_logps"], rollout["completion_mask"].float()
    batch = old.shape[0]
    gaps = torch.linspace(-0.02, 0.03, batch)  # nats per token, one per response
    engine = old - gaps.unsqueeze(1)  # so mean_t(log pi_old - log mu) = gap_i exactly as designed
    shifted = dict(rollout, sampling_per_token_logps=engine)
    cap = math.exp(0.02)
    loss, _ = loss_and_grad(trainer, shifted, EngineConfig(correction="truncate", weight_max=cap))
    weights = torch.exp(gaps.double()).clamp(max=cap)

    logp, _, _ = trainer._get_per_token_logps_and_entropies(  # the policy's own log-probs (no update yet)
        trainer.model,
        torch.cat([rollout["prompt_ids"], rollout["completion_ids"]], 1),
        torch.cat([rollout["prompt_mask"], rollout["completion_mask"]], 1),
        old.shape[1],
    )
    s = torch.exp(((logp.detach() - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)).double()
    adv = rollout["advantages"].double()
    per_response = torch.minimum(s * adv, s.clamp(1 - trainer.epsilon_low, 1 + trainer.epsilon_high) * adv)
    expected = -(weights * per_response).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    assert abs(expected.item() + per_response.mean().item()) > 1e-4  # the weights move it 100x the tolerance

    summary = trainer.probes.find(CorrectionProbe).correction.finish_rollout()
    truncated = (gaps > 0.02 + 1e-9).float().mean().item()
    assert summary[names.CORRECTION_TRUNCATED] == pytest.approx(truncated)
    assert summary[names.CORRECTION_WEIGHT_MEAN] == pytest.approx(weights.mean().item(), rel=1e-6)
    assert summary[names.CORRECTION_REJECTED] == 0.0
    assert all(names.is_metric_name(key) for key in summary)


def test_the_banner_says_what_the_correction_compares_and_how_its_thresholds_are_chosen(rollout_and_trainer):
    from gspo_trl.training.reporting.console_lines import banner

    trainer, rollout = rollout_and_trainer
    config = EngineConfig(correction="reject", reject_k3="auto", weight_min=0.9)
    buckets = trainer.probes.find(DiagnosticsProbe).config.length_buckets
    trainer.probes.find(CorrectionProbe).correction = CorrectionRun(config.correction_settings(), buckets)
    (line,) = [x for x in banner(trainer, "tiny", ["r"], 0).splitlines() if x.startswith("  engine")]
    assert "correction reject, w_i = exp(mean_t(log pi_old - log mu))" in line
    assert "`auto` (reject_k3, weight_max) from the first rollout batch's measured mismatch" in line
    trainer.probes.find(CorrectionProbe).correction.calibrate_rollout(
        rollout["old_per_token_logps"], rollout["old_per_token_logps"], rollout["completion_mask"]
    )
    (line,) = [x for x in banner(trainer, "tiny", ["r"], 0).splitlines() if x.startswith("  engine")]
    assert "weight in [0.9, 1.001]" in line and "mean K3 0.0001 (auto from the first rollout batch)" in line
    trainer.probes.find(CorrectionProbe).correction = CorrectionRun(
        EngineConfig().correction_settings(), trainer.probes.find(DiagnosticsProbe).config.length_buckets
    )
    assert "  engine" not in banner(trainer, "tiny", ["r"], 0)
