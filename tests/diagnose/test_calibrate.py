"""`gspo-trl calibrate`: the eps rule on crafted rows, the run-log mode, and a real recipe run."""

from __future__ import annotations

import json
import math

import pytest
import torch

from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.diagnose import calibrate
from gspo_trl.training.ratio_stats import clip_fractions
from tests._gspo_helpers import single_torch_thread  # noqa: F401
from tests._paths import ROOT

RECIPE = ROOT / "recipes" / "tiny" / "reversal.yaml"


def crafted_rows(n: int = 4000, seed: int = 0, shift: float = 0.01, spread: float = 0.02) -> torch.Tensor:
    """Rows (ROW_COLUMNS) where A>0 responses drift up and A<0 down, as after real updates."""
    g = torch.Generator().manual_seed(seed)
    adv = torch.randn(n, generator=g)
    lengths = torch.randint(4, 2000, (n,), generator=g).double()
    log_s = shift * adv.sign() + spread * torch.randn(n, generator=g) / lengths.sqrt() * 10
    ones = torch.ones(n)
    return torch.stack([log_s, adv, lengths, ones, ones, ones], dim=1).double()


@pytest.mark.parametrize("target", [0.1, 0.2, 0.3])
def test_recommended_eps_clips_the_target_share_of_each_sign(target):
    rows = crafted_rows()
    log_s, adv = rows[:, 0], rows[:, 1]
    rec = calibrate.recommend(log_s, adv, target)
    stats = clip_fractions(log_s, adv, rec.eps_low, rec.eps_high)
    assert stats["clip/pos_adv"] == pytest.approx(target, abs=0.01)
    assert stats["clip/neg_adv"] == pytest.approx(target, abs=0.01)
    assert "A>0" in rec.high_from and "A<0" in rec.low_from


def test_a_sign_with_too_few_responses_falls_back_to_all():
    rows = crafted_rows(n=200)
    adv = -rows[:, 1].abs()
    adv[:3] = 1.0
    rec = calibrate.recommend(rows[:, 0], adv, 0.2)
    assert rec.high_from.startswith("all 200 responses (only 3")


def test_report_text_from_rows_names_the_verdict_and_reasoning():
    rows = crafted_rows()
    by_mb = [(1, torch.zeros(5, 6)), (2, rows[:2000]), (3, rows[2000:])]
    text = calibrate.analyse_rows(by_mb, (3e-4, 4e-4), (0.15, 0.25), (64, 256, 1024))
    assert "EVERYTHING CLIPPED" in text  # paper range vs a 1e-2 drift
    assert "#" in text and "1024-inf tok" in text and "Reasoning:" in text
    recommended = next(line for line in text.splitlines() if line.strip().startswith("recommended"))
    eps_low, eps_high = (float(x) for x in recommended.split()[1:3])
    text = calibrate.analyse_rows(by_mb, (eps_low, eps_high), (0.15, 0.25), (64, 256, 1024))
    assert "inside the target range" in text


def test_report_text_says_when_too_few_responses_carry_signal():
    rows = crafted_rows(n=100)
    rows[:, 1] = 0.0
    text = calibrate.analyse_rows([(2, rows)], (0.02, 0.03), (0.15, 0.25), (64,))
    assert "too few to judge" in text and "100% of these responses have zero advantage" in text


def test_from_run_fits_the_logged_spread(tmp_path, capsys):
    sigma = 0.01
    history = [
        {"step": s, "gspo/offpolicy/log_ratio/mean": 0.0, "gspo/offpolicy/log_ratio/std": sigma}
        for s in range(2, 20)
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    assert gspo_trl_main(["calibrate", "--from-run", str(tmp_path), "--target-range", "0.1", "0.1"]) == 0
    out = capsys.readouterr().out
    z = 1.2815515655446004  # standard normal 90% quantile
    expected_high, expected_low = math.exp(z * sigma) - 1, 1 - math.exp(-z * sigma)
    line = next(line for line in out.splitlines() if line.startswith("Recommended"))
    assert f"eps_high {expected_high:.3g}" in line and f"eps_low {expected_low:.3g}" in line
    assert gspo_trl_main(["calibrate", "--from-run", str(tmp_path / "missing")]) == 2


@pytest.mark.slow
def test_calibrate_a_real_recipe(tmp_path, capsys):
    argv = [str(RECIPE), "--batches", "2", "--output-dir", str(tmp_path)]
    argv += ["--per_device_train_batch_size", "8", "--num_generations", "4", "--learning_rate", "1e-3"]
    assert gspo_trl_main(["calibrate", *argv]) == 0
    out = capsys.readouterr().out
    assert "log s_i on 48 off-policy responses" in out  # 2 batches x 3 off-policy updates x 8
    # An untrained tiny model ties most groups: too few signed responses to recommend anything.
    assert "too few to judge" in out and "No recommendation:" in out and "recommended" not in out
    assert not list(tmp_path.glob("checkpoint-*")) and not (tmp_path / "optimizer.pt").exists()


def test_calibrate_from_a_run_in_python(tmp_path):
    """`gspo_trl.calibrate(CalibrateSettings(...))`, no argparse: the report the command prints."""
    from gspo_trl import CalibrateSettings, Calibration
    from gspo_trl import calibrate as calibrate_function

    history = [{"step": 2, "gspo/offpolicy/log_ratio/mean": 0.0, "gspo/offpolicy/log_ratio/std": 0.01}]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    result = calibrate_function(CalibrateSettings(from_run=tmp_path, target_range=(0.1, 0.1)))
    assert isinstance(result, Calibration) and result.recommendation is None
    assert result.report == calibrate.analyse_run(str(tmp_path), (0.1, 0.1))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "give a RECIPE or --from-run"),
        ({"recipe": "r.yaml", "target_range": (0.3, 0.2)}, "--target-range"),
    ],
)
def test_calibrate_settings_refuse_what_cannot_work(options, message):
    from gspo_trl import CalibrateSettings, UserError

    with pytest.raises(UserError, match=message):
        CalibrateSettings(**options)


def test_recommendation_is_the_one_the_report_prints():
    rows = crafted_rows()
    by_mb = [(2, rows[:2000]), (3, rows[2000:])]
    rec = calibrate.recommend_from_rows(by_mb, (0.15, 0.25))
    text = calibrate.analyse_rows(by_mb, (3e-4, 4e-4), (0.15, 0.25), (64,))
    printed = next(line for line in text.splitlines() if line.strip().startswith("recommended")).split()
    assert (f"{rec.eps_low:.3g}", f"{rec.eps_high:.3g}") == (printed[1], printed[2])
    few = crafted_rows(n=100)
    few[:, 1] = 0.0  # tied groups only: the report recommends nothing, and so does the result
    assert calibrate.recommend_from_rows([(2, few)], (0.15, 0.25)) is None


@pytest.mark.slow
def test_calibrate_a_recipe_in_python(tmp_path):
    """The library on the tiny recipe: one rollout batch, overrides as a dict, nothing saved."""
    from gspo_trl import CalibrateSettings
    from gspo_trl import calibrate as calibrate_function

    overrides = {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 6}
    settings = CalibrateSettings(recipe=RECIPE, overrides=overrides, batches=1, output_dir=str(tmp_path))
    result = calibrate_function(settings)
    assert "log s_i on 24 off-policy responses" in result.report  # 1 batch x 3 off-policy updates x 8
    assert result.current == (0.02, 0.027)  # the tiny recipe's eps
    assert not list(tmp_path.glob("checkpoint-*"))
