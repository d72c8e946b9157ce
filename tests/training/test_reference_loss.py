"""The reference losses against docs/gspo.md: the worked example's exact numbers and identities."""

from __future__ import annotations

import math

import pytest
import torch

from tests._reference_loss import (
    grpo_loss,
    gspo_clipped,
    gspo_loss,
    gspo_token_loss,
    sequence_log_ratio,
)

OLD_P = [0.50, 0.40, 0.90, 0.04]
NEW_P = [0.58, 0.30, 0.90, 0.05]
PAPER = dict(eps_low=3e-4, eps_high=4e-4)
GRPO_EPS = dict(eps_low=0.2, eps_high=0.2)


def worked_example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The notes' 4-token response: (new logp leaf with grad, old logp, mask), float64."""
    logp = torch.tensor(NEW_P, dtype=torch.float64).log().unsqueeze(0).requires_grad_(True)
    old = torch.tensor(OLD_P, dtype=torch.float64).log().unsqueeze(0)
    return logp, old, torch.ones_like(old)


def objective_weights(loss_fn, advantage: float, **eps) -> tuple[float, list[float]]:
    """(loss value, dJ/dlogp_t per token) for the worked example; J = -loss."""
    logp, old, mask = worked_example()
    loss = loss_fn(logp, old, torch.tensor([advantage], dtype=torch.float64), mask, **eps)
    loss.backward()
    return loss.item(), (-logp.grad[0]).tolist()


def test_worked_example_sequence_ratio():
    logp, old, mask = worked_example()
    token_ratio = torch.exp(logp - old)[0].tolist()
    assert token_ratio == pytest.approx([1.16, 0.75, 1.00, 1.25], abs=1e-12)
    log_s = sequence_log_ratio(logp, old, mask).item()
    assert log_s == pytest.approx(0.02097, abs=5e-6)
    assert math.exp(log_s) == pytest.approx(1.0212, abs=5e-5)


@pytest.mark.parametrize(
    ("name", "loss_fn", "advantage", "eps", "expected_weights"),
    [
        # GSPO, A = +1: s = 1.0212 > 1.0004, the whole response is dropped.
        ("gspo A=+1", gspo_loss, 1.0, PAPER, [0.0, 0.0, 0.0, 0.0]),
        # GSPO, A = -1: kept; every token weight -s/4 = -0.2553.
        ("gspo A=-1", gspo_loss, -1.0, PAPER, [-1.0212 / 4] * 4),
        ("gspo-token A=+1", gspo_token_loss, 1.0, PAPER, [0.0, 0.0, 0.0, 0.0]),
        ("gspo-token A=-1", gspo_token_loss, -1.0, PAPER, [-1.0212 / 4] * 4),
        # GRPO, A = +1: token 4 clipped (1.25 > 1.2), tokens 1-3 weights 1.16/4, 0.75/4, 1/4.
        ("grpo A=+1", grpo_loss, 1.0, GRPO_EPS, [1.16 / 4, 0.75 / 4, 1.00 / 4, 0.0]),
        # GRPO, A = -1: token 2 clipped (0.75 < 0.8), tokens 1, 3, 4 pushed down.
        ("grpo A=-1", grpo_loss, -1.0, GRPO_EPS, [-1.16 / 4, 0.0, -1.00 / 4, -1.25 / 4]),
    ],
)
def test_worked_example_gradients(name, loss_fn, advantage, eps, expected_weights):
    _, weights = objective_weights(loss_fn, advantage, **eps)
    assert weights == pytest.approx(expected_weights, abs=5e-5), name


def test_worked_example_values_and_clip_decisions():
    value, _ = objective_weights(gspo_loss, 1.0, **PAPER)
    assert value == pytest.approx(-(1 + 4e-4), abs=1e-12)  # clipped term: -(1 + eps_high) * A
    value, _ = objective_weights(gspo_loss, -1.0, **PAPER)
    assert value == pytest.approx(1.0212, abs=5e-5)  # unclipped term: -s * A
    logp, old, mask = worked_example()
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    clipped = gspo_clipped(logp.detach().repeat(2, 1), old.repeat(2, 1), adv, mask.repeat(2, 1), **PAPER)
    assert clipped.tolist() == [True, False]


def random_batch(seed: int, batch: int = 12, length: int = 9, drift: float = 0.03):
    """Old/new log-probs with padding of varying length and a mix of clipped responses."""
    g = torch.Generator().manual_seed(seed)
    old = torch.log_softmax(torch.randn(batch, length, 5, generator=g, dtype=torch.float64), -1)[..., 0]
    new = (old + drift * torch.randn(batch, length, generator=g, dtype=torch.float64)).requires_grad_(True)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    adv = torch.randn(batch, generator=g, dtype=torch.float64)
    return new, old, adv, mask


@pytest.mark.parametrize("seed", range(5))
def test_gspo_token_equals_gspo_when_advantages_are_per_response(seed):
    new, old, adv, mask = random_batch(seed)
    eps = dict(eps_low=3e-3, eps_high=4e-3)
    value_seq = gspo_loss(new, old, adv, mask, **eps)
    (grad_seq,) = torch.autograd.grad(value_seq, new)
    adv_tok = adv.unsqueeze(-1).expand_as(new).clone()
    value_tok = gspo_token_loss(new, old, adv_tok, mask, **eps)
    (grad_tok,) = torch.autograd.grad(value_tok, new)
    assert value_tok.item() == pytest.approx(value_seq.item(), abs=1e-12)
    torch.testing.assert_close(grad_tok, grad_seq, atol=1e-12, rtol=0)
    clipped = gspo_clipped(new.detach(), old, adv, mask, **eps)
    assert 0 < clipped.sum() < len(clipped), "the batch must mix clipped and kept responses"
    zero_grad = (grad_seq.abs() * mask).sum(-1) == 0
    assert zero_grad.tolist() == clipped.tolist()


def test_gspo_gradient_is_uniform_within_a_response():
    """GSPO rescales a response's gradient (s_i A_i / |y_i| per token) but never re-weights tokens."""
    new, old, adv, mask = random_batch(7, drift=1e-4)  # tiny drift: nothing clipped at eps 0.1
    loss = gspo_loss(new, old, adv, mask, eps_low=0.1, eps_high=0.1)
    (grad,) = torch.autograd.grad(loss, new)
    s = torch.exp(sequence_log_ratio(new, old, mask)).detach()
    expected = -(s * adv / mask.sum(-1) / len(adv)).unsqueeze(-1) * mask
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


def test_gspo_token_uses_per_token_advantages():
    new, old, adv, mask = random_batch(3, drift=1e-4)
    adv_tok = torch.randn(new.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    loss = gspo_token_loss(new, old, adv_tok, mask, eps_low=0.1, eps_high=0.1)
    (grad,) = torch.autograd.grad(loss, new)
    s = torch.exp(sequence_log_ratio(new, old, mask)).detach()
    expected = -(s / mask.sum(-1) / len(adv)).unsqueeze(-1) * adv_tok * mask
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


def test_grpo_differs_from_gspo_on_the_worked_example():
    _, gspo_w = objective_weights(gspo_loss, -1.0, **PAPER)
    _, grpo_w = objective_weights(grpo_loss, -1.0, **GRPO_EPS)
    assert gspo_w != pytest.approx(grpo_w, abs=1e-3)
    assert len({round(w, 6) for w in gspo_w}) == 1  # one weight for the whole response
    assert len({round(w, 6) for w in grpo_w}) == 4  # four different token weights
