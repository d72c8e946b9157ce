"""GSPO diagnostics: configuration and pure statistics over sequence log-ratios.

Filled in by the trainer (see `gspo_trl.trainer`); this module holds only the config and
pure tensor functions so that they can be tested without a trainer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DiagnosticsConfig:
    """What GSPOTrainer measures and when it warns.

    length_buckets: upper-exclusive bucket edges in completion tokens; (64, 256, 1024) gives
        buckets <64, 64-256, 256-1024, >=1024.
    warn_clip_fraction: fraction (0-1) of positive-advantage responses clipped on an
        off-policy minibatch above which a step counts as "everything clipped".
    warn_after_steps: consecutive such logging steps before the warning fires (once).
    warn_no_clip_steps: consecutive logging steps with zero off-policy clipping before the
        "trust region does nothing" warning fires (once).
    """

    enabled: bool = True
    length_buckets: tuple[int, ...] = (64, 256, 1024)
    warn_clip_fraction: float = 0.5
    warn_after_steps: int = 3
    warn_no_clip_steps: int = 50
