"""The built wheel works without the source tree: recipes, configs and the demo ship inside it.

Builds the wheel with `python -m build` from a copy of the checkout's files (git's tracked and
new ones: a `build/` folder a previous build left in the checkout would otherwise put modules that
no longer exist into the wheel), installs it (without dependencies) into a fresh venv
outside the checkout, lends that venv this environment's third-party packages through a
`.pth` line (so no download is needed), and runs the commands a user of an installed package
runs, from a scratch directory. The checkout is never on the path: the test checks which
`gspo_trl` was imported.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests._paths import ROOT

pytestmark = pytest.mark.slow


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def _checkout_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [name for name in listing.split("\0") if name and os.path.lexists(ROOT / name)]


def _checkout_copy(target: Path) -> Path:
    """The checkout's files (links kept as links) under `target`, without its build leftovers."""
    for name in _checkout_files():
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, destination, follow_symlinks=False)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(venv bin dir, scratch working dir, environment) with only the wheel of gspo-trl installed."""
    root = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    source = _checkout_copy(root / "source")
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(root / "dist"), str(source)], root, env)
    (wheel,) = (root / "dist").glob("gspo_trl-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], root, env)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], root, env)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Third-party packages from this environment, after the venv's own (the wheel wins).
    (Path(site) / "zz_lent_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = root / "work"
    work.mkdir()
    return venv / "bin", work, env


def test_the_wheel_is_imported_not_the_checkout(installed) -> None:
    bin_dir, work, env = installed
    where = _run([str(bin_dir / "python"), "-c", "import gspo_trl; print(gspo_trl.__file__)"], work, env)
    assert str(ROOT) not in where and str(bin_dir.parent) in where, where


def test_the_wheel_claims_no_top_level_rewards(installed) -> None:
    """A user's own `rewards` module or package must stay theirs: the verifiers live in gspo_trl."""
    bin_dir, work, env = installed
    result = subprocess.run(
        [str(bin_dir / "python"), "-c", "import rewards"], cwd=work, env=env, capture_output=True, text=True
    )
    assert result.returncode != 0 and "No module named 'rewards'" in result.stderr, result.stderr
    documented = "from gspo_trl import rewards; print(rewards.__file__, rewards.get('math').__name__)"
    where = _run([str(bin_dir / "python"), "-c", documented], work, env)
    assert str(bin_dir.parent) in where and where.split()[-1] == "math", where


def test_the_wheel_holds_gspo_trl_only(installed) -> None:
    """The checkout's top-level `rewards/` (a link, tests/test_layout.py) stays out of the wheel."""
    _, work, _ = installed
    (wheel,) = (work.parent / "dist").glob("gspo_trl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        top = {name.split("/")[0] for name in archive.namelist()}
    assert {name for name in top if not name.endswith(".dist-info")} == {"gspo_trl"}, sorted(top)
    assert any(name.startswith("gspo_trl/rewards/") for name in archive.namelist())
    shipped = {name for name in archive.namelist() if name.startswith("gspo_trl/") and name.endswith(".py")}
    sources = {name for name in _checkout_files() if name.startswith("gspo_trl/") and name.endswith(".py")}
    assert shipped == sources, f"stale: {sorted(shipped - sources)}; missing: {sorted(sources - shipped)}"


def test_recipes_list_and_copy_then_validate(installed) -> None:
    bin_dir, work, env = installed
    listing = _run([str(bin_dir / "gspo-trl"), "recipes", "list"], work, env)
    for name in ("tiny/reversal", "qwen3-1.7b/math", "qwen3-8b/math", "zero3", "cpu_2proc"):
        assert name in listing
    _run([str(bin_dir / "gspo-trl"), "recipes", "copy", "tiny/reversal", "mine.yaml"], work, env)
    _run([str(bin_dir / "gspo-trl"), "recipes", "copy", "zero3", "configs/"], work, env)
    assert (work / "configs" / "zero3.yaml").is_file()
    assert "ok (gspo" in _run([str(bin_dir / "gspo-trl"), "validate", "mine.yaml"], work, env)
    assert "ok (gspo" in _run(
        [
            str(bin_dir / "gspo-trl"),
            "validate",
            "qwen3-1.7b/math",
            "--data.path",
            str(ROOT / "tests/fixtures/datasets/dapo-math.jsonl"),
            "--data.eval_size",
            "1",
        ],
        work,
        env,
    )


def test_demo_runs_from_the_wheel(installed) -> None:
    bin_dir, work, env = installed
    command = [
        str(bin_dir / "gspo-trl"),
        "demo",
        "--output-dir",
        "demo",
        "--sft-steps",
        "5",
        "--max_steps",
        "2",
        "--data.num_rows",
        "200",
        "--data.eval_size",
        "16",
        "--heldout.k",
        "[]",
    ]
    out = _run(command, work, env, timeout=600)
    assert "held-out exact-match accuracy after GSPO" in out
    assert (work / "demo" / "results.json").is_file() and (work / "demo" / "reward_curve.png").is_file()
