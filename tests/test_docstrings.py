"""Docstrings stay short and true: every `gspo_trl.x.y` they name exists, module docstrings fit a screen.

Read with `ast` (nothing is imported). A name resolves when it is a module of the package or a
name defined at the top level of one (`gspo_trl.data.presets.PRESETS`). A module docstring is the
module's contract (what it does, for whom, what it refuses, where its docs live) in at most
MAX_MODULE_DOCSTRING_LINES lines; design rationale, peer comparisons and upstream citations belong in docs/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests._paths import ROOT

MAX_MODULE_DOCSTRING_LINES = 15
DOTTED = re.compile(r"\bgspo_trl(?:\.[A-Za-z_]\w*)+")
SOURCES = sorted((ROOT / "gspo_trl").rglob("*.py"))


def _modules() -> dict[str, Path]:
    found = {}
    for path in SOURCES:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def resolves(dotted: str) -> bool:
    """A module, or a top-level name (and attributes of it) of the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        module = ".".join(parts[:cut])
        if module in MODULES:
            return cut == len(parts) or parts[cut] in _top_level_names(MODULES[module])
    return False


def strings_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_every_named_module_exists() -> None:
    stale = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in SOURCES
        for line, text in strings_of(path)
        for name in DOTTED.findall(text)
        if not resolves(name.rstrip("."))
    ]
    assert stale == []


@pytest.mark.parametrize("name", ["gspo_trl.tiny", "gspo_trl.presets", "gspo_trl.data.presets.NOPE"])
def test_a_stale_name_is_caught(name: str) -> None:
    assert not resolves(name)


def test_a_live_name_resolves() -> None:
    assert resolves("gspo_trl.data.presets") and resolves("gspo_trl.training.trainer.GSPOTrainer")


def test_module_docstrings_fit_a_screen() -> None:
    long = {}
    for path in SOURCES:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if len(doc.splitlines()) > MAX_MODULE_DOCSTRING_LINES:
            long[str(path.relative_to(ROOT))] = len(doc.splitlines())
    assert long == {}


FILE_REFERENCE = re.compile(r"(?<![\w./-])((?:tests|docs|scripts|gspo_trl)/[\w./-]+\.(?:py|md|sh|yaml))")
PROSE = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROSE += sorted((ROOT / "recipes").glob("*/*.yaml"))


def test_every_named_file_exists() -> None:
    """Docs, recipes and docstrings that point a reader at `tests/x.py` or `docs/y.md` point at a file."""
    texts = [(path, path.read_text(encoding="utf-8")) for path in PROSE]
    texts += [(path, "\n".join(text for _, text in strings_of(path))) for path in SOURCES]
    missing = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path, text in texts
        for name in FILE_REFERENCE.findall(text)
        if "*" not in name and not (ROOT / name.rstrip(".")).exists()
    )
    assert missing == []
