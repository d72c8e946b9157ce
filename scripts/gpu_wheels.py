"""The carried wheels of the lent GPU machine (Python 3.12, no package registry): does the set fit
the carry, which wheels to install, and into a temporary folder rather than the image's own
site-packages, whose writability nobody has checked.

    python scripts/gpu_wheels.py size .whl                 # `make gpu-wheels`: MiB carried, fits?
    python scripts/gpu_wheels.py install .whl DIR [--all]  # scripts/gpu_run.sh: pip --target DIR

`install` prints the machine's pyarrow and fsspec first (datasets pins both), then picks a wheel
when its distribution is missing here, or present at a version that one of ROOTS (or a wheel
picked) refuses; `--all` (the CPU dry run, whose Python already has everything) picks every wheel
this interpreter can load, so the dry run goes through the same `pip install --target`. It exits 2
with one line naming what nothing carried can satisfy. gpu_run.sh puts DIR first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import email.parser
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOTS = ("trl", "datasets", "math-verify", "peft", "transformers", "accelerate")
"""What the GPU scripts import (gspo_trl's own dependencies the image has are checked through these)."""
CARRY_LIMIT_MIB = 64
"""What the device tool carries with the working tree, all paths together."""
SHOWN_FIRST = ("pyarrow", "fsspec")
FETCH = "make gpu-wheels"


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str
    version: str
    requires: tuple[Requirement, ...]
    loads_here: bool
    """Whether this interpreter can load it (a cp312 wheel cannot on a 3.11 CPU dry run)."""


def _requires(lines: list[str]) -> tuple[Requirement, ...]:
    """The unconditional requirements (markers evaluated here, no extras)."""
    requirements = (Requirement(line) for line in lines)
    return tuple(r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""}))


def read_wheel(path: Path) -> Wheel:
    name, version, _, tags = parse_wheel_filename(path.name)
    with zipfile.ZipFile(path) as archive:
        [meta] = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        headers = email.parser.Parser().parsestr(archive.read(meta).decode())
    here = set(sys_tags())
    return Wheel(
        path, name, str(version), _requires(headers.get_all("Requires-Dist") or []), bool(tags & here)
    )


def carried_wheels(folder: Path) -> dict[str, Wheel]:
    return {canonicalize_name(w.name): w for w in map(read_wheel, sorted(folder.glob("*.whl")))}


def installed(name: str, path: list[str] | None = None) -> metadata.Distribution | None:
    """The distribution `name` as this Python finds it on `path` (sys.path), or None."""
    return next(iter(metadata.distributions(name=name, path=sys.path if path is None else path)), None)


def pick(
    carried: dict[str, Wheel], everything: bool, roots: tuple[str, ...] = ROOTS, path: list[str] | None = None
) -> tuple[dict[str, Wheel], list[str]]:
    """(wheels to install by name, problems): walks `roots` and what each picked wheel requires,
    against the distributions on `path` (this Python's sys.path)."""
    chosen = {n: w for n, w in carried.items() if everything and w.loads_here}
    for _ in range(len(carried) + 1):
        problems, added = _walk(carried, chosen, roots, path)
        if not added:
            break
    return chosen, problems


def _walk(
    carried: dict[str, Wheel], chosen: dict[str, Wheel], roots: tuple[str, ...], path: list[str] | None
) -> tuple[list[str], bool]:
    """One pass: picks the first wheel something needs (True), or lists what nothing fixes."""

    def version(name: str) -> str | None:
        if name in chosen:
            return chosen[name].version
        dist = installed(name, path)
        return None if dist is None else dist.version

    def requirements(name: str) -> tuple[Requirement, ...]:
        if name in chosen:
            return chosen[name].requires
        dist = installed(name, path)
        return _requires(dist.requires or []) if dist is not None else ()

    problems: list[str] = []
    for root in roots:
        if version(root) is None and root in carried:
            chosen[root] = carried[root]
            return problems, True
        if version(root) is None:
            problems.append(f"{root}: not on this machine and no wheel of it in the folder")
    for owner in dict.fromkeys((*roots, *chosen)):
        for need in requirements(owner):
            name, have = canonicalize_name(need.name), version(canonicalize_name(need.name))
            if have is not None and need.specifier.contains(have, prereleases=True):
                continue
            wheel = carried.get(name)
            if wheel is not None and name not in chosen and need.specifier.contains(wheel.version, True):
                chosen[name] = wheel
                return problems, True
            shown = "nothing" if have is None else have
            problems.append(f"{owner} needs {need}; this machine has {shown} and no carried wheel fits")
    return problems, False


