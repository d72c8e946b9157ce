"""The user's entry points train for real: `gspo-trl train`, `accelerate launch -m gspo_trl.train`
(README.md's commands as written, with fewer steps), and `gspo-trl tiny-model`; into a log file,
each prints its own lines and no library progress bar."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.training.build import build_trainer
from tests._paths import ROOT
from tests._readme import readme_command

BIN = Path(sys.executable).parent

FAST = [
    "--max_steps",
    "4",
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "8",
    "--data.num_rows",
    "64",
    "--data.eval_size",
    "8",
]


LIBRARY_BARS = ("Loading weights", "Writing model shards", "Map:", "\r")
"""What transformers (weights loaded and saved) and datasets (map) print as bars, and a bar's
carriage return: none may reach a log file."""


def env() -> dict[str, str]:
    """Offline; without the *_DISABLE_PROGRESS_BARS switches that gspo_trl's CLI, run in this test
    process by other tests, sets in os.environ: the command must set them itself."""
    kept = {k: v for k, v in os.environ.items() if not k.endswith("_DISABLE_PROGRESS_BARS")}
    return {**kept, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def run_cli(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run a command with its output to pipes (as to a log file); it must succeed and print no
    library bar."""
    result = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env(), timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for bar in LIBRARY_BARS:
        assert bar not in result.stderr, result.stderr[-3000:]
    return result


def as_written(command: str, cwd: Path) -> list[str]:
    """A README.md command's words (tests/test_readme.py checks which ones are run here), its
    console script from this environment, to run from `cwd`, which gets the repository's recipes."""
    (cwd / "recipes").symlink_to(ROOT / "recipes")
    words = shlex.split(command)
    return [*gspo_trl_command(), *words[1:]] if words[0] == "gspo-trl" else [str(BIN / words[0]), *words[1:]]


@pytest.mark.parametrize(
    ("algorithm", "level", "eps_low", "eps_high", "gspo_token"),
    [
        ("gspo", "sequence", 3e-4, 4e-4, False),
        ("gspo_token", "token", 3e-4, 4e-4, True),
        ("grpo", "token", 0.2, 0.27, False),
    ],
)
def test_gspo_defaults_reach_the_trl_trainer(
    tmp_path: Path, algorithm: str, level: str, eps_low: float, eps_high: float, gspo_token: bool
) -> None:
    recipe = load_recipe(
        None,
        {
            "algorithm": algorithm,
            "rewards": ["gspo_trl.data.synthetic:digit_reversal_reward"],
            "data": {"num_rows": 32, "solution_column": "solution"},
            "output_dir": str(tmp_path),
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 16,  # the built-in tiny model has 512 positions in all
            "report_to": "none",
        },
    )
    trainer = build_trainer(recipe)
    # Read back from the objects TRL's loss actually uses, not from our recipe.
    assert trainer.importance_sampling_level == level
    assert trainer.loss_type == "grpo"
    assert trainer.beta == 0.0
    assert trainer.epsilon_low == pytest.approx(eps_low)
    assert trainer.epsilon_high == pytest.approx(eps_high)
    assert trainer.args.steps_per_generation == 4
    assert trainer.args.gradient_accumulation_steps == 1
    assert trainer.args.generation_batch_size == 32
    assert trainer.ref_model is None  # beta = 0: no reference model is loaded
    assert trainer.gspo_token is gspo_token


@pytest.mark.slow
def test_gspo_trl_train_runs_real_steps_and_saves(tmp_path: Path) -> None:
    out = tmp_path / "run"
    readme = readme_command("gspo-trl train")
    command = as_written(readme, tmp_path)
    run_cli([*command, *FAST, "--heldout.k", "[1, 2]", "--output_dir", str(out)], cwd=tmp_path)
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    logged = {key for entry in state["log_history"] for key in entry}
    assert {"reward", "heldout/score", "heldout/pass@2", "gspo/offpolicy/log_ratio/p50"} <= logged
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)  # the saved model loads
    resolved = load_recipe(out / "recipe.yaml")  # the run records what produced it, loadably
    assert resolved.training["max_steps"] == 4 and resolved.training["epsilon"] == 0.02
    assert resolved.model.name_or_path == "tiny"
    words = shlex.split(readme)  # gspo-trl train RECIPE --key value ...
    overrides = dict(zip(words[3::2], words[4::2], strict=True))
    assert resolved.training["learning_rate"] == float(overrides["--learning_rate"])  # reached the run
    assert resolved.model.dtype == overrides["--model.dtype"]


@pytest.mark.slow
def test_accelerate_launch_entry_point(tmp_path: Path) -> None:
    """No accelerate config (none on CI): one CPU process, as on a user's CPU machine."""
    out = tmp_path / "run"
    command = as_written(readme_command("accelerate launch -m gspo_trl.train"), tmp_path)
    run_cli([*command, *FAST, "--max_steps", "2", "--output_dir", str(out)], cwd=tmp_path)
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2


def test_tiny_model_cli_writes_a_loadable_model(tmp_path: Path) -> None:
    """tiny-model's module imports transformers before the command runs: the progress-bar
    switches must be set before that (run_cli checks its log holds no bar)."""
    result = run_cli(
        [sys.executable, "-m", "gspo_trl.cli.main", "tiny-model", str(tmp_path / "m")], cwd=tmp_path
    )
    assert "written" in result.stdout
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert model.config.head_dim >= 32  # vLLM's CPU backend refuses smaller heads
    text = "reverse 12 34\n ok"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # byte-level: spaces survive


def gspo_trl_command() -> list[str]:
    """The installed console script, as a user runs it (python -m when not installed)."""
    script = Path(sys.executable).parent / "gspo-trl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gspo_trl.cli.main"]
