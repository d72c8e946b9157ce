"""`gspo-trl filter RECIPE --min 0.1 --max 0.9`: keep the prompts the model sometimes solves.

    gspo-trl filter recipes/qwen3-1.7b/math.yaml --min 0.1 --max 0.9 --output data/math-filtered.jsonl
    gspo-trl filter recipes/tiny/reversal.yaml --output f.parquet --data.num_rows 64  # recipe overrides

Why: a prompt whose G samples all pass (or all fail) has zero advantage in every group, so
GSPO learns nothing from it; dropping them before training spends the rollouts on prompts
with signal. For each prompt of the recipe's training split this samples G completions
(`--num-samples`, default the recipe's num_generations) with the recipe's model, at its
temperature and max_completion_length (vLLM when installed, else HF generate), and grades
them. Pass rate = passing samples / G, where a sample passes when its score >= `--pass-threshold`
(default 1.0). The score is the recipe's weighted reward sum (rewards returning None are
skipped, as TRL does) or, with `--reward SPEC`, that one reward alone, unweighted: with
partial-credit or shaping rewards in the mix, `--reward` naming the verifier is usually
what "solved" means. Rows with min <= pass rate <= max are written back as they were read
(source columns, not the renamed ones) plus a `pass_rate` column: jsonl or parquet by the
output's suffix, and to a hub dataset repo with `--push-to-hub`.

Large sets: rows are scored in chunks of `--chunk-size`, each saved (with its completions and
rewards) under OUTPUT.work/ as it finishes; `--resume` skips finished chunks. Chunk i samples
with seed + i, so a resumed run gives exactly the output of an uninterrupted one. Scores do not
depend on the range: rerun with `--resume` and another range to refilter without sampling.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import inspect
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gspo_trl import rewards
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.data.loading import load_split, prepare
from gspo_trl.data.presets import apply_preset
from gspo_trl.errors import DataError, FilterError
from gspo_trl.eval.histogram import in_range, pass_rate_histogram, plot_histogram
from gspo_trl.eval.pass_at_k import grade_samples
from gspo_trl.progress import progress_bar

logger = logging.getLogger(__name__)


def combined_reward(funcs: Sequence[Callable[..., Any]], weights: Sequence[float]) -> Callable[..., list]:
    """The weighted sum of several rewards per completion, None where every reward is None (TRL's rule)."""

    def score(completions: list[Any], **columns: Any) -> list[float | None]:
        totals: list[float | None] = [None] * len(completions)
        for func, weight in zip(funcs, weights, strict=True):
            values = func(completions, **columns)
            values = asyncio.run(values) if inspect.isawaitable(values) else values
            for i, value in enumerate(values):
                if value is not None and value == value:  # NaN is skipped like None
                    totals[i] = (totals[i] or 0.0) + weight * value
        return totals

    score.__name__ = "+".join(getattr(f, "__name__", "reward") for f in funcs)
    return score


def _check_args(args: argparse.Namespace) -> None:
    if not 0 <= args.low <= args.high <= 1:
        raise FilterError(f"--min {args.low} / --max {args.high}: need 0 <= min <= max <= 1")
    if Path(args.output).suffix not in (".jsonl", ".parquet"):
        raise FilterError(f"--output {args.output!r}: must end in .jsonl or .parquet")
    if args.chunk_size < 1 or (args.num_samples is not None and args.num_samples < 1):
        raise FilterError("--chunk-size and --num-samples must be >= 1")
    if args.push_to_hub:
        from huggingface_hub import constants

        offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
        if constants.HF_HUB_OFFLINE or offline:
            raise FilterError(
                f"--push-to-hub {args.push_to_hub!r}: HF_HUB_OFFLINE is set, so nothing can be pushed; "
                "unset it (and log in with `hf auth login`) or drop --push-to-hub"
            )


def _work_dir(output: str) -> Path:
    return Path(output).with_name(Path(output).name + ".work")


def _start_work(work: Path, settings: dict[str, Any], resume: bool) -> None:
    """Create or check OUTPUT.work/: resuming refuses chunks scored under other settings."""
    settings_file = work / "settings.json"
    if resume and settings_file.is_file():
        before = json.loads(settings_file.read_text())
        changed = sorted(key for key in settings | before if before.get(key) != settings.get(key))
        if changed:
            raise FilterError(
                f"--resume: {work} was scored with different {', '.join(changed)}; "
                "rerun without --resume to start over"
            )
        return
    for stale in work.glob("chunk-*.jsonl"):
        stale.unlink()
    work.mkdir(parents=True, exist_ok=True)
    settings_file.write_text(json.dumps(settings, indent=2))


def score_chunks(
    sampler: Any, prepared: Any, grader: Callable[..., Any], work: Path, args: argparse.Namespace, shape: dict
) -> list[float]:
    """Pass rate of every row, chunk by chunk, saving each finished chunk; see the module docstring."""
    rates: list[float] = []
    progress = progress_bar(len(prepared), "filter", unit="prompt")
    for chunk, start in enumerate(range(0, len(prepared), args.chunk_size)):
        path = work / f"chunk-{chunk:05d}.jsonl"
        if not path.is_file():
            rows = prepared.select(range(start, min(start + args.chunk_size, len(prepared))))
            samples = sampler.generate(
                rows["prompt"],
                shape["num_samples"],
                shape["temperature"],
                shape["max_new_tokens"],
                args.seed + chunk,
            )
            graded = grade_samples(grader, rows, samples, args.pass_threshold)
            records = [
                {
                    "index": start + i,
                    "pass_rate": rate,
                    "rewards": graded.rewards[i],
                    "completions": samples[i],
                }
                for i, rate in enumerate(graded.pass_rates)
            ]
            temporary = path.with_suffix(".tmp")
            temporary.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
            temporary.replace(path)  # a chunk is either complete or absent
        chunk_rates = [
            json.loads(line)["pass_rate"] for line in path.read_text(encoding="utf-8").splitlines()
        ]
        rates += chunk_rates
        progress.update(len(chunk_rates))
    progress.close()
    return rates


def write_rows(raw: Any, rates: Sequence[float], args: argparse.Namespace) -> Any:
    """The kept source rows with their `pass_rate`, written to --output (and pushed when asked)."""
    if "pass_rate" in raw.column_names:
        raw = raw.remove_columns("pass_rate")
    kept_indices = [i for i, rate in enumerate(rates) if in_range(rate, args.low, args.high)]
    kept = raw.add_column("pass_rate", list(rates)).select(kept_indices)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix == ".parquet":
        kept.to_parquet(str(output))
    else:
        kept.to_json(str(output), lines=True, force_ascii=False)
    if args.push_to_hub:
        try:
            kept.push_to_hub(args.push_to_hub)
        except Exception as error:  # the hub raises many types; the user needs the repo and the reason
            raise FilterError(f"--push-to-hub {args.push_to_hub!r}: push failed: {error}") from error
    return kept


def training_rows(dataset: Any, config: Any) -> Any:
    """The rows `gspo_trl.data.loading.load_data` trains on when the recipe sets `eval_size`.

    The same `train_test_split(test_size, seed)` on a dataset of the same length picks the same
    rows, so this works on the source rows as on the prepared ones.
    """
    size = int(config.eval_size) if config.eval_size >= 1 else config.eval_size
    if isinstance(size, int) and size >= len(dataset):
        raise DataError(f"data.eval_size: {size} held-out rows leave none of the {len(dataset)} to filter")
    return dataset.train_test_split(test_size=size, seed=config.seed)["train"]


def run(args: argparse.Namespace, overrides: Sequence[str]) -> dict[str, Any]:
    """Score, filter and write as the arguments say; returns the summary (also written as JSON)."""
    from gspo_trl.config.data_checks import check_columns
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.eval.generation import Sampler
    from gspo_trl.model.adapters import loadable_model
    from gspo_trl.model.loading import resolve_model_path

    _check_args(args)
    recipe = load_recipe(args.recipe, overrides)
    full = apply_preset(recipe.data)
    config = replace(full, eval_split=None, eval_size=0)
    config.split = args.split or config.split
    raw = load_split(config, config.split)
    if config.max_rows is not None:
        raw = raw.select(range(min(config.max_rows, len(raw))))
    source = f"data {config.path!r} split {config.split!r}"
    if args.reward:
        grader = rewards.get(args.reward)
        needed = set(rewards.describe(args.reward).columns)
    else:
        grader = combined_reward(
            [rewards.get(e.spec, **e.params) for e in recipe.rewards], [e.weight for e in recipe.rewards]
        )
        needed = {column for e in recipe.rewards for column in rewards.describe(e.spec).columns}
    prepared = prepare(raw, config, source, sorted(needed & set(raw.column_names)))
    if full.eval_size and not full.eval_split and config.split == full.split:
        # The recipe holds eval_size rows of this split out for scoring: never train on them.
        before = len(raw)
        raw, prepared = (training_rows(dataset, full) for dataset in (raw, prepared))
        logger.info(
            "filter: %d training rows (the recipe's %d held-out rows left out)", len(raw), before - len(raw)
        )
    missing = sorted(needed - set(prepared.column_names))
    if missing:
        if not args.reward:
            check_columns(recipe, prepared.column_names)  # names the reward and the fix
        raise DataError(
            f"{source}: reward {args.reward!r} needs column(s) {missing}; data has {prepared.column_names}"
        )

    shape = {
        "num_samples": args.num_samples
        or int(recipe.training.get("num_generations") or grpo_default("num_generations")),
        "temperature": float(recipe.training.get("temperature", grpo_default("temperature"))),
        "max_new_tokens": int(
            recipe.training.get("max_completion_length") or grpo_default("max_completion_length")
        ),
    }
    if shape["temperature"] <= 0:
        raise FilterError(f"temperature {shape['temperature']}: G samples per prompt need a temperature > 0")
    model_path = resolve_model_path(recipe.model, recipe.training.get("output_dir") or "runs/filter")
    model_path = loadable_model(model_path)  # a LoRA adapter is merged into its base first
    sampler = Sampler(model_path, args.engine, replace(recipe.model, lora=None))
    settings = {
        **shape,
        "model": model_path,
        "data": config.path,
        "split": config.split,
        "rows": len(raw),
        "prompts_sha256": hashlib.sha256(json.dumps(list(prepared["prompt"])).encode()).hexdigest(),
        "engine": sampler.engine,
        "reward": args.reward or [(e.spec, e.weight, e.params) for e in recipe.rewards],
        "pass_threshold": args.pass_threshold,
        "seed": args.seed,
        "chunk_size": args.chunk_size,
    }
    work = _work_dir(args.output)
    _start_work(work, json.loads(json.dumps(settings)), args.resume)
    rates = score_chunks(sampler, prepared, grader, work, args, shape)
    if not any(in_range(rate, args.low, args.high) for rate in rates):
        histogram = pass_rate_histogram(rates, shape["num_samples"], args.low, args.high)
        raise FilterError(
            f"no prompt has a pass rate in [{args.low}, {args.high}] "
            f"(mean pass rate {sum(rates) / len(rates):.3f} over {len(rates)} prompts), so nothing "
            f"was written to {args.output}. Pass rates:\n{histogram}\nWiden --min/--max, or "
            "use a stronger (warm-started) or weaker model; `--resume` refilters without sampling."
        )
    kept = write_rows(raw, rates, args)

    histogram = pass_rate_histogram(rates, shape["num_samples"], args.low, args.high)
    png = plot_histogram(
        rates, shape["num_samples"], args.low, args.high, Path(args.output).with_suffix(".pass_rates.png")
    )
    summary = {
        **settings,
        "output": args.output,
        "min": args.low,
        "max": args.high,
        "kept": len(kept),
        "mean_pass_rate": sum(rates) / len(rates),
        "histogram": histogram,
        "histogram_png": str(png),
    }
    Path(args.output).with_suffix(".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
