"""docs/recipe-reference.md is generated from the code: it must equal a fresh generation."""

from __future__ import annotations

import re
from dataclasses import is_dataclass

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)
from tests._paths import ROOT


def test_recipe_reference_is_up_to_date() -> None:
    """docs/recipe-reference.md is generated; regenerate: python -m gspo_trl.config.reference."""

    from gspo_trl.config import sections
    from gspo_trl.config.reference import SECTION_CLASSES, recipe_reference

    page = recipe_reference()
    committed = (ROOT / "docs" / "recipe-reference.md").read_text()
    assert committed == page, "run: python -m gspo_trl.config.reference > docs/recipe-reference.md"
    documented = {cls for _, cls in SECTION_CLASSES}
    assert documented == {  # the package's own sections and those of its per-section modules
        obj
        for obj in vars(sections).values()
        if isinstance(obj, type) and obj.__module__.startswith(sections.__name__) and is_dataclass(obj)
    } - {sections.Section}  # the registry's row, not a section
    for line in page.splitlines():  # every key of every section says what it means
        cells = re.split(r"(?<!\\)\|", line)
        if line.startswith("| `") and len(cells) == 6:
            assert cells[4].strip(), line
