"""`engine:` split by capability: each built-in probe receives its own capability's settings, never
the whole section, and every `engine.*` key belongs to exactly one capability (issue 46)."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

from gspo_trl.config.sections import EngineConfig
from gspo_trl.config.sections.engine import OldLogprobsSettings
from gspo_trl.config.sections.engine_correction import CorrectionSettings
from gspo_trl.config.sections.engine_overlap import OverlapSettings
from gspo_trl.config.sections.engine_sampler import SamplingMaskSettings
from gspo_trl.config.sections.engine_staleness import StalenessSettings
from gspo_trl.training.trainer import builtin_probes

CAPABILITIES = {
    "EngineLogprobsProbe": OldLogprobsSettings,
    "SamplingMaskProbe": SamplingMaskSettings,
    "CorrectionProbe": CorrectionSettings,
    "StalenessProbe": StalenessSettings,
    "OverlapProbe": OverlapSettings,
}
DERIVED = {"from_engine"}
"""A setting computed from another capability's key (the correction needs to know pi_old's source)."""


def test_each_engine_probe_receives_only_its_capabilitys_settings() -> None:
    engine = EngineConfig(correction="truncate", max_staleness=1, sampling_masks="replay", weight_max=2.0)
    # the overlap and staleness refuse each other (check_engine_settings): one run each
    probes = [
        *builtin_probes(SimpleNamespace(engine=engine)),
        *[
            p
            for p in builtin_probes(SimpleNamespace(engine=EngineConfig(overlap="one_step")))
            if type(p).__name__ == "OverlapProbe"
        ],
    ]
    given = {type(p).__name__: type(p.config) for p in probes if type(p).__name__ in CAPABILITIES}
    assert given == CAPABILITIES
    whole = [type(p).__name__ for p in probes for v in vars(p).values() if isinstance(v, EngineConfig)]
    assert whole == []
    (correction,) = [p.config for p in probes if isinstance(getattr(p, "config", None), CorrectionSettings)]
    assert (correction.correction, correction.weight_max, correction.from_engine) == ("truncate", 2.0, False)


def test_every_engine_key_belongs_to_one_capability() -> None:
    owners: dict[str, list[str]] = {}
    for kind in CAPABILITIES.values():
        for f in fields(kind):
            if f.name not in DERIVED:
                owners.setdefault(f.name, []).append(kind.__name__)
    assert sorted(owners) == sorted(f.name for f in fields(EngineConfig))
    assert {key: kinds for key, kinds in owners.items() if len(kinds) > 1} == {}
