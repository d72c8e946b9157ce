"""`gspo-trl eval MODEL_OR_RUN --data ... --k 1,8`: pass@1 and unbiased pass@k on a held-out set.

    gspo-trl eval runs/demo/gspo --recipe recipes/tiny/reversal.yaml --data runs/demo/heldout.jsonl

Two decodings: greedy (its pass@1 and mean reward are what the training-time `heldout/score`
logs) and sampled (`--num-samples` n >= max k per prompt, pass@k by the unbiased estimator of
gspo_trl.eval.pass_at_k). A sample passes when its reward >= `--pass-threshold` (default 1.0).
The recipe is `--recipe`, else the one a training run saved (`gspo-trl eval RUN_DIR` prompts,
decodes and grades as the run's `heldout/score` did); the grader `--reward`, else the recipe's
`heldout.reward`, its first reward, the preset's verifier, or `code`/`math` by the data's columns.
Results go to a JSON file (`--output`; default beside the model or run, runs/eval/<hub id>/ for a
hub model) and a table. In Python: `evaluate(EvalSettings(...))`. Docs: docs/data.md
("gspo-trl eval").
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gspo_trl.rewards as rewards
from gspo_trl.config.sections import DataConfig
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.core.errors import DataError, EvalError, ModelNotFoundError
from gspo_trl.data.loading import load_data, load_split, prepare
from gspo_trl.data.presets import apply_preset, default_reward
from gspo_trl.eval.pass_at_k import GradedSamples, grade_samples

logger = logging.getLogger(__name__)


Generate = Callable[[Sequence[Any], int, float], list[list[str]]]
"""(prompts, n, temperature) -> n completions per prompt; temperature 0 = greedy."""
Kept = dict[str, tuple[list[list[str]], GradedSamples]]
"""Per decoding ('greedy', 'sampled', 'given'): the completions per row and their grades."""


@dataclass(frozen=True)
class EvalSettings:
    """What to evaluate and how; each field is the `gspo-trl eval` option of the same name.

    None means "the recipe's, else TRL's default" for `temperature` and `max_new_tokens`.
    """

    model: str | None = None
    """Model directory, run directory or hub id; None with `completions`."""
    completions: str | None = None
    """Grade this jsonl file (a line per row) instead of sampling a model."""
    data: str | None = None
    preset: str | None = None
    split: str | None = None
    recipe: str | Path | None = None
    reward: str | None = None
    ks: tuple[int, ...] = (1,)
    num_samples: int | None = None
    temperature: float | None = None
    max_new_tokens: int | None = None
    pass_threshold: float = 1.0
    max_rows: int | None = None
    greedy: bool = True
    engine: str = "auto"
    seed: int = 0
    output: str | Path | None = None
    """The JSON result file; None: `default_output`."""
    save_samples: bool = False


@dataclass(frozen=True)
class EvalResult:
    """What was evaluated and its summaries: `results[decoding]` maps pass@k, mean_reward, judged."""

    model: str | None
    completions: str | None
    data: str | None
    split: str | None
    rows: int
    reward: str
    pass_threshold: float
    max_new_tokens: int
    results: dict[str, dict[str, float]]
    output: str
    recipe: str | None = None
    """The recipe whose data mapping, prompt rendering, decoding and grader were used."""

    def as_json(self) -> dict[str, Any]:
        """The result file's content."""
        return asdict(self)


def summarize(graded: GradedSamples, ks: Sequence[int]) -> dict[str, float]:
    """pass@k for each k the sample count allows, mean reward over judged samples, judged fraction."""
    n = len(graded.rewards[0])
    judged = [r for row in graded.rewards for r in row if r is not None and not math.isnan(r)]
    summary: dict[str, float] = {"samples": n}
    summary.update({f"pass@{k}": graded.pass_at(k) for k in sorted(set(ks)) if k <= n})
    summary["mean_reward"] = sum(judged) / len(judged) if judged else float("nan")
    summary["judged"] = graded.judged
    return summary


