"""Only gspo_trl/training/trainer.py names TRL's (and transformers') private Trainer methods and state.

Every TRL minor release may move a private method; GSPOTrainer overrides each one once, quoting
the TRL line it relies on, and hands the event to its probes (gspo_trl.training.probes), so an
upgrade breaks one file. Read with `ast` (docstrings may cite the methods; code may not): an
attribute (`self._generate`), a definition (`def _compute_loss`) or a string naming one
(`getattr(trainer, "_evaluate")`) counts. The private names are read from the installed TRL:
GRPOTrainer's `_`-prefixed methods (not dunder), the `self._x` state TRL's and transformers'
trainers assign, and VLLMGeneration's private methods and state. The package and scripts/ are
read (a benchmark uses the probes' public events).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import transformers
import trl
from trl import GRPOTrainer
from trl.generation.vllm_generation import VLLMGeneration

from tests._paths import ROOT

PACKAGE = ROOT / "gspo_trl"
ALLOWED = PACKAGE / "training" / "trainer.py"
NOT_YET: dict[str, list[str]] = {}
"""Modules still naming a TRL private name outside trainer.py: to move, not to add to (the two
VLLMGeneration engine-build wrappers now register with gspo_trl.model.engine_build)."""
_TRL = Path(trl.__file__).parent
_STATE_SOURCES = (
    _TRL / "trainer" / "grpo_trainer.py",
    _TRL / "trainer" / "base_trainer.py",
    _TRL / "generation" / "vllm_generation.py",
    Path(transformers.__file__).parent / "trainer.py",
)


def _private(names: list[str]) -> set[str]:
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _assigned_state() -> set[str]:
    """`self._x = ...` / `self._x: T = ...` in the upstream trainers and engine wrapper."""
    pattern = re.compile(r"self\.(_[A-Za-z]\w*)\s*(?::[^=\n]+)?=(?!=)")
    return {
        m.group(1) for path in _STATE_SOURCES if path.exists() for m in pattern.finditer(path.read_text())
    }


PRIVATE = frozenset(_private(dir(GRPOTrainer)) | _private(dir(VLLMGeneration)) | _private(_assigned_state()))
SOURCES = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "scripts").rglob("*.py")])


def private_names(source: str) -> set[str]:
    """The TRL/transformers private names `source` uses in code."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return found & PRIVATE


def test_the_private_names_are_trls_methods_and_state():
    assert {"_generate_and_score_completions", "_compute_loss", "_save_checkpoint", "_evaluate"} <= PRIVATE
    assert {"_last_loaded_step", "_metrics", "_step", "_llm_weights_sleeping", "_init_vllm"} <= PRIVATE


def test_only_trainer_py_names_trls_private_methods_and_state():
    offenders = {
        str(path.relative_to(ROOT)): sorted(names)
        for path in SOURCES
        if path != ALLOWED and (names := private_names(path.read_text(encoding="utf-8")))
    }
    assert offenders == NOT_YET, f"name TRL's private names outside {ALLOWED.relative_to(ROOT)}: {offenders}"


def test_trainer_py_quotes_a_trl_line_for_each_override():
    tree = ast.parse(ALLOWED.read_text(encoding="utf-8"))
    overrides = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name in PRIVATE and node.name != "_get_output_dir"
    ]
    assert {n.name for n in overrides} >= {"_compute_loss", "_generate", "_save_checkpoint"}
    for node in overrides:
        doc = ast.get_docstring(node) or ""
        assert ".py:" in doc and "`" in doc, f"{node.name}: quote the TRL/transformers line it relies on"


def test_the_scan_catches_each_form_and_lets_docstrings_cite():
    source = (
        'def _compute_loss(self):\n    """TRL calls `self._save_checkpoint(model, trial)` here."""\n'
        '    self._generate([])\n    return getattr(self, "_evaluate")\n'
    )
    assert private_names(source) == {"_compute_loss", "_generate", "_evaluate"}


TRL_FLAGS_GSPO_WRITES = {"vllm_importance_sampling_correction"}
"""TRL state without a leading underscore that GSPOTrainer still changes mid-run (TRL reads it in
its rollout and loss): written through GSPOTrainer's methods, never by a probe or a script."""


def flag_writes(source: str) -> set[str]:
    """The TRL flags `source` assigns to an attribute (`x.flag = ...`)."""
    return {
        target.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and target.attr in TRL_FLAGS_GSPO_WRITES
    }


def test_only_trainer_py_writes_trls_correction_flag():
    assert flag_writes("trainer.vllm_importance_sampling_correction = False\n") == TRL_FLAGS_GSPO_WRITES
    offenders = [
        str(path.relative_to(ROOT))
        for path in SOURCES
        if path != ALLOWED and flag_writes(path.read_text("utf-8"))
    ]
    assert offenders == [], f"write TRL's flags through GSPOTrainer (trainer.py), not here: {offenders}"