def show_pinned(carried: dict[str, Wheel]) -> None:
    """The machine's own pyarrow and fsspec, beside what the carried datasets asks of them."""
    datasets = carried.get("datasets")
    asked = {canonicalize_name(r.name): str(r.specifier) for r in (datasets.requires if datasets else ())}
    for name in SHOWN_FIRST:
        dist = installed(name)
        here = "missing" if dist is None else dist.version
        print(f"gpu_wheels: this machine's {name}: {here} (datasets asks {asked.get(name, '?')})")


def install(folder: Path, target: Path, everything: bool) -> int:
    carried = carried_wheels(folder)
    show_pinned(carried)
    chosen, problems = pick(carried, everything)
    if problems:
        print(f"gpu_wheels: {problems[0]} (add it to scripts/gpu_wheels.txt, `{FETCH}`)", file=sys.stderr)
        return 2
    unloadable = [w.path.name for w in chosen.values() if not w.loads_here]
    if unloadable:
        py = f"{sys.version_info.major}.{sys.version_info.minor}"
        print(f"gpu_wheels: {unloadable[0]} does not load on this Python {py}", file=sys.stderr)
        return 2
    fine = sorted(w.path.name for n, w in carried.items() if n not in chosen and w.loads_here)
    other = sorted(w.path.name for n, w in carried.items() if n not in chosen and not w.loads_here)
    print(f"gpu_wheels: installing {len(chosen)} into {target}")
    print(f"gpu_wheels: left out, this machine's own fits: {', '.join(fine) or '-'}")
    if other:
        print(f"gpu_wheels: left out, not for this Python (the GPU machine's is 3.12): {', '.join(other)}")
    if not chosen:
        return 0
    wheels = [str(w.path) for w in chosen.values()]
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    done = subprocess.run([*command, "--target", str(target), *wheels], check=False)
    return 0 if done.returncode == 0 else 2


SKIPPED_IN_TREE = {".git", ".venv", ".whl", "runs", "__pycache__", ".pytest_cache", ".ruff_cache"}
"""What does not travel with the working tree (git-ignored, or git's own)."""


def tree_bytes(root: Path) -> int:
    """Bytes of the files that travel with the working tree: what is not under SKIPPED_IN_TREE."""
    total = 0
    for path in root.rglob("*"):
        parts = set(path.relative_to(root).parts)
        if path.is_file() and not parts & SKIPPED_IN_TREE and not any(p.endswith(".egg-info") for p in parts):
            total += path.stat().st_size
    return total


def size(folder: Path) -> int:
    """Print each wheel's MiB and the total with the working tree's; 1 when over the carry."""
    tree = tree_bytes(folder.resolve().parent)
    wheels = sorted(folder.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:8.2f} MiB  {wheel.name}")
    carried = (total + tree) / 2**20
    print(
        f"{total / 2**20:8.2f} MiB in {len(wheels)} wheels; with the working tree ({tree / 2**20:.2f} MiB) "
        f"{carried:.2f} of the {CARRY_LIMIT_MIB} MiB carry"
    )
    if carried > CARRY_LIMIT_MIB:
        print(f"gpu_wheels: {carried:.1f} MiB does not fit the {CARRY_LIMIT_MIB} MiB carry", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    sized = commands.add_parser("size")
    sized.add_argument("folder", type=Path)
    installing = commands.add_parser("install")
    installing.add_argument("folder", type=Path)
    installing.add_argument("target", type=Path)
    installing.add_argument("--all", action="store_true", help="every wheel this Python loads")
    args = parser.parse_args(argv)
    if args.command == "size":
        return size(args.folder)
    return install(args.folder, args.target, args.all)


if __name__ == "__main__":
    sys.exit(main())
