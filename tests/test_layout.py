"""The repository's top level is the design card's layout, and its links resolve into the package.

The card lists `pyproject.toml, README.md, recipes/, gspo_trl/, rewards/, configs/, scripts/,
tests/`. Beside them the repository keeps, on purpose: `docs/` (the user documentation the README
links to), `Makefile` (`make demo` and `make test`, the two commands the README opens with),
`.ci/` (CI runs `make test` and nothing else) and `.gitignore`. Anything else at the top level is a
change to the layout and belongs in this list first.

`recipes/`, `configs/` and `rewards/` are links into `gspo_trl/`: the package is what the wheel
ships, and the links give a checkout the card's layout. The wheel claims no top-level `rewards`
(tests/test_wheel.py), and a checkout's `rewards/` refuses to be imported under that name, so a
user's own `rewards` module is never shadowed by ours, installed or not.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests._paths import ROOT

DESIGN_CARD = {"pyproject.toml", "README.md", "recipes", "gspo_trl", "rewards", "configs", "scripts", "tests"}
ALSO_KEPT = {"docs", "Makefile", ".ci", ".gitignore"}
LINKS_INTO_THE_PACKAGE = {
    "recipes": "gspo_trl/recipes",
    "configs": "gspo_trl/configs",
    "rewards": "gspo_trl/rewards",
}


def _tracked_top_level() -> set[str]:
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return {path.split("/")[0] for path in listing.split("\0") if path}


def test_the_top_level_is_the_design_cards() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist or a copy): nothing tracked to list")
    assert _tracked_top_level() == DESIGN_CARD | ALSO_KEPT


@pytest.mark.parametrize(("name", "target"), sorted(LINKS_INTO_THE_PACKAGE.items()))
def test_top_level_links_resolve_into_the_package(name: str, target: str) -> None:
    link = ROOT / name
    assert link.is_symlink(), f"{name}/ must be a link to {target}/ (the wheel ships the package only)"
    assert link.resolve() == (ROOT / target).resolve() and link.resolve().is_dir()


def test_a_checkouts_rewards_folder_is_not_an_importable_rewards() -> None:
    code = "import rewards"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode != 0
    assert "write `from gspo_trl import rewards`" in result.stderr.strip().splitlines()[-1], result.stderr
    documented = "from gspo_trl import rewards; print(rewards.__name__, rewards.get('math').__name__)"
    out = subprocess.run([sys.executable, "-c", documented], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.split() == ["gspo_trl.rewards", "math"], out.stderr
