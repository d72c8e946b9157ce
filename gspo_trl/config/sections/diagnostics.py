"""The `diagnostics:` section: what GSPOTrainer's diagnostics probe measures and when it warns.
Its checks are the dataclass's own (a bad value raises when it is built, from a recipe or from
`GSPOConfig(diagnostics=...)` alike)."""

from __future__ import annotations

from dataclasses import dataclass

from gspo_trl.core.errors import RecipeError


@dataclass
class DiagnosticsConfig:
    """What GSPOTrainer measures and when it warns.

    enabled: record and log the gspo/* metrics (cost: one small gather per update).
    length_buckets: bucket edges in completion tokens; (64, 256, 1024) gives the buckets
        0-64, 64-256, 256-1024 and 1024-inf (lower edge inclusive).
    warn_clip_fraction: fraction (0-1) of positive-advantage responses clipped on the
        off-policy minibatches above which a logging step counts as "everything clipped".
    warn_after_steps: consecutive such logging steps before that warning fires (once).
    warn_no_clip_steps: consecutive logging steps with off-policy data and not a single
        clipped response before the "trust region does nothing" warning fires (once).
    warn_flip_rate: mixture-of-experts models without routing replay: share (0-1) of
        (response token, layer) expert choices on the off-policy minibatches that differ from
        pi_old's above which a logging step counts towards the routing warning (fires once after
        `warn_after_steps` such steps; docs/moe.md).
    """

    enabled: bool = True
    length_buckets: tuple[int, ...] = (64, 256, 1024)
    warn_clip_fraction: float = 0.5
    warn_after_steps: int = 3
    warn_no_clip_steps: int = 50
    warn_flip_rate: float = 0.15

    def __post_init__(self) -> None:
        self.length_buckets = tuple(int(b) for b in self.length_buckets)
        if any(b <= 0 for b in self.length_buckets) or list(self.length_buckets) != sorted(
            set(self.length_buckets)
        ):
            raise RecipeError(
                f"diagnostics.length_buckets must be strictly increasing positive token counts, "
                f"got {self.length_buckets}"
            )
        if not 0.0 < self.warn_clip_fraction <= 1.0:
            raise RecipeError(
                f"diagnostics.warn_clip_fraction must be in (0, 1], got {self.warn_clip_fraction}"
            )
        if not 0.0 < self.warn_flip_rate <= 1.0:
            raise RecipeError(f"diagnostics.warn_flip_rate must be in (0, 1], got {self.warn_flip_rate}")
        if self.warn_after_steps < 1 or self.warn_no_clip_steps < 1:
            raise RecipeError("diagnostics.warn_after_steps and warn_no_clip_steps must be >= 1")
