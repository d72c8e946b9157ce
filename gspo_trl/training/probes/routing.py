"""Mixture-of-experts routing as a probe (`moe:` section): record pi_old's experts, replay them in
the updates, and measure how far routing moves (docs/moe.md; the counting: gspo_trl.model.routing.flips).

Between pi_old's forward and a later minibatch's update the router's weights have changed, so some
tokens go to other experts and the ratio compares two sub-networks. For a model whose routers
gspo_trl.model.routing knows (nothing is attached to a dense model) this probe:
- records the routing of pi_old's forward and puts it in the rollout batch under
  `ROUTED_EXPERTS`, which TRL's shuffle and split move with its rows like any tensor;
- in each update forward, compares the router's own choice with that routing (the flip rate,
  gspo/mb{k}/routing/*), and with `moe.routing_replay: old` forces it;
- with `routing_replay: engine`, forces the routing vLLM used while sampling in pi_old's forward
  (how often the trainer's router disagrees: gspo/engine_routing/*) and the updates.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.batch import RolloutBatch
from gspo_trl.config.sections import DiagnosticsConfig, MoeConfig
from gspo_trl.core.errors import RecipeError
from gspo_trl.model.routing.engine import engine_routing_returned, routing_batch, take_sampled_routing
from gspo_trl.model.routing.families import find_routers, stop_router_logits_in_generate, supported_routers
from gspo_trl.model.routing.flips import FlipCounts, engine_routing_metrics, flip_counts, replay_metrics
from gspo_trl.model.routing.hooks import RoutingHooks
from gspo_trl.training.probes.base import Generation, LogprobOutput, LossCall, NoGradPass, Probe
from gspo_trl.training.reporting.line_parts import BANNER_RUN, LinePart
from gspo_trl.training.reporting.moe_lines import flips_part, moe_banner_line
from gspo_trl.training.rollout_rows import Layout

logger = logging.getLogger(__name__)

ROUTED_EXPERTS = "routed_experts"
"""The rollout batch's key for its routing, (B, layers, P + C, k) expert indices."""


class RoutingAlarm:
    """Warns once when, without replay, the off-policy flip rate stays above
    `warn_flip_rate` for `warn_after_steps` consecutive logging steps."""

    def __init__(self, config: DiagnosticsConfig) -> None:
        self.config = config
        self.recent: list[float] = []
        self.warned = False

    def update(self, flip_rate: float | None) -> str | None:
        if flip_rate is None or flip_rate <= self.config.warn_flip_rate:
            self.recent = []
            return None
        self.recent = [*self.recent, flip_rate][-self.config.warn_after_steps :]
        if self.warned or len(self.recent) < self.config.warn_after_steps:
            return None
        self.warned = True
        message = (
            f"MoE routing: {', '.join(f'{r:.0%}' for r in self.recent)} of (response token, layer) expert "
            f"choices on the off-policy minibatches differ from pi_old's over the last {len(self.recent)} "
            f"logging steps (threshold {self.config.warn_flip_rate:.0%}): the ratio compares different "
            "experts. Consider moe.routing_replay: old, or a lower learning rate (docs/moe.md)."
        )
        logger.warning(message)
        return message


