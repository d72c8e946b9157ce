"""The package's shape: no import cycles, and every import points down the layers.

Read from the source with `ast` (nothing is imported), counting imports inside functions
and under `if TYPE_CHECKING:` too: a lazy or typing-only import is still a dependency, and
the cycles this test was written against (`train -> heldout -> evaluate -> train`) were lazy
ones. `from pkg import name` depends on `pkg` itself (its `__init__` runs) and on
`pkg.name` when that is a module. `python tests/test_architecture.py` prints the graph.

Layers, lowest first; a module may import its own layer or lower ones, never higher:

    gspo_trl.core                 the ground floor: user errors, coercion, did-you-mean, argument
                                    parsing, progress, cpu threads, the logged metrics' names
    gspo_trl.rewards              the verifier library (stands on core only)
    gspo_trl.config               defaults, typed sections, recipe loading, validation
    gspo_trl.data, gspo_trl.model sources/presets/loading; model sizing, tiny models, loading, routing
    gspo_trl.eval                 sampling, pass@k, grading
    gspo_trl.training             GSPOConfig/GSPOTrainer, diagnostics, held-out, build
    gspo_trl.diagnose, .demo, .plan   tools built on training runs
    gspo_trl.cli, gspo_trl.train  commands and the accelerate entry point
    gspo_trl (the package)        the public API
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # also run as a script: `python tests/test_architecture.py`


PACKAGES = ("gspo_trl",)
LAYERS: dict[str, int] = {
    "gspo_trl.core": 0,
    "gspo_trl.rewards": 1,
    "gspo_trl.config": 2,
    "gspo_trl.data": 3,
    "gspo_trl.model": 3,
    "gspo_trl.eval": 4,
    "gspo_trl.training": 5,
    "gspo_trl.diagnose": 6,
    "gspo_trl.demo": 6,
    "gspo_trl.plan": 6,
    "gspo_trl.cli": 7,
    "gspo_trl.train": 7,
    "gspo_trl": 8,
}


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the two packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of the two packages that `name` imports (resolved to modules, not packages' names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if not name.startswith(base + "."):  # an ancestor's __init__ has run already
                found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def layer_of(module: str) -> tuple[str, int]:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix, LAYERS[prefix]
    raise KeyError(f"{module} belongs to no layer: add its package to LAYERS")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_imports_point_down_the_layers() -> None:
    upward = []
    for module, targets in import_graph().items():
        source_layer, source_rank = layer_of(module)
        for target in targets:
            target_layer, target_rank = layer_of(target)
            if target_rank > source_rank:
                upward.append(f"{module} ({source_layer}) imports {target} ({target_layer})")
    assert upward == []


@pytest.mark.parametrize(
    "edges",
    [
        {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()},
        {"a": {"b"}, "b": {"a"}},
    ],
)
def test_the_cycle_finder_finds_cycles(edges: dict[str, set[str]]) -> None:
    assert cycles(edges)


def test_the_reward_library_stands_on_core_only() -> None:
    graph = import_graph()
    assert [
        f"{m} imports {t}"
        for m, targets in graph.items()
        if m.startswith("gspo_trl.rewards")
        for t in targets
        if not t.startswith(("gspo_trl.rewards", "gspo_trl.core"))
    ] == []


def test_core_imports_nothing_of_gspo_trl_above_it() -> None:
    graph = import_graph()
    assert [
        f"{m} imports {t}"
        for m, targets in graph.items()
        if m.startswith("gspo_trl.core")
        for t in targets
        if not t.startswith("gspo_trl.core")
    ] == []


def test_every_module_is_in_a_layer() -> None:
    for module in module_files():
        layer_of(module)


ERROR_MODULES = ("gspo_trl/core/errors.py",)
"""Where every user error type lives."""


def _classes(path: Path) -> list[ast.ClassDef]:
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)]


def test_every_user_error_type_is_defined_in_an_errors_module() -> None:
    error_types = {c.name for module in ERROR_MODULES for c in _classes(ROOT / module)}
    elsewhere = []
    for path in module_files().values():
        if str(path.relative_to(ROOT)) in ERROR_MODULES:
            continue
        for cls in _classes(path):
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases}
            if bases & error_types:
                elsewhere.append(f"{path.relative_to(ROOT)}: {cls.name}")
    assert elsewhere == []


def test_the_cli_reports_every_reward_error_in_one_line() -> None:
    from gspo_trl.core.errors import REWARD_ERRORS, USER_ERRORS

    assert set(REWARD_ERRORS) <= set(USER_ERRORS)
    errors = {c.name for c in _classes(ROOT / "gspo_trl" / "core" / "errors.py")}
    assert {e.__name__ for e in REWARD_ERRORS} <= errors


def package_graph() -> dict[str, set[str]]:
    """The graph between layers' packages (what the closing note prints)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph().items():
        source = layer_of(module)[0]
        edges[source].update(layer_of(t)[0] for t in targets if layer_of(t)[0] != source)
    return edges


TRAINING = ROOT / "gspo_trl" / "training"
PROBES = TRAINING / "probes"


def test_no_module_name_repeats_under_training() -> None:
    """One home per capability: `routing.py` in two rooms of training/ meant two homes for one
    thing (issue 46); a reader who sees a basename knows which module it is."""
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TRAINING.rglob("*.py"):
        if path.name != "__init__.py":
            seen[path.name].append(str(path.relative_to(TRAINING)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_every_probe_class_lives_in_probes() -> None:
    """Every class of the package whose name ends in `Probe` (the probe protocol's subclasses and
    the protocol itself) is defined under training/probes/."""
    outside = [
        f"{path.relative_to(ROOT)}: {cls.name}"
        for path in module_files().values()
        for cls in _classes(path)
        if cls.name.endswith("Probe") and PROBES not in path.parents
    ]
    assert outside == []


if __name__ == "__main__":
    for source in sorted(LAYERS, key=lambda name: (LAYERS[name], name)):
        targets = package_graph().get(source, set())
        print(f"{source:<20} -> {', '.join(sorted(targets, key=lambda n: (LAYERS[n], n))) or '-'}")
