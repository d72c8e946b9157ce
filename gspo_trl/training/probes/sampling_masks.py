"""`engine.sampling_masks: replay` as a probe: each training rollout batch's engine log-probs
renormalised by the kept mass of the sampler's filter (gspo_trl.training.engine.sampling_masks).

It goes right after EngineLogprobsProbe (whose answer says whether pi_old is the engine's) and
before CorrectionProbe, whose `auto` calibration reads the rollout batch at its end. Events used:

    attach           the replay, active only under a reshaping sampler with the key set
    on_rollout_begin how many pi_old passes the engine had answered so far
    on_rollout_end   training batches: log S_t from pi_old's weights, mu (and an engine pi_old) + log S_t
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from gspo_trl.config.sections import EngineConfig
from gspo_trl.training.engine.sampling_masks import SAMPLING_LOG_KEPT_MASS, SamplingMaskReplay
from gspo_trl.training.probes.base import Probe
from gspo_trl.training.probes.correction import CorrectionProbe
from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe
from gspo_trl.training.rollout_rows import Layout

logger = logging.getLogger(__name__)


class SamplingMaskProbe(Probe):
    """The sampling-mask replay of a run (inert unless `engine.sampling_masks: replay`)."""

    rollout_layouts: ClassVar[dict[str, Layout]] = {SAMPLING_LOG_KEPT_MASS: Layout(1, "completion")}
    runs_after = (EngineLogprobsProbe,)  # its answer says whether pi_old is the engine's
    runs_before = (CorrectionProbe,)  # whose `auto` calibration reads the batch at its end

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.replay: SamplingMaskReplay | None = None
        self._engine_answers = 0

    def attach(self, trainer: Any) -> None:
        self.replay = SamplingMaskReplay(trainer, self.config)
        if self.replay.active:
            logger.info("engine.sampling_masks: %s", self.replay.describe())

    def _answered(self, trainer: Any) -> int:
        engine = trainer.probes.find(EngineLogprobsProbe)
        return engine.engine.forwards_skipped if engine is not None and engine.engine is not None else 0

    def on_rollout_begin(self, trainer: Any, training: bool) -> None:
        self._engine_answers = self._answered(trainer)

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        if not (self.replay.active and trainer.model.training):
            return batch
        from_engine = self._answered(trainer) > self._engine_answers
        return self.replay.apply(trainer, batch, from_engine)