def sample_count(ks: Sequence[int], num_samples: int | None, temperature: float) -> int:
    """Samples per prompt for the sampled pass (0: none, only pass@1 asked and no --num-samples)."""
    if not ks or min(ks) < 1:
        raise EvalError(f"--k: values must be >= 1, got {list(ks)}")
    n = num_samples or (max(ks) if max(ks) > 1 else 0)
    if n and n < max(ks):
        raise EvalError(f"--num-samples {n} is fewer than the largest k ({max(ks)}); pass@k needs n >= k")
    if n and temperature <= 0:
        raise EvalError(f"--temperature {temperature}: sampled pass@k needs a temperature > 0")
    return n


def evaluate_policy(
    generate: Generate,
    rows: Any,
    grader: Callable[..., list[float | None]],
    ks: Sequence[int] = (1,),
    num_samples: int | None = None,
    temperature: float = 1.0,
    threshold: float = 1.0,
    greedy: bool = True,
    keep_samples: Kept | None = None,
) -> dict[str, dict[str, float]]:
    """{'greedy': summary, 'sampled': summary} (each present when asked for) on `rows`.

    `keep_samples`, when given, receives each decoding's completions and grades.
    """
    n = sample_count(ks, num_samples, temperature)
    results: dict[str, dict[str, float]] = {}
    kept = keep_samples if keep_samples is not None else {}
    if greedy:
        samples = generate(rows["prompt"], 1, 0.0)
        kept["greedy"] = samples, grade_samples(grader, rows, samples, threshold)
        results["greedy"] = summarize(kept["greedy"][1], [1])
    if n:
        samples = generate(rows["prompt"], n, temperature)
        kept["sampled"] = samples, grade_samples(grader, rows, samples, threshold)
        results["sampled"] = {"temperature": temperature, **summarize(kept["sampled"][1], ks)}
    return results


def write_samples(path: Path, kept: Kept) -> None:
    """Every completion and its grade, a jsonl line per (decoding, row): for audits and recounts."""
    with path.open("w", encoding="utf-8") as file:
        for decoding, (samples, graded) in kept.items():
            for row, (texts, grades) in enumerate(zip(samples, graded.rewards, strict=True)):
                record = {"decoding": decoding, "row": row, "completions": texts, "rewards": grades}
                file.write(json.dumps(record) + "\n")


def resolve_grader(
    reward: str | None, recipe: Any, data: DataConfig, columns: Sequence[str]
) -> tuple[str, dict[str, Any]]:
    """(reward spec, params) by the precedence in the module docstring."""
    if reward:
        return reward, {}
    if recipe is not None:
        if recipe.heldout is not None and recipe.heldout.reward:
            return recipe.heldout.reward, {}
        return recipe.rewards[0].spec, dict(recipe.rewards[0].params)
    from_preset = default_reward(data)
    if from_preset:
        return from_preset
    if "tests" in columns:
        return "code", {"scoring": "binary"}
    if "solution" in columns:
        return "math", {}
    raise DataError(
        f"no grader for data {data.path!r} (columns {list(columns)}): give --reward, --recipe or --preset"
    )


def load_rows(settings: EvalSettings, recipe: Any) -> tuple[Any, DataConfig]:
    """The rows to evaluate: the recipe's held-out split, or all rows of `data`/`preset`.

    `data` replaces the recipe's source but keeps its column mapping (preset, columns, system
    prompt); the split is `split`, else the preset's eval split, else `train` (for a local
    file the split name does not matter).
    """
    if settings.data is None and settings.preset is None:
        if recipe is None:
            raise DataError("no data: give --data PATH, --preset NAME or --recipe RECIPE")
        _, rows = load_data(recipe.data)
        if rows is None:
            raise DataError(
                f"recipe {recipe.source}: no held-out split (data.eval_split/eval_size); give --data"
            )
        config = recipe.data
    else:
        base = recipe.data if recipe is not None else DataConfig()
        config = DataConfig(
            preset=settings.preset or base.preset,
            prompt_column=base.prompt_column,
            solution_column=base.solution_column,
            columns=dict(base.columns),
            system_prompt=base.system_prompt,
        )
        if settings.data is not None:
            config.path = settings.data
        config = apply_preset(config)
        config.split = settings.split or config.eval_split or config.split
        config.eval_split, config.eval_size = None, 0
        source = f"data {config.path!r} split {config.split!r}"
        raw = load_split(config, config.split)
        if config.max_rows is not None:
            raw = raw.select(range(min(config.max_rows, len(raw))))
        rows = prepare(raw, config, source)
    if settings.max_rows:
        rows = rows.select(range(min(settings.max_rows, len(rows))))
    logger.info("Evaluating on %d rows of data %r", len(rows), config.path)
    return rows, config


