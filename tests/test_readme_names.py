"""Every path and name README.md states exists (issue 35 item 10).

The README had drifted: it put the demo's `metrics.jsonl` and `trainer_state.json` in `runs/demo/`
(they are in `runs/demo/gspo/`) and listed a `run` in the public API that does not exist. Read
from the README's text:

- each backticked or linked repository path (`docs/...`, `scripts/...`, `recipes/...`,
  `gspo_trl/...`, `tests/...`, brace lists expanded) is a file or folder of the checkout;
- each `runs/demo/...` path is in the demo's output (the suite's one demo run);
- each `gspo_trl.X.Y` names a module or an attribute of one;
- the Layout's public API list is in `gspo_trl.__all__`, and its folders exist;
- each benchmark it names by file name is in scripts/.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import gspo_trl
from tests._paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
REPO_DIRS = ("docs", "scripts", "recipes", "configs", "gspo_trl", "tests")
SPANS = re.findall(r"`([^`\n]+)`", README) + re.findall(r"\]\(([^)\s]+)\)", README)


def _expand(path: str) -> list[str]:
    """`recipes/qwen3-{0.6b,4b}/math.yaml` -> both paths."""
    match = re.search(r"\{([^}]*)\}", path)
    if match is None:
        return [path]
    return [
        p for choice in match.group(1).split(",") for p in _expand(path.replace(match.group(0), choice, 1))
    ]


def _paths(prefixes: tuple[str, ...]) -> list[str]:
    found = set()
    for span in SPANS:
        for word in span.split():
            word = word.rstrip(".,;:)").split(":")[0]
            if word.split("/")[0] in prefixes and "/" in word:
                found.update(_expand(word))
    return sorted(found)


REPO_PATHS = _paths(REPO_DIRS)
DEMO_PATHS = _paths(("runs",))


def test_the_readme_names_paths_at_all() -> None:
    assert len(REPO_PATHS) > 20 and any(p.startswith("runs/demo/gspo/") for p in DEMO_PATHS)


@pytest.mark.parametrize("path", REPO_PATHS)
def test_each_repository_path_exists(path: str) -> None:
    assert (ROOT / path).exists(), f"README.md names {path}, which is not in the checkout"


@pytest.mark.slow
def test_each_demo_path_is_in_the_demos_output(demo_run: Path) -> None:
    missing = [
        p for p in DEMO_PATHS if p.startswith("runs/demo/") and not (demo_run.parent.parent / p).exists()
    ]
    assert not missing, f"README.md names demo outputs the demo does not write: {missing}"


DOTTED = sorted({m for span in SPANS for m in re.findall(r"\bgspo_trl(?:\.\w+)+", span)})


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for name in parts[split:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("dotted", DOTTED)
def test_each_dotted_name_resolves(dotted: str) -> None:
    assert _resolves(dotted), f"README.md names {dotted}, which neither imports nor is an attribute"


def test_the_layouts_public_api_is_the_packages() -> None:
    listed = re.search(r"__init__\.py\s+the public API \(([^)]*)\)", README).group(1)
    names = [n.strip() for n in listed.split(",") if n.strip() not in ("...", "")]
    assert names and not set(names) - set(gspo_trl.__all__), set(names) - set(gspo_trl.__all__)


def test_the_layouts_folders_exist() -> None:
    layout = re.search(r"## Layout\n\n```\n(.*?)```", README, re.S).group(1)
    folders = re.findall(r"^  (\w+)/ ", layout, re.M)
    assert len(folders) > 5
    missing = [f for f in folders if not (ROOT / "gspo_trl" / f).is_dir()]
    assert not missing, missing


def test_each_named_benchmark_is_in_scripts() -> None:
    scripts = sorted(set(re.findall(r"`(bench_\w+\.py)`", README)))
    assert scripts and all((ROOT / "scripts" / s).is_file() for s in scripts), scripts
