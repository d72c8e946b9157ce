"""Held-out score: generate on the eval split and grade with a reward, before/during/after training.

The training reward is what the policy optimises and may be gamed; docs/gspo.md ("What to watch") asks for a
held-out score with a stricter grader next to it. Logged as `heldout/score` (mean reward
over the eval rows, rewards returning None excluded) and `heldout/judged` (fraction judged).
Generation uses plain `model.generate` with left padding: slow next to vLLM, but exact and
available everywhere; the eval split is meant to be small.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from transformers import Trainer, TrainerCallback

from gspo_trl.eval.generation import generate_completions

logger = logging.getLogger(__name__)


def heldout_score(
    model: Any,
    tokenizer: Any,
    dataset: Any,
    grader: Callable[..., list[float | None]],
    max_new_tokens: int,
    temperature: float = 0.0,
    max_rows: int | None = None,
) -> dict[str, float]:
    """{'score': mean grade, 'judged': fraction of rows the grader could judge} on `dataset`."""
    rows = dataset if max_rows is None else dataset.select(range(min(max_rows, len(dataset))))
    completions = [
        samples[0]
        for samples in generate_completions(model, tokenizer, rows["prompt"], max_new_tokens, temperature)
    ]
    columns = {name: rows[name] for name in rows.column_names if name != "prompt"}
    grades = grader(completions, prompts=rows["prompt"], **columns)
    judged = [g for g in grades if g is not None and not math.isnan(g)]
    return {
        "score": sum(judged) / len(judged) if judged else float("nan"),
        "judged": len(judged) / len(grades) if grades else 0.0,
    }


class HeldoutCallback(TrainerCallback):
    """Logs `heldout/score` at the start, every `every_steps` optimizer steps, and at the end.

    With `ks` (e.g. (1, 8)) it also samples `num_samples` completions per row at
    `sample_temperature` and logs the unbiased `heldout/pass@k` (gspo_trl.eval.evaluate, the same
    code as `gspo-trl eval`), a sample passing when its grade >= `pass_threshold`.

    It logs through `transformers.Trainer.log` directly, so the entries reach `report_to`
    integrations and `trainer_state.json` without flushing GRPOTrainer's running averages.
    """

    def __init__(
        self,
        trainer: Trainer,
        dataset: Any,
        grader: Callable[..., Any],
        every_steps: int,
        max_rows: int,
        temperature: float,
        max_new_tokens: int,
        ks: Sequence[int] = (),
        num_samples: int | None = None,
        sample_temperature: float = 1.0,
        pass_threshold: float = 1.0,
    ) -> None:
        self.trainer, self.dataset, self.grader = trainer, dataset, grader
        self.every_steps, self.max_rows, self.temperature = every_steps, max_rows, temperature
        self.max_new_tokens = max_new_tokens
        self.ks, self.num_samples, self.pass_threshold = tuple(ks), num_samples, pass_threshold
        self.sample_temperature = sample_temperature
        self.history: list[tuple[int, float]] = []

    def _evaluate(self, step: int) -> None:
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        result = heldout_score(
            model,
            self.trainer.processing_class,
            self.dataset,
            self.grader,
            self.max_new_tokens,
            self.temperature,
            self.max_rows,
        )
        self.history.append((step, result["score"]))
        logger.info(
            "held-out score at step %d: %.4f (judged %.0f%%)", step, result["score"], 100 * result["judged"]
        )
        logs = {"heldout/score": result["score"], "heldout/judged": result["judged"]}
        if self.ks:
            logs.update(self._pass_at_k(model))
        Trainer.log(self.trainer, logs)

    def _pass_at_k(self, model: Any) -> dict[str, float]:
        from gspo_trl.eval.evaluate import evaluate_policy

        rows = self.dataset.select(range(min(self.max_rows, len(self.dataset))))
        tokenizer = self.trainer.processing_class

        def generate(prompts: Sequence[Any], n: int, temperature: float) -> list[list[str]]:
            return generate_completions(model, tokenizer, prompts, self.max_new_tokens, temperature, n)

        sampled = evaluate_policy(
            generate,
            rows,
            self.grader,
            self.ks,
            self.num_samples or max(self.ks),
            self.sample_temperature,
            self.pass_threshold,
            greedy=False,
        )["sampled"]
        return {f"heldout/{key}": value for key, value in sampled.items() if key.startswith("pass@")}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._evaluate(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if (
            self.every_steps
            and state.global_step % self.every_steps == 0
            and state.global_step < state.max_steps
        ):
            self._evaluate(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._evaluate(state.global_step)