def read_completions(path: str, rows: int) -> list[list[str]]:
    """Given completions: a jsonl line per row, each a string, a list, or {"completions": [...]}."""
    file = Path(path)
    if not file.is_file():
        raise DataError(f"--completions: {path!r} does not exist")
    samples = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"--completions {path!r}: line {number} is not JSON ({error})") from None
        item = item["completions"] if isinstance(item, dict) else item
        samples.append([item] if isinstance(item, str) else [str(text) for text in item])
        if not samples[-1]:
            raise DataError(f"--completions {path!r}: line {number} holds no completion")
    if len(samples) != rows:
        raise DataError(f"--completions {path!r}: {len(samples)} lines for {rows} data rows")
    return samples


def format_table(results: dict[str, dict[str, float]]) -> str:
    """A fixed-width table: one line per decoding, a column per metric."""
    metrics = sorted(
        {key for r in results.values() for key in r if key.startswith("pass@")}, key=lambda k: int(k[5:])
    )
    header = ["decoding", "samples", *metrics, "mean_reward", "judged"]
    lines = [header]
    for mode, summary in results.items():
        values = [f"{summary[m]:.4f}" if m in summary else "-" for m in [*metrics, "mean_reward", "judged"]]
        lines.append([mode, str(int(summary["samples"])), *values])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines
    )


def evaluate(settings: EvalSettings) -> EvalResult:
    """Grade a model's (or given) completions on the rows `settings` names; writes and returns the result."""
    from gspo_trl.config.recipe import load_recipe

    recipe_path = settings.recipe or saved_recipe(settings.model)
    recipe = load_recipe(recipe_path) if recipe_path else None
    if settings.model is None and settings.completions is None:
        raise ModelNotFoundError("no model: give MODEL_OR_RUN (or --completions FILE)")
    rows, config = load_rows(settings, recipe)
    spec, grader = load_grader(settings.reward, recipe, config, rows.column_names)
    temperature, max_new_tokens = decoding(settings, recipe)
    if settings.completions:
        kept = grade_given(settings, rows, grader)
        results = {"given": summarize(kept["given"][1], settings.ks)}
    else:
        sample_count(settings.ks, settings.num_samples, temperature)  # refused before a model loads
        kept = {}
        generate = model_generator(settings, recipe, max_new_tokens)
        results = evaluate_policy(
            generate,
            rows,
            grader,
            settings.ks,
            settings.num_samples,
            temperature,
            settings.pass_threshold,
            settings.greedy,
            kept,
        )
    result = EvalResult(
        model=settings.model,
        completions=settings.completions,
        data=config.path,
        split=config.split,
        rows=len(rows),
        reward=getattr(grader, "__name__", spec),
        pass_threshold=settings.pass_threshold,
        max_new_tokens=max_new_tokens,
        results=results,
        output=str(
            Path(settings.output) if settings.output else default_output(settings.model, settings.completions)
        ),
        recipe=str(recipe_path) if recipe_path else None,
    )
    write_result(result, kept if settings.save_samples else None)
    return result


def saved_recipe(model: str | None) -> Path | None:
    """The recipe a training run wrote beside its model (RESOLVED_RECIPE), else None: in
    `model` itself (a run's output_dir, or its final model saved there) or, for a
    `checkpoint-N` directory, in the run that holds it."""
    from gspo_trl.config.recipe_file import RESOLVED_RECIPE

    if not model or not Path(model).is_dir():
        return None
    folder = Path(model)
    candidates = [folder / RESOLVED_RECIPE]
    if folder.name.startswith("checkpoint-"):
        candidates.append(folder.parent / RESOLVED_RECIPE)
    found = next((path for path in candidates if path.is_file()), None)
    if found is not None:
        logger.info("Using the run's saved recipe %s (give --recipe to use another)", found)
    return found


