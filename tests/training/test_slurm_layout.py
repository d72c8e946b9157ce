"""Issue 35 item 7: scripts/slurm/train.slurm takes the vLLM layout from the recipe's `launch:`
section, has `--help`, and its dry run prints plain commands.

On main the README's 8B command (no --vllm-tp/--vllm-dp) started vLLM as TP 1 x DP 8 while the
recipe and `gspo-trl plan` say TP 2 x DP 4; `--help` was "unknown option"; and the dry run
printed `printf %q` words (`\\$`, `\\ ` escapes through the whole host-IP prefix).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from tests._paths import ROOT
from tests._readme import readme_command

SCRIPT = ROOT / "scripts" / "slurm" / "train.slurm"


def slurm(*args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    env["PYTHON"] = sys.executable
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def layout(stdout: str) -> tuple[str, str, str]:
    server = shlex.split(next(line for line in stdout.splitlines() if "vllm-serve" in line).rstrip("&"))
    gpus = next(a for a in server if a.startswith("--gpus-per-node=")).split("=", 1)[1]
    tp = server[server.index("--tensor_parallel_size") + 1]
    return tp, server[server.index("--data_parallel_size") + 1], gpus


def test_help_prints_the_usage() -> None:
    for flag in ("--help", "-h"):
        result = slurm(flag)
        assert result.returncode == 0 and "Options:" in result.stdout and "launch:" in result.stdout
        assert "#SBATCH" not in result.stdout and not result.stdout.startswith("#")


def test_the_readme_command_runs_the_recipes_layout() -> None:
    """The README's dry run names neither TP nor DP: both come from recipes/qwen3-8b/math.yaml."""
    from gspo_trl.config.recipe import load_recipe

    words = shlex.split(readme_command("scripts/slurm/train.slurm --dry-run"))
    result = slurm(*words[1:])
    assert result.returncode == 0, result.stderr
    launch = load_recipe(ROOT / "recipes" / "qwen3-8b" / "math.yaml").launch
    expected = (launch.server_tensor_parallel_size, launch.server_data_parallel_size, launch.gpus_per_node)
    assert layout(result.stdout) == tuple(map(str, expected)) == ("2", "4", "8")
    assert f"--config_file {launch.accelerate_config}" in result.stdout


def test_a_flag_overrides_the_recipe_and_says_so() -> None:
    args = (
        "--dry-run",
        "--model",
        "m",
        "--recipe",
        "recipes/qwen3-8b/math.yaml",
        "--vllm-tp",
        "4",
        "--vllm-dp",
        "2",
    )
    result = slurm(*args)
    assert result.returncode == 0, result.stderr
    assert layout(result.stdout) == ("4", "2", "8")
    assert "--vllm-tp 4 overrides the recipe's launch.server_tensor_parallel_size 2" in result.stderr


def test_the_dry_run_prints_plain_commands() -> None:
    result = slurm("--dry-run", "--model", "Qwen/Qwen3-8B", "--recipe", "recipes/qwen3-8b/math.yaml")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 3
    for line in lines:
        assert "\\" not in line, line  # no %q escapes: quoted words are single-quoted, as typed
        syntax = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True, timeout=30)
        assert syntax.returncode == 0, (line, syntax.stderr)
    server = shlex.split(lines[0].rstrip("&"))
    script = server[server.index("-c") + 1]
    assert script.startswith("address=$(python3 -c") and script.endswith('exec "$@"')
