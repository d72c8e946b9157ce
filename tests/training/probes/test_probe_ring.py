"""What surrounds a probe, pinned to the code: the alarms each built-in probe raises reach the
console's `!` lines, a chain in the wrong order is refused when it is built, and docs/probes.md
names every probe class the package defines (issue 46)."""

from __future__ import annotations

import ast
import logging
import re
from typing import Any

import pytest

from gspo_trl.config.sections import DiagnosticsConfig, EngineConfig, MoeConfig, SamplingConfig
from gspo_trl.training.probes.base import Probe
from gspo_trl.training.probes.chain import ProbeChain
from gspo_trl.training.probes.correction import CorrectionRun
from gspo_trl.training.probes.diagnostics import ClipAlarm
from gspo_trl.training.probes.dynamic_sampling import DynamicSamplingProbe
from gspo_trl.training.probes.old_logprobs import EngineOldLogprobs
from gspo_trl.training.probes.perf import PerfProbe
from gspo_trl.training.probes.routing import RoutingAlarm, RoutingProbe
from gspo_trl.training.probes.staleness import StalenessProbe
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir  # noqa: F401
from tests._paths import ROOT

ALARMS = {
    "the clip-rate alarm": ClipAlarm,
    "the engine mismatch guard": EngineOldLogprobs,
    "the MoE routing alarm": RoutingAlarm,
    "dynamic sampling's capped batches": DynamicSamplingProbe,
    "the correction's max_rejected": CorrectionRun,
}
"""Each built-in alarm and the class that warns it (on its module's logger)."""


class _RaiseEveryAlarm(Probe):
    """Warns once on each alarm's logger in the middle of a real training step."""

    def on_training_step_end(self, trainer: Any) -> None:
        for alarm, kind in ALARMS.items():
            logging.getLogger(kind.__module__).warning("alarm raised: %s", alarm)


def test_every_builtin_alarm_reaches_the_console(tmp_path, capsys) -> None:
    trainer = make_trainer(
        tiny_model_dir(tmp_path), tmp_path / "run", max_steps=1, probes=[_RaiseEveryAlarm()]
    )
    trainer.train()
    printed = capsys.readouterr().out.splitlines()
    missing = [alarm for alarm in ALARMS if f"! alarm raised: {alarm}" not in printed]
    assert missing == [], f"printed as plain log records, not `!` lines: {missing}"


def test_a_chain_in_the_wrong_order_raises_one_line() -> None:
    routing, stale = (
        RoutingProbe(MoeConfig(), DiagnosticsConfig()),
        StalenessProbe(EngineConfig(max_staleness=1).staleness_settings()),
    )
    ProbeChain([DynamicSamplingProbe(SamplingConfig()), routing, stale, PerfProbe()])  # the right order
    wrong_orders = [
        [stale, routing],
        [PerfProbe(), stale],
        [routing, DynamicSamplingProbe(SamplingConfig())],
    ]
    for probes in wrong_orders:
        with pytest.raises(ValueError, match="must come") as error:
            ProbeChain(probes)
        assert "\n" not in str(error.value), str(error.value)


def _probe_classes() -> set[str]:
    """Every class of the package that derives (at any depth) from `Probe`, read with `ast`."""
    bases: dict[str, set[str]] = {}
    for path in (ROOT / "gspo_trl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                bases[node.name] = names
    probes, grew = {"Probe"}, True
    while grew:
        found = {name for name, of in bases.items() if of & probes}
        grew = not found <= probes
        probes |= found
    return probes - {"Probe"}


def test_docs_probes_names_every_probe_class() -> None:
    text = (ROOT / "docs" / "probes.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`(\w+Probe)`", text))
    classes = _probe_classes()
    assert len(classes) >= 13
    assert sorted(classes - listed) == [], "docs/probes.md's list of built-in probes lacks these"
