"""One of each built-in probe that adds to the console's step line, for tests that call `step_line`
without a trainer (a trainer's console passes its own chain)."""

from __future__ import annotations

from gspo_trl.config.sections import DiagnosticsConfig, EngineConfig, MoeConfig, SamplingConfig
from gspo_trl.training.probes.chain import ProbeChain
from gspo_trl.training.probes.correction import CorrectionProbe
from gspo_trl.training.probes.diagnostics import DiagnosticsProbe
from gspo_trl.training.probes.dynamic_sampling import DynamicSamplingProbe
from gspo_trl.training.probes.perf import PerfProbe
from gspo_trl.training.probes.routing import RoutingProbe
from gspo_trl.training.probes.staleness import StalenessProbe


def line_probes() -> ProbeChain:
    """The built-in probes with step-line parts, in the trainer's order."""
    return ProbeChain(
        [
            DynamicSamplingProbe(SamplingConfig()),
            DiagnosticsProbe(DiagnosticsConfig()),
            CorrectionProbe(EngineConfig().correction_settings()),
            RoutingProbe(MoeConfig(), DiagnosticsConfig()),
            StalenessProbe(EngineConfig(max_staleness=1).staleness_settings()),
            PerfProbe(),
        ]
    )
