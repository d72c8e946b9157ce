"""A probe's declared state (`state_key`, `state()`, `load_state`) goes into trainer_state.json the
way transformers saves an `ExportableState` callback, and back into the probe from that file.
The whole save-and-resume path runs in tests/training/test_dynamic_sampling.py
(test_resume_continues_the_prompt_stream), whose refill stream is kept this way."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from transformers import TrainerState

from gspo_trl.training.probes.base import Probe
from gspo_trl.training.probes.chain import ProbeChain


class _Counter(Probe):
    state_key = "TestCounter"

    def __init__(self, count: int | None = None) -> None:
        self.count = count

    def state(self) -> dict[str, Any] | None:
        return None if self.count is None else {"count": self.count}

    def load_state(self, attributes: Mapping[str, Any]) -> None:
        self.count = int(attributes["count"])


class _Stateless(Probe):
    def load_state(self, attributes: Mapping[str, Any]) -> None:
        raise AssertionError("a probe without state_key is never given a state")


def test_a_probes_state_round_trips_through_trainer_state_json(tmp_path: Path) -> None:
    trainer = SimpleNamespace(state=TrainerState())
    ProbeChain([_Stateless(), _Counter(7)]).save_state(trainer)
    path = tmp_path / "trainer_state.json"
    trainer.state.save_to_json(str(path))
    saved = json.loads(path.read_text())["stateful_callbacks"]
    assert saved["TestCounter"] == {"args": {}, "attributes": {"count": 7}}  # ExportableState's shape

    resumed, fresh = _Counter(), _Counter()
    loaded = TrainerState.load_from_json(str(path))
    ProbeChain([_Stateless(), resumed]).load_state(SimpleNamespace(state=loaded))
    ProbeChain([_Stateless(), fresh]).load_state(SimpleNamespace(state=TrainerState()))
    assert (resumed.count, fresh.count) == (7, None)  # a fresh run's state holds nothing to load


def test_nothing_is_saved_when_the_probe_has_nothing_yet() -> None:
    trainer = SimpleNamespace(state=TrainerState())
    ProbeChain([_Counter(None)]).save_state(trainer)
    assert "TestCounter" not in trainer.state.stateful_callbacks
