"""scripts/length_bias.py: the length bias of TRL's product rule against our mean rule (seconds, no vLLM)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests._scripts import load_script

length_bias = load_script("length_bias")


def test_formula_a_constant_gap_zeroes_trls_long_responses_and_none_of_ours():
    gap = 1e-3
    rows = [length_bias.formula_row(n, gap, 0.0) for n in length_bias.LENGTHS]
    assert [r["trl_sequence_mask"] for r in rows] == [
        float(gap * n > math.log(3)) for n in length_bias.LENGTHS
    ]
    assert {r["ours_reject"] for r in rows} == {0.0}
    negative = [length_bias.formula_row(n, -gap, 0.0) for n in length_bias.LENGTHS]
    expected = [float(-gap * n < math.log(0.1)) for n in length_bias.LENGTHS]
    assert [r["trl_sequence_truncate_below_0.1"] for r in negative] == expected


def test_sampling_from_a_token_pool_agrees_with_the_formula():
    pool = 2e-3 * torch.randn(20000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for n in (256, 1024):
        sampled = length_bias.sampled_row(pool, n, 1e-3, draws=4000, seed=1)
        expected = length_bias.formula_row(n, 1e-3 + pool.mean().item(), pool.std().item())
        assert sampled["trl_sequence_mask"] == pytest.approx(expected["trl_sequence_mask"], abs=0.03)


def test_main_on_a_saved_pool_writes_its_tables(tmp_path, capsys):
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps([1e-3, -1e-3, 2e-3, 0.0] * 50))
    out = tmp_path / "rows.json"
    argv = ["measured", "--pool", str(pool), "--gap", "0.001", "--lengths", "16", "2048", "--draws", "200"]
    assert length_bias.main([*argv, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["tables"]["0.001"]
    assert [r["length"] for r in rows] == [16, 2048]
    assert rows[1]["trl_sequence_mask"] == 1.0 and rows[1]["ours_reject"] == 0.0
    assert "| 2048 | 1.000 |" in capsys.readouterr().out
