"""gspo-trl: GSPO training recipes on top of Hugging Face TRL.

The Python API mirrors TRL's trainer/config pair, with GSPO's settings as the defaults:

    from gspo_trl import GSPOConfig, GSPOTrainer

    trainer = GSPOTrainer(model="Qwen/Qwen3-0.6B", args=GSPOConfig(output_dir="runs/qwen3-gspo"),
                          reward_funcs="math", train_dataset=dataset)
    trainer.train()

Recipes (YAML) go through `load_recipe`, `preflight` (every check before a model loads) and
`train_recipe`. The other commands are functions of a settings dataclass whose fields are the
command's options: `evaluate(EvalSettings(...))`, `filter_dataset(FilterSettings(...))`,
`check_logprobs(CheckLogprobsSettings(...))`, `calibrate(CalibrateSettings(...))`.
Names are imported on first use, so `import gspo_trl` stays cheap (no torch, no TRL).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "GSPOConfig": "gspo_trl.training.config",
    "GSPOTrainer": "gspo_trl.training.trainer",
    "DiagnosticsConfig": "gspo_trl.config.sections",
    "GSPO_DEFAULTS": "gspo_trl.config.defaults",
    "Recipe": "gspo_trl.config.recipe",
    "load_recipe": "gspo_trl.config.recipe",
    "validate": "gspo_trl.config.validation",
    "preflight": "gspo_trl.training.preflight",
    "build_trainer": "gspo_trl.training.build",
    "train_recipe": "gspo_trl.training.build",
    "remove_console": "gspo_trl.training.reporting.console_lines",
    "EvalSettings": "gspo_trl.eval.evaluate",
    "EvalResult": "gspo_trl.eval.evaluate",
    "evaluate": "gspo_trl.eval.evaluate",
    "FilterSettings": "gspo_trl.eval.filter",
    "FilterResult": "gspo_trl.eval.filter",
    "filter_dataset": "gspo_trl.eval.filter",
    "CheckLogprobsSettings": "gspo_trl.diagnose.check_logprobs",
    "LogprobCheck": "gspo_trl.diagnose.check_logprobs",
    "check_logprobs": "gspo_trl.diagnose.check_logprobs",
    "CalibrateSettings": "gspo_trl.diagnose.calibrate",
    "Calibration": "gspo_trl.diagnose.calibrate",
    "calibrate": "gspo_trl.diagnose.calibrate",
    "UserError": "gspo_trl.core.errors",
    "RecipeError": "gspo_trl.core.errors",
    "DataError": "gspo_trl.core.errors",
}
__all__ = [  # the keys of _EXPORTS (tests/test_public_api.py checks)
    "GSPO_DEFAULTS",
    "CalibrateSettings",
    "Calibration",
    "CheckLogprobsSettings",
    "DataError",
    "DiagnosticsConfig",
    "EvalResult",
    "EvalSettings",
    "FilterResult",
    "FilterSettings",
    "GSPOConfig",
    "GSPOTrainer",
    "LogprobCheck",
    "Recipe",
    "RecipeError",
    "UserError",
    "build_trainer",
    "calibrate",
    "check_logprobs",
    "evaluate",
    "filter_dataset",
    "load_recipe",
    "preflight",
    "remove_console",
    "train_recipe",
    "validate",
]

if TYPE_CHECKING:
    from gspo_trl.config.defaults import GSPO_DEFAULTS
    from gspo_trl.config.recipe import Recipe, load_recipe
    from gspo_trl.config.sections import DiagnosticsConfig
    from gspo_trl.config.validation import validate
    from gspo_trl.core.errors import DataError, RecipeError, UserError
    from gspo_trl.diagnose.calibrate import CalibrateSettings, Calibration, calibrate
    from gspo_trl.diagnose.check_logprobs import CheckLogprobsSettings, LogprobCheck, check_logprobs
    from gspo_trl.eval.evaluate import EvalResult, EvalSettings, evaluate
    from gspo_trl.eval.filter import FilterResult, FilterSettings, filter_dataset
    from gspo_trl.training.build import build_trainer, train_recipe
    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.preflight import preflight
    from gspo_trl.training.reporting.console_lines import remove_console
    from gspo_trl.training.trainer import GSPOTrainer


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gspo_trl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
