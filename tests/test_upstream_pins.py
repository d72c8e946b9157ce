"""Every claim about TRL, transformers, vLLM, DeepSpeed, accelerate (...) sources is pinned to the
installed version: the text it quotes must still be in the cited file, near the cited line.

A TRL or vLLM upgrade then fails here with one case per assumption that moved, named by where we
make it (`gspo_trl/model/routing/engine.py:6`) and what it quoted. Run
`python tests/test_upstream_pins.py` for the whole table (checked, skipped and why, drift).

The citation form (docstrings, comments, docs/, README.md, scripts/):

    `quoted source text` (trl/trainer/grpo_trainer.py:1440)
    `quoted source text`, trl/trainer/grpo_trainer.py:1440-1442
    "a quoted message" (vllm/config/vllm.py:1172-1175)

- The path starts at the package's import name (`trl/`, `transformers/`, `vllm/`, `deepspeed/`,
  ...) and is the file's path inside it; the line or range is the installed version's.
- The quote is the backtick- or double-quoted text directly before the citation (only spaces,
  a comma or an opening parenthesis between them), or an indented block right after a line that
  ends with the citation and a colon (a docstring quoting a function body). It is
  compared with the file with all whitespace removed (a quote may join lines), and `...` inside
  a quote stands for any text (`LLM(...)`).
- After a full citation, the same document may cite the same file again by its last path parts
  (`grpo_trainer.py:1492`, `aux_output_connector/worker.py:143`) or by a line alone (`:322`).
- A citation of another version says so right after it: `routed_experts.py:974 in 0.24.0`; it is
  skipped unless that version is installed.
- A citation of a repository that is not an installed package (verl, AReaL) names its commit in
  the same sentence, `verl/trainer/ppo/core_algos.py:2491 at verl-project/verl@1dda039` (or
  `at commit 1dda039`), and is skipped with that reason: there is no installed file to compare
  with. Without a commit it fails like any other path outside the citation form.

A quote found farther than `DRIFT_TOLERANCE` lines from the cited range fails too, with the line
where it is now: the number is wrong for the installed version. A citation with no quote is
checked for its file and line range only and reported as skipped ("no quote"); a package that is
not installed, or a file its installed build does not ship, is skipped with that reason.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # also run as a script

SCANNED = ("gspo_trl", "scripts", "docs", "README.md")
SUFFIXES = {".py", ".md", ".sh", ".yaml", ".txt", ""}
UPSTREAM = (
    "trl",
    "transformers",
    "vllm",
    "deepspeed",
    "accelerate",
    "torch",
    "peft",
    "datasets",
    "math_verify",
    "huggingface_hub",
    "tokenizers",
)
OURS = ("gspo_trl", "tests", "scripts", "docs", "recipes", "configs", "rewards")

DRIFT_TOLERANCE = 10
"""Lines a quote may sit outside its cited range. Zero would be right for a one-line claim, but a
citation names a statement and its quote may be another line of it (a call's keyword, the `def`
above a body), and ranges are written by hand: 10 lines is a statement or a short function's
head, so a number that still points at the right code passes and one that points elsewhere in
the file (a TRL upgrade shifts these by tens to hundreds of lines) fails with the new line."""

CITATION = re.compile(
    r"(?<![\w/.:-])(?P<path>(?:[A-Za-z_][\w.-]*/)*[A-Za-z_][\w.-]*\.py)?"
    r"(?::(?P<start>\d+)(?:-(?P<end>\d+))?)?(?![\w])"
)
"""`path.py:N`, `path.py:N-M`, `:N` (the file cited last) or `path.py` alone (no line: names the
file later `:N` citations refer to)."""
VERSION_AFTER = re.compile(r"^`?,?\s*(?:in|from) (?:\w+ )?v?(?P<version>\d+\.\d+(?:\.\d+)?)")
COMMIT = re.compile(r"(?:(?P<repository>[\w.-]+/[\w.-]+)@|\bcommit\s+)(?P<commit>[0-9a-f]{7,40})\b")
"""`owner/name@1dda039` or `commit 1dda039`: the commit a citation of another repository reads."""


@dataclass
class Citation:
    """One cited upstream line range, where we cite it and what we quote from it."""

    where: str  # our file:line
    path: str  # e.g. trl/trainer/grpo_trainer.py
    start: int
    end: int
    quotes: list[str] = field(default_factory=list)
    version: str | None = None  # the version it cites when not the installed one
    problem: str | None = None  # not in the citation form
    commit: str | None = None  # "verl-project/verl at commit 1dda039": a repository, not a package

    @property
    def id(self) -> str:
        return f"{self.where}->{self.path}:{self.start}" + (f"-{self.end}" if self.end != self.start else "")


def _flat(path: Path) -> tuple[str, list[int]]:
    """The file's text as one line (indentation and comment marks dropped, lines joined by a
    space), and the offset where each source line starts in it."""
    parts, starts, offset = [], [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        text = line.strip()
        if path.suffix in (".py", ".sh", ".yaml", "") and text.startswith("#"):
            text = text.lstrip("#").strip()
        starts.append(offset)
        parts.append(text)
        offset += len(text) + 1
    return " ".join(parts), starts


def _line_of(starts: list[int], offset: int) -> int:
    low, high = 0, len(starts) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if starts[middle] <= offset:
            low = middle
        else:
            high = middle - 1
    return low + 1


def _quote_before(text: str, position: int) -> list[str]:
    """The quote directly before `position` (a backtick or double-quoted span separated from it
    by spaces, a comma or an opening parenthesis only), as a list of none or one. Read backwards
    from the citation, so quote marks elsewhere in a file (code, other strings) cannot pair up
    with it."""
    end = len(text[:position].rstrip(" ,("))
    if end == 0 or text[end - 1] not in '`"':
        return []
    mark = text[end - 1]
    start = text.rfind(mark, 0, end - 1)
    body = text[start + 1 : end - 1]
    if start < 0 or not body.strip() or (mark == '"' and len(body) < 3):
        return []
    if CITATION.fullmatch(body.strip()):
        return []  # a chain of citations: the quote belongs to the first
    return [body]


def _block_after(lines: list[str], line: int) -> list[str]:
    """The indented block after a line that ends with the citation and a colon, as one quote."""
    if not lines[line - 1].rstrip().endswith(":") or line >= len(lines) or lines[line].strip():
        return []
    base = len(lines[line - 1]) - len(lines[line - 1].lstrip())
    block = []
    for text in lines[line + 1 :]:
        if text.strip() and len(text) - len(text.lstrip()) <= base:
            break
        block.append(text)
    return ["\n".join(block).strip()] if "".join(block).strip() else []


def citations_in(path: Path, root: Path = ROOT) -> list[Citation]:
    """The upstream citations in one of our files, in order."""
    text, starts = _flat(path)
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    found: list[Citation] = []
    matches = [
        m
        for m in CITATION.finditer(text)
        if (m.group("path") or m.group("start")) and not _is_ours(m.group("path"))
    ]
    previous: list[Citation] = []
    last_end = -10
    for match in matches:
        cited = match.group("path")
        if match.group("start") is None:  # a file named without a line: later `:N` cite it
            if cited.split("/")[0] in UPSTREAM and "/" in cited:
                previous.append(Citation("", cited, 0, 0))
            continue
        start = int(match.group("start"))
        end = int(match.group("end") or start)
        where = f"{path.relative_to(root)}:{_line_of(starts, match.start())}"
        if cited is None and not _looks_like_a_continuation(text, match, last_end):
            continue
        last_end = match.end()
        resolved, problem = _resolve(cited, previous)
        commit = next((e.commit for e in reversed(previous) if e.path == resolved), None)
        if problem and cited and "/" in cited and installed(cited.split("/")[0]) is None:
            commit = _commit_in_sentence(text, match.start(), match.end(), cited.split("/")[0])
            resolved, problem = (cited, None) if commit else (resolved, problem)
        opening = match.start() - 1 if match.start() and text[match.start() - 1] == "`" else match.start()
        citation = Citation(where, resolved or (cited or ""), start, end, problem=problem, commit=commit)
        citation.quotes = _quote_before(text, opening) + _block_after(lines, _line_of(starts, match.end()))
        version = VERSION_AFTER.match(text[match.end() : match.end() + 40])
        citation.version = version.group("version") if version else None
        found.append(citation)
        if problem is None:
            previous.append(citation)
    return found


def _is_ours(cited: str | None) -> bool:
    return cited is not None and cited.split("/")[0] in OURS


def _looks_like_a_continuation(text: str, match: re.Match[str], last_end: int) -> bool:
    """A bare `:322` that continues a citation, not code (`ids[:1, :8]`) or a time: backticked, or
    right after a citation (`path.py:1264, :1283`)."""
    if text[match.start() - 1 : match.start()] == "`":
        return True
    return 0 <= match.start() - last_end <= 4 and text[last_end : match.start()].strip(" `,") == ""


def _commit_in_sentence(text: str, start: int, end: int, package: str) -> str | None:
    """The commit named in the sentence around text[start:end] (the nearest one), as "repository
    at commit X", or None: another repository's file is cited at a commit or not at all."""
    first = text.rfind(". ", 0, start) + 1
    last = text.find(". ", end)
    sentence = text[first : last if last >= 0 else len(text)]
    named = list(COMMIT.finditer(sentence))
    if not named:
        return None
    nearest = min(named, key=lambda m: min(abs(m.start() - (start - first)), abs(m.end() - (end - first))))
    return f"{nearest.group('repository') or package} at commit {nearest.group('commit')}"


