"""The recipes and accelerate configs shipped inside the package, found by name.

They live in `gspo_trl/recipes/` and `gspo_trl/configs/` (a checkout links them at its top
level), so an installed wheel has them too: `gspo-trl train tiny/reversal` works anywhere,
and `gspo-trl recipes copy qwen3-1.7b/math my.yaml` gives a user a copy to edit, as
torchtune's `tune cp` does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
RECIPES_DIR = PACKAGE_DIR / "recipes"
CONFIGS_DIR = PACKAGE_DIR / "configs"


def shipped_recipes() -> dict[str, Path]:
    """Recipe name (`qwen3-1.7b/math`) -> its file, sorted by name."""
    found = {str(p.relative_to(RECIPES_DIR).with_suffix("")): p for p in RECIPES_DIR.glob("*/*.yaml")}
    return dict(sorted(found.items()))


def shipped_configs() -> dict[str, Path]:
    """Accelerate config name (`zero3`) -> its file, sorted by name."""
    return dict(sorted((p.stem, p) for p in CONFIGS_DIR.glob("*.yaml")))


def shipped_name(text: str) -> str:
    """`recipes/tiny/reversal.yaml`, `tiny/reversal.yaml` and `tiny/reversal` all name `tiny/reversal`."""
    name = text.removesuffix(".yaml").removesuffix(".yml")
    for prefix in ("./", "recipes/", "configs/"):
        name = name.removeprefix(prefix)
    return name


def resolve_recipe_path(path: str | Path) -> Path:
    """`path` itself when it exists, else the shipped recipe it names, else `path` unchanged."""
    path = Path(path)
    if path.exists():
        return path
    return shipped_recipes().get(shipped_name(str(path)), path)


def find_shipped(name: str) -> Path | None:
    """The shipped recipe or accelerate config called `name`, or None."""
    key = shipped_name(name)
    return shipped_recipes().get(key) or shipped_configs().get(key)


def find_accelerate_config(path: str) -> Path | None:
    """`path` when it is a file, else the shipped accelerate config it names (`configs/zero3.yaml`)."""
    candidate = Path(path).expanduser()
    if candidate.is_file():
        return candidate
    shipped = find_shipped(path)
    return shipped if shipped is not None and shipped.parent == CONFIGS_DIR else None


def copy_shipped(name: str, destination: str | Path) -> Path:
    """Copy a shipped recipe or config to `destination` (a file, or a directory to put it in)."""
    from gspo_trl.core.errors import RecipeError
    from gspo_trl.core.suggest import did_you_mean

    source = find_shipped(name)
    if source is None:
        known = [*shipped_recipes(), *shipped_configs()]
        hint = did_you_mean(shipped_name(name), known)
        raise RecipeError(
            f"recipes copy: no shipped recipe or config named {name!r}{hint}; known: {', '.join(known)}"
        )
    target = Path(destination)
    if target.is_dir() or str(destination).endswith(("/", os.sep)):
        target = target / source.name
    if target.exists():
        raise RecipeError(f"recipes copy: {target} exists; give another destination or remove it")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target
