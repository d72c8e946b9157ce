"""Only gspo_trl/training/trainer.py names TRL's (and transformers') private Trainer methods.

Every TRL minor release may move a private method; GSPOTrainer overrides each one once, quoting
the TRL line it relies on, and hands the event to its probes (gspo_trl.training.probes), so an
upgrade breaks one file. Read with `ast` (docstrings may cite the methods; code may not): an
attribute (`self._generate`), a definition (`def _compute_loss`) or a string naming one
(`getattr(trainer, "_evaluate")`) counts. The private names are GRPOTrainer's own, read from the
installed TRL: `_`-prefixed, not dunder.
"""

from __future__ import annotations

import ast

from trl import GRPOTrainer

from tests._paths import ROOT

PACKAGE = ROOT / "gspo_trl"
ALLOWED = PACKAGE / "training" / "trainer.py"
PRIVATE = frozenset(n for n in dir(GRPOTrainer) if n.startswith("_") and not n.startswith("__"))


def private_names(source: str) -> set[str]:
    """The TRL/transformers private method names `source` uses in code."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return found & PRIVATE


def test_the_private_names_are_trls_methods():
    assert {"_generate_and_score_completions", "_compute_loss", "_save_checkpoint", "_evaluate"} <= PRIVATE


def test_only_trainer_py_names_a_private_trl_method():
    offenders = {
        str(path.relative_to(ROOT)): sorted(names)
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != ALLOWED and (names := private_names(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, f"name TRL's private methods outside {ALLOWED.relative_to(ROOT)}: {offenders}"


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
