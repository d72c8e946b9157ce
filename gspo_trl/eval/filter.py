"""`gspo-trl filter RECIPE --min 0.1 --max 0.9`: keep the prompts the model sometimes solves.

    gspo-trl filter recipes/qwen3-1.7b/math.yaml --min 0.1 --max 0.9 --output data/math-filtered.jsonl

A prompt whose G samples all pass (or all fail) has zero advantage in every group, so GSPO learns
nothing from it. For each prompt of the recipe's training split this samples G completions with
the recipe's model and settings, grades them (the recipe's weighted reward sum, or `--reward`
alone), and writes the rows with min <= pass rate <= max as they were read, plus `pass_rate`:
jsonl or parquet by the output's suffix, or a hub dataset with `--push-to-hub`.

Rows are scored in chunks of `--chunk-size`, each saved under OUTPUT.work/ as it finishes;
`--resume` skips finished chunks and gives exactly the uninterrupted output (chunk i samples with
seed + i; not with vLLM on CPU, gspo_trl.eval.generation says why). Scores do not depend on the
range, so `--resume` with another range refilters without sampling. In Python:
`filter_dataset(FilterSettings(...))`. Docs: docs/data.md ("gspo-trl filter").
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gspo_trl.rewards as rewards
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.core.errors import DataError, FilterError
from gspo_trl.core.progress import progress_bar
from gspo_trl.data.loading import load_split, prepare
from gspo_trl.data.presets import apply_preset
from gspo_trl.eval.histogram import in_range, pass_rate_histogram, plot_histogram
from gspo_trl.eval.pass_at_k import grade_samples

if TYPE_CHECKING:
    from gspo_trl.model.prompts import PromptRendering

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


@dataclass(frozen=True)
class FilterSettings:
    """What to filter and how; each field is the `gspo-trl filter` option of the same name
    (`low`/`high` are --min/--max; `overrides` the recipe's --key value pairs or a {key: value} dict)."""

    recipe: str | Path
    overrides: Sequence[str] | Mapping[str, Any] = ()
    low: float = 0.0
    high: float = 1.0
    num_samples: int | None = None
    """G samples per prompt; None: the recipe's num_generations."""
    reward: str | None = None
    """Grade with this one reward; None: the recipe's weighted sum."""
    pass_threshold: float = 1.0
    split: str | None = None
    output: str | Path = "filtered.jsonl"
    push_to_hub: str | None = None
    chunk_size: int = 256
    resume: bool = False
    engine: str = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high <= 1:
            raise FilterError(f"--min {self.low} / --max {self.high}: need 0 <= min <= max <= 1")
        if Path(self.output).suffix not in (".jsonl", ".parquet"):
            raise FilterError(f"--output {str(self.output)!r}: must end in .jsonl or .parquet")
        if self.chunk_size < 1 or (self.num_samples is not None and self.num_samples < 1):
            raise FilterError("--chunk-size and --num-samples must be >= 1")


@dataclass(frozen=True)
class SamplingShape:
    """How each prompt is sampled: G completions at a temperature, up to max_new_tokens each."""

    num_samples: int
    temperature: float
    max_new_tokens: int


@dataclass(frozen=True)
class FilterResult:
    """The pass rate of every scored row and what was kept; `summary()` is OUTPUT.summary.json."""

    scoring: dict[str, Any]
    """What the scores depend on (model, data, grader, sampling); `resume` refuses other values."""
    output: str
    low: float
    high: float
    kept: int
    pass_rates: list[float]
    histogram: str
    histogram_png: str

    @property
    def mean_pass_rate(self) -> float:
        return sum(self.pass_rates) / len(self.pass_rates)

    def summary(self) -> dict[str, Any]:
        return {
            **self.scoring,
            "output": self.output,
            "min": self.low,
            "max": self.high,
            "kept": self.kept,
            "mean_pass_rate": self.mean_pass_rate,
            "histogram": self.histogram,
            "histogram_png": self.histogram_png,
        }


@dataclass(frozen=True)
class RowsToScore:
    """The source rows as read (what is written back) and the same rows prepared for sampling."""

    raw: Any
    prepared: Any
    source: str
    data: str | None
    split: str


def refuse_push_offline(push_to_hub: str | None) -> None:
    """--push-to-hub with HF_HUB_OFFLINE set would sample everything, then fail at the end."""
    if not push_to_hub:
        return
    from huggingface_hub import constants

    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    if constants.HF_HUB_OFFLINE or offline:
        raise FilterError(
            f"--push-to-hub {push_to_hub!r}: HF_HUB_OFFLINE is set, so nothing can be pushed; "
            "unset it (and log in with `hf auth login`) or drop --push-to-hub"
        )


def _work_dir(output: str | Path) -> Path:
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
    sampler: Any,
    prepared: Any,
    grader: Callable[..., Any],
    work: Path,
    settings: FilterSettings,
    shape: SamplingShape,
) -> list[float]:
    """Pass rate of every row, chunk by chunk, saving each finished chunk; see the module docstring."""
    rates: list[float] = []
    progress = progress_bar(len(prepared), "filter", unit="prompt")
    for chunk, start in enumerate(range(0, len(prepared), settings.chunk_size)):
        path = work / f"chunk-{chunk:05d}.jsonl"
        if not path.is_file():
            rows = prepared.select(range(start, min(start + settings.chunk_size, len(prepared))))
            samples = sampler.generate(
                rows["prompt"],
                shape.num_samples,
                shape.temperature,
                shape.max_new_tokens,
                settings.seed + chunk,
            )
            graded = grade_samples(grader, rows, samples, settings.pass_threshold)
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


