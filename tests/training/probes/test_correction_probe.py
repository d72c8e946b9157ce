"""CorrectionProbe (engine.correction as a probe) driven through the probe protocol's events on a
real rollout of the tiny model, then TRL's own loss: the same weighted loss as the trainer wiring
(tests/training/engine/test_correction_loss.py), TRL's flag restored, the metrics given at `on_log`.

The dispatcher that sends these events from GSPOTrainer is the probes branch's (issue 29); here
the events are sent by hand, in the order probes/base.py documents."""

from __future__ import annotations

import math

import pytest
import torch
from trl import GRPOTrainer

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import EngineConfig
from gspo_trl.training.probes.base import LossCall, PolicyForward
from gspo_trl.training.probes.correction import CorrectionProbe
from gspo_trl.training.probes.diagnostics import DiagnosticsProbe
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir  # noqa: F401


@pytest.fixture(scope="module")
def trainer_and_rollout(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    trainer = make_trainer(tiny_model_dir(root), root / "run", max_steps=1)
    trainer.model.train()
    rows = [{"prompt": f"add {i} and {i + 3}"} for i in range(4) for _ in range(trainer.num_generations)]
    torch.manual_seed(0)
    rollout = trainer._generate_and_score_completions(rows)
    trainer.use_vllm, trainer.current_gradient_accumulation_steps = True, 1  # as in a vLLM run's loss
    return trainer, rollout


def test_probe_weighs_the_loss_and_reports_the_rollout_batch(trainer_and_rollout):
    trainer, rollout = trainer_and_rollout
    old, mask = rollout["old_per_token_logps"], rollout["completion_mask"].float()
    gaps = torch.linspace(-0.02, 0.03, old.shape[0])
    batch = dict(rollout, sampling_per_token_logps=old - gaps.unsqueeze(1))
    cap = math.exp(0.02)
    probe = CorrectionProbe(
        EngineConfig(correction="truncate", weight_max=cap).correction_settings(),
        trainer.probes.find(DiagnosticsProbe).config,
    )
    probe.attach(trainer)
    assert probe.on_rollout_end(trainer, batch) is batch  # thresholds fixed: nothing to calibrate

    call = LossCall(inputs=dict(batch), batch=batch, training=True, minibatch=4, last_micro_batch=True)
    probe.on_loss_inputs(trainer, call)
    assert trainer.vllm_importance_sampling_correction is True  # only while this loss runs
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    logps, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(
        trainer, trainer.model, ids, attention, old.shape[1]
    )
    probe.on_policy_forward(trainer, PolicyForward(logps.detach(), None, old, mask, call))
    loss = GRPOTrainer._compute_loss(trainer, trainer.model, call.inputs)
    probe.on_loss(trainer, call, loss)
    assert trainer.vllm_importance_sampling_correction is False
    assert "importance_sampling_ratio" not in batch  # TRL's buffer untouched

    weights = torch.exp(gaps.double()).clamp(max=cap)
    s = torch.exp(((logps.detach() - old) * mask).sum(-1) / mask.sum(-1)).double()
    adv = rollout["advantages"].double()
    per_response = torch.minimum(s * adv, s.clamp(1 - trainer.epsilon_low, 1 + trainer.epsilon_high) * adv)
    assert loss.item() == pytest.approx(-(weights * per_response).mean().item(), rel=1e-5, abs=1e-7)

    logged = probe.on_log(trainer, {})
    assert logged[names.CORRECTION_TRUNCATED] == pytest.approx((gaps > 0.02 + 1e-9).float().mean().item())
    assert logged[names.CORRECTION_WEIGHT_MEAN] == pytest.approx(weights.mean().item(), rel=1e-6)
    assert probe.on_log(trainer, {}) == {}  # each rollout batch is logged once


def test_an_off_probe_does_nothing(trainer_and_rollout):
    trainer, rollout = trainer_and_rollout
    probe = CorrectionProbe(
        EngineConfig().correction_settings(), trainer.probes.find(DiagnosticsProbe).config
    )
    probe.attach(trainer)
    call = LossCall(inputs=dict(rollout), batch=rollout, training=True, minibatch=4, last_micro_batch=True)
    probe.on_loss_inputs(trainer, call)
    old = rollout["old_per_token_logps"]
    probe.on_policy_forward(trainer, PolicyForward(old, None, old, rollout["completion_mask"], call))
    probe.on_loss(trainer, call, torch.tensor(0.0))
    assert call.inputs.keys() == rollout.keys() and trainer.vllm_importance_sampling_correction is False
    assert probe.on_log(trainer, {}) == {}
