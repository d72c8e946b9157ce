"""`gspo-trl check-logprobs`: does the generation engine score tokens the way the trainer does?

An engine/trainer difference shifts every log s_i by delta_i = mean_t [log pi_trainer(y_it) -
log pi_engine(y_it)]; GSPO's clip range is so narrow that a few 1e-4 nats per token clip one
advantage sign wholesale on the on-policy minibatch. This command builds the recipe's trainer
with colocated vLLM (optionally trains `--train-steps` and pushes the weights), samples with
vLLM keeping its log-probs, rescores the same tokens with the trainer's model, and reports the
token log-ratio (mean = bias, std = noise), delta_i by length bucket, and the share of responses
delta alone puts outside [1 - eps_low, 1 + eps_high].

Its verdict is the run's guard's (`judge_mismatch`, the recipe's `engine.max_outside_clip` and
`engine.max_bias_fraction` as defaults): SAFE means the guard would not flag these samples. Exit
status: 0 safe, 1 unsafe, 2 usage error. In Python: `check_logprobs(CheckLogprobsSettings(...))`.
Docs and measurements: docs/vllm.md ("Is the engine's log-prob the trainer's?"),
docs/engine-logprobs.md.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gspo_trl.config.optional_packages import VLLM
from gspo_trl.config.sections import MAX_BIAS_FRACTION, MAX_OUTSIDE_CLIP
from gspo_trl.config.sections.engine_correction import CALIBRATION_KEY
from gspo_trl.config.sections.engine_sampler import describe_sampler
from gspo_trl.core.errors import UserError
from gspo_trl.core.progress import progress_bar
from gspo_trl.model.loading.hub import hub_model_errors
from gspo_trl.training.engine.mismatch import judge_mismatch
from gspo_trl.training.engine.response_weights import divergence_from_sequences, divergence_percentiles
from gspo_trl.training.engine.sampling_filter import SamplerFilter, log_kept_mass
from gspo_trl.training.ratio_stats import bucket_labels

VLLM_MISSING = f"check-logprobs samples with vLLM, which is not installed. {VLLM.install}"


@dataclass(frozen=True)
class CheckLogprobsSettings:
    """What to measure; each field is the `gspo-trl check-logprobs` option of the same name.

    Either `recipe` (its own trainer, `overrides` applied) or `model` (a diagnostic trainer
    with `length_reward`; `prompts`, `learning_rate`, `max_completion_length`,
    `max_model_length` and `output_dir` apply to it only). The verdict limits are the run's
    guard's (`engine.max_outside_clip`, `engine.max_bias_fraction`).
    """

    recipe: str | Path | None = None
    overrides: Sequence[str] | Mapping[str, Any] = ()
    model: str | Path | None = None
    prompts: Path | None = None
    num_prompts: int = 8
    num_generations: int | None = None
    """Completions per prompt; None: the trainer's num_generations."""
    train_steps: int = 0
    learning_rate: float = 1e-3
    max_completion_length: int = 32
    max_model_length: int = 256
    output_dir: Path = Path("runs/check-logprobs")
    max_outside_clip: float = MAX_OUTSIDE_CLIP
    max_bias_fraction: float = MAX_BIAS_FRACTION

    def __post_init__(self) -> None:
        if (self.recipe is None) == (self.model is None):
            raise UserError("give either a RECIPE or --model DIR")
        if self.model is not None and self.overrides:
            raise UserError(f"unrecognized arguments with --model: {' '.join(map(str, self.overrides))}")


@dataclass(frozen=True)
class LogprobCheck:
    """The agreement report (`agreement_report`'s keys, plus train_steps and, after an update,
    before_update / policy_change / global_step) and its verdict."""

    report: dict[str, Any]

    @property
    def safe(self) -> bool:
        return bool(self.report["safe"])


@dataclass
class LogprobPairs:
    """Per-response token log-probs (nats) of the same sampled tokens, engine vs trainer."""

    engine: list[torch.Tensor]
    trainer: list[torch.Tensor]
    completion_ids: list[list[int]]
    prompt_ids: list[list[int]]
    log_kept_mass: list[torch.Tensor] | None = None
    """Under a reshaping sampler, log S_t per token (the trainer's replay of the filter, nats <= 0)."""
    replayed: bool = False
    """`trainer` is renormalised over the kept set (log pi - log S_t), engine.sampling_masks: replay."""