class MoeRouting:
    """The trainer's routing record/replay and flip statistics; inert for a dense model."""

    def __init__(
        self,
        model: torch.nn.Module,
        config: MoeConfig,
        diagnostics: DiagnosticsConfig,
        accelerator: Any,
        on_policy: bool = False,
    ) -> None:
        """`on_policy`: every update sees the current policy (gspo_trl.config.batch.RolloutBatch):
        TRL then runs no pi_old forward and there is nothing to compare (replay is refused)."""
        self.config = config
        self.accelerator = accelerator
        sites = find_routers(model)
        if not sites and config.replays:
            raise RecipeError(
                f"moe.routing_replay: {config.routing_replay}: {type(model).__name__} has no "
                f"mixture-of-experts router this package knows ({', '.join(supported_routers())}): a dense "
                "model has no routing to replay; remove the moe: section (or add the family: "
                "gspo_trl/model/routing/)"
            )
        measure = (diagnostics.enabled and not on_policy) or config.replays
        self.hooks = RoutingHooks(model, sites) if sites and measure else None
        self.alarm = RoutingAlarm(diagnostics)
        self.counts: dict[int, FlipCounts] = {}
        self.engine_counts = FlipCounts()
        self.engine_routings: list[torch.Tensor] | None = None
        self.updates = self.replayed = 0
        """Update passes, and those forced to a recorded routing, since the last log."""
        self.last_response_rates: torch.Tensor | None = None
        """The last update pass's per-response flip rates (B,), all ranks (NaN-padded), or None."""
        """routing_replay: engine: the experts vLLM used for each completion of this rollout batch,
        (layers, P_i + C_i, k) each (gspo_trl.model.routing.engine), taken after TRL's `_generate`."""
        self._old_forward_pending = False
        self._rollout_routing: torch.Tensor | None = None

    @property
    def enabled(self) -> bool:
        return self.hooks is not None

    # --- rollout: pi_old's forward ---------------------------------------------------------
    def begin_rollout(self, training: bool) -> None:
        """A rollout batch starts; its first no-grad forward is pi_old's (TRL computes
        `old_per_token_logps` before the reference model's:
        `old_per_token_logps, _, _ = self._get_per_token_logps_and_entropies(`,
        trl/trainer/grpo_trainer.py:2645-2700)."""
        self._old_forward_pending = self.enabled and training
        self._rollout_routing = None

    def skip_old_forward(self, attention_mask: torch.Tensor | None, width: int | None) -> None:
        """pi_old came without a forward (engine log-probs): nothing to record; with
        routing_replay: engine, the updates still replay the engine's routing."""
        pending, self._old_forward_pending = self._old_forward_pending, False
        if pending and self.config.routing_replay == "engine":
            self._rollout_routing = self._engine_batch(attention_mask, width)

    def take_engine_routing(self, trainer: Any, prompt_ids: Sequence, completion_ids: Sequence) -> None:
        """After TRL's `_generate` (training): keep the engine's routing of what it just sampled."""
        if self.enabled and self.config.routing_replay == "engine":
            self.engine_routings = take_sampled_routing(trainer.vllm_generation, prompt_ids, completion_ids)

    def _engine_batch(self, attention_mask: torch.Tensor, width: int) -> torch.Tensor:
        """This rollout batch's engine routing laid out as pi_old's input: (B, layers, P + C, k)."""
        routings, self.engine_routings = self.engine_routings, None
        if routings is None:
            raise RuntimeError(
                "moe.routing_replay: engine: the engine returned no routing for this rollout batch "
                "(was it sampled by TRL's colocated vLLM?)"
            )
        prompt_width = attention_mask.shape[1] - width
        prompt_lengths = attention_mask[:, :prompt_width].sum(dim=1).tolist()
        batch = routing_batch(routings, prompt_lengths, prompt_width, width)
        return batch.to(attention_mask.device)

    @contextmanager
    def old_forward(self, attention_mask: torch.Tensor | None, width: int | None):
        """Around a no-grad forward: records (or, in engine mode, replays) when it is pi_old's.
        `attention_mask` is the forward's (B, P + C), `width` its completion width C."""
        if not self._old_forward_pending:
            yield
            return
        self._old_forward_pending = False
        completion_mask = attention_mask[:, -width:] if attention_mask is not None and width else None
        engine = None
        if self.config.routing_replay == "engine":
            engine = self._engine_batch(attention_mask, width)
        self.hooks.begin(record=engine is None, reference=engine, replay=engine is not None)
        try:
            yield
        finally:
            finished = self.hooks.end()
        if engine is not None:
            self._rollout_routing = engine
            if finished.flips is not None and completion_mask is not None:
                self.engine_counts.add(*self._all_ranks(*flip_counts(finished.flips, completion_mask)))
        else:
            self._rollout_routing = finished.routing()

    def attach(self, rollout: dict[str, Any]) -> dict[str, Any]:
        """Put this rollout batch's routing into TRL's rollout dict (it must have its rows)."""
        routing, self._rollout_routing, self.engine_routings = self._rollout_routing, None, None
        if routing is not None:
            if routing.shape[0] != rollout["completion_ids"].shape[0]:
                raise RuntimeError(
                    f"routing of {routing.shape[0]} rows for a rollout batch of "
                    f"{rollout['completion_ids'].shape[0]}: pi_old's forward did not cover the batch"
                )
            rollout[ROUTED_EXPERTS] = routing
        return rollout

    # --- updates ------------------------------------------------------------------------------
    def begin_update(self, inputs: dict[str, Any]) -> None:
        """Before the loss forward: compare with (and, with replay, force) the batch's routing."""
        routing = inputs.get(ROUTED_EXPERTS)
        self.last_response_rates = None
        if self.hooks is None:
            return
        self.updates += 1
        if routing is None:
            return
        self.hooks.begin(reference=routing, replay=self.config.replays)
        self.replayed += int(self.config.replays)

    def observe_update(self, inputs: dict[str, Any], minibatch: int) -> None:
        """After the loss forward: count its flips under `minibatch` (1 = on-policy), all ranks."""
        finished = self.hooks.active if self.hooks is not None else None
        if finished is None or finished.flips is None:
            return
        counts = self._all_ranks(*flip_counts(finished.flips, inputs["completion_mask"]))
        self.counts.setdefault(minibatch, FlipCounts()).add(*counts)
        self.last_response_rates = counts[2]

    def _all_ranks(
        self, layer_flips: torch.Tensor, tokens: float, rates: torch.Tensor
    ) -> tuple[torch.Tensor, float, torch.Tensor]:
        """One pass's counts summed (rates gathered) over the ranks, on the CPU. Every rank runs
        the same passes, so each reaches this collective at the same point."""
        accelerator = self.accelerator
        if accelerator.num_processes > 1:
            totals = accelerator.reduce(torch.cat([layer_flips, layer_flips.new_tensor([tokens])]), "sum")
            layer_flips, tokens = totals[:-1], float(totals[-1])
            rates = accelerator.gather(accelerator.pad_across_processes(rates, dim=0, pad_index=float("nan")))
        return layer_flips.cpu(), tokens, rates.cpu()

    def end_update(self) -> None:
        """After the backward (gradient checkpointing reruns the forward, with the hooks, in it)."""
        if self.hooks is not None:
            self.hooks.end()

    # --- logging ---------------------------------------------------------------------------------
    def statistics(self, is_main_process: bool) -> dict[str, float]:
        """gspo/mb{k}/routing/*, gspo/offpolicy/routing/* and gspo/engine_routing/* since the last
        log; cleared. Feeds the alarm (main process, without replay)."""
        out: dict[str, float] = {}
        offpolicy = FlipCounts()
        for minibatch in sorted(self.counts):
            counts = self.counts[minibatch]
            out.update({names.under(names.minibatch(minibatch), k): v for k, v in counts.stats().items()})
            if minibatch >= 2:
                offpolicy.add(counts.layer_flips, counts.tokens, torch.cat(counts.response_rates))
        pooled = offpolicy.stats()
        out.update({names.under(names.OFFPOLICY, k): v for k, v in pooled.items()})
        out.update(engine_routing_metrics(self.engine_counts))
        if self.config.replays:
            out.update(replay_metrics(self.replayed, self.updates))
        self.counts, self.engine_counts = {}, FlipCounts()
        self.updates = self.replayed = 0
        if is_main_process and not self.config.replays and pooled:
            self.alarm.update(pooled.get(names.FLIP_RATE))
        return out


