"""Pure diagnostics statistics: quantiles, clip fractions by side / sign / length, the alarm."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from gspo_trl.config.sections import DiagnosticsConfig
from gspo_trl.training.probes.diagnostics import ClipAlarm
from gspo_trl.training.ratio_stats import (
    ROW_COLUMNS,
    bucket_labels,
    clip_fraction_by_length,
    clip_fractions,
    log_ratio_quantiles,
    sequence_log_ratio,
    summarize_rows,
)

EPS = dict(eps_low=0.1, eps_high=0.2)
UP, DOWN, IN = math.log(1.3), math.log(0.85), 0.0  # above 1.2, below 0.9, inside the range


@pytest.mark.parametrize(
    ("log_s", "adv", "expected"),
    [
        # one response per case: (clip/low, clip/high, outside/low, outside/high)
        ([UP], [1.0], dict(low=0, high=1, outside_low=0, outside_high=1)),
        ([UP], [-1.0], dict(low=0, high=0, outside_low=0, outside_high=1)),
        ([DOWN], [-1.0], dict(low=1, high=0, outside_low=1, outside_high=0)),
        ([DOWN], [1.0], dict(low=0, high=0, outside_low=1, outside_high=0)),
        ([IN], [1.0], dict(low=0, high=0, outside_low=0, outside_high=0)),
        ([UP], [0.0], dict(low=0, high=0, outside_low=0, outside_high=1)),  # zero advantage never clips
    ],
)
def test_clip_side_table(log_s, adv, expected):
    stats = clip_fractions(torch.tensor(log_s), torch.tensor(adv), **EPS)
    assert stats["clip/low"] == expected["low"]
    assert stats["clip/high"] == expected["high"]
    assert stats["clip/region"] == expected["low"] + expected["high"]
    assert stats["outside/low"] == expected["outside_low"]
    assert stats["outside/high"] == expected["outside_high"]


def test_clip_fraction_by_advantage_sign():
    log_s = torch.tensor([UP, UP, IN, IN, DOWN, DOWN, DOWN, UP])
    adv = torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 1.0, -1.0])
    stats = clip_fractions(log_s, adv, **EPS)
    assert stats["clip/pos_adv"] == pytest.approx(2 / 5)  # 5 positive, 2 above the range
    assert stats["clip/neg_adv"] == pytest.approx(2 / 3)  # 3 negative, 2 below the range
    assert stats["clip/region"] == pytest.approx(4 / 8)


def test_clip_by_sign_is_nan_when_a_sign_is_absent():
    stats = clip_fractions(torch.tensor([UP]), torch.tensor([1.0]), **EPS)
    assert math.isnan(stats["clip/neg_adv"])


@pytest.mark.parametrize(
    ("buckets", "labels"),
    [
        ((64, 256, 1024), ["len_0-64", "len_64-256", "len_256-1024", "len_1024-inf"]),
        ((10,), ["len_0-10", "len_10-inf"]),
        ((), ["len_0-inf"]),
    ],
)
def test_bucket_labels(buckets, labels):
    assert bucket_labels(buckets) == labels


def test_clip_fraction_by_length_bucket_edges():
    lengths = torch.tensor([1, 63, 64, 255, 256, 2000])  # lower edge inclusive
    log_s = torch.tensor([UP, IN, UP, UP, IN, IN])
    adv = torch.ones(6)
    stats = clip_fraction_by_length(log_s, adv, lengths, **EPS, length_buckets=(64, 256, 1024))
    assert stats == {
        "clip/len_0-64": 0.5,
        "clip/len_64-256": 1.0,
        "clip/len_256-1024": 0.0,
        "clip/len_1024-inf": 0.0,
    }
    stats = clip_fraction_by_length(log_s[:2], adv[:2], lengths[:2], **EPS, length_buckets=(64, 256))
    assert set(stats) == {"clip/len_0-64"}  # empty buckets are left out, not reported as 0


def test_quantiles_match_numpy_definitions():
    x = torch.linspace(-1.0, 1.0, 201, dtype=torch.float64)
    q = log_ratio_quantiles(x)
    assert q["p5"] == pytest.approx(-0.9)
    assert q["p50"] == pytest.approx(0.0, abs=1e-12)
    assert q["p95"] == pytest.approx(0.9)
    assert (q["min"], q["max"], q["mean"]) == pytest.approx((-1.0, 1.0, 0.0))
    assert q["std"] == pytest.approx(x.std().item())
    assert log_ratio_quantiles(torch.tensor([])) == {}


@pytest.mark.parametrize("size", [1, 2, 3, 7, 20, 21, 64, 257])
def test_quantiles_equal_numpys_bit_for_bit(size):
    """The quantiles interpolate on the sorted values themselves (numpy's call is slow per log):
    they must be np.quantile's numbers exactly, ties and repeated values included."""
    rng = np.random.default_rng(size)
    for x in (rng.normal(0.0, 3e-4, size), rng.integers(-3, 3, size) * 1e-4, np.full(size, 2e-4)):
        q = log_ratio_quantiles(torch.tensor(x))
        p5, p50, p95 = np.quantile(x, [0.05, 0.5, 0.95])
        assert (q["p5"], q["p50"], q["p95"]) == (float(p5), float(p50), float(p95))
        assert (q["min"], q["max"]) == (float(x.min()), float(x.max()))


def test_a_nan_log_ratio_makes_every_quantile_nan():
    q = log_ratio_quantiles(torch.tensor([0.1, float("nan"), -0.2]))
    assert all(math.isnan(v) for v in q.values()) and len(q) == 7


def test_sequence_log_ratio_ignores_padding():
    new = torch.tensor([[0.1, 0.3, 99.0], [0.2, 99.0, 99.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert sequence_log_ratio(new, torch.zeros_like(new), mask).tolist() == pytest.approx([0.2, 0.2])


def test_summarize_rows_drops_padding_rows_and_weights_entropy_by_tokens():
    rows = torch.tensor(
        [
            # log_s, adv, length, entropy_sum, tokens, valid
            [UP, 1.0, 10, 20.0, 10, 1],
            [IN, -1.0, 100, 100.0, 100, 1],
            [DOWN, -1.0, 5, 0.0, 0, 0],  # padding from a gather: must not count
        ]
    )
    assert rows.shape[1] == len(ROW_COLUMNS)
    stats = summarize_rows(rows, **EPS, length_buckets=(64,))
    assert stats["responses"] == 2
    assert stats["entropy"] == pytest.approx(120.0 / 110.0)
    assert stats["clip/region"] == 0.5
    assert stats["clip/len_0-64"] == 1.0 and stats["clip/len_64-inf"] == 0.0
    assert "clip/neg_adv" in stats and stats["clip/neg_adv"] == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(length_buckets=(256, 64)),
        dict(length_buckets=(0, 64)),
        dict(warn_clip_fraction=0.0),
        dict(warn_after_steps=0),
    ],
)
def test_config_rejects_nonsense(kwargs):
    with pytest.raises(ValueError, match="diagnostics"):
        DiagnosticsConfig(**kwargs)


def test_config_accepts_a_yaml_list_for_buckets():
    assert DiagnosticsConfig(length_buckets=[32, 128]).length_buckets == (32, 128)


def test_alarm_everything_clipped_fires_once_after_a_streak(caplog):
    alarm = ClipAlarm(DiagnosticsConfig(warn_clip_fraction=0.5, warn_after_steps=3))
    high = {"clip/pos_adv": 0.8, "clip/region": 0.6, "log_ratio/p5": -1e-3, "log_ratio/p95": 2e-3}
    low = {"clip/pos_adv": 0.2, "clip/region": 0.1}
    with caplog.at_level(logging.WARNING, logger="gspo_trl.training.probes.diagnostics"):
        assert alarm.update(high, 3e-4, 4e-4) is None
        assert alarm.update(high, 3e-4, 4e-4) is None
        assert alarm.update(low, 3e-4, 4e-4) is None  # streak broken
        assert alarm.update(high, 3e-4, 4e-4) is None
        assert alarm.update(high, 3e-4, 4e-4) is None
        message = alarm.update(high, 3e-4, 4e-4)
        assert alarm.update(high, 3e-4, 4e-4) is None  # once only
    assert message is not None and "80%, 80%, 80%" in message and "eps_high=0.0004" in message
    assert [r.getMessage() for r in caplog.records] == [message]


def test_alarm_nothing_clipped_fires_after_many_steps():
    alarm = ClipAlarm(DiagnosticsConfig(warn_no_clip_steps=4))
    quiet = {"clip/pos_adv": 0.0, "clip/region": 0.0}
    messages = [alarm.update(quiet, 0.2, 0.2) for _ in range(6)]
    assert messages[:3] == [None] * 3
    assert messages[3] is not None and "4 consecutive" in messages[3]
    assert messages[4:] == [None, None]