def _stats(x: torch.Tensor) -> dict[str, float]:
    x = x.double().flatten()
    if x.numel() == 0:
        return {"n": 0}
    return {
        "n": int(x.numel()),
        "mean": x.mean().item(),
        "std": x.std().item() if x.numel() > 1 else 0.0,
        "abs_max": x.abs().max().item(),
    }


def trainer_logprobs(
    trainer: Any,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    batch_size: int = 8,
    sampler: SamplerFilter | None = None,
    kept_mass: list[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """Log-probs the trainer's model gives each completion token, as TRL computes them.

    Right-padded batches of prompt+completion (positions stay exact), logits divided by the
    trainer's temperature, under the trainer's autocast, in eval mode (no dropout). With an active
    `sampler`, log S_t of its replayed filter (gspo_trl.training.engine.sampling_filter) is appended
    per completion to `kept_mass` (the log-probs themselves stay the plain softmax's).
    """
    model = trainer.model
    device = trainer.accelerator.device
    pad_id = trainer.processing_class.pad_token_id or 0
    was_training = model.training
    model.eval()
    out: list[torch.Tensor] = []
    bar = progress_bar(len(prompt_ids), "trainer log-probs", unit="completion")
    try:
        for start in range(0, len(prompt_ids), batch_size):
            prompts = prompt_ids[start : start + batch_size]
            completions = completion_ids[start : start + batch_size]
            rows = [p + c for p, c in zip(prompts, completions, strict=True)]
            ids = torch.full((len(rows), max(map(len, rows))), pad_id, dtype=torch.long, device=device)
            mask = torch.zeros_like(ids)
            for i, row in enumerate(rows):
                ids[i, : len(row)] = torch.tensor(row, device=device)
                mask[i, : len(row)] = 1
            with torch.no_grad(), trainer.accelerator.autocast():
                logits = model(input_ids=ids, attention_mask=mask).logits.float() / trainer.temperature
            logps = torch.log_softmax(logits, dim=-1)
            for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
                positions = torch.arange(len(p) - 1, len(p) + len(c) - 1, device=device)
                tokens = torch.tensor(c, device=device, dtype=torch.long)
                out.append(logps[i, positions, tokens].double().cpu())
                if sampler is not None and sampler.active and kept_mass is not None:
                    mass = log_kept_mass(logits[i, positions], tokens, sampler).log_mass
                    kept_mass.append(mass.double().cpu())
            bar.update(len(rows))
    finally:
        bar.close()
        model.train(was_training)
    return out


def sample_and_recompute(trainer: Any, prompts: Sequence[Any], num_generations: int) -> LogprobPairs:
    """Sample `num_generations` completions per prompt with the trainer's vLLM engine and score
    them with the trainer's model. Prompts are dataset `prompt` values (text or messages)."""
    from trl.data_utils import maybe_apply_chat_template

    tokenizer = trainer.processing_class
    prompt_ids = []
    for prompt in prompts:
        text = maybe_apply_chat_template({"prompt": prompt}, tokenizer)["prompt"]
        prompt_ids += [tokenizer(text, add_special_tokens=False)["input_ids"]] * num_generations
    prompt_ids, completion_ids, logprobs, _ = trainer.vllm_generation.generate(
        prompts=prompt_ids, images=None, num_generations=num_generations
    )
    prompt_ids = [list(p) for p in prompt_ids]
    completion_ids = [list(c) for c in completion_ids]
    engine = [  # vLLM reports an unavailable log-prob as None: NaN here, skipped in the report
        torch.tensor([math.nan if tok[0] is None else tok[0] for tok in seq], dtype=torch.float64)
        for seq in logprobs
    ]
    sampler = SamplerFilter.from_settings(vars(trainer.args))
    kept: list[torch.Tensor] = []
    plain = trainer_logprobs(trainer, prompt_ids, completion_ids, sampler=sampler, kept_mass=kept)
    replayed = sampler.active and _replays(trainer)
    scored = [t - m for t, m in zip(plain, kept, strict=True)] if replayed else plain
    return LogprobPairs(engine, scored, completion_ids, prompt_ids, kept or None, replayed)


def _replays(trainer: Any) -> bool:
    """The run's `engine.sampling_masks` is `replay` (a GSPOConfig's engine section)."""
    return getattr(getattr(trainer.args, "engine", None), "sampling_masks", "off") == "replay"


def agreement_report(
    pairs: LogprobPairs,
    eps_low: float,
    eps_high: float,
    length_buckets: tuple[int, ...] = (16, 64, 256, 1024),
    max_outside_clip: float = MAX_OUTSIDE_CLIP,
    max_bias_fraction: float = MAX_BIAS_FRACTION,
) -> dict[str, Any]:
    """Token and sequence log-ratio statistics (log pi_trainer - log pi_engine, nats) and verdict.

    token: every completion token pooled. sequence: delta_i, one per response (what log s_i
    would be on the on-policy minibatch if pi_old came from the engine). outside_clip:
    responses with delta_i outside [log(1 - eps_low), log(1 + eps_high)]. Tokens without a
    log-prob (NaN) and responses without tokens are left out. The verdict is the run's guard's
    (gspo_trl.training.engine.mismatch.judge_mismatch) on delta_i, with the same limits.
    """
    valid = [(e, t, ~(e.isnan() | t.isnan())) for e, t in zip(pairs.engine, pairs.trainer, strict=True)]
    kept = [(e[ok], t[ok]) for e, t, ok in valid if ok.any()]
    if not kept:
        raise ValueError("no completion tokens to compare: every sampled completion was empty")
    token = torch.cat([t - e for e, t in kept])
    delta = torch.stack([(t - e).mean() for e, t in kept])
    lengths = torch.tensor([e.numel() for e, _ in kept])
    by_length = {}
    edges = [0, *length_buckets, math.inf]
    for label, a, b in zip(bucket_labels(length_buckets), edges[:-1], edges[1:], strict=True):
        sel = (lengths >= a) & (lengths < b)
        if sel.any():
            outside = judge_mismatch(delta[sel], eps_low, eps_high).outside_clip
            by_length[label] = {**_stats(delta[sel]), "outside_clip": outside}
    verdict = judge_mismatch(delta, eps_low, eps_high, max_bias_fraction, max_outside_clip)
    divergence = divergence_from_sequences([t for _, t in kept], [e for e, _ in kept])
    kept_mass = None
    if pairs.log_kept_mass is not None:
        kept_mass = _stats(
            torch.cat([m[ok] for (_, _, ok), m in zip(valid, pairs.log_kept_mass, strict=True)])
        )
    return {
        "log_kept_mass": kept_mass,
        "sampling_masks": "replay" if pairs.replayed else "off",
        CALIBRATION_KEY: divergence_percentiles(divergence),  # engine.thresholds_from reads it
        "eps_low": eps_low,
        "eps_high": eps_high,
        "token": _stats(token),
        "sequence": _stats(delta),
        "by_length": by_length,
        "outside_clip": verdict.outside_clip,
        "bias_limit": verdict.bias_limit,
        "max_outside_clip": max_outside_clip,
        "problem": verdict.problem,
        "safe": verdict.problem is None,
    }


def format_report(report: dict[str, Any]) -> str:
    """Human-readable summary of `agreement_report` (plus `policy_change` when present)."""
    tok, seq = report["token"], report["sequence"]
    lines = [
        f"token log-ratio (trainer - engine), {tok['n']} tokens: bias {tok['mean']:+.3e}  "
        f"noise {tok['std']:.3e}  max|.| {tok['abs_max']:.3e}",
        f"sequence delta_i, {seq['n']} responses: bias {seq['mean']:+.3e}  noise {seq['std']:.3e}  "
        f"max|.| {seq['abs_max']:.3e}",
        "by completion length:",
    ]
    for label, s in report["by_length"].items():
        lines.append(
            f"  {label:>14}: n={s['n']:<5} bias {s['mean']:+.3e}  noise {s.get('std', 0.0):.3e}  "
            f"outside clip range {s['outside_clip']:.1%}"
        )
    if "policy_change" in report:
        pc = report["policy_change"]
        lines.append(
            f"policy moved by the update: token |dlogp| mean {pc['token_abs_mean']:.3e}, "
            f"max {pc['token_abs_max']:.3e}"
        )
    lines.append(_sampler_line(report))
    verdict = "SAFE" if report["safe"] else "UNSAFE"
    replay = ", sampling_masks: replay" if report.get("sampling_masks") == "replay" else ""
    lines.append(
        f"{verdict}: engine log-probs as pi_old (sampler measured: {report.get('sampler', 'plain softmax')}) "
        f"under eps_low={report['eps_low']:g}, "
        f"eps_high={report['eps_high']:g}: mismatch alone puts {report['outside_clip']:.1%} of responses "
        f"outside the clip range (limit {report['max_outside_clip']:.1%}); |bias| "
        f"{abs(seq['mean']):.2e} vs limit {report['bias_limit']:.2e}. "
        + (
            f"Recipe key `engine: {{old_logprobs: engine{replay}}}` can be set (its guard rechecks every "
            "rollout batch)."
            if report["safe"]
            else "Keep `engine: {old_logprobs: trainer}` (the default)."
        )
    )
    if not report["safe"]:
        lines.append("Keep recomputing pi_old with the trainer (TRL's default), or fix the engine mismatch.")
    return "\n".join(lines)


def _sampler_line(report: dict[str, Any]) -> str:
    """What the sampler does to the gap above: nothing, -log S_t (the kept mass), or replayed away."""
    sampler = report.get("sampler", "plain softmax")
    if sampler == "plain softmax":
        return "sampler measured: plain softmax (top_p 1, top_k 0, no min_p): the gap is the engine's"
    mass = report.get("log_kept_mass") or {}
    kept = f" (mean log S_t {mass['mean']:+.3e} nats)" if mass.get("n") else ""
    if report.get("sampling_masks") == "replay":
        return (
            f"sampler measured: {sampler}; trainer log-probs renormalised over the kept set{kept} "
            "(engine.sampling_masks: replay): the gap is the engine's"
        )
    return (
        f"sampler measured: {sampler}: vLLM reports log-probs of the filtered distribution, so the gap "
        f"is -log S_t, the mass the filter dropped{kept}, not engine bias; set engine.sampling_masks: "
        "replay to measure the engine alone"
    )


def run_check(
    trainer: Any, prompts: Sequence[Any], num_generations: int, train_steps: int = 0, **report_kwargs: Any
) -> dict[str, Any]:
    """Measure engine/trainer agreement; with `train_steps` > 0, before and after that many
    GSPO steps (trainer.train()), so the weight sync into the engine is what gets tested.

    The engine always gets the trainer's current weights first (TRL's own `sync_weights`), so
    what is measured is the engine's numerics, not staleness. `policy_change` (after training)
    is how far the update moved the trainer's log-probs on the pre-update samples: an
    agreement much tighter than it proves the sync carried the update.
    """
    eps = (trainer.epsilon_low, trainer.epsilon_high)
    before = None
    if train_steps > 0:
        trainer.vllm_generation.sync_weights()
        before = sample_and_recompute(trainer, prompts, num_generations)
        from gspo_trl.training.reporting.step_progress import show_steps_as_bar

        trainer.args.max_steps = train_steps
        show_steps_as_bar(trainer, "GSPO steps")  # stdout is for the report
        trainer.train()
    trainer.vllm_generation.sync_weights()
    report = agreement_report(sample_and_recompute(trainer, prompts, num_generations), *eps, **report_kwargs)
    report["sampler"] = describe_sampler(vars(trainer.args))
    report["train_steps"] = train_steps
    if before is not None:
        report["before_update"] = agreement_report(before, *eps, **report_kwargs)
        moved = torch.cat(
            [
                new - old
                for new, old in zip(
                    trainer_logprobs(trainer, before.prompt_ids, before.completion_ids),
                    before.trainer,
                    strict=True,
                )
            ]
        ).abs()
        report["policy_change"] = {"token_abs_mean": moved.mean().item(), "token_abs_max": moved.max().item()}
        report["global_step"] = int(trainer.state.global_step)
    return report


def length_reward(completions: list, **_: Any) -> list[float]:
    """Diagnostic reward for `--model` mode: longer completions score higher (0-1). It has
    spread on any untrained model, so a `--train-steps` update is never a no-op."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [min(len(t), 40) / 40.0 for t in texts]


def _read_prompts(path: Path | None, n: int) -> list[Any]:
    """`prompt` values from a .jsonl file (text or chat messages) or a text file (one per line);
    without a file, the synthetic digit-reversal questions."""
    if path is None:
        from gspo_trl.data.synthetic import make_rl_rows

        return [row["prompt"] for row in make_rl_rows(n, seed=0)]
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if path.suffix == ".jsonl":
        prompts = []
        for number, line in enumerate(lines, 1):
            row = json.loads(line)
            if "prompt" not in row:
                raise ValueError(f"{path}:{number}: row has no 'prompt' key (keys: {sorted(row)})")
            prompts.append(row["prompt"])
        lines = prompts
    return lines[:n]


def check_logprobs(settings: CheckLogprobsSettings) -> LogprobCheck:
    """Build the trainer `settings` names, sample with its vLLM engine, rescore, and judge."""
    from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

    if importlib.util.find_spec("vllm") is None:
        raise UserError(VLLM_MISSING)
    patch_trl_for_vllm_cpu()
    if settings.model is not None:
        prompts = _read_prompts(settings.prompts, settings.num_prompts)
        trainer = _trainer_from_model(settings, prompts)
    else:
        trainer, prompts = _trainer_from_recipe(settings.recipe, settings.overrides, settings.num_prompts)
    num_generations = settings.num_generations or trainer.num_generations
    report = run_check(
        trainer,
        prompts,
        num_generations,
        settings.train_steps,
        max_outside_clip=settings.max_outside_clip,
        max_bias_fraction=settings.max_bias_fraction,
    )
    return LogprobCheck(report)


def _trainer_from_model(settings: CheckLogprobsSettings, prompts: list[Any]) -> Any:
    """A GSPO trainer (paper settings, vLLM colocate) on `settings.model`, with `length_reward`."""
    from datasets import Dataset

    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.trainer import GSPOTrainer

    generations = settings.num_generations or 4
    config = GSPOConfig(  # GSPO's defaults (clip range, loss, beta 0), 2 updates per rollout batch
        output_dir=str(settings.output_dir),
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(),  # fp32 on CPU: TRL's bf16=True default would autocast there too
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_max_model_length=settings.max_model_length,
        vllm_gpu_memory_utilization=0.3,
        num_generations=generations,
        per_device_train_batch_size=2 * generations,
        steps_per_generation=2,
        max_completion_length=settings.max_completion_length,
        max_steps=max(settings.train_steps, 1),
        learning_rate=settings.learning_rate,
        seed=0,
    )
    dataset = Dataset.from_list([{"prompt": p} for p in prompts])
    with hub_model_errors(str(settings.model), "--model"):
        return GSPOTrainer(
            model=str(settings.model), reward_funcs=length_reward, args=config, train_dataset=dataset
        )


def _trainer_from_recipe(
    path: str | Path, overrides: Sequence[str] | Mapping[str, Any], num_prompts: int
) -> tuple[Any, list[Any]]:
    """The recipe's own trainer, forced to vLLM colocate, and the first prompts of its data."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import build_trainer

    forced = {"use_vllm": True, "vllm_mode": "colocate"}
    if isinstance(overrides, Mapping):
        recipe = load_recipe(path, {**overrides, **forced})
    else:
        recipe = load_recipe(path, overrides=(*overrides, "--use_vllm", "true", "--vllm_mode", "colocate"))
    trainer = build_trainer(recipe)
    dataset = trainer.train_dataset
    return trainer, [dataset[i]["prompt"] for i in range(min(num_prompts, len(dataset)))]
