"""The `engine:` section's correction keys: which combinations a run accepts.

Shared by recipes and `GSPOConfig` through `check_engine_settings`; the correction itself is
gspo_trl.training.engine.response_weights, and docs/engine-logprobs.md says when to turn it on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gspo_trl.core.errors import RecipeError

CALIBRATION_KEY = "correction_calibration"
"""The key of a `gspo-trl check-logprobs --json` report that holds the 99th percentiles the
`auto` thresholds are taken from (written by gspo_trl.diagnose.check_logprobs)."""

THRESHOLD_KEYS = ("weight_max", "weight_min", "reject_max_token", "reject_k3")
TRL_CORRECTION_KEY = "vllm_importance_sampling_correction"

CORRECTION_MODES = ("off", "truncate", "reject")
"""`engine.correction`: none, truncate w_i at weight_max, or reject outside [weight_min, weight_max]."""


@dataclass(frozen=True, kw_only=True)
class CorrectionSettings:
    """What CorrectionProbe reads: `engine.correction` and its keys (`EngineConfig.correction_settings()`;
    the defaults and the keys' meanings are EngineConfig's)."""

    correction: str
    weight_max: float | Literal["auto"] | None
    weight_min: float | Literal["auto"] | None
    reject_max_token: float | Literal["auto"] | None
    reject_k3: float | Literal["auto"] | None
    thresholds_from: str | None
    max_rejected: float
    from_engine: bool
    """pi_old is the engine's (`engine.old_logprobs: engine`): w_i = 1, only the token rules act."""

    @property
    def corrects(self) -> bool:
        """True when the correction reweights or rejects responses."""
        return self.correction != "off"


MAX_REPORT_BYTES = 1 << 20
"""A check-logprobs report is a few KiB; more is not one (`/dev/zero` was read whole)."""


def read_calibration(path: str | Path) -> dict[str, float]:
    """The 99th percentiles saved by `check-logprobs --json` (RecipeError naming the file if absent).
    Only a regular file of at most MAX_REPORT_BYTES is opened: a FIFO would block the read
    (validate hung) and a device like /dev/zero never ends."""
    file = Path(path).expanduser()
    try:
        if not file.is_file() or file.stat().st_size > MAX_REPORT_BYTES:
            kind = "not a regular file" if not file.is_file() else f"larger than {MAX_REPORT_BYTES >> 20} MiB"
            raise OSError(f"{kind}" if file.exists() else "no such file")
        report = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise RecipeError(
            f"engine.thresholds_from: cannot read {path} as a check-logprobs report ({error}); write one "
            "with `gspo-trl check-logprobs RECIPE --json FILE`, or drop the key to calibrate on the first "
            "rollout batch"
        ) from None
    calibration = report.get(CALIBRATION_KEY) if isinstance(report, dict) else None
    if not isinstance(calibration, dict):
        raise RecipeError(
            f"engine.thresholds_from: {path} has no {CALIBRATION_KEY!r} section (written by gspo-trl "
            "check-logprobs --json since the correction exists); run check-logprobs again"
        )
    return {k: float(v) for k, v in calibration.items()}


def check_correction_settings(config: Any, training: Mapping[str, Any]) -> None:
    """Refuse a correction that cannot act, or that doubles TRL's own; one line naming the keys."""
    if config.correction not in CORRECTION_MODES:
        raise RecipeError(
            f"engine.correction must be one of {', '.join(CORRECTION_MODES)}, got {config.correction!r}"
        )
    for key in THRESHOLD_KEYS:
        value = getattr(config, key)
        if isinstance(value, float | int) and not value > 0:
            raise RecipeError(f"engine.{key} must be positive, `auto` or null, got {value}")
    low, high = config.weight_min, config.weight_max
    if isinstance(low, float | int) and isinstance(high, float | int) and not low < 1 < high:
        raise RecipeError(
            f"engine.weight_min ({low}) must be below 1 and engine.weight_max ({high}) above it: "
            "a matched engine has w_i = 1"
        )
    if not 0 < config.max_rejected <= 1:
        raise RecipeError(f"engine.max_rejected must be in (0, 1], got {config.max_rejected}")
    if not config.corrects:
        return
    if training.get(TRL_CORRECTION_KEY):
        raise RecipeError(
            f"engine.correction: {config.correction} and {TRL_CORRECTION_KEY}: true both reweight the "
            f"loss for the engine/trainer gap; keep one (set {TRL_CORRECTION_KEY}: false, the GSPO "
            "default, or engine.correction: off)"
        )
    if not training.get("use_vllm"):
        raise RecipeError(
            f"engine.correction: {config.correction} needs the engine's log-probs of the sampled tokens; "
            "set use_vllm: true or engine.correction: off"
        )
    if config.from_engine and config.reject_max_token is None and config.reject_k3 is None:
        raise RecipeError(
            f"engine.correction: {config.correction} with old_logprobs: engine does nothing: pi_old is the "
            "engine's log-probs, so every w_i is 1. Set engine.reject_max_token or engine.reject_k3 (they "
            "compare each update's log-probs with the engine's), or use old_logprobs: trainer"
        )
    if config.thresholds_from is not None:
        read_calibration(config.thresholds_from)
