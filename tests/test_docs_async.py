"""docs/async.md: the plan output it quotes is what `gspo-trl plan` prints today, and its links
into the repository's docs land on headings that exist."""

from __future__ import annotations

import re

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from tests._paths import ROOT

DOC = (ROOT / "docs" / "async.md").read_text(encoding="utf-8")
QUOTED = re.findall(r"`gspo-trl plan recipes/([\w./-]+)\.yaml`[^`]*?```\n(Step time[^`]*?)```", DOC)
"""(recipe, quoted step-time block) for each plan output the page quotes."""


def test_the_figures_in_the_prose_are_the_quoted_ones():
    """Every seconds or speedup figure of the paragraph after the blocks is one the plan printed."""
    prose = DOC.split("By this arithmetic", 1)[1].split("\n\n", 1)[0]
    figures = re.findall(r"(\d+\.\d+)( s|x)", prose)
    assert len(figures) >= 5
    printed = " ".join(quoted for _, quoted in QUOTED)
    for number, unit in figures:
        assert f"{number}{unit}" in printed, number + unit


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize(("recipe", "quoted"), QUOTED, ids=[recipe for recipe, _ in QUOTED])
def test_the_quoted_step_time_is_the_plans_output(capsys, recipe, quoted):
    assert gspo_trl_main(["plan", recipe]) == 0
    printed = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(printed) if line.startswith("Step time per rollout batch"))
    assert printed[start : printed.index("", start)] == quoted.splitlines()


def test_the_page_quotes_the_server_recipes():
    assert [recipe for recipe, _ in QUOTED] == ["qwen3-8b/math", "qwen3-30b-a3b/math"]


def test_links_into_the_docs_land_on_headings():
    links = re.findall(r"\]\(([\w.-]+\.md)(?:#([\w-]+))?\)", DOC)
    assert links
    for page, anchor in links:
        path = ROOT / "docs" / page
        assert path.is_file(), page
        if anchor:
            headings = re.findall(r"^#{1,4} (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
            assert anchor in {slug(h) for h in headings}, f"{page}#{anchor}"
