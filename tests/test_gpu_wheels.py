"""The lent GPU machine's installation (scripts/gpu_wheels.py, scripts/gpu_run.sh): which carried
wheels it installs against a machine's own versions, that the install goes through a real
`pip install --target` folder and not into site-packages, and that a dry run with no wheels stops
at once saying to run `make gpu-wheels`."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests._paths import ROOT
from tests._scripts import load_script


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), module: str = "") -> Path:
    """A real wheel file: METADATA, WHEEL, RECORD and (optionally) one module."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
    lines += [f"Requires-Dist: {r}\n" for r in requires]
    files = {
        f"{info}/METADATA": "".join(lines),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if module:
        files[f"{module}.py"] = "HERE = True\n"
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"])
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def _machine(folder: Path, **versions: str) -> list[str]:
    """A site-packages with only these distributions' metadata: the machine's own versions."""
    for name, version in versions.items():
        info = folder / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return [str(folder)]


def test_a_wheel_is_picked_where_the_machine_lacks_it_or_its_version_is_refused(tmp_path):
    wheels = load_script("gpu_wheels")
    _wheel(tmp_path / "w", "datasets", "5.2.0", ("pyarrow>=24.0.0", "fsspec<=2026.9.0"))
    _wheel(tmp_path / "w", "pyarrow", "26.0.1")
    _wheel(tmp_path / "w", "fsspec", "2026.9.0")
    carried = wheels.carried_wheels(tmp_path / "w")

    old = _machine(tmp_path / "old", pyarrow="23.0.0", fsspec="2026.9.0")
    chosen, problems = wheels.pick(carried, False, ("datasets",), old)
    assert sorted(chosen) == ["datasets", "pyarrow"] and problems == []

    new = _machine(tmp_path / "new", pyarrow="25.0.0", fsspec="2026.12.0")
    chosen, problems = wheels.pick(carried, False, ("datasets",), new)
    assert sorted(chosen) == ["datasets", "fsspec"] and problems == []

    del carried["pyarrow"]
    chosen, problems = wheels.pick(carried, False, ("datasets",), old)
    assert problems == ["datasets needs pyarrow>=24.0.0; this machine has 23.0.0 and no carried wheel fits"]


def test_install_goes_into_the_target_folder_through_pip(tmp_path, capsys):
    """--all (the dry run) installs a wheel this Python already has into the --target folder."""
    wheels = load_script("gpu_wheels")
    _wheel(tmp_path / "w", "gspo-probe-wheel", "1.0", module="gspo_probe_wheel")
    target = tmp_path / "target"
    assert wheels.install(tmp_path / "w", target, everything=True) == 0
    assert (target / "gspo_probe_wheel.py").is_file()
    assert (target / "gspo_probe_wheel-1.0.dist-info" / "METADATA").is_file()
    out = capsys.readouterr().out
    assert "this machine's pyarrow:" in out.splitlines()[0] and "installing 1 into" in out


def test_a_dry_run_without_wheels_stops_at_once_saying_what_to_run(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "none")}
    env.pop("GPU_RUN_NO_WHEELS", None)
    command = [str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--output-dir", str(tmp_path / "out")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "run `make gpu-wheels`" in result.stderr and not (tmp_path / "out").exists()


def test_the_carry_check_fails_over_the_limit(tmp_path, capsys):
    wheels = load_script("gpu_wheels")
    folder = tmp_path / ".whl"
    folder.mkdir()
    (folder / "big-1.0-py3-none-any.whl").write_bytes(b"\0" * (wheels.CARRY_LIMIT_MIB * 2**20 + 1))
    assert wheels.size(folder) == 1
    assert "does not fit the 64 MiB carry" in capsys.readouterr().err
