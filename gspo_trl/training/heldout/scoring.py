"""Held-out score: generate on the eval split and grade with a reward, before/during/after training.

The training reward is what the policy optimises and may be gamed; docs/gspo.md ("What to watch") asks for a
held-out score with a stricter grader next to it. Logged as `heldout/score` (mean reward over
the eval rows' samples, rewards returning None excluded: at temperature > 0 an estimate of
pass@1 from `num_samples` samples per row, greedy at temperature 0) and `heldout/judged`
(fraction judged). Rows are split across ranks and the grades gathered, so the work is done
once, not once per rank; the engine (the run's colocated vLLM, else token-bounded HF
generate) is chosen in gspo_trl.training.heldout.generation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from transformers import Trainer, TrainerCallback

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import HeldoutConfig
from gspo_trl.eval.generation import DEFAULT_BATCH_TOKENS, generate_completions
from gspo_trl.eval.pass_at_k import GradedSamples, grade_samples
from gspo_trl.model.prompts import PromptRendering
from gspo_trl.training.heldout.generation import (
    HeldoutGenerator,
    HeldoutSampling,
    heldout_generator,
    shard_rows,
)
from gspo_trl.training.heldout.layout import HF, heldout_passes

logger = logging.getLogger(__name__)

RowGrades = list[tuple[int, list[float | None], list[float | None]]]
"""(row index, grades of its score samples, grades of its pass@k samples) per row."""


def mean_grade(grades: Sequence[Sequence[float | None]]) -> dict[str, float]:
    """{'score': mean over every judged sample of every row, 'judged': fraction judged (0-1)}."""
    flat = [g for row in grades for g in row]
    judged = [g for g in flat if g is not None and not math.isnan(g)]
    return {
        "score": sum(judged) / len(judged) if judged else float("nan"),
        "judged": len(judged) / len(flat) if flat else 0.0,
    }


def grade_shard(
    generator: HeldoutGenerator,
    rows: Any,
    grader: Callable[..., list[float | None]],
    score: tuple[int, float],
    sampled: tuple[int, float] | None = None,
    threshold: float = 1.0,
) -> RowGrades:
    """Generate and grade this rank's share of `rows`: `score` and `sampled` are (samples per
    row, temperature) for the score and the pass@k pass."""
    mine = shard_rows(len(rows), generator.num_shards, generator.shard_index)
    if not mine:
        return []
    local = rows.select(mine)

    def grades(n: int, temperature: float) -> list[list[float | None]]:
        samples = generator.generate(local["prompt"], n, temperature)
        return grade_samples(grader, local, samples, threshold).rewards

    score_grades = grades(*score)
    sampled_grades = grades(*sampled) if sampled else [[] for _ in mine]
    return list(zip(mine, score_grades, sampled_grades, strict=True))


def gather_rows(local: RowGrades, num_shards: int) -> RowGrades:
    """Every rank's rows, in row order (accelerate's gather_object; ranks of one tensor-parallel
    group return the same rows, kept once)."""
    if num_shards == 1:
        return sorted(local, key=lambda row: row[0])
    from accelerate.utils import gather_object

    return sorted({row[0]: row for row in gather_object(local)}.values(), key=lambda row: row[0])


def heldout_score(
    model: Any,
    tokenizer: Any,
    dataset: Any,
    grader: Callable[..., list[float | None]],
    max_new_tokens: int,
    temperature: float = 0.0,
    max_rows: int | None = None,
    num_samples: int = 1,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    rendering: PromptRendering | None = None,
) -> dict[str, float]:
    """{'score', 'judged'} (see mean_grade) of `model` on `dataset`, in this process alone;
    `rendering`: the run's chat-template settings (PromptRendering.of_trainer)."""
    rows = dataset if max_rows is None else dataset.select(range(min(max_rows, len(dataset))))

    def generate(prompts: Sequence[Any], n: int, temperature: float) -> list[list[str]]:
        return generate_completions(
            model,
            tokenizer,
            prompts,
            max_new_tokens,
            temperature,
            n,
            max_batch_tokens=max_batch_tokens,
            rendering=rendering,
        )

    score, _ = heldout_passes(temperature, num_samples, (), 1.0)
    graded = grade_shard(HeldoutGenerator(generate, HF), rows, grader, score)
    return mean_grade([row[1] for row in graded])


