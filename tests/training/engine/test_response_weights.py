"""engine.correction's arithmetic (gspo_trl.training.engine.response_weights), on hand-made log-probs."""

from __future__ import annotations

import math

import pytest
import torch

from gspo_trl.training.engine.response_weights import (
    AUTO_FLOOR,
    AUTO_MARGIN,
    Thresholds,
    auto_thresholds,
    correction_weights,
    divergence_from_sequences,
    divergence_percentiles,
    response_divergence,
    trl_sequence_log_weight,
    trl_sequence_weight,
)


def padded(rows: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    values = torch.zeros(len(rows), width, dtype=torch.float64)
    mask = torch.zeros_like(values)
    for i, row in enumerate(rows):
        values[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
        mask[i, : len(row)] = 1
    return values, mask


def test_weight_is_the_formula_on_hand_made_logprobs():
    old, mask = padded([[-1.0, -2.0, -0.5], [-0.1], [-3.0, -0.2]])
    mu, _ = padded([[-1.1, -1.7, -0.5], [-0.4], [-3.0, -0.25]])
    mu[0, 2] = 7.0  # the padding of row 1 and 2 is never read; neither is a masked value here
    mask[0, 2] = 0
    div = response_divergence(old, mu, mask)
    expected = [((-1.0 + 1.1) + (-2.0 + 1.7)) / 2, -0.1 + 0.4, (0.0 + 0.05) / 2]
    assert div.log_weight.tolist() == pytest.approx(expected, abs=1e-15)
    assert div.max_token.tolist() == pytest.approx([0.3, 0.3, 0.05], abs=1e-15)
    k3 = lambda d: math.expm1(d) - d  # noqa: E731
    assert div.k3.tolist() == pytest.approx([(k3(0.1) + k3(-0.3)) / 2, k3(0.3), k3(0.05) / 2], abs=1e-15)
    assert div.lengths.tolist() == [2, 1, 2]
    weights = correction_weights(div, "truncate", Thresholds(weight_max=10.0))
    assert weights.weight.tolist() == pytest.approx([math.exp(e) for e in expected], rel=1e-15)


def test_a_missing_engine_logprob_counts_as_no_gap_as_in_trl():
    div = response_divergence(
        torch.tensor([[-1.0, -2.0]]), torch.tensor([[math.nan, -2.5]]), torch.ones(1, 2)
    )
    assert div.log_weight.tolist() == pytest.approx([0.25])


@pytest.mark.parametrize("gap", [1e-3, -1e-3, 3e-4])
def test_weight_does_not_depend_on_length_under_a_constant_gap_while_trls_product_does(gap):
    lengths = [16, 256, 1100, 4096, 16384]
    old = torch.full((len(lengths), max(lengths)), -0.7, dtype=torch.float64)
    mask = (torch.arange(max(lengths)) < torch.tensor(lengths).unsqueeze(1)).double()
    mu = old - gap
    ours = torch.exp(response_divergence(old, mu, mask).log_weight)
    trl = torch.exp(trl_sequence_log_weight(old, mu, mask))
    assert ours.tolist() == pytest.approx([math.exp(gap)] * len(lengths), rel=1e-12)
    assert trl.tolist() == pytest.approx([math.exp(gap * n) for n in lengths], rel=1e-9)
    # TRL's sequence_mask with its default range [0, 3] (GRPOConfig.vllm_importance_sampling_clip_max):
    # a +1e-3 nats/token gap zeroes every response past log(3) / 1e-3 = 1099 tokens, and only those
    masked = trl_sequence_weight(trl_sequence_log_weight(old, mu, mask), "sequence_mask", 3.0, None)
    zeroed = [n for n, w in zip(lengths, masked.tolist(), strict=True) if w == 0]
    assert zeroed == ([n for n in lengths if gap * n > math.log(3)])
    kept = correction_weights(response_divergence(old, mu, mask), "reject", Thresholds(1.01, 0.99))
    assert not kept.rejected.any()  # ours: the same weight, kept, at every length


def test_reject_masks_exactly_the_responses_outside_the_range():
    log_w = [-0.2, -0.05, 0.0, 0.04, 0.1, 0.3]
    old = torch.tensor(log_w, dtype=torch.float64).unsqueeze(1) - 1.0
    mu = torch.full_like(old, -1.0)
    div = response_divergence(old, mu, torch.ones_like(old))
    low, high = math.exp(-0.1), math.exp(0.05)
    result = correction_weights(div, "reject", Thresholds(weight_max=high, weight_min=low))
    outside = [not (-0.1 <= x <= 0.05) for x in log_w]
    assert result.rejected.tolist() == outside
    assert result.weight.tolist() == pytest.approx(
        [0 if o else math.exp(x) for x, o in zip(log_w, outside, strict=True)]
    )
    truncated = correction_weights(div, "truncate", Thresholds(weight_max=high, weight_min=low))
    assert not truncated.rejected.any()  # truncate ignores weight_min and never zeroes
    assert truncated.truncated.tolist() == [x > 0.05 for x in log_w]
    assert truncated.weight.tolist() == pytest.approx([min(math.exp(x), high) for x in log_w])


@pytest.mark.parametrize(
    ("rule", "value", "rejected"),
    [
        # response 0: one token 0.5 nats off (mean 0.05); response 1: every token 0.06 off (mean 0.06)
        ("reject_max_token", 0.3, [True, False]),
        ("reject_max_token", 0.6, [False, False]),
        ("reject_k3", 0.01, [True, False]),  # K3 mean: 0.0149 vs 0.0018: one large token weighs more
        ("reject_k3", 0.001, [True, True]),
    ],
)
def test_token_rules_reject_what_the_mean_hides(rule, value, rejected):
    old = torch.tensor([[-1.0] * 9 + [-0.5], [-0.94] * 10], dtype=torch.float64)
    mu = torch.full_like(old, -1.0)
    div = response_divergence(old, mu, torch.ones_like(old))
    assert div.log_weight.tolist() == pytest.approx([0.05, 0.06])
    result = correction_weights(div, "truncate", Thresholds(weight_max=2.0, **{rule: value}))
    assert result.rejected.tolist() == rejected
    assert result.weight[result.rejected].eq(0).all()


def test_engine_equal_to_trainer_gives_weight_exactly_one():
    old = torch.randn(8, 30, dtype=torch.float32).log_softmax(-1)
    mask = (torch.rand(8, 30) > 0.2).float()
    div = response_divergence(old, old.clone(), mask)
    for mode in ("truncate", "reject"):
        result = correction_weights(div, mode, Thresholds(1.001, 0.999, 0.05, 1e-4))
        assert result.weight.eq(1.0).all() and not result.rejected.any() and not result.truncated.any()


def test_auto_thresholds_are_a_margin_over_the_measured_99th_percentile():
    torch.manual_seed(0)
    engine = [torch.randn(n, dtype=torch.float64) for n in (5, 50, 500) * 40]
    trainer = [e + 0.02 * torch.randn_like(e) for e in engine]
    div = divergence_from_sequences(trainer, engine)
    p = divergence_percentiles(div)
    assert p["responses"] == 120
    assert p["log_weight_abs"] == pytest.approx(torch.quantile(div.log_weight.abs(), 0.99).item())
    wanted = {"weight_max", "weight_min", "reject_max_token", "reject_k3"}
    auto = auto_thresholds(p, wanted)
    a = max(AUTO_MARGIN * p["log_weight_abs"], AUTO_FLOOR["log_weight"])
    assert auto["weight_max"] == pytest.approx(math.exp(a)) and auto["weight_min"] == pytest.approx(
        math.exp(-a)
    )
    assert auto["reject_max_token"] == pytest.approx(AUTO_MARGIN * p["max_token"])
    assert auto["reject_k3"] == pytest.approx(max(AUTO_MARGIN * p["k3"], AUTO_FLOOR["k3"]))
    # the calibrating batch itself: nothing rejected by the token rules it was measured on
    result = correction_weights(div, "reject", Thresholds(**auto))
    assert result.rejected.float().mean().item() <= 0.01
    assert set(auto_thresholds(p, {"reject_k3"})) == {"reject_k3"}


def test_auto_thresholds_of_a_matched_engine_are_the_floors():
    zero = {"log_weight_abs": 0.0, "max_token": 0.0, "k3": 0.0, "responses": 10.0}
    auto = auto_thresholds(zero, {"weight_max", "reject_max_token", "reject_k3"})
    assert auto == {
        "weight_max": math.exp(AUTO_FLOOR["log_weight"]),
        "reject_max_token": AUTO_FLOOR["max_token"],
        "reject_k3": AUTO_FLOOR["k3"],
    }


def test_thresholds_from_a_check_logprobs_report(tmp_path):
    import json

    from gspo_trl.config.sections import EngineConfig
    from gspo_trl.config.sections.engine_correction import CALIBRATION_KEY
    from gspo_trl.diagnose.check_logprobs import LogprobPairs, agreement_report
    from gspo_trl.training.probes.correction import CorrectionRun

    torch.manual_seed(1)
    engine = [torch.randn(n, dtype=torch.float64) for n in (4, 9, 30) * 10]
    trainer = [e + 0.05 * torch.randn_like(e) for e in engine]
    report = agreement_report(LogprobPairs(engine, trainer, [[]] * 30, [[]] * 30), 3e-4, 4e-4)
    assert report[CALIBRATION_KEY] == divergence_percentiles(divergence_from_sequences(trainer, engine))
    path = tmp_path / "check.json"
    path.write_text(json.dumps(report))
    config = EngineConfig(correction="reject", reject_k3="auto", thresholds_from=str(path))
    correction = CorrectionRun(config.correction_settings(), (64,))
    chosen = auto_thresholds(report[CALIBRATION_KEY], {"weight_max", "weight_min", "reject_k3"})
    assert correction.thresholds == Thresholds(**chosen, how=f"auto from {path}")
