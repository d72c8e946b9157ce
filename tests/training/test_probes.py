"""GSPOTrainer's probe dispatch in real GSPO steps on the tiny model: the events arrive in TRL's
order and in probe-list order, a probe's answer replaces pi_old's forward, a probe's change to the
loss inputs reaches TRL's loss, on_rollout_end's batch is the one trained on, and the probes'
callbacks sit ahead of / after transformers' own in list order."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import torch
from transformers import TrainerCallback
from transformers.trainer_callback import DefaultFlowCallback

from gspo_trl.training.probes.base import (
    Generation,
    LossCall,
    NoGradPass,
    PolicyForward,
    Probe,
    ProbeCallbacks,
)
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir  # noqa: F401

OLD_LOGP = -1.25
"""The constant pi_old log-prob the answering probe hands TRL instead of its forward."""


class Marker(TrainerCallback):
    def __init__(self, name: str) -> None:
        self.name = name


class Recorder(Probe):
    """Records (probe name, event) for every event; optionally answers pi_old and zeroes advantages."""

    def __init__(self, name: str, log: list[tuple[str, str]], answer: bool = False) -> None:
        self.name, self.log, self.answer = name, log, answer
        self.losses: list[float] = []
        self.old_seen: list[torch.Tensor] = []
        self.rollout_keys: list[str] = []

    def _note(self, event: str) -> None:
        self.log.append((self.name, event))

    def callbacks(self) -> ProbeCallbacks:
        return ProbeCallbacks([Marker(f"{self.name}-ahead")], [Marker(f"{self.name}-after")])

    def around_rollout(self, trainer: Any, prompts: list, proceed: Callable[[list], dict]) -> dict:
        self._note("rollout(")
        batch = proceed(prompts)
        self._note(")rollout")
        return batch

    def on_generation(self, trainer: Any, generation: Generation) -> None:
        self._note("generation")
        assert len(generation.completion_ids) == len(generation.prompt_ids)

    def answer_no_grad_pass(self, trainer: Any, call: NoGradPass) -> Any:
        self._note("answer?")
        if not (self.answer and call.is_policy):
            return None
        width = call.logits_to_keep
        return torch.full((call.attention_mask.shape[0], width), OLD_LOGP), None, None

    def around_rewards(self, trainer: Any, proceed: Callable[[], torch.Tensor]) -> torch.Tensor:
        self._note("rewards")
        return proceed()

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        self._note("rollout_end")
        if self.answer:
            batch["policy_version"] = torch.full_like(batch["advantages"], trainer.state.global_step)
        return batch

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        self._note("loss_inputs")
        self.rollout_keys = sorted(loss.batch)
        if self.answer and loss.minibatch == 2:
            loss.inputs["advantages"] = torch.zeros_like(loss.inputs["advantages"])

    def on_policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        self._note("policy_forward")
        if policy.old_logps is not None:
            self.old_seen.append(policy.old_logps)

    def on_loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        self._note("loss")
        if self.answer:
            self.losses.append((loss.minibatch, float(value)))

    def on_log(self, trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
        self._note("log")
        return {f"probe/{self.name}": 1.0} if "loss" in logs else {}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("probes")
    log: list[tuple[str, str]] = []
    first, second = Recorder("first", log, answer=True), Recorder("second", log)
    trainer = make_trainer(tiny_model_dir(root), root / "out", max_steps=2, probes=[first, second])
    trainer.train()
    return trainer, log, first, second


def test_events_come_in_trl_order_and_list_order(run):
    _, log, _, _ = run
    events = [event for name, event in log if name == "first"]
    rollout = events[: events.index(")rollout") + 1]
    assert rollout[:2] == ["rollout(", "generation"]
    assert rollout.index("answer?") < rollout.index("rewards") < rollout.index("rollout_end")
    assert events[len(rollout) :][:4] == ["loss_inputs", "policy_forward", "loss", "log"]
    # around_*: the first probe outermost; notifications: the first probe first
    assert log[:2] == [("first", "rollout("), ("second", "rollout(")]
    closing = [entry for entry in log if entry[1] == ")rollout"]
    assert closing == [("second", ")rollout"), ("first", ")rollout")]
    ends = [name for name, event in log if event == "rollout_end"]
    assert ends == ["first", "second"]
    # the first answer stands: the second probe is not asked for pi_old's pass
    asked = [name for name, event in log if event == "answer?"]
    assert asked == ["first"]


def test_an_answer_replaces_pi_old_and_the_rollout_batch_carries_a_probes_key(run):
    _, _, first, second = run
    assert first.old_seen and all(torch.all(old == OLD_LOGP) for old in first.old_seen)
    assert "policy_version" in second.rollout_keys  # added in on_rollout_end, split with its rows


def test_a_change_to_the_loss_inputs_reaches_trls_loss(run):
    _, _, first, _ = run
    by_minibatch = dict(first.losses)
    assert by_minibatch[2] == 0.0  # advantages zeroed by the probe: GSPO's loss is exactly 0
    assert by_minibatch[1] != 0.0


def test_each_probe_adds_its_metrics(run):
    trainer, _, _, _ = run
    entries = [e for e in trainer.state.log_history if "loss" in e and "train_runtime" not in e]
    assert all(e["probe/first"] == 1.0 and e["probe/second"] == 1.0 for e in entries)


def test_callbacks_sit_around_transformers_own_in_probe_order(run):
    trainer, _, _, _ = run
    callbacks = trainer.callback_handler.callbacks
    names = [c.name if isinstance(c, Marker) else type(c).__name__ for c in callbacks]
    flow = names.index(DefaultFlowCallback.__name__)
    assert names.index("first-ahead") < names.index("second-ahead") < flow
    assert (
        flow < names.index("UpdatePhaseCallback") < names.index("first-after") < names.index("second-after")
    )
