"""Held-out evaluation, `gspo-trl eval` and `gspo-trl filter` prompt the model token for token
as GRPOTrainer prompts it in training.

A shipped GPU recipe (chat_template_kwargs: {enable_thinking: false}) runs on the tiny model
whose tokenizer carries Qwen3's real template (tests/_qwen3_tokenizer.py). TRL renders its
rollout prompts in GRPOTrainer._tokenize_prompts with the recipe's template keywords: the
prompt ends in an empty think block. Whatever each tool hands to `generate` is recorded (a
spy around the model class's real `generate`) and compared with what the real trainer's
_tokenize_prompts returns for the same rows, and with what its training step sent.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.config.recipe import load_recipe
from gspo_trl.data.loading import load_data
from tests._gspo_helpers import single_torch_thread  # noqa: F401 (autouse fixture)
from tests._paths import ROOT
from tests._qwen3_tokenizer import QWEN3_NO_THINK_GENERATION_PROMPT, qwen3_template_model_dir

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RECIPE = ROOT / "recipes" / "qwen3-0.6b" / "math.yaml"
FIXTURE = ROOT / "tests" / "fixtures" / "datasets" / "dapo-math.jsonl"


def _overrides(model: Path, output_dir: Path) -> list[str]:
    """What cannot run on CPU (vLLM, sizes, bf16), and the recipe's data swapped for its fixture."""
    return [
        *("--model.name_or_path", str(model), "--model.dtype", "float32", "--use_vllm", "false"),
        *("--bf16", "false", "--max_steps", "1", "--per_device_train_batch_size", "2"),
        *("--num_generations", "4", "--max_completion_length", "3", "--save_strategy", "no"),
        *("--data.path", str(FIXTURE), "--data.eval_size", "2", "--heldout.max_rows", "2"),
        *("--heldout.num_samples", "1", "--report_to", "none", "--output_dir", str(output_dir)),
    ]


class GenerateSpy:
    """Records the unpadded prompt ids of every `generate` call of a model class, then runs
    the real one; `install` puts it on the class (a function, so it binds as a method)."""

    def __init__(self, model_class: Any) -> None:
        self.model_class, self.original, self.calls = model_class, model_class.generate, []

    def install(self, patch: pytest.MonkeyPatch) -> GenerateSpy:
        def generate(model: Any, *args: Any, **kwargs: Any) -> Any:
            ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
            self.calls.append([row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)])
            return self.original(model, *args, **kwargs)

        patch.setattr(self.model_class, "generate", generate)
        return self

    def take(self) -> list[list[int]]:
        rows = [row for call in self.calls for row in call]
        self.calls = []
        return rows


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real GSPO step of the recipe, with its held-out pass before and after, recording
    the ids the training step's _tokenize_prompts returned and those held-out generated from."""
    from transformers import Qwen3ForCausalLM

    from gspo_trl.training.build import build_trainer
    from gspo_trl.training.heldout.scoring import HeldoutCallback

    root = tmp_path_factory.mktemp("prompts")
    model = qwen3_template_model_dir(root)
    recipe = load_recipe(RECIPE, _overrides(model, root / "run"))
    assert recipe.training["chat_template_kwargs"] == {"enable_thinking": False}
    trainer = build_trainer(recipe)
    heldout = next(c for c in trainer.callback_handler.callbacks if isinstance(c, HeldoutCallback))

    sent: list[list[int]] = []
    tokenize = trainer._tokenize_prompts

    def recording_tokenize(prompts: list) -> Any:
        result = tokenize(prompts)
        sent.extend(list(ids) for ids in result[0])
        return result

    trainer._tokenize_prompts = recording_tokenize
    with pytest.MonkeyPatch.context() as patch:
        spy = GenerateSpy(Qwen3ForCausalLM).install(patch)
        trainer.train()
    trainer._tokenize_prompts = tokenize
    calls = spy.calls  # held-out before training, the step's rollouts, held-out after
    assert len(calls) >= 3, f"{len(calls)} generate calls"
    return {
        "root": root,
        "model": model,
        "trainer": trainer,
        "sent": sent,
        "rollouts": [row for call in calls[1:-1] for row in call],
        "heldout": [calls[0], calls[-1]],
        "heldout_rows": heldout.dataset,
    }


def _trl_ids(trainer: Any, prompts: list) -> list[list[int]]:
    """What GRPOTrainer sends to its generation engine for these prompts."""
    return [list(ids) for ids in trainer._tokenize_prompts(list(prompts))[0]]


def _assert_same_prompts(actual: list[list[int]], expected: list[list[int]], tokenizer: Any) -> None:
    """Token-for-token equality; on failure, the ends of the first differing prompts, decoded."""
    assert len(actual) == len(expected), f"{len(actual)} prompts generated from, {len(expected)} expected"
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert got == want, (
            f"prompt {index} differs from GRPOTrainer's: ends {tokenizer.decode(got)[-48:]!r}, "
            f"training's ends {tokenizer.decode(want)[-48:]!r}"
        )


def test_training_prompts_end_in_qwen3s_no_think_block(run: dict[str, Any]) -> None:
    """The precondition: the training step generated from _tokenize_prompts' ids, which end in
    the empty think block of enable_thinking false (the recipe's key reached the template)."""
    tokenizer = run["trainer"].processing_class
    assert run["sent"] and run["rollouts"], "the training step generated nothing"
    assert sorted(run["rollouts"]) == sorted(run["sent"])
    for ids in run["sent"]:
        assert tokenizer.decode(ids).endswith(QWEN3_NO_THINK_GENERATION_PROMPT)
    every_row = _trl_ids(run["trainer"], list(run["trainer"].train_dataset["prompt"]))
    assert all(ids in every_row for ids in run["sent"])


def test_heldout_prompts_are_the_training_prompts(run: dict[str, Any]) -> None:
    expected = _trl_ids(run["trainer"], list(run["heldout_rows"]["prompt"]))
    before, after = run["heldout"]
    _assert_same_prompts(before, expected, run["trainer"].processing_class)
    _assert_same_prompts(after, expected, run["trainer"].processing_class)


def test_eval_prompts_are_the_training_prompts(
    run: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import Qwen3ForCausalLM

    spy = GenerateSpy(Qwen3ForCausalLM).install(monkeypatch)
    args = [str(run["model"]), "--recipe", str(RECIPE), "--data", str(FIXTURE), "--engine", "hf"]
    args += ["--max-new-tokens", "2", "--k", "1", "--output", str(run["root"] / "eval.json")]
    assert gspo_trl_main(["eval", *args]) == 0, capsys.readouterr().err
    recipe = load_recipe(RECIPE)
    rows, _ = load_data(dataclasses.replace(recipe.data, path=str(FIXTURE), eval_size=0))
    expected = _trl_ids(run["trainer"], list(rows["prompt"]))
    _assert_same_prompts(spy.take(), expected, run["trainer"].processing_class)


def test_filter_prompts_are_the_training_prompts(
    run: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import Qwen3ForCausalLM

    spy = GenerateSpy(Qwen3ForCausalLM).install(monkeypatch)
    args = [str(RECIPE), *_overrides(run["model"], run["root"] / "filter-run")]
    args += ["--num-samples", "1", "--engine", "hf", "--output", str(run["root"] / "kept.jsonl")]
    assert gspo_trl_main(["filter", *args]) == 0, capsys.readouterr().err
    train_prompts = list(run["trainer"].train_dataset["prompt"])
    expected = _trl_ids(run["trainer"], train_prompts)
    _assert_same_prompts(spy.take(), expected, run["trainer"].processing_class)
