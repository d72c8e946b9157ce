"""A hub model that is not cached, with the hub off limits: one line naming it and the fixes.

Through the real `gspo-trl` command in a subprocess (HF_HUB_OFFLINE=1, an empty HF_HOME), for
every command that loads a model: no traceback, a few lines of stderr, exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._paths import ROOT

MISSING = "Qwen/Qwen3-0.6B"
FIXES = ("hf download", "HF_HUB_OFFLINE", "local folder")


def _gspo_trl(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    env.pop("HF_HUB_CACHE", None)
    env.pop("TRANSFORMERS_CACHE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "gspo_trl.cli.main", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _adapter(tmp_path: Path) -> str:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": MISSING}))
    return str(adapter)


COMMANDS = {
    "train": lambda tmp: ["train", str(ROOT / "gspo_trl/recipes/tiny/reversal.yaml"), "--model.name_or_path",
                          MISSING, "--output_dir", str(tmp / "run")],
    "eval": lambda tmp: ["eval", MISSING, "--data", "synthetic:reversal", "--max-rows", "2",
                         "--engine", "hf"],
    "merge": lambda tmp: ["merge", _adapter(tmp), str(tmp / "merged")],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_uncached_hub_model_offline_is_one_line_naming_it_and_the_fixes(command, tmp_path) -> None:
    result = _gspo_trl(COMMANDS[command](tmp_path), tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert len(result.stderr.splitlines()) <= 5, result.stderr
    line = errors[0]
    assert repr(MISSING) in line and str(tmp_path / "hf-home") in line, line
    for fix in FIXES:
        assert fix in line, (fix, line)


def test_a_library_warning_is_printed_once(tmp_path) -> None:
    """huggingface_hub gives its logger a handler and propagates to ours: the hub's retry
    warnings came out twice, once bare and once in our format."""
    script = (
        "import sys, logging\n"
        "from gspo_trl.cli.main import run_command\n"
        "def main(argv):\n"
        "    from huggingface_hub.utils import logging as hub_logging\n"
        "    hub_logging.get_logger('huggingface_hub.utils._http').warning('Retrying in 1s [Retry 1/5].')\n"
        "    logging.getLogger('gspo_trl.test').info('ours')\n"
        "sys.exit(run_command('x', main, []))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("Retrying in 1s") == 1, result.stderr
    assert "ours" in result.stderr


def test_other_load_errors_keep_their_own_type() -> None:
    """Only hub and network failures become the one-line error; a bug's OSError passes."""
    from gspo_trl.model.loading.hub import hub_model_errors

    with pytest.raises(PermissionError), hub_model_errors(MISSING):
        raise PermissionError("disk says no")


def test_validate_passes_a_recipe_whose_model_is_not_downloaded_yet_and_says_so(tmp_path) -> None:
    """A recipe is valid before its model is downloaded (one validates on a login node, then
    downloads): validate exits 0 and notes that train will refuse it until then."""
    import subprocess
    import sys

    from tests._paths import FIXTURES

    command = [sys.executable, "-m", "gspo_trl.cli.main", "validate", "qwen3-1.7b/math"]
    command += ["--data.path", str(FIXTURES / "dapo-math.jsonl"), "--data.eval_size", "1"]
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "note: train will refuse this until the model is there" in done.stdout
    assert "hf download Qwen/Qwen3-1.7B" in done.stdout
