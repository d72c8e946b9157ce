"""Every command in README.md's bash blocks is run here, or by the test that owns it.

Commands run as written, from a scratch directory that holds the repository's recipes,
configs and scripts and the demo's output (`runs/demo`, from the `demo_run` fixture), with
these documented adjustments so that the suite stays within CI's time on 2 cores:
commands that sample or measure get FAST overrides appended (fewer rows, batches and samples;
`eval` and `filter` on HF, vLLM's sampling being test_evaluate's), and a command another test
runs as written is checked to be run there (OWNED_ELSEWHERE) instead of twice: `train`,
`accelerate launch` and `check-logprobs`.
Commands that need GPUs or slurm are checked to be exercised elsewhere: the accelerate
configs by tests/training/test_distributed.py (on 2 CPU processes), the recipes by
tests/data/test_recipe_fixtures.py (2 steps each on the tiny model, on rows of the dataset's real
schema), `sbatch` by its `--dry-run` twin.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests._demo_run import DEMO_TIMEOUT_S
from tests._paths import ROOT
from tests._readme import readme_commands

COMMAND_TIMEOUT_S = 900
BIN = Path(sys.executable).parent
FAST_BY_SUBCOMMAND = {
    "calibrate": [
        *("--data.num_rows", "64", "--data.eval_size", "8", "--batches", "2"),
        *("--per_device_train_batch_size", "8", "--num_generations", "4"),
    ],
    # vLLM's sampling (Sampler.generate: n samples at T > 0, as filter and eval's pass@k draw
    # them) is tests/eval/test_evaluate.py::test_eval_with_vllm_engine's; here, HF's
    "filter": ["--num-samples", "4", "--data.num_rows", "24", "--data.eval_size", "4", "--engine", "hf"],
    "eval": ["--engine", "hf", "--max-rows", "16"],
}


COMMANDS = readme_commands()


def kind(command: str) -> str:
    words = command.split()
    if words[0] == "make":
        return "make"
    if words[0] == "sbatch":
        return "sbatch"
    if words[0] == "accelerate" and "--config_file" in words:
        return "accelerate-gpu"
    if owner(command):
        return "owned"
    return "run"


OWNED_ELSEWHERE = {
    "gspo-trl check-logprobs": "tests/diagnose/test_check_logprobs.py",
    "gspo-trl train": "tests/cli/test_train_entrypoint.py",
    "accelerate launch -m gspo_trl.train": "tests/cli/test_train_entrypoint.py",
}
"""README commands (by how they start) that another test runs as written, through
`readme_command(prefix)`, with its own checks and fewer steps or prompts. Run here as well, each
would pay its start-up twice: a vLLM engine, or a training process's imports (`from trl import
GRPOTrainer` alone: 14 s wall at load 1.4 on 2 cores, ~7 s of it TRL importing vLLM in
trl.generation.vllm_generation, per `python -X importtime`)."""


def owner(command: str) -> str | None:
    return next((prefix for prefix in OWNED_ELSEWHERE if command.startswith(prefix)), None)


@pytest.mark.parametrize("command", [c for c in COMMANDS if kind(c) == "owned"])
def test_commands_run_elsewhere_are_run_there(command: str) -> None:
    prefix = owner(command)
    path = OWNED_ELSEWHERE[prefix]
    runs = f'readme_command("{prefix}")'
    assert runs in (ROOT / path).read_text(), f"{path} no longer runs {command!r} ({runs})"


def test_readme_has_the_two_commands_first() -> None:
    assert COMMANDS[:2] == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.MULTILINE), "CI must run exactly the README's test command"


@pytest.mark.parametrize("command", [c for c in COMMANDS if kind(c) == "accelerate-gpu"])
def test_gpu_launches_are_exercised_on_cpu_elsewhere(command: str) -> None:
    words = command.split()
    config = words[words.index("--config_file") + 1]
    recipe = words[words.index("--config") + 1]
    assert (ROOT / config).is_file() and (ROOT / recipe).is_file()
    launches = [
        ROOT / "tests" / "training" / "test_distributed.py",
        ROOT / "tests" / "training" / "safety" / "test_interrupt.py",
    ]
    assert any(Path(config).name in test.read_text() for test in launches), f"{config}: no test launches it"
    fixture_tests = (ROOT / "tests" / "data" / "test_recipe_fixtures.py").read_text()
    assert 'RECIPES = sorted((ROOT / "recipes").glob("**/*.yaml"))' in fixture_tests  # every recipe runs


@pytest.mark.parametrize("command", [c for c in COMMANDS if kind(c) == "sbatch"])
def test_sbatch_has_a_dry_run_twin(command: str) -> None:
    arguments = command.split()[command.split().index("scripts/slurm/train.slurm") + 1 :]
    twins = [c for c in COMMANDS if c.startswith("scripts/slurm/train.slurm --dry-run")]
    assert any(set(arguments) <= set(t.split()) for t in twins), (command, twins)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, demo_run: Path) -> Path:
    work = tmp_path_factory.mktemp("readme")
    for name in ("recipes", "configs", "scripts"):
        (work / name).symlink_to(ROOT / name)
    (work / "runs").mkdir()
    (work / "runs" / "demo").symlink_to(demo_run)
    return work


@pytest.mark.slow
@pytest.mark.timeout(DEMO_TIMEOUT_S + COMMAND_TIMEOUT_S + 60)  # may include the session's demo run
@pytest.mark.parametrize("command", [c for c in COMMANDS if kind(c) == "run"])
def test_readme_command_runs(command: str, workdir: Path) -> None:
    words = shlex.split(command)
    if words[0] == "gspo-trl":
        words[0] = str(BIN / words[0])
        words += FAST_BY_SUBCOMMAND.get(words[1], [])
    if words[0].endswith("train.slurm"):
        words.insert(0, "bash")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    result = subprocess.run(
        words, cwd=workdir, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"


def _shape(line: str) -> str:
    """A summary line with its numbers and its CPU's name taken out."""
    line = re.sub(r"cores \(.*\), load", "cores (CPU), load", line)  # names hold "(R)"
    return re.sub(r"\d+(\.\d+)?", "#", line)


def test_the_readmes_demo_figures_are_time_demos_own_line() -> None:
    """The README quotes scripts/time_demo.sh's summary as printed (a measurement, with its
    machine and load), not a figure typed in by hand; the recipe header points to it."""
    from tests._scripts import load_script

    summary = load_script("time_demo_summary")
    runs = [["first", "91.0", "0.055", "0.845"], ["first", "95.5", "0.05", "0.85"]]
    printed = summary.summary_line(
        runs, [["repeat", "30.1", "0.055", "0.845"]], 2, "Intel(R) Xeon(R) CPU @ 2.20GHz", 1.5, True
    )
    quoted = [
        line.strip(" `") for line in (ROOT / "README.md").read_text().splitlines() if summary.PREFIX in line
    ]
    assert quoted, f"README.md quotes no line starting {summary.PREFIX!r}"
    for line in quoted:
        line = line[line.index(summary.PREFIX) :]
        assert _shape(line) in (_shape(printed), _shape(printed.split(", one busy")[0])), line
    header = (ROOT / "recipes" / "tiny" / "reversal.yaml").read_text()
    assert "scripts/time_demo.sh" in header and not re.search(r"\d+ s\b", header.split("\nalgorithm:")[0])