def _resolve(cited: str | None, previous: list[Citation]) -> tuple[str | None, str | None]:
    if cited is not None and cited.split("/")[0] in UPSTREAM and "/" in cited:
        return cited, None
    for earlier in reversed(previous):
        if cited is None or earlier.path == cited or earlier.path.endswith("/" + cited):
            return earlier.path, None
    return None, (
        f"{cited or 'a bare line number'}: not in the citation form (start the path at the package's "
        f"import name, one of {', '.join(UPSTREAM)}, or cite the file in full earlier in the same document)"
    )


def all_citations() -> list[Citation]:
    files = []
    for name in SCANNED:
        base = ROOT / name
        files += [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.suffix in SUFFIXES)
    return [c for f in files if f.is_file() for c in citations_in(f)]


@cache
def installed(package: str) -> tuple[Path, str] | None:
    """(the package's folder, the installed version of its distribution), or None."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    distribution = importlib.metadata.packages_distributions().get(package, [package])[0]
    return Path(next(iter(spec.submodule_search_locations))), importlib.metadata.version(distribution)


def _squeeze(text: str) -> tuple[str, list[int]]:
    """`text` without whitespace and without the `""` that joins two string literals (a message
    quoted in one piece matches `"... set " "VLLM_USE..."`), and the 1-based line of each kept
    character."""
    kept: list[str] = []
    lines: list[int] = []
    line = 1
    for char in text:
        if char == "\n":
            line += 1
        if char.isspace():
            continue
        if char in "\"'" and kept and kept[-1] == char:
            kept.pop()
            lines.pop()
            continue
        kept.append(char)
        lines.append(line)
    return "".join(kept), lines


def _without_comment_marks(text: str) -> str:
    """Each line without the `#` that starts it, so a quote may run across a comment's lines."""
    return "\n".join(line.lstrip().lstrip("#") for line in text.split("\n"))


