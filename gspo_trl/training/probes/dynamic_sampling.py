"""Dynamic sampling (DAPO) as a probe (`sampling:` section; docs/dynamic-sampling.md says when it
pays): groups whose rewards all tie are dropped from the rollout batch and replaced by groups of
freshly drawn prompts, generated and scored in further rounds, until the batch holds its full
number of informative groups or `max_rounds` rounds have run.

Refill prompts come from a stream of their own over the training set (its position saved in
every checkpoint's trainer_state.json); at the cap a batch still short repeats its informative
groups, so every update sees the same batch shape; a batch with no informative group is trained as
generated. docs/dynamic-sampling.md ("What happens to a rollout batch", "Where the extra prompts
come from") gives the reasons and verl's and TRL's lines they rest on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from trl.trainer.utils import nanstd

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import SamplingConfig
from gspo_trl.core.errors import RecipeError
from gspo_trl.training import rollout_rows
from gspo_trl.training.probes.base import Generation, Probe
from gspo_trl.training.reporting.line_parts import BANNER_GSPO, LinePart, logged_number

logger = logging.getLogger(__name__)


class RefillStream:
    """The training rows' indices in a shuffled order per pass over them, the same on every rank;
    `drawn` counts the prompts taken so far (the position a checkpoint saves)."""

    def __init__(self, size: int, seed: int, drawn: int = 0) -> None:
        self.size, self.seed, self.drawn = size, seed, drawn
        self._order: tuple[int, list[int]] | None = None

    def _pass(self, number: int) -> list[int]:
        if self._order is None or self._order[0] != number:
            generator = torch.Generator().manual_seed(1_000_003 * (self.seed + 1) + number)
            self._order = (number, torch.randperm(self.size, generator=generator).tolist())
        return self._order[1]

    def draw(self, count: int) -> list[int]:
        out: list[int] = []
        while len(out) < count:
            number, offset = divmod(self.drawn, self.size)
            taken = self._pass(number)[offset : offset + count - len(out)]
            out += taken
            self.drawn += len(taken)
        return out


def informative_groups(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int) -> torch.Tensor:
    """(G,) True where a group's summed rewards do not all tie. TRL's own test for a tied group
    (`is_std_zero = torch.isclose(std_rewards, ...)`, trl/trainer/grpo_trainer.py:2788), on the weighted
    sum it normalises (:2763); a row no reward scored is NaN and left out, as TRL does (:2764)."""
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    std = nanstd(rewards.view(-1, group), dim=1)
    return ((std > 0) & ~torch.isclose(std, torch.zeros_like(std))).cpu()


def refill_size(missing: int, kept: int, drawn: int, target: int, step: int) -> int:
    """Groups to draw for the next round: the missing count over the keep rate seen so far in this
    rollout batch (a whole generation batch when nothing was kept), never less than the missing
    count nor more than a generation batch, rounded up to `step` (equal rows on every rank)."""
    want = target if kept == 0 else math.ceil(missing * drawn / kept)
    want = max(missing, min(want, target))
    return step * math.ceil(want / step)


@dataclass
class Round:
    """One generation round: this rank's scored rows, and for all ranks' rows, in TRL's gather
    order, which groups teach something and each row's generated tokens."""

    batch: dict[str, Any]
    informative: torch.Tensor
    tokens: torch.Tensor


