"""The seed reproductions in scripts/: concentration table and toy GSPO-vs-GRPO benchmark."""

from __future__ import annotations

import math

import pytest

from tests._gspo_helpers import single_torch_thread  # noqa: F401
from tests._paths import ROOT
from tests._scripts import load_script

SCRIPTS = ROOT / "scripts"


def test_concentration_matches_the_notes():
    bench = load_script("bench_concentration")
    n = 20_000
    rows = {r["length"]: r for r in bench.simulate([16, 1024, 4096], responses=n, sigma=0.1, seed=1)}
    for length, expected in [(16, 0.0250), (1024, 0.0031), (4096, 0.0016)]:
        row = rows[length]
        sampling_error = 0.1 / math.sqrt(length) / math.sqrt(2 * n)  # std of a sample std
        assert abs(row["sequence_spread"] - expected) < 4 * sampling_error + 5e-5, (length, row)
        assert row["token_spread"] == pytest.approx(0.100, abs=5e-4)
        assert row["token_outside_token_range"] == pytest.approx(0.021, abs=0.001)
    assert rows[4096]["sequence_outside_paper_range"] > 0.80
    assert rows[16]["sequence_outside_paper_range"] > rows[4096]["sequence_outside_paper_range"]


def test_concentration_script_prints_a_table(capsys):
    assert load_script("bench_concentration").main(["--lengths", "16", "64", "--responses", "2000"]) == 0
    out = capsys.readouterr().out
    assert "log s_i spread" in out and len(out.strip().splitlines()) == 4


@pytest.fixture(scope="module")
def toy():
    return load_script("bench_toy")


@pytest.mark.slow
def test_toy_ties_without_noise(toy):
    grpo = toy.run_toy("grpo", 32, 0.0)["accuracy"]
    gspo = toy.run_toy("gspo", 32, 0.0)["accuracy"]
    assert 0.70 < gspo.mean() < 0.85, "starts at 1/6, the notes report ~0.76 after 100 steps"
    assert abs((gspo - grpo).mean().item()) < 0.01


@pytest.mark.slow
@pytest.mark.parametrize(("length", "sigma", "min_gap"), [(32, 1.0, 0.05), (128, 0.3, 0.012)])
def test_toy_gspo_ahead_under_noise(toy, length, sigma, min_gap):
    grpo = toy.run_toy("grpo", length, sigma)["accuracy"]
    gspo = toy.run_toy("gspo", length, sigma)["accuracy"]
    gap = gspo - grpo
    assert gap.mean().item() > min_gap
    assert (gap > 0).all(), f"every seed should favour GSPO, got {gap.tolist()}"