@cache
def _source(path: Path) -> tuple[str, list[int], int]:
    text = path.read_text(encoding="utf-8", errors="replace")
    squeezed, lines = _squeeze(_without_comment_marks(text))
    return squeezed, lines, text.count("\n") + 1


def find_quote(quote: str, path: Path) -> list[tuple[int, int]]:
    """The (first, last) source lines of every place `quote` appears (whitespace ignored, `...` any text)."""
    squeezed, lines, _ = _source(path)
    parts = [p for p in _squeeze(_without_comment_marks(quote))[0].split("...") if p]
    if not parts:
        return []
    places = []
    for first in re.finditer(re.escape(parts[0]), squeezed):
        cursor, ok = first.end(), True
        for part in parts[1:]:
            cursor = squeezed.find(part, cursor)
            if cursor < 0:
                ok = False
                break
            cursor += len(part)
        if ok:
            places.append((lines[first.start()], lines[cursor - 1]))
    return places


def drift(place: tuple[int, int], start: int, end: int) -> int:
    """Lines between a quote's place and the cited range (0 when they overlap)."""
    return max(0, start - place[1], place[0] - end)


@dataclass
class Verdict:
    status: str  # checked | skipped | failed
    detail: str
    drift: int | None = None


def check(citation: Citation) -> Verdict:
    if citation.problem:
        return Verdict("failed", citation.problem)
    if citation.commit:
        return Verdict("skipped", f"not an installed package: cites {citation.commit}")
    package = citation.path.split("/")[0]
    found = installed(package)
    if found is None:
        return Verdict("skipped", f"{package} is not installed")
    folder, version = found
    if citation.version and not version.startswith(citation.version):
        return Verdict("skipped", f"cites {package} {citation.version}; {version} is installed")
    file = folder / citation.path.split("/", 1)[1]
    if not file.is_file():
        if package == "vllm" and "cpu" in importlib.metadata.packages_distributions().get("vllm", [""])[0]:
            return Verdict("skipped", f"{citation.path}: not in the CPU build of vLLM ({version})")
        return Verdict("failed", f"{citation.path}: no such file in {package} {version}")
    length = _source(file)[2]
    if citation.end < citation.start or citation.end > length:
        return Verdict("failed", f"lines {citation.start}-{citation.end}: {citation.path} has {length} lines")
    if not citation.quotes:
        return Verdict("skipped", "no quote: only the file and the line range were checked")
    worst = 0
    for quote in citation.quotes:
        places = find_quote(quote, file)
        if not places:
            return Verdict("failed", f"{quote!r} is no longer in {citation.path} ({package} {version})")
        nearest = min(places, key=lambda p: drift(p, citation.start, citation.end))
        distance = drift(nearest, citation.start, citation.end)
        if distance > DRIFT_TOLERANCE:
            return Verdict(
                "failed",
                f"{quote!r} is at {citation.path}:{nearest[0]}, {distance} lines from the cited "
                f"{citation.start}-{citation.end} ({package} {version}): update the line number",
                distance,
            )
        worst = max(worst, distance)
    return Verdict("checked", f"{len(citation.quotes)} quote(s) found ({package} {version})", worst)