def load_grader(
    reward: str | None, recipe: Any, data: DataConfig, columns: Sequence[str]
) -> tuple[str, Callable[..., list[float | None]]]:
    """(spec, reward function) by `resolve_grader`'s precedence, refused when the data lacks its columns."""
    spec, params = resolve_grader(reward, recipe, data, columns)
    missing = sorted(set(rewards.describe(spec).columns) - set(columns))
    if missing:
        raise DataError(
            f"reward {spec!r} needs column(s) {missing}, which data {data.path!r} lacks "
            f"(its columns: {list(columns)}); map them with --preset or a recipe's data section"
        )
    return spec, rewards.get(spec, **params)


def decoding(settings: EvalSettings, recipe: Any) -> tuple[float, int]:
    """(sampling temperature, max new tokens): the settings', else the recipe's, else TRL's defaults."""
    training = recipe.training if recipe is not None else {}
    temperature = (
        settings.temperature
        if settings.temperature is not None
        else float(training.get("temperature", grpo_default("temperature")))
    )
    max_new_tokens = settings.max_new_tokens or int(
        training.get("max_completion_length") or grpo_default("max_completion_length")
    )
    return temperature, max_new_tokens


def grade_given(settings: EvalSettings, rows: Any, grader: Callable[..., Any]) -> Kept:
    """Grades of the completions file, refused when it holds fewer completions per row than the largest k."""
    samples = read_completions(str(settings.completions), len(rows))
    fewest, largest = min(len(row) for row in samples), max(settings.ks)
    if largest > fewest:
        raise EvalError(
            f"--k {','.join(map(str, settings.ks))}: pass@{largest} needs at least {largest} completions "
            f"per row, but {settings.completions} has {fewest} for some rows; lower --k or give more samples"
        )
    return {"given": (samples, grade_samples(grader, rows, samples, settings.pass_threshold))}


def model_generator(settings: EvalSettings, recipe: Any, max_new_tokens: int) -> Generate:
    """`Generate` on the settings' model (a LoRA adapter merged into its base first), with a progress bar."""
    from gspo_trl.eval.generation import Sampler
    from gspo_trl.model.loading.adapters import loadable_model
    from gspo_trl.model.prompts import PromptRendering

    model = loadable_model(str(settings.model))
    model_config = recipe.model if recipe is not None else None
    if model_config is not None and model != settings.model:
        model_config = replace(model_config, name_or_path=model, lora=None)
    # The recipe's chat_template_kwargs: prompts tokenized as its training rollouts were.
    training = recipe.training if recipe is not None else {}
    sampler = Sampler(model, settings.engine, model_config, PromptRendering.of_training_keys(training))

    def generate(prompts: Sequence[Any], n: int, temperature: float) -> list[list[str]]:
        decoding = "greedy" if temperature <= 0 else f"{n} samples at T={temperature:g}"
        bar = f"eval ({decoding})"
        return sampler.generate(prompts, n, temperature, max_new_tokens, settings.seed, progress=bar)

    return generate


def write_result(result: EvalResult, kept: Kept | None) -> None:
    """The result as JSON at `result.output`; with `kept`, every completion beside it (.samples.jsonl)."""
    path = Path(result.output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.as_json(), indent=2) + "\n", encoding="utf-8")
    if kept is not None:
        write_samples(path.with_suffix(".samples.jsonl"), kept)


def default_output(model: str | None, completions: str | None) -> Path:
    """Where results go without --output: next to what was evaluated, never the working dir.

    A local model or run directory gets `DIR/eval_results.json`; a completions file
    `FILE.eval_results.json` beside it; a hub id `runs/eval/<owner>--<name>/eval_results.json`.
    """
    if completions:
        return Path(completions).with_suffix(".eval_results.json")
    if model and Path(model).is_dir():
        return Path(model) / "eval_results.json"
    return Path("runs") / "eval" / str(model).replace("/", "--") / "eval_results.json"
