"""TRL's installed loss (via GSPOTrainer._compute_loss) against the pure-torch reference.

Only the model forward is replaced: `GRPOTrainer._get_per_token_logps_and_entropies` returns
crafted log-probs (a leaf we take gradients against). Everything after it - TRL's ratio,
clip, min, aggregation, and GSPOTrainer's GSPO-token rewrite and diagnostics - is the real
code, so a change in TRL's loss makes these tests fail.
"""

from __future__ import annotations

import pytest
import torch
from trl import GRPOTrainer

from gspo_trl.training.probes.diagnostics import DiagnosticsProbe
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir  # noqa: F401
from tests._reference_loss import grpo_loss, gspo_clipped, gspo_loss, gspo_token_loss

OLD_P = [0.50, 0.40, 0.90, 0.04]
NEW_P = [0.58, 0.30, 0.90, 0.05]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("crosscheck"))


def build(model_dir, tmp_path, level: str, eps_low: float, eps_high: float, gspo_token: bool = False):
    trainer = make_trainer(
        model_dir,
        tmp_path / f"{level}-{gspo_token}",
        importance_sampling_level=level,
        epsilon=eps_low,
        epsilon_high=eps_high,
        trainer_kwargs={"gspo_token": gspo_token},
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what Trainer sets inside train()
    return trainer


def trl_loss(trainer, monkeypatch, logp, old, adv, mask):
    """(loss, d loss / d logp, inputs after the call) through the trainer's real loss path."""
    leaf = logp.detach().clone().requires_grad_(True)

    def crafted_forward(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        assert logits_to_keep == leaf.shape[1]
        entropies = torch.full_like(leaf, 0.5).detach() if kwargs.get("compute_entropy") else None
        return leaf * 1.0, entropies, None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", crafted_forward)
    batch, length = leaf.shape
    inputs = {
        "prompt_ids": torch.zeros(batch, 1, dtype=torch.long),
        "prompt_mask": torch.ones(batch, 1, dtype=torch.long),
        "completion_ids": torch.zeros(batch, length, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": adv,
        "old_per_token_logps": old.clone(),
        "num_items_in_batch": mask.sum(),
    }
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), leaf.grad, inputs


def worked_example():
    new = torch.tensor(NEW_P, dtype=torch.float64).log().unsqueeze(0)
    old = torch.tensor(OLD_P, dtype=torch.float64).log().unsqueeze(0)
    return new, old, torch.ones_like(new)


def random_batch(seed: int, batch: int = 16, length: int = 11, drift: float = 0.03):
    g = torch.Generator().manual_seed(seed)
    old = torch.log_softmax(torch.randn(batch, length, 7, generator=g, dtype=torch.float64), -1)[..., 0]
    new = old + drift * torch.randn(batch, length, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    adv = torch.randn(batch, generator=g, dtype=torch.float64)
    return new, old, adv, mask


def reference(loss_fn, new, old, adv, mask, **eps):
    leaf = new.clone().requires_grad_(True)
    loss = loss_fn(leaf, old, adv, mask, **eps)
    loss.backward()
    return loss.detach(), leaf.grad


@pytest.mark.parametrize(("advantage", "expected_weight"), [(1.0, 0.0), (-1.0, -1.0212 / 4)])
def test_worked_example_through_trl(model_dir, tmp_path, monkeypatch, advantage, expected_weight):
    new, old, mask = worked_example()
    adv = torch.tensor([advantage], dtype=torch.float64)
    for gspo_token in (False, True):
        level = "token" if gspo_token else "sequence"
        trainer = build(model_dir, tmp_path, level, 3e-4, 4e-4, gspo_token=gspo_token)
        loss, grad, _ = trl_loss(trainer, monkeypatch, new, old, adv, mask)
        assert (-grad[0]).tolist() == pytest.approx([expected_weight] * 4, abs=5e-5), level
        expected_value = -(1 + 4e-4) if advantage > 0 else 1.0212  # clipped term vs -s*A
        assert loss.item() == pytest.approx(expected_value, abs=5e-5)
        stats = trainer.probes.find(DiagnosticsProbe).statistics(trainer)
        assert stats["gspo/mb1/log_ratio/mean"] == pytest.approx(0.02097, abs=5e-6)
        assert stats["gspo/mb1/clip/region"] == (1.0 if advantage > 0 else 0.0)


@pytest.mark.parametrize(
    ("advantage", "expected_weights"),
    [(1.0, [1.16 / 4, 0.75 / 4, 1.00 / 4, 0.0]), (-1.0, [-1.16 / 4, 0.0, -1.00 / 4, -1.25 / 4])],
)
def test_token_level_grpo_differs_as_the_worked_example_says(
    model_dir, tmp_path, monkeypatch, advantage, expected_weights
):
    new, old, mask = worked_example()
    adv = torch.tensor([advantage], dtype=torch.float64)
    trainer = build(model_dir, tmp_path, "token", 0.2, 0.2)
    loss, grad, _ = trl_loss(trainer, monkeypatch, new, old, adv, mask)
    assert (-grad[0]).tolist() == pytest.approx(expected_weights, abs=1e-9)
    ref_loss, _ = reference(grpo_loss, new, old, adv, mask, eps_low=0.2, eps_high=0.2)
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-12)


@pytest.mark.parametrize("eps", [(3e-4, 4e-4), (3e-3, 4e-3), (0.02, 0.03)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gspo_value_gradient_and_clip_match_reference(model_dir, tmp_path, monkeypatch, seed, eps):
    new, old, adv, mask = random_batch(seed)
    eps_kw = dict(eps_low=eps[0], eps_high=eps[1])
    trainer = build(model_dir, tmp_path, "sequence", *eps)
    loss, grad, _ = trl_loss(trainer, monkeypatch, new, old, adv, mask)
    ref_loss, ref_grad = reference(gspo_loss, new, old, adv, mask, **eps_kw)
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-12)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=1e-9)
    clipped = gspo_clipped(new, old, adv, mask, **eps_kw)
    dropped = (grad.abs() * mask).sum(-1) == 0
    assert dropped.tolist() == clipped.tolist()
    stats = trainer.probes.find(DiagnosticsProbe).statistics(trainer)
    assert stats["gspo/mb1/clip/region"] == pytest.approx(clipped.double().mean().item())
    assert trainer._metrics["train"]["clip_ratio/region_mean"][-1] == pytest.approx(
        stats["gspo/mb1/clip/region"]
    )


def test_crafted_batches_mix_clipped_and_kept_responses():
    """Guards the test above against a vacuous pass: some, not all, responses clip."""
    for seed in (0, 1, 2):
        new, old, adv, mask = random_batch(seed)
        clipped = gspo_clipped(new, old, adv, mask, eps_low=3e-3, eps_high=4e-3)
        assert 0 < clipped.sum() < len(clipped)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gspo_token_equals_gspo_with_per_response_advantages(model_dir, tmp_path, monkeypatch, seed):
    new, old, adv, mask = random_batch(seed)
    gspo = build(model_dir, tmp_path, "sequence", 3e-3, 4e-3)
    loss_seq, grad_seq, _ = trl_loss(gspo, monkeypatch, new, old, adv, mask)
    token = build(model_dir, tmp_path, "token", 3e-3, 4e-3, gspo_token=True)
    adv_tok = adv.unsqueeze(-1).expand_as(new).clone()
    for advantages in (adv, adv_tok):  # (B,) and (B, T) with A_it = A_i
        loss_tok, grad_tok, inputs = trl_loss(token, monkeypatch, new, old, advantages, mask)
        assert loss_tok.item() == pytest.approx(loss_seq.item(), abs=1e-12)
        torch.testing.assert_close(grad_tok, grad_seq, atol=1e-12, rtol=1e-9)
        torch.testing.assert_close(inputs["old_per_token_logps"], old)  # the minibatch is not rewritten
    dropped_seq = (grad_seq.abs() * mask).sum(-1) == 0
    assert 0 < dropped_seq.sum() < len(dropped_seq)
    assert (
        gspo.probes.find(DiagnosticsProbe).statistics(gspo)["gspo/mb1/clip/region"]
        == token.probes.find(DiagnosticsProbe).statistics(token)["gspo/mb1/clip/region"]
    )


def test_gspo_token_with_per_token_advantages_matches_reference(model_dir, tmp_path, monkeypatch):
    new, old, adv, mask = random_batch(5)
    adv_tok = adv.unsqueeze(-1) + 0.5 * torch.randn(new.shape, dtype=torch.float64)
    trainer = build(model_dir, tmp_path, "token", 3e-3, 4e-3, gspo_token=True)
    loss, grad, _ = trl_loss(trainer, monkeypatch, new, old, adv_tok, mask)
    ref_loss, ref_grad = reference(gspo_token_loss, new, old, adv_tok, mask, eps_low=3e-3, eps_high=4e-3)
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-12)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=1e-9)


def test_gspo_token_requires_token_level_ratios(model_dir, tmp_path):
    with pytest.raises(ValueError, match="importance_sampling_level"):
        build(model_dir, tmp_path, "sequence", 3e-4, 4e-4, gspo_token=True)