CITATIONS = all_citations()


def test_citations_are_found() -> None:
    """The scanner sees the citations this test exists for (a broken regex would pass everything)."""
    paths = {c.path for c in CITATIONS}
    assert {"trl/trainer/grpo_trainer.py", "vllm/config/vllm.py"} <= paths, sorted(paths)
    assert sum(1 for c in CITATIONS if c.quotes) >= 20


@pytest.mark.parametrize("citation", CITATIONS, ids=lambda c: c.id)
def test_quoted_upstream_text_is_still_there(citation: Citation) -> None:
    verdict = check(citation)
    if verdict.status == "skipped":
        pytest.skip(verdict.detail)
    assert verdict.status == "checked", f"{citation.where}: {verdict.detail}"


def _write_citing(tmp_path: Path, text: str) -> list[Citation]:
    doc = tmp_path / "doc.md"
    doc.write_text(text, encoding="utf-8")
    return citations_in(doc, root=tmp_path)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("TRL checks (`num_generations`, trl/trainer/grpo_trainer.py:{line}).", "checked"),
        ("TRL checks (`no_such_text_in_trl_123`, trl/trainer/grpo_trainer.py:{line}).", "failed"),
        ("TRL checks (`num_generations`, trl/trainer/grpo_trainer.py:{far}).", "failed"),
        ("TRL checks (`num_generations`, trl/no_such_file.py:1).", "failed"),
        ("TRL checks (`num_generations`, grpo_trainer.py:1).", "failed"),
        ("TRL checks (trl/trainer/grpo_trainer.py:{line}).", "skipped"),
        ("(`x`, no_such_package_here/a.py:1)", "failed"),
        ("(`x`, no_such_package_here/a.py:1 at owner/repo@1dda039)", "skipped"),
        ("(`x`, no_such_package_here/a.py:1 at commit 1dda039)", "skipped"),
        ("At owner/repo@1dda039. Then (`x`, no_such_package_here/a.py:1).", "failed"),
        ("(`num_generations`, trl/no_such_file.py:1 at commit 1dda039).", "failed"),
    ],
)
def test_the_checker_fails_a_moved_quote(tmp_path: Path, text: str, status: str) -> None:
    """Table of what an upgrade can do to a citation, on the installed TRL."""
    (places,) = [find_quote("num_generations", installed("trl")[0] / "trainer" / "grpo_trainer.py")[:1]]
    line = places[0][0]
    (citation,) = _write_citing(tmp_path, text.format(line=line, far=line + 5 * DRIFT_TOLERANCE + 400))
    assert check(citation).status == status, check(citation)


