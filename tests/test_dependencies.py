"""Every extra pyproject.toml asks of a dependency is one that dependency declares.

pip warns, on every install, about an extra a package does not provide, and installs it
without: `math-verify[antlr4_13_2]` printed "math-verify 0.9.0 does not provide the extra
'antlr4_13_2'" (its METADATA says `Provides-Extra: antlr4-13-2`), so the ANTLR runtime the
LaTeX parser needs came only by luck from another dependency.
"""

from __future__ import annotations

import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement

from tests._paths import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    groups = [project["dependencies"], *project.get("optional-dependencies", {}).values()]
    return [Requirement(line) for group in groups for line in group]


WITH_EXTRAS = [req for req in _requirements() if req.extras]


@pytest.mark.parametrize("requirement", WITH_EXTRAS, ids=str)
def test_each_requested_extra_is_declared_as_spelled(requirement: Requirement) -> None:
    try:
        declared = metadata.metadata(requirement.name).get_all("Provides-Extra") or []
    except metadata.PackageNotFoundError:
        pytest.skip(f"{requirement.name} is not installed")
    missing = sorted(requirement.extras - set(declared))
    assert not missing, f"{requirement.name} declares {declared}, not {missing}"


def test_math_verify_is_asked_for_its_antlr_runtime() -> None:
    assert any(req.name == "math-verify" and req.extras == {"antlr4-13-2"} for req in WITH_EXTRAS)