class DynamicSamplingProbe(Probe):
    """Refills a rollout batch's tied groups with freshly generated ones (`sampling.dynamic`)."""

    alarm_loggers = (__name__,)  # capped batches
    runs_before = (Probe,)  # outermost: every other probe sees each generation round as a rollout
    state_key = "GSPODynamicSampling"  # the refill stream's position, saved with every checkpoint

    def __init__(self, config: SamplingConfig) -> None:
        self.config = config
        self.stream: RefillStream | None = None
        self.capped_streak = 0
        self.refilling = False
        """True while a refill round generates (OverlapProbe generates it now, beside its request)."""
        self._rewards: torch.Tensor | None = None
        self._tokens: list[int] | None = None
        self.layouts = dict(rollout_rows.LAYOUTS)

    def attach(self, trainer: Any) -> None:
        self.layouts = {**rollout_rows.LAYOUTS, **trainer.probes.rollout_layouts()}
        if not self.config.dynamic:
            return
        dataset = trainer.train_dataset
        if dataset is None or not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise RecipeError(
                "sampling.dynamic draws refill prompts by index from the training set, which needs a "
                f"map-style dataset (got {type(dataset).__name__}); load it without streaming"
            )
        self.dataset = dataset
        self.stream = RefillStream(len(dataset), trainer.args.seed)

    # --- one round's rewards and token counts, as TRL computes them -----------------------------
    def on_generation(self, trainer: Any, generation: Generation) -> None:
        if generation.training:
            self._tokens = [len(ids) for ids in generation.completion_ids]

    def around_rewards(self, trainer: Any, proceed: Callable[[], torch.Tensor]) -> torch.Tensor:
        rewards = proceed()
        self._rewards = rewards  # all ranks' rows: TRL gathers them (grpo_trainer.py:1681)
        return rewards

    def _round(self, trainer: Any, proceed: Callable[[list[Any]], dict[str, Any]], rows: list[Any]) -> Round:
        self._rewards = self._tokens = None
        batch = proceed(rows)
        informative = informative_groups(self._rewards, trainer.reward_weights, trainer.num_generations)
        tokens = torch.tensor(self._tokens, device=trainer.accelerator.device)
        return Round(batch, informative, trainer.accelerator.gather(tokens).cpu())

    # --- the rollout ------------------------------------------------------------------------------
    def around_rollout(
        self, trainer: Any, prompts: list[Any], proceed: Callable[[list[Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        if self.stream is None or not trainer.model.training:
            return proceed(prompts)
        accelerator, group = trainer.accelerator, trainer.num_generations
        world, rank = accelerator.num_processes, accelerator.process_index
        target = len(prompts) * world // group
        step = world // math.gcd(group, world)  # groups whose rows split evenly over the ranks
        rounds = [self._round(trainer, proceed, prompts)]
        try:
            while len(rounds) < self.config.max_rounds:
                kept = int(sum(int(r.informative.sum()) for r in rounds))
                drawn = sum(len(r.informative) for r in rounds)
                if kept >= target:
                    break
                indices = self.stream.draw(refill_size(target - kept, kept, drawn, target, step))
                rows = [self.dataset[i] for i in indices for _ in range(group)]
                share = len(rows) // world
                self.refilling = True
                rounds.append(self._round(trainer, proceed, rows[rank * share : (rank + 1) * share]))
        finally:
            self.refilling = False
        return self._assemble(trainer, rounds, target)

    def _assemble(self, trainer: Any, rounds: list[Round], target: int) -> dict[str, Any]:
        """The rollout batch of `target` groups from the rounds' informative ones, in draw order
        (repeated at the cap when short), this rank's share; metrics recorded."""
        group = trainer.num_generations
        informative = torch.cat([r.informative for r in rounds])
        tokens = torch.cat([r.tokens for r in rounds])
        kept = informative.nonzero().flatten()[:target]
        padded = target - len(kept) if len(kept) else 0
        self._record(trainer, rounds, informative, kept, padded, tokens)
        first = rounds[0].batch
        if len(kept) == 0 or (len(rounds) == 1 and len(kept) == target):
            return first  # nothing to train on, or nothing dropped: TRL's batch as it is
        chosen = torch.cat([kept, kept[torch.arange(padded) % len(kept)]])
        rows = (chosen.unsqueeze(1) * group + torch.arange(group)).flatten()
        whole, where = self._kept_rows(trainer, rounds, rows)
        selected = rollout_rows.take(whole, where[rows])
        accelerator = trainer.accelerator
        share = len(rows) // accelerator.num_processes
        mine = torch.arange(accelerator.process_index * share, (accelerator.process_index + 1) * share)
        batch = rollout_rows.take(selected, mine)
        if trainer.pad_to_multiple_of is None:
            batch = rollout_rows.trim(batch, self.layouts)
        for key in rollout_rows.BATCH_TOTALS:
            if key in first:
                batch[key] = rollout_rows.loss_tokens(selected).to(first[key].device, first[key].dtype)
        return batch

    def _kept_rows(
        self, trainer: Any, rounds: list[Round], rows: torch.Tensor
    ) -> tuple[dict[str, Any], torch.Tensor]:
        """The rows the batch keeps (`rows`: indices over every round's rows of every rank, in
        TRL's gather order), gathered from the ranks that hold them, padded to one width; and
        where each of those indices now sits in the gathered dict (-1: a row not kept).

        Only kept rows move: each rank sends, per round, its kept rows padded to the largest such
        count of any rank (the decision, `informative`, is already the same on every rank), not
        its whole round (at 24 ranks a round of 30B-A3B rows with replay is ~2.6 GB)."""
        accelerator = trainer.accelerator
        world, rank = accelerator.num_processes, accelerator.process_index
        local = torch.tensor([rollout_rows.widths(r.batch) for r in rounds], device=accelerator.device)
        prompt_width, completion_width = (int(w) for w in accelerator.gather(local).amax(dim=0))
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        wanted = torch.zeros(
            sum(len(r.informative) for r in rounds) * trainer.num_generations, dtype=torch.bool
        )
        wanted[rows] = True
        where = torch.full_like(rows.new_empty(len(wanted)), -1)
        gathered, start, placed = [], 0, 0
        for r in rounds:
            size = len(r.informative) * trainer.num_generations // world  # rows per rank this round
            picks = [
                wanted[start + k * size : start + (k + 1) * size].nonzero().flatten() for k in range(world)
            ]
            width = max(len(p) for p in picks)
            if width:
                own = picks[rank]
                send = torch.cat([own, own.new_zeros(width - len(own))])  # row 0 stands in as padding
                padded = rollout_rows.pad_to(
                    r.batch, prompt_width, completion_width, tokenizer.pad_token_id, self.layouts
                )
                sent = rollout_rows.take(padded, send)
                gathered.append({key: rollout_rows.gather(accelerator, value) for key, value in sent.items()})
                for k, p in enumerate(picks):
                    where[start + k * size + p] = placed + k * width + torch.arange(len(p))
                placed += world * width
            start += world * size
        return rollout_rows.concat(gathered), where

    # --- metrics, alarm, checkpoint -----------------------------------------------------------------
    def _record(
        self,
        trainer: Any,
        rounds: list[Round],
        informative: torch.Tensor,
        kept: torch.Tensor,
        padded: int,
        tokens: torch.Tensor,
    ) -> None:
        group, drawn = trainer.num_generations, len(informative)
        trained = torch.zeros(drawn, dtype=torch.bool)
        trained[kept if len(kept) else torch.arange(len(rounds[0].informative))] = True
        dropped = tokens.view(drawn, group)[~trained].sum()
        metrics = {
            names.DYNAMIC_GROUPS_KEPT: float(len(kept)),
            names.DYNAMIC_KEEP_RATE: float(informative.float().mean()),
            names.DYNAMIC_ROUNDS: float(len(rounds)),
            names.DYNAMIC_DROPPED_TOKENS: float(dropped),
            names.DYNAMIC_PADDED_GROUPS: float(padded),
        }
        if len(kept):
            metrics[names.DYNAMIC_PROMPTS_PER_KEPT_GROUP] = drawn / len(kept)
        for key, value in metrics.items():
            trainer.record_metric(key, value)
        target = len(rounds[0].informative)
        self.capped_streak = self.capped_streak + 1 if len(kept) < target else 0
        if self.capped_streak == self.config.warn_capped_batches and trainer.accelerator.is_main_process:
            logger.warning(
                "dynamic sampling: %d rollout batches in a row reached sampling.max_rounds (%d) "
                "short of %d informative groups (last: %d kept of %d drawn): most groups' rewards "
                "tie, the data is too easy or too hard for the model; filter it by pass rate "
                "(`gspo-trl filter`) or raise max_rounds",
                self.capped_streak,
                self.config.max_rounds,
                target,
                len(kept),
                drawn,
            )

    def banner_lines(self, trainer: Any) -> list[LinePart]:
        if not self.config.dynamic:
            return []
        text = (
            f"  sampling dynamic: groups whose rewards tie are dropped and refilled, up to "
            f"{self.config.max_rounds} generation rounds per rollout batch"
        )
        return [LinePart(BANNER_GSPO + 13, text)]

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        """`kept 40% in 2.0 rounds`: the share of groups kept, and the generation rounds."""
        kept = logged_number(logs, names.DYNAMIC_KEEP_RATE)
        if kept is None:
            return []
        rounds = logged_number(logs, names.DYNAMIC_ROUNDS)
        return [LinePart(90, f"kept {kept:.0%}" + (f" in {rounds:.1f} rounds" if rounds is not None else ""))]

    def state(self) -> dict[str, Any] | None:
        if self.stream is None:
            return None
        return {"groups_drawn": self.stream.drawn, "capped_streak": self.capped_streak}

    def load_state(self, attributes: Mapping[str, Any]) -> None:
        if self.stream is not None:
            self.stream.drawn = int(attributes["groups_drawn"])
            self.capped_streak = int(attributes["capped_streak"])