def test_another_repository_is_cited_at_the_commit_its_sentence_names(tmp_path: Path) -> None:
    text = (
        "Here (`a`, verl/trainer/x.py:10 at verl-project/verl@1dda039), then `x.py:20`; AReaL's "
        "(`b`, areal/y.py:5 at commit 4aef98d). Its `c` (areal/z.py:7)."
    )
    found = _write_citing(tmp_path, text)
    verl = "not an installed package: cites verl-project/verl at commit 1dda039"
    assert [(c.path, c.start, check(c).status, check(c).detail.split(" (")[0]) for c in found] == [
        ("verl/trainer/x.py", 10, "skipped", verl),
        ("verl/trainer/x.py", 20, "skipped", verl),
        ("areal/y.py", 5, "skipped", "not an installed package: cites areal at commit 4aef98d"),
        ("areal/z.py", 7, "failed", "areal/z.py: not in the citation form"),
    ]


def test_short_forms_resolve_to_the_full_citation_before(tmp_path: Path) -> None:
    text = (
        "First (`a`, trl/trainer/grpo_trainer.py:10), then (`b`, grpo_trainer.py:20) and at `:30-31`, :32; "
        "another version: (`c`, vllm/config/vllm.py:5 in 0.24.0)."
    )
    found = _write_citing(tmp_path, text)
    assert [(c.path, c.start, c.end, c.quotes, c.version) for c in found] == [
        ("trl/trainer/grpo_trainer.py", 10, 10, ["a"], None),
        ("trl/trainer/grpo_trainer.py", 20, 20, ["b"], None),
        ("trl/trainer/grpo_trainer.py", 30, 31, [], None),
        ("trl/trainer/grpo_trainer.py", 32, 32, [], None),
        ("vllm/config/vllm.py", 5, 5, ["c"], "0.24.0"),
    ]


if __name__ == "__main__":
    counts: dict[str, int] = {}
    for citation in CITATIONS:
        verdict = check(citation)
        counts[verdict.status] = counts.get(verdict.status, 0) + 1
        shift = "" if verdict.drift is None else f" drift {verdict.drift}"
        print(f"{verdict.status:8} {citation.id}{shift}: {verdict.detail}")
    print(counts, file=sys.stderr)