class RoutingProbe(Probe):
    """MoeRouting wired to the trainer's events; inert for a dense model."""

    alarm_loggers = (__name__,)  # the flip-rate alarm
    rollout_layouts: ClassVar[dict[str, Layout]] = {ROUTED_EXPERTS: Layout(2, "sequence")}  # (B, L, P+C, k)

    def __init__(self, config: MoeConfig, diagnostics: DiagnosticsConfig) -> None:
        self.config, self.diagnostics = config, diagnostics
        self.routing: MoeRouting | None = None

    def trainer_init(self) -> contextlib.AbstractContextManager[None]:
        """Around GRPOTrainer's construction: routing_replay: engine builds TRL's vLLM to return
        the experts it routes to."""
        return engine_routing_returned(self.config)

    def attach(self, trainer: Any) -> None:
        stop_router_logits_in_generate(trainer.model)
        on_policy = RolloutBatch.from_grpo_config(trainer.args).on_policy
        self.routing = MoeRouting(
            trainer.model, self.config, self.diagnostics, trainer.accelerator, on_policy
        )

    def banner_lines(self, trainer: Any) -> list[LinePart]:
        line = moe_banner_line(self.routing)
        return [LinePart(BANNER_RUN + 10, line)] if line else []

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        flips = flips_part(logs)  # under replay: what the router would choose vs the replayed experts
        return [LinePart(50, flips)] if flips else []

    def on_rollout_begin(self, trainer: Any, training: bool) -> None:
        self.routing.begin_rollout(training)

    def on_generation(self, trainer: Any, generation: Generation) -> None:
        if generation.training:
            self.routing.take_engine_routing(trainer, generation.prompt_ids, generation.completion_ids)

    def around_no_grad_pass(
        self, trainer: Any, call: NoGradPass, proceed: Callable[[], LogprobOutput]
    ) -> LogprobOutput:
        if call.answer is not None:  # pi_old without a forward (engine log-probs)
            self.routing.skip_old_forward(call.attention_mask, call.logits_to_keep)
            return proceed()
        with self.routing.old_forward(call.attention_mask, call.logits_to_keep):  # recorded or replayed
            return proceed()

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        return self.routing.attach(batch)

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        if loss.training:
            self.routing.begin_update(loss.batch)

    def on_loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        if loss.training:
            self.routing.observe_update(loss.batch, loss.minibatch)

    def on_training_step_end(self, trainer: Any) -> None:
        """After the backward, which reruns the forward under gradient checkpointing."""
        self.routing.end_update()

    def on_log(self, trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
        if not trainer.model.training:
            return {}
        return self.routing.statistics(trainer.accelerator.is_main_process)
