"""Mixture-of-experts routing in GSPOTrainer: record pi_old's experts, replay them in the
updates, and measure how far routing moves (docs/moe.md).

For a model whose routers gspo_trl.model.routing knows (a dense model attaches nothing):
- records the routing of pi_old's forward and puts it in the rollout batch under
  `ROUTED_EXPERTS`, which TRL shuffles and splits with its rows like any tensor;
- in each update forward, compares the router's own choice with it (the flip rate, logged as
  gspo/mb{k}/routing/*), and with `moe.routing_replay: old` forces it;
- with `routing_replay: engine`, forces the routing vLLM used while sampling in pi_old's forward
  (logging how often the trainer's router disagrees: gspo/engine_routing/*) and the updates.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import DiagnosticsConfig, MoeConfig
from gspo_trl.core.errors import RecipeError
from gspo_trl.model.routing.engine import (
    engine_routing_unavailable_reason,
    returning_engine_routing,
    routing_batch,
    take_sampled_routing,
)
from gspo_trl.model.routing.families import find_routers, supported_routers
from gspo_trl.model.routing.hooks import RoutingHooks

logger = logging.getLogger(__name__)

ROUTED_EXPERTS = "routed_experts"
"""The rollout batch's key for its routing, (B, layers, P + C, k) expert indices."""


@dataclass
class FlipCounts:
    """Flips summed over the updates of one minibatch index since the last log, all ranks."""

    layer_flips: torch.Tensor | None = None
    """(layers,) flipped (response token, layer) pairs per layer."""
    tokens: float = 0.0
    response_rates: list[torch.Tensor] = field(default_factory=list)

    def add(self, layer_flips: torch.Tensor, tokens: float, response_rates: torch.Tensor) -> None:
        self.layer_flips = layer_flips if self.layer_flips is None else self.layer_flips + layer_flips
        self.tokens += tokens
        self.response_rates.append(response_rates)

    def stats(self) -> dict[str, float]:
        """routing/flip_rate, /flip_rate_layer_max and /flip_rate_response_max (0-1); empty
        when no response token was seen."""
        if self.layer_flips is None or self.tokens <= 0:
            return {}
        per_layer = self.layer_flips / self.tokens
        rates = torch.cat(self.response_rates)
        rates = rates[~rates.isnan()]
        out = {names.FLIP_RATE: float(per_layer.mean()), names.FLIP_RATE_LAYER_MAX: float(per_layer.max())}
        if rates.numel():
            out[names.FLIP_RATE_RESPONSE_MAX] = float(rates.max())
        return out


def flip_counts(
    flips: torch.Tensor, completion_mask: torch.Tensor
) -> tuple[torch.Tensor, float, torch.Tensor]:
    """Flips of one pass at the positions that score a response token: per layer (layers,), the
    token count, and each response's rate (B,) (NaN for a response without tokens).

    `flips` is (B, layers, P + C) over TRL's `input_ids = torch.cat([prompt_ids, completion_ids], dim=1)`
    (trl/trainer/grpo_trainer.py:3024), the mask (B, C). Response token j's log-prob is read at position P - 1
    + j (the last prompt token for j = 0), so those positions count, and the last response token's own
    position, which scores nothing (and has no engine routing), does not."""
    mask = completion_mask.float()
    width = mask.shape[1]
    flipped = flips[:, :, -width - 1 : -1].float() * mask[:, None, :]
    tokens = mask.sum(dim=1)
    layers = flips.shape[1]
    rates = flipped.sum(dim=(1, 2)) / (tokens * layers)
    return flipped.sum(dim=(0, 2)), float(tokens.sum()), rates.masked_fill(tokens == 0, float("nan"))


def engine_routing_metrics(counts: FlipCounts) -> dict[str, float]:
    """gspo/engine_routing/*: the trainer's router against the engine's routing in pi_old's forward."""
    stats = counts.stats()
    if not stats:
        return {}
    return {
        names.ENGINE_ROUTING_FLIP_RATE: stats[names.FLIP_RATE],
        names.ENGINE_ROUTING_FLIP_RATE_LAYER_MAX: stats[names.FLIP_RATE_LAYER_MAX],
    }


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


def replay_metrics(replayed: int, updates: int) -> dict[str, float]:
    """gspo/routing_replay/replayed_updates: `replayed` of `updates` update passes ran on recorded
    experts (empty without updates)."""
    return {names.ROUTING_REPLAYED: replayed / updates} if updates else {}


def engine_routing_returned(config: MoeConfig) -> contextlib.AbstractContextManager[None]:
    """Around GRPOTrainer's construction: with `moe.routing_replay: engine`, TRL's colocated vLLM
    is built to return the experts it routes to (gspo_trl.model.routing.engine), or a one-line
    refusal says why it cannot; otherwise nothing."""
    if config.routing_replay != "engine":
        return contextlib.nullcontext()
    reason = engine_routing_unavailable_reason()
    if reason is not None:
        raise RecipeError(reason)
    return returning_engine_routing()