def write_rows(raw: Any, rates: Sequence[float], settings: FilterSettings) -> Any:
    """The kept source rows with their `pass_rate`, written to `output` (and pushed when asked)."""
    if "pass_rate" in raw.column_names:
        raw = raw.remove_columns("pass_rate")
    kept_indices = [i for i, rate in enumerate(rates) if in_range(rate, settings.low, settings.high)]
    kept = raw.add_column("pass_rate", list(rates)).select(kept_indices)
    output = Path(settings.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix == ".parquet":
        kept.to_parquet(str(output))
    else:
        kept.to_json(str(output), lines=True, force_ascii=False)
    if settings.push_to_hub:
        try:
            kept.push_to_hub(settings.push_to_hub)
        except Exception as error:  # the hub raises many types; the user needs the repo and the reason
            raise FilterError(f"--push-to-hub {settings.push_to_hub!r}: push failed: {error}") from error
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


def filter_dataset(settings: FilterSettings) -> FilterResult:
    """Score every training prompt of the recipe, keep those in [low, high]; see the module docstring."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.model.prompts import PromptRendering

    refuse_push_offline(settings.push_to_hub)
    recipe = load_recipe(settings.recipe, settings.overrides)
    grader, needed = load_grader(recipe, settings.reward)
    rows = rows_to_score(recipe, settings, needed)
    shape = sampling_shape(recipe, settings.num_samples)
    rendering = PromptRendering.of_training_keys(recipe.training)  # prompts as training tokenizes them
    model_path, sampler = load_sampler(recipe, settings.engine, rendering)
    scoring = {
        **asdict(shape),
        "model": model_path,
        "data": rows.data,
        "split": rows.split,
        "rows": len(rows.raw),
        "prompts_sha256": hashlib.sha256(json.dumps(list(rows.prepared["prompt"])).encode()).hexdigest(),
        "engine": sampler.engine,
        "chat_template_kwargs": dict(rendering.chat_template_kwargs),
        "reward": settings.reward or [(e.spec, e.weight, e.params) for e in recipe.rewards],
        "pass_threshold": settings.pass_threshold,
        "seed": settings.seed,
        "chunk_size": settings.chunk_size,
    }
    work = _work_dir(settings.output)
    _start_work(work, json.loads(json.dumps(scoring)), settings.resume)
    rates = score_chunks(sampler, rows.prepared, grader, work, settings, shape)
    histogram = pass_rate_histogram(rates, shape.num_samples, settings.low, settings.high)
    refuse_empty_range(rates, settings, histogram)
    kept = write_rows(rows.raw, rates, settings)
    png = plot_histogram(
        rates,
        shape.num_samples,
        settings.low,
        settings.high,
        Path(settings.output).with_suffix(".pass_rates.png"),
    )
    result = FilterResult(
        scoring=scoring,
        output=str(settings.output),
        low=settings.low,
        high=settings.high,
        kept=len(kept),
        pass_rates=list(rates),
        histogram=histogram,
        histogram_png=str(png),
    )
    Path(settings.output).with_suffix(".summary.json").write_text(
        json.dumps(result.summary(), indent=2) + "\n"
    )
    return result


def load_grader(recipe: Any, reward: str | None) -> tuple[Callable[..., list], set[str]]:
    """(score function, the dataset columns it reads): `reward` alone, else the recipe's weighted sum."""
    if reward:
        return rewards.get(reward), set(rewards.describe(reward).columns)
    grader = combined_reward(
        [rewards.get(e.spec, **e.params) for e in recipe.rewards], [e.weight for e in recipe.rewards]
    )
    return grader, {column for e in recipe.rewards for column in rewards.describe(e.spec).columns}


def rows_to_score(recipe: Any, settings: FilterSettings, needed: set[str]) -> RowsToScore:
    """The recipe's training rows of the split (its held-out rows left out), with the grader's columns."""
    from gspo_trl.config.data_checks import check_columns

    full = apply_preset(recipe.data)
    config = replace(full, eval_split=None, eval_size=0)
    config.split = settings.split or config.split
    raw = load_split(config, config.split)
    if config.max_rows is not None:
        raw = raw.select(range(min(config.max_rows, len(raw))))
    source = f"data {config.path!r} split {config.split!r}"
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
        if not settings.reward:
            check_columns(recipe, prepared.column_names)  # names the reward and the fix
        raise DataError(
            f"{source}: reward {settings.reward!r} needs column(s) {missing}; "
            f"data has {prepared.column_names}"
        )
    return RowsToScore(raw, prepared, source, config.path, config.split)


def sampling_shape(recipe: Any, num_samples: int | None) -> SamplingShape:
    """G, temperature and length: `num_samples`, else the recipe's training values, else TRL's defaults."""
    training = recipe.training
    shape = SamplingShape(
        num_samples=num_samples or int(training.get("num_generations") or grpo_default("num_generations")),
        temperature=float(training.get("temperature", grpo_default("temperature"))),
        max_new_tokens=int(training.get("max_completion_length") or grpo_default("max_completion_length")),
    )
    if shape.temperature <= 0:
        raise FilterError(f"temperature {shape.temperature}: G samples per prompt need a temperature > 0")
    return shape


def load_sampler(recipe: Any, engine: str, rendering: PromptRendering) -> tuple[str, Any]:
    """(model path, a Sampler on it): the recipe's model, a LoRA adapter merged into its base first."""
    from gspo_trl.eval.generation import Sampler
    from gspo_trl.model.loading.adapters import loadable_model
    from gspo_trl.model.loading.settings import resolve_model_path

    model_path = resolve_model_path(recipe.model, recipe.training.get("output_dir") or "runs/filter")
    model_path = loadable_model(model_path)
    return model_path, Sampler(model_path, engine, replace(recipe.model, lora=None), rendering)


def refuse_empty_range(rates: Sequence[float], settings: FilterSettings, histogram: str) -> None:
    """No row in range: say so with the histogram instead of writing an empty dataset."""
    if any(in_range(rate, settings.low, settings.high) for rate in rates):
        return
    raise FilterError(
        f"no prompt has a pass rate in [{settings.low}, {settings.high}] "
        f"(mean pass rate {sum(rates) / len(rates):.3f} over {len(rates)} prompts), so nothing "
        f"was written to {settings.output}. Pass rates:\n{histogram}\nWiden --min/--max, or "
        "use a stronger (warm-started) or weaker model; `--resume` refilters without sampling."
    )