@dataclass(frozen=True)
class HeldoutSettings:
    """What the held-out callback scores, and how.

    At `temperature` 0 the score is greedy; above 0 it samples `num_samples` (default 1)
    completions per row with the recipe's top_p/top_k and averages them (pass@1 for binary
    graders). With `ks` (e.g. (1, 8)) it also samples `num_samples` (default: the largest k)
    completions per row at `sample_temperature` and logs the unbiased `heldout/pass@k`
    (gspo_trl.eval.pass_at_k, the same code as `gspo-trl eval`), a sample passing when its
    grade >= `pass_threshold`. `every_steps` 0: only before and after training.
    """

    max_rows: int
    temperature: float
    max_new_tokens: int
    every_steps: int = 0
    ks: tuple[int, ...] = ()
    num_samples: int | None = None
    sample_temperature: float = 1.0
    pass_threshold: float = 1.0
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS

    @classmethod
    def of_recipe(cls, section: HeldoutConfig, args: Any) -> HeldoutSettings:
        """A recipe's `heldout:` section on a run with these GRPOConfig `args`: the temperature
        defaults to the run's sampling temperature, the length to its max_completion_length."""
        return cls(
            max_rows=section.max_rows,
            temperature=section.temperature if section.temperature is not None else float(args.temperature),
            max_new_tokens=args.max_completion_length,
            every_steps=section.every_steps,
            ks=tuple(section.k),
            num_samples=section.num_samples,
            sample_temperature=section.sample_temperature,
            pass_threshold=section.pass_threshold,
            max_batch_tokens=section.max_batch_tokens,
        )


class HeldoutCallback(TrainerCallback):
    """Logs `heldout/score` at the start, every `settings.every_steps` optimizer steps, and at the
    end (HeldoutSettings says how it scores).

    It logs through `transformers.Trainer.log` directly, so the entries reach `report_to`
    integrations and `trainer_state.json` without flushing GRPOTrainer's running averages.
    """

    def __init__(
        self,
        trainer: Trainer,
        dataset: Any,
        grader: Callable[..., Any],
        settings: HeldoutSettings,
        timed: Callable[[], AbstractContextManager] = nullcontext,
    ) -> None:
        self.trainer, self.dataset, self.grader, self.settings = trainer, dataset, grader, settings
        self.timed = timed
        """The held-out phase's timer (the perf probe's, when the run has one)."""
        self.history: list[tuple[int, float]] = []
        self._final_done = False

    def _sampling(self) -> HeldoutSampling:
        args = self.trainer.args
        return HeldoutSampling(
            max_new_tokens=self.settings.max_new_tokens,
            top_p=getattr(args, "top_p", 1.0),
            top_k=getattr(args, "top_k", 0) or 0,
            max_batch_tokens=self.settings.max_batch_tokens,
        )

    def evaluate(self) -> dict[str, float]:
        """Generate on this rank's rows, gather every rank's grades; the logged entries."""
        settings = self.settings
        rows = self.dataset.select(range(min(settings.max_rows, len(self.dataset))))
        score, sampled = heldout_passes(
            settings.temperature, settings.num_samples, settings.ks, settings.sample_temperature
        )
        with heldout_generator(self.trainer, self._sampling()) as generator:
            local = grade_shard(generator, rows, self.grader, score, sampled, settings.pass_threshold)
        graded = gather_rows(local, generator.num_shards)
        logs = {names.heldout(key): value for key, value in mean_grade([row[1] for row in graded]).items()}
        if sampled:
            passes = GradedSamples([row[2] for row in graded], settings.pass_threshold)
            logs.update(
                {
                    names.heldout_pass_at(k): passes.pass_at(k)
                    for k in sorted(set(settings.ks))
                    if k <= sampled[0]
                }
            )
        if self.trainer.accelerator.is_main_process:
            logger.info(
                "held-out score: %.4f (judged %.0f%%) on %d rows with %s over %d shard(s)",
                logs[names.HELDOUT_SCORE],
                100 * logs[names.HELDOUT_JUDGED],
                len(graded),
                generator.engine,
                generator.num_shards,
            )
        return logs

    def _score_and_log(self, step: int) -> None:
        with self.timed():
            logs = self.evaluate()
        self.history.append((step, logs[names.HELDOUT_SCORE]))
        # Trainer.log ends in on_log, which clears control.should_log: called from on_step_end,
        # it would cancel this step's own training log. Keep the flag as it was.
        should_log = self.trainer.control.should_log
        Trainer.log(self.trainer, logs)
        self.trainer.control.should_log = should_log

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._final_done = False
        self._score_and_log(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        every = self.settings.every_steps
        if every and state.global_step % every == 0 and state.global_step < state.max_steps:
            self._score_and_log(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._final_done:  # once, whichever of this and _FinalScore comes first
            self._final_done = True
            self._score_and_log(state.global_step)

    def final_score_first(self) -> TrainerCallback:
        """A callback to put ahead of the trackers': it logs the final score in on_train_end
        before theirs close the run (trackio would open a second run, at step 0, for a score
        logged later). This callback stays after them, so they are set up when it first logs."""
        return _FinalScore(self)


class _FinalScore(TrainerCallback):
    """HeldoutCallback's final evaluation, run from a place earlier in the callback list."""

    def __init__(self, heldout: HeldoutCallback) -> None:
        self.heldout = heldout

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.heldout.on_train_end(args, state, control, **kwargs)
